"""Checkpoints and resume: SIGTERM and SIGKILL mid-epoch, rolling checkpoints, fallbacks."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from graphormer_urpe import cli
from graphormer_urpe.io.checkpoint import CheckpointKeeper, load_checkpoint
from tests.helpers import assert_same_run, loss_hook, train_args

# 40 molecules → 32 training graphs → 4 batches of 8 per epoch, 3 epochs, 12 steps


@pytest.fixture(scope="module")
def reference(table, tmp_path_factory) -> tuple[Path, dict]:
    """An uninterrupted run (with dropout, so the RNG state matters)."""
    base = tmp_path_factory.mktemp("reference")
    out = base / "run"
    assert cli.main(train_args(table, base / "data", out, "--attention", "urpe")) == 0
    return out, json.loads((out / "metrics.json").read_text())


def test_sigterm_mid_epoch_saves_and_resume_is_exact(table, reference, tmp_path, monkeypatch):
    ref_out, _ = reference
    out = tmp_path / "run"
    args = train_args(table, tmp_path / "data", out, "--attention", "urpe")
    # SIGTERM arrives during step 6 (epoch 1, second batch): that step finishes, then it stops
    loss_hook(monkeypatch, 6, lambda: signal.raise_signal(signal.SIGTERM))
    assert cli.main(args) == 128 + signal.SIGTERM
    ckpt = load_checkpoint(out / "last.pt")
    assert ckpt["step"] == 6 and ckpt["position"] == {"epoch": 1, "batch": 2}
    assert not (out / "metrics.json").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    monkeypatch.undo()
    assert cli.main([*args, "--resume"]) == 0
    assert_same_run(ref_out, out)


_KILL_SCRIPT = """
import os, signal, sys
import torch
from graphormer_urpe import cli
from graphormer_urpe.training import steps

real, calls = steps.masked_loss, [0]

def hooked(pred, target, kind="l1", scale=None):
    if torch.is_grad_enabled():
        calls[0] += 1
        if calls[0] == {at_call}:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(pred, target, kind, scale)

steps.masked_loss = hooked
sys.exit(cli.main({args!r}))
"""


def test_sigkill_mid_epoch_resumes_from_the_last_step_checkpoint(table, reference, tmp_path):
    ref_out, _ = reference
    out = tmp_path / "run"
    args = train_args(table, tmp_path / "data", out, "--attention", "urpe")
    args += ["--checkpoint-every", "3", "--keep-checkpoints", "2"]
    # killed without warning during step 8: steps 7 and 8 are lost, step 6 (epoch 1, batch 2)
    # is the newest checkpoint
    script = textwrap.dedent(_KILL_SCRIPT).format(at_call=8, args=args)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    keeper = CheckpointKeeper(out, keep=2)
    assert [f.name for f in keeper.step_files()] == ["step-000000004.pt", "step-000000006.pt"]
    ckpt = load_checkpoint(out / "last.pt")
    assert ckpt["step"] == 6 and ckpt["position"] == {"epoch": 1, "batch": 2}
    assert cli.main([*args, "--resume"]) == 0
    assert_same_run(ref_out, out)
    # the rolling set kept only the newest two (step 12 is the end of the last epoch)
    assert [f.name for f in keeper.step_files()] == ["step-000000009.pt", "step-000000012.pt"]


def test_resume_falls_back_when_last_checkpoint_is_corrupted(table, reference, tmp_path, caplog):
    ref_out, _ = reference
    out = tmp_path / "run"
    args = train_args(table, tmp_path / "data", out, "--attention", "urpe")
    args += ["--checkpoint-every", "2"]
    _loss_hook_at = 11

    class Killed(BaseException):
        pass

    def kill() -> None:
        raise Killed

    with pytest.MonkeyPatch.context() as mp:
        loss_hook(mp, _loss_hook_at, kill)
        with pytest.raises(Killed):
            cli.main(args)
    # the newest checkpoint (step 10) is damaged on disk: resume uses step 8 instead
    last = out / "last.pt"
    data = last.read_bytes()
    last.unlink()  # last.pt shares its file with step 10: replace, don't edit in place
    last.write_bytes(data[: len(data) // 2])
    newest = CheckpointKeeper(out).step_files()[-1]
    newest.unlink()
    newest.write_bytes(b"not a checkpoint")
    assert cli.main([*args, "--resume"]) == 0
    assert "trying an older checkpoint" in caplog.text
    assert_same_run(ref_out, out)


def test_resume_with_nothing_to_resume_starts_afresh(table, reference, tmp_path):
    ref_out, _ = reference
    out = tmp_path / "run"
    assert (
        cli.main([*train_args(table, tmp_path / "data", out, "--attention", "urpe"), "--resume"])
        == 0
    )
    assert_same_run(ref_out, out)


def test_resume_from_an_incompatible_checkpoint_is_one_line(table, reference, tmp_path, capsys):
    ref_out, _ = reference
    out = tmp_path / "run"
    out.mkdir()
    ckpt = load_checkpoint(ref_out / "last.pt")
    ckpt["model"] = {k: v[..., :1] if v.dim() else v for k, v in ckpt["model"].items()}
    ckpt["config"] = json.dumps(ckpt["config"])
    torch.save(ckpt, out / "last.pt")
    args = train_args(table, tmp_path / "data", out, "--attention", "urpe")
    assert cli.main([*args, "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(out / "last.pt") in err and "does not match" in err
    capsys.readouterr()
    ckpt["config"] = json.dumps({**json.loads(ckpt["config"]), "no_such_field": 1})
    torch.save(ckpt, out / "last.pt")
    assert cli.main([*args, "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no_such_field" in err
