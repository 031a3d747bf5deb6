r"""The trees head: gradient-boosted trees beside the network, blended on the validation split.

A run on a table of SMILES (``train --trees``; by default with a pretrained start) also fits,
per target, a LightGBM model on three groups of per-molecule inputs ``[N, F]``:

* the 202 RDKit 2D descriptors, raw
  (:mod:`~graphormer_urpe.datasets.featurizers.descriptors`; trees do not need them scaled,
  and read a missing value as missing);
* count fingerprints (:data:`FINGERPRINTS`): Morgan counts of radius 2 (ECFP4, 2,048 bits),
  Avalon counts (1,024 bits) and ErG's 315 pharmacophore pairs, the inputs of MapLight's
  boosted trees (trees kept before Avalon and ErG were added read Morgan alone, and still
  do: ``trees.json`` names the fingerprints);
* the graph token of the run's *starting* model (its pretrained encoder, frozen: ``[d]``),
  kept as ``trees/embedder.pt``. A fine-tuned network's own vector would not do: it has
  learned the training molecules' targets, so trees fitted on it trust it too much.

The trees stop early on the validation split. Once the network is trained, each target's
output is the blend

.. math::
    \hat y = w \, \hat y_{net} + (1 - w) \, \hat y_{trees}

(logits for binary tasks), with ``w`` in ``0, 0.1, ..., 1`` chosen on the validation split by
the run's selection metric (``w = 1``: the network alone). An ensemble blends each member
with its own trees, so the members' spread, the intervals and the calibration all read the
blended members (:meth:`Trees.blend`): a calibrator fitted on the blended validation
predictions holds for the blend.

The folder ``trees/`` beside ``best.pt`` holds ``trees.json`` (the weights, the inputs, the
validation figures), one LightGBM text model per target (``target_<t>.txt``) and the
embedder; :func:`load_trees` reads it, so that ``predict``, ``evaluate``, ``serve`` and
``calibrate`` give the blend. ``predict --embeddings`` and ``explain`` describe the network.

Example::

    trees = fit_trees(inputs, y, "regression", ["logS"], seed=0, embedding_dim=64)  # inputs: [N, F]
    trees.choose_weights(net_valid, inputs["valid"], y["valid"], rmse, higher=False)
    members = trees.blend(members, trees.predict(x))                # [K, N, T]
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..datasets.featurizers.fingerprints import COUNT_FINGERPRINTS, MORGAN_COUNTS
from ..io.checkpoint import load_checkpoint, save_checkpoint, write_atomic

__all__ = [
    "FINGERPRINTS",
    "MORGAN",
    "TREES_DIR",
    "TREES_FILE",
    "Trees",
    "TreesBeside",
    "dataset_inputs",
    "fit_trees",
    "load_embedder",
    "load_trees",
    "save_embedder",
    "fingerprints_width",
    "tree_chunk_inputs",
    "tree_fingerprints",
    "tree_inputs",
    "trees_folder",
]

log = logging.getLogger(__name__)

TREES_DIR = "trees"
"""The trees head's folder beside a run's ``best.pt``."""

TREES_FILE = "trees.json"
"""The trees head's description in its folder (its inputs, weights and validation figures)."""

MORGAN = MORGAN_COUNTS
"""The trees' Morgan count fingerprint (the first of their fingerprints)."""

FINGERPRINTS = ("morgan", "avalon", "erg")
"""The count fingerprints new trees read after the descriptors, in order (names of
:data:`~graphormer_urpe.datasets.featurizers.fingerprints.COUNT_FINGERPRINTS`)."""

OLD_FINGERPRINTS = ("morgan",)
"""The fingerprints of trees whose ``trees.json`` names none (kept before Avalon and ErG)."""

WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))
"""The network weights tried on the validation split."""

PARAMS: dict[str, Any] = {
    "learning_rate": 0.03,
    "num_leaves": 31,
    "min_data_in_leaf": 10,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "feature_fraction": 0.3,
    "lambda_l2": 1.0,
    "deterministic": True,
    "verbosity": -1,
}
"""LightGBM's settings (those of the ADMET benchmark's trees); up to :data:`ROUNDS` rounds,
stopped :data:`PATIENCE` rounds after the validation loss last improved."""
ROUNDS = 3000
PATIENCE = 100


