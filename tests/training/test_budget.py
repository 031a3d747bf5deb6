"""Time budgets: measured costs, the pacer's stop and re-plan, the re-plannable schedule and
the short-run report, on a clock the tests move (the command's refusals and plans are in
``tests/cli/test_time_limit.py``). Wall-clock targets are measured by
``scripts/bench_time_limit.py``, not here."""

from __future__ import annotations

import functools
import json
import logging

import pytest

from graphormer_urpe.training import run as training_run
from graphormer_urpe.training import run_setup
from graphormer_urpe.training.pacing import MIN_USEFUL_EPOCHS, Pacer, Replans, RunCosts, Schedule
from graphormer_urpe.training.run import linear_schedule, train
from graphormer_urpe.training.trainer import Trainer
from tests.helpers import FakeClock, steady_probe, tiny_train_config


def _costs(**kw) -> RunCosts:
    base = dict(step=0.5, valid=2.0, test=3.0, save=0.25, steps_per_epoch=10, eval_every=2)
    base.update(kw)
    return RunCosts(**base)


def test_run_costs_add_up():
    c = _costs()
    assert c.per_epoch == pytest.approx(0.25 + (2.0 + 0.25) / 2)
    assert c.per_step == pytest.approx(0.5 + c.per_epoch / 10)
    assert c.finish == pytest.approx(2 * 2.0 + 3.0 + 0.5)  # two validation passes: calibration
    for seconds in (10.0, 60.0, 600.0):
        steps = c.steps_for(seconds)
        assert c.seconds_for(steps) <= seconds < c.seconds_for(steps + 1)
    assert c.steps_for(1.0) == 0


def test_schedule_is_graphormers_and_a_replan_continues_without_a_jump():
    plain = Schedule(warmup=10, total=100, peak=1e-3, end=1e-9)
    for step in range(0, 120, 7):
        assert plain(step) == pytest.approx(linear_schedule(step, 10, 100, 1e-3, 1e-9))
    s = Schedule(warmup=10, total=100, peak=1e-3, end=1e-9)
    before = s(40)
    s.replan(40, 60)  # the machine slowed down: the decay now ends at 60
    assert s(40) == pytest.approx(before)
    assert s(60) == pytest.approx(1e-9) and s(59) > s(60)
    rates = [s(k) for k in range(40, 61)]
    steps = [b - a for a, b in zip(rates, rates[1:], strict=False)]
    assert all(d < 0 for d in steps) and max(steps) - min(steps) < 1e-12  # linear
    grown = Schedule.from_state(s.state())
    grown.replan(50, 200)  # faster again: longer
    assert grown(50) == pytest.approx(s(50)) and grown(200) == pytest.approx(1e-9)
    early = Schedule(warmup=10, total=100, peak=1e-3, end=1e-9)
    early.replan(5, 50)  # during the warm-up: the warm-up is kept
    assert early(5) == pytest.approx(linear_schedule(5, 10, 50, 1e-3, 1e-9))
    assert early(10) == pytest.approx(1e-3) and early(50) == pytest.approx(1e-9)


def test_the_pacer_stops_earlier_and_plans_fewer_steps_when_steps_slow_down():
    c = _costs()
    pacer = Pacer(deadline=100.0, costs=c, budget=100.0, window=5.0)
    assert pacer.reserve == pytest.approx(2.0)
    finish = 1.25 * c.finish
    assert not pacer.time_up(100.0 - finish - 2.0 - 0.01)
    assert pacer.time_up(100.0 - finish - 2.0 + 0.01)
    assert not pacer.observe(0, 0.0)  # the first observation starts the window
    assert not pacer.observe(5, 2.5)  # under a window: no pace yet
    assert pacer.observe(10, 5.0) and pacer.slowdown == pytest.approx(1.0)
    before = pacer.steps_left(5.0)
    # the next window runs at twice the measured time per step
    assert pacer.observe(15, 10.0)
    assert pacer.recent == pytest.approx(2.0) and pacer.slowdown == pytest.approx(1.25)
    assert pacer.finish_estimate() == pytest.approx(2.0 * finish)  # the slower pace
    assert pacer.steps_left(10.0) < before - 5
    assert pacer.time_up(100.0 - 2.0 * finish - 2.0 + 0.01)
    # an evaluation between two epochs is left out of the steps' window
    pacer.pause(10.0)
    pacer.resume(40.0)  # 30 s of validation
    assert pacer.observe(25, 45.0) and pacer.recent == pytest.approx(1.0)
    pacer.slowdown = pacer.recent = 2.0
    # a slow validation makes the finish's validation and test slower in step
    pacer.observe_evaluation(8.0)  # 4x the measured 2 s, at a 2x pace
    assert pacer.costs.valid == pytest.approx(4.0) and pacer.costs.test == pytest.approx(6.0)


