r"""A fused kernel that cannot stop a run: one self-check per device, then a way back.

The fused Triton kernel (:mod:`graphormer_urpe.attention.fused.launch`) computes attention
where it is asked for (``--attention-kernel fused``). Before its first real use on a device,
:func:`fused_usable` runs it once on a small probe (forward and backward, without and with
dropout) and compares it with a plain float64 computation of

.. math::
    O = (\operatorname{softmax}(Q K^\top / \sqrt{d_h} + B) \odot C \odot M)\, V

and its gradients. The probe is ``[2, 2, 20, 16]`` per operand, with a masked key, a fully
masked query row, ``C`` as a ``[5, 2]`` table and a ``[2, 20, 20]`` index, and the kernel's
own dropout mask (:func:`~graphormer_urpe.attention.fused.launch.dropout_keep_mask`) in the
reference. It draws nothing from the global random generators.

A check that raises (Triton cannot compile or launch the kernels: an unsupported GPU, too
little shared memory, an old driver) or whose largest error exceeds :data:`TOLERANCE` of the
reference's scale turns the kernel off on that device for the rest of the process, with one
logged warning that says what failed and how to skip the kernel from the start. So does a
later failure at real sizes (:func:`disable_fused`, called by the attention code). Attention
then runs on the eager kernels, which compute the same product.

One check per process and device; inside a CUDA-graph capture, where nothing may be read
back to the host, an unchecked device answers ``False`` (the eager kernels) without
checking.
"""

from __future__ import annotations

import logging
import math

import torch
from torch import Tensor

from ..attn_scale import IndexedAttnScale

__all__ = [
    "TOLERANCE",
    "disable_fused",
    "fused_failure",
    "fused_usable",
    "raised_by_fused_kernel",
    "self_check",
]

log = logging.getLogger(__name__)

TOLERANCE = 1e-3
"""Largest error of the probe's output and gradients, relative to the reference's largest
magnitude, that the self-check accepts (float32 kernels are about 1e-6 off)."""

HOW_TO_SKIP = (
    "--attention-kernel eager (attention_kernel('eager') in Python) skips the fused kernel "
    "from the start"
)

_GRADS = ("q", "k", "v", "bias", "table")  # the operands the probe differentiates

_checked: dict[torch.device, str | None] = {}  # device -> None (passed) or why it failed


def _key(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def fused_failure(device: torch.device | str) -> str | None:
    """Why the fused kernel is off on ``device`` (``None``: not off, or not checked yet)."""
    return _checked.get(_key(device))


def disable_fused(device: torch.device | str, reason: BaseException | str) -> None:
    """Turn the fused kernel off on ``device`` for the rest of the process, with one warning
    (the first reason only; later calls for the same device say nothing)."""
    key = _key(device)
    if _checked.get(key) is not None:
        return
    why = reason if isinstance(reason, str) else _describe(reason)
    _checked[key] = why
    log.warning(
        "the fused URPE attention kernel failed on %s (%s): attention runs on the eager "
        "kernel instead, with the same results; %s",
        key, why, HOW_TO_SKIP,
    )  # fmt: skip


def fused_usable(device: torch.device | str) -> bool:
    """Whether the fused kernel may run on ``device``: its self-check passed there (run
    now, once per process and device, when it has not run yet) and nothing failed since."""
    key = _key(device)
    if key not in _checked:
        if key.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return False  # no check inside a capture: the eager kernels are always safe
        why = self_check(key)
        if why is None:
            _checked[key] = None
            log.info("the fused URPE attention kernel passed its self-check on %s", key)
        else:
            disable_fused(key, f"self-check: {why}")
    return _checked[key] is None


_KERNEL_MODULES = (
    "graphormer_urpe.attention.fused.launch",
    "graphormer_urpe.attention.fused.kernels",
    "triton",
)


def raised_by_fused_kernel(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) passed through the fused kernel's
    code or Triton's, forward or backward (a backward's frames are in the traceback too)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            name = tb.tb_frame.f_globals.get("__name__", "")
            if any(name == m or name.startswith(m + ".") for m in _KERNEL_MODULES):
                return True
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    return False


