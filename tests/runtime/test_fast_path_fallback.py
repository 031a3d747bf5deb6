"""The fast path cannot stop a run: each way it can fail, simulated on the CPU.

The fused kernel runs on the CPU under Triton's interpreter. Failures are injected where a GPU
would raise them (the kernel launches, the forward and backward passes at the run's sizes,
the capture and its warm-up), or as wrong numbers. Every run must finish with the result of
an eager run, say once what failed and name the flag that skips it.
"""

from __future__ import annotations

import importlib.util
import json
import types

import pytest
import torch

from graphormer_urpe import Graphormer
from graphormer_urpe.attention.fused import guard as fused_guard
from graphormer_urpe.attention.fused import kernels as fused_kernels
from graphormer_urpe.attention.fused import launch as fused_attention
from graphormer_urpe.attention.kernel_choice import attention_kernel, fused_kernel_for
from graphormer_urpe.runtime.capture import CapturedStep, EagerGraphs
from graphormer_urpe.training import steps, train
from graphormer_urpe.training.steps import make_optimizer
from tests.helpers import (
    HOPS,
    URPE_NO_DROPOUT,
    assert_same_run,
    bound_body,
    graphs_with_targets,
    same_shape_batches,
    stand_in_capture,
    step_setup,
    tiny_config,
    tiny_train_config,
)

PROBE = (2, 2, 20, 16)  # the self-check's [B, H, N, d_h]
CPU = torch.device("cpu")

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="the fused kernel needs Triton"
)


@pytest.fixture(autouse=True)
def fresh_guard(monkeypatch):
    """Every test starts with no device checked, the interpreter on for the CPU kernels."""
    monkeypatch.setattr(fused_guard, "_checked", {})
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _is_probe(q: torch.Tensor) -> bool:
    return tuple(q.shape) == PROBE


class _Failure(RuntimeError):
    """What a GPU would raise (Triton's OutOfResources, a launch failure, ...)."""


def _failing_launches(*args, **kwargs):
    """Stands for ``fused_attention.kernels``: every launch raises."""

    class Launcher:
        def __getitem__(self, grid):
            raise _Failure("out of resource: shared memory, Required: 132096, Hardware limit")

    return types.SimpleNamespace(
        fwd_kernel=Launcher(), bwd_kv_kernel=Launcher(), bwd_q_kernel=Launcher(),
        mask_kernel=Launcher(),
    )  # fmt: skip


def _wrong_forward(real):
    def forward(inp, q, k, v, seed, p):
        out, lse = real(inp, q, k, v, seed, p)
        return out * 1.01, lse  # off by a percent

    return forward


def _forward_failing_past_the_probe(real):
    def forward(inp, q, k, v, seed, p):
        if not _is_probe(q):
            raise _Failure("illegal launch configuration at the run's sizes")
        return real(inp, q, k, v, seed, p)

    return forward


def _backward_failing_past_the_probe(real):
    def backward(inp, q, *rest):
        if not _is_probe(q):
            raise _Failure("out of resource: shared memory (backward at the run's sizes)")
        return real(inp, q, *rest)

    return backward


FAILURES = {
    "launch": ("kernels", lambda real: _failing_launches),
    "wrong numbers": ("_forward", _wrong_forward),
    "forward at the run's sizes": ("_forward", _forward_failing_past_the_probe),
    "backward at the run's sizes": ("_backward", _backward_failing_past_the_probe),
}


def _inject(monkeypatch, failure: str) -> None:
    name, make = FAILURES[failure]
    monkeypatch.setattr(fused_attention, name, make(getattr(fused_attention, name)))


def _fused_runs_here() -> bool:
    return fused_kernels.fused_available(CPU)


# ---------------------------------------------------------------------------------------------
# The self-check


@needs_triton
def test_the_self_check_passes_the_kernel_and_draws_no_random_numbers():
    if not _fused_runs_here():
        pytest.skip("Triton's interpreter is not available")
    before = torch.get_rng_state()
    assert fused_guard.self_check(CPU) is None
    assert torch.equal(torch.get_rng_state(), before)
    with attention_kernel("fused"):
        assert fused_kernel_for(CPU)
    assert fused_guard.fused_failure(CPU) is None


