"""The training loop: AdamW, linear warm-up + linear decay, masked L1/MSE/BCE, best-checkpointing.

:func:`train` runs a whole experiment from a :class:`~graphormer_urpe.training.config.TrainConfig`
and writes into ``config.out``:

* ``config.json``: the resolved config (model included)
* ``history.csv``: one row per evaluated epoch (TensorBoard events too when installed)
* ``checkpoints/step-<step>.pt``: rolling checkpoints (the newest ``keep_checkpoints``), written
  at every epoch end and every ``checkpoint_every`` steps, each holding model, optimizer,
  scheduler, grad scaler, every process's RNG states and the data position (epoch, batch);
  ``last.pt`` is the newest of them and ``best.pt`` the best validation epoch (all atomic,
  loaded with ``torch.load(weights_only=True)``). SIGTERM / SIGINT save one at the current
  step before stopping; ``resume=True`` continues exactly where a checkpoint left off.
* ``metrics.json``: dataset, attention, preset, parameters, steps, epochs,
  ``best_valid_<metric>``, ``test_<metric>`` at the best checkpoint (only when the test split
  has labels: ``test_has_labels``), the mean-predictor baseline, wall time and training graphs
  per second.

A pretraining set (``pretrain:PATH``, see :mod:`graphormer_urpe.datasets.pretrain`) is trained
like any multi-target regression; its checkpoints also hold ``"pretrain"`` (the descriptor
names, their normalisation and the RDKit version), and its test split writes no
``test_predictions.csv``.

The dataset decides the loss and the selection rule: ``task_type == "binary"`` trains one
logit per task with BCE (missing labels masked), otherwise ``config.loss`` (by default MSE for
``csv:`` datasets, selected on RMSE, and L1 for the benchmarks, selected on their metric); the
best checkpoint maximises the metric when ``higher_is_better`` (ROC-AUC, AP) and minimises it
otherwise. A ``csv:`` regression also standardises its targets (``normalize_targets``): the
model's head predicts ``(y - mean) / std`` of the training split, the loss is taken in those
units, and the model returns predictions in the targets' own.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import logging
import math
import os
import random
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.optim import AdamW
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from ..attention_kernel import attention_kernel
from ..graph.batch import GraphormerBatch, GraphormerCollator
from ..graph.model import Graphormer, GraphormerConfig, fit_tables
from ..graph.shapes import StaticShapes
from ..io.checkpoint import (
    CheckpointKeeper,
    TrainingInterrupted,
    incompatible_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
    stop_requests,
    write_atomic,
)
from .budget import MIN_USEFUL_EPOCHS, Pacer, RunCosts, Schedule, epochs_of
from .capture import (
    CaptureBackend,
    CapturedForward,
    CapturedStep,
    default_backend,
    learning_rate,
    portable_optimizer_state,
)
from .config import TrainConfig, plan_steps
from .distributed import DistContext, gather_in_order, init_distributed
from .sampler import EpochBatchSampler

if TYPE_CHECKING:
    from ..datasets import DatasetSplits

__all__ = [
    "train",
    "TrainingInterrupted",
    "stop_requests",
    "predict",
    "masked_loss",
    "linear_schedule",
    "resolve_device",
    "Precision",
    "build_model",
    "make_optimizer",
    "parameter_groups",
    "load_splits",
    "make_loader",
    "dataset_targets",
    "seed_everything",
    "train_step",
    "step_body",
    "predict_dataset",
    "StepTotals",
]

log = logging.getLogger(__name__)

PACE_WINDOW = 5.0
"""Seconds of steps over which a time-limited run measures its pace."""

TIMED_STEPS = 5
"""A run without measured costs logs its plan, with the duration it expects, once this many
of its own steps (after the first) are timed."""

READ_EVERY = 100
"""Training steps between two reads of the running loss by the host (see :func:`train_step`)."""


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeds code that uses the global RNG
    torch.manual_seed(seed)


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` → the first CUDA GPU when available, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} requested but CUDA is not available")
    return device


class Precision:
    """Autocast and gradient scaling for one of ``fp32``, ``bf16``, ``fp16`` (or ``auto``).

    ``auto`` picks bfloat16 autocast on CUDA GPUs that support it, float16 with a gradient
    scaler on older GPUs, and float32 on the CPU.
    """

    def __init__(self, kind: str, device: torch.device) -> None:
        if kind == "auto":
            if device.type == "cuda":
                kind = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
            else:
                kind = "fp32"
        if kind not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"precision must be auto, fp32, bf16 or fp16, got {kind!r}")
        self.kind = kind
        self.device = device
        self.dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[kind]
        self.scaler = torch.amp.GradScaler(device.type, enabled=kind == "fp16")

    def autocast(self, cache: bool = True) -> contextlib.AbstractContextManager:
        """The autocast region (nothing for ``fp32``); ``cache=False`` for captured steps,
        whose weight casts must be recomputed at every replay."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=cache)


def linear_schedule(step: int, warmup: int, total: int, peak: float, end: float) -> float:
    """Graphormer's schedule: linear warm-up from 0 to ``peak``, then linear decay to ``end``.

    Returns the learning rate at ``step`` (0-based count of optimizer steps already taken).
    """
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    if step >= total:
        return end
    frac = (step - warmup) / max(1, total - warmup)
    return end + (peak - end) * (1.0 - frac)


def masked_loss(
    pred: Tensor, target: Tensor, kind: str = "l1", scale: Tensor | None = None
) -> Tensor:
    """Mean L1 (``l1``), squared error (``mse``), smooth L1 (``smooth_l1``: squared below 1,
    absolute above) or binary cross-entropy on logits (``bce``, targets 0/1) over the finite
    entries of ``target`` (``[B, T]`` each); with ``scale`` ``[T]`` (regression), of
    ``pred / scale`` against ``target / scale`` (standardised targets' units)."""
    mask = torch.isfinite(target)
    filled = torch.where(mask, target, torch.zeros_like(target)).float()
    if scale is not None:
        pred, filled = pred.float() / scale, filled / scale
    if kind == "bce":
        err = nn.functional.binary_cross_entropy_with_logits(pred.float(), filled, reduction="none")
    elif kind == "smooth_l1":
        err = nn.functional.smooth_l1_loss(pred.float(), filled, reduction="none")
    else:
        diff = pred.float() - filled
        err = diff.abs() if kind == "l1" else diff.square()
    return (err * mask).sum() / mask.sum().clamp(min=1)


def dataset_targets(dataset: Dataset) -> Tensor:
    """All targets of a dataset of graphs as ``[N, T]`` float (``NaN``: missing), read without
    building the graphs where the storage allows it."""
    from ..datasets import target_values

    if len(dataset) == 0:
        raise ValueError("the dataset is empty")
    return torch.from_numpy(target_values(dataset)).float()


def make_loader(
    dataset: Dataset,
    config: GraphormerConfig,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    num_workers: int = 0,
    pin_memory: bool = False,
) -> DataLoader:
    """A ``DataLoader`` yielding :class:`GraphormerBatch` es for ``dataset``."""
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        collate_fn=GraphormerCollator(config.multi_hop_max_dist, config.spatial_pos_max),
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
    )


def parameter_groups(
    model: nn.Module, weight_decay: float, urpe_weight_decay: float
) -> list[dict[str, Any]]:
    """AdamW parameter groups: URPE's ``C`` tables apart from everything else.

    Every parameter that is not part of a :class:`~graphormer_urpe.graph.encodings.SpatialScale`
    (weights, biases, LayerNorm scales and shifts, embedding tables, the head) is in group
    ``"default"`` with ``weight_decay``; the ``C`` tables (``scale`` ``[L or 1, K, H]`` and
    ``graph_token_scale`` ``[2, H]``) are in group ``"urpe_c"`` with ``urpe_weight_decay``.
    Decay pulls ``C`` towards 0 (masking attention), not towards its initial 1 (plain RPE
    attention). Models without URPE get the one default group.
    """
    from ..graph.encodings import SpatialScale

    scale = [p for m in model.modules() if isinstance(m, SpatialScale) for p in m.parameters()]
    ids = {id(p) for p in scale}
    rest = [p for p in model.parameters() if id(p) not in ids]
    groups: list[dict[str, Any]] = [
        {"params": rest, "weight_decay": weight_decay, "name": "default"}
    ]
    if scale:
        groups.append({"params": scale, "weight_decay": urpe_weight_decay, "name": "urpe_c"})
    return groups