def tree_inputs(
    descriptors: np.ndarray, counts: np.ndarray, embeddings: np.ndarray | None
) -> np.ndarray:
    """The trees' input rows ``[N, F]`` float32: raw descriptors ``[N, 202]`` (``NaN`` =
    missing), count fingerprints ``[N, C]`` (:func:`tree_fingerprints`) and, where the trees
    read one, the starting model's graph token ``[N, d]``, side by side."""
    parts = [descriptors, counts] + ([] if embeddings is None else [embeddings])
    return np.hstack([np.asarray(p, dtype=np.float32) for p in parts])


@dataclass
class Trees:
    """A fitted trees head (see the module's text).

    Attributes:
        task_type: ``regression`` or ``binary``.
        target_names: the targets, in the network's output order.
        boosters: per target, its LightGBM booster (``None``: no training label).
        net_weight: per target, the network's weight ``w`` in the blend (1 until
            :meth:`choose_weights`).
        embedding_dim: ``d`` of the embedder's graph token (0: no embedder).
        descriptor_set: the descriptor set's id (:func:`~graphormer_urpe.datasets.
            descriptors.descriptor_set_id`) the trees were fitted on.
        valid: per target, the validation metric of the network, the trees and the blend.
        fingerprints: the count fingerprints the trees read (:data:`FINGERPRINTS`).
        digest: SHA-256 of the boosters' text models as :meth:`load` read them (``None``:
            fitted in this process); an ensemble's members that share their trees (and their
            embedder) predict them once (:class:`TreesBeside`).
    """

    task_type: str
    target_names: list[str]
    boosters: list[Any]
    net_weight: list[float]
    embedding_dim: int
    descriptor_set: str
    valid: list[dict[str, float]] = field(default_factory=list)
    fingerprints: tuple[str, ...] = FINGERPRINTS
    digest: str | None = field(default=None, compare=False)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The trees' outputs ``[N, T]`` float32 (logits for binary tasks; ``NaN`` for a
        target without trees) for input rows ``x`` ``[N, F]`` (:func:`tree_inputs`)."""
        out = np.full((len(x), len(self.boosters)), np.nan, dtype=np.float32)
        for t, booster in enumerate(self.boosters):
            if booster is not None and len(x):
                out[:, t] = booster.predict(x, raw_score=True)
        return out

    def attribution(self, smiles: str, x: np.ndarray) -> tuple[np.ndarray, ...]:
        """The trees' output on one molecule split into parts (TreeSHAP, exact):
        ``(atoms [n, T], rest [T], expected [T])`` with ``expected + atoms.sum(0) + rest`` the
        output (:meth:`predict`).

        ``atoms``: each Morgan bit present in the molecule, its value shared equally among
        the atoms at the centre of the environments that set it; ``rest``: the descriptors,
        the other fingerprints, the graph token and the absent bits; ``expected``: the trees'
        mean output over their training molecules. A target without trees gets zeros.

        Args:
            smiles: the molecule (readable).
            x: ``[1, F]`` its input row (:func:`tree_inputs`).
        """
        from rdkit import Chem
        from rdkit.Chem import rdFingerprintGenerator

        from ..datasets.featurizers.fingerprints import morgan_generator

        mol = Chem.MolFromSmiles(smiles)
        info = rdFingerprintGenerator.AdditionalOutput()
        info.AllocateBitInfoMap()
        morgan_generator(MORGAN["radius"], MORGAN["bits"]).GetCountFingerprintAsNumPy(
            mol, additionalOutput=info
        )
        # Morgan's bits come first among the fingerprints, after the descriptors
        first_bit = x.shape[1] - fingerprints_width(self.fingerprints) - self.embedding_dim
        share = np.zeros((mol.GetNumAtoms(), x.shape[1]))  # [n, F]: atom i's part of feature f
        for bit, places in info.GetBitInfoMap().items():
            for atom, _radius in places:
                share[atom, first_bit + bit] += 1.0 / len(places)
        t = len(self.boosters)
        atoms, rest, expected = np.zeros((len(share), t)), np.zeros(t), np.zeros(t)
        for j, booster in enumerate(self.boosters):
            if booster is None:
                continue
            phi = booster.predict(x, pred_contrib=True)[0]  # [F + 1]: the last is the mean
            atoms[:, j] = share @ phi[:-1]
            rest[j] = phi[:-1].sum() - atoms[:, j].sum()
            expected[j] = phi[-1]
        return atoms, rest, expected

    def blend(self, members: Tensor, trees: np.ndarray | Tensor) -> Tensor:
        """Each member's output blended with the trees': ``[K, N, T]`` from ``members``
        ``[K, N, T]`` and the trees' ``[N, T]``; a target without trees keeps the network's."""
        w = torch.tensor(self.net_weight, dtype=members.dtype)
        t = torch.as_tensor(trees, dtype=members.dtype)
        blended = w * members + (1 - w) * t
        return torch.where(torch.isfinite(t), blended, members)

    def choose_weights(
        self,
        net: Tensor,
        trees: np.ndarray,
        y: Tensor,
        score: Callable[[Tensor, Tensor], float],
        higher: bool,
    ) -> None:
        """Set each target's network weight to the one of :data:`WEIGHTS` whose blend scores
        best on the validation split (ties: the larger weight; 1 where the metric cannot be
        taken there, e.g. labels of one class).

        Args:
            net: ``[N, T]`` the network's validation outputs (an ensemble member's).
            trees: ``[N, T]`` the trees' validation outputs.
            y: ``[N, T]`` validation targets (``NaN`` = missing).
            score: the selection metric of predictions ``[n, 1]`` against targets ``[n, 1]``.
            higher: whether a larger score is better.
        """
        self.net_weight, self.valid = [], []
        for t in range(len(self.target_names)):
            known = torch.isfinite(y[:, t])
            if self.boosters[t] is None or int(known.sum()) < 2:
                self.net_weight.append(1.0)
                self.valid.append({})
                continue
            yt, nt = y[known, t : t + 1], net[known, t : t + 1].float()
            tt = torch.as_tensor(trees[known.numpy(), t : t + 1], dtype=nt.dtype)
            scores = {w: score(w * nt + (1 - w) * tt, yt) for w in WEIGHTS}
            if not all(np.isfinite(list(scores.values()))):  # e.g. one class in the split
                self.net_weight.append(1.0)
                self.valid.append({})
                continue
            best = max(scores, key=lambda w: (scores[w] if higher else -scores[w], w))
            self.net_weight.append(best)
            self.valid.append({"network": scores[1.0], "trees": scores[0.0], "blend": scores[best]})

    def to_dict(self) -> dict[str, Any]:
        """``trees.json``'s contents (the boosters are files of their own)."""
        return {
            "task_type": self.task_type,
            "target_names": self.target_names,
            "net_weight": self.net_weight,
            "has_trees": [b is not None for b in self.boosters],
            "embedding_dim": self.embedding_dim,
            "descriptor_set": self.descriptor_set,
            "morgan": MORGAN,
            "fingerprints": list(self.fingerprints),
            "valid": self.valid,
            "params": PARAMS,
        }

    def save(self, folder: str | Path) -> None:
        """Write ``trees.json`` and each booster as LightGBM's text model into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for t, booster in enumerate(self.boosters):
            if booster is not None:
                write_atomic(folder / f"target_{t}.txt", booster.model_to_string())
        write_atomic(folder / TREES_FILE, json.dumps(self.to_dict(), indent=2))

    @classmethod
    def load(cls, folder: str | Path) -> Trees:
        """The trees :meth:`save` wrote into ``folder``."""
        import lightgbm as lgb

        folder = Path(folder)
        d = json.loads((folder / TREES_FILE).read_text())
        texts = [
            (folder / f"target_{t}.txt").read_text() if has else None
            for t, has in enumerate(d["has_trees"])
        ]
        digest = hashlib.sha256(repr(texts).encode()).hexdigest()
        return cls(
            d["task_type"],
            list(d["target_names"]),
            [None if text is None else lgb.Booster(model_str=text) for text in texts],
            [float(w) for w in d["net_weight"]],
            int(d["embedding_dim"]),
            d["descriptor_set"],
            list(d.get("valid") or []),
            tuple(d.get("fingerprints") or OLD_FINGERPRINTS),
            digest,
        )


def fit_trees(
    x: dict[str, np.ndarray],
    y: dict[str, Tensor],
    task_type: str,
    target_names: Sequence[str],
    seed: int,
    embedding_dim: int,
    threads: int = 1,
    fingerprints: Sequence[str] = FINGERPRINTS,
) -> Trees:
    """One LightGBM model per target on the training rows, stopped early on the validation
    rows (network weights still 1: :meth:`Trees.choose_weights` sets them).

    Args:
        x: ``{"train": [N, F], "valid": [M, F]}`` input rows (:func:`tree_inputs`).
        y: ``{"train": [N, T], "valid": [M, T]}`` targets (``NaN`` = missing).
        task_type: ``regression`` or ``binary`` (0/1 labels).
        target_names: the ``T`` targets' names.
        seed: the trees' random seed.
        embedding_dim: ``d`` of the graph token among the inputs (0: none).
        threads: LightGBM's threads.
        fingerprints: the count fingerprints among the inputs (:func:`tree_fingerprints`).
    """
    import lightgbm as lgb

    from ..datasets.featurizers.descriptors import descriptor_set_id

    boosters: list[Any] = []
    for t, name in enumerate(target_names):
        rows = {p: torch.isfinite(y[p][:, t]).numpy() for p in ("train", "valid")}
        yt = {p: y[p][rows[p], t].double().numpy() for p in ("train", "valid")}
        if rows["train"].sum() < 2 or (task_type == "binary" and len(np.unique(yt["train"])) < 2):
            log.info("trees: target %s has too few training labels; the network alone", name)
            boosters.append(None)
            continue
        objective = "binary" if task_type == "binary" else "regression"
        params = {**PARAMS, "objective": objective, "seed": seed, "num_threads": threads}
        train = lgb.Dataset(x["train"][rows["train"]], yt["train"], free_raw_data=False)
        if rows["valid"].any():
            valid = lgb.Dataset(x["valid"][rows["valid"]], yt["valid"], reference=train)
            stop = [lgb.early_stopping(PATIENCE, verbose=False)]
            booster = lgb.train(params, train, ROUNDS, valid_sets=[valid], callbacks=stop)
        else:  # nothing to stop on: a tenth of the rounds
            booster = lgb.train(params, train, ROUNDS // 10)
        boosters.append(booster)
    weights = [1.0] * len(boosters)
    return Trees(
        task_type,
        list(target_names),
        boosters,
        weights,
        embedding_dim,
        descriptor_set_id(),
        fingerprints=tuple(fingerprints),
    )


def fingerprints_width(fingerprints: Sequence[str]) -> int:
    """``C``: the columns of the count fingerprints ``fingerprints`` side by side."""
    return sum(COUNT_FINGERPRINTS[k][0] for k in fingerprints)


def tree_fingerprints(smiles: Sequence[str], fingerprints: Sequence[str]) -> np.ndarray:
    """The trees' count fingerprints ``[N, C]`` float32 of ``smiles`` (names of
    :data:`~graphormer_urpe.datasets.featurizers.fingerprints.COUNT_FINGERPRINTS`, e.g.
    :data:`FINGERPRINTS`)."""
    from ..datasets.featurizers.fingerprints import count_fingerprints

    return count_fingerprints(smiles, fingerprints)


def tree_chunk_inputs(
    smiles: Sequence[str], fingerprints: Sequence[str] = FINGERPRINTS
) -> tuple[np.ndarray, np.ndarray]:
    """The descriptors and count fingerprints of the trees' inputs ``[N, 202 + C]`` float32
    for readable ``smiles``, and the raw descriptors ``[N, 202]`` (which a network's own
    molecule features are computed from)."""
    from ..datasets.featurizers.descriptors import compute_descriptors

    raw = compute_descriptors(smiles)
    return tree_inputs(raw, tree_fingerprints(smiles, fingerprints), None), raw


class TreesBeside:
    """The trees heads of a model or of an ensemble's members, applied batch by batch.

    Members that share an embedder (an ensemble started from one checkpoint) share its pass,
    and members that also share their trees (read from identical files, as an ensemble's
    members keep them) share the trees' prediction.

    Args:
        members: each member's trees.
        embedders: each member's embedder (``None``: its trees read no graph token).
        forward: a module's forward pass over a batch as the stream runs it (captured on a
            GPU), ``[B, ...]`` on the CPU.
    """

    def __init__(
        self,
        members: Sequence[Trees],
        embedders: Sequence[Any],
        forward: Callable[[torch.nn.Module], Callable[[Any], Tensor]],
    ) -> None:
        from .embeddings import WithHeadInput

        self.members = list(members)
        unique: list[Any] = []
        self.which: list[int | None] = []  # per member: its embedder among ``unique``
        for e in embedders:
            found = (
                None if e is None else next((i for i, u in enumerate(unique) if _same(u, e)), None)
            )
            if e is not None and found is None:
                unique.append(e)
                found = len(unique) - 1
            self.which.append(found)
        self.forwards = [forward(WithHeadInput(e)) for e in unique]
        self.shapes = [(e.config.num_targets, e.config.hidden_dim) for e in unique]
        # per member: the first member with the same trees and embedder (its prediction is reused)
        keys = [(k if t.digest is None else t.digest, self.which[k]) for k, t in enumerate(members)]
        self.predicts = [keys.index(key) for key in keys]

    def __call__(self, batch: Any, tree_x: np.ndarray, outputs: Tensor) -> Tensor:
        """``outputs`` ``[K, B, T (+ D)]`` (the members' on ``batch``; ``D``: embeddings after
        the targets) with each member's first ``T`` columns blended with its trees, whose
        inputs are ``tree_x`` ``[B, F]`` and the embedder's graph tokens."""
        tokens = [
            graph_tokens(f(batch).float().cpu(), *shape).numpy()
            for f, shape in zip(self.forwards, self.shapes, strict=True)
        ]
        out = outputs.clone()
        predicted: dict[int, np.ndarray] = {}
        for k, trees in enumerate(self.members):
            first, w = self.predicts[k], self.which[k]
            if first not in predicted:
                predicted[first] = trees.predict(
                    tree_x if w is None else np.hstack([tree_x, tokens[w]])
                )
            t = len(trees.target_names)
            out[k, :, :t] = trees.blend(outputs[k : k + 1, :, :t], predicted[first])[0]
        return out


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    """Whether two models hold the same weights."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def dataset_inputs(
    dataset: Any,
    embedder: Any,
    batch_size: int,
    device: torch.device,
    precision: Any,
    fingerprints: Sequence[str] = FINGERPRINTS,
) -> np.ndarray:
    """The trees' input rows ``[N, F]`` of a split over a store of SMILES (``csv:`` and
    ``sdf:`` datasets): the store's raw descriptors (computed from the SMILES where the store
    has none), the count ``fingerprints``, and the ``embedder``'s graph tokens (``None``:
    none)."""
    from ..datasets.featurizers.descriptors import compute_descriptors
    from .embeddings import WithHeadInput
    from .prediction import predict_dataset

    smiles = dataset.smiles()
    store = dataset.store
    if store.has_descriptors:
        descriptors = store.descriptors[np.asarray(dataset.positions, dtype=np.int64)]
    else:
        descriptors = compute_descriptors(smiles)
    tokens = None
    if embedder is not None:
        c = embedder.config
        out, _ = predict_dataset(
            embedder, dataset, batch_size, device, precision, net=WithHeadInput(embedder)
        )
        tokens = graph_tokens(out, c.num_targets, c.hidden_dim).numpy()
    return tree_inputs(descriptors, tree_fingerprints(smiles, fingerprints), tokens)


def trees_folder(checkpoint: str | Path) -> Path:
    """The trees head's folder of ``checkpoint`` (a ``best.pt``): ``trees/`` beside it."""
    return Path(checkpoint).parent / TREES_DIR


