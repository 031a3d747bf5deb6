"""Training configuration: one dataclass, named presets that reproduce published set-ups.

A preset names both a model (:data:`graphormer_urpe.graph.model.PRESETS`) and the
optimisation hyper-parameters it was published with. Every field can be overridden, and every
``graphormer-urpe train`` flag maps to exactly one field of :class:`TrainConfig` or of
:class:`~graphormer_urpe.graph.model.GraphormerConfig`.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from ..datasets.spec import names_table, parse_dataset_spec
from ..graph.model import GraphormerConfig, get_preset

__all__ = [
    "TrainConfig",
    "PRETRAINED_MOL_FEATURES",
    "resolve_mol_features",
    "resolve_trees",
    "TRAIN_PRESETS",
    "make_config",
    "override_config",
    "read_config",
    "DEFAULT_ATTENTION",
    "build_train_config",
    "run_name",
    "plan_steps",
]

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """Everything a training run needs; saved next to its checkpoints as ``config.json``."""

    dataset: str = "nci5k"
    """``nci5k`` (embedded, no download), ``zinc``, ``zinc-full``, ``csv:PATH``, ``pcqm4mv2``,
    ``pcqm4m`` or an ``ogbg-mol*`` name."""
    data_root: str | None = None
    store_dir: str | None = None
    """Folder of the dataset stores (``None``: ``$GRAPHORMER_URPE_STORE``, else
    ``~/.cache/graphormer-urpe``)."""
    preprocess_workers: int = 1
    """Processes that build a missing dataset store."""
    preset: str = "small"
    model: GraphormerConfig = field(default_factory=lambda: get_preset("small"))
    epochs: int | None = 20
    """Number of epochs; ignored when ``max_steps`` is set (:func:`make_config` clears the
    preset's ``max_steps`` when ``epochs`` is given, and the preset's ``epochs`` when
    ``max_steps`` is)."""
    max_steps: int | None = None
    batch_size: int = 64
    lr: float = 5e-4
    """Peak learning rate, reached after ``warmup_steps``."""
    end_lr: float = 1e-9
    warmup_steps: int = 500
    """Linear warm-up steps (``config.json`` records the number used, see ``fit_warmup``)."""
    fit_warmup: bool = True
    """Scale a warm-up longer than a tenth of the run to the fraction of the run it takes in
    the preset's published recipe (:func:`plan_steps`); giving ``warmup_steps`` to
    :func:`make_config` or :func:`override_config` turns this off."""
    warmup_fraction: float | None = None
    """Linear warm-up as this fraction of the planned steps (``0.05``: the first 5%); beats
    ``warmup_steps`` and ``fit_warmup``, for runs whose length is planned when they start
    (``fill_time_limit``). ``None``: ``warmup_steps``."""
    weight_decay: float = 0.01
    """AdamW weight decay of every parameter except URPE's ``C`` (biases, LayerNorm and
    embedding tables included, as in Graphormer)."""
    urpe_weight_decay: float = 0.0
    """AdamW weight decay of URPE's ``C`` tables (their own parameter group)."""
    clip_norm: float | None = 5.0
    loss: Literal["l1", "mse", "smooth_l1"] | None = None
    """Regression loss: ``l1``, ``mse`` or ``smooth_l1`` (Huber with threshold 1); ``None``:
    the dataset's, ``mse`` for ``csv:`` datasets (as Chemprop), ``l1`` for the benchmarks
    (``config.json`` records the loss used). ``mse`` selects the best checkpoint on RMSE."""
    normalize_targets: bool | None = None
    """Regression: train on targets standardised with the training split's mean and standard
    deviation (per target; predictions come back in the targets' units, see
    :meth:`~graphormer_urpe.graph.model.Graphormer.set_target_scaling`); ``None``: on for
    ``csv:`` datasets (a user's own units), off for the benchmarks' published recipes."""
    seed: int = 1
    device: str = "auto"
    """``auto`` (CUDA when available), ``cpu``, ``cuda``, ``cuda:1``, ..."""
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """``auto``: bfloat16 autocast on CUDA GPUs that support it, float32 elsewhere."""
    num_workers: int | None = None
    """Data-loader worker processes; ``None``: none on the CPU (the model uses every core),
    on a GPU ``min(8, cores - 2)`` (at least 1), so that collating keeps up with the step."""
    threads: int | None = None
    """CPU threads for torch (``None``: torch's default, one per core)."""
    eval_every: int = 1
    """Evaluate on the validation split every this many epochs."""
    checkpoint_every: int | None = None
    """Also write a checkpoint every this many optimizer steps (``None``: at epoch ends only)."""
    keep_checkpoints: int = 3
    """Rolling step checkpoints kept in ``OUT/checkpoints`` (``last.pt`` is the newest)."""
    bucket_size: int = 0
    """Size-bucketed batches: sort chunks of this many batches by graph size (``0``: off)."""
    max_tokens: int | None = None
    """A token budget instead of ``batch_size``: each batch holds as many graphs as fit this
    many padded tokens per process, ``graphs x (largest graph's atoms + 1)`` (the length
    rounded up on the static shapes' grid, :func:`~graphormer_urpe.graph.static_shapes.
    token_length`, so the batches are the same captured or not), sorted by size
    (:class:`~graphormer_urpe.runtime.sampler.EpochBatchSampler`); evaluation batches too.
    For large graphs, whose memory a fixed batch size cannot bound. ``None``: off."""
    compile: bool = False
    """Run the model through ``torch.compile`` (dynamic shapes); steps are then not captured."""
    attention_kernel: Literal["auto", "fused", "eager"] = "auto"
    """The attention product's kernel
    (:func:`~graphormer_urpe.attention.kernel_choice.attention_kernel`): ``auto``, PyTorch
    operators; ``fused``, the fused Triton kernel."""
    capture: bool = True
    """On one CUDA GPU, batches in a few static shapes and the whole training step (and every
    evaluation pass) captured as a CUDA graph per shape and replayed
    (:mod:`~graphormer_urpe.runtime.capture`). Eager on the CPU, under several processes,
    with ``compile`` and with ``fp16`` (whose grad scaler decides on the host)."""
    time_limit: float | None = None
    """Wall-clock budget of one launch in minutes (``None``: none). The learning-rate schedule
    stays planned over the configured steps (see ``fill_time_limit``); the run stops cleanly
    when the budget is spent."""
    fill_time_limit: bool = False
    """Plan the run to fill ``time_limit``: ``max_steps`` from a training step's and a
    validation's time measured on the first batches (``train`` sets this when
    ``--time-limit`` comes without ``--epochs`` or ``--max-steps``). The planned steps are
    recorded in ``max_steps``, so a resumed or repeated run keeps them."""
    out: str = "runs/default"
    smiles_column: str = "smiles"
    target_columns: list[str] | None = None
    split_column: str | None = None
    task: Literal["regression", "classification"] = "regression"
    """CSV datasets: ``classification`` reads every target as a binary label (0 / 1), trains
    one logit per target with BCE and selects on ROC-AUC (PRC-AUC reported too)."""
    mol_features: Literal["auto", "none", "rdkit2d", "morgan", "rdkit2d+morgan"] = "auto"
    """CSV datasets: ``rdkit2d`` joins each molecule's 202 RDKit 2D descriptors, normalised
    with the training split's statistics, to the graph representation before the head;
    ``morgan`` its 2048-bit Morgan count fingerprint (radius 2, ``log(1 + count)``);
    ``rdkit2d+morgan`` both (:mod:`~graphormer_urpe.datasets.mol_features`). ``auto``: the
    fine-tuning recipe's (:data:`PRETRAINED_MOL_FEATURES`) for ``init_from="pretrained"`` on
    a ``csv:`` set, else ``none`` (:func:`resolve_mol_features`; ``config.json`` records the
    kind used)."""
    trees: Literal["auto", "on", "off"] = "auto"
    """Tables of SMILES: ``on`` fits the trees head beside the network (LightGBM on the
    descriptors, Morgan and Avalon counts, ErG and the starting model's graph token) and
    blends the two with weights chosen on the validation split
    (:mod:`~graphormer_urpe.inference.trees`). ``auto``: on with ``init_from`` on a ``csv:``
    or ``sdf:`` table, else off (:func:`resolve_trees`; ``config.json`` records the choice)."""
    split: Literal["random", "scaffold"] = "random"
    split_seed: int = 0
    """Seed of the random split (kept apart from ``seed`` so the split stays fixed)."""
    featurizer: str | None = None
    strict: bool = False
    max_nodes: int | None = None
    """Leave training graphs with more atoms out (logged); valid/test graphs are always kept."""
    init_from: str | None = None
    """Start from this checkpoint's weights (e.g. a converted published Graphormer): its
    architecture, the run's dropouts and attention; the output layer is re-initialised when
    the number of outputs differs. Ignored when resuming."""

    @property
    def cache_dir(self) -> str | None:
        """Deprecated: :attr:`store_dir`, which it reads and sets (``TrainConfig(cache_dir=...)``
        too) with a ``DeprecationWarning``, until the next minor release; not a field, never
        saved."""
        warnings.warn(_CACHE_DIR_DEPRECATED, DeprecationWarning, 2)
        return self.store_dir

    @cache_dir.setter
    def cache_dir(self, value: str | None) -> None:
        warnings.warn(_CACHE_DIR_DEPRECATED, DeprecationWarning, 2)
        self.store_dir = value

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """The config of a ``to_dict()``, e.g. a run's ``config.json`` or a checkpoint's
        (one written before the store was called a store names ``store_dir`` ``cache_dir``)."""
        d = _renamed_fields(d)
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown TrainConfig fields: {sorted(unknown)}")
        model = d.pop("model", None)
        cfg = cls(**d)
        if model is not None:
            cfg.model = GraphormerConfig.from_dict(model)
        return cfg