def make_optimizer(
    params: Iterable[nn.Parameter] | list[dict[str, Any]], lr: float, weight_decay: float
) -> AdamW:
    """Graphormer's AdamW (betas 0.9/0.999, eps 1e-8), with PyTorch's fused kernel.

    ``params`` are parameters or parameter groups (:func:`parameter_groups`); ``weight_decay``
    applies to groups that set none. The fused implementation updates all parameters in one
    pass per tensor (about 2.7x faster than the default loop on a CPU for the 47M-parameter
    PCQM4Mv2-base model) with the same arithmetic; it is used on CPUs and CUDA GPUs, the
    default elsewhere.
    """
    params = list(params)
    tensors = [q for g in params for q in (g["params"] if isinstance(g, dict) else [g])]
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype.is_floating_point for p in tensors)
    return AdamW(
        params,
        lr=lr,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=weight_decay,
        fused=fused or None,
    )


def _default_loss(splits: DatasetSplits) -> str:
    """The regression loss when none is given: squared error for ``csv:`` datasets (a user's
    own data, as Chemprop), L1 for the benchmarks (whose metric is MAE)."""
    return "mse" if splits.name.startswith("csv:") else "l1"


def selection_metric(splits: DatasetSplits, loss: str) -> str:
    """The validation metric that picks the best checkpoint: the dataset's, except that a
    regression trained with ``mse`` on the default metrics selects on RMSE (what it trains
    for) instead of MAE."""
    if splits.task_type == "regression" and splits.evaluator is None and loss == "mse":
        return "rmse"
    return splits.metric


def _work(sizes: np.ndarray, index: Sequence[int]) -> float:
    """A batch's padded size, ``B (n + 1)^2`` for its ``B`` graphs of at most ``n`` atoms
    (``sizes``: every graph's atom count): what its time follows."""
    index = np.asarray(index, dtype=np.int64)
    return float(index.size * (int(sizes[index].max()) + 1) ** 2) if index.size else 0.0


def _read(dataset: Dataset, index: list[int]) -> list:
    """The graphs ``index`` of ``dataset``, read as a ``DataLoader`` reads a batch (through
    ``__getitems__`` where the dataset has it: the stores decode a batch at once)."""
    many = getattr(dataset, "__getitems__", None)
    return list(many(index)) if many is not None else [dataset[i] for i in index]


def build_model(
    config: GraphormerConfig, featurizer: str, num_targets: int, num_mol_features: int = 0
) -> Graphormer:
    """The model for a dataset: tables grown to fit its featuriser, one output per target,
    ``num_mol_features`` per-molecule features joined before the head."""
    scaling = {} if config.num_targets == num_targets else {"target_mean": None, "target_std": None}
    config = replace(config, num_targets=num_targets, num_mol_features=num_mol_features, **scaling)
    return Graphormer(fit_tables(config, featurizer))


@torch.no_grad()
def predict(
    model: nn.Module,
    loader: DataLoader,
    device: torch.device,
    precision: Precision | None = None,
    progress: bool = False,
    desc: str = "predict",
    forward: CapturedForward | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Predictions ``[N, T]`` (float32, CPU) and targets ``[N, T]`` (or ``None``); with
    ``forward`` (static batches), its captured passes of ``model``."""
    model.eval()
    preds, ys = [], []
    ctx = precision.autocast if precision is not None else contextlib.nullcontext
    for batch in tqdm(loader, desc=desc, disable=None if progress else True, leave=False):
        if forward is not None:
            out = forward(batch)
        else:
            with ctx():
                out = model(batch.to(device, non_blocking=True))[: batch.num_graphs]
        preds.append(out.float().cpu())
        if batch.y is not None:
            ys.append(batch.y[: batch.num_graphs].cpu())
    y = torch.cat(ys) if len(ys) == len(preds) and ys else None
    return torch.cat(preds), y


def predict_dataset(
    model: Graphormer,
    dataset: Dataset,
    batch_size: int,
    device: torch.device,
    precision: Precision,
    progress: bool = False,
    desc: str = "predict",
) -> tuple[Tensor, Tensor | None]:
    """:func:`predict` over ``dataset`` in order; on one CUDA GPU through static batches and
    forward passes captured per batch shape (:class:`~graphormer_urpe.training.capture.
    CapturedForward`)."""
    backend = default_backend(device)
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        collate_fn=_collator(model.config, device, batch_size if backend else None),
        pin_memory=device.type == "cuda",
    )
    forward = None
    if backend is not None:
        forward = CapturedForward(model, lambda: precision.autocast(False), device, backend)
    return predict(model, loader, device, precision, progress, desc, forward)


class StepTotals:
    """Running totals of the training steps, kept on the device so that a step reads nothing
    back to the host; :meth:`read` fetches them (one synchronisation) when the loop needs them.

    Attributes:
        loss_sum: ``[]`` float64, sum of this epoch's finite step losses.
        steps: ``[]`` float64, steps added to ``loss_sum``.
        first_bad: ``[]`` float64, the first step (0-based) whose loss was not finite, or -1.
        skip: ``[]`` float32, 1 once a loss was not finite: the fused AdamW skips every update
            from then on (its ``found_inf``), so the weights stay those before that step.
    """

    def __init__(self, device: torch.device) -> None:
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.steps = torch.zeros((), dtype=torch.float64, device=device)
        self.first_bad = torch.tensor(-1.0, dtype=torch.float64, device=device)
        self.skip = torch.zeros((), dtype=torch.float32, device=device)

    def add(self, loss: Tensor, step: int | Tensor) -> None:
        """Account for one step's loss ``[]`` (no host-device synchronisation); ``step`` is
        the step's index, a number or a ``[]`` float64 tensor on the device."""
        loss = loss.detach().double()
        bad = ~torch.isfinite(loss)
        self.loss_sum += torch.where(bad, torch.zeros_like(loss), loss)
        self.steps += 1
        self.first_bad.copy_(torch.where(bad & (self.first_bad < 0), step, self.first_bad))
        self.skip.copy_(torch.maximum(self.skip, bad.float()))

    def reset(self) -> None:
        """Zero the loss sum and the step count (on the device)."""
        self.loss_sum.zero_()
        self.steps.zero_()

    def read(self) -> tuple[float, int, int]:
        """``(loss_sum, steps, first_bad)`` on the host (``first_bad`` -1: all finite)."""
        values = torch.stack([self.loss_sum, self.steps, self.first_bad]).tolist()
        return values[0], int(values[1]), int(values[2])


def train_step(
    net: nn.Module,
    batch: GraphormerBatch,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    precision: Precision,
    totals: StepTotals,
    step: int,
    loss_kind: str = "l1",
    clip_norm: float | None = None,
    loss_scale: Tensor | None = None,
) -> Tensor:
    """One optimizer step on ``batch`` (already on the device); returns the loss ``[]``.

    Nothing is read back to the host: the loss goes into ``totals`` on the device, and a
    non-finite loss does not stop the step but makes the fused AdamW skip this and every
    later update (``totals.skip`` as its ``found_inf``), until the loop reads ``totals``.
    With float16 the grad scaler skips steps whose gradients overflow instead.
    """
    loss = step_body(
        net, batch, optimizer, precision, totals, step, loss_kind, clip_norm, loss_scale
    )
    scheduler.step()
    return loss


def step_body(
    net: nn.Module,
    batch: GraphormerBatch,
    optimizer: torch.optim.Optimizer,
    precision: Precision,
    totals: StepTotals,
    step: int | Tensor,
    loss_kind: str = "l1",
    clip_norm: float | None = None,
    loss_scale: Tensor | None = None,
    set_to_none: bool = True,
    autocast_cache: bool = True,
) -> Tensor:
    """:func:`train_step` without the scheduler: what a captured step records
    (:class:`~graphormer_urpe.training.capture.CapturedStep`), with ``step`` a ``[]`` device
    tensor, gradients zeroed in place (``set_to_none=False``) and no autocast cache."""
    with precision.autocast(autocast_cache):
        pred = net(batch)
    loss = masked_loss(pred, batch.y, loss_kind, loss_scale)
    totals.add(loss, step)
    optimizer.zero_grad(set_to_none=set_to_none)
    precision.scaler.scale(loss).backward()
    if clip_norm:
        precision.scaler.unscale_(optimizer)
        params = [p for g in optimizer.param_groups for p in g["params"]]
        nn.utils.clip_grad_norm_(params, clip_norm)
    if optimizer.defaults.get("fused") and not precision.scaler.is_enabled():
        optimizer.found_inf = totals.skip  # read by the fused kernel on the device
    precision.scaler.step(optimizer)
    precision.scaler.update()
    return loss


class _History:
    """Per-epoch metric rows: CSV (rewritten atomically) and TensorBoard when installed."""

    def __init__(self, out: Path, rows: list[dict[str, Any]], write: bool = True) -> None:
        self.path = out / "history.csv"
        self.rows = rows
        self.write = write
        self.tb = None
        if not write:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out / "tensorboard"))
        except Exception:  # tensorboard is optional
            self.tb = None

    def add(self, row: dict[str, Any]) -> None:
        """Append ``row``; a row of the same epoch as the last one (an epoch cut short by
        ``--time-limit`` and finished after ``--resume``) replaces it, so that each epoch has
        one row."""
        if self.rows and int(self.rows[-1]["epoch"]) == int(row["epoch"]):
            self.rows[-1] = row
        else:
            self.rows.append(row)
        if not self.write:
            return
        keys: list[str] = []
        for r in self.rows:
            keys.extend(k for k in r if k not in keys)
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=keys)
        writer.writeheader()
        writer.writerows(self.rows)
        write_atomic(self.path, buf.getvalue())
        if self.tb is not None:
            for k, v in row.items():
                if k not in ("epoch", "step") and isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, row["step"])
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def load_splits(config: TrainConfig, mol_features_record: dict | None = None):
    """The :class:`~graphormer_urpe.datasets.DatasetSplits` a run's config names
    (``mol_features_record``: a checkpoint's ``"mol_features"``, whose normalisation then
    applies instead of the training split's own)."""
    from ..datasets import load_dataset

    return load_dataset(
        config.dataset,
        root=config.data_root,
        multi_hop_max_dist=config.model.multi_hop_max_dist,
        strict=config.strict,
        smiles_column=config.smiles_column,
        target_columns=config.target_columns,
        split_column=config.split_column,
        task=config.task,
        split=config.split,
        seed=config.split_seed,
        featurizer=config.featurizer,
        max_nodes=config.max_nodes,
        cache_dir=config.cache_dir,
        workers=config.preprocess_workers,
        mol_features=config.mol_features,
        mol_features_record=mol_features_record,
    )


