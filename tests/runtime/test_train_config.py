"""The library's config builder: the defaults that ``train`` applies, without the CLI."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import replace

import pytest

from graphormer_urpe.runtime.train_config import (
    TrainConfig,
    build_train_config,
    make_config,
    run_name,
)


def test_defaults_urpe_a_run_folder_named_by_the_data_and_a_time_limit_that_plans_the_run():
    cfg = build_train_config(dataset="csv:data/my mols.csv", time_limit=5.0)
    assert cfg.model.attention == "urpe" and cfg.preset == "small"
    assert cfg.out == os.path.join("runs", "my_mols-small-urpe")
    assert cfg.fill_time_limit
    typed = build_train_config(
        "zinc-slim", None, {"attention": "graphormer"}, time_limit=5.0, epochs=3, out="x"
    )
    assert typed.model.attention == "graphormer" and typed.out == "x" and typed.epochs == 3
    assert not typed.fill_time_limit  # typed epochs are kept


@pytest.mark.parametrize(
    ("dataset", "name"),
    [
        ("csv:data/mols.csv", "mols"),
        ("csv:a/train.csv.gz,a/valid.csv,a/test.csv", "train"),
        ("sdf:x/set (1).sdf", "set__1_"),
        ("zinc", "zinc"),
    ],
)
def test_run_name(dataset, name):
    assert run_name(dataset) == name


def test_a_saved_config_is_repeated_with_changes_but_not_into_its_own_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    saved = make_config("small", epochs=2, out=str(run))
    (run / "config.json").write_text(json.dumps(saved.to_dict()))
    again = build_train_config(config_file=run / "config.json", lr=1e-3, out=str(tmp_path / "b"))
    assert again.epochs == 2 and again.lr == 1e-3 and again.out == str(tmp_path / "b")
    assert build_train_config(config_file=run / "config.json").out == str(run)  # not run yet
    (run / "metrics.json").write_text("{}")
    with pytest.raises(ValueError, match="already holds the run"):
        build_train_config(config_file=run / "config.json")
    assert build_train_config(config_file=run / "config.json", resume=True).out == str(run)
    with pytest.raises(ValueError, match="--preset cannot be combined"):
        build_train_config("small", run / "config.json")


def test_the_deprecated_cache_dir_reads_and_sets_the_store_dir():
    config = TrainConfig(store_dir="/stores")
    with pytest.warns(DeprecationWarning, match="cache_dir is deprecated: use store_dir"):
        assert config.cache_dir == "/stores"
    with pytest.warns(DeprecationWarning, match="use store_dir"):
        config.cache_dir = "/elsewhere"
    assert config.store_dir == "/elsewhere"
    with pytest.warns(DeprecationWarning, match="use store_dir"):
        assert TrainConfig(cache_dir="/old").store_dir == "/old"
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # copies never go through it
        copy = replace(config, epochs=3)
        assert TrainConfig.from_dict(copy.to_dict()) == copy
    assert copy.store_dir == "/elsewhere" and "cache_dir" not in copy.to_dict()
