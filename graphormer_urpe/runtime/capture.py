r"""Captured steps: the whole training step, or a forward pass, recorded once per batch shape
and replayed.

On a GPU a Graphormer step launches many small kernels (counted in docs/results/code-notes.md);
launched one by one from Python, the host cannot keep the GPU busy. A CUDA graph records those
launches once and replays them with one call. :class:`CapturedStep` does this for the whole training
step (forward, loss, backward, gradient clipping, the AdamW update and the device-side loss
totals), :class:`CapturedForward` for the forward pass of evaluation and prediction:

* batches come in a few static shapes (:class:`~graphormer_urpe.graph.static_shapes.StaticShapes`);
  each shape gets its own static input buffers and graph; a batch is copied into its shape's
  buffers and the graph replayed;
* a new shape's first ``warmup`` batches run as ordinary (eager) steps on a side stream, so
  that lazily initialised state (optimizer moments, kernel compilation, library handles)
  exists before the capture; the next batch of that shape is captured, then replayed;
* nothing in the step reads a value back to the host or sizes a tensor by the data (the
  static batch, whose token count is fixed too, and
  :class:`~graphormer_urpe.graph.encodings.GraphTokens` see to that); the step counter used
  by the loss totals lives on the device;
* the learning rate lives in a device tensor that the scheduler fills between steps
  (``capturable`` fused AdamW), so a replay uses the current rate;
* gradients are zeroed in place, never freed, so every graph reads and writes the same
  gradient tensors, and all graphs share one memory pool: nothing allocated inside a
  capture outlives it except what is copied into buffers made outside.

On the CPU the same class runs every step eagerly (no graph). Tests drive the capture logic
on the CPU with :class:`EagerGraphs`, whose "capture" records the step function and whose
"replay" calls it again on the static buffers: a step that read anything but those buffers
would give other results than an eager step.

The fast path cannot stop a run. If a capture fails (an operation that cannot be captured),
the run logs why and continues eagerly with the same static batches. A training step that
fails on the fast path at a batch shape's first use (its warm-up or capture, or the fused
attention kernel) is redone eagerly from the state before it (random generators and loss
totals restored), after the part that failed is turned off: the fused kernel when the error
came from it (:mod:`graphormer_urpe.attention.fused.guard`), else the capture. Each turn-off
logs one warning that names the flag that skips it from the start (``--no-capture``,
``--attention-kernel eager``). An error that the eager step raises too is the run's own and
is raised.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from ..attention.fused.guard import disable_fused, raised_by_fused_kernel
from ..attention.kernel_choice import fused_kernel_for
from ..graph.batch import GraphormerBatch
from ..io.checkpoint import rng_state, set_rng_state

__all__ = [
    "CaptureBackend",
    "CudaGraphs",
    "EagerGraphs",
    "CapturedStep",
    "CapturedForward",
    "default_backend",
    "device_learning_rates",
    "learning_rate",
    "portable_optimizer_state",
]

log = logging.getLogger(__name__)


class CaptureBackend(Protocol):
    """How a step is warmed up and captured."""

    def warm(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` once, eagerly (before its shape is captured)."""

    def capture(self, fn: Callable[[], Any]) -> Callable[[], None]:
        """Record ``fn`` without running it; the returned callable replays it."""


