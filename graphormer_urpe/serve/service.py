"""A served model: loaded once, as ``predict`` loads it, and asked by every request.

:class:`ModelService` holds the model (or an ensemble's members), its calibrator and its
training-domain record; it predicts SMILES through a :class:`~.batcher.Batcher` (so that
concurrent requests share forward passes), lays rows out with ``predict``'s own
:class:`~graphormer_urpe.inference.engines.predict_io.PredictionLayout` (the same columns, the same
numbers), explains molecules with ``explain``'s
:class:`~graphormer_urpe.inference.explain.explainer.Explainer` and describes the model.

Example::

    service = ModelService.load("runs/esol/best.pt")
    table = service.predict(["CCO", "c1ccccc1O"], level=0.9).result()  # a PredictionTable
    service.close()
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..inference.engines.predict_io import Prediction, PredictionLayout
from ..inference.engines.stream import StreamModel, default_threads
from ..inference.intervals.calibration import (
    LEVELS,
    Calibration,
    checked_calibration,
    load_calibration,
)
from ..inference.loading import LoadedModel, load_models
from .batcher import Batcher
from .limits import LimitExceeded, ServeLimits, too_many_atoms

__all__ = ["ModelService", "PredictionTable", "level_key"]

log = logging.getLogger(__name__)

TRIM_SLACK = 64 * 2**20
"""Bytes the server's resident memory may grow by before freed heap memory is handed back to
the operating system (``StreamModel(trim_slack=...)``). Many small batches of ever-different
shapes fragment the heap, so an untrimmed server grows; a slack below a batch's own tensors
hands the heap back after nearly every batch, and every freed page comes back as a page fault;
this slack trims seldom and keeps the memory within it (measured: docs/results/serve.md)."""


def level_key(level: float | None) -> float | None:
    """An interval level as the server keeps it: four decimals (a calibrator keeps one
    quantile per level asked for, so levels a client sends are not each a new entry)."""
    if level is None:
        return None
    if not (isinstance(level, (int, float)) and 0.0 < level < 1.0):
        raise LimitExceeded(422, f"the interval level must lie between 0 and 1, got {level}")
    key = round(float(level), 4)
    if not 0.0 < key < 1.0:
        raise LimitExceeded(422, f"the interval level {level} rounds to {key}, outside (0, 1)")
    return key


@dataclass
class PredictionTable:
    """The rows of one request, laid out as ``predict`` writes them.

    Attributes:
        layout: the columns and how a prediction fills them.
        predictions: one per input row, in input order.
    """

    layout: PredictionLayout
    predictions: list[Prediction]

    @property
    def columns(self) -> list[str]:
        """The column names (``predict``'s CSV header)."""
        return self.layout.header

    def records(self) -> list[dict[str, Any]]:
        """One ``{column: value}`` per row: numbers as numbers (``None`` where empty), the
        domain label and the error as text (``None`` where there is none)."""
        layout, header = self.layout, self.columns
        width = len(layout.value_columns)
        out = []
        for p in self.predictions:
            first: list[Any] = [p.smiles, p.name or ""] if layout.names else [p.smiles]
            if p.values is None:
                numbers: list[Any] = [None] * width
            else:
                numbers = [None if not math.isfinite(v) else v for v in layout.numbers(p)]
            label, sim = layout.domain_of(p)
            cells = [*first, *numbers, label or None, sim, p.error]
            out.append(dict(zip(header, cells, strict=True)))
        return out

    def csv_rows(self) -> list[list[str]]:
        """The header, then ``predict``'s CSV cells of every row."""
        return [self.columns, *(self.layout.row(p) for p in self.predictions)]


@dataclass
class ModelService:
    """A model (or an ensemble) behind the server. Build it with :meth:`load`.

    Attributes:
        checkpoint: the checkpoint file or ensemble folder it was loaded from.
        models: the model, or the ensemble's members.
        calibration: the run's calibrator (``None``: none).
        limits: what one request may ask.
        units: the unit of each target where known (``{target: unit}``).
        batcher: the shared batches of :meth:`predict`.
    """

    checkpoint: Path
    models: list[LoadedModel]
    calibration: Calibration | None
    limits: ServeLimits
    batcher: Batcher
    units: dict[str, str] = field(default_factory=dict)
    _explainer: Any = field(default=None, repr=False)
    _explain_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def load(
        cls,
        checkpoint: str | Path,
        *,
        limits: ServeLimits | None = None,
        device: str = "auto",
        workers: int = 1,
        threads: int | None = None,
        batch_size: int = 256,
        units: dict[str, str] | None = None,
    ) -> ModelService:
        """Load ``checkpoint`` (a ``best.pt`` or an ensemble's folder; weights only, as
        ``predict`` does) with its calibrator, and start the batcher.

        Args:
            workers: featurising processes (0: in the server's own threads).
            threads: torch threads for the model (default: the cores the workers leave).
            batch_size: molecules per forward pass.
            units: ``{target: unit}`` for the targets whose unit is known.

        Raises:
            ValueError: a unit for a target the model does not predict.
        """
        limits = limits or ServeLimits()
        torch.set_num_threads(threads or default_threads(workers))
        models = load_models(checkpoint, device)
        loaded = models[0]
        units = dict(units or {})
        unknown = sorted(set(units) - set(loaded.target_names))
        if unknown:
            raise ValueError(
                f"units given for {', '.join(unknown)}, which {checkpoint} does not predict; "
                f"its targets: {', '.join(loaded.target_names)}"
            )
        stream = StreamModel(models, batch_size=batch_size, trim_slack=TRIM_SLACK)
        batcher = Batcher(stream, workers, max_molecules=max(limits.max_molecules, batch_size))
        return cls(Path(checkpoint), models, load_calibration(checkpoint), limits, batcher, units)

    def close(self) -> None:
        """Stop the batcher's threads and processes."""
        self.batcher.close()

    @property
    def binary(self) -> bool:
        """The model gives probabilities of binary tasks."""
        return self.models[0].task_type == "binary"

    @property
    def target_names(self) -> list[str]:
        """The model's targets, in output order."""
        return list(self.models[0].target_names)

    # ----------------------------------------------------------------------------------
    # Predicting
    # ----------------------------------------------------------------------------------

    def layout(self, level: float | None, names: bool = False) -> PredictionLayout:
        """``predict``'s columns for an interval at ``level`` (``None``: none).

        Raises:
            LimitExceeded: 422, an interval that cannot be given (a binary task, or a model
                without a calibrator: the message says how to build one).
        """
        loaded = self.models[0]
        try:
            # the checkpoint's name, not its path on this server
            name = self.checkpoint.name
            cal = checked_calibration(
                self.calibration, name, level, loaded.task_type, loaded.target_names
            )
        except ValueError as exc:
            raise LimitExceeded(422, str(exc).replace("--interval", "an interval")) from None
        return PredictionLayout(
            loaded.target_names,
            self.binary,
            std=len(self.models) > 1,
            domain=True,
            names=names,
            calibration=cal,
            level=level,
        )

    def check(self, smiles: Sequence[str]) -> None:
        """Refuse a request over the limits before any work.

        Raises:
            LimitExceeded: 422 no molecule; 413 more molecules than allowed; 422 a molecule
                of more heavy atoms than allowed (its rows named).
        """
        limits = self.limits
        if not smiles:
            raise LimitExceeded(422, "no SMILES given")
        if len(smiles) > limits.max_molecules:
            raise LimitExceeded(
                413,
                f"{len(smiles)} molecules in one request; this server takes at most "
                f"{limits.max_molecules} (send them in several requests)",
            )
        large = too_many_atoms(smiles, limits.max_atoms)
        if large:
            rows = ", ".join(f"row {i} ({n} heavy atoms)" for i, n in large[:5])
            more = f" and {len(large) - 5} more" if len(large) > 5 else ""
            raise LimitExceeded(
                422,
                f"molecules larger than this server's limit of {limits.max_atoms} heavy atoms: "
                f"{rows}{more}",
            )

    def predict(
        self,
        smiles: Sequence[str],
        level: float | None = None,
        names: Sequence[str | None] | None = None,
        errors: Sequence[str | None] | None = None,
    ) -> Future:
        """A future of the :class:`PredictionTable` of ``smiles`` (checked against the
        limits first: :meth:`check`), each row with its ``names`` and, where ``errors`` gives
        one (an SD record RDKit cannot read), that error in place of a prediction.

        Raises:
            LimitExceeded: see :meth:`check` and :meth:`layout`.
        """
        smiles = [s if isinstance(s, str) else str(s) for s in smiles]
        self.check(smiles)
        layout = self.layout(level_key(level), names is not None)
        inner = self.batcher.submit(smiles)
        outer: Future = Future()

        def done(f: Future) -> None:
            if f.cancelled():
                outer.cancel()
                return
            if f.exception() is not None:
                outer.set_exception(f.exception())
                return
            rows = f.result()
            for k in range(len(rows)):
                error = errors[k] if errors is not None else None
                if error is not None:
                    rows[k] = rows[k]._replace(values=None, members=None, domain=None, error=error)
                if names is not None:
                    rows[k] = rows[k]._replace(name=names[k])
            if not outer.done():
                outer.set_result(PredictionTable(layout, rows))

        def cancel(f: Future) -> None:
            if f.cancelled():
                inner.cancel()

        outer.add_done_callback(cancel)
        inner.add_done_callback(done)
        return outer

    async def predict_async(self, smiles: Sequence[str], **kw: Any) -> PredictionTable:
        """:meth:`predict`, awaited, within the request time limit.

        Raises:
            LimitExceeded: see :meth:`predict`; 408 the predictions took longer than the
                limit (the request is dropped).
        """
        future = asyncio.wrap_future(self.predict(smiles, **kw))
        try:
            return await asyncio.wait_for(future, self.limits.request_seconds)
        except asyncio.TimeoutError:
            raise LimitExceeded(408, self.timeout_message("predictions")) from None

    def timeout_message(self, what: str) -> str:
        """Why a request that took too long was dropped."""
        return (
            f"the {what} took longer than this server's limit of "
            f"{self.limits.request_seconds:g} s per request (send fewer molecules)"
        )

    # ----------------------------------------------------------------------------------
    # Explaining
    # ----------------------------------------------------------------------------------

    def explain(self, smiles: Sequence[str], target: str | None = None) -> list[dict[str, Any]]:
        """Each molecule's atom contributions and its picture (SVG), one at a time (the
        explanations of concurrent requests wait for each other).

        Returns:
            One dict per SMILES: ``smiles``, ``target`` (the one the picture colours),
            ``atoms`` (``[{index, element, contributions: {target: value}}]``),
            ``prediction`` and ``baseline`` (``{target: value}``), ``svg`` (``None`` with
            ``error`` or ``picture_error`` where there is none).

        Raises:
            LimitExceeded: more molecules than allowed, too large ones, an unknown target.
        """
        from ..inference.explain.drawing import TooLargeToDraw, draw_contributions
        from ..inference.explain.explainer import Explainer
        from ..inference.explain.writing import picture_index, picture_title

        limits = self.limits
        if len(smiles) > limits.max_explain:
            raise LimitExceeded(
                413,
                f"{len(smiles)} molecules to explain in one request; this server explains at "
                f"most {limits.max_explain} per request",
            )
        self.check(smiles)
        try:
            j = picture_index(self.target_names, target)
        except ValueError as exc:
            raise LimitExceeded(422, str(exc).replace("--picture-target", "target")) from None
        names = self.target_names
        out = []
        with self._explain_lock:
            if self._explainer is None:
                self._explainer = Explainer.from_loaded(
                    self.models, permutations=limits.permutations
                )
            explanations = [self._explainer.explain(s, i) for i, s in enumerate(smiles)]
        for e in explanations:
            item: dict[str, Any] = {"smiles": e.smiles, "target": names[j], "error": e.error}
            if e.error is not None:
                out.append({**item, "atoms": [], "prediction": None, "baseline": None})
                out[-1]["svg"] = None
                continue
            item["atoms"] = [
                {
                    "index": i,
                    "element": el,
                    "contributions": dict(zip(names, map(float, e.contributions[i]), strict=True)),
                }
                for i, el in enumerate(e.elements)
            ]
            item["prediction"] = dict(zip(names, map(float, e.prediction), strict=True))
            item["baseline"] = dict(zip(names, map(float, e.baseline), strict=True))
            try:
                title = picture_title(e, names[j], j, self.binary)
                item["svg"] = draw_contributions(e.smiles, e.contributions[:, j], title, "svg")
            except TooLargeToDraw as exc:
                item["svg"], item["picture_error"] = None, str(exc)
            out.append(item)
        return out

    # ----------------------------------------------------------------------------------
    # Describing
    # ----------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """What ``GET /model`` answers: the targets (with units where known), the task,
        the training data's size, the run's metrics, the calibration and, with a trees head,
        each member's network weights in the blend."""
        loaded = self.models[0]
        metrics = _run_metrics(self.checkpoint)
        train = metrics.get("train_graphs")
        if train is None and loaded.domain is not None:
            train = loaded.domain.molecules
        cal = self.calibration
        calibration: dict[str, Any] | None = None
        if cal is not None:
            calibration = {"source": cal.source}
            if cal.task_type == "regression":
                calibration["difficulty"] = cal.difficulty
                calibration["molecules"] = [len(s) for s in cal.scores]
                calibration["levels"] = list(LEVELS)
            else:
                calibration["temperature"] = cal.temperature
                calibration["ece"] = cal.ece
        metric_keys = ("test_", "best_valid_", "baseline_test_")
        return {
            "checkpoint": self.checkpoint.name,
            "task_type": loaded.task_type,
            "targets": [{"name": n, "unit": self.units.get(n)} for n in loaded.target_names],
            "columns": self.layout(None).header,
            "ensemble_members": len(self.models),
            "featurizer": loaded.featurizer,
            "parameters": sum(p.numel() for p in loaded.model.parameters()),
            "dataset": metrics.get("dataset"),
            "training_molecules": train,
            "metric": loaded.metric,
            "metrics": {
                k: v
                for k, v in metrics.items()
                if k.startswith(metric_keys) and isinstance(v, (int, float))
            },
            "calibration": calibration,
            "trees": None
            if loaded.trees is None
            else {"net_weight": [m.trees.net_weight for m in self.models if m.trees]},
            "intervals": cal is not None and cal.task_type == "regression",
            "domain": None if loaded.domain is None else loaded.domain.summary(),
            "limits": {
                "max_molecules": self.limits.max_molecules,
                "max_explain": self.limits.max_explain,
                "max_upload_bytes": self.limits.max_upload_bytes,
                "max_atoms": self.limits.max_atoms,
                "request_seconds": self.limits.request_seconds,
            },
        }


def _run_metrics(checkpoint: Path) -> dict[str, Any]:
    """The run's ``metrics.json`` (beside ``best.pt``, or in an ensemble's folder); ``{}``
    where there is none or it cannot be read."""
    folder = checkpoint if checkpoint.is_dir() else checkpoint.parent
    path = folder / "metrics.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
