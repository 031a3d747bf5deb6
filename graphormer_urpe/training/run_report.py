"""A training run's report: the test at the best checkpoint, ``metrics.json``,
``test_predictions.csv`` and the final log line."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..datasets.domain import split_similarity
from ..inference.intervals.calibration import CALIBRATION_FILE, calibration_report, fit_calibration
from ..io.checkpoint import load_checkpoint, write_atomic
from .history import History
from .pacing import MIN_USEFUL_EPOCHS
from .run_budget import RunBudget
from .run_epochs import split_outputs
from .run_state import RunParts, log
from .run_trees import RunTrees, blend_run_trees

__all__ = ["RunReport", "write_test_predictions"]


class RunReport:
    """The end of a run (``run``): :meth:`finish` tests its best checkpoint (blended with
    ``trees`` when the run has them) and writes ``metrics.json`` from its progress,
    ``history`` and ``budget``."""

    def __init__(
        self, run: RunParts, history: History, budget: RunBudget, trees: RunTrees | None
    ) -> None:
        self.launch, self.model, self.data = run.launch, run.model, run.data
        self.progress = run.progress
        self.history, self.budget, self.trees = history, budget, trees
        self.trees_record: dict[str, Any] | None = None  # set by the blend

    def finish(self) -> dict[str, Any]:
        """Test the best checkpoint; write and return ``metrics.json``."""
        launch, data = self.launch, self.data
        out, main, model = launch.out, launch.main, self.model.model
        if main and not (out / "best.pt").exists():
            raise RuntimeError(f"no validation result was recorded in {out}")
        if main:
            model.load_state_dict(load_checkpoint(out / "best.pt")["model"])
        launch.ctx.broadcast_state(model)
        test: dict[str, float] = {}
        y = data.targets["test"]  # [n_test, T]
        p = self._outputs("test") if data.test_labelled else None
        valid = self._outputs("valid") if data.splits.pretrain is None else None
        if self.trees is not None:  # the network's outputs blended with the trees'
            test.update(self._blend_trees(valid, p))
            valid = self.trees.trees.blend(valid[None], self.trees.outputs["valid"])[0]
            if p is not None:
                p = self.trees.trees.blend(p[None], self.trees.outputs["test"])[0]
        if p is not None:
            test.update(data.splits.evaluate(p, y))
            if main and data.splits.pretrain is None:  # not hundreds of descriptor columns
                write_test_predictions(out / "test_predictions.csv", data.splits, y, p)
        if valid is not None:
            test.update(self._calibrate(valid, p))
        metrics = self.metrics(test)
        if main:
            write_atomic(out / "metrics.json", json.dumps(metrics, indent=2).encode())
        self._log_final(test, int(torch.isfinite(y).any(dim=1).sum()))
        return metrics

    def _outputs(self, split: str) -> Tensor:
        return split_outputs(self.launch, self.model, self.data, split)

    def _log_final(self, test: dict[str, float], scored: int) -> None:
        """The run's last line: best validation, test over ``scored`` molecules, baseline."""
        data, progress, metric = self.data, self.progress, self.data.metric
        unreadable, baseline = data.splits.unreadable, data.baseline
        log.info(
            "best valid %s %.4f (epoch %d), test %s %s over %d test molecules (%s); mean "
            "predictor valid %.4f test %s%s",
            metric,
            progress.best,
            progress.best_epoch,
            metric,
            f"{test[metric]:.4f}" if data.test_labelled else "n/a (no labels)",
            scored,
            f"{unreadable.get('test', 0)} test rows unreadable"
            if "unsplit" not in unreadable
            else f"{unreadable['unsplit']} unreadable rows left out before splitting",
            baseline["valid"],
            "n/a" if baseline["test"] is None else f"{baseline['test']:.4f}",
            self._short_note(),
        )

    def _blend_trees(self, valid: Tensor, test: Tensor | None) -> dict[str, float]:
        """Choose the trees' blend on the validation outputs ``valid`` ``[n, T]`` (kept in
        ``trees_record`` for ``metrics.json``); the network's own test metric on its test
        outputs ``test`` (``None``: no test labels)."""
        assert self.trees is not None
        data, metric = self.data, self.data.metric
        record = blend_run_trees(
            self.trees, valid, data.targets["valid"], data.splits.task_type, metric, data.higher
        )
        log.info(
            "trees head: network weight %s in the blend (validation %s: network %s, trees %s, "
            "blend %s)",
            ", ".join(f"{w:.1f}" for w in record["net_weight"]),
            metric,
            *(
                ", ".join(f"{v[k]:.4f}" for v in record["valid"] if v) or "n/a"
                for k in ("network", "trees", "blend")
            ),
        )
        self.trees_record = record
        if test is None:
            return {}
        network = data.splits.evaluate(test, data.targets["test"])[metric]
        return {f"{metric}_network": network}

    def _calibrate(self, valid: Tensor, test_pred: Tensor | None) -> dict[str, float]:
        """Fit the calibrator on the validation split's predictions ``valid`` ``[n, T]`` and
        keep it (``calibration.json``, with ``valid_predictions.csv``, which an ensemble's
        calibrator reads); its test coverage and width (regression) or ECE (binary)."""
        data, out = self.data, self.launch.out
        y, splits = data.targets["valid"], data.splits
        if not bool(torch.isfinite(y).any()):
            return {}
        names = list(splits.target_names)
        similarity = {
            s: split_similarity(data.domain, getattr(splits, s)) for s in ("valid", "test")
        }
        cal = fit_calibration(
            valid[None], y, splits.task_type, names, chose_checkpoint=True,
            similarity=similarity["valid"],
        )  # fmt: skip
        if self.launch.main:
            cal.save(out / CALIBRATION_FILE)
            write_test_predictions(out / "valid_predictions.csv", splits, y, valid, "valid")
        if test_pred is None:
            return {}
        return calibration_report(
            cal, test_pred[None], data.targets["test"], similarity=similarity["test"]
        )

    @property
    def epochs_trained(self) -> float:
        """Epochs' worth of steps taken (fractional)."""
        return self.progress.epochs_trained(self.data.steps_per_epoch)

    def _short_note(self) -> str:
        """What the final line says of a run shorter than a few epochs (else ``""``)."""
        if self.epochs_trained >= MIN_USEFUL_EPOCHS:
            return ""
        return (
            f"; only {self.epochs_trained:.2g} epochs trained: too short to trust (at least "
            f"{MIN_USEFUL_EPOCHS} give the schedule room)"
        )

    def _init_record(self) -> dict[str, Any]:
        """``--init-from`` and its starting point's validation metric, for ``metrics.json``."""
        config, metric, rows = self.launch.config, self.data.metric, self.history.rows
        if not config.init_from:
            return {}
        init: dict[str, Any] = {"init_from": config.init_from}
        init.update(
            {
                f"init_valid_{metric}": r[f"valid_{metric}"]
                for r in rows[:1]
                if int(r["epoch"]) == -1
            }
        )
        return init

    def metrics(self, test: dict[str, float]) -> dict[str, Any]:
        """The ``metrics.json`` contents, with the test's metrics ``test``."""
        launch, data, progress, budget = self.launch, self.data, self.progress, self.budget
        config, splits, metric = launch.config, data.splits, data.metric
        note: dict[str, Any] = {}
        if splits.pretrain is not None:
            note["pretrain_descriptors"] = len(splits.target_names)
        if not data.test_labelled:
            note["test_note"] = f"the test split of {splits.name} has no labels; no test metric"
        seconds, trained = progress.train_seconds, self.epochs_trained
        return {
            "dataset": splits.name,
            "attention": self.model.model.config.attention,
            "preset": config.preset,
            "parameters": self.model.n_params,
            "steps": progress.step,
            "steps_planned": progress.total,
            "epochs": sum(int(r["epoch"]) >= 0 for r in self.history.rows),
            "epochs_trained": round(trained, 3),
            "short_run": trained < MIN_USEFUL_EPOCHS,
            "stopped_on_time": progress.timed_out,
            "time_limit_minutes": config.time_limit,
            **{f"best_valid_{k}": v for k, v in progress.best_metrics.items() if "/" not in k},
            f"best_valid_{metric}": progress.best,
            "best_epoch": progress.best_epoch,
            **{f"test_{k}": v for k, v in test.items()},
            f"baseline_valid_{metric}": data.baseline["valid"],
            f"baseline_test_{metric}": data.baseline["test"],
            "test_has_labels": data.test_labelled,
            **note,
            **self._init_record(),
            "task_type": splits.task_type,
            "higher_is_better": data.higher,
            "loss": data.loss_kind,
            "normalized_targets": data.loss_scale is not None,
            "train_graphs": len(splits.train),
            "valid_graphs": len(splits.valid),
            "test_graphs": len(splits.test),
            **splits.input_report(),
            "processes": launch.ctx.world_size,
            "batch_per_process": config.batch_size if config.max_tokens is None else None,
            "max_tokens": config.max_tokens,
            "global_batch": data.sampler.global_batch_size,  # a token budget's: the mean
            "wall_seconds": round(launch.clock() - progress.wall_start, 2),
            "train_seconds": round(seconds, 2),
            "graphs_per_second": round(progress.train_graphs / seconds, 2) if seconds else None,
            "device": str(launch.device),
            "precision": launch.precision.kind,
            "seed": config.seed,
            "trees": self.trees_record,
            "measured_costs": None if budget.costs is None else budget.costs.to_dict(),
            "pace": None if budget.pacer is None else round(budget.pacer.slowdown, 3),
        }