class CudaGraphs:
    """CUDA graphs sharing one memory pool, warmed up and captured on a side stream."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream(device)

    def warm(self, fn: Callable[[], Any]) -> None:
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        try:
            with torch.cuda.stream(self.stream):
                fn()
        finally:  # also after a failure: what follows runs after the side stream's work
            torch.cuda.current_stream(self.device).wait_stream(self.stream)

    def capture(self, fn: Callable[[], Any]) -> Callable[[], None]:
        graph = torch.cuda.CUDAGraph()
        # thread_local: the data loader's pinning thread may allocate during a capture
        with torch.cuda.graph(
            graph, pool=self.pool, stream=self.stream, capture_error_mode="thread_local"
        ):
            fn()
        return graph.replay


class EagerGraphs:
    """A stand-in for :class:`CudaGraphs` on any device: ``capture`` keeps the function and
    the replay calls it again. Counts what it did (``warmed``, ``captured``, ``replayed``)."""

    def __init__(self) -> None:
        self.warmed = self.captured = self.replayed = 0

    def warm(self, fn: Callable[[], Any]) -> None:
        self.warmed += 1
        fn()

    def capture(self, fn: Callable[[], Any]) -> Callable[[], None]:
        self.captured += 1

        def replay() -> None:
            self.replayed += 1
            fn()

        return replay


def _shape_key(batch: GraphormerBatch) -> tuple:
    """What a captured graph is specific to: the static shape and which optional tensors the
    batch has."""
    if batch.static_shape is None:
        raise ValueError("a captured step needs static batches (collate with static=...)")
    optional = tuple(getattr(batch, f) is None for f in ("y", "mol_features"))
    return (*batch.static_shape, batch.path_input.shape[1], batch.x.shape[2], optional)


class _StaticInputs:
    """Device buffers of one batch shape; :meth:`load` copies a batch into them."""

    def __init__(self, batch: GraphormerBatch, device: torch.device) -> None:
        self.batch = batch._apply(lambda t: t.to(device, copy=True))  # buffers of its own

    def load(self, batch: GraphormerBatch) -> GraphormerBatch:
        for dst, src in _tensor_pairs(self.batch, batch):
            dst.copy_(src, non_blocking=True)
        self.batch.real_graphs, self.batch.total_nodes = batch.real_graphs, batch.total_nodes
        return self.batch


def _tensor_pairs(a: GraphormerBatch, b: GraphormerBatch) -> list[tuple[Tensor, Tensor]]:
    pairs = [(getattr(a, f.name), getattr(b, f.name)) for f in fields(a)]
    return [(t, u) for t, u in pairs if isinstance(t, Tensor)]


def _sizes(batch: GraphormerBatch) -> tuple[int, ...]:
    """The sizes the fused kernel's compiled variants depend on: graphs and nodes."""
    return tuple(batch.x.shape[:2])


@dataclass
class _Entry:
    inputs: _StaticInputs
    warm: int = 0
    replay: Callable[[], None] | None = None


def default_backend(device: torch.device) -> CaptureBackend | None:
    """CUDA graphs on a CUDA device; ``None`` (eager) elsewhere."""
    return CudaGraphs(device) if device.type == "cuda" else None


_FAILED: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
"""Backends whose capture failed, and why."""


class _Captured:
    """The shape-keyed warm-up / capture / replay cycle shared by steps and forward passes."""

    def __init__(self, device: torch.device, backend: CaptureBackend | None, warmup: int):
        self.device = device
        self.backend = backend  # None: every call eager
        self.warmup = warmup
        self.entries: dict[tuple, _Entry] = {}

    @property
    def shapes(self) -> int:
        """Batch shapes captured so far."""
        return sum(e.replay is not None for e in self.entries.values())

    def run(self, batch: GraphormerBatch, body: Callable[[GraphormerBatch], Any]) -> None:
        """Run ``body`` on ``batch``: eagerly, as a warm-up, or by replaying its capture."""
        if self.backend is None or self.failed is not None:
            body(batch)
            return
        key = _shape_key(batch)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry(_StaticInputs(batch, self.device))
        static = entry.inputs.load(batch)
        if entry.replay is None and entry.warm < self.warmup:
            entry.warm += 1
            self.backend.warm(lambda: body(static))
            return
        if entry.replay is None:
            try:
                entry.replay = self.backend.capture(lambda: body(static))
            except Exception as exc:  # an operation that cannot be captured: go on eagerly
                self.fail(exc)
                body(static)
                return
            log.debug("captured batch shape %s (%d so far)", key, self.shapes)
        entry.replay()

    @property
    def failed(self) -> str | None:
        """Why capturing stopped (for every cycle of this backend), or ``None``."""
        return None if self.backend is None else _FAILED.get(self.backend)

    def fail(self, exc: BaseException) -> None:
        """Stop capturing for good after ``exc``, in every cycle of this backend (training
        steps and evaluation passes alike), with one warning that says how to skip capturing
        from the start."""
        self.entries.clear()
        if self.backend is None or self.failed is not None:
            return
        _FAILED[self.backend] = f"{type(exc).__name__}: {exc}"
        log.debug("the capture's error", exc_info=exc)  # where it came from
        log.warning(
            "capturing the step as a CUDA graph failed, continuing eagerly (%s); --no-capture "
            "runs eagerly from the start",
            self.failed,
        )

    def proven(self, batch: GraphormerBatch) -> bool:
        """Whether ``batch``'s shape has run on the fast path before: captured and replayed,
        or (not capturing) run once."""
        if self.backend is None or self.failed is not None or batch.static_shape is None:
            return False
        entry = self.entries.get(_shape_key(batch))
        return entry is not None and entry.replay is not None