@needs_triton
@pytest.mark.parametrize("failure", ["launch", "wrong numbers"])
def test_the_self_check_catches_a_failing_kernel_and_warns_once(failure, monkeypatch, caplog):
    if not _fused_runs_here():
        pytest.skip("Triton's interpreter is not available")
    _inject(monkeypatch, failure)
    why = fused_guard.self_check(CPU)
    assert why is not None
    assert ("off by" in why) if failure == "wrong numbers" else ("_Failure" in why)
    with caplog.at_level("WARNING"), attention_kernel("fused"):
        for _ in range(3):
            assert not fused_kernel_for(CPU)
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "--attention-kernel eager" in warnings[0].getMessage()
    assert fused_guard.fused_failure(CPU) is not None


def test_errors_are_traced_to_the_kernel_or_not():
    def kernel_code():
        return fused_attention.fused_urpe_attention(torch.zeros(1), None, None)  # raises

    with pytest.raises(Exception) as caught:
        kernel_code()
    assert fused_guard.raised_by_fused_kernel(caught.value)
    try:
        raise ValueError("a bad molecule")
    except ValueError as exc:
        assert not fused_guard.raised_by_fused_kernel(exc)


# ---------------------------------------------------------------------------------------------
# Whole runs: each failure ends in the eager run's result


@pytest.fixture(scope="module")
def eager_run(table, tmp_path_factory):
    base = tmp_path_factory.mktemp("eager")
    urpe = {"attention": "urpe"}
    config = tiny_train_config(table, base / "data", base / "run", urpe, attention_kernel="eager")
    train(config, progress=False)
    return base / "run"


@needs_triton
@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_failing_kernel_leaves_the_run_of_the_eager_kernel(
    failure,
    eager_run,
    table,
    tmp_path,
    monkeypatch,
    caplog,
):
    if not _fused_runs_here():
        pytest.skip("Triton's interpreter is not available")
    _inject(monkeypatch, failure)
    out = tmp_path / "run"
    urpe = {"attention": "urpe"}
    config = tiny_train_config(table, tmp_path / "data", out, urpe, attention_kernel="fused")
    with caplog.at_level("WARNING"):
        train(config, progress=False)
    assert_same_run(eager_run, out)  # the same weights, bit for bit (dropout included)
    warnings = [r.getMessage() for r in caplog.records if "fused URPE attention" in r.getMessage()]
    assert len(warnings) == 1 and "--attention-kernel eager" in warnings[0]
    assert fused_guard.fused_failure(CPU) is not None


# ---------------------------------------------------------------------------------------------
# Captures


class _RefusingCapture(EagerGraphs):
    def capture(self, fn):
        raise RuntimeError("operation not permitted when stream is capturing")


class _FailingWarmUp(EagerGraphs):
    def warm(self, fn):
        raise RuntimeError("CUDA error: an illegal instruction was encountered")


def _captured_run(table, tmp_path, monkeypatch, backend_type):
    backends = stand_in_capture(monkeypatch, backend_type)
    out = tmp_path / backend_type.__name__
    train(tiny_train_config(table, tmp_path / "data", out, URPE_NO_DROPOUT), progress=False)
    assert backends
    return out


@pytest.mark.parametrize("backend_type", [_RefusingCapture, _FailingWarmUp])
def test_a_failing_capture_leaves_the_run_of_eager_steps(
    backend_type,
    table,
    tmp_path,
    monkeypatch,
    caplog,
):
    eager = tmp_path / "eager"
    train(tiny_train_config(table, tmp_path / "data", eager, URPE_NO_DROPOUT), progress=False)
    with caplog.at_level("WARNING"):
        out = _captured_run(table, tmp_path, monkeypatch, backend_type)
    a = json.loads((eager / "metrics.json").read_text())
    b = json.loads((out / "metrics.json").read_text())
    assert a["steps"] == b["steps"] and a["train_graphs"] == b["train_graphs"]
    for key in ("best_valid_mae", "test_mae"):  # static batches: another summation order
        assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-4), key
    warnings = [r.getMessage() for r in caplog.records if "capturing" in r.getMessage()]
    assert len(warnings) == 1 and "--no-capture" in warnings[0]