def _time_up(limit_minutes: float | None, start: float) -> bool:
    """Whether a budget of ``limit_minutes`` (``None``: none) counted from ``start`` is spent."""
    return limit_minutes is not None and time.perf_counter() - start >= 60 * limit_minutes


def loader_workers(requested: int | None, device: torch.device) -> int:
    """Data-loader processes: ``requested``, or by default none on the CPU and
    ``min(8, cores - 2)`` (at least 1) beside a GPU."""
    if requested is not None:
        return requested
    if device.type != "cuda":
        return 0
    return min(8, max(1, (os.cpu_count() or 2) - 2))


def _collator(
    config: GraphormerConfig, device: torch.device, static_batch: int | None = None
) -> GraphormerCollator:
    """The run's collate function: static shapes of ``static_batch`` graphs for captured
    steps; else, on GPUs, attention lengths padded to a multiple of 8 (tensor cores)."""
    pad = 8 if device.type == "cuda" else 1
    static = None
    if static_batch is not None:
        static = StaticShapes(static_batch, config.multi_hop_max_dist)
    return GraphormerCollator(config.multi_hop_max_dist, config.spatial_pos_max, pad, static)


def _eval_loader(
    dataset: Dataset,
    config: GraphormerConfig,
    batch_size: int,
    ctx: DistContext,
    workers: int,
    static: bool = False,
) -> tuple[DataLoader, Tensor]:
    """This process's share of an evaluation split (graphs ``rank::world``, none twice) and
    their positions ``[n_r]``."""
    index = torch.arange(ctx.rank, len(dataset), ctx.world_size)
    batches = [index[i : i + batch_size].tolist() for i in range(0, len(index), batch_size)]
    loader = DataLoader(
        dataset,
        batch_sampler=batches,
        collate_fn=_collator(config, ctx.device, batch_size if static else None),
        num_workers=workers,
        pin_memory=ctx.device.type == "cuda",
        persistent_workers=workers > 0 and len(batches) > 0,
        generator=torch.Generator(),  # never draw from the global RNG
    )
    return loader, index


def _evaluate(
    model: nn.Module,
    loader: DataLoader,
    index: Tensor,
    total: int,
    num_targets: int,
    ctx: DistContext,
    precision: Precision,
    forward: CapturedForward | None = None,
) -> Tensor:
    """Predictions ``[total, T]`` for a whole split, each graph computed by one process."""
    if len(index):
        pred, _ = predict(model, loader, ctx.device, precision, forward=forward)
    else:
        pred = torch.empty(0, num_targets)
    return gather_in_order(ctx, index, pred, total)


# Fields a resumed run takes from the new command line; all others come from the checkpoint.
_PER_LAUNCH_FIELDS = (
    "out",
    "device",
    "checkpoint_every",
    "keep_checkpoints",
    "num_workers",
    "threads",
    "time_limit",
    "capture",
    "attention_kernel",
)


