"""A token budget instead of a fixed batch size: the cuts against a plain greedy loop, the
sampler's coverage and determinism, static shapes that hold the budget, and exactness: what a
model computes over token batches equals what it computes over today's fixed-size batches."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

from graphormer_urpe import Graphormer, collate
from graphormer_urpe.graph.batch import GraphormerCollator
from graphormer_urpe.graph.static_shapes import StaticShapes, token_length
from graphormer_urpe.inference.prediction import predict_split
from graphormer_urpe.runtime.distributed import DistContext
from graphormer_urpe.runtime.loaders import split_loader
from graphormer_urpe.runtime.sampler import EpochBatchSampler, token_batches
from graphormer_urpe.training import train
from graphormer_urpe.training.steps import Precision, masked_loss
from tests.helpers import (
    URPE_NO_DROPOUT,
    graph_zoo,
    stand_in_capture,
    tiny_config,
    tiny_train_config,
)

HOPS = 4


def _reference_cuts(sizes, max_tokens, length, group):
    """Greedy packing written out: add the next ``group`` graphs while the batch fits."""
    cuts, batch = [], []
    for i in range(0, len(sizes), group):
        candidate = batch + list(range(i, i + group))
        per_process = len(candidate) // group
        if batch and per_process * max(length(sizes[j]) for j in candidate) > max_tokens:
            cuts.append((batch[0], batch[-1] + 1))
            candidate = list(range(i, i + group))
        batch = candidate
    if batch:
        cuts.append((batch[0], batch[-1] + 1))
    return cuts


@pytest.mark.parametrize("group", [1, 2, 3])
@pytest.mark.parametrize("budget", [40, 97, 512])
@pytest.mark.parametrize("sort", [False, True])
def test_cuts_are_the_greedy_packing(group, budget, sort):
    rng = np.random.default_rng(budget + group)
    sizes = rng.integers(0, 38, size=60 * group)
    if sort:
        sizes = np.sort(sizes)
    for length in (lambda n: n + 1, lambda n: -(-(n + 1) // 8) * 8):
        cuts = token_batches(sizes, budget, length, group)
        assert cuts == _reference_cuts(sizes.tolist(), budget, length, group)
        assert cuts[0][0] == 0 and cuts[-1][1] == len(sizes)
        assert all(a[1] == b[0] for a, b in zip(cuts, cuts[1:], strict=False))
        for a, b in cuts:
            assert (b - a) % group == 0
            assert (b - a) // group * max(length(int(n)) for n in sizes[a:b]) <= budget


def test_a_graph_larger_than_the_budget_is_refused_with_the_budget_it_needs():
    with pytest.raises(ValueError, match="a graph of 50 atoms needs 51 tokens.*at least 51"):
        token_batches(np.array([3, 50, 4]), 40)


def _epoch(sampler, epoch, start=0):
    sampler.set_epoch(epoch, start)
    return list(sampler)


@pytest.mark.parametrize("n", [1, 37, 200])
def test_token_batches_visit_every_graph_once_with_a_fixed_count_per_epoch(n):
    sizes = np.random.default_rng(n).integers(1, 40, size=n)
    s = EpochBatchSampler(n, 1, seed=3, sizes=sizes, max_tokens=120)
    epochs = [_epoch(s, e) for e in range(4)]
    for batches in epochs:
        assert len(batches) == len(s)
        assert sorted(i for b in batches for i in b) == list(range(n))
        assert all(len(b) * (sizes[b].max() + 1) <= 120 for b in batches)
    if n > 30:
        assert epochs[0] != epochs[1]  # another order and other graphs of equal size together
        assert sorted(map(sorted, epochs[0])) != sorted(map(sorted, epochs[1]))
    assert _epoch(EpochBatchSampler(n, 1, seed=3, sizes=sizes, max_tokens=120), 2) == epochs[2]
    start = min(3, len(s))
    assert _epoch(s, 2, start=start) == epochs[2][start:]


@pytest.mark.parametrize("n", [48, 53])
def test_token_batches_under_several_processes(n):
    world, budget = 3, 90
    sizes = np.random.default_rng(0).integers(1, 30, size=n)
    ranks = [
        EpochBatchSampler(n, 1, seed=7, num_replicas=world, rank=r, sizes=sizes, max_tokens=budget)
        for r in range(world)
    ]
    assert len({len(s) for s in ranks}) == 1
    for epoch in range(2):
        shares = [_epoch(s, epoch) for s in ranks]
        seen = Counter(i for share in shares for b in share for i in b)
        assert set(seen) == set(range(n))
        extra = -(-n // world) * world - n  # the padding: the smallest graphs, once more
        assert sum(seen.values()) == n + extra
        twice = sorted(i for i, c in seen.items() if c == 2)
        assert twice == sorted(np.argsort(sizes, kind="stable")[:extra].tolist())
        for step in zip(*shares, strict=True):
            assert len({len(b) for b in step}) == 1  # every process takes the same share
            assert all(len(b) * (sizes[b].max() + 1) <= budget for b in step)


def test_static_token_batches_hold_the_budget_in_a_few_shapes():
    graphs = graph_zoo(seed=1, count=120)
    shapes = StaticShapes(1, HOPS, max_tokens=256)
    collator = GraphormerCollator(HOPS, static=shapes)
    sizes = np.array([g.num_nodes for g in graphs])
    s = EpochBatchSampler(len(graphs), 1, seed=0, sizes=sizes, max_tokens=256,
                          length=token_length)  # fmt: skip
    seen = set()
    for b in _epoch(s, 0):
        batch = collator([graphs[i] for i in b])
        graphs_, length = batch.x.shape[0], batch.x.shape[1] + 1
        assert graphs_ * length <= 256 and batch.num_graphs == len(b)
        assert graphs_ == shapes.graphs_for(length)
        seen.add(batch.static_shape[:2])
    assert len(seen) <= 6
    with pytest.raises(ValueError, match="do not fit a static batch"):
        collator(graphs[:40])


# ---------------------------------------------------------------------------------------------
# Exactness against today's batches


def _labelled(count: int = 90):
    graphs = graph_zoo(seed=4, count=count)
    gen = torch.Generator().manual_seed(0)
    for g in graphs:
        g.y = torch.randn(1, 1, generator=gen)
    return graphs


def _loss_sum_and_grads(model, batches):
    model.zero_grad(set_to_none=True)
    total = 0.0
    for batch in batches:
        pred = model(batch)
        real = batch.num_graphs
        loss = masked_loss(pred[:real], batch.y[:real], "l1") * real  # the sum over graphs
        loss.backward()
        total += float(loss.detach())
    return total, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
def test_an_epoch_of_token_batches_computes_what_fixed_batches_compute(attention, static):
    """The summed loss and its gradients over every graph: each graph's value never depends
    on its batch-mates or on the padding, so the batching cannot change them."""
    graphs = _labelled()
    torch.manual_seed(0)
    model = Graphormer(tiny_config(attention=attention, multi_hop_max_dist=HOPS)).train()
    sizes = np.array([g.num_nodes for g in graphs])
    fixed = EpochBatchSampler(len(graphs), 16, seed=2)  # today's batches
    shapes = StaticShapes(16, HOPS) if static else None
    token_shapes = StaticShapes(1, HOPS, max_tokens=200) if static else None
    coll = GraphormerCollator(HOPS, static=token_shapes)
    tokens = EpochBatchSampler(len(graphs), 1, seed=2, sizes=sizes, max_tokens=200,
                               length=token_length)  # fmt: skip
    today = [collate([graphs[i] for i in b], HOPS, static=shapes) for b in _epoch(fixed, 1)]
    budget = [coll([graphs[i] for i in b]) for b in _epoch(tokens, 1)]
    assert len(budget) != len(today)
    want, want_grads = _loss_sum_and_grads(model, today)
    got, grads = _loss_sum_and_grads(model, budget)
    assert got == pytest.approx(want, rel=1e-5)
    assert grads.keys() == want_grads.keys()
    scale = max(float(g.abs().max()) for g in want_grads.values())  # (k_proj.bias: ~0)
    for name, g in grads.items():
        assert float((g - want_grads[name]).abs().max()) / scale < 1e-5, name


def test_evaluation_in_token_batches_gives_todays_predictions_in_order():
    graphs = _labelled(70)
    torch.manual_seed(1)
    model = Graphormer(tiny_config(attention="urpe", multi_hop_max_dist=HOPS)).eval()
    ctx = DistContext(device=torch.device("cpu"))
    precision = Precision("fp32", ctx.device)
    preds = []
    for max_tokens in (None, 100):
        loader, index = split_loader(graphs, model.config, 8, ctx, 0, max_tokens=max_tokens)
        preds.append(predict_split(model, loader, index, len(graphs), 1, ctx, precision))
    assert len(split_loader(graphs, model.config, 8, ctx, 0, max_tokens=100)[0]) != len(
        split_loader(graphs, model.config, 8, ctx, 0)[0]
    )
    torch.testing.assert_close(preds[1], preds[0], atol=1e-5, rtol=1e-5)


def test_train_with_a_token_budget_captured_or_not(table, tmp_path, monkeypatch):
    eager, captured = tmp_path / "eager", tmp_path / "captured"
    data = tmp_path / "data"
    train(tiny_train_config(table, data, eager, URPE_NO_DROPOUT, max_tokens=64), progress=False)
    backends = stand_in_capture(monkeypatch)
    train(tiny_train_config(table, data, captured, URPE_NO_DROPOUT, max_tokens=64), progress=False)
    assert backends[0].replayed >= 1
    a = json.loads((eager / "metrics.json").read_text())
    b = json.loads((captured / "metrics.json").read_text())
    assert a["max_tokens"] == b["max_tokens"] == 64 and a["batch_per_process"] is None
    assert a["steps"] == b["steps"] and a["train_graphs"] == b["train_graphs"]  # same batches
    assert 1 < a["global_batch"] < 8  # molecules of a few atoms: a few per 64 tokens
    for key in ("best_valid_mae", "test_mae"):  # static batches: another summation order
        assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-4), key
    config = json.loads((eager / "config.json").read_text())
    assert config["max_tokens"] == 64


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_a_token_budget_gives_the_cpus_batches_with_captured_steps(table, tmp_path, caplog):
    fields = dict(max_tokens=64, precision="fp32")
    runs = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / device
        config = tiny_train_config(
            table, tmp_path / "data", out, URPE_NO_DROPOUT, device=device, **fields
        )
        with caplog.at_level("INFO"):
            train(config, progress=False)
        runs[device] = json.loads((out / "metrics.json").read_text())
    assert "training steps run eagerly" not in caplog.text
    assert runs["cpu"]["steps"] == runs["cuda"]["steps"]
    assert runs["cpu"]["global_batch"] == runs["cuda"]["global_batch"]
    for key in ("best_valid_mae", "test_mae"):
        assert runs["cuda"][key] == pytest.approx(runs["cpu"][key], rel=1e-2, abs=1e-3), key