def _describe(exc: BaseException) -> str:
    """``Type: first line of the message`` (Triton's messages run to many lines)."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


def _probe() -> dict[str, Tensor]:
    """The check's operands, float64 on the CPU, from a generator of their own."""
    gen = torch.Generator().manual_seed(20221128)
    b, h, n, d, rows = 2, 2, 20, 16, 5

    def randn(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    bias = randn(b, h, n, n)
    bias[:, :, :, n - 3 :] = -math.inf  # padded keys
    bias[1, :, 4, :] = -math.inf  # a fully masked query row: zero output and gradients
    return {
        "q": randn(b, h, n, d),
        "k": randn(b, h, n, d),
        "v": randn(b, h, n, d),
        "bias": bias,
        "table": 1.0 + 0.5 * randn(rows, h),
        "index": torch.randint(0, rows, (b, n, n), generator=gen),
        "grad": randn(b, h, n, d),
    }


def _seed(device: torch.device) -> Tensor:
    """The probe's dropout seed, a ``[1]`` int64 tensor on ``device`` (not drawn)."""
    return torch.tensor([1234567], dtype=torch.int64, device=device)


def _reference(ops: dict[str, Tensor], mask: Tensor | None) -> tuple[Tensor, ...]:
    """Output and gradients (q, k, v, bias, table) of the probe, plainly, in float64."""
    q, k, v, bias, table = (ops[n].clone().requires_grad_() for n in _GRADS)
    dead = (ops["bias"] == -math.inf).all(-1, keepdim=True)  # [B, H, N, 1] fully masked rows
    scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias).masked_fill(dead, 0.0)
    probs = torch.softmax(scores, dim=-1).masked_fill(dead, 0.0)  # zero output and gradients
    c = table.t()[:, ops["index"]].transpose(0, 1)  # [B, H, N, N]
    weights = probs * c if mask is None else probs * c * mask
    out = weights @ v
    out.backward(ops["grad"])
    return (out.detach(), q.grad, k.grad, v.grad, bias.grad, table.grad)


def _fused(ops: dict[str, Tensor], device: torch.device, p: float) -> tuple[Tensor, ...]:
    """Output and gradients of the probe from the fused kernel, in float32 on ``device``."""
    from . import launch

    def on_device(name: str) -> Tensor:
        return ops[name].to(device=device, dtype=torch.float32).requires_grad_()

    q, k, v, bias, table = (on_device(n) for n in _GRADS)
    index = ops["index"].to(device=device, dtype=torch.int32)
    seed = _seed(device)
    out = launch.fused_urpe_attention(q, k, v, bias, IndexedAttnScale(table, index), p, seed)
    out.backward(ops["grad"].to(device=device, dtype=torch.float32))
    results = (out, q.grad, k.grad, v.grad, bias.grad, table.grad)
    return tuple(t.detach().double().cpu() for t in results)


def self_check(device: torch.device | str, p: float = 0.25) -> str | None:
    """Run the fused kernel on the probe (see the module docstring) on ``device``, without
    dropout and with dropout ``p``; ``None`` when it agrees with the reference, else why not
    (the exception it raised, or the largest relative error and where)."""
    from . import launch

    device = torch.device(device)
    ops = _probe()
    names = ("output", "dq", "dk", "dv", "dbias", "dtable")
    try:
        for rate in (0.0, p):
            mask = None
            if rate > 0.0:
                seed = _seed(device)
                shape = (*ops["q"].shape[:3], ops["k"].shape[2])  # [B, H, N_q, N_k]
                mask = launch.dropout_keep_mask(seed, shape, rate).double().cpu()
            got, want = _fused(ops, device, rate), _reference(ops, mask)
            for name, g, w in zip(names, got, want, strict=True):
                scale = float(w.abs().max()) + 1e-12
                err = float((g - w).abs().max()) / scale if g.isfinite().all() else math.inf
                if not err <= TOLERANCE:
                    return f"{name} with dropout {rate:g} is off by {err:.3g} of its scale"
    except Exception as exc:  # noqa: BLE001 - any failure means: do not use the kernel
        return _describe(exc)
    return None