class CapturedStep:
    """A training step captured per batch shape (see the module docstring).

    Args:
        optimizer: fused AdamW (:func:`~graphormer_urpe.training.steps.make_optimizer`); its
            groups get a device learning rate (and, on CUDA, ``capturable``) at the first
            capture, which a later ``load_state_dict`` must not replace.
        scheduler: stepped on the host after every step (it fills the device rates).
        step_fn: ``step_fn(batch, set_to_none, step) -> loss``, the step's body without the
            scheduler (:func:`~graphormer_urpe.training.steps.step_body` with its other
            arguments bound): ``set_to_none`` is ``False`` for captured steps (gradients
            zeroed in place) and ``step`` then a ``[]`` float64 device tensor.
        device: where the model is.
        backend: how to capture (:func:`default_backend`); ``None``: every step eager.
        warmup: eager steps of each new batch shape before its capture.
        keep: device tensors that ``step_fn`` updates before it can fail (the loss totals),
            restored with the random generators before a failed step is redone.
        retry: redo a step that failed on the fast path eagerly (see the module docstring);
            ``False`` raises instead (several processes, whose gradient exchange a failed
            backward leaves half done).

    Batches may come from the host (pinned): a captured step copies them into its buffers,
    an eager one moves them to ``device``.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        step_fn: Callable[[GraphormerBatch, bool, Tensor | int], Tensor],
        device: torch.device,
        backend: CaptureBackend | None = None,
        warmup: int = 2,
        keep: Sequence[Tensor] = (),
        retry: bool = True,
    ) -> None:
        self.optimizer, self.scheduler, self.step_fn = optimizer, scheduler, step_fn
        self.cycle = _Captured(device, backend, warmup)
        self.step_index = torch.zeros((), dtype=torch.float64, device=device)  # []
        self.keep, self.retry = list(keep), retry
        self._tried: set[tuple] = set()  # batch sizes that ran the fused kernel eagerly
        self._prepared = False

    @property
    def captured(self) -> bool:
        """Whether steps are replayed from captures (not eager)."""
        return self.cycle.backend is not None and self.cycle.failed is None

    def __call__(self, batch: GraphormerBatch, step: int) -> None:
        """One optimizer step on ``batch`` (step ``step`` of the run, 0-based)."""
        if self.retry and self._first_use(batch):
            self._guarded(batch, step)
        else:
            self._step(batch, step)
        self.scheduler.step()

    def _first_use(self, batch: GraphormerBatch) -> bool:
        """Whether the step on ``batch`` is a first use of the fast path: its shape not yet
        captured and replayed, or (not capturing) its sizes not yet run by the fused kernel."""
        if self.cycle.proven(batch):
            return False
        if self.captured:
            return True
        device = self.step_index.device
        return fused_kernel_for(device) and _sizes(batch) not in self._tried

    def _guarded(self, batch: GraphormerBatch, step: int) -> None:
        """The step, redone eagerly from the state before it if it fails on the fast path."""
        device = self.step_index.device
        saved, kept = rng_state(device), [t.clone() for t in self.keep]
        off: set[str] = set()
        while True:
            try:
                self._step(batch, step)
                break
            except Exception as exc:
                part = self._turn_off(exc, off)
                if part is None:
                    raise  # the eager step fails too: the run's own error
                off.add(part)
                set_rng_state(saved, device)
                for t, value in zip(self.keep, kept, strict=True):
                    t.copy_(value)
        self._tried.add(_sizes(batch))

    def _turn_off(self, exc: BaseException, off: set[str]) -> str | None:
        """Turn off the part of the fast path that raised ``exc`` (each warns once), unless
        it is in ``off`` already; which part (``"fused"``, ``"capture"``) or ``None``."""
        if "fused" not in off and raised_by_fused_kernel(exc):
            disable_fused(self.step_index.device, exc)
            return "fused"
        if "capture" not in off and self.captured:
            self.cycle.fail(exc)
            return "capture"
        return None

    def _step(self, batch: GraphormerBatch, step: int) -> None:
        """The step without the scheduler: eagerly, or through the capture cycle."""
        if not self.captured:
            self.step_fn(batch.to(self.step_index.device, non_blocking=True), True, step)
        else:
            self.step_index.fill_(step)  # read on the device by the loss totals
            if not self._prepared and self._shape_warm(batch):
                device_learning_rates(self.optimizer, self.step_index.device)
                self._prepared = True
            self.cycle.run(batch, lambda b: self.step_fn(b, False, self.step_index))

    def _shape_warm(self, batch: GraphormerBatch) -> bool:
        """Whether ``batch``'s shape is due for its capture at this call."""
        entry = self.cycle.entries.get(_shape_key(batch))
        return entry is not None and entry.warm >= self.cycle.warmup