def write_test_predictions(
    path: Path,
    splits: Any,
    y_true: Tensor,
    y_pred: Tensor,
    split: str = "test",
    spread: Tensor | None = None,
    interval: tuple[np.ndarray, np.ndarray] | None = None,
) -> None:
    """``test_predictions.csv`` (``valid_predictions.csv``: ``split`` ``valid``): per molecule
    its SMILES (stores of SMILES sources), its source row, and per target the true value
    (``true_<target>``) and the prediction (``pred_<target>``, a probability for binary
    tasks); with ``spread`` an ensemble's std (``std_<target>``), with ``interval`` its
    bounds (``low_<target>``, ``high_<target>``); empty cells for missing labels.

    Args:
        path: the file.
        splits: the run's :class:`~graphormer_urpe.datasets.DatasetSplits`.
        y_true: ``[n, T]`` targets (``NaN`` = missing).
        y_pred: ``[n, T]`` model outputs (logits for binary tasks; an ensemble's mean).
        split: the split they are of.
        spread: ``[n, T]`` the members' std, on the scale of ``pred_`` (probabilities for
            binary tasks).
        interval: ``(low, high)``, ``[n, T]`` each, a regression's calibrated interval.
    """
    test = getattr(splits, split)
    if splits.task_type == "binary":
        y_pred = torch.sigmoid(y_pred)
    smiles = test.smiles() if getattr(test.store, "has_smiles", False) else None
    header = ([] if smiles is None else ["smiles"]) + ["source_row"]
    per_target = ["true", "pred"] + ["std"] * (spread is not None)
    per_target += ["low", "high"] if interval is not None else []
    for name in splits.target_names:
        header += [f"{what}_{name}" for what in per_target]
    columns = [y_pred.float()]
    if spread is not None:
        columns.append(spread.float())
    if interval is not None:
        columns += [torch.as_tensor(b).float() for b in interval]
    values = torch.stack(columns, dim=-1).tolist()  # [n, T, C]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    rows = test.source_index.tolist()
    for i, (t, p) in enumerate(zip(y_true.tolist(), values, strict=True)):
        cells = ([] if smiles is None else [smiles[i]]) + [rows[i]]
        for a, b in zip(t, p, strict=True):
            cells += ["" if math.isnan(a) else f"{a:.6g}", *[f"{v:.6g}" for v in b]]
        writer.writerow(cells)
    write_atomic(path, buf.getvalue().encode())
