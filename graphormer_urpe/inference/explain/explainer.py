r"""Which atoms drive a prediction: per-atom contributions of a trained model (or ensemble).

Each molecule is featurised as the model was trained, then explained by one of
:data:`METHODS`: integrated gradients on its atom embeddings
(:mod:`.integrated_gradients`, which states the baseline, by default every atom replaced by
the molecule's mean atom, and the completeness check) or sampled Shapley values of the atoms
against the same baseline (:mod:`.shapley`).
Either way ``contributions`` ``[n, T]`` add up, with the ``descriptors`` term of a model
trained with ``--mol-features``, to ``prediction - baseline`` (within 1% for integrated
gradients, exactly for Shapley values). An ensemble gives the mean of its members'
contributions, predictions and baselines (so completeness holds for the mean too). Binary
tasks are explained on the logit.

A model with a trees head (:mod:`~graphormer_urpe.inference.trees`) predicts the blend
``w net + (1 - w) trees``; its explanation is the same blend of the network's and the trees'
(:meth:`~graphormer_urpe.inference.trees.Trees.attribution`, exact): the atoms get their
share of the network's and of the Morgan bits they set, the ``descriptors`` term holds the
network's descriptor term and the trees' descriptors, graph token and absent bits, and the
baseline is the blend of the network's baseline and the trees' mean output.

Example::

    from graphormer_urpe.inference import Explainer

    explainer = Explainer([model], featurizer="zinc", target_names=["logp"])
    for e in explainer.explain_many(["CCO", "c1ccccc1O"]):
        print(e.smiles, e.elements, e.contributions[:, 0], e.prediction, e.error)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from torch_geometric.data import Data
from tqdm.auto import tqdm

from ...datasets.featurizers.molecule_graphs import featurize_smiles
from ...datasets.featurizers.smiles import InvalidMoleculeError, parse_smiles
from ...graph.model import Graphormer
from ..trees import Trees
from .integrated_gradients import (
    BASELINES,
    DEFAULT_MAX_STEPS,
    DEFAULT_RTOL,
    DEFAULT_STEPS,
    Attribution,
    integrated_gradients,
)
from .shapley import DEFAULT_PERMUTATIONS, shapley_values

__all__ = ["METHODS", "Explainer", "MoleculeExplanation", "TrainedModel"]

METHODS = ("shapley", "integrated-gradients")
"""The explanation methods; the first is the default."""


class TrainedModel(Protocol):
    """What :meth:`Explainer.from_loaded` reads of a loaded checkpoint."""

    model: Graphormer
    featurizer: str
    target_names: list[str]
    task_type: str
    mol_features: dict | None
    trees: Trees | None
    embedder: Graphormer | None


@dataclass
class MoleculeExplanation:
    """The explanation of one input row.

    Attributes:
        index: the row (0-based, input order).
        smiles: the input SMILES.
        elements: ``[n]`` element symbols, RDKit's atom order.
        contributions: ``[n, T]`` each atom's contribution to each target (logits for
            binary tasks); empty ``[0, T]`` when the row could not be read.
        descriptors: ``[T]`` the per-molecule features' term (``--mol-features``), else
            ``None``.
        prediction: ``[T]`` the model's output (``nan`` when unreadable).
        baseline: ``[T]`` the output at the baseline.
        steps: forward evaluations (Shapley values) or quadrature nodes, all panels together
            (integrated gradients), the most among ensemble members.
        error: why the row could not be explained, else ``None``.
        ids: the row's values of the input's id columns (e.g. its name), in their order;
            ``()``: none read.
    """

    index: int
    smiles: str
    elements: list[str] = field(default_factory=list)
    contributions: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    descriptors: np.ndarray | None = None
    prediction: np.ndarray = field(default_factory=lambda: np.zeros(0))
    baseline: np.ndarray = field(default_factory=lambda: np.zeros(0))
    steps: int = 0
    error: str | None = None
    ids: tuple[str, ...] = ()

    @property
    def completeness_error(self) -> np.ndarray:
        """``[T]`` ``|prediction - baseline - sum of contributions| / |prediction -
        baseline|`` (the descriptor term included)."""
        total = self.contributions.sum(0)
        if self.descriptors is not None:
            total = total + self.descriptors
        delta = self.prediction - self.baseline
        return np.abs(delta - total) / np.maximum(np.abs(delta), 1e-12)


def _mean(attributions: Sequence[Attribution]) -> Attribution:
    """Members' mean (completeness is linear, so it holds for the mean)."""
    desc = attributions[0].descriptors
    return Attribution(
        atoms=np.mean([a.atoms for a in attributions], axis=0),
        descriptors=None
        if desc is None
        else np.mean([a.descriptors for a in attributions], axis=0),
        prediction=np.mean([a.prediction for a in attributions], axis=0),
        baseline=np.mean([a.baseline for a in attributions], axis=0),
        steps=max(a.steps for a in attributions),
    )