class CapturedForward:
    """Forward passes of a model in evaluation mode, captured per batch shape.

    Args:
        model: the model; called as ``model(batch)`` under ``autocast``.
        autocast: a context-manager factory (mixed precision), or ``None``.
        device: where the model is.
        backend: as for :class:`CapturedStep`.
        warmup: eager passes of each new batch shape before its capture.
    """

    def __init__(
        self,
        model: nn.Module,
        autocast: Callable[[], contextlib.AbstractContextManager] | None,
        device: torch.device,
        backend: CaptureBackend | None = None,
        warmup: int = 1,
    ) -> None:
        self.model = model
        self.autocast = autocast or contextlib.nullcontext
        self.cycle = _Captured(device, backend, warmup)
        self.outputs: dict[tuple, Tensor] = {}

    @torch.no_grad()
    def __call__(self, batch: GraphormerBatch) -> Tensor:
        """``[B, T]`` float32 predictions of the batch's real graphs (a new tensor)."""
        if self.cycle.backend is None or self.cycle.failed is not None:
            with self.autocast():
                out = self.model(batch.to(self.cycle.device, non_blocking=True))
            return out[: batch.num_graphs].float()
        key = _shape_key(batch)
        try:
            self.cycle.run(batch, lambda b: self._body(key, b))
        except Exception as exc:
            if self.cycle.proven(batch):
                raise
            self.cycle.fail(exc)  # the shape's warm-up failed: eagerly from now on
            return self(batch)
        return self.outputs[key][: batch.num_graphs].clone()

    def _body(self, key: tuple, batch: GraphormerBatch) -> None:
        with self.autocast():
            out = self.model(batch)
        if key not in self.outputs:  # made at the first (eager) pass: outside any capture
            self.outputs[key] = torch.empty(out.shape, dtype=torch.float32, device=out.device)
        self.outputs[key].copy_(out)


def device_learning_rates(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Give every parameter group a learning rate in a device tensor (and, on CUDA,
    ``capturable``), so that a captured update reads the rate the scheduler last set."""
    for group in optimizer.param_groups:
        if not isinstance(group["lr"], Tensor):
            group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=device)
        if device.type == "cuda":
            group["capturable"] = True


def portable_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` with plain-float learning rates and ``capturable`` off, so
    that a checkpoint of a captured run loads anywhere (a CPU run included)."""
    state = optimizer.state_dict()
    for group in state["param_groups"]:
        if isinstance(group.get("lr"), Tensor):
            group["lr"] = float(group["lr"])
        if "capturable" in group:
            group["capturable"] = False
    return state


def learning_rate(optimizer: torch.optim.Optimizer) -> float:
    """The first parameter group's current learning rate, as a float."""
    return float(optimizer.param_groups[0]["lr"])
