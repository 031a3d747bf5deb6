"""The train / valid / test datasets of one source, as every loader returns them.

:class:`DatasetSplits` is what :func:`~.registry.load_dataset` gives a run: three datasets,
the featuriser, the target names, the metric and what the input policy left out. It lives
below the registry and the sources so that every one of them can build it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torch import Tensor
from torch.utils.data import Dataset

from .metrics import regression_metrics
from .split_indices import SPLITS

if TYPE_CHECKING:
    from .store import MoleculeFailure

__all__ = ["DatasetSplits", "mol_feature_count", "unreadable_by_split"]


@dataclass
class DatasetSplits:
    """Train / valid / test datasets of one source, with its featuriser and metric.

    Attributes:
        name: the dataset name (``"nci5k"``, ``"zinc"``, ``"csv:<path>"``, ...).
        train: a :class:`~graphormer_urpe.datasets.store.StoreGraphDataset`; each ``Data``
            has integer ``x`` ``[N, F]``, ``edge_index`` ``[2, E]``, integer ``edge_attr``,
            ``y`` ``[1, T]`` float (``NaN`` = missing) and the ``GraphormerFeatures``
            attributes, decoded from the store when read.
        valid: as ``train``.
        test: as ``train``.
        featurizer: ``"zinc"`` or ``"ogb"`` (decides the embedding table sizes).
        target_names: ``[T]`` target names.
        metric: the selection metric (a key of :meth:`evaluate`'s result).
        task_type: ``"regression"`` (L1 / MSE loss) or ``"binary"`` (one logit per task,
            BCE-with-logits loss, missing labels masked).
        higher_is_better: direction of ``metric`` (``True`` for ROC-AUC / AP).
        evaluator: ``(y_pred [N, T], y_true [N, T]) -> {metric: value, ...}`` replacing the
            default MAE / RMSE (e.g. OGB's evaluator); ``None`` for the default.
        max_nodes: the ``max_nodes`` the splits were filtered with (``None``: no limit).
        dropped_train_unlabelled: training graphs left out because every target is missing.
        dropped_train_oversize: training graphs left out because they have more than
            ``max_nodes`` atoms (graphs counted above are not counted again).
        oversize_valid: validation graphs with more than ``max_nodes`` atoms (kept).
        oversize_test: test graphs with more than ``max_nodes`` atoms (kept).
        unreadable: source rows that gave no graph, by split (``"train"``, ``"valid"``,
            ``"test"``) where the source labels its splits, else ``"unsplit"`` (rows left out
            before a random or scaffold split); empty when none.
        pretrain: for a pretraining set (``pretrain:PATH``, :mod:`.sources.pretrain`), what its
            checkpoints record: source, split, the descriptor names, their normalisation and
            the RDKit version (JSON-friendly); ``None`` otherwise.
        mol_features: with per-molecule features (:mod:`.mol_features`), what a run records
            to reproduce them: ``{"kind", "descriptors"}`` (the training split's normaliser,
            JSON-friendly); ``None`` otherwise.
    """

    name: str
    train: Dataset
    valid: Dataset
    test: Dataset
    featurizer: str
    target_names: list[str]
    metric: str = "mae"
    task_type: str = "regression"
    higher_is_better: bool = False
    evaluator: Callable[[Tensor, Tensor], dict[str, float]] | None = None
    max_nodes: int | None = None
    dropped_train_unlabelled: int = 0
    dropped_train_oversize: int = 0
    oversize_valid: int = 0
    oversize_test: int = 0
    unreadable: dict[str, int] = field(default_factory=dict)
    pretrain: dict | None = None
    mol_features: dict | None = None

    def __post_init__(self) -> None:
        if self.task_type not in ("regression", "binary"):
            raise ValueError(f"task_type must be 'regression' or 'binary', got {self.task_type!r}")

    @property
    def num_targets(self) -> int:
        """Number of regression targets ``T``."""
        return len(self.target_names)

    @property
    def num_mol_features(self) -> int:
        """``K``, per-molecule features of each graph (``data.mol_x``); 0 without."""
        return 0 if self.mol_features is None else mol_feature_count(self.mol_features)

    def input_report(self) -> dict[str, int | None]:
        """What :func:`apply_input_policy` left out or flagged, for a run's metrics.

        Returns:
            ``{"max_nodes", "dropped_train_unlabelled", "dropped_train_oversize",
            "oversize_valid", "oversize_test", "unreadable_train", "unreadable_valid",
            "unreadable_test", "unreadable_unsplit"}``.
        """
        return {
            "max_nodes": self.max_nodes,
            "dropped_train_unlabelled": self.dropped_train_unlabelled,
            "dropped_train_oversize": self.dropped_train_oversize,
            "oversize_valid": self.oversize_valid,
            "oversize_test": self.oversize_test,
            **{
                f"unreadable_{k}": self.unreadable.get(k, 0)
                for k in ("train", "valid", "test", "unsplit")
            },
        }

    def evaluate(self, y_pred: Tensor, y_true: Tensor) -> dict[str, float]:
        """Metrics of predictions ``[N, T]`` against targets ``[N, T]`` (``NaN`` ignored).

        Returns:
            ``{"mae": ..., "rmse": ...}`` (plus per-target entries when ``T > 1``), or what
            :attr:`evaluator` returns when set.
        """
        if self.evaluator is not None:
            return self.evaluator(y_pred, y_true)
        return regression_metrics(y_pred, y_true, self.target_names)

    def __repr__(self) -> str:
        names = self.target_names
        targets = names if len(names) <= 8 else f"[{names[0]!r}, ... {len(names)} targets]"
        return (
            f"DatasetSplits(name={self.name!r}, train={len(self.train)}, "
            f"valid={len(self.valid)}, test={len(self.test)}, featurizer={self.featurizer!r}, "
            f"targets={targets}, metric={self.metric!r}, task={self.task_type!r})"
        )


def mol_feature_count(record: dict) -> int:
    """``K`` of a run's recorded molecule features (:attr:`DatasetSplits.mol_features`): its
    descriptors, then its Morgan counts' bits."""
    names = record.get("descriptors", {}).get("names", [])
    return len(names) + int(record.get("morgan", {}).get("bits", 0))


def unreadable_by_split(failures: Sequence[MoleculeFailure], method: str) -> dict[str, int]:
    """Failed rows by split (their labels) for a column split, else all ``"unsplit"``."""
    if not failures:
        return {}
    if method != "column":
        return {"unsplit": len(failures)}
    counts = Counter(SPLITS[f.split] if f.split >= 0 else "unsplit" for f in failures)
    return dict(counts)
