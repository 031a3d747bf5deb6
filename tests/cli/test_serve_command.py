"""``graphormer-urpe serve`` on the command line, and its answers against ``predict``'s (its
API: ``tests/serve/``)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from graphormer_urpe import cli
from tests.helpers import tiny_checkpoint


def _serve_client():
    """The framework's test client and the serve app's parts (skips without the serve extra)."""
    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    pytest.importorskip("httpx", reason="the test client needs httpx")
    from fastapi.testclient import TestClient

    from graphormer_urpe.serve import ModelService, create_app

    return TestClient, ModelService, create_app


THREE = ["CCO", "c1ccccc1O", "not_a_smiles(("]


def test_serve_refuses_a_host_off_localhost_without_a_token(monkeypatch, capsys):
    """Before loading anything: ``x.pt`` does not exist, the host is refused first."""
    monkeypatch.delenv("GRAPHORMER_URPE_TOKEN", raising=False)
    assert cli.main(["serve", "--checkpoint", "x.pt", "--host", "0.0.0.0"]) == 2
    assert "give a token" in capsys.readouterr().err


def _predict_csv(ckpt: Path, smiles: list[str], capsys, *extra: str) -> list[list[str]]:
    """``predict``'s CSV rows (header first) for ``smiles``: the reference."""
    capsys.readouterr()
    args = ["predict", "--checkpoint", str(ckpt), "--no-progress", "--workers", "0", *extra]
    assert cli.main([*args, "--smiles", *smiles]) == 0
    return list(csv.reader(io.StringIO(capsys.readouterr().out)))


def test_serve_gives_predicts_rows_and_columns(tiny_run, capsys):
    smiles = [*THREE, "C1CC", "CCCCCCCCN"]
    expected = _predict_csv(tiny_run[1] / "best.pt", smiles, capsys, "--interval", "0.9")
    test_client, model_service, create_app = _serve_client()
    service = model_service.load(tiny_run[1] / "best.pt", workers=1, threads=1)
    try:
        with test_client(create_app(service)) as client:
            _same_rows_as_predict(client, smiles, expected)
    finally:
        service.close()


def _same_rows_as_predict(client, smiles: list[str], expected: list[list[str]]) -> None:
    r = client.post("/predict?format=csv", json={"smiles": smiles, "level": 0.9})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert list(csv.reader(io.StringIO(r.text))) == expected
    r = client.post("/predict", json={"smiles": smiles, "level": 0.9})
    body = r.json()
    assert body["columns"] == expected[0]
    assert body["molecules"] == 5 and body["failed"] == 2 and body["level"] == 0.9
    t = "heavy_atoms"
    for row, want in zip(body["rows"], expected[1:], strict=True):
        want = dict(zip(expected[0], want, strict=True))
        assert row["smiles"] == want["smiles"]
        if want["error"]:
            assert row["error"] == want["error"] and row[t] is None and row["domain"] is None
            continue
        assert row["error"] is None
        for col in (t, f"{t}_low", f"{t}_high"):
            assert row[col] == pytest.approx(float(want[col]), rel=1e-5)
        assert row["domain"] == want["domain"]
        assert row["nearest_similarity"] == pytest.approx(
            float(want["nearest_similarity"]), abs=5e-4
        )
    assert "parse" in body["rows"][2]["error"]


def test_an_ensemble_gives_the_std_columns(tmp_path, capsys):
    folder = tmp_path / "ens"
    for k in range(2):
        (folder / f"m{k}").mkdir(parents=True)
        tiny_checkpoint(folder / f"m{k}" / "best.pt", "ogb", seed=k)
    (folder / "ensemble.json").write_text(json.dumps({"members": ["m0", "m1"]}))
    expected = _predict_csv(folder, THREE, capsys)
    test_client, model_service, create_app = _serve_client()
    svc = model_service.load(folder, workers=0)
    try:
        with test_client(create_app(svc)) as c:
            r = c.post("/predict?format=csv", json={"smiles": THREE})
            assert list(csv.reader(io.StringIO(r.text))) == expected
            assert "a_std" in expected[0]
            assert c.get("/model").json()["ensemble_members"] == 2
    finally:
        svc.close()
