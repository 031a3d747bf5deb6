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
* **A token budget (optional), instead of a fixed batch size.** With ``max_tokens = T``, a
  batch holds as many graphs as fit ``T`` padded tokens per process: ``b`` graphs whose
  largest has ``n`` atoms cost ``b * length(n)`` (``length(n) = n + 1`` with the graph
  token, or the static shapes' bucketed length), so a batch of small molecules holds many and
  one of large graphs few, at about the same memory. The epoch's permutation is sorted by
  size (a stable sort: graphs of equal size stay in random order) and cut greedily, and the
  batches are shuffled. As the sorted sizes are the same every epoch, so are the cuts: an
  epoch always has the same number of batches, and only which graphs of equal size share a
  batch changes (fairseq's ``batch_by_size``). Under ``R`` processes a global batch holds a
  multiple of ``R`` graphs and each process's share fits ``T``; the padding graphs are the
  smallest ones, the same every epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler

__all__ = ["EpochBatchSampler", "token_batches"]


class EpochBatchSampler(Sampler[list[int]]):
    """Batches of dataset indices for one process of a (possibly distributed) training run.

    Args:
        num_items: size of the dataset.
        batch_size: graphs per batch *per process*.
        shuffle: draw a new permutation every epoch (else the dataset order).
        seed: base seed; the order of epoch ``e`` depends only on ``(seed, e)``.
        num_replicas: processes in the run (``R``).
        rank: this process, ``0 <= rank < R``.
        sizes: ``[num_items]`` graph sizes (atoms), needed for ``bucket_size`` and
            ``max_tokens``.
        bucket_size: sort chunks of this many global batches by size (``0``: off).
        max_tokens: padded tokens per batch and process instead of ``batch_size`` graphs
            (``None``: off; see the module docstring).
        length: a graph of ``n`` atoms as padded tokens, for ``max_tokens`` (default
            ``n + 1``).

    Yields:
        Lists of at most ``batch_size`` indices (or of graphs fitting ``max_tokens``); every
        process yields ``len(self)`` batches.
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
        max_tokens: int | None = None,
        length: Callable[[int], int] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is outside 0..{num_replicas - 1}")
        if (bucket_size or max_tokens is not None) and sizes is None:
            raise ValueError("size buckets and token budgets need the graph sizes")
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
        self.max_tokens = max_tokens
        self.epoch = 0
        self.start_batch = 0
        self._cuts: list[tuple[int, int]] | None = None  # token batches of the sorted sizes
        self._padding = np.zeros(0, dtype=np.int64)
        if max_tokens is not None:
            assert self.sizes is not None
            pad = self._padded_total() - num_items
            self._padding = np.argsort(self.sizes, kind="stable")[:pad]  # the smallest graphs
            ordered = np.sort(np.concatenate([self.sizes, self.sizes[self._padding]]))
            self._cuts = token_batches(ordered, max_tokens, length, num_replicas)

    @property
    def global_batch_size(self) -> int:
        """Graphs per optimizer step over all processes (with a token budget: on average)."""
        if self._cuts is not None:
            return max(1, round(self._padded_total() / max(1, len(self._cuts))))
        return self.batch_size * self.num_replicas

    def _padded_total(self) -> int:
        r = self.num_replicas
        return -(-self.num_items // r) * r

    def __len__(self) -> int:
        """Batches per epoch (the same on every process, and every epoch)."""
        if self._cuts is not None:
            return len(self._cuts)
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
        if self._cuts is not None:
            return self._token_batches(order, epoch)
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

    def _token_batches(self, order: np.ndarray, epoch: int) -> list[np.ndarray]:
        """The epoch's batches under the token budget: ``order`` (and the padding graphs)
        sorted by size, cut where the sorted sizes are cut, shuffled."""
        assert self.sizes is not None and self._cuts is not None
        order = np.concatenate([order, self._padding])
        order = order[np.argsort(self.sizes[order], kind="stable")]
        batches = [order[a:b] for a, b in self._cuts]
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch + 7)
            batches = [batches[k] for k in torch.randperm(len(batches), generator=g).tolist()]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.global_batches(self.epoch)
        for b in batches[self.start_batch :]:
            yield b[self.rank :: self.num_replicas].tolist()


def token_batches(
    sizes: np.ndarray,
    max_tokens: int,
    length: Callable[[int], int] | None = None,
    group: int = 1,
) -> list[tuple[int, int]]:
    """Cut a sequence of graphs, in its order, into batches of at most ``max_tokens`` padded
    tokens per process.

    A batch is greedy: graphs join it, ``group`` at a time, while ``b * length(n)`` stays
    within ``max_tokens``, for ``b`` the graphs per process (the batch's graphs over
    ``group``) and ``n`` the largest graph's atoms. On sizes sorted in ascending order, this
    packs graphs of similar size together.

    Args:
        sizes: ``[N]`` atoms per graph, in the order to cut; ``N`` a multiple of ``group``.
        max_tokens: the budget ``T``, per process.
        length: padded tokens of a graph of ``n`` atoms (default ``n + 1``: the graph token).
        group: graphs joining a batch together (the processes ``R``, each taking one).

    Returns:
        ``(start, stop)`` of every batch, covering ``0..N`` in order.

    Raises:
        ValueError: one graph alone needs more than ``max_tokens`` tokens.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(sizes) % group:
        raise ValueError(f"{len(sizes)} graphs do not split into groups of {group}")
    length = length or (lambda n: n + 1)
    table = [length(n) for n in range(int(sizes.max(initial=0)) + 1)]
    largest = np.maximum.reduceat(sizes, np.arange(0, len(sizes), group)) if len(sizes) else sizes
    cuts, start, per_process, longest = [], 0, 0, 0
    for i, n in enumerate(largest.tolist()):
        need = table[n]
        if need > max_tokens:
            raise ValueError(
                f"a graph of {n} atoms needs {need} tokens, more than --max-tokens {max_tokens}: "
                f"give a budget of at least {need}"
            )
        longest = max(longest, need)
        if (per_process + 1) * longest > max_tokens:  # graph group i starts the next batch
            cuts.append((start, i * group))
            start, per_process, longest = i * group, 0, need
        per_process += 1
    if per_process:
        cuts.append((start, len(sizes)))
    return cuts