def _blend(a: Attribution, trees: Trees, smiles: str, x: np.ndarray) -> Attribution:
    """The network's attribution ``a`` blended with the trees' on the molecule ``smiles``
    (``x``: its trees' input row ``[1, F]``), each part weighted as the prediction is."""
    atoms, rest, expected = trees.attribution(smiles, x)
    w = np.array(trees.net_weight)
    w = np.where([b is None for b in trees.boosters], 1.0, w)  # no trees: the network alone
    output = np.nan_to_num(trees.predict(x)[0].astype(np.float64))
    return Attribution(
        atoms=w * a.atoms + (1 - w) * atoms,
        descriptors=(1 - w) * rest + (0 if a.descriptors is None else w * a.descriptors),
        prediction=w * a.prediction + (1 - w) * output,
        baseline=w * a.baseline + (1 - w) * expected,
        steps=a.steps,
    )


@dataclass
class Explainer:
    """Explains predictions of one model or the members of an ensemble.

    Args:
        models: the model, or the ensemble's members (the same featuriser and targets).
        featurizer: ``"zinc"`` or ``"ogb"``, as the models were trained.
        target_names: ``[T]`` the targets' names.
        task_type: ``"regression"`` or ``"binary"`` (explained on the logit).
        mol_features: the run's per-molecule feature record (``None``: none).
        method: one of :data:`METHODS`.
        permutations: Shapley values: orderings of the atoms sampled per molecule (half of
            them the reverses of the others); the members of an ensemble share them.
        seed: Shapley values: seeds each molecule's orderings.
        steps: integrated gradients: Gauss–Legendre nodes per panel of the path (panels are
            halved until complete; see :mod:`.integrated_gradients`).
        max_steps: integrated gradients: the most quadrature nodes in all, per molecule and
            member.
        rtol: integrated gradients: the completeness tolerance (relative to ``|prediction -
            baseline|``).
        baseline: ``mean`` (each atom's embedding replaced by the molecule's mean atom
            embedding) or ``zero``; see :mod:`.integrated_gradients`.
        trees: each member's trees head (``None``: the networks alone).
        embedders: each member's trees' embedder (``None`` entries: no graph token).
    """

    models: list[Graphormer]
    featurizer: str
    target_names: list[str]
    task_type: str = "regression"
    mol_features: dict | None = None
    method: str = METHODS[0]
    permutations: int = DEFAULT_PERMUTATIONS
    seed: int = 0
    steps: int = DEFAULT_STEPS
    max_steps: int = DEFAULT_MAX_STEPS
    rtol: float = DEFAULT_RTOL
    baseline: str = BASELINES[0]
    trees: list[Trees] | None = None
    embedders: list[Graphormer | None] | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown explanation method {self.method!r}; choose one of {METHODS}")

    @classmethod
    def from_loaded(cls, loaded: Sequence[TrainedModel], **options) -> Explainer:
        """An explainer of loaded checkpoints (one, or an ensemble's members)."""
        first = loaded[0]
        return cls(
            models=[member.model for member in loaded],
            featurizer=first.featurizer,
            target_names=list(first.target_names),
            task_type=first.task_type,
            mol_features=first.mol_features,
            trees=None if first.trees is None else [member.trees for member in loaded],  # type: ignore[misc]
            embedders=[member.embedder for member in loaded],
            **options,
        )

    def graph(self, smiles: str) -> tuple[Data, list[str]]:
        """The molecule as the models read it, and its element symbols ``[n]``.

        Raises:
            InvalidMoleculeError: when ``smiles`` cannot be read or featurised.
        """
        mol = parse_smiles(smiles)
        data = featurize_smiles(smiles, self.featurizer)
        if self.mol_features is not None:
            from ...datasets.mol_features import mol_features_of_smiles

            data.mol_x = torch.from_numpy(mol_features_of_smiles([smiles], self.mol_features))
        return data, [a.GetSymbol() for a in mol.GetAtoms()]

    def explain(self, smiles: str, index: int = 0) -> MoleculeExplanation:
        """The explanation of one SMILES (an unreadable one gets ``error`` set)."""
        try:
            data, elements = self.graph(smiles)
        except InvalidMoleculeError as exc:
            return self._failed(index, smiles, str(exc))
        a = self._attribution(data, smiles)
        return MoleculeExplanation(
            index=index,
            smiles=smiles,
            elements=elements,
            contributions=a.atoms,
            descriptors=a.descriptors,
            prediction=a.prediction,
            baseline=a.baseline,
            steps=a.steps,
        )

    def _attribution(self, data: Data, smiles: str) -> Attribution:
        """The members' mean attribution (each blended with its trees where it has them).
        Shapley values share the orderings, so the mean is exactly complete; integrated
        gradients are complete within ``rtol`` of the *mean*'s ``prediction - baseline``
        (members whose differences cancel are integrated to a tighter tolerance)."""
        if self.method == "shapley":
            return _mean(
                self._with_trees(
                    [
                        shapley_values(m, data, self.permutations, self.seed, self.baseline)
                        for m in self.models
                    ],
                    data,
                    smiles,
                )
            )
        rtol = self.rtol
        for _ in range(4):
            parts = [
                integrated_gradients(
                    m, data, self.steps, self.max_steps, rtol, baseline=self.baseline
                )
                for m in self.models
            ]
            a = _mean(self._with_trees(parts, data, smiles))
            delta = np.abs(a.prediction - a.baseline)
            if len(parts) == 1 or np.all(np.abs(a.gap) <= self.rtol * delta + 1e-5):
                break
            rtol /= 4
        return a

    def _with_trees(self, parts: list[Attribution], data: Data, smiles: str) -> list[Attribution]:
        """Each member's attribution blended with its trees' (``parts`` as they are without
        trees)."""
        if self.trees is None:
            return parts
        from ..trees import tree_chunk_inputs

        rows = {  # [1, 202 + C] per set of fingerprints the members' trees read
            f: tree_chunk_inputs([smiles], f)[0] for f in {t.fingerprints for t in self.trees}
        }
        embedders = self.embedders or [None] * len(parts)
        out = []
        for a, trees, embedder in zip(parts, self.trees, embedders, strict=True):
            x = counts = rows[trees.fingerprints]
            if embedder is not None:
                with torch.no_grad():
                    _, h = embedder.forward_with_head_input([data])
                x = np.hstack([counts, h[:, : embedder.config.hidden_dim].float().numpy()])
            out.append(_blend(a, trees, smiles, x))
        return out

    def _failed(self, index: int, smiles: str, reason: str) -> MoleculeExplanation:
        t = len(self.target_names)
        nan = np.full(t, np.nan)
        return MoleculeExplanation(
            index, smiles, [], np.zeros((0, t)), None, nan, nan.copy(), 0, reason
        )

    def explain_many(
        self, smiles: Iterable[str], progress: bool = False, total: int | None = None
    ) -> Iterator[MoleculeExplanation]:
        """:meth:`explain` of every SMILES, in input order, with a progress bar if asked."""
        bar = tqdm(smiles, total=total, desc="explain", disable=None if progress else True)
        for i, smi in enumerate(bar):
            yield self.explain(smi, i)
