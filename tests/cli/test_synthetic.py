"""``graphormer-urpe synthetic``: every flag has help, a tiny job runs, a bad configuration is
one line; the sub-commands' old names in ``graphormer_urpe.sequence`` still resolve, warning."""

from __future__ import annotations

import argparse
import json

import pytest

from graphormer_urpe.cli.sequence import add_synthetic_parser, run_synthetic
from tests.helpers import run_tiny_command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphormer-urpe")
    add_synthetic_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli_every_flag_has_help() -> None:
    subparsers = argparse.ArgumentParser(prog="graphormer-urpe").add_subparsers()
    add_synthetic_parser(subparsers)
    sub = subparsers.choices["synthetic"]
    flags = [a for a in sub._actions if a.option_strings and a.dest != "help"]
    required = set(
        "--task --pe --vocab --steps --width --layers --heads --batch-size --lr --seed --out "
        "--preset".split()
    )
    assert required <= {o for a in flags for o in a.option_strings}
    assert all(a.help for a in flags)


def test_cli_runs_a_tiny_job(tmp_path, capsys) -> None:
    printed = run_tiny_command(
        _parser(),
        run_synthetic,
        "synthetic --task etp --pe urpe --vocab 40 --length 8 --steps 3 --width 16 --layers 1 "
        "--heads 2 --ffn 32 --batch-size 4 --valid-size 4 --lr 1e-3 --seed 5 "
        "--per-layer-scale --no-progress",
        tmp_path / "run",
        capsys,
    )
    assert printed["steps"] == 3 and 0.0 <= printed["valid_accuracy"] <= 1.0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    cfg = metrics["config"]
    assert cfg["task"] == "etp" and cfg["seed"] == 5 and cfg["lr"] == 1e-3
    assert cfg["model"]["share_scale"] is False and cfg["model"]["tie_weights"] is True
    assert cfg["model"]["max_len"] == 8 and cfg["model"]["vocab"] == 40


def test_cli_reports_bad_configuration(capsys) -> None:
    args = _parser().parse_args(["synthetic", "--task", "etp", "--length", "7", "--steps", "2"])
    assert run_synthetic(args) == 2
    assert "even length" in capsys.readouterr().err


def test_the_sub_commands_moved_to_the_cli_and_the_old_names_warn() -> None:
    import graphormer_urpe.sequence as sequence

    for name, new in (
        ("add_synthetic_parser", add_synthetic_parser),
        ("run_synthetic", run_synthetic),
    ):
        with pytest.warns(DeprecationWarning, match=f"graphormer_urpe.cli.sequence.{name}"):
            assert getattr(sequence, name) is new
    assert "run_lm" not in sequence.__all__ and "run_synthetic" not in dir(sequence)