_CACHE_DIR_DEPRECATED = "TrainConfig's cache_dir is deprecated: use store_dir"


def _accepting_cache_dir(init: Callable[..., None]) -> Callable[..., None]:
    """The dataclass's ``__init__``, also taking the deprecated ``cache_dir=`` (which sets
    ``store_dir``). Not a field of the dataclass: :func:`dataclasses.replace` would read it
    back from every config it copies."""

    @functools.wraps(init)
    def __init__(self: TrainConfig, *args: Any, cache_dir: str | None = None, **kwargs: Any):
        init(self, *args, **kwargs)
        if cache_dir is not None:
            warnings.warn(_CACHE_DIR_DEPRECATED, DeprecationWarning, 2)
            self.store_dir = cache_dir

    return __init__


TrainConfig.__init__ = _accepting_cache_dir(TrainConfig.__init__)  # type: ignore[method-assign]

_PREVIOUS_NAMES = {"cache_dir": "store_dir"}
"""Fields' previous names → their names now (read from old ``config.json`` files and checkpoints,
accepted by :func:`override_config` with a ``DeprecationWarning``, until the next minor
release)."""


def _renamed_fields(d: dict) -> dict:
    """``d`` with the fields' previous names (:data:`_PREVIOUS_NAMES`) replaced by their names
    now; a value under the name now wins."""
    out = dict(d)
    for old, new in _PREVIOUS_NAMES.items():
        if old in out:
            value = out.pop(old)
            if out.get(new) is None:
                out[new] = value
    return out


