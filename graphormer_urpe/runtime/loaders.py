"""Data loaders of a training run: the training batches, each process's share of an
evaluation split, and the collate function (static shapes for captured steps)."""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from ..graph.batch import GraphormerCollator
from ..graph.model import GraphormerConfig
from ..graph.static_shapes import StaticShapes, token_length
from .distributed import DistContext
from .sampler import token_batches

__all__ = ["make_loader", "loader_workers", "make_collator", "split_loader", "read_graphs"]


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


def loader_workers(requested: int | None, device: torch.device) -> int:
    """Data-loader processes: ``requested``, or by default none on the CPU and
    ``min(8, cores - 2)`` (at least 1) beside a GPU."""
    if requested is not None:
        return requested
    if device.type != "cuda":
        return 0
    return min(8, max(1, (os.cpu_count() or 2) - 2))


def make_collator(
    config: GraphormerConfig,
    device: torch.device,
    static_batch: int | None = None,
    max_tokens: int | None = None,
) -> GraphormerCollator:
    """The run's collate function: static shapes of ``static_batch`` graphs (or, with
    ``max_tokens``, of as many as fit the budget) for captured steps; else, on GPUs,
    attention lengths padded to a multiple of 8 (tensor cores)."""
    pad = 8 if device.type == "cuda" else 1
    static = None
    if static_batch is not None:
        static = StaticShapes(static_batch, config.multi_hop_max_dist, max_tokens=max_tokens)
    return GraphormerCollator(config.multi_hop_max_dist, config.spatial_pos_max, pad, static)


def split_loader(
    dataset: Dataset,
    config: GraphormerConfig,
    batch_size: int,
    ctx: DistContext,
    workers: int,
    static: bool = False,
    max_tokens: int | None = None,
) -> tuple[DataLoader, Tensor]:
    """This process's share of an evaluation split (graphs ``rank::world``, none twice) and
    their positions ``[n_r]``, in batches of ``batch_size`` graphs, or with ``max_tokens``
    sorted by size and cut to the token budget (:func:`~graphormer_urpe.runtime.sampler.
    token_batches`)."""
    index = torch.arange(ctx.rank, len(dataset), ctx.world_size)
    collate = make_collator(config, ctx.device, batch_size if static else None, max_tokens)
    if max_tokens is None:
        batches = [index[i : i + batch_size].tolist() for i in range(0, len(index), batch_size)]
    else:
        from ..datasets import graph_sizes

        sizes = np.asarray(graph_sizes(dataset), dtype=np.int64)[index.numpy()]
        order = np.argsort(sizes, kind="stable")
        index = index[torch.from_numpy(order)]
        cuts = token_batches(sizes[order], max_tokens, token_length)
        batches = [index[a:b].tolist() for a, b in cuts]
    loader = DataLoader(
        dataset,
        batch_sampler=batches,
        collate_fn=collate,
        num_workers=workers,
        pin_memory=ctx.device.type == "cuda",
        persistent_workers=workers > 0 and len(batches) > 0,
        generator=torch.Generator(),  # never draw from the global RNG
    )
    return loader, index


def read_graphs(dataset: Dataset, index: list[int]) -> list:
    """The graphs ``index`` of ``dataset``, read as a ``DataLoader`` reads a batch (through
    ``__getitems__`` where the dataset has it: the stores decode a batch at once)."""
    many = getattr(dataset, "__getitems__", None)
    return list(many(index)) if many is not None else [dataset[i] for i in index]
