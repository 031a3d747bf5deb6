"""``graphormer-urpe lm``: every flag has help, a tiny run on the pydoc corpus, errors in one
line (bad settings, a corpus that cannot be downloaded, an unreadable checkpoint)."""

from __future__ import annotations

import argparse
import json
import urllib.error

from graphormer_urpe.cli.sequence import add_lm_parser, run_lm
from graphormer_urpe.sequence import corpus as corpus_module
from tests.helpers import run_tiny_command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphormer-urpe")
    add_lm_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli_lm_runs_and_every_flag_has_help(tmp_path, capsys, one_thread) -> None:
    sub = _parser()._subparsers._group_actions[0].choices["lm"]
    flags = [a for a in sub._actions if a.option_strings and a.dest != "help"]
    assert all(a.help for a in flags)
    required = set("--corpus --pe --preset --resume --out --steps --mem-len --tgt-len".split())
    pe_flag = next(a for a in flags if "--pe" in a.option_strings)
    assert {"xl", "xl-urpe"} <= set(pe_flag.choices) and "xl-urpe" in pe_flag.help
    assert required <= {o for a in flags for o in a.option_strings}
    printed = run_tiny_command(
        _parser(),
        run_lm,
        "lm --corpus pydoc --pe rpe --steps 3 --width 16 --layers 1 --heads 2 --ffn 32 "
        "--tgt-len 8 --mem-len 8 --batch-size 4 --eval-batch-size 64 --seed 7 --no-progress "
        "--max-eval-tokens 500",
        tmp_path / "run",
        capsys,
    )
    assert printed["steps"] == 3 and printed["pe"] == "rpe" and printed["valid_bpc"] > 0
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["seed"] == 7 and cfg["model"]["mem_len"] == 8 and cfg["model"]["width"] == 16


def test_cli_lm_reports_errors_in_one_line(tmp_path, capsys, monkeypatch) -> None:
    args = _parser().parse_args(["lm", "--steps", "2", "--warmup-steps", "5"])
    assert run_lm(args) == 2
    assert "warmup_steps" in capsys.readouterr().err
    args = _parser().parse_args(
        ["lm", "--corpus", "wikitext-2", "--data-root", str(tmp_path), "--out", str(tmp_path / "r")]
    )

    def offline(url, timeout=None):
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(corpus_module.urllib.request, "urlopen", offline)
    assert run_lm(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "wiki.train.tokens" in err
    # An unreadable checkpoint is reported in one line too.
    run = tmp_path / "broken"
    run.mkdir()
    (run / "last.pt").write_bytes(b"not a checkpoint")
    args = _parser().parse_args(["lm", "--steps", "2", "--out", str(run), "--resume"])
    assert run_lm(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "last.pt" in err
