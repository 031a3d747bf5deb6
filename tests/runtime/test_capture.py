"""Static batch shapes and captured steps (CUDA graphs; their logic on the CPU).

A captured step replays exactly the operations it recorded, on tensors of the recorded shapes.
These tests check, on the CPU, what that needs: static batches give the values of the sized
batches; a static step runs the same operations on the same shapes for every batch of its
shape and reads nothing back; the capture cycle (warm-up, capture, replay) reads only its
static buffers. The CUDA tests at the end run the real graphs.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from graphormer_urpe import Graphormer, GraphormerEncoder, collate
from graphormer_urpe.graph.static_shapes import StaticShapes, round_up_geometric
from graphormer_urpe.inference import prediction
from graphormer_urpe.runtime.capture import (
    CapturedForward,
    CapturedStep,
    CudaGraphs,
    EagerGraphs,
    portable_optimizer_state,
)
from graphormer_urpe.runtime.loaders import make_collator
from graphormer_urpe.training import run as training_run
from graphormer_urpe.training import train
from graphormer_urpe.training.run import (
    Precision,
    StepTotals,
    linear_schedule,
    make_optimizer,
    step_body,
    train_step,
)
from tests.helpers import (
    HOPS,
    MIXED,
    SYNCING,
    URPE_NO_DROPOUT,
    bound_body,
    graphs_with_targets,
    same_shape_batches,
    stand_in_capture,
    step_setup,
    tiny_checkpoint,
    tiny_config,
    tiny_train_config,
)
from tests.reference import predict_reference

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


# ---------------------------------------------------------------------------------------------
# Shapes


def test_round_up_geometric_keeps_a_few_values_per_doubling():
    for steps, multiple in [(4, 8), (4, 256), (8, 1), (1, 1)]:
        values = [round_up_geometric(x, steps, multiple) for x in range(1, 5000)]
        for x, v in zip(range(1, 5000), values, strict=True):
            assert v >= x and v % multiple == 0
            power = 1 << (x - 1).bit_length()
            assert v - x < max(multiple, power // (2 * steps))  # less than one grid step
        assert values == sorted(values)
        # 1..4999 spans 13 doublings: at most `steps` values each (plus the multiples below)
        assert len(set(values)) <= 13 * steps + 4999 // max(multiple, 4999) + multiple
    assert round_up_geometric(0, 4, 8) == 0
    assert [round_up_geometric(x, 4, 8) for x in (9, 17, 33, 40, 41, 100)] == [
        16,
        24,
        40,
        40,
        48,
        112,
    ]


def test_static_batch_has_its_shape_and_empty_graphs_last():
    graphs = graphs_with_targets(13)
    shapes = StaticShapes(16, HOPS)
    b = collate(graphs, HOPS)
    s = collate(graphs, HOPS, static=shapes)
    big, n, rows, tokens = s.static_shape
    assert big == 16 and s.num_graphs == 13 and len(s) == 13
    assert n + 1 == shapes.attention_length(b.x.shape[1] + 1) and (n + 1) % 8 == 0
    assert rows == shapes.path_rows(b.path_hops) and s.path_input.shape[0] == rows
    assert tokens == shapes.token_rows(b.total_nodes + 16, 16 * (n + 1))
    assert s.x.shape[:2] == (16, n) and s.spatial_pos.shape == (16, n, n)
    assert s.attn_bias.shape == (16, n + 1, n + 1) and s.max_hops == HOPS
    k = b.x.shape[1]
    assert torch.equal(s.x[:13, :k], b.x) and not s.x[:13, k:].any()
    assert torch.equal(s.spatial_pos[:13, :k, :k], b.spatial_pos)
    assert torch.equal(s.edge_input[:13, :k, :k, : b.max_hops], b.edge_input)
    assert torch.equal(s.path_input[: b.path_hops], b.path_input)
    assert not s.path_input[b.path_hops :].any() and not s.path_hop[b.path_hops :].any()
    assert torch.isnan(s.y[13:]).all() and torch.equal(s.y[:13], b.y)
    assert not s.node_mask[13:].any() and (s.num_nodes[13:] == 0).all()
    # an empty graph's token attends to itself only; no row is entirely masked
    assert torch.isfinite(s.attn_bias[13:, 0, 0]).all()
    assert torch.isneginf(s.attn_bias[13:, 0, 1:]).all()
    assert torch.isfinite(s.attn_bias).any(dim=-1).all()
    with pytest.raises(ValueError, match="do not fit"):
        collate(graphs, HOPS, static=StaticShapes(8, HOPS))
    with pytest.raises(ValueError, match="path hops"):
        collate(graphs, HOPS, static=StaticShapes(16, HOPS + 1))


@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
def test_static_batch_gives_the_values_and_gradients_of_the_sized_batch(attention):
    graphs = graphs_with_targets(13)
    cfg = tiny_config(attention=attention, multi_hop_max_dist=HOPS)
    model = Graphormer(cfg).double().eval()
    if attention == "urpe":
        with torch.no_grad():
            model.encoder.spatial_scale.scale.uniform_(0.5, 1.5)
    b = collate(graphs, HOPS)
    s = collate(graphs, HOPS, static=StaticShapes(16, HOPS))
    rows: list[int] = []  # tokens seen by the per-token layers: the real ones (+ a few)
    model.encoder.encoder.layers[0].fc1.register_forward_hook(
        lambda m, args, out: rows.append(args[0].shape[0])
    )
    grads = []
    for batch, keep in ((b, 13), (s, 13)):
        model.zero_grad()
        out = model(batch)
        out[:keep].square().sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        if batch is b:
            ref = out.detach()
        else:
            got = out.detach()
    assert got.shape == (16, 1) and torch.isfinite(got).all()
    real = b.total_nodes + 13
    assert rows == [real, s.static_shape[3]] and real + 3 <= rows[1] < 16 * (s.x.shape[1] + 1)
    torch.testing.assert_close(got[:13], ref, atol=1e-12, rtol=1e-10)
    assert grads[0].keys() == grads[1].keys()
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, atol=1e-12, rtol=1e-9, msg=name)
    nodes, tokens = model.encoder(s)
    nodes_ref, tokens_ref = model.encoder(b)
    torch.testing.assert_close(nodes, nodes_ref, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(tokens, tokens_ref, atol=1e-12, rtol=1e-10)
    dense, dense_ref = model.encoder.forward_dense(s), model.encoder.forward_dense(b)
    k = b.x.shape[1] + 1
    torch.testing.assert_close(dense[:13, :k], dense_ref, atol=1e-12, rtol=1e-10)
    assert not dense[:13, k:].any()


def test_random_batches_fall_into_few_shapes():
    graphs = graphs_with_targets(400, seed=3)
    shapes = StaticShapes(32, HOPS)
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(60):
        index = rng.choice(len(graphs), 32, replace=False)
        batch = [graphs[i] for i in index]
        plain, static = collate(batch, HOPS), collate(batch, HOPS, static=shapes)
        seen.add(static.static_shape[:3])
        n, rows, tokens = static.static_shape[1:]
        # padding within one grid step: at most a quarter of the power of two below
        assert n + 1 - (plain.x.shape[1] + 1) < max(8, (plain.x.shape[1] + 1) / 4 + 1)
        assert rows - plain.path_hops <= max(256, plain.path_hops / 4)
        # the tokens on a finer grid (a sixteenth), within the padded grid
        real = plain.total_nodes + 32
        assert real <= tokens <= min(32 * (n + 1), real + max(8, real / 16))
        assert int(static.token_slots.sum()) == tokens
        assert torch.equal(static.token_slots & static.token_mask, static.token_mask)
    assert len(seen) <= 12, seen


# ---------------------------------------------------------------------------------------------
# A static step is the same sequence of operations for every batch of its shape


class OpRecorder(TorchDispatchMode):
    """Records every ATen call with its output shapes, and the calls that sync or that copy
    data made on the host (``torch.tensor([...])``: a host-to-device copy on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple] = []
        self.bad: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._overloadpacket.__name__
        if name in SYNCING:
            self.bad.append(name)
        elif name == "lift_fresh" and args[0].numel() > 1:  # (a number is filled, not copied)
            self.bad.append("a tensor of host data")
        if name in ("index", "index_put", "index_put_"):
            if any(t is not None and t.dtype == torch.bool for t in args[1]):
                self.bad.append(f"{name} with a boolean mask")
        flat = out if isinstance(out, tuple | list) else (out,)
        shapes = tuple(tuple(t.shape) for t in flat if isinstance(t, torch.Tensor))
        self.ops.append((str(func), shapes))
        return out