# Graphormer's published optimisation: AdamW, linear warm-up to lr, linear decay to 1e-9
# over max_steps, batch 256, seed 1; the loss is the dataset's (L1 on ZINC and PCQM4Mv2).
_GRAPHORMER = dict(epochs=None, batch_size=256, lr=2e-4, end_lr=1e-9, loss=None, seed=1)

TRAIN_PRESETS: dict[str, dict] = {
    # Sized for a CPU and the embedded NCI molecules (its time: docs/results/code-notes.md).
    "small": dict(
        epochs=20,
        max_steps=None,
        batch_size=64,
        lr=5e-4,
        end_lr=1e-9,
        warmup_steps=500,
        weight_decay=0.01,
        clip_norm=5.0,
        loss=None,
        seed=1,
    ),
    # Graphormer v1 on ZINC-subset: 40k warm-up, 400k steps, weight decay 0.01, no clipping.
    "zinc-slim": dict(
        _GRAPHORMER, max_steps=400_000, warmup_steps=40_000, weight_decay=0.01, clip_norm=None
    ),
    # Graphormer base on PCQM4Mv2 (v2 recipe): 60k warm-up, 1M steps, clip 5, no weight decay.
    "pcqm4mv2-base": dict(
        _GRAPHORMER, max_steps=1_000_000, warmup_steps=60_000, weight_decay=0.0, clip_norm=5.0
    ),
    # Graphormer-Small on PCQM4M (v1 recipe): as base, with v1's default weight decay 0.01.
    "pcqm4mv2-small": dict(
        _GRAPHORMER, max_steps=1_000_000, warmup_steps=60_000, weight_decay=0.01, clip_norm=5.0
    ),
}


