"""What a run does with the flags typed: flags beat presets, time budgets, re-runs from a saved
config, URPE by default, and URPE's C in its own weight-decay group."""

from __future__ import annotations

import csv
import functools
import json
import logging
import sys
import time
from dataclasses import replace

import pytest
import torch

from graphormer_urpe import cli
from graphormer_urpe.graph.model import Graphormer, get_preset
from graphormer_urpe.io.checkpoint import load_checkpoint
from graphormer_urpe.runtime import TRAIN_PRESETS, make_config
from graphormer_urpe.runtime.train_config import plan_steps
from graphormer_urpe.training import run, run_setup
from graphormer_urpe.training.run import make_optimizer, parameter_groups
from graphormer_urpe.training.run_costs import CostProbe, batch_work
from graphormer_urpe.training.trainer import Trainer
from tests.helpers import steady_probe, train_args


def _config(*flags: str):
    return cli.train_config(cli.build_parser().parse_args(["train", *flags]))


# ---------------------------------------------------------------------------------------
# a typed flag beats the preset
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", sorted(TRAIN_PRESETS))
def test_epochs_beats_every_presets_step_count(preset, caplog):
    cfg = _config("--preset", preset, "--epochs", "2")
    assert cfg.epochs == 2 and cfg.max_steps is None
    recipe = TRAIN_PRESETS[preset]
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        total, epochs, warmup = plan_steps(cfg, 50)
    assert (total, epochs) == (100, 2)
    assert 1 <= warmup <= total // 10
    if recipe["max_steps"]:  # the published recipe's fraction of the run
        assert warmup == round(100 * recipe["warmup_steps"] / recipe["max_steps"])
        assert "scaled to" in caplog.text and str(recipe["warmup_steps"]) in caplog.text


@pytest.mark.parametrize("preset", sorted(TRAIN_PRESETS))
def test_max_steps_beats_every_presets_epochs_and_typed_warmup_is_kept(preset):
    cfg = _config("--preset", preset, "--max-steps", "30")
    assert cfg.max_steps == 30 and cfg.epochs is None
    assert plan_steps(cfg, 7)[:2] == (30, 5)
    cfg = _config("--preset", preset, "--epochs", "3", "--warmup-steps", "9")
    assert plan_steps(cfg, 40) == (120, 3, 9)  # typed: kept although > 10% of the run
    both = _config("--preset", preset, "--epochs", "3", "--max-steps", "11")
    assert plan_steps(both, 40)[0] == 11  # both typed: the step count wins, as documented


def test_a_long_enough_run_keeps_the_presets_warmup():
    cfg = make_config("zinc-slim", epochs=1000)
    assert plan_steps(cfg, 400) == (400_000, 1000, 40_000)
    cfg = make_config("pcqm4mv2-small", max_steps=200_000)
    assert plan_steps(cfg, 1000)[2] == 12_000  # 60k > 10% of 200k: 6% of the run


def test_small_presets_warmup_is_a_tenth_of_a_run_planned_to_fill_a_time_limit():
    filled = make_config("small", max_steps=525, epochs=None, fill_time_limit=True)
    assert plan_steps(filled, 15) == (525, 35, round(525 / 10))
    assert plan_steps(replace(filled, max_steps=6000), 15)[2] == 500  # a tenth or less: kept
    typed = replace(filled, fit_warmup=False)  # --warmup-steps given: kept as typed
    assert plan_steps(typed, 15)[2] == 500
    counted = make_config("small", max_steps=525, epochs=None)  # steps not from a time limit
    assert plan_steps(counted, 15)[2] == 500


def test_a_warmup_fraction_is_that_share_of_the_planned_steps():
    cfg = _config("--warmup-fraction", "0.05", "--warmup-steps", "9", "--max-steps", "300")
    assert cfg.warmup_fraction == 0.05
    assert plan_steps(cfg, 20)[2] == 15  # 5% of 300 steps; beats the warm-up steps typed
    assert plan_steps(replace(cfg, warmup_fraction=0.0), 20)[2] == 1  # at least one step
    with pytest.raises(ValueError, match="warmup_fraction"):
        plan_steps(replace(cfg, warmup_fraction=1.5), 20)


def test_epochs_with_a_step_preset_trains_that_many_epochs(table, tmp_path):
    out = tmp_path / "run"
    args = train_args(table, tmp_path / "data", out, "--preset", "pcqm4mv2-small")
    args[args.index("--warmup-steps") : args.index("--warmup-steps") + 2] = []
    args[args.index("--epochs") + 1] = "2"
    assert cli.main(args) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == metrics["steps_planned"] == 2 * 4 and metrics["epochs"] == 2
    saved = json.loads((out / "config.json").read_text())
    assert saved["max_steps"] is None and saved["warmup_steps"] == max(1, round(8 * 0.06))


