"""``graphormer-urpe serve`` on the command line (its API: ``tests/serve/``)."""

from __future__ import annotations

from graphormer_urpe import cli


def test_serve_refuses_a_host_off_localhost_without_a_token(monkeypatch, capsys):
    """Before loading anything: ``x.pt`` does not exist, the host is refused first."""
    monkeypatch.delenv("GRAPHORMER_URPE_TOKEN", raising=False)
    assert cli.main(["serve", "--checkpoint", "x.pt", "--host", "0.0.0.0"]) == 2
    assert "give a token" in capsys.readouterr().err