def train(
    config: TrainConfig,
    resume: bool = False,
    progress: bool = True,
    started: float | None = None,
    costs: RunCosts | None = None,
    check: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """Train, select on the validation split, test at the best checkpoint; see module doc.

    Under ``torchrun`` (``WORLD_SIZE > 1`` in the environment) this runs distributed data
    parallel: ``config.batch_size`` graphs per process and step, metrics over whole splits,
    rank 0 writing everything.

    Args:
        config: the run.
        resume: continue from the newest checkpoint in ``config.out`` when there is one (the
            saved config wins, except for ``out``, ``device`` and the checkpointing fields).
        progress: show a tqdm progress bar.
        started: the ``time.perf_counter()`` from which ``config.time_limit`` counts (default:
            now; the command line passes its own start).
        costs: the run's costs measured earlier (an ensemble measures once); ``None``:
            measured here where needed (:class:`~graphormer_urpe.training.budget.RunCosts`).
        check: called with the set-up run before its first step (it may refuse the plan by
            raising).

    Returns:
        The ``metrics.json`` contents (``measured_costs`` among them).

    Raises:
        TrainingInterrupted: SIGTERM or SIGINT arrived; a checkpoint was saved first.
        RuntimeError: the loss became non-finite (the last good state is in ``nonfinite.pt``).
    """
    ctx = init_distributed(resolve_device(config.device))
    try:
        with stop_requests() as stop:
            return _train(config, ctx, resume, progress, stop, started, costs, check)
    finally:
        ctx.close()


def _train(
    config: TrainConfig,
    ctx: DistContext,
    resume: bool,
    progress: bool,
    stop: dict[str, int],
    started: float | None = None,
    costs: RunCosts | None = None,
    check: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    with attention_kernel(config.attention_kernel):
        run = _Run(config, ctx, resume, stop, started, costs)
        if check is not None:
            check(run)
        if run.no_time is not None:
            run.discard()
            raise RuntimeError(run.no_time)
        run.evaluate_starting_point()
        run.fit(progress)
        return run.finish()


class _Run:
    """One training run: what a checkpoint saves, and the phases that change it.

    ``__init__`` sets everything up (resumed from a checkpoint when asked), :meth:`fit` trains
    epoch by epoch, :meth:`finish` tests the best checkpoint and writes ``metrics.json``.
    """

    def __init__(
        self,
        config: TrainConfig,
        ctx: DistContext,
        resume: bool,
        stop: dict[str, int],
        started: float | None = None,
        costs: RunCosts | None = None,
    ) -> None:
        self.launch_start = time.perf_counter() if started is None else started
        self.no_time: str | None = None  # why the time limit leaves no time to train
        self.ctx, self.stop, self.device = ctx, stop, ctx.device
        self.main = ctx.is_main
        self.out = Path(config.out)
        self.keeper = CheckpointKeeper(self.out, config.keep_checkpoints)
        config, ckpt, ckpt_path = self._resumed_config(config, resume)
        if config.init_from and ckpt is None:  # before any data is loaded or folder made
            from .pretrained import check_init_source

            check_init_source(config.init_from)
        self.precision = Precision(config.precision, self.device)
        seed_everything(config.seed)
        if config.threads:
            torch.set_num_threads(config.threads)
        self.splits = self._load_splits(config)
        self._after_plan: list[str] = []  # set-up lines: the plan's duration comes first
        self.domain = self._domain_record() if self.main else None
        if self.main:  # only once the data loaded: a failed start leaves no empty run folder
            self.out.mkdir(parents=True, exist_ok=True)
        self.model, self.init_report = self._build_model(config, ckpt)
        loss = config.loss or _default_loss(self.splits)
        self.config = replace(config, model=self.model.config, loss=loss)  # config.json: both
        self.n_params = sum(p.numel() for p in self.model.parameters())
        self.metric = selection_metric(self.splits, loss)
        if ctx.enabled:  # different dropout masks per process
            torch.manual_seed(self.config.seed * 1_000 + ctx.rank)
        self.backend = self._capture_backend()  # None: steps run eagerly
        self.forward = None  # captured evaluation passes
        if self.backend is not None:
            self.forward = CapturedForward(
                self.model, lambda: self.precision.autocast(False), self.device, self.backend
            )
        self._make_loaders()
        self._targets_and_baselines()
        self.costs = self._costs(costs)  # None: not measured (no time limit, a large model)
        if self.config.fill_time_limit and self.config.max_steps is None:
            steps = self._steps_for_budget()
            self.config = replace(self.config, max_steps=steps, epochs=None)
        self.total, self.epochs, warmup = plan_steps(self.config, len(self.sampler))
        self.config = replace(self.config, warmup_steps=warmup)  # config.json records it
        self.pacer = self._pacer()
        if self.main:
            write_atomic(self.out / "config.json", self.config.to_json())
        self._make_optimizer(ckpt, ckpt_path, warmup)
        self._log_plan(warmup)
        # the position and what has been recorded so far (a checkpoint restores them)
        self.epoch, self.start_batch, self.step = 0, 0, 0
        self.best, self.best_epoch = (-math.inf if self.higher else math.inf), -1
        self.best_metrics: dict[str, float] = {}  # every validation metric at the best epoch
        self.train_seconds, self.train_graphs = 0.0, 0
        self.loss_sum, self.loss_count = 0.0, 0  # the current epoch's training loss so far
        rows: list[dict[str, Any]] = []
        if ckpt is not None:
            rows = self._restore(ckpt, ckpt_path)
        self.history = _History(self.out, [], write=self.main)
        for r in rows:
            self.history.add(r)
        self.net = self._wrap(self.model)
        # Steps read nothing back from the device (see train_step); the host reads the running
        # totals every READ_EVERY steps, at checkpoints, at stop requests and at epoch ends.
        # Without the fused AdamW (which skips updates after a non-finite loss on the device),
        # they are read after every step, so that a non-finite loss stops the run at once.
        self.read_every = READ_EVERY if self.optimizer.defaults.get("fused") else 1
        if ctx.enabled and self.config.time_limit:  # all processes must stop at the same step
            self.read_every = 1
        self.totals = StepTotals(self.device)
        self.stepper = self._stepper(self.net, self.optimizer, self.scheduler, self.totals)
        self.timed_out = False

    # ----------------------------------------------------------------------------------
    # Set-up
    # ----------------------------------------------------------------------------------

    def _resumed_config(
        self, config: TrainConfig, resume: bool
    ) -> tuple[TrainConfig, dict[str, Any] | None, Path | None]:
        """The config to run (the checkpoint's, with this launch's per-launch fields) and the
        checkpoint to continue from, when resuming and there is one."""
        found = self.keeper.latest() if resume else None
        if found is None:
            if resume:
                log.info("nothing to resume in %s: starting afresh", self.out)
            return config, None, None
        path, ckpt = found
        with incompatible_checkpoint(path):
            saved = TrainConfig.from_dict(ckpt["config"])
        config = replace(saved, **{f: getattr(config, f) for f in _PER_LAUNCH_FIELDS})
        log.info("resuming from %s (step %d)", path, ckpt["step"])
        return config, ckpt, path

    def _load_splits(self, config: TrainConfig):
        # one process per machine builds any missing store; the others then read it
        if self.ctx.local_rank == 0:
            splits = load_splits(config)
        self.ctx.barrier()
        if self.ctx.local_rank != 0:
            splits = load_splits(config)
        for name in ("train", "valid", "test"):
            if len(getattr(splits, name)) == 0:
                raise ValueError(f"the {name} split of {splits.name} is empty")
        return splits

    def _domain_record(self) -> dict[str, Any] | None:
        """What the training molecules are made of, in the checkpoint form that ``predict``
        compares new molecules with (:mod:`~graphormer_urpe.datasets.domain`)."""
        from ..datasets.domain import domain_record

        start = time.perf_counter()
        record = domain_record(self.splits.train, self.splits.featurizer)
        if record is None:
            return None
        seconds = time.perf_counter() - start
        self._after_plan.append(f"domain record ({seconds:.1f} s): {record.summary()}")
        return record.to_dict()

    def _build_model(
        self, config: TrainConfig, ckpt: dict[str, Any] | None
    ) -> tuple[Graphormer, Any]:
        splits = self.splits
        if config.init_from and ckpt is None:
            from .pretrained import init_from_checkpoint

            model, report = init_from_checkpoint(
                config.init_from,
                config.model,
                splits.featurizer,
                splits.num_targets,
                splits.num_mol_features,
            )
        else:
            model = build_model(
                config.model, splits.featurizer, splits.num_targets, splits.num_mol_features
            )
            report = None
        if ckpt is None:  # a resumed run keeps the scaling it started with (in its config)
            model.set_target_scaling(*self._target_scaling(config))
        return model.to(self.device), report

    def _target_scaling(self, config: TrainConfig) -> tuple[list[float] | None, ...]:
        """The training targets' mean and standard deviation ``[T]`` each when the run
        standardises its targets (``normalize_targets``), else ``(None, None)``."""
        splits = self.splits
        on = config.normalize_targets
        if on is None:
            on = splits.name.startswith("csv:")
        if not on or splits.task_type != "regression":
            return None, None
        y = dataset_targets(splits.train).double()  # [N, T], NaN: missing
        mean = torch.nan_to_num(torch.nanmean(y, dim=0))
        std = torch.sqrt(torch.nanmean((y - mean).square(), dim=0))
        std = torch.where(torch.isfinite(std) & (std > 1e-8), std, torch.ones_like(std))
        self._after_plan.append(
            f"targets standardised with the training split's mean "
            f"{', '.join(f'{v:.4g}' for v in mean.tolist())} and std "
            f"{', '.join(f'{v:.4g}' for v in std.tolist())} (--no-normalize-targets turns this off)"
        )
        return mean.tolist(), std.tolist()

    def discard(self) -> None:
        """Remove what setting up this run wrote (its folder, when nothing else is in it),
        for a run refused before its first step."""
        if not self.main:
            return
        self.history.close()
        (self.out / "config.json").unlink(missing_ok=True)
        (self.out / "history.csv").unlink(missing_ok=True)
        shutil.rmtree(self.out / "tensorboard", ignore_errors=True)
        with contextlib.suppress(OSError):
            self.out.rmdir()  # only when nothing else is in it

    def _capture_backend(self) -> CaptureBackend | None:
        """How steps are captured (``config.capture``), or ``None``: eagerly."""
        config = self.config
        if not config.capture or self.device.type != "cuda":
            return None
        reason = (
            "several processes"
            if self.ctx.enabled
            else "--compile"
            if config.compile
            else "fp16, whose grad scaler decides on the host"
            if self.precision.kind == "fp16"
            else None
        )
        if reason is not None:
            log.info("training steps run eagerly (not captured as CUDA graphs): %s", reason)
            return None
        return default_backend(self.device)

    def _stepper(
        self,
        net: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        totals: StepTotals,
        precision: Precision | None = None,
    ) -> CapturedStep:
        """A training step of ``net`` (captured per batch shape when the run captures)."""
        config, precision = self.config, precision or self.precision

        def body(batch: GraphormerBatch, set_to_none: bool, step: int | Tensor) -> Tensor:
            return step_body(
                net, batch, optimizer, precision, totals, step, self.loss_kind,
                config.clip_norm, self.loss_scale, set_to_none, autocast_cache=set_to_none,
            )  # fmt: skip

        return CapturedStep(optimizer, scheduler, body, self.device, self.backend)

    def _make_loaders(self) -> None:
        from ..datasets import graph_sizes

        config, splits, ctx = self.config, self.splits, self.ctx
        static = self.backend is not None
        self.workers = loader_workers(config.num_workers, self.device)
        self.sampler = EpochBatchSampler(
            len(splits.train),
            config.batch_size,
            shuffle=True,
            seed=config.seed,
            num_replicas=ctx.world_size,
            rank=ctx.rank,
            sizes=graph_sizes(splits.train) if config.bucket_size else None,  # [n_train]
            bucket_size=config.bucket_size,
        )
        self.train_loader = DataLoader(
            splits.train,
            batch_sampler=self.sampler,
            collate_fn=_collator(
                self.model.config, self.device, config.batch_size if static else None
            ),
            num_workers=self.workers,
            pin_memory=self.device.type == "cuda",
            persistent_workers=False,  # a new epoch may start mid-way (resume)
            generator=torch.Generator(),  # the loader never draws from the global RNG
        )
        self.eval_loaders = {
            name: _eval_loader(
                getattr(splits, name),
                self.model.config,
                config.batch_size,
                ctx,
                self.workers,
                static,
            )
            for name in ("valid", "test")
        }

    def _out_of_time(self) -> bool:
        """Whether ``--time-limit`` leaves just the time to finish (the last validation, the
        best and last checkpoints, the test), at the pace the steps now run."""
        return self.pacer is not None and self.pacer.time_up(time.perf_counter())

    def _costs(self, given: RunCosts | None) -> RunCosts | None:
        """The run's measured costs: ``given`` (an ensemble's, measured once), else measured
        here when the run has a time limit; ``None`` without one (the run then times its own
        first steps for the duration it expects, :meth:`_log_plan`)."""
        if given is not None:  # (this run's own set-up; no measurement)
            return replace(given, setup=time.perf_counter() - self.launch_start, measure=0.0)
        if self.config.time_limit is None:
            return None
        return self._measure_costs()

    def _measure_costs(self) -> RunCosts:
        """What the run's parts cost on this machine (rank 0's measurement on every process).

        A few random batches of each split are timed (their own generator: the run's RNG is
        left as it was, so the run is the one ``--max-steps`` with the planned number gives):
        training steps (reading and collating a batch, forward, backward, clipping and the
        AdamW update, on a copy of the model; without DDP's gradient exchange), validation
        batches and a checkpoint write. A batch's time follows its padded size, ``B (n + 1)^2``
        for ``B`` graphs of at most ``n`` atoms (a batch holding one large molecule takes
        several times the median), so the seconds per unit of that size, measured, are
        applied to the sizes of the first epoch's batches and of the validation and test
        batches.
        """
        from ..datasets import graph_sizes

        splits, ctx = self.splits, self.ctx
        setup = time.perf_counter() - self.launch_start
        saved = rng_state(self.device)
        train_sizes = graph_sizes(splits.train)
        per_work, save_s = self._seconds_per_step(train_sizes)
        epoch = [b[ctx.rank :: ctx.world_size] for b in self.sampler.global_batches(0)]
        step_s = per_work * float(np.mean([_work(train_sizes, b) for b in epoch]))
        eval_s = {}
        for name in ("valid", "test"):
            dataset = getattr(splits, name)
            sizes = graph_sizes(dataset)
            loader = self.eval_loaders[name][0]
            work = sum(_work(sizes, b) for b in loader.batch_sampler)
            eval_s[name] = self._seconds_per_eval(dataset, sizes) * work if work else 0.0
        set_rng_state(saved, self.device)
        measure = time.perf_counter() - self.launch_start - setup
        measured = [step_s, eval_s["valid"], eval_s["test"], save_s, setup, measure]
        shared = ctx.all_sum(torch.tensor([v if self.main else 0.0 for v in measured]).double())
        step_s, valid_s, test_s, save_s, setup, measure = (float(v) for v in shared)
        test_s = test_s if self.test_labelled else 0.0
        steps, every = len(self.sampler), self.config.eval_every
        return RunCosts(step_s, valid_s, test_s, save_s, steps, every, setup, measure)

    def _steps_for_budget(self) -> int:
        """Optimizer steps that fill what is left of ``--time-limit`` (rank 0's plan): the
        measured costs (:meth:`_measure_costs`) share the budget left between the steps, each
        epoch's checkpoint, a validation (and a best checkpoint) every ``eval_every`` epochs
        and the finish, less a reserve (:class:`~graphormer_urpe.training.budget.Pacer`)."""
        config, costs = self.config, self.costs
        assert costs is not None
        budget = 60 * config.time_limit
        left = budget - (time.perf_counter() - self.launch_start)
        reserve = Pacer(0.0, costs, budget).reserve
        steps = costs.steps_for(left - reserve)
        if steps < 1:  # the data (a store built on this call) took the budget
            self.no_time = (
                f"--time-limit {config.time_limit:g}: {(budget - left) / 60:.2f} min went to "
                f"loading the data and measuring, leaving no time to train and test "
                f"({costs.finish:.3g} s for the final validation and test); the data's store "
                "is kept, so the same command now starts faster, or give a longer budget"
            )
            steps = 1
        steps = int(self.ctx.all_sum(torch.tensor([float(steps if self.main else 0)]))[0])
        epochs = steps / len(self.sampler)
        log.info(
            "time limit %g min without --epochs/--max-steps: %.3g s per step, %.3g s per "
            "validation and %.3g s per checkpoint measured; planned %d steps (%.1f epochs) "
            "to fill the %.3g min left",
            config.time_limit, costs.step, costs.valid, costs.save, steps, epochs, left / 60,
        )  # fmt: skip
        if epochs < MIN_USEFUL_EPOCHS:
            log.warning(
                "only %.1f epochs fit in --time-limit %g: a run this short is not worth much "
                "(%d epochs need about %.1f min here)",
                epochs, config.time_limit, MIN_USEFUL_EPOCHS, self.minutes_for(MIN_USEFUL_EPOCHS),
            )  # fmt: skip
        return steps

    def minutes_for(self, epochs: float) -> float:
        """Minutes a run of ``epochs`` epochs takes here, its set-up included."""
        assert self.costs is not None
        steps = math.ceil(epochs * len(self.sampler))
        return (self.costs.setup + self.costs.seconds_for(steps)) / 60

    def _pacer(self) -> Pacer | None:
        """The deadline keeper of a run with a time limit (and measured costs)."""
        if self.config.time_limit is None or self.costs is None:
            return None
        budget = 60 * self.config.time_limit
        return Pacer(self.launch_start + budget, replace(self.costs), budget, PACE_WINDOW)

    def _samples(self, dataset: Dataset, count: int) -> list[list[int]]:
        """``count`` batches' worth of random indices of ``dataset`` (fixed by the run's
        seed, apart from its RNG)."""
        rng = np.random.default_rng(self.config.seed)
        n = min(len(dataset), self.config.batch_size)
        return [rng.choice(len(dataset), size=n, replace=False).tolist() for _ in range(count)]

    def _seconds_per_step(self, sizes: np.ndarray, batches: int = 5) -> tuple[float, float]:
        """Seconds of a training step per unit of padded batch size (:func:`_work`), over
        ``batches`` random batches on a copy of the model (one untimed step first; when the
        run captures its steps, every batch's shape is warmed up and captured first), and the
        seconds of writing a checkpoint of the copy's weights and optimizer state."""
        config, static = self.config, self.backend is not None
        collate = _collator(self.model.config, self.device, config.batch_size if static else None)
        probe = copy.deepcopy(self.model).train()
        groups = parameter_groups(probe, config.weight_decay, config.urpe_weight_decay)
        opt = make_optimizer(groups, config.lr, config.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        precision, totals = Precision(self.precision.kind, self.device), StepTotals(self.device)
        step = self._stepper(probe, opt, sched, totals, precision)
        samples = self._samples(self.splits.train, batches + 1)
        warm = samples[:1]
        if static:  # each shape warmed up and captured, as the run will have it
            warm = [i for i in samples for _ in range(step.cycle.warmup + 1)]
        for i, index in enumerate(warm):
            step(collate(_read(self.splits.train, index)), i)
        seconds = work = 0.0
        for i, index in enumerate(samples[1:]):
            start = time.perf_counter()
            step(collate(_read(self.splits.train, index)), i)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            seconds, work = seconds + time.perf_counter() - start, work + _work(sizes, index)
        save_s = 0.0
        if self.main:
            with tempfile.TemporaryDirectory(dir=self.out) as tmp:
                start = time.perf_counter()
                state = {"model": probe.state_dict(), "optimizer": opt.state_dict()}
                save_checkpoint(Path(tmp) / "probe.pt", state)
                save_s = time.perf_counter() - start
        return seconds / work, save_s

    def _seconds_per_eval(self, dataset: Dataset, sizes: np.ndarray, batches: int = 3) -> float:
        """Seconds per unit of padded batch size (:func:`_work`) to read, collate and run
        (forward only) ``batches`` random batches of ``dataset``; one untimed batch first
        (every batch warmed up and captured first, when the run captures)."""
        if len(dataset) == 0:
            return 0.0
        static = self.forward is not None
        collate = _collator(
            self.model.config, self.device, self.config.batch_size if static else None
        )
        self.model.eval()
        samples = self._samples(dataset, batches + 1)
        warm = samples[:1]
        if self.forward is not None:
            warm = [i for i in samples for _ in range(self.forward.cycle.warmup + 1)]
        seconds = work = 0.0
        for i, index in enumerate(warm + samples[1:]):
            start = time.perf_counter()
            batch = collate(_read(dataset, index))
            if self.forward is not None:
                self.forward(batch)
            else:
                with torch.no_grad(), self.precision.autocast():
                    self.model(batch.to(self.device))
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            if i >= len(warm):
                seconds, work = seconds + time.perf_counter() - start, work + _work(sizes, index)
        self.model.train()
        return seconds / work

    def _make_optimizer(
        self, ckpt: dict[str, Any] | None, ckpt_path: Path | None, warmup: int
    ) -> None:
        config = self.config
        groups = parameter_groups(self.model, config.weight_decay, config.urpe_weight_decay)
        saved_groups = ckpt.get("optimizer", {}).get("param_groups", []) if ckpt else []
        if len(saved_groups) == 1 < len(groups):
            log.warning(
                "%s was written before URPE's C had its own weight-decay group: this run "
                "continues with one group (weight decay %g on C too), as it started",
                ckpt_path,
                config.weight_decay,
            )
            groups = list(self.model.parameters())
        self.optimizer = make_optimizer(groups, config.lr, config.weight_decay)
        # a re-plannable linear_schedule (see replan); checkpoints keep it
        self.schedule = Schedule(warmup, self.total, config.lr, config.end_lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: self.schedule(s) / config.lr
        )

    def _targets_and_baselines(self) -> None:
        """Loss and selection rule, the evaluation targets and the mean predictor's metric."""
        splits = self.splits
        # binary tasks: one logit per task and BCE; the metric's direction decides "best"
        self.loss_kind = "bce" if splits.task_type == "binary" else self.config.loss
        scaled = self.model.config.target_std is not None
        self.loss_scale = self.model.target_std if scaled else None  # [T]: standardised loss
        self.higher = splits.higher_is_better
        self.mean = torch.nanmean(dataset_targets(splits.train), dim=0, keepdim=True)  # [1, T]
        self.targets: dict[str, Tensor] = {}
        self.baseline: dict[str, float | None] = {}
        self.test_labelled = True
        for name in self.eval_loaders:
            y = self.targets[name] = dataset_targets(getattr(splits, name))
            if name == "test" and not bool(torch.isfinite(y).any()):
                self.test_labelled, self.baseline[name] = False, None  # e.g. PCQM4Mv2 test-dev
                log.info("the test split of %s has no labels: no test metric", splits.name)
                continue
            self.baseline[name] = splits.evaluate(self.mean.expand_as(y), y)[self.metric]

    def _log_plan(self, warmup: int, step_s: float | None = None) -> None:
        """The run's plan, starting with the duration it expects: from the measured costs,
        or from ``step_s``, its first steps' seconds each (without either, the line waits
        for :data:`TIMED_STEPS` steps, see :meth:`_train_epoch`)."""
        if self.costs is None and step_s is None:
            self._plan_pending = warmup
            return
        self._plan_pending = None
        splits, config = self.splits, self.config
        log.info(
            "%s%s: %d/%d/%d graphs, %d targets, %s features | %s %s, %d parameters | %d steps "
            "(%d epochs x %d), warm-up %d, batch %d x %d process(es) = %d graphs per step, "
            "peak lr %.2g, device %s, %s",
            self._expected(step_s),
            splits.name,
            len(splits.train),
            len(splits.valid),
            len(splits.test),
            splits.num_targets,
            splits.featurizer,
            config.preset,
            self.model.config.attention,
            self.n_params,
            self.total,
            self.epochs,
            len(self.sampler),
            warmup,
            config.batch_size,
            self.ctx.world_size,
            self.sampler.global_batch_size,
            config.lr,
            self.device,
            self.precision.kind,
        )
        for line in self._after_plan:
            log.info("%s", line)
        self._after_plan.clear()
        if config.time_limit is not None and config.fill_time_limit:
            log.info(
                "time limit %g min: the %d steps above are planned to fill it; the run still "
                "stops after the step that spends it",
                config.time_limit,
                self.total,
            )
        elif config.time_limit is not None:
            log.info(
                "time limit %g min: the learning-rate schedule stays planned over the %d steps "
                "above; the run stops after the step that spends the budget, wherever the "
                "schedule is",
                config.time_limit,
                self.total,
            )

    def _expected(self, step_s: float | None) -> str:
        """``"expected to take about X min here | "``: from the measured costs, or from
        ``step_s`` seconds per step (an evaluation batch taken as a third of a step)."""
        left = self.total - getattr(self, "step", 0)
        if self.costs is not None:
            seconds, how = self.costs.seconds_for(left), "measured"
        else:
            assert step_s is not None
            valid, test = (len(self.eval_loaders[n][0]) for n in ("valid", "test"))
            evals = math.ceil(left / len(self.sampler)) / self.config.eval_every
            seconds = step_s * (left + (evals * valid + test) / 3)
            how = "from its first steps"
        seconds += time.perf_counter() - self.launch_start
        if self.config.time_limit is not None:
            seconds = min(seconds, 60 * self.config.time_limit)
        return f"expected to take about {seconds / 60:.1f} min here ({how}) | "

    def _restore(self, ckpt: dict[str, Any], path: Path | None) -> list[dict[str, Any]]:
        """Load a checkpoint's weights, optimizer, RNG and position; its history rows."""
        with incompatible_checkpoint(path):
            self.model.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self.scheduler.load_state_dict(ckpt["scheduler"])
            self.precision.scaler.load_state_dict(ckpt["scaler"])
        ranks = ckpt.get("rng_ranks")
        if ranks is not None and len(ranks) == self.ctx.world_size:
            set_rng_state(ranks[self.ctx.rank], self.device)
        else:
            if self.ctx.enabled:
                log.warning("the checkpoint was written by another number of processes")
            set_rng_state(ckpt["rng"], self.device)
        position = ckpt.get("position") or {"epoch": ckpt["epoch"] + 1, "batch": 0}
        self.epoch, self.start_batch = position["epoch"], position["batch"]
        self.step = ckpt["step"]
        self.loss_sum, self.loss_count = ckpt.get("epoch_loss", (0.0, 0))
        self.best, self.best_epoch = ckpt["best"], ckpt["best_epoch"]
        self.best_metrics = ckpt.get("best_metrics", {})
        self.train_seconds, self.train_graphs = ckpt["train_seconds"], ckpt["train_graphs"]
        if "schedule" in ckpt:  # a run re-planned by its pacer goes on with that plan
            self.schedule = Schedule.from_state(ckpt["schedule"])
            self.total = self.schedule.total
            self.epochs = epochs_of(self.total, len(self.sampler))
        if self.start_batch >= len(self.sampler):
            self.epoch, self.start_batch = self.epoch + 1, 0
        return json.loads(ckpt["history"])

    def _wrap(self, model: nn.Module) -> nn.Module:
        net = model
        if self.ctx.enabled:
            cuda = self.device.type == "cuda"
            net = nn.parallel.DistributedDataParallel(
                model, device_ids=[self.device] if cuda else None
            )
        if self.config.compile:
            net = torch.compile(net, dynamic=True)
        return net

    # ----------------------------------------------------------------------------------
    # Checkpoints and reads of the device totals
    # ----------------------------------------------------------------------------------

    def state(self, epoch: int, batch: int) -> dict[str, Any]:
        """Everything needed to continue at batch ``batch`` of epoch ``epoch`` (a collective
        under DDP: every process takes part)."""
        ranks = None
        if self.ctx.enabled:
            ranks = [None] * self.ctx.world_size
            torch.distributed.all_gather_object(ranks, rng_state(self.device))
        splits = self.splits
        return {
            "config": self.config.to_json(),
            "model": self.model.state_dict(),
            "optimizer": portable_optimizer_state(self.optimizer),
            "scheduler": _portable(self.scheduler.state_dict()),
            "scaler": self.precision.scaler.state_dict(),
            "rng": rng_state(self.device),
            "rng_ranks": ranks,
            "epoch": epoch,
            "position": {"epoch": epoch, "batch": batch},
            "epoch_loss": (self.loss_sum, self.loss_count),
            "step": self.step,
            "best": self.best,
            "best_metrics": self.best_metrics,
            "best_epoch": self.best_epoch,
            "history": json.dumps(self.history.rows),
            "train_seconds": self.train_seconds,
            "train_graphs": self.train_graphs,
            "schedule": self.schedule.state(),
            "world_size": self.ctx.world_size,
            "featurizer": splits.featurizer,
            "target_names": list(splits.target_names),
            "metric": self.metric,
            "task_type": splits.task_type,
            "train_mean": self.mean,
            **({"pretrain": splits.pretrain} if splits.pretrain is not None else {}),
            **({"mol_features": splits.mol_features} if splits.mol_features else {}),
            **({"domain": self.domain} if self.domain is not None else {}),
        }

    def checkpoint(self, epoch: int, batch: int) -> Path | None:
        """A rolling checkpoint (rank 0 writes it)."""
        s = self.state(epoch, batch)
        return self.keeper.save(s, self.step) if self.main else None

    def save_best(self, epoch: int) -> None:
        s = self.state(epoch, 0)  # every process takes part in the collective
        if self.main:
            save_checkpoint(self.out / "best.pt", s)

    def read_totals(self, epoch: int, batch: int) -> tuple[int, bool]:
        """Add the device totals to the host's, stop on a non-finite loss, and return the stop
        signal agreed by every process (0: none) and whether rank 0's clock says the time is
        up (``--time-limit``), the same on every process. A collective under DDP."""
        part, count, first_bad = self.totals.read()
        self.totals.reset()
        time_up = self.main and self._out_of_time()
        flags = [part, float(first_bad >= 0), float(self.stop["signal"]), float(time_up)]
        shared = self.ctx.all_sum(torch.tensor(flags).double())
        self.loss_sum += float(shared[0]) / self.ctx.world_size
        self.loss_count += count
        if float(shared[1]) > 0:
            good = self.state(epoch, batch)  # updates from the first bad step on were skipped
            if self.main:
                save_checkpoint(self.out / "nonfinite.pt", good)
            where = f"step {first_bad}" if first_bad >= 0 else "another process's step"
            raise RuntimeError(
                f"non-finite loss at {where} (epoch {epoch}); the weights before it are saved "
                f"to {self.out / 'nonfinite.pt'}; lower --lr or check the data"
            )
        return int(shared[2]) and (self.stop["signal"] or signal.SIGTERM), bool(shared[3])

    # ----------------------------------------------------------------------------------
    # Training
    # ----------------------------------------------------------------------------------

    def validate(self) -> dict[str, float]:
        """Every validation metric of the current weights (the selection metric among them)."""
        loader, index = self.eval_loaders["valid"]
        n, t = len(self.splits.valid), self.splits.num_targets
        p = _evaluate(self.model, loader, index, n, t, self.ctx, self.precision, self.forward)
        return self.splits.evaluate(p, self.targets["valid"])

    def evaluate_starting_point(self) -> None:
        """With ``--init-from``: the starting point's validation metric, before any step."""
        if self.init_report is None:
            return
        metrics = self.validate()
        value = metrics[self.metric]
        self.best, self.best_epoch, self.best_metrics = value, -1, metrics
        self.history.add(
            {
                "epoch": -1,
                "step": 0,
                "lr": learning_rate(self.optimizer),
                "train_loss": math.nan,
                f"valid_{self.metric}": value,
                "seconds": 0.0,
            }
        )
        self.save_best(0)
        log.info("initial model (--init-from): valid %s %.4f", self.metric, value)

    def fit(self, progress: bool) -> None:
        """Train epoch by epoch until the planned steps, the time limit or a stop request."""
        self.wall_start = time.perf_counter()
        self._first_steps: tuple[float, int] | None = None
        bar = tqdm(
            total=self.total,
            initial=self.step,
            desc="train",
            # None: drawn on a terminal only, so a log file gets the epoch lines, not the bar
            disable=None if progress and self.main else True,
            dynamic_ncols=True,
        )
        while self.epoch < self.epochs and self.step < self.total:
            batch_index = self._train_epoch(bar)
            if not self._end_epoch(batch_index):
                break
        if self._plan_pending is not None:  # no step timed (a resumed run that was done)
            self._log_plan(self._plan_pending, 0.0)
        bar.close()
        self.history.close()

    def _train_epoch(self, bar: tqdm) -> int:
        """The steps of one epoch from ``start_batch``; returns the batch it stopped at."""
        config, ctx, steps_per_epoch = self.config, self.ctx, len(self.sampler)
        self.net.train()
        self.sampler.set_epoch(self.epoch, self.start_batch)
        batch_index = self.start_batch
        t0 = time.perf_counter()
        if self.pacer is not None:  # the steps' pace, evaluations and checkpoints aside
            self.pacer.resume(t0)
        for batch in self.train_loader:
            if self.step >= self.total:
                break
            self.stepper(batch, self.step)  # copies the batch to the device
            self.step += 1
            batch_index += 1
            self.train_graphs += batch.num_graphs * ctx.world_size
            bar.update(1)
            if self._plan_pending is not None:
                self._time_first_steps()
            if self.pacer is not None and self.pacer.observe(self.step, time.perf_counter()):
                self._replan()
            mid_epoch = batch_index < steps_per_epoch and self.step < self.total
            due = bool(config.checkpoint_every) and self.step % config.checkpoint_every == 0
            # one process acts on its own stop request or time limit at once (the clock is read
            # on the host); several processes agree at read points
            asked = not ctx.enabled and (
                bool(self.stop["signal"]) or (self.main and self._out_of_time())
            )
            if not (self.step % self.read_every == 0 or (due and mid_epoch) or asked):
                continue  # nothing read back from the device: the GPU stays ahead
            signum, time_up = self.read_totals(self.epoch, batch_index)
            loss = self.loss_sum / max(self.loss_count, 1)
            bar.set_postfix(epoch=self.epoch, loss=f"{loss:.4f}")
            if signum and mid_epoch:
                self.train_seconds += time.perf_counter() - t0
                raise TrainingInterrupted(signum, self.checkpoint(self.epoch, batch_index))
            if time_up and self.step < self.total:  # the same decision on every process
                self.timed_out = True
                break
            if due and mid_epoch:
                self.train_seconds += time.perf_counter() - t0
                if self.pacer is not None:
                    self.pacer.pause(time.perf_counter())
                self.checkpoint(self.epoch, batch_index)
                t0 = time.perf_counter()
                if self.pacer is not None:
                    self.pacer.resume(t0)
        # waits for the epoch's last step: inside the timing
        time_up = self.read_totals(self.epoch, batch_index)[1]
        self.timed_out = self.timed_out or (time_up and self.step < self.total)
        self.train_seconds += time.perf_counter() - t0
        if self.pacer is not None:
            self.pacer.pause(time.perf_counter())
        return batch_index

    def _time_first_steps(self) -> None:
        """Log the pending plan once :data:`TIMED_STEPS` steps after the first are timed (or
        the run's steps are all done)."""
        now = time.perf_counter()
        if self._first_steps is None:  # the first step (warm-up of caches and kernels) aside
            self._first_steps = (now, self.step)
            return
        since, first = self._first_steps
        if self.step - first >= TIMED_STEPS or self.step >= self.total:
            step_s = (now - since) / max(1, self.step - first)
            self._log_plan(self._plan_pending, step_s)

    def _replan(self) -> None:
        """A run planned to fill its time limit, whose steps now run at another pace than
        measured: plan the steps that fit from here (the schedule's decay ends there)."""
        if not self.config.fill_time_limit or self.ctx.enabled or self.pacer is None:
            return  # (processes would have to agree on the plan: they keep it)
        total = self.step + self.pacer.steps_left(time.perf_counter())
        if abs(total - self.total) <= max(1, 0.02 * (self.total - self.step)):
            return
        log.info(
            "steps at %.2fx the measured time: re-planned from %d to %d steps to end within "
            "--time-limit %g",
            self.pacer.slowdown, self.total, max(total, self.step), self.config.time_limit,
        )  # fmt: skip
        self.schedule.replan(self.step, total)
        self.total = max(total, self.step)
        self.epochs = epochs_of(self.total, len(self.sampler))

    def _end_epoch(self, batch_index: int) -> bool:
        """Validate when due, record the epoch, checkpoint; whether to go on training."""
        epoch, config = self.epoch, self.config
        row: dict[str, Any] = {
            "epoch": epoch,
            "step": self.step,
            "lr": learning_rate(self.optimizer),
            "train_loss": self.loss_sum / self.loss_count if self.loss_count else math.nan,
        }
        last_epoch = epoch == self.epochs - 1 or self.step >= self.total or self.timed_out
        if (epoch + 1) % config.eval_every == 0 or last_epoch:
            started = time.perf_counter()
            metrics = self.validate()
            if self.pacer is not None:  # the finish's validation and test at today's pace
                self.pacer.observe_evaluation(time.perf_counter() - started)
            value = row[f"valid_{self.metric}"] = metrics[self.metric]
            if (value > self.best) if self.higher else (value < self.best):
                self.best, self.best_epoch, self.best_metrics = value, epoch, metrics
                self.save_best(epoch + 1)
            log.info(
                "epoch %d step %d: train %s %.4f, valid %s %.4f (best %.4f @ %d)",
                epoch, self.step, self.loss_kind, row["train_loss"], self.metric, value,
                self.best, self.best_epoch,
            )  # fmt: skip
        else:
            log.info(
                "epoch %d step %d: train %s %.4f",
                epoch, self.step, self.loss_kind, row["train_loss"],
            )  # fmt: skip
        row["seconds"] = round(self.train_seconds, 2)
        self.history.add(row)
        if self.timed_out:  # a checkpoint of the exact position: --resume continues from it
            saved = self.checkpoint(epoch, batch_index)
            log.info(
                "time limit of %g min reached after step %d of %d (epoch %d)%s",
                config.time_limit, self.step, self.total, epoch,
                f": checkpoint {saved}" if saved else "",
            )  # fmt: skip
            return False
        self.epoch, self.start_batch, self.loss_sum, self.loss_count = epoch + 1, 0, 0.0, 0
        saved = self.checkpoint(self.epoch, 0)
        requested = int(self.ctx.all_sum(torch.tensor([float(self.stop["signal"])]))[0])
        if requested and self.epoch < self.epochs and self.step < self.total:
            raise TrainingInterrupted(self.stop["signal"] or signal.SIGTERM, saved)
        return True

    # ----------------------------------------------------------------------------------
    # Testing the best checkpoint
    # ----------------------------------------------------------------------------------

    def finish(self) -> dict[str, Any]:
        """Test the best checkpoint; write and return ``metrics.json``."""
        out, main = self.out, self.main
        if main and not (out / "best.pt").exists():
            raise RuntimeError(f"no validation result was recorded in {out}")
        if main:
            self.model.load_state_dict(load_checkpoint(out / "best.pt")["model"])
        self.ctx.broadcast_state(self.model)
        test: dict[str, float] = {}
        y = self.targets["test"]  # [n_test, T]
        if self.test_labelled:
            loader, index = self.eval_loaders["test"]
            n, t = len(self.splits.test), self.splits.num_targets
            p = _evaluate(self.model, loader, index, n, t, self.ctx, self.precision, self.forward)
            test = self.splits.evaluate(p, y)
            if main and self.splits.pretrain is None:  # not hundreds of descriptor columns
                _write_test_predictions(out / "test_predictions.csv", self.splits, y, p)
        metrics = self._metrics(test)
        if main:
            write_atomic(out / "metrics.json", json.dumps(metrics, indent=2).encode())
        scored = int(torch.isfinite(y).any(dim=1).sum())
        unreadable = self.splits.unreadable
        log.info(
            "best valid %s %.4f (epoch %d), test %s %s over %d test molecules (%s); mean "
            "predictor valid %.4f test %s%s",
            self.metric,
            self.best,
            self.best_epoch,
            self.metric,
            f"{test[self.metric]:.4f}" if self.test_labelled else "n/a (no labels)",
            scored,
            f"{unreadable.get('test', 0)} test rows unreadable"
            if "unsplit" not in unreadable
            else f"{unreadable['unsplit']} unreadable rows left out before splitting",
            self.baseline["valid"],
            "n/a" if self.baseline["test"] is None else f"{self.baseline['test']:.4f}",
            self._short_note(),
        )
        return metrics

    def _short_note(self) -> str:
        """What the final line says of a run shorter than a few epochs (else ``""``)."""
        if self.epochs_trained >= MIN_USEFUL_EPOCHS:
            return ""
        return (
            f"; only {self.epochs_trained:.2g} epochs trained: too short to trust (at least "
            f"{MIN_USEFUL_EPOCHS} give the schedule room)"
        )

    def _metrics(self, test: dict[str, float]) -> dict[str, Any]:
        """The ``metrics.json`` contents."""
        config, splits, metric = self.config, self.splits, self.metric
        rows = self.history.rows
        init = {}
        if config.init_from:
            init = {"init_from": config.init_from}
            init.update(
                {
                    f"init_valid_{metric}": r[f"valid_{metric}"]
                    for r in rows[:1]
                    if int(r["epoch"]) == -1
                }
            )
        note: dict[str, Any] = {}
        if splits.pretrain is not None:
            note["pretrain_descriptors"] = len(splits.target_names)
        if not self.test_labelled:
            note["test_note"] = f"the test split of {splits.name} has no labels; no test metric"
        seconds = self.train_seconds
        return {
            "dataset": splits.name,
            "attention": self.model.config.attention,
            "preset": config.preset,
            "parameters": self.n_params,
            "steps": self.step,
            "steps_planned": self.total,
            "epochs": sum(int(r["epoch"]) >= 0 for r in rows),
            "epochs_trained": round(self.epochs_trained, 3),
            "short_run": self.epochs_trained < MIN_USEFUL_EPOCHS,
            "stopped_on_time": self.timed_out,
            "time_limit_minutes": config.time_limit,
            **{f"best_valid_{k}": v for k, v in self.best_metrics.items() if "/" not in k},
            f"best_valid_{metric}": self.best,
            "best_epoch": self.best_epoch,
            **{f"test_{k}": v for k, v in test.items()},
            f"baseline_valid_{metric}": self.baseline["valid"],
            f"baseline_test_{metric}": self.baseline["test"],
            "test_has_labels": self.test_labelled,
            **note,
            **init,
            "task_type": splits.task_type,
            "higher_is_better": self.higher,
            "loss": self.loss_kind,
            "normalized_targets": self.loss_scale is not None,
            "train_graphs": len(splits.train),
            "valid_graphs": len(splits.valid),
            "test_graphs": len(splits.test),
            **splits.input_report(),
            "processes": self.ctx.world_size,
            "batch_per_process": config.batch_size,
            "global_batch": self.sampler.global_batch_size,
            "wall_seconds": round(time.perf_counter() - self.wall_start, 2),
            "train_seconds": round(seconds, 2),
            "graphs_per_second": round(self.train_graphs / seconds, 2) if seconds else None,
            "device": str(self.device),
            "precision": self.precision.kind,
            "seed": config.seed,
            "measured_costs": None if self.costs is None else self.costs.to_dict(),
            "pace": None if self.pacer is None else round(self.pacer.slowdown, 3),
        }

    @property
    def epochs_trained(self) -> float:
        """Epochs' worth of steps taken (fractional)."""
        return self.step / max(1, len(self.sampler))


def _portable(state: dict[str, Any]) -> dict[str, Any]:
    """A state dict with its 0-d tensors (a captured run's learning rates) as floats."""
    out = {}
    for k, v in state.items():
        if isinstance(v, Tensor) and v.dim() == 0:
            v = float(v)
        elif isinstance(v, list) and any(isinstance(x, Tensor) for x in v):
            v = [float(x) if isinstance(x, Tensor) else x for x in v]
        out[k] = v
    return out


def _write_test_predictions(path: Path, splits: Any, y_true: Tensor, y_pred: Tensor) -> None:
    """``test_predictions.csv``: per test molecule its SMILES (stores of SMILES sources), its
    source row, and per target the true value (``true_<target>``) and the prediction
    (``pred_<target>``, a probability for binary tasks); empty cells for missing labels.

    Args:
        path: the file.
        splits: the run's :class:`~graphormer_urpe.datasets.DatasetSplits`.
        y_true: ``[n_test, T]`` targets (``NaN`` = missing).
        y_pred: ``[n_test, T]`` model outputs (logits for binary tasks).
    """
    test = splits.test
    if splits.task_type == "binary":
        y_pred = torch.sigmoid(y_pred)
    smiles = test.smiles() if getattr(test.cache, "has_smiles", False) else None
    header = ([] if smiles is None else ["smiles"]) + ["source_row"]
    for name in splits.target_names:
        header += [f"true_{name}", f"pred_{name}"]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    rows = test.source_index.tolist()
    for i, (t, p) in enumerate(zip(y_true.tolist(), y_pred.float().tolist(), strict=True)):
        cells = ([] if smiles is None else [smiles[i]]) + [rows[i]]
        for a, b in zip(t, p, strict=True):
            cells += ["" if math.isnan(a) else f"{a:.6g}", f"{b:.6g}"]
        writer.writerow(cells)
    write_atomic(path, buf.getvalue().encode())