# ---------------------------------------------------------------------------------------
# --time-limit
# ---------------------------------------------------------------------------------------


def test_time_limit_stops_cleanly_and_resume_finishes(table, tmp_path, caplog):
    out = tmp_path / "run"
    args = train_args(table, tmp_path / "data", out)  # no --attention: URPE by default
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        assert cli.main([*args, "--time-limit", "1e-9"]) == 0
    assert "schedule stays planned over the 12 steps" in caplog.text
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["stopped_on_time"] is True and metrics["time_limit_minutes"] == 1e-9
    assert metrics["steps"] == 1 and metrics["steps_planned"] == 12
    assert metrics["attention"] == "urpe"
    assert (out / "best.pt").exists() and "test_mae" in metrics
    best = load_checkpoint(out / "best.pt")
    assert metrics["best_valid_rmse"] == best["best"]
    last = load_checkpoint(out / "last.pt")
    assert last["step"] == 1 and last["position"] == {"epoch": 0, "batch": 1}
    # a new launch without a budget continues from the exact position to the planned end
    assert cli.main([*args, "--resume"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["stopped_on_time"] is False and metrics["steps"] == 12
    # the epoch cut short and finished after --resume has one row, the finished one
    with open(out / "history.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2] and metrics["epochs"] == 3
    assert [int(r["step"]) for r in rows] == [4, 8, 12]


def test_the_command_line_counts_its_time_limit_from_its_own_start(
    table,
    tmp_path,
    monkeypatch,
    steady_clock,
):
    """``graphormer-urpe train`` (no argv: this process is the command) counts --time-limit
    from the package's import; an in-process call with argv counts from the call (on a steady
    clock: machine load cannot make either run late)."""
    args = train_args(table, tmp_path / "data", tmp_path / "cmd", "--time-limit", "1")
    monkeypatch.setattr(cli, "IMPORTED_AT", time.perf_counter() - 61)  # started 61 s ago
    monkeypatch.setattr(sys, "argv", ["graphormer-urpe", *args])
    assert cli.main() == 0
    metrics = json.loads((tmp_path / "cmd" / "metrics.json").read_text())
    assert metrics["stopped_on_time"] is True and metrics["steps"] == 1
    args = train_args(table, tmp_path / "data", tmp_path / "call", "--time-limit", "1")
    assert cli.main(args) == 0  # the same, called with argv: a minute from now
    metrics = json.loads((tmp_path / "call" / "metrics.json").read_text())
    assert metrics["stopped_on_time"] is False and metrics["steps"] == metrics["steps_planned"]


def test_time_limit_without_steps_plans_the_run_to_fill_it(
    table, tmp_path, caplog, monkeypatch, steady_clock
):
    """--time-limit alone: the steps are planned from measured step and validation times and
    recorded; the run equals the one given those steps with --max-steps (the measurement
    leaves the RNG as it was); typed --epochs keep their plan. On a steady clock (the
    measurement runs, its timings are fixed), so the plan and the run do not depend on the
    machine's load."""
    probe = steady_probe(steady_clock, measure=True)
    monkeypatch.setattr(run, "Trainer", functools.partial(Trainer, probe=probe))
    args = train_args(table, tmp_path / "data", tmp_path / "plan")
    i = args.index("--epochs")
    del args[i : i + 2]
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        assert cli.main([*args, "--time-limit", "0.1"]) == 0
    assert "without --epochs/--max-steps" in caplog.text and "planned" in caplog.text
    planned = json.loads((tmp_path / "plan" / "metrics.json").read_text())
    saved = json.loads((tmp_path / "plan" / "config.json").read_text())
    steps = planned["steps_planned"]
    assert saved["fill_time_limit"] and saved["max_steps"] == steps >= 1
    assert saved["epochs"] is None
    assert planned["steps"] == steps and not planned["stopped_on_time"]
    # the same run with the steps typed: the same numbers
    fixed = [a if a != str(tmp_path / "plan") else str(tmp_path / "fixed") for a in args]
    assert cli.main([*fixed, "--max-steps", str(steps)]) == 0
    again = json.loads((tmp_path / "fixed" / "metrics.json").read_text())
    assert again["steps"] == steps and again["best_valid_mae"] == planned["best_valid_mae"]
    assert again["test_mae"] == planned["test_mae"]
    caplog.clear()
    typed = train_args(table, tmp_path / "data", tmp_path / "typed", "--time-limit", "5")
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        assert cli.main(typed) == 0
    assert "without --epochs/--max-steps" not in caplog.text
    assert "schedule stays planned over the 12 steps" in caplog.text
    assert json.loads((tmp_path / "typed" / "metrics.json").read_text())["steps_planned"] == 12


def test_time_budget_plan_with_a_stubbed_clock(table, tmp_path, monkeypatch):
    """With the clock frozen and the measured times stubbed, the planned steps are exactly
    what the budget holds: all of it less a reserve (1% and a second) and the finish (one
    validation, the test, the best and last checkpoints), over a step plus its share of the
    epoch's checkpoint and of the validation (with its best checkpoint) every ``eval_every``
    epochs."""
    import functools
    import math
    import types

    frozen = types.SimpleNamespace(perf_counter=lambda: 1000.0)
    monkeypatch.setattr(cli, "time", frozen)  # the command's start, read by cli.main
    # stubbed times large enough that the budget holds a few epochs of steps (each one runs)
    step_s, batch_s, save_s = 2.0, 1.0, 0.5

    class FixedProbe(CostProbe):
        """Every batch one unit of padded size: the measured seconds per unit are per batch."""

        def work(self, sizes, index):
            return 1.0

        def seconds_per_step(self, sizes, batches=5):
            return step_s, save_s

        def seconds_per_eval(self, dataset, sizes, split, batches=3):
            return batch_s

    trainer = functools.partial(Trainer, clock=frozen.perf_counter, probe=FixedProbe)
    monkeypatch.setattr(run, "Trainer", trainer)
    args = train_args(table, tmp_path / "data", tmp_path / "run", "--eval-every", "2")
    i = args.index("--epochs")
    del args[i : i + 2]
    assert cli.main([*args, "--time-limit", "1"]) == 0
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    batch = 8
    per_epoch = math.ceil(m["train_graphs"] / batch)
    valid_s = batch_s * math.ceil(m["valid_graphs"] / batch)
    test_s = batch_s * math.ceil(m["test_graphs"] / batch)
    epoch_s = save_s + (valid_s + save_s) / 2
    reserve, finish = 0.01 * 60 + 1.0, valid_s + test_s + 2 * save_s
    want = int((60 - reserve - finish) / (step_s + epoch_s / per_epoch))
    assert m["steps_planned"] == m["steps"] == want
    assert json.loads((tmp_path / "run" / "config.json").read_text())["max_steps"] == want


def test_no_progress_bar_into_a_log_file_but_a_line_per_epoch(table, tmp_path, caplog, capfd):
    """Without --no-progress and with standard error not a terminal (here captured), no bar
    is drawn; every epoch logs a line, validated or not."""
    args = train_args(table, tmp_path / "data", tmp_path / "run", "--eval-every", "2")
    args.remove("--no-progress")
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        assert cli.main(args) == 0
    err = capfd.readouterr().err
    assert "train:" not in err and "it/s" not in err and "\r" not in err
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert [line.split()[1] for line in lines] == ["0", "1", "2"]
    assert "valid" not in lines[0] and "valid" in lines[1] and "valid" in lines[2]
    # predict and evaluate draw no bar into a log file either
    best = str(tmp_path / "run" / "best.pt")
    assert cli.main(["predict", "--checkpoint", best, "--smiles", "CCO", "CCN"]) == 0
    assert cli.main(["evaluate", "--checkpoint", best]) == 0
    err = capfd.readouterr().err
    assert "mol/s" not in err and "it/s" not in err and "\r" not in err


# ---------------------------------------------------------------------------------------
# --config: repeat a run
# ---------------------------------------------------------------------------------------


def test_config_repeats_a_run_and_typed_flags_override_fields(table, tmp_path, capsys):
    first = tmp_path / "first"
    args = train_args(table, tmp_path / "data", first, "--preset", "zinc-slim")
    args[args.index("--epochs") + 1] = "1"
    assert cli.main(args) == 0
    original = json.loads((first / "config.json").read_text())
    assert original["preset"] == "zinc-slim" and original["model"]["attention"] == "urpe"

    again = tmp_path / "again"
    assert cli.main(["train", "--config", str(first / "config.json"), "--out", str(again)]) == 0
    repeated = json.loads((again / "config.json").read_text())
    assert {**repeated, "out": None} == {**original, "out": None}
    m1 = json.loads((first / "metrics.json").read_text())
    m2 = json.loads((again / "metrics.json").read_text())
    assert m2["best_valid_mae"] == pytest.approx(m1["best_valid_mae"], abs=1e-6)

    other = tmp_path / "other"
    flags = ["--out", str(other), "--seed", "7", "--attention", "graphormer"]
    assert cli.main(["train", "--config", str(first / "config.json"), *flags]) == 0
    changed = json.loads((other / "config.json").read_text())
    diff = {k for k in original if original[k] != changed[k]}
    assert diff == {"out", "seed", "model"}
    model_diff = {k for k in original["model"] if original["model"][k] != changed["model"][k]}
    assert model_diff == {"attention"}

    capsys.readouterr()
    assert cli.main(["train", "--config", str(first / "config.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and str(first) in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"epochs": 2, "colour": "red"}')
    assert cli.main(["train", "--config", str(bad)]) == 2
    assert "colour" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# URPE by default
# ---------------------------------------------------------------------------------------


def test_urpe_is_the_default_attention_of_train():
    cfg = _config()
    assert cfg.model.attention == "urpe" and cfg.out.endswith("-urpe")
    assert cfg.preset == "small" and cfg.dataset == "nci5k"
    for preset in TRAIN_PRESETS:
        assert _config("--preset", preset).model.attention == "urpe"
    base = _config("--attention", "graphormer")
    assert base.model.attention == "graphormer" and base.out.endswith("-graphormer")


# ---------------------------------------------------------------------------------------
# URPE's C: its own weight decay
# ---------------------------------------------------------------------------------------


def test_urpe_scale_has_its_own_weight_decay_group():
    torch.manual_seed(0)
    model = Graphormer(get_preset("small", attention="urpe", num_layers=2))
    groups = parameter_groups(model, 0.1, 0.0)
    assert [g["name"] for g in groups] == ["default", "attn_scale"]
    named = dict(model.named_parameters())
    scale_names = {n for n in named if ".spatial_scale." in n}
    assert len(scale_names) == 2
    c_ids = {id(p) for p in groups[1]["params"]}
    rest_ids = {id(p) for p in groups[0]["params"]}
    assert c_ids == {id(named[n]) for n in scale_names} and not c_ids & rest_ids
    assert c_ids | rest_ids == {id(p) for p in named.values()}
    # with zero gradients AdamW only decays: C stays 1, every other parameter shrinks
    opt = make_optimizer(groups, lr=0.5, weight_decay=0.1)
    before = {n: p.detach().clone() for n, p in named.items()}
    for p in named.values():
        p.grad = torch.zeros_like(p)
    opt.step()
    for n, p in named.items():
        factor = 1.0 if n in scale_names else 1.0 - 0.5 * 0.1
        torch.testing.assert_close(p.detach(), before[n] * factor)
    plain = Graphormer(get_preset("small", attention="graphormer", num_layers=2))
    assert [g["name"] for g in parameter_groups(plain, 0.1, 0.0)] == ["default"]


def test_urpe_weight_decay_flag_and_default():
    assert _config().urpe_weight_decay == 0.0
    assert _config("--urpe-weight-decay", "0.05").urpe_weight_decay == 0.05
    assert _config("--weight-decay", "0.3").urpe_weight_decay == 0.0


def test_a_run_begun_with_one_optimizer_group_resumes_with_one(table, tmp_path, caplog):
    out = tmp_path / "run"
    args = train_args(table, tmp_path / "data", out)
    with pytest.MonkeyPatch.context() as mp:  # the optimizer as it was before the C group
        mp.setattr(
            run_setup, "parameter_groups", lambda model, wd, urpe_wd: list(model.parameters())
        )
        assert cli.main([*args, "--time-limit", "1e-9"]) == 0
    assert len(load_checkpoint(out / "last.pt")["optimizer"]["param_groups"]) == 1
    with caplog.at_level(logging.WARNING, logger="graphormer_urpe"):
        assert cli.main([*args, "--resume"]) == 0
    assert "before URPE's C had its own weight-decay group" in caplog.text
    assert json.loads((out / "metrics.json").read_text())["steps"] == 12
    assert len(load_checkpoint(out / "last.pt")["optimizer"]["param_groups"]) == 1


def test_a_batchs_work_is_its_padded_size():
    """The time-limit plan weighs batches by ``B (n + 1)^2`` (``n``: the batch's largest
    graph), checked against a plain loop."""
    import numpy as np

    sizes = np.array([3, 9, 4, 30, 1], dtype=np.int64)
    for index in ([0], [0, 2, 4], [1, 3], [4, 3, 2, 1, 0]):
        largest = 0
        for i in index:
            largest = max(largest, int(sizes[i]))
        assert batch_work(sizes, index) == len(index) * (largest + 1) ** 2
    assert batch_work(sizes, []) == 0.0