# A field given explicitly beats the preset, and so does what it implies: giving one of these
# clears the preset's value of the others (giving both: ``max_steps`` wins, see plan_steps).
_CLEARS: dict[str, tuple[str, ...]] = {"epochs": ("max_steps",), "max_steps": ("epochs",)}


def override_config(
    config: TrainConfig, model_overrides: dict | None = None, **overrides
) -> TrainConfig:
    """``config`` with the given fields replaced (``None`` values are ignored).

    Fields that a given field makes meaningless are cleared: ``epochs`` clears ``max_steps``
    and ``max_steps`` clears ``epochs`` unless both are given.

    Args:
        config: the base config (a preset's, or one read from a run's ``config.json``).
        model_overrides: fields of :class:`GraphormerConfig` to change.
        **overrides: fields of :class:`TrainConfig` to change.
    """
    known = {f.name for f in fields(TrainConfig)} - {"model"}
    if "cache_dir" in overrides:
        warnings.warn("the cache_dir override is deprecated: use store_dir", DeprecationWarning, 2)
    given = {k: v for k, v in _renamed_fields(overrides).items() if v is not None}
    unknown = set(given) - known
    if unknown:
        raise ValueError(f"unknown TrainConfig fields: {sorted(unknown)}")
    for name, cleared in _CLEARS.items():
        if name in given:
            for other in cleared:
                given.setdefault(other, None)
    if "warmup_steps" in given:  # a warm-up given is kept as given
        given.setdefault("fit_warmup", False)
    model_given = {k: v for k, v in (model_overrides or {}).items() if v is not None}
    model = replace(config.model, **model_given) if model_given else config.model
    return replace(config, model=model, **given)


PRETRAINED_MOL_FEATURES = "rdkit2d"
"""The molecule features of the fine-tuning recipe (``--init-from pretrained`` on a ``csv:``
set), chosen on the validation splits of six MoleculeNet sets (docs/results/tuning.md)."""


def resolve_mol_features(config: TrainConfig) -> TrainConfig:
    """``config`` with ``mol_features="auto"`` replaced by the kind it stands for: the
    fine-tuning recipe's for the shipped pretrained start on a ``csv:`` set, else ``none``."""
    if config.mol_features != "auto":
        return config
    recipe = config.init_from == "pretrained" and names_table(config.dataset)
    return replace(config, mol_features=PRETRAINED_MOL_FEATURES if recipe else "none")


