"""Distributed data parallel set-up for runs launched with ``torchrun``.

``torchrun --nproc_per_node=N [--nnodes=M ...] -m graphormer_urpe.cli train ...`` starts one
process per GPU (or per CPU slot) with ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` in the
environment. :func:`init_distributed` reads them, joins the process group (NCCL on GPUs, Gloo on
CPUs) and pins the process to its GPU; without them it returns a one-process context and the
run is an ordinary single-process run. Everything else the loop needs across processes is
here too: barriers, a sum of small tensors, and gathering every process's predictions back
into split order so that metrics are computed over the whole split, each graph once.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["DistContext", "init_distributed", "gather_in_order"]

log = logging.getLogger(__name__)


@dataclass
class DistContext:
    """Where this process stands in the run: ``rank`` of ``world_size``, on ``device``."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    backend: str | None = None
    owns_group: bool = False
    """Whether :func:`init_distributed` joined the group (and :meth:`close` leaves it)."""

    @property
    def enabled(self) -> bool:
        """Whether this process is in a process group (several processes, or ``torchrun``
        with one: then the collectives run too, on one process)."""
        return self.world_size > 1 or self.backend is not None

    @property
    def is_main(self) -> bool:
        """Rank 0 writes logs, checkpoints and metrics."""
        return self.rank == 0

    def barrier(self) -> None:
        """Wait for every process (no-op in a one-process run)."""
        if self.enabled:
            dist.barrier()

    def all_sum(self, values: Tensor) -> Tensor:
        """Element-wise sum of ``values`` (any shape, float) over all processes."""
        if not self.enabled:
            return values
        out = values.detach().to(self.device, torch.float64).clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out.cpu()

    def close(self) -> None:
        """Leave the process group (if this module joined one)."""
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()

    def broadcast_state(self, module: torch.nn.Module) -> None:
        """Copy rank 0's parameters and buffers of ``module`` to every process."""
        if not self.enabled:
            return
        with torch.no_grad():
            for t in module.state_dict().values():
                dist.broadcast(t, src=0)


def init_distributed(device: torch.device) -> DistContext:
    """Join the ``torchrun`` process group described by the environment, if any.

    Args:
        device: the device the user asked for; under ``torchrun`` a CUDA device becomes
            ``cuda:LOCAL_RANK``.

    Under ``torchrun`` the group is joined even with one process (``--nproc_per_node=1``),
    so that a one-GPU launch runs the same NCCL code path as a multi-GPU one.

    Returns:
        The process's :class:`DistContext` (``world_size == 1`` outside ``torchrun``).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 and "TORCHELASTIC_RUN_ID" not in os.environ:
        return DistContext(device=device)
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        backend = "gloo"
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group(backend=backend)
    ctx = DistContext(rank, local_rank, world, device, backend, owns)
    if rank != 0:  # one voice: the other processes only report problems
        logging.getLogger("graphormer_urpe").setLevel(logging.WARNING)
    log.info("distributed run: %d processes (%s), this is rank %d", world, backend, rank)
    return ctx


def gather_in_order(ctx: DistContext, index: Tensor, values: Tensor, total: int) -> Tensor:
    """Reassemble per-process rows into the split's order.

    Args:
        ctx: the run's context.
        index: ``[n_r]`` split positions of this process's rows.
        values: ``[n_r, T]`` this process's rows.
        total: rows in the whole split.

    Returns:
        ``[total, T]``: row ``i`` is the value computed for split position ``i``. Every
        position must be covered exactly once (checked).
    """
    if not ctx.enabled:
        if index.numel() != total or not torch.equal(index, torch.arange(total)):
            out = torch.empty((total, *values.shape[1:]), dtype=values.dtype)
            out[index] = values
            return out
        return values
    parts: list = [None] * ctx.world_size
    dist.all_gather_object(parts, (index.cpu(), values.cpu()))
    idx = torch.cat([p[0] for p in parts])
    vals = torch.cat([p[1] for p in parts])
    if idx.numel() != total or torch.unique(idx).numel() != total:
        raise RuntimeError(
            f"distributed evaluation covered {torch.unique(idx).numel()} of {total} graphs "
            f"with {idx.numel()} rows"
        )
    out = torch.empty((total, *vals.shape[1:]), dtype=vals.dtype)
    out[idx] = vals
    return out
