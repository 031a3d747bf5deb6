"""What a search optimises: the dataset and targets of its trials, the validation metric
that ranks them, and the fingerprint that ties a study to that data.

A study records its problem's fingerprint (:func:`fingerprint`): the content of the data
files (not their paths, which differ between machines that share a study), the targets,
the task and the split. A study name reused for other data is refused
(:func:`~graphormer_urpe.tuning.study.open_study`), so that trials of different problems
never mix.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..datasets.spec import names_table, parse_dataset_spec
from ..runtime.run_inputs import dataset_targets, load_splits, selection_metric
from ..runtime.train_config import TrainConfig

__all__ = ["Problem", "load_problem", "fingerprint", "MIN_VALID"]

MIN_VALID = 2
"""Labelled validation molecules a search needs at the least to rank its trials."""

# TrainConfig fields that define the data a study's trials see
_DATA_FIELDS = (
    "smiles_column",
    "target_columns",
    "split_column",
    "task",
    "split",
    "split_seed",
    "featurizer",
    "max_nodes",
)


@dataclass(frozen=True)
class Problem:
    """A search's data and objective.

    Attributes:
        dataset: the ``--dataset`` value.
        tag: a short name for folders and studies (a CSV's file stem, else the dataset).
        objective: the validation metric every trial is ranked on (``rmse`` for a plain
            regression, whatever its loss; the dataset's metric otherwise).
        maximize: whether a higher ``objective`` is better.
        task_type: ``regression`` or ``binary``.
        is_csv: a ``csv:`` set (per-molecule descriptors can be sampled).
        pretrained_fits: the shipped pretrained model's atom features are the set's.
        sizes: molecules per split, ``{"train", "valid", "test"}``.
        fingerprint: the data's fingerprint, stored with the study.
    """

    dataset: str
    tag: str
    objective: str
    maximize: bool
    task_type: str
    is_csv: bool
    pretrained_fits: bool
    sizes: dict[str, int]
    fingerprint: dict[str, Any]

    @property
    def digest(self) -> str:
        """A short hash of :attr:`fingerprint` (a default study name ends with it)."""
        text = json.dumps(self.fingerprint, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]


def load_problem(base: TrainConfig, tag: str) -> Problem:
    """Load the data of ``base`` (a trial's fixed fields) once, check that it can rank trials,
    and describe it.

    Raises:
        ValueError: the set cannot hold out a validation split, or too few of its
            validation molecules are labelled to rank trials.
    """
    try:
        splits = load_splits(base)
    except ValueError as exc:
        if "split is empty" not in str(exc):
            raise
        raise ValueError(f"tune ranks trials on a validation split, and {exc}") from None
    _check_valid(base.dataset, splits)
    objective = selection_metric(splits, "mse")
    return Problem(
        dataset=base.dataset,
        tag=tag,
        objective=objective,
        maximize=bool(splits.higher_is_better),
        task_type=splits.task_type,
        is_csv=names_table(base.dataset),
        pretrained_fits=splits.featurizer == "ogb",
        sizes={k: len(getattr(splits, k)) for k in ("train", "valid", "test")},
        fingerprint=fingerprint(base, objective),
    )


def _check_valid(dataset: str, splits: Any) -> None:
    """Refuse a validation split too small to rank trials (a binary task needs both
    classes of at least one target in it)."""
    y = dataset_targets(splits.valid)  # [N, T]
    labelled = int(y.isfinite().any(dim=1).sum())
    if labelled < MIN_VALID:
        raise ValueError(
            f"{dataset}: the validation split holds {labelled} labelled molecule(s); tune "
            f"needs at least {MIN_VALID} to rank trials: add molecules or give a split column"
        )
    if splits.task_type == "binary":
        both = any({0.0, 1.0} <= {float(v) for v in col[col.isfinite()].tolist()} for col in y.T)
        if not both:
            raise ValueError(
                f"{dataset}: no target has both classes in the validation split "
                f"({labelled} molecules), so ROC-AUC cannot rank trials: add molecules or "
                "give a split column"
            )


def fingerprint(config: TrainConfig, objective: str) -> dict[str, Any]:
    """The data's fingerprint: ``csv:`` files by the SHA-256 of their bytes, other sets by
    name, with the fields that choose targets, task and split, and the objective."""
    fp: dict[str, Any] = {f: getattr(config, f) for f in _DATA_FIELDS}
    fp["objective"] = objective
    spec = parse_dataset_spec(config.dataset)
    if spec.is_table:
        fp["files"] = [_sha256(Path(p)) for p in spec.paths]
    else:
        fp["dataset"] = config.dataset
    return fp


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