def test_a_replan_is_made_for_a_change_over_10_percent_and_logged_once_a_minute():
    """An injected clock: paces that swing from window to window move the plan a little
    (the smoothed pace), and of the re-plans made only one a minute is logged."""
    c = _costs(step=1.0, valid=0.0, test=0.0, save=0.0, steps_per_epoch=1000, eval_every=1)
    pacer = Pacer(deadline=10_000.0, costs=c, budget=10_000.0, window=5.0)
    now, step = 0.0, 0
    pacer.observe(step, now)
    plans = []
    for k in range(40):  # windows alternately at 0.6x and 1.4x the measured time per step
        pace = 0.6 if k % 2 else 1.4
        step += 10
        now += 10 * pace
        assert pacer.observe(step, now)
        plans.append(step + pacer.steps_left(now))
    swing = (max(plans[4:]) - min(plans[4:])) / max(plans[4:])
    assert swing < 0.2  # raw windows would swing the plan by more than half
    r = Replans()
    assert not r.worth(100, 109) and not r.worth(100, 91) and r.worth(100, 111) and r.worth(100, 89)
    logged = [r.log_now(t) for t in (0.0, 6.0, 30.0, 59.9, 60.0, 75.0, 121.0)]
    assert logged == [True, False, False, False, True, False, True]


def test_a_short_run_says_so(table, tmp_path, caplog):
    config = tiny_train_config(table, tmp_path / "data", tmp_path / "run", epochs=1)
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        train(config, progress=False)
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["short_run"] is True and m["epochs_trained"] == pytest.approx(1.0)
    final = [r.getMessage() for r in caplog.records if r.getMessage().startswith("best valid")]
    assert final and "too short to trust" in final[-1]
    plan = [r.getMessage() for r in caplog.records if "expected to take about" in r.getMessage()]
    assert plan and "from its first steps" in plan[0]
    # the training loop's first line: what it expects to take (the set-up's lines after it);
    # the run's logger keeps its earlier name, for users' log filters
    lines = [r.getMessage() for r in caplog.records if r.name == "graphormer_urpe.training.loop"]
    assert lines[0].startswith("expected to take about")
    assert {lines[1].split()[0], lines[2].split()[0]} == {"targets", "domain"}


def test_a_long_enough_run_is_not_short(table, tmp_path):
    config = tiny_train_config(table, tmp_path / "data", tmp_path / "run", epochs=MIN_USEFUL_EPOCHS)
    train(config, progress=False)
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["short_run"] is False and m["epochs_trained"] == pytest.approx(MIN_USEFUL_EPOCHS)


def test_a_run_whose_steps_slow_down_replans(table, tmp_path, caplog, monkeypatch):
    """On a clock that only the steps move: steps take the measured 0.2 s up to the 10th, then
    four times that (a stand-in for a competing process). The run sees the pace and re-plans
    to fewer steps than first planned, and stops in time."""
    clock = FakeClock()
    real = run_setup.step_body
    calls = {"n": 0}

    def slow(*a, **kw):
        out = real(*a, **kw)
        calls["n"] += 1
        clock.advance(0.2 if calls["n"] <= 10 else 0.8)
        return out

    monkeypatch.setattr(run_setup, "step_body", slow)
    trainer = functools.partial(Trainer, clock=clock, probe=steady_probe([1.0]))
    monkeypatch.setattr(training_run, "Trainer", trainer)
    out = tmp_path / "run"
    config = tiny_train_config(table, tmp_path / "data", out, epochs=None, time_limit=0.5)
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        train(config, progress=False)
    m = json.loads((out / "metrics.json").read_text())
    planned = json.loads((out / "config.json").read_text())["max_steps"]
    assert "re-planned" in caplog.text
    assert m["steps"] < planned and m["pace"] > 1.5 and m["steps_planned"] < planned
    assert calls["n"] > 10  # the slow steps ran
