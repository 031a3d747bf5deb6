"""Ensembles: the members share the time limit (the command that trains and predicts with one:
``tests/cli/test_ensemble.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


class _Stop(Exception):
    pass


def test_a_time_limit_is_shared_by_the_members(monkeypatch, tmp_path):
    from graphormer_urpe.runtime.train_config import TrainConfig
    from graphormer_urpe.training import ensemble
    from graphormer_urpe.training import run as training_run

    clock = [100.0]  # seconds
    used = [1.0, 5.0, 2.0]  # minutes each member takes
    shares: list[float] = []

    def fake_train(cfg, resume=False, progress=True, started=None, costs=None, check=None):
        shares.append(cfg.time_limit)
        clock[0] += 60 * used[len(shares) - 1]
        return {}

    def stop(_config):
        raise _Stop

    monkeypatch.setattr(ensemble.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(training_run, "train", fake_train)
    monkeypatch.setattr(training_run, "load_splits", stop)
    config = TrainConfig(out=str(tmp_path), time_limit=12.0)
    with pytest.raises(_Stop):
        ensemble.train_ensemble(config, 3, progress=False, started=40.0)  # 1 minute gone
    # the ensemble keeps 1% and 2 s for itself: 11 - t minutes left for 3 members, then
    # 10 - t for 2, then 5 - t for 1
    t = (ensemble.TAIL_SECONDS + 0.01 * 12 * 60) / 60
    assert shares == pytest.approx([(11 - t) / 3, (10 - t) / 2, 5.0 - t])
    assert config.time_limit == 12.0  # the caller's config is left alone


def test_a_resumed_ensemble_trains_the_members_that_fitted(monkeypatch, tmp_path):
    """Two of three members fitted the budget: ``--resume`` continues those two, and the
    ensemble's report keeps the number asked for."""
    from graphormer_urpe.runtime.train_config import TrainConfig
    from graphormer_urpe.training import ensemble
    from graphormer_urpe.training import run as training_run
    from graphormer_urpe.training.pacing import RunCosts

    trained: list[tuple[str, bool]] = []

    def fake_train(cfg, resume=False, progress=True, started=None, costs=None, check=None):
        if check is not None and not trained:  # the first check: two of the three fit
            trained.append(("refused", resume))
            raise ensemble._FewerMembers(2, RunCosts(0.1, 0.1, 0.1, 0.1, 4), 9.5)
        trained.append((Path(cfg.out).name, resume))
        return {}

    def stop(_config):
        raise _Stop

    monkeypatch.setattr(training_run, "train", fake_train)
    monkeypatch.setattr(training_run, "load_splits", stop)
    config = TrainConfig(out=str(tmp_path / "ens"), time_limit=12.0, fill_time_limit=True)
    with pytest.raises(_Stop):
        ensemble.train_ensemble(config, 3, progress=False)
    assert trained == [("refused", False), ("member-0", False), ("member-1", False)]
    plan = json.loads((tmp_path / "ens" / ensemble.PLAN_FILE).read_text())
    assert plan == {"members": 2, "ensemble_asked": 3, "time_limit_for_asked": 9.5}
    trained.clear()
    with pytest.raises(_Stop):
        ensemble.train_ensemble(config, 3, resume=True, progress=False)
    assert trained == [("member-0", True), ("member-1", True)]
