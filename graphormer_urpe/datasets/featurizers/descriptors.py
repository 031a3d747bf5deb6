r"""RDKit 2D descriptors: a fixed list, computed per molecule, and a robust normalisation.

Self-supervised pretraining (``graphormer-urpe pretrain``) regresses every molecule's RDKit
2D descriptors at once, so this module fixes *which* descriptors (:data:`DESCRIPTOR_NAMES`,
the set :data:`DESCRIPTOR_SET`), computes them (:func:`compute_descriptors`, ``[N, K]``
float32) and scales them into well-behaved regression targets
(:class:`DescriptorNormalizer`).

**The list.** RDKit's ``Descriptors._descList`` (217 descriptors in RDKit 2026.09) minus the ones in
:data:`EXCLUDED`: QED and the spacial score (slow; measured: docs/results/code-notes.md), Gasteiger
partial charges and the BCUT2D family (non-finite for molecules with atoms Gasteiger has no
parameters for), and ``Ipc`` (values up to 1e36 and beyond; ``AvgIpc`` carries its information on a
sane scale). That leaves ``K = 202`` descriptors in a fixed order; RDKit versions that lack one of
them are refused with its name.

**Missing values.** A descriptor that raises, or returns NaN, an infinity or a value beyond
the float32 range, is stored as ``NaN`` (counted per descriptor by the store); the
normalisation turns it into 0 (the training median), so targets are always finite.

**Normalisation** (:meth:`DescriptorNormalizer.fit`, on training molecules): per descriptor,

.. math::
    z = \operatorname{clip}\!\left(
        \frac{\operatorname{clip}(x, q_{0.5\%}, q_{99.5\%}) - \operatorname{median}}{s},
        -5, 5\right),
    \qquad s = \mathrm{IQR} / 1.349

(``s`` falls back to the standard deviation of the clipped values when the IQR is 0, as for
most fragment counts, and to 1 for a constant descriptor). The quantiles, medians and scales
are plain lists of floats, recorded with the names and the RDKit version by
:meth:`DescriptorNormalizer.to_dict` and re-applied to new molecules with
:meth:`DescriptorNormalizer.from_dict` and :meth:`DescriptorNormalizer.transform`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "DESCRIPTOR_SET",
    "DESCRIPTOR_NAMES",
    "EXCLUDED",
    "descriptor_functions",
    "descriptor_set_id",
    "mol_descriptors",
    "compute_descriptors",
    "DescriptorNormalizer",
]

logger = logging.getLogger(__name__)
_WARNED: set[tuple[str, str]] = set()  # (recorded, current) RDKit versions warned about

DESCRIPTOR_SET = "rdkit2d-v1"
"""Name of the list below; changing the list means a new name (stores and checkpoints
record it)."""

EXCLUDED: dict[str, str] = {
    "qed": "slow (its cost: docs/results/code-notes.md)",
    "SPS": "slow (its cost: docs/results/code-notes.md)",
    "Ipc": "values up to 1e36 and beyond (AvgIpc is kept)",
    **{
        name: "Gasteiger charges: NaN for atoms without Gasteiger parameters"
        for name in (
            "MaxPartialCharge",
            "MinPartialCharge",
            "MaxAbsPartialCharge",
            "MinAbsPartialCharge",
        )
    },
    **{
        f"BCUT2D_{kind}{end}": "BCUT2D: fails (NaN) where Gasteiger charges do"
        for kind in ("MW", "CHG", "LOGP", "MR")
        for end in ("HI", "LOW" if kind != "CHG" else "LO")
    },
}
"""RDKit descriptors left out, and why."""

_FAMILIES = """
MaxAbsEStateIndex MaxEStateIndex MinAbsEStateIndex MinEStateIndex
MolWt HeavyAtomMolWt ExactMolWt NumValenceElectrons NumRadicalElectrons
FpDensityMorgan1 FpDensityMorgan2 FpDensityMorgan3
AvgIpc BalabanJ BertzCT Chi0 Chi0n Chi0v Chi1 Chi1n Chi1v Chi2n Chi2v Chi3n Chi3v Chi4n Chi4v
HallKierAlpha Kappa1 Kappa2 Kappa3 LabuteASA
PEOE_VSA1 PEOE_VSA10 PEOE_VSA11 PEOE_VSA12 PEOE_VSA13 PEOE_VSA14 PEOE_VSA2 PEOE_VSA3
PEOE_VSA4 PEOE_VSA5 PEOE_VSA6 PEOE_VSA7 PEOE_VSA8 PEOE_VSA9
SMR_VSA1 SMR_VSA10 SMR_VSA2 SMR_VSA3 SMR_VSA4 SMR_VSA5 SMR_VSA6 SMR_VSA7 SMR_VSA8 SMR_VSA9
SlogP_VSA1 SlogP_VSA10 SlogP_VSA11 SlogP_VSA12 SlogP_VSA2 SlogP_VSA3 SlogP_VSA4 SlogP_VSA5
SlogP_VSA6 SlogP_VSA7 SlogP_VSA8 SlogP_VSA9
TPSA EState_VSA1 EState_VSA10 EState_VSA11 EState_VSA2 EState_VSA3 EState_VSA4 EState_VSA5
EState_VSA6 EState_VSA7 EState_VSA8 EState_VSA9
VSA_EState1 VSA_EState10 VSA_EState2 VSA_EState3 VSA_EState4 VSA_EState5 VSA_EState6
VSA_EState7 VSA_EState8 VSA_EState9
FractionCSP3 HeavyAtomCount NHOHCount NOCount NumAliphaticCarbocycles NumAliphaticHeterocycles
NumAliphaticRings NumAmideBonds NumAromaticCarbocycles NumAromaticHeterocycles
NumAromaticRings NumAtomStereoCenters NumBridgeheadAtoms NumHAcceptors NumHDonors
NumHeteroatoms NumHeterocycles NumRotatableBonds NumSaturatedCarbocycles
NumSaturatedHeterocycles NumSaturatedRings NumSpiroAtoms NumUnspecifiedAtomStereoCenters
Phi RingCount MolLogP MolMR
fr_Al_COO fr_Al_OH fr_Al_OH_noTert fr_ArN fr_Ar_COO fr_Ar_N fr_Ar_NH fr_Ar_OH fr_COO fr_COO2
fr_C_O fr_C_O_noCOO fr_C_S fr_HOCCN fr_Imine fr_NH0 fr_NH1 fr_NH2 fr_N_O fr_Ndealkylation1
fr_Ndealkylation2 fr_Nhpyrrole fr_SH fr_aldehyde fr_alkyl_carbamate fr_alkyl_halide
fr_allylic_oxid fr_amide fr_amidine fr_aniline fr_aryl_methyl fr_azide fr_azo fr_barbitur
fr_benzene fr_benzodiazepine fr_bicyclic fr_diazo fr_dihydropyridine fr_epoxide fr_ester
fr_ether fr_furan fr_guanido fr_halogen fr_hdrzine fr_hdrzone fr_imidazole fr_imide
fr_isocyan fr_isothiocyan fr_ketone fr_ketone_Topliss fr_lactam fr_lactone fr_methoxy
fr_morpholine fr_nitrile fr_nitro fr_nitro_arom fr_nitro_arom_nonortho fr_nitroso fr_oxazole
fr_oxime fr_para_hydroxylation fr_phenol fr_phenol_noOrthoHbond fr_phos_acid fr_phos_ester
fr_piperdine fr_piperzine fr_priamide fr_prisulfonamd fr_pyridine fr_quatN fr_sulfide
fr_sulfonamd fr_sulfone fr_term_acetylene fr_tetrazole fr_thiazole fr_thiocyan fr_thiophene
fr_unbrch_alkane fr_urea
"""

DESCRIPTOR_NAMES: tuple[str, ...] = tuple(_FAMILIES.split())
"""The ``K`` descriptors of :data:`DESCRIPTOR_SET`, in the order of the target columns."""

_ESTATE = ("MaxAbsEStateIndex", "MaxEStateIndex", "MinAbsEStateIndex", "MinEStateIndex")
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def descriptor_functions() -> list[Callable[..., float]]:
    """RDKit's function of every name in :data:`DESCRIPTOR_NAMES`, in order.

    Raises:
        ValueError: the installed RDKit lacks some of them (named, with its version).
    """
    import rdkit
    from rdkit.Chem import Descriptors

    table = dict(Descriptors._descList)
    missing = [n for n in DESCRIPTOR_NAMES if n not in table]
    if missing:
        raise ValueError(
            f"RDKit {rdkit.__version__} lacks descriptor(s) {missing} of {DESCRIPTOR_SET}; "
            "install a newer RDKit"
        )
    return [table[n] for n in DESCRIPTOR_NAMES]


def descriptor_set_id() -> str:
    """``"<set>/rdkit-<version>"``: what stored descriptor values depend on."""
    import rdkit

    return f"{DESCRIPTOR_SET}/rdkit-{rdkit.__version__}"


def _value(fn: Callable[..., float], mol: Any, **kwargs: Any) -> float:
    """One descriptor as a float; NaN when it raises or is not a finite float32."""
    try:
        v = float(fn(mol, **kwargs))
    except Exception:  # RDKit raises assorted errors on unusual molecules
        return math.nan
    return v if math.isfinite(v) and abs(v) <= _FLOAT32_MAX else math.nan


def mol_descriptors(
    mol: Any, functions: Sequence[Callable[..., float]] | None = None
) -> np.ndarray:
    """The ``[K]`` float64 descriptors of one RDKit molecule (``NaN``: failed or non-finite).

    The four E-state extremes share one computation of the E-state indices (RDKit caches them
    on the molecule), with the same values as calling each function alone.
    """
    from rdkit.Chem.EState import EState

    functions = descriptor_functions() if functions is None else functions
    try:
        EState.EStateIndices(mol)  # cached on the molecule as _eStateIndices
        shared = {"force": False}
    except Exception:
        shared = {}
    out = np.empty(len(DESCRIPTOR_NAMES), dtype=np.float64)
    for k, (name, fn) in enumerate(zip(DESCRIPTOR_NAMES, functions, strict=True)):
        out[k] = _value(fn, mol, **(shared if name in _ESTATE else {}))
    return out


def compute_descriptors(smiles: Sequence[str]) -> np.ndarray:
    """The descriptors of every SMILES.

    Args:
        smiles: ``[N]`` SMILES strings.

    Returns:
        ``[N, K]`` float32 (``K = len(DESCRIPTOR_NAMES)``); a row of ``NaN`` for a SMILES
        RDKit cannot parse, ``NaN`` entries for descriptors that failed.
    """
    from rdkit import Chem, rdBase

    functions = descriptor_functions()
    out = np.full((len(smiles), len(DESCRIPTOR_NAMES)), np.nan, dtype=np.float32)
    with rdBase.BlockLogs():
        for i, smi in enumerate(smiles):
            mol = Chem.MolFromSmiles(smi.strip()) if isinstance(smi, str) else None
            if mol is not None and mol.GetNumAtoms() > 0:
                out[i] = mol_descriptors(mol, functions)
    return out


def _robust_scale(x: np.ndarray, low: float, high: float) -> tuple[float, float]:
    """``(median, scale)`` of the finite values ``x`` ``[n]`` clipped to ``[low, high]``."""
    clipped = np.clip(x, low, high)
    q25, median, q75 = np.quantile(clipped, [0.25, 0.5, 0.75])
    scale = (q75 - q25) / 1.349
    if not scale > 0:
        scale = float(np.std(clipped))
    return float(median), float(scale) if scale > 0 else 1.0


@dataclass
class DescriptorNormalizer:
    """Per-descriptor robust scaling into ``[-clip, clip]`` (see the module docstring).

    Attributes:
        names: ``[K]`` descriptor names (the target columns, in order).
        low: ``[K]`` lower quantile of the fitting values (clip bound before scaling).
        high: ``[K]`` upper quantile.
        center: ``[K]`` median of the clipped values.
        scale: ``[K]`` IQR / 1.349 of the clipped values (std, or 1, when that is 0).
        clip: bound of the scaled values.
        quantile: the lower quantile (``high`` is at ``1 - quantile``).
        descriptor_set: :data:`DESCRIPTOR_SET` the values come from.
        rdkit_version: the RDKit that computed the fitting values.
        fitted_on: molecules the statistics were computed on.
        nonfinite: ``[K]`` of those, how many had no finite value (replaced by 0 = median).
    """

    names: list[str]
    low: list[float]
    high: list[float]
    center: list[float]
    scale: list[float]
    clip: float = 5.0
    quantile: float = 0.005
    descriptor_set: str = DESCRIPTOR_SET
    rdkit_version: str = ""
    fitted_on: int = 0
    nonfinite: list[int] | None = None

    @classmethod
    def fit(
        cls,
        raw: np.ndarray,
        names: Sequence[str] = DESCRIPTOR_NAMES,
        *,
        quantile: float = 0.005,
        clip: float = 5.0,
        max_rows: int = 100_000,
        seed: int = 0,
    ) -> DescriptorNormalizer:
        """Statistics of ``raw`` ``[N, K]`` (``NaN`` = missing); at most ``max_rows`` rows,
        drawn at random with ``seed`` when there are more."""
        import rdkit

        raw = np.asarray(raw)
        if raw.ndim != 2 or raw.shape[1] != len(names):
            raise ValueError(f"expected [N, {len(names)}] descriptors, got {raw.shape}")
        if raw.shape[0] > max_rows:
            rows = np.sort(np.random.default_rng(seed).choice(raw.shape[0], max_rows, False))
            raw = raw[rows]
        raw = np.asarray(raw, dtype=np.float64)
        stats: dict[str, list] = {"low": [], "high": [], "center": [], "scale": []}
        nonfinite = []
        for k in range(raw.shape[1]):
            x = raw[:, k][np.isfinite(raw[:, k])]
            nonfinite.append(int(raw.shape[0] - x.size))
            lo, hi, c, s = 0.0, 0.0, 0.0, 1.0
            if x.size:
                lo, hi = (float(v) for v in np.quantile(x, [quantile, 1 - quantile]))
                c, s = _robust_scale(x, lo, hi)
            for key, v in zip(stats, (lo, hi, c, s), strict=True):
                stats[key].append(v)
        return cls(
            list(names),
            **stats,
            clip=clip,
            quantile=quantile,
            rdkit_version=rdkit.__version__,
            fitted_on=int(raw.shape[0]),
            nonfinite=nonfinite,
        )

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(
            np.asarray(v, dtype=np.float64) for v in (self.low, self.high, self.center, self.scale)
        )

    def transform(self, raw: np.ndarray) -> np.ndarray:
        """Scaled targets ``[N, K]`` float32 of raw descriptors ``[N, K]``; missing → 0."""
        raw = np.asarray(raw, dtype=np.float64)
        if raw.ndim != 2 or raw.shape[1] != len(self.names):
            raise ValueError(f"expected [N, {len(self.names)}] descriptors, got {raw.shape}")
        low, high, center, scale = self._arrays()
        z = np.clip((np.clip(raw, low, high) - center) / scale, -self.clip, self.clip)
        return np.nan_to_num(z, nan=0.0).astype(np.float32)

    def inverse_transform(self, z: np.ndarray) -> np.ndarray:
        """Raw descriptor values ``[N, K]`` float64 of scaled ones (exact for values that
        neither clip changed)."""
        _, _, center, scale = self._arrays()
        return np.asarray(z, dtype=np.float64) * scale + center

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (for checkpoints)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DescriptorNormalizer:
        """The normaliser :meth:`to_dict` recorded; warns (once per process and version)
        when this RDKit differs."""
        import rdkit

        norm = cls(**d)
        mismatch = (norm.rdkit_version, rdkit.__version__)
        if norm.rdkit_version and mismatch[0] != mismatch[1] and mismatch not in _WARNED:
            _WARNED.add(mismatch)
            logger.warning(
                "descriptor statistics were computed with RDKit %s; this is RDKit %s (values "
                "of some descriptors may differ)",
                norm.rdkit_version,
                rdkit.__version__,
            )
        return norm