def resolve_trees(config: TrainConfig, distributed: bool = False) -> TrainConfig:
    """``config`` with ``trees="auto"`` replaced by ``on`` (``init_from`` on a table of
    SMILES, one process) or ``off``; ``ValueError`` for ``on`` where the trees cannot be
    fitted (not a table, a pretraining set, several processes)."""
    table = names_table(config.dataset)
    if config.trees == "on" and (not table or distributed):
        why = "several processes" if table else f"{config.dataset}, not a csv: or sdf: table"
        raise ValueError(f"--trees on: the trees head is fitted on tables of SMILES ({why})")
    if config.trees != "auto":
        return config
    on = table and config.init_from is not None and not distributed
    return replace(config, trees="on" if on else "off")


def make_config(
    preset: str = "small", model_overrides: dict | None = None, **overrides
) -> TrainConfig:
    """A :class:`TrainConfig` from ``preset``, with training and model fields overridden.

    Every field given beats the preset (see :func:`override_config`); unless ``warmup_steps``
    is given, the preset's warm-up is fitted to the length of the run when training starts
    (:func:`plan_steps`).

    Args:
        preset: a name in :data:`TRAIN_PRESETS` (also a model preset).
        model_overrides: fields of :class:`GraphormerConfig` to change.
        **overrides: fields of :class:`TrainConfig` to change (``None`` values are ignored).
    """
    if preset not in TRAIN_PRESETS:
        raise KeyError(f"unknown preset {preset!r}; choose from {sorted(TRAIN_PRESETS)}")
    cfg = TrainConfig(preset=preset, model=get_preset(preset), **TRAIN_PRESETS[preset])
    return override_config(cfg, model_overrides, **overrides)


