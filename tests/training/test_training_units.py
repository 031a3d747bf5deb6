"""Training building blocks: schedule, loss, checkpoints, configs."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest
import torch

from graphormer_urpe.io.checkpoint import (
    CheckpointError,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from graphormer_urpe.runtime import TrainConfig, make_config
from graphormer_urpe.training import linear_schedule, masked_loss
from tests.helpers import SMILES


def reference_lr(step, warmup, total, peak, end):
    """Graphormer's PolynomialDecayLR with power 1, written out plainly."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if step >= total:
        return end
    remaining = 1 - (step - warmup) / (total - warmup)
    return (peak - end) * remaining + end


def test_schedule_matches_reference():
    for step in range(0, 130):
        assert math.isclose(
            linear_schedule(step, 20, 120, 2e-4, 1e-9), reference_lr(step, 20, 120, 2e-4, 1e-9)
        )
    assert linear_schedule(19, 20, 120, 1.0, 0.0) == 1.0
    assert linear_schedule(120, 20, 120, 1.0, 0.5) == 0.5


def test_masked_loss_ignores_missing_targets():
    pred = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    y = torch.tensor([[2.0, float("nan")], [1.0, 5.0]])
    assert masked_loss(pred, y, "l1").item() == pytest.approx((1 + 2 + 1) / 3)
    assert masked_loss(pred, y, "mse").item() == pytest.approx((1 + 4 + 1) / 3)
    # smooth L1: 0.5 e^2 below 1, |e| - 0.5 above (errors 1, 2, 1; the first halves the loss)
    pred2 = torch.tensor([[1.5, 2.0], [3.0, 4.0]])
    want = (0.5 * 0.5**2 + (2 - 0.5) + 0.5) / 3
    assert masked_loss(pred2, y, "smooth_l1").item() == pytest.approx(want)
    all_nan = torch.full((2, 2), float("nan"))
    assert masked_loss(pred, all_nan).item() == 0.0


def test_checkpoint_round_trip_and_rng(tmp_path):
    random.seed(3)
    np.random.seed(3)  # noqa: NPY002
    torch.manual_seed(3)
    state = rng_state()
    a = (random.random(), np.random.rand(), torch.rand(1).item())  # noqa: NPY002
    save_checkpoint(tmp_path / "c.pt", {"rng": state, "w": torch.arange(4), "config": "{}"})
    ckpt = load_checkpoint(tmp_path / "c.pt")
    set_rng_state(ckpt["rng"])
    b = (random.random(), np.random.rand(), torch.rand(1).item())  # noqa: NPY002
    assert a == b
    assert torch.equal(ckpt["w"], torch.arange(4))
    assert not list(tmp_path.glob(".*tmp"))  # no temp files left


class _FakeCudaRng:
    """Stands in for ``torch.cuda``'s generator functions and records what is asked of them."""

    def __init__(self, monkeypatch):
        self.calls = []
        for name in ("get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all"):
            monkeypatch.setattr(torch.cuda, name, self._recorder(name))

    def _recorder(self, name):
        def record(*args):
            self.calls.append((name, *args))
            return torch.full((4,), 7, dtype=torch.uint8)

        return record


def test_cpu_runs_leave_cuda_alone(monkeypatch):
    fake = _FakeCudaRng(monkeypatch)
    for device in (None, "cpu", torch.device("cpu")):
        state = rng_state(device)
        assert "cuda" not in state
        set_rng_state({**state, "cuda": [torch.zeros(4, dtype=torch.uint8)]}, device)
    assert fake.calls == []


def test_cuda_rng_state_is_the_runs_gpu_only(monkeypatch):
    fake = _FakeCudaRng(monkeypatch)
    state = rng_state("cuda:1")
    assert [c[0] for c in fake.calls] == ["get_rng_state"]
    assert fake.calls[0][1] == torch.device("cuda", 1)
    assert torch.equal(state["cuda"], torch.full((4,), 7, dtype=torch.uint8))
    fake.calls.clear()
    set_rng_state(state, "cuda:1")
    ((name, saved, device),) = fake.calls
    assert (name, device) == ("set_rng_state", torch.device("cuda", 1))
    assert torch.equal(saved, state["cuda"])


def test_older_per_machine_cuda_states_restore_the_runs_gpu(monkeypatch, caplog):
    """Older checkpoints hold one CUDA state per GPU of the writing machine: the run's GPU
    takes its own entry, and a GPU index the writer did not have is skipped with a warning
    instead of failing on a machine with another number of GPUs."""
    fake = _FakeCudaRng(monkeypatch)
    per_gpu = [torch.full((4,), i, dtype=torch.uint8) for i in range(3)]
    state = {**rng_state(), "cuda": per_gpu}
    set_rng_state(state, "cuda:2")
    ((name, saved, device),) = fake.calls
    assert name == "set_rng_state" and device == torch.device("cuda", 2)
    assert torch.equal(saved, per_gpu[2])
    fake.calls.clear()
    with caplog.at_level("WARNING"):
        set_rng_state(state, "cuda:5")
    assert fake.calls == [] and "no RNG state for cuda:5" in caplog.text


