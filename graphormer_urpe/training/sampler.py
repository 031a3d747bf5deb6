"""The order in which a training run visits its graphs: seeded, resumable, distributed, bucketed.

:class:`EpochBatchSampler` is a batch sampler for ``torch.utils.data.DataLoader`` whose
batches depend only on ``(seed, epoch)`` and the process's place in the run:

* **Shuffling.** Each epoch is a fresh permutation of the dataset drawn from a generator
  seeded with ``(seed, epoch)``, so an interrupted run that restarts at epoch ``e`` sees the
  same batches it would have seen.
* **Resuming mid-epoch.** ``set_epoch(epoch, start_batch=k)`` skips the first ``k`` batches
  of the epoch without building them.
* **Distributed data parallel.** With ``num_replicas = R`` processes, the epoch's permutation
  is cut into *global* batches of ``R * batch_size`` graphs and process ``r`` takes every
  ``R``-th graph of each (``global_batch[r::R]``), the striding of PyTorch's
  ``DistributedSampler``. A one-process run with batch ``R * batch_size`` therefore sees
  exactly the same global batches. As in ``DistributedSampler``, the permutation is padded
  with its own first graphs to a multiple of ``R`` so that every process takes the same
  number of steps (at most ``R - 1`` graphs are seen twice per epoch); with ``R = 1`` nothing
  is padded.
* **Size buckets (optional).** With ``bucket_size = K``, the permutation is cut into chunks
  of ``K`` global batches, each chunk is sorted by graph size and cut into batches, and the
  batches are shuffled. Batches then hold graphs of similar size, which cuts padding in the
  dense ``[B, N, N]`` tensors; every graph is still visited exactly once per epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler

__all__ = ["EpochBatchSampler"]


class EpochBatchSampler(Sampler[list[int]]):
    """Batches of dataset indices for one process of a (possibly distributed) training run.

    Args:
        num_items: size of the dataset.
        batch_size: graphs per batch *per process*.
        shuffle: draw a new permutation every epoch (else the dataset order).
        seed: base seed; the order of epoch ``e`` depends only on ``(seed, e)``.
        num_replicas: processes in the run (``R``).
        rank: this process, ``0 <= rank < R``.
        sizes: ``[num_items]`` graph sizes, needed for ``bucket_size``.
        bucket_size: sort chunks of this many global batches by size (``0``: off).

    Yields:
        Lists of at most ``batch_size`` indices; every process yields ``len(self)`` batches.
    """

    def __init__(
        self,
        num_items: int,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        sizes: Sequence[int] | np.ndarray | None = None,
        bucket_size: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is outside 0..{num_replicas - 1}")
        if bucket_size and sizes is None:
            raise ValueError("size buckets need the graph sizes")
        if sizes is not None and len(sizes) != num_items:
            raise ValueError(f"got {len(sizes)} sizes for {num_items} graphs")
        self.num_items = num_items
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.sizes = None if sizes is None else np.asarray(sizes, dtype=np.int64)
        self.bucket_size = bucket_size
        self.epoch = 0
        self.start_batch = 0

    @property
    def global_batch_size(self) -> int:
        """Graphs per optimizer step over all processes."""
        return self.batch_size * self.num_replicas

    def _padded_total(self) -> int:
        r = self.num_replicas
        return -(-self.num_items // r) * r

    def __len__(self) -> int:
        """Batches per epoch (the same on every process)."""
        return -(-self._padded_total() // self.global_batch_size)

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """Draw epoch ``epoch``'s order on the next iteration, skipping ``start_batch`` batches."""
        if not 0 <= start_batch <= len(self):
            raise ValueError(f"start_batch {start_batch} is outside 0..{len(self)}")
        self.epoch = epoch
        self.start_batch = start_batch

    def global_batches(self, epoch: int) -> list[np.ndarray]:
        """Epoch ``epoch``'s global batches (``R * batch_size`` indices each, the last shorter)."""
        n = self.num_items
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            order = torch.randperm(n, generator=g).numpy()
        else:
            order = np.arange(n, dtype=np.int64)
        pad = self._padded_total() - n
        if pad:
            order = np.concatenate([order, np.resize(order, pad)])
        gb = self.global_batch_size
        if not self.bucket_size or self.sizes is None:
            return [order[i : i + gb] for i in range(0, len(order), gb)]
        chunk = gb * self.bucket_size
        batches: list[np.ndarray] = []
        for i in range(0, len(order), chunk):
            part = order[i : i + chunk]
            part = part[np.argsort(self.sizes[part], kind="stable")]
            batches.extend(part[j : j + gb] for j in range(0, len(part), gb))
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch + 7)
            # keep the one short batch (if any) last so that every process steps together
            full = [b for b in batches if len(b) == gb]
            short = [b for b in batches if len(b) != gb]
            perm = torch.randperm(len(full), generator=g).tolist()
            batches = [full[k] for k in perm] + short
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.global_batches(self.epoch)
        for b in batches[self.start_batch :]:
            yield b[self.rank :: self.num_replicas].tolist()
