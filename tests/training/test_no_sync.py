"""Training steps read nothing back from the device (no host-device synchronisation).

Every call that makes the host wait for the device goes through one of a few ATen operators:
``_local_scalar_dense`` (``.item()``, ``float(t)``, ``bool(t)``, ``.tolist()``), ``nonzero`` and
boolean-mask indexing (data-dependent shapes), ``masked_select``, ``repeat_interleave`` without
an output size, ``unique``. The step is run on the CPU under a dispatch mode that records them.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from graphormer_urpe import Graphormer, GraphormerEncoder, collate
from graphormer_urpe.attention.token_layout import true_positions
from graphormer_urpe.graph.model import fit_tables
from graphormer_urpe.training.run import (
    Precision,
    StepTotals,
    linear_schedule,
    make_optimizer,
    train_step,
)
from tests.helpers import SYNCING, graph_zoo, tiny_config


class SyncRecorder(TorchDispatchMode):
    """Records the ATen calls that would make the host wait for a GPU."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._overloadpacket.__name__
        if name in SYNCING:
            self.calls.append(name)
        elif name in ("index", "index_put", "index_put_"):
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(t is not None and t.dtype == torch.bool for t in indices):
                self.calls.append(f"{name} with a boolean mask")
        elif name == "repeat_interleave" and kwargs.get("output_size") is None:
            if func._overloadname in ("Tensor", "self_Tensor"):  # tensor repeats: sum on host
                self.calls.append("repeat_interleave without output_size")
        return func(*args, **kwargs)


def test_the_recorder_sees_host_reads():
    with SyncRecorder() as rec:
        t = torch.tensor([1.0, 0.0, 2.0])
        float(t.sum())
        t.nonzero()
        t[t > 0]
    assert rec.calls[:2] == ["_local_scalar_dense", "nonzero"] and len(rec.calls) == 3


@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
@pytest.mark.parametrize("kind, clip", [("fp32", 5.0), ("bf16", None), ("fp16", 5.0)])
def test_training_step_reads_nothing_back(attention, kind, clip, monkeypatch):
    # The vocabulary check reads the batch's maxima, on CPU inputs only (the model's device
    # checks a batch before it is moved there); on a GPU the batch is already on the device.
    monkeypatch.setattr(GraphormerEncoder, "check_vocabulary", lambda self, batch: None)
    cfg = fit_tables(tiny_config(attention=attention), "ogb")
    torch.manual_seed(0)
    model = Graphormer(cfg).train()
    graphs = graph_zoo(seed=3, count=12, node_features=3, edge_features=3)
    batch = collate(graphs, cfg.multi_hop_max_dist, pad_to_multiple=8)
    batch.y = torch.randn(batch.num_graphs, 1, generator=torch.Generator().manual_seed(1))
    cpu = torch.device("cpu")
    opt = make_optimizer(model.parameters(), 1e-3, 0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: linear_schedule(s, 2, 10, 1e-3, 1e-9) / 1e-3
    )
    precision, totals = Precision(kind, cpu), StepTotals(cpu)
    before = [p.detach().clone() for p in model.parameters()]
    with SyncRecorder() as rec:
        for step in range(3):
            train_step(model, batch, opt, sched, precision, totals, step, "l1", clip)
    assert rec.calls == []
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    loss_sum, steps, first_bad = totals.read()
    assert steps == 3 and first_bad == -1 and loss_sum > 0


def test_a_nonfinite_loss_skips_every_later_update_and_is_reported():
    cfg = fit_tables(tiny_config(attention="urpe"), "ogb")
    torch.manual_seed(0)
    model = Graphormer(cfg).train()
    graphs = graph_zoo(seed=4, count=8, node_features=3, edge_features=3)
    batch = collate(graphs, cfg.multi_hop_max_dist)
    batch.y = torch.randn(batch.num_graphs, 1)
    cpu = torch.device("cpu")
    opt = make_optimizer(model.parameters(), 1e-3, 0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    precision, totals = Precision("fp32", cpu), StepTotals(cpu)
    train_step(model, batch, opt, sched, precision, totals, 0, "l1", 5.0)
    good = [p.detach().clone() for p in model.parameters()]
    y = batch.y
    batch.y = torch.full_like(y, 1e38)  # squared, it overflows float32
    train_step(model, batch, opt, sched, precision, totals, 1, "mse", 5.0)
    batch.y = y
    train_step(model, batch, opt, sched, precision, totals, 2, "mse", 5.0)
    loss_sum, steps, first_bad = totals.read()
    assert first_bad == 1 and steps == 3 and torch.isfinite(torch.tensor(loss_sum))
    for a, p in zip(good, model.parameters(), strict=True):
        assert torch.equal(a, p.detach())


@pytest.mark.parametrize("seed", range(5))
def test_true_positions_equal_nonzero(seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(int(torch.randint(0, 60, (1,), generator=g)), generator=g) < 0.4
    ref = mask.nonzero().squeeze(1)
    assert torch.equal(true_positions(mask, int(mask.sum())), ref)
    assert torch.equal(true_positions(mask), ref)