def test_bad_checkpoints_give_one_line_errors(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")
    save_checkpoint(tmp_path / "good.pt", {"w": torch.randn(1000)})
    data = (tmp_path / "good.pt").read_bytes()
    (tmp_path / "trunc.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="cannot be read") as exc:
        load_checkpoint(tmp_path / "trunc.pt")
    assert "\n" not in str(exc.value)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(tmp_path / "junk.pt")

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"format": "graphormer-urpe/1", "x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="unsafe"):
        load_checkpoint(tmp_path / "evil.pt")
    torch.save({"w": 1}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="not a graphormer-urpe checkpoint"):
        load_checkpoint(tmp_path / "other.pt")


def test_unreadable_checkpoints_say_in_words_what_is_wrong(tmp_path):
    import zipfile

    from graphormer_urpe.inference import load_model

    save_checkpoint(tmp_path / "good.pt", {"w": torch.randn(1000), "config": "{}"})
    data = (tmp_path / "good.pt").read_bytes()

    class Evil:
        def __reduce__(self):
            # not print: Ray, once imported by an earlier test, replaces builtins.print
            return (zipfile.is_zipfile, ("pwned",))

    files = {
        "trunc.pt": (data[: len(data) // 2], "zip archive is truncated or damaged"),
        "text.pt": (b"hello world\n" * 4, "not a PyTorch file (it starts with b'hello wo'"),
        "empty.pt": (b"", "the file is empty"),
    }
    for name, (content, _) in files.items():
        (tmp_path / name).write_bytes(content)
    torch.save({"format": "graphormer-urpe/1", "x": Evil()}, tmp_path / "evil.pt")
    files["evil.pt"] = (None, "pickled Python object (zipfile.is_zipfile), which safe loading")
    torch.save({"format": "graphormer-urpe/1", "x": zipfile.ZipInfo("a")}, tmp_path / "obj.pt")
    files["obj.pt"] = (None, "pickled Python object (zipfile.ZipInfo)")
    torch.save({"w": 1, "step": 2}, tmp_path / "other.pt")
    files["other.pt"] = (None, "holding a dict without a 'format' entry (keys: w, step)")
    for name, (_, words) in files.items():
        with pytest.raises(CheckpointError) as exc:
            load_checkpoint(tmp_path / name)
        msg = str(exc.value)
        assert words in msg and str(tmp_path / name) in msg and "\n" not in msg, msg
        assert not re.search(r":\s*\d+$", msg), msg  # never a bare number at the end
    with pytest.raises(CheckpointError, match="has no 'model' entry") as exc:
        load_model(tmp_path / "good.pt", "cpu")
    assert str(tmp_path / "good.pt") in str(exc.value)


def test_make_config_presets_and_overrides():
    cfg = make_config("zinc-slim", model_overrides={"attention": "urpe"}, lr=1e-3, seed=None)
    assert cfg.model.attention == "urpe" and cfg.model.num_layers == 12
    assert cfg.lr == 1e-3 and cfg.seed == 1 and cfg.max_steps == 400_000
    small = make_config("small", max_steps=50)
    assert small.max_steps == 50 and small.epochs is None
    back = TrainConfig.from_dict(cfg.to_dict())
    assert back == cfg
    with pytest.raises(KeyError, match="unknown preset"):
        make_config("huge")


def test_fp16_trains_with_a_grad_scaler_whose_state_is_checkpointed(tmp_path):
    import csv

    from graphormer_urpe.io.checkpoint import load_checkpoint
    from graphormer_urpe.runtime import make_config
    from graphormer_urpe.training import train

    table = tmp_path / "mols.csv"
    with open(table, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "y"])
        for s in SMILES:
            w.writerow([s, len(s)])
    cfg = make_config(
        "small",
        model_overrides=dict(num_layers=1, hidden_dim=16, ffn_dim=16, num_heads=2),
        dataset=f"csv:{table}",
        data_root=str(tmp_path / "data"),
        target_columns=["y"],
        out=str(tmp_path / "run"),
        epochs=2,
        batch_size=8,
        warmup_steps=2,
        precision="fp16",
        device="cpu",
        threads=1,
    )
    metrics = train(cfg, progress=False)
    assert metrics["precision"] == "fp16"
    assert math.isfinite(metrics["best_valid_mae"]) and math.isfinite(metrics["test_mae"])
    scaler = load_checkpoint(tmp_path / "run" / "last.pt")["scaler"]
    assert scaler["scale"] > 0 and "_growth_tracker" in scaler  # an enabled scaler's state


def test_names_of_other_packages_still_import_from_training_with_a_warning():
    """The names ``graphormer_urpe.training`` re-exported from runtime, inference and
    io.checkpoint are those packages' objects, each with a warning that names its package;
    the package's own names come without one."""
    import importlib
    import warnings

    from graphormer_urpe import training

    assert training.MOVED["load_model"] == "graphormer_urpe.inference"
    for name, home in training.MOVED.items():
        with pytest.warns(DeprecationWarning, match=f"import it from {home}"):
            value = getattr(training, name)
        assert value is getattr(importlib.import_module(home), name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in training.__all__:
            assert getattr(training, name) is not None
        assert set(training.MOVED).isdisjoint(training.__all__)