def load_trees(checkpoint: str | Path) -> Trees | None:
    """The trees head kept beside ``checkpoint``, or ``None`` where it has none."""
    folder = trees_folder(checkpoint)
    if not (folder / TREES_FILE).exists():
        return None
    trees = Trees.load(folder)
    from ..datasets.featurizers.descriptors import descriptor_set_id

    if trees.descriptor_set != descriptor_set_id():
        log.warning(
            "%s: the trees were fitted on the descriptors of another RDKit (%s; this one "
            "computes %s): their part of each prediction may be off",
            folder,
            trees.descriptor_set,
            descriptor_set_id(),
        )
    return trees


def save_embedder(folder: str | Path, model) -> None:
    """Keep ``model`` (the run's starting model) as the trees' embedder: its config as JSON
    and its weights, in ``folder/embedder.pt``."""
    config = json.dumps(model.config.to_dict())
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    save_checkpoint(Path(folder) / "embedder.pt", {"config": config, "model": state})


def load_embedder(folder: str | Path, device: torch.device):
    """The trees' embedder (a :class:`~graphormer_urpe.graph.model.Graphormer` in eval mode),
    or ``None`` where the trees read no graph token."""
    path = Path(folder) / "embedder.pt"
    if not path.exists():
        return None
    from ..graph.model import Graphormer
    from ..graph.model_config import GraphormerConfig

    ckpt = load_checkpoint(path)
    model = Graphormer(GraphormerConfig.from_dict(ckpt["config"]))
    model.load_state_dict(ckpt["model"])
    return model.to(device).eval()


def graph_tokens(out: Tensor, targets: int, dim: int) -> Tensor:
    """The graph token ``[B, d]`` in the output ``[B, T + d + K]`` of
    :class:`~graphormer_urpe.inference.embeddings.WithHeadInput` around the embedder."""
    return out[:, targets : targets + dim]