@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
def test_static_step_runs_the_same_operations_for_every_batch(attention, monkeypatch):
    # the vocabulary check reads the batch's maxima, on CPU inputs only (see test_no_sync)
    monkeypatch.setattr(GraphormerEncoder, "check_vocabulary", lambda self, batch: None)
    graphs = graphs_with_targets(30)
    model, opt, _, precision, totals = step_setup(attention, graphs)
    batches = same_shape_batches(graphs, 3)  # the same molecules in other orders
    step_index = torch.zeros((), dtype=torch.float64)
    step_body(model, batches[0], opt, precision, totals, step_index, "l1", 5.0, None, False)
    records = []
    for batch in batches[1:]:
        with OpRecorder() as rec:
            step_body(model, batch, opt, precision, totals, step_index, "l1", 5.0, None, False)
        assert rec.bad == [], rec.bad
        records.append(rec.ops)
    assert len(records[0]) > 100 and records[0] == records[1]


class _Tape(TorchDispatchMode):
    """Records every ATen call (the function, its arguments and its outputs); keeps a copy of
    each tensor made before the recording that a call writes to."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []
        self.made: set[int] = set()  # ids of the tensors the recorded calls returned
        self.before: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for i, arg in enumerate(func._schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                value = args[i] if i < len(args) else kwargs.get(arg.name)
                for t in tree_flatten(value)[0]:
                    if isinstance(t, torch.Tensor) and id(t) not in self.made | self.before.keys():
                        self.before[id(t)] = (t, t.detach().clone())
        out = func(*args, **kwargs)
        self.made |= {id(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)}
        self.calls.append((func, args, kwargs, out))
        return out


class TapeGraphs(EagerGraphs):
    """A closer stand-in for CUDA graphs: ``capture`` records the step's ATen calls and undoes
    their effects (a capture runs nothing), the replay runs those calls again on the recorded
    tensors, writing each result into the tensor recorded, and runs no Python: a step that
    took anything but its static buffers and device tensors from the host at capture time
    replays a stale value, as a CUDA graph does. (The fused kernel under Triton's interpreter
    is not an ATen call: it is not recorded.)"""

    def capture(self, fn: Callable[[], Any]) -> Callable[[], None]:
        self.captured += 1
        rng = torch.get_rng_state()
        with _Tape() as tape:
            fn()
        with torch.no_grad():
            for t, value in tape.before.values():
                t.copy_(value)
        torch.set_rng_state(rng)

        def replay() -> None:
            self.replayed += 1
            with torch.no_grad():
                for func, args, kwargs, out in tape.calls:
                    new = func(*args, **kwargs)
                    for dst, src in zip(tree_flatten(out)[0], tree_flatten(new)[0], strict=True):
                        if isinstance(dst, torch.Tensor) and dst.data_ptr() != src.data_ptr():
                            dst.copy_(src)

        return replay


# ---------------------------------------------------------------------------------------------
# The capture cycle


@pytest.mark.parametrize("backend", [EagerGraphs, TapeGraphs])
@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
def test_captured_steps_equal_eager_steps(attention, backend):
    graphs = graphs_with_targets(40)
    first = same_shape_batches(graphs[:8], 5, seed=1)
    second = same_shape_batches(graphs[8:14], 4, size=6, seed=2)  # a batch of 8, not 10
    batches = [b for pair in zip(first, second, strict=False) for b in pair] + first[4:]
    assert len({b.static_shape for b in batches}) == 2
    eager = step_setup(attention, graphs)
    for i, b in enumerate(batches):
        train_step(eager[0], b, eager[1], eager[2], eager[3], eager[4], i, "l1", 5.0)
    model, opt, sched, precision, totals = step_setup(attention, graphs)
    backend = backend()
    step = CapturedStep(opt, sched, bound_body(model, opt, precision, totals), model_device(model),
                        backend)  # fmt: skip
    for i, b in enumerate(batches):
        step(b, i)
    # per shape: 2 eager warm-up steps, one capture, then replays
    assert (backend.warmed, backend.captured, backend.replayed) == (4, 2, 5)
    assert step.captured and step.cycle.shapes == 2
    assert isinstance(opt.param_groups[0]["lr"], torch.Tensor)
    assert float(opt.param_groups[0]["lr"]) == pytest.approx(eager[1].param_groups[0]["lr"])
    for (name, p), q in zip(model.named_parameters(), eager[0].parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=2e-5, rtol=1e-4, msg=name)  # float32 lr
    a, b = totals.read(), eager[4].read()
    assert a[1:] == b[1:] == (len(batches), -1) and a[0] == pytest.approx(b[0], rel=1e-4)


def model_device(model) -> torch.device:
    return next(model.parameters()).device


def test_a_replayed_step_records_a_nonfinite_loss_at_its_step():
    graphs = graphs_with_targets(20)
    model, opt, sched, precision, totals = step_setup("urpe", graphs)
    batches = same_shape_batches(graphs, 6)
    body = bound_body(model, opt, precision, totals, "mse")
    step = CapturedStep(opt, sched, body, model_device(model), EagerGraphs())
    for i, b in enumerate(batches[:4]):
        step(b, i)
    good = {n: p.detach().clone() for n, p in model.named_parameters()}
    bad = copy.copy(batches[4])
    bad.y = torch.full_like(bad.y, 1e38)  # squared, it overflows float32
    bad.y[8:] = math.nan
    step(bad, 4)  # a replay: the loss is not finite, and so is every later update skipped
    step(batches[5], 5)
    assert totals.read()[2] == 4
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), good[n]), n


def test_captured_forward_equals_the_eager_forward():
    graphs = graphs_with_targets(30)
    model = Graphormer(tiny_config(attention="urpe", multi_hop_max_dist=HOPS)).eval()
    backend = EagerGraphs()
    forward = CapturedForward(model, None, torch.device("cpu"), backend)
    shapes = StaticShapes(8, HOPS)
    batches = [collate(graphs[i : i + 5], HOPS, static=shapes) for i in (0, 0, 5, 0)]
    for b in batches:
        got = forward(b)
        with torch.no_grad():
            want = model(collate(graphs[:5] if b is not batches[2] else graphs[5:10], HOPS))
        assert got.shape == (5, 1)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    assert backend.warmed >= 1 and backend.captured >= 1 and backend.replayed >= 1


def test_a_failed_capture_goes_on_eagerly(caplog):
    graphs = graphs_with_targets(20)
    model, opt, sched, precision, totals = step_setup("graphormer", graphs)

    class Refusing(EagerGraphs):
        def capture(self, fn):
            raise RuntimeError("operation not permitted when stream is capturing")

    step = CapturedStep(opt, sched, bound_body(model, opt, precision, totals), model_device(model),
                        Refusing())  # fmt: skip
    batches = same_shape_batches(graphs, 5)
    with caplog.at_level("WARNING"):
        for i, b in enumerate(batches):
            step(b, i)
    assert not step.captured and "continuing eagerly" in caplog.text
    assert totals.read()[1] == 5


def test_a_captured_runs_optimizer_state_loads_anywhere():
    graphs = graphs_with_targets(20)
    model, opt, sched, precision, totals = step_setup("graphormer", graphs)
    step = CapturedStep(opt, sched, bound_body(model, opt, precision, totals), model_device(model),
                        EagerGraphs())  # fmt: skip
    for i, b in enumerate(same_shape_batches(graphs, 4)):
        step(b, i)
    assert isinstance(opt.param_groups[0]["lr"], torch.Tensor)
    state = portable_optimizer_state(opt)
    assert all(isinstance(g["lr"], float) for g in state["param_groups"])
    assert isinstance(opt.param_groups[0]["lr"], torch.Tensor)  # the optimizer keeps its own
    fresh = make_optimizer(copy.deepcopy(model).parameters(), 1e-3, 0.01)
    fresh.load_state_dict(state)
    assert fresh.param_groups[0]["lr"] == pytest.approx(float(opt.param_groups[0]["lr"]))


@pytest.mark.parametrize("backend", [EagerGraphs, TapeGraphs])
def test_training_with_captured_steps_matches_eager_training(backend, table, tmp_path, monkeypatch):
    """The whole run (static loaders, captured steps and evaluation, checkpoints) on the CPU
    with the stand-in graphs, against the same run without capture."""
    eager_out, cap_out = tmp_path / "eager", tmp_path / "captured"
    train(tiny_train_config(table, tmp_path / "data", eager_out, URPE_NO_DROPOUT), progress=False)
    backends = stand_in_capture(monkeypatch, backend)
    train(tiny_train_config(table, tmp_path / "data", cap_out, URPE_NO_DROPOUT), progress=False)
    assert backends and backends[0].captured >= 1 and backends[0].replayed >= 1
    a = json.loads((eager_out / "metrics.json").read_text())
    b = json.loads((cap_out / "metrics.json").read_text())
    assert a["steps"] == b["steps"] and a["train_graphs"] == b["train_graphs"]
    for key in ("best_valid_mae", "test_mae"):
        assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-4), key
    rows = (cap_out / "test_predictions.csv").read_text().splitlines()
    assert len(rows) == len((eager_out / "test_predictions.csv").read_text().splitlines())
    history = (cap_out / "history.csv").read_text()
    assert "tensor" not in history


def test_streamed_predictions_through_captured_passes_equal_the_eager_ones(monkeypatch, tmp_path):
    from graphormer_urpe.inference.engines import stream

    ckpt = tiny_checkpoint(tmp_path / "best.pt", "ogb")
    ref = predict_reference(ckpt, MIXED, batch_size=5)
    backends: list[EagerGraphs] = []

    def backend(device):
        backends.append(EagerGraphs())
        return backends[-1]

    monkeypatch.setattr(stream, "default_backend", backend)
    results = list(stream.iter_predictions(ckpt, iter(MIXED), batch_size=5, workers=0))
    assert backends and backends[0].replayed >= 1
    values, errors = ref
    for p, v in zip(results, values, strict=True):  # static batches: equal to rounding
        if v is not None:
            torch.testing.assert_close(p.values, v, atol=1e-5, rtol=1e-5)
    assert [p.error is None for p in results] == [e is None for e in errors]


def test_evaluation_through_captured_passes_equals_the_eager_one(monkeypatch):
    from torch.utils.data import DataLoader

    graphs = graphs_with_targets(23)
    model = Graphormer(tiny_config(attention="urpe", multi_hop_max_dist=HOPS)).eval()
    cpu = torch.device("cpu")
    want, y_want = training_run.predict(
        model,
        DataLoader(graphs, batch_size=8, collate_fn=make_collator(model.config, cpu)),
        cpu,
    )
    backends: list[EagerGraphs] = []
    monkeypatch.setattr(
        prediction, "default_backend", lambda d: backends.append(EagerGraphs()) or backends[-1]
    )
    got, y = training_run.predict_dataset(model, graphs, 8, cpu, Precision("fp32", cpu))
    assert backends[0].captured >= 1 and got.shape == (23, 1)  # the last batch: 7 + 1 empty
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert torch.equal(y, y_want)


# ---------------------------------------------------------------------------------------------
# On a GPU


@CUDA
@pytest.mark.cuda
@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
@pytest.mark.parametrize("kind", ["fp32", "bf16"])
def test_cuda_graph_steps_equal_eager_steps_on_the_gpu(attention, kind):
    graphs = graphs_with_targets(40)
    dev = torch.device("cuda")
    first = same_shape_batches(graphs[:8], 6, seed=1)
    second = same_shape_batches(graphs[8:14], 6, size=6, seed=2)
    batches = [b.pin_memory() for pair in zip(first, second, strict=True) for b in pair]

    def setup():
        model, opt, sched, _, _ = step_setup(attention, graphs)
        model = model.to(dev)
        opt = make_optimizer(model.parameters(), 1e-3, 0.01)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: linear_schedule(s, 2, 10, 1e-3, 1e-9) / 1e-3
        )
        return model, opt, sched, Precision(kind, dev), StepTotals(dev)

    torch.manual_seed(0)
    eager = setup()
    eager_step = CapturedStep(
        eager[1], eager[2], bound_body(eager[0], *eager[1:2], *eager[3:]), dev
    )
    for i, b in enumerate(batches):
        eager_step(b, i)
    torch.manual_seed(0)
    model, opt, sched, precision, totals = setup()
    step = CapturedStep(opt, sched, bound_body(model, opt, precision, totals), dev, CudaGraphs(dev))
    torch.cuda.synchronize()
    for i, b in enumerate(batches):
        step(b, i)
    torch.cuda.synchronize()
    assert step.captured and step.cycle.shapes == 2
    tol = dict(atol=1e-4, rtol=1e-3) if kind == "fp32" else dict(atol=2e-2, rtol=5e-2)
    for (name, p), q in zip(model.named_parameters(), eager[0].parameters(), strict=True):
        torch.testing.assert_close(p, q, **tol, msg=name)
    a, b = totals.read(), eager[4].read()
    assert a[1:] == b[1:] and a[0] == pytest.approx(b[0], rel=1e-2)
    # the learning rate of a replay is the scheduler's: the last step used lr(11)
    assert float(opt.param_groups[0]["lr"]) == pytest.approx(linear_schedule(12, 2, 10, 1e-3, 1e-9))


@CUDA
@pytest.mark.cuda
def test_cuda_graph_dropout_draws_new_masks_at_every_replay():
    graphs = graphs_with_targets(20)
    dev = torch.device("cuda")
    cfg = tiny_config(attention="urpe", multi_hop_max_dist=HOPS, attention_dropout=0.3,
                      dropout=0.2)  # fmt: skip
    model = Graphormer(cfg).to(dev).train()
    forward = CapturedForward(model, None, dev, CudaGraphs(dev))
    batch = same_shape_batches(graphs, 1)[0]
    outs = [forward(batch) for _ in range(4)]  # warm-up, capture + replay, replays
    assert forward.cycle.shapes == 1
    assert not torch.equal(outs[2], outs[3])  # new dropout masks at each replay


@CUDA
@pytest.mark.cuda
def test_cuda_train_command_captures_its_steps(table, tmp_path, caplog):
    """(Named as the GPU check lists it: the run the train command makes, through the library.)"""
    out = tmp_path / "run"
    with caplog.at_level("DEBUG", logger="graphormer_urpe.runtime.capture"):
        train(tiny_train_config(table, tmp_path / "data", out, device="cuda"), progress=False)
    assert "captured batch shape" in caplog.text and "continuing eagerly" not in caplog.text
    metrics = json.loads((out / "metrics.json").read_text())
    assert math.isfinite(metrics["test_mae"])


@CUDA
@pytest.mark.cuda
def test_cuda_streamed_predictions_equal_the_cpus(tmp_path):
    from graphormer_urpe.inference import iter_predictions, load_model

    ckpt = tiny_checkpoint(tmp_path / "best.pt", "ogb")
    cpu = list(iter_predictions(load_model(ckpt, "cpu"), MIXED, batch_size=5, workers=0))
    gpu = list(iter_predictions(load_model(ckpt, "cuda"), MIXED, batch_size=5, workers=0))
    for a, b in zip(cpu, gpu, strict=True):
        assert (a.values is None) == (b.values is None) and a.error == b.error
        if a.values is not None:  # bf16 autocast on the GPU
            torch.testing.assert_close(b.values, a.values, atol=0.05, rtol=0.05)