def read_config(path: str | os.PathLike) -> TrainConfig:
    """The :class:`TrainConfig` saved in a run's ``config.json`` (one-line errors)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"config file {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a training config (a JSON object)")
    try:
        return TrainConfig.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path} is not a graphormer-urpe training config: {exc}") from None


DEFAULT_ATTENTION = "urpe"
"""The attention of a run that names none: URPE (the model this package is for)."""


def build_train_config(
    preset: str | None = None,
    config_file: str | os.PathLike | None = None,
    model_overrides: dict | None = None,
    resume: bool = False,
    **given,
) -> TrainConfig:
    """The config of a run from what its user chose, with the defaults ``train`` applies.

    * From ``config_file`` (a run's ``config.json``, repeated with changes): every field
      given beats the saved one; it cannot be combined with ``preset``, and a repeat that
      would write into the saved run's folder needs ``out`` (or ``resume``).
    * Else from ``preset`` (``small`` when ``None``), with :data:`DEFAULT_ATTENTION` unless
      ``model_overrides`` names an attention; a ``time_limit`` without ``epochs`` or
      ``max_steps`` plans the run to fill it (``fill_time_limit``); without ``out`` the run
      writes into ``runs/<data>-<preset>-<attention>`` (:func:`run_name`).

    Args:
        preset: a name in :data:`TRAIN_PRESETS`, or ``None``.
        config_file: a saved ``config.json`` to start from, or ``None``.
        model_overrides: fields of :class:`GraphormerConfig` (``None`` values are ignored).
        resume: the run continues an earlier one (a saved run's own folder is then allowed).
        **given: fields of :class:`TrainConfig` the user gave (``None`` values are ignored).
    """
    model_over = {k: v for k, v in (model_overrides or {}).items() if v is not None}
    given = {k: v for k, v in given.items() if v is not None}
    if config_file is not None:
        if preset is not None:
            raise ValueError(
                f"--preset cannot be combined with --config: {config_file} names its preset"
            )
        cfg = override_config(read_config(config_file), model_over, **given)
        if "out" not in given and not resume and _holds_run(cfg.out):
            raise ValueError(
                f"{cfg.out} already holds the run of {config_file}; pass --out to repeat it "
                "elsewhere (or --resume to continue it)"
            )
        return cfg
    model_over.setdefault("attention", DEFAULT_ATTENTION)
    cfg = make_config(preset or "small", model_overrides=model_over, **given)
    if cfg.time_limit is not None and not {"epochs", "max_steps"} & set(given):
        cfg = replace(cfg, fill_time_limit=True)  # steps planned to fill it
    if "out" not in given:
        out = f"{run_name(cfg.dataset)}-{cfg.preset}-{cfg.model.attention}"
        cfg = replace(cfg, out=os.path.join("runs", out))
    return cfg


def run_name(dataset: str) -> str:
    """A folder name for runs on ``dataset``: a CSV's or SD file's stem (``csv:data/mols.csv``
    -> ``mols``; three files: the first's), else the dataset's name; characters other than
    letters, digits, ``-``, ``_`` and ``.`` become ``_``."""
    name = dataset
    if names_table(dataset):
        spec = parse_dataset_spec(dataset)
        name = os.path.basename(spec.paths[0])
        for suffix in (".gz", ".csv", ".smi", ".txt", ".sdf"):
            name = name.removesuffix(suffix)
        name = name or spec.kind
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _holds_run(out: str) -> bool:
    """``out`` holds a finished or interrupted run."""
    return any(os.path.exists(os.path.join(out, f)) for f in ("metrics.json", "last.pt"))


def plan_steps(config: TrainConfig, steps_per_epoch: int) -> tuple[int, int, int]:
    """The optimizer steps, epochs and warm-up steps of a run.

    ``max_steps`` when set, else ``epochs`` (default 1) times ``steps_per_epoch``. The warm-up
    is ``warmup_steps``, except that with ``fit_warmup`` one longer than a tenth of the run is
    scaled to the fraction of the run it takes in the preset's published recipe
    (``zinc-slim`` 40k of 400k steps: 10%; ``pcqm4mv2-*`` 60k of 1M: 6%). ``small`` has no
    step recipe: its warm-up is scaled to a tenth of a run planned to fill ``--time-limit``
    (``fill_time_limit``) and kept otherwise. A warm-up not shorter than the run becomes a
    tenth of it. Either change is logged on one line.

    Returns:
        ``(total_steps, epochs, warmup_steps)``.
    """
    total = config.max_steps or (config.epochs or 1) * steps_per_epoch
    epochs = math.ceil(total / steps_per_epoch)
    recipe = TRAIN_PRESETS.get(config.preset, TRAIN_PRESETS["small"])
    warmup = config.warmup_steps
    if config.warmup_fraction is not None:
        if not 0.0 <= config.warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {config.warmup_fraction}")
        warmup = max(1, round(total * config.warmup_fraction))
    elif config.fit_warmup and warmup > total / 10:
        if recipe["max_steps"]:
            fraction = recipe["warmup_steps"] / recipe["max_steps"]
            why = (
                f"as in the {config.preset} preset's published recipe "
                f"({recipe['warmup_steps']} of {recipe['max_steps']} steps)"
            )
        elif config.fill_time_limit:
            fraction, why = 0.1, "planned to fill --time-limit"
        else:
            fraction, why = None, ""
        if fraction is not None:
            scaled = max(1, round(total * fraction))
            log.info(
                "warm-up: %d steps are longer than a tenth of this %d-step run; scaled to "
                "%.3g%% of the run %s: %d steps (--warmup-steps sets it)",
                warmup,
                total,
                100 * fraction,
                why,
                scaled,
            )
            warmup = scaled
    if warmup >= total:
        short = max(1, total // 10)
        log.warning(
            "warmup_steps (%d) >= total steps (%d): warming up over %d steps instead",
            warmup,
            total,
            short,
        )
        warmup = short
    return total, epochs, warmup
