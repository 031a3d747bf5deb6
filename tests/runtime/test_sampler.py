"""The training batch sampler: coverage, determinism, distributed striding, buckets, resume."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from graphormer_urpe.datasets import graph_sizes
from graphormer_urpe.runtime.sampler import EpochBatchSampler
from tests.helpers import graph_zoo


def _epoch(sampler: EpochBatchSampler, epoch: int, start: int = 0) -> list[list[int]]:
    sampler.set_epoch(epoch, start)
    return list(sampler)


@pytest.mark.parametrize("bucket", [0, 1, 3, 50])
@pytest.mark.parametrize("n,batch", [(1, 4), (7, 3), (64, 8), (101, 16)])
def test_every_graph_exactly_once_per_epoch(n, batch, bucket):
    sizes = np.random.default_rng(n).integers(1, 40, size=n)
    s = EpochBatchSampler(n, batch, seed=3, sizes=sizes, bucket_size=bucket)
    for epoch in range(3):
        batches = _epoch(s, epoch)
        assert len(batches) == len(s)
        assert all(1 <= len(b) <= batch for b in batches)
        assert sorted(i for b in batches for i in b) == list(range(n))


def test_epochs_differ_and_repeat_exactly():
    s = EpochBatchSampler(50, 8, seed=1)
    t = EpochBatchSampler(50, 8, seed=1)
    assert _epoch(s, 0) == _epoch(t, 0)
    assert _epoch(s, 0) != _epoch(s, 1)
    assert _epoch(s, 0) != _epoch(EpochBatchSampler(50, 8, seed=2), 0)
    assert [i for b in _epoch(EpochBatchSampler(10, 4, shuffle=False), 5) for i in b] == list(
        range(10)
    )


def test_resume_mid_epoch_skips_exactly_the_done_batches():
    s = EpochBatchSampler(100, 8, seed=5, sizes=np.arange(100) % 13, bucket_size=2)
    full = _epoch(s, 4)
    assert _epoch(s, 4, start=5) == full[5:]
    assert _epoch(s, 4, start=len(s)) == []
    with pytest.raises(ValueError):
        s.set_epoch(0, len(s) + 1)


@pytest.mark.parametrize("bucket", [0, 2])
@pytest.mark.parametrize("n", [48, 53])
def test_distributed_ranks_split_the_one_process_global_batches(n, bucket):
    world, batch = 3, 4
    sizes = np.random.default_rng(0).integers(1, 30, size=n)
    one = _epoch(EpochBatchSampler(n, world * batch, seed=7, sizes=sizes, bucket_size=bucket), 2)
    ranks = [
        _epoch(
            EpochBatchSampler(
                n, batch, seed=7, num_replicas=world, rank=r, sizes=sizes, bucket_size=bucket
            ),
            2,
        )
        for r in range(world)
    ]
    assert all(len(r) == len(ranks[0]) for r in ranks)  # every process steps together
    for k in range(len(ranks[0])):
        sizes_k = [len(r[k]) for r in ranks]
        assert len(set(sizes_k)) == 1  # equal shares, so the averaged gradient is the mean
        union = [i for r in ranks for i in r[k]]
        if n % world == 0:
            assert sorted(union) == sorted(one[k])  # the same global batch as one process
    seen = Counter(i for r in ranks for b in r for i in b)
    assert set(seen) == set(range(n))
    padded = -(-n // world) * world
    assert sum(seen.values()) == padded  # at most world-1 graphs seen twice, as DDP pads


def test_buckets_cut_padding():
    rng = np.random.default_rng(0)
    sizes = rng.integers(5, 60, size=2000)

    def padded_nodes(bucket: int) -> int:
        s = EpochBatchSampler(2000, 32, seed=0, sizes=sizes, bucket_size=bucket)
        return sum(len(b) * int(sizes[b].max()) for b in _epoch(s, 0))

    assert padded_nodes(20) < 0.8 * padded_nodes(0)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        EpochBatchSampler(10, 0)
    with pytest.raises(ValueError, match="rank"):
        EpochBatchSampler(10, 2, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="sizes"):
        EpochBatchSampler(10, 2, bucket_size=2)
    with pytest.raises(ValueError, match="3 sizes"):
        EpochBatchSampler(10, 2, sizes=[1, 2, 3])


def test_graph_sizes_reads_pyg_slices_without_building_graphs():
    from torch_geometric.data import InMemoryDataset

    class Zoo(InMemoryDataset):
        def __init__(self, graphs):
            super().__init__()
            self.data, self.slices = self.collate(graphs)

    graphs = graph_zoo(count=30)
    ds = Zoo(graphs)
    expected = [int(g.num_nodes) for g in graphs]
    assert graph_sizes(ds).tolist() == expected
    sub = ds[[2, 0]]
    assert graph_sizes(sub).tolist() == [expected[2], expected[0]]
    assert graph_sizes(graphs).tolist() == expected  # a plain list: graph by graph