class _FailingBackward(torch.autograd.Function):
    """The identity whose backward raises (once): a step that fails after its forward pass
    drew dropout masks and added its loss to the totals."""

    armed = False

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        if _FailingBackward.armed:
            _FailingBackward.armed = False
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return grad


def test_a_step_that_fails_on_the_fast_path_is_redone_from_the_state_before_it(monkeypatch):
    """The failed step's loss is counted once and its dropout masks drawn again."""
    real = steps.masked_loss
    monkeypatch.setattr(steps, "masked_loss", lambda *a: _FailingBackward.apply(real(*a)))
    graphs = graphs_with_targets(20)
    batches = same_shape_batches(graphs, 4)
    results = []
    for backend in (None, EagerGraphs()):
        model, opt, sched, precision, totals = step_setup("urpe", graphs)
        model = Graphormer(tiny_config(attention="urpe", multi_hop_max_dist=HOPS, dropout=0.1,
                                       attention_dropout=0.1))  # fmt: skip
        model.load_state_dict(step_setup("urpe", graphs)[0].state_dict())
        opt = make_optimizer(model.parameters(), 1e-3, 0.01)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        body = bound_body(model, opt, precision, totals)
        step = CapturedStep(opt, sched, body, CPU, backend, keep=totals.tensors())
        torch.manual_seed(5)
        _FailingBackward.armed = backend is not None
        for i, b in enumerate(batches):
            step(b, i)
        assert not _FailingBackward.armed and not step.captured
        results.append((model.state_dict(), totals.read(), torch.get_rng_state()))
    (w_a, t_a, r_a), (w_b, t_b, r_b) = results
    assert t_a == t_b and t_a[1] == 4
    assert torch.equal(r_a, r_b)
    for name in w_a:
        assert torch.equal(w_a[name], w_b[name]), name


def test_an_error_of_the_eager_step_is_raised():
    graphs = graphs_with_targets(20)
    model, opt, sched, precision, totals = step_setup("urpe", graphs)
    calls = {"n": 0}

    def broken(batch, set_to_none, step):
        calls["n"] += 1
        raise ValueError("a target of the wrong shape")

    step = CapturedStep(opt, sched, broken, CPU, EagerGraphs(), keep=totals.tensors())
    with pytest.raises(ValueError, match="wrong shape"):
        step(same_shape_batches(graphs, 1)[0], 0)
    assert calls["n"] == 2  # once on the fast path, once eagerly


# ---------------------------------------------------------------------------------------------
# On a GPU: the real kernel passes its check; a failure injected at the run's sizes ends, with
# captured steps, in the result of the eager steps


CUDA = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=CUDA)])
def test_cuda_the_fused_kernel_passes_its_self_check(device, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    before = torch.cuda.get_rng_state()
    assert fused_guard.self_check(torch.device(device)) is None
    assert torch.equal(torch.cuda.get_rng_state(), before)


@pytest.mark.parametrize("failure", [pytest.param(f, marks=CUDA) for f in sorted(FAILURES)])
def test_cuda_a_failing_kernel_leaves_the_run_of_eager_steps(
    failure,
    table,
    tmp_path,
    monkeypatch,
    caplog,
):
    monkeypatch.delenv("TRITON_INTERPRET")
    data, eager, out = tmp_path / "data", tmp_path / "eager", tmp_path / "fast"
    slow = dict(device="cuda", attention_kernel="eager", capture=False)
    train(tiny_train_config(table, data, eager, URPE_NO_DROPOUT, **slow), progress=False)
    monkeypatch.setattr(fused_guard, "_checked", {})
    _inject(monkeypatch, failure)
    with caplog.at_level("WARNING"):
        fast = dict(device="cuda", attention_kernel="fused")
        train(tiny_train_config(table, data, out, URPE_NO_DROPOUT, **fast), progress=False)
    a = json.loads((eager / "metrics.json").read_text())
    b = json.loads((out / "metrics.json").read_text())
    assert a["steps"] == b["steps"]
    for key in ("best_valid_mae", "test_mae"):  # static batches: another summation order
        assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-4), key
    warnings = [r.getMessage() for r in caplog.records if "fused URPE attention" in r.getMessage()]
    assert len(warnings) == 1 and "--attention-kernel eager" in warnings[0]
