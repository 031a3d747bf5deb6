"""One training step: the masked loss, AdamW and its schedule, device-side totals.

:func:`train_step` (:func:`step_body` and the scheduler) is what the training loop
(:mod:`~graphormer_urpe.training.run`) runs per batch, eagerly or captured as a CUDA graph
(:class:`~graphormer_urpe.runtime.capture.CapturedStep`); nothing in it reads back to the
host: the running loss and a non-finite loss are kept on the device in :class:`StepTotals`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import AdamW

from ..graph.batch import GraphormerBatch
from ..runtime.precision import Precision

__all__ = [
    "linear_schedule",
    "masked_loss",
    "parameter_groups",
    "make_optimizer",
    "StepTotals",
    "train_step",
    "step_body",
]


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


def parameter_groups(
    model: nn.Module, weight_decay: float, urpe_weight_decay: float
) -> list[dict[str, Any]]:
    """AdamW parameter groups: URPE's ``C`` tables apart from everything else.

    Every parameter that is not part of a :class:`~graphormer_urpe.graph.encodings.SpatialScale`
    (weights, biases, LayerNorm scales and shifts, embedding tables, the head) is in group
    ``"default"`` with ``weight_decay``; the ``C`` tables (``scale`` ``[L or 1, K, H]`` and
    ``graph_token_scale`` ``[2, H]``) are in group ``"attn_scale"`` with ``urpe_weight_decay``.
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
        groups.append({"params": scale, "weight_decay": urpe_weight_decay, "name": "attn_scale"})
    return groups


def make_optimizer(
    params: Iterable[nn.Parameter] | list[dict[str, Any]], lr: float, weight_decay: float
) -> AdamW:
    """Graphormer's AdamW (betas 0.9/0.999, eps 1e-8), with PyTorch's fused kernel.

    ``params`` are parameters or parameter groups (:func:`parameter_groups`); ``weight_decay``
    applies to groups that set none. The fused implementation updates all parameters in one
    pass per tensor, faster than the default loop with the same arithmetic (measured:
    docs/results/code-notes.md); it is used on CPUs and CUDA GPUs, the default elsewhere.
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

    def tensors(self) -> list[Tensor]:
        """The totals' device tensors (what a redone step restores)."""
        return [self.loss_sum, self.steps, self.first_bad, self.skip]

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
    (:class:`~graphormer_urpe.runtime.capture.CapturedStep`), with ``step`` a ``[]`` device
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
