"""``graphormer-urpe serve``'s API through the framework's test client: every route, every
limit, every error; rows checked against ``predict``'s own CSV on the same molecules."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import threading
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("fastapi", reason="the serve extra is not installed")
pytest.importorskip("httpx", reason="the test client needs httpx")

from fastapi.testclient import TestClient  # noqa: E402

from graphormer_urpe.inference.engines.stream import StreamModel  # noqa: E402
from graphormer_urpe.serve import LimitExceeded, ModelService, ServeLimits, create_app  # noqa: E402
from graphormer_urpe.serve.app import COOKIE  # noqa: E402
from graphormer_urpe.serve.batcher import Batcher  # noqa: E402
from graphormer_urpe.serve.limits import too_many_atoms  # noqa: E402
from graphormer_urpe.serve.server import check_host, freeze_start_up  # noqa: E402
from graphormer_urpe.serve.uploads import read_upload  # noqa: E402
from graphormer_urpe.serve.worker import WorkerDied  # noqa: E402
from tests.helpers import MIXED, tiny_checkpoint

THREE = ["CCO", "c1ccccc1O", "not_a_smiles(("]
TOKEN = "a-token-of-32-characters-0123456"


@pytest.fixture(scope="module")
def service(tiny_run):
    """The trained tiny run (calibrated, with its domain record and metrics)."""
    torch.set_num_threads(1)
    svc = ModelService.load(
        tiny_run[1] / "best.pt", workers=1, threads=1, units={"heavy_atoms": "atoms"}
    )
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def client(service):
    with TestClient(create_app(service)) as c:
        yield c


def test_concurrent_requests_share_one_pass_and_keep_their_rows(service):
    """Requests waiting together go through one forward pass; each gets its own rows, the
    values the requests get alone."""
    stream = StreamModel(service.models, batch_size=64)
    alone = Batcher(stream, workers=0)
    requests = [MIXED[i : i + 3] for i in range(0, len(MIXED), 3)]
    single = [alone.submit(r).result(timeout=60) for r in requests]
    assert alone.passes == len(requests)
    alone.close()
    together = Batcher(stream, workers=1, start=False)
    futures = [together.submit(r) for r in requests]
    together.start()
    shared = [f.result(timeout=60) for f in futures]
    assert together.passes == 1
    together.close()
    _assert_same_rows(single, shared, requests)


def _assert_same_rows(single: list, shared: list, requests: list[list[str]]) -> None:
    """Each request's rows from a shared pass are the rows it got alone."""
    for one, both, req in zip(single, shared, requests, strict=True):
        assert [p.smiles for p in both] == req and [p.index for p in both] == list(range(len(req)))
        for a, b in zip(one, both, strict=True):
            assert a.error == b.error
            if a.values is not None:
                assert torch.allclose(a.values, b.values, atol=1e-5)


def test_a_batch_of_several_parts_is_cut_by_length_and_answered_in_order(service):
    """A batch larger than one part is cut in order of SMILES length (each forward pass
    holds molecules of about one size); its requests are answered once its last part is
    predicted, each with the rows it gets alone, in its own order."""
    stream = StreamModel(service.models, batch_size=64)
    alone = Batcher(stream, workers=0)
    requests = [MIXED[i : i + 6] for i in range(0, 18, 6)]
    single = [alone.submit(r).result(timeout=60) for r in requests]
    alone.close()
    gate, passes, inner = threading.Event(), [], stream.predict

    def predict(chunks, done=None):
        chunks = list(chunks)
        passes.append([s for c in chunks for s in c.smiles])
        if len(passes) == 1:  # the next parts wait until the requests are checked
            assert gate.wait(60)
        return inner(chunks, done)

    stream.predict = predict
    batcher = Batcher(stream, workers=1, part=6, start=False)
    futures = [batcher.submit(r) for r in requests]
    batcher.start()
    _until(lambda: len(passes) == 1)
    assert not any(f.done() for f in futures)  # the batch's other parts are still to come
    gate.set()
    shared = [f.result(timeout=60) for f in futures]
    batcher.close()
    cut = [s for p in passes for s in p]
    assert len(passes[0]) == 6 and sorted(cut) == sorted(MIXED[:18])
    assert [len(s) for s in cut] == sorted(len(s) for s in MIXED[:18])
    assert batcher.passes == len(passes)
    _assert_same_rows(single, shared, requests)


class _Counted:
    """A stream whose forward passes are counted (molecules of each) and wait for
    ``release_model``; featurising here waits for ``release_featurizing`` and records each
    part's molecules in ``featurized`` (``done`` is released after each part)."""

    def __init__(self, stream: StreamModel) -> None:
        self.stream = stream
        self.passes: list[int] = []
        self.featurized: list[int] = []
        self.release_model, self.release_featurizing = threading.Event(), threading.Event()
        self.done = threading.Semaphore(0)
        self.inner_predict, self.inner_featurize = stream.predict, stream.featurize
        stream.predict, stream.featurize = self.predict, self.featurize

    def predict(self, chunks, done=None):
        chunks = list(chunks)
        self.passes.append(sum(len(c.smiles) for c in chunks))
        assert self.release_model.wait(60)
        return self.inner_predict(chunks, done)

    def featurize(self, part, first=0):
        assert self.release_featurizing.wait(60)
        chunk = self.inner_featurize(part, first)
        self.featurized.append(len(part))
        self.done.release()
        return chunk


def _until(check, seconds: float = 60) -> None:
    """Wait until ``check()`` holds (a request gathered, a pass begun)."""
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert check()


def test_requests_that_come_while_featurising_is_busy_share_the_next_part(service):
    """A part is gathered as soon as featurising is free: the requests that come meanwhile
    wait for the next one and go into it together (up to max_molecules); a lone request for
    an idle server goes through at once."""
    counted = _Counted(StreamModel(service.models, batch_size=64))
    batcher = Batcher(counted.stream, workers=0, max_molecules=6)
    futures = [batcher.submit(MIXED[:3])]
    _until(futures[0].running)  # being featurised: the three below wait
    futures += [batcher.submit(MIXED[i : i + 3]) for i in (3, 6, 9)]
    counted.release_featurizing.set()
    for _ in range(3):
        assert counted.done.acquire(timeout=60)
    counted.release_model.set()
    for f, i in zip(futures, (0, 3, 6, 9), strict=True):
        assert [p.smiles for p in f.result(timeout=60)] == MIXED[i : i + 3]
    assert counted.featurized == [3, 6, 3] and sum(counted.passes) == 12
    assert len(batcher.submit(MIXED[:2]).result(timeout=60)) == 2
    assert counted.featurized[-1] == 2 and counted.passes[-1] == 2
    batcher.close()


def test_parts_ready_while_the_model_is_busy_go_into_one_forward_pass(service):
    """The model takes the next part with every part behind it that is ready (up to ``part``
    molecules more): parts featurised while it was busy share its next pass."""
    counted = _Counted(StreamModel(service.models, batch_size=64))
    counted.release_featurizing.set()
    batcher = Batcher(counted.stream, workers=0)
    futures = [batcher.submit(MIXED[:3])]
    _until(lambda: len(counted.passes) == 1)  # the model now holds it
    assert counted.done.acquire(timeout=60)
    for i in (3, 6, 9, 12):
        futures.append(batcher.submit(MIXED[i : i + 3]))
        assert counted.done.acquire(timeout=60)  # each featurised on its own
    counted.release_model.set()
    rows = [f.result(timeout=60) for f in futures]
    batcher.close()
    assert counted.featurized == [3, 3, 3, 3, 3] and counted.passes == [3, 12]
    for got, i in zip(rows, (0, 3, 6, 9, 12), strict=True):
        assert [p.smiles for p in got] == MIXED[i : i + 3]
        assert [p.index for p in got] == list(range(3))


def test_a_busy_model_leaves_even_small_requests_to_the_workers(service):
    """A few molecules for an idle server are featurised in the server's process (sooner);
    while the model is busy, in the worker (the model keeps its process)."""
    counted = _Counted(StreamModel(service.models, batch_size=64))
    counted.release_featurizing.set()
    batcher = Batcher(counted.stream, workers=1)
    batcher.submit(MIXED[:3])
    _until(lambda: len(counted.passes) == 1)  # featurised here: the server was idle
    second = batcher.submit(MIXED[3:6])
    _until(second.running)
    counted.release_model.set()
    assert len(second.result(timeout=60)) == 3
    batcher.close()
    assert counted.passes == [3, 3] and counted.featurized == [3]


class _FailsOn:
    """A featuriser that raises for a part holding ``"raise"`` and ends its process for one
    holding ``"die"`` (run in the worker process)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __call__(self, part: list[str], first: int = 0):
        if "die" in part:
            os._exit(1)
        if "raise" in part:
            raise ValueError("a broken featuriser")
        return self.inner(part, first)


def test_a_failing_featuriser_or_worker_fails_its_requests_and_the_rest_are_served(service):
    """A part whose featurising raises fails its requests with that error; a worker process
    that dies fails the part it held and is started again; every other request is served."""
    psutil = pytest.importorskip("psutil")
    stream = StreamModel(service.models, batch_size=64)
    good = MIXED[:18]  # more than a few molecules: they go to the worker
    alone = Batcher(stream, workers=0)
    expected = [(p.smiles, p.error) for p in alone.submit(good).result(timeout=60)]
    alone.close()
    stream.featurizing = _FailsOn(stream.featurizing)
    before = {c.pid for c in psutil.Process().children()}
    batcher = Batcher(stream, workers=1)
    try:
        with pytest.raises(ValueError, match="a broken featuriser"):
            batcher.submit(["raise", *good]).result(timeout=60)
        served = batcher.submit(good).result(timeout=60)
        assert [(p.smiles, p.error) for p in served] == expected
        first = {c.pid for c in psutil.Process().children()} - before
        with pytest.raises(WorkerDied):
            batcher.submit(["die", *good]).result(timeout=60)
        served = batcher.submit(good).result(timeout=60)
        assert [(p.smiles, p.error) for p in served] == expected
        second = {c.pid for c in psutil.Process().children()} - before
        assert len(first) == len(second) == 1 and first != second  # the dead one is reaped
    finally:
        batcher.close()


def test_a_failing_part_of_a_batch_cut_by_length_fails_only_the_requests_with_rows_in_it(
    service,
):
    """The requests with a row in the part that failed get its error; the batch's other
    requests get their rows."""
    stream = StreamModel(service.models, batch_size=64)
    requests = [MIXED[i : i + 2] for i in range(0, 16, 2)] + [["raise", "CCO"]]
    alone = Batcher(stream, workers=0)
    expected = [[(p.smiles, p.error) for p in alone.submit(r).result(timeout=60)] for r in requests]
    alone.close()
    cut = sorted((s for r in requests for s in r), key=len)  # the batch cut by length
    broken = next(set(cut[i : i + 6]) for i in range(0, len(cut), 6) if "raise" in cut[i : i + 6])
    stream.featurizing = _FailsOn(stream.featurizing)
    batcher = Batcher(stream, workers=1, part=6, start=False)
    futures = [batcher.submit(r) for r in requests]
    batcher.start()
    try:
        for r, f, want in zip(requests, futures, expected, strict=True):
            if broken & set(r):
                with pytest.raises(ValueError, match="a broken featuriser"):
                    f.result(timeout=60)
            else:
                assert [(p.smiles, p.error) for p in f.result(timeout=60)] == want
    finally:
        batcher.close()
    assert any(not broken & set(r) for r in requests[:-1])  # some requests were served


def test_start_up_objects_are_left_out_of_garbage_collection():
    gc.unfreeze()
    try:
        freeze_start_up()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_upload_csv_smi_and_sdf(client, tmp_path):
    r = client.post("/predict/upload", files={"file": ("mols.csv", b"id,smiles\n1,CCO\n2,C((\n")})
    body = r.json()
    assert r.status_code == 200 and [x["smiles"] for x in body["rows"]] == ["CCO", "C(("]
    assert "name" not in body["columns"] and body["failed"] == 1
    r = client.post(
        "/predict/upload",
        files={"file": ("mols.smi", b"CCO ethanol\nCCN\n")},
        data={"level": "0.8"},
    )
    body = r.json()
    assert body["columns"][:2] == ["smiles", "name"] and "heavy_atoms_low" in body["columns"]
    assert [x["name"] for x in body["rows"]] == ["ethanol", ""]
    from rdkit import Chem

    good = Chem.MolToMolBlock(Chem.MolFromSmiles("CCO")).replace("\n", "ethanol\n", 1)
    bad = good.replace(
        "  0  0  0  0  0  0  0  0  0  0  0  0\n", "  0  5  0  0  0  0  0  0  0  0  0  0\n", 1
    )
    sdf = f"ethanol{good[len('ethanol') :]}$$$$\n{bad}$$$$\n".encode()
    r = client.post("/predict/upload", files={"file": ("mols.sdf", sdf)})
    rows = r.json()["rows"]
    assert r.status_code == 200 and rows[0]["smiles"] == "CCO" and rows[0]["error"] is None
    assert len(rows) == 2
    r = client.post("/predict/upload", files={"file": ("m.csv", b"id,smi\n1,CCO\n")})
    assert r.status_code == 422 and "no column 'smiles'" in r.json()["detail"]
    assert "upload" not in r.json()["detail"].split("m.csv")[0]  # names the upload, no path


def test_explain_gives_contributions_and_a_picture(client):
    r = client.post("/explain", json={"smiles": ["c1ccccc1O", "C(("]})
    assert r.status_code == 200
    good, bad = r.json()["molecules"]
    assert [a["element"] for a in good["atoms"]] == ["C"] * 6 + ["O"]
    total = sum(a["contributions"]["heavy_atoms"] for a in good["atoms"])
    delta = good["prediction"]["heavy_atoms"] - good["baseline"]["heavy_atoms"]
    assert total == pytest.approx(delta, rel=1e-4, abs=1e-5)  # Shapley values are complete
    assert good["svg"].lstrip().startswith(("<?xml", "<svg")) and "</svg>" in good["svg"]
    assert bad["error"] and bad["svg"] is None and bad["atoms"] == []
    r = client.post("/explain", json={"smiles": ["CCO"], "target": "nope"})
    assert r.status_code == 422 and "heavy_atoms" in r.json()["detail"]


def test_model_describes_targets_training_metrics_and_calibration(client, tiny_run):
    info = client.get("/model").json()
    metrics = json.loads((tiny_run[1] / "metrics.json").read_text())
    assert info["targets"] == [{"name": "heavy_atoms", "unit": "atoms"}]
    assert info["training_molecules"] == metrics["train_graphs"] > 0
    assert info["metrics"]["test_mae"] == pytest.approx(metrics["test_mae"])
    assert info["calibration"]["source"] == "valid split" and info["intervals"] is True
    assert info["limits"]["max_molecules"] == 1000
    assert info["columns"][-3:] == ["domain", "nearest_similarity", "error"]


def test_openapi_schema_with_examples_and_no_internet_pages(client):
    schema = client.get("/openapi.json").json()
    assert {"/predict", "/predict/upload", "/explain", "/model"} <= set(schema["paths"])
    request = schema["components"]["schemas"]["PredictRequest"]
    assert request["examples"][0]["smiles"] == THREE
    assert schema["components"]["schemas"]["PredictResponse"]["examples"]
    assert "413" in schema["paths"]["/predict"]["post"]["responses"]
    assert client.get("/docs").status_code == 404  # the interactive docs load remote scripts
    page = client.get("/").text
    assert "http://" not in page and "https://" not in page
    assert 'fetch("explain"' in client.get("/page.js").text


def test_page_renders_a_table_with_pictures_flags_and_csv(client):
    r = client.post("/", data={"smiles": "CCO first\n[Se]\nnot_a_smiles((\n", "level": "0.9"})
    html = r.text
    assert r.status_code == 200 and "<table id=results>" in html
    assert html.count("<tr") == 4 and html.count("<svg") >= 2
    assert "out of domain" in html  # selenium: an element the training molecules never had
    assert "download='predictions.csv'" in html and "class=failed" in html
    assert "90% interval" in html
    r = client.post("/", files={"file": ("m.csv", b"smiles\nCCO\n")})
    assert r.status_code == 200 and "1 rows: 1 predicted" in r.text
    r = client.post("/", data={"smiles": ""})
    assert r.status_code == 422 and "no SMILES given" in r.text


def test_bad_smiles_are_rows_never_a_500(client):
    nasty = ["", " ", "C" * 150 + "(", "💥", "/etc/passwd", "../../x.pt", "[Xx]", "C1CC", "\x00"]
    r = client.post("/predict", json={"smiles": nasty})
    body = r.json()
    assert r.status_code == 200 and body["failed"] == len(nasty)
    assert all(row["error"] for row in body["rows"])
    assert [row["smiles"] for row in body["rows"]] == nasty


def test_every_limit_has_its_4xx_and_the_server_keeps_serving(tiny_run):
    limits = ServeLimits(max_molecules=5, max_explain=1, max_upload_bytes=2000, max_atoms=30)
    svc = ModelService.load(tiny_run[1] / "best.pt", limits=limits, workers=0, threads=1)
    try:
        with TestClient(create_app(svc)) as c:
            r = c.post("/predict", json={"smiles": ["C"] * 6})
            assert r.status_code == 413 and "at most 5" in r.json()["detail"]
            r = c.post("/predict", json={"smiles": ["CCO", "C" * 31]})
            assert r.status_code == 422 and "row 1 (31 heavy atoms)" in r.json()["detail"]
            r = c.post("/predict", json={"smiles": ["C" * 2100]})
            assert r.status_code == 413 and "at most 2000 bytes" in r.json()["detail"]

            def chunks():  # no Content-Length: counted as it arrives
                yield b'{"smiles": ["'
                for _ in range(30):
                    yield b"C" * 100
                yield b'"]}'

            r = c.post("/predict", content=chunks(), headers={"content-type": "application/json"})
            assert r.status_code == 413
            r = c.post("/predict/upload", files={"file": ("m.smi", b"CCO\n" * 6)})
            assert r.status_code == 413 and "more than 5 molecules" in r.json()["detail"]
            for name in ("m.csv.gz", "passwd", "../../etc/passwd"):
                r = c.post("/predict/upload", files={"file": (name, b"CCO\n")})
                assert r.status_code == 415 and "/etc" not in r.json()["detail"]
            r = c.post("/explain", json={"smiles": ["CCO", "CCN"]})
            assert r.status_code == 413 and "at most 1" in r.json()["detail"]
            r = c.post("/predict", json={"smiles": ["CCO"], "level": 1.5})
            assert r.status_code == 422 and "level" in r.json()["detail"]
            r = c.post("/predict", json={"smiles": "CCO"})
            assert r.status_code == 422 and "smiles" in r.json()["detail"]
            r = c.post(
                "/predict", content=b"{not json", headers={"content-type": "application/json"}
            )
            assert r.status_code == 422
            assert c.post("/predict", json={"smiles": []}).status_code == 422
            assert c.post("/predict", json={"smiles": ["CCO"]}).status_code == 200
        slow = ModelService.load(
            tiny_run[1] / "best.pt", limits=ServeLimits(request_seconds=1e-9), workers=0
        )
        try:
            with TestClient(create_app(slow)) as c:
                r = c.post("/predict", json={"smiles": ["CCO"] * 50})
                assert r.status_code == 408 and "limit of 1e-09 s" in r.json()["detail"]
        finally:
            slow.close()
        assert svc.batcher.submit(["CCO"]).result(timeout=30)[0].error is None
    finally:
        svc.close()


def test_uncalibrated_and_binary_models_refuse_intervals_with_the_reason(tmp_path):
    binary = ModelService.load(tiny_checkpoint(tmp_path / "best.pt", "ogb", "binary"), workers=0)
    try:
        with TestClient(create_app(binary)) as c:
            r = c.post("/predict", json={"smiles": ["CCO"]})
            assert r.json()["columns"][1:3] == ["prob_a", "prob_b"]
            assert 0 < r.json()["rows"][0]["prob_a"] < 1
            r = c.post("/predict", json={"smiles": ["CCO"], "level": 0.9})
            assert r.status_code == 422 and "regression" in r.json()["detail"]
            assert str(tmp_path) not in r.text
    finally:
        binary.close()


def test_a_token_is_checked_on_every_request(service):
    with TestClient(create_app(service, TOKEN)) as c:
        for method, path in (("get", "/"), ("get", "/model"), ("get", "/openapi.json")):
            assert getattr(c, method)(path).status_code == 401
        assert c.post("/predict", json={"smiles": ["CCO"]}).status_code == 401
        wrong = {"Authorization": "Bearer " + "x" * 32}
        assert c.get("/model", headers=wrong).status_code == 401
        right = {"Authorization": f"Bearer {TOKEN}"}
        assert c.post("/predict", json={"smiles": ["CCO"]}, headers=right).status_code == 200
        r = c.get(f"/?token={TOKEN}", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/"
        assert COOKIE in r.headers["set-cookie"] and "HttpOnly" in r.headers["set-cookie"]
        c.cookies.set(COOKIE, TOKEN)
        assert c.get("/").status_code == 200 and c.get("/model").status_code == 200
        c.cookies.set(COOKIE, "nope")
        assert c.get("/").status_code == 401


def test_hosts_off_localhost_need_a_token(monkeypatch):
    monkeypatch.delenv("GRAPHORMER_URPE_TOKEN", raising=False)
    assert check_host("127.0.0.1", None) is None and check_host("localhost", None) is None
    assert check_host("::1", None) is None
    with pytest.raises(ValueError, match="give a token"):
        check_host("0.0.0.0", None)
    with pytest.raises(ValueError, match="at least 16"):
        check_host("0.0.0.0", "short")
    assert check_host("0.0.0.0", TOKEN) == TOKEN
    monkeypatch.setenv("GRAPHORMER_URPE_TOKEN", TOKEN)
    assert check_host("192.168.1.5", None) == TOKEN
    monkeypatch.delenv("GRAPHORMER_URPE_TOKEN")


def test_limit_helpers():
    assert too_many_atoms(["C" * 5, "C" * 12, "C(" * 12], 10) == [(1, 12)]
    with pytest.raises(LimitExceeded) as err:
        read_upload("x.smi", b"", "smiles", 10)
    assert err.value.status == 422 and "no molecules" in err.value.detail
    with pytest.raises(ValueError):
        ServeLimits(max_molecules=0)


def _bench_run(ratio: float, serve_cpu: float, failed: int = 0) -> dict:
    """A repeat of scripts/bench_serve.py, as its report holds it (the figures merge reads)."""
    return {
        "predict": {"molecules_per_s": 100.0, "cpu_ms_per_molecule": 1.5},
        "serve": {
            "molecules_per_s": 100.0 * ratio,
            "p50_ms": 10.0,
            "p99_ms": 20.0,
            "failed_requests": failed,
            "rss_mib": [600.0, 601.0, 602.0, 603.0],
            "server_cpu_ms_per_molecule": serve_cpu,
        },
        "single": {"p50_ms": 5.0, "p99_ms": 9.0, "failed_requests": 0},
        "server_rss_mib": {"after_warm_up": 590.0, "after_load": 600.0},
        "faults": {"still_serving": True},
        "throughput_ratio": ratio,
    }


def test_serve_benchmark_merges_repeats_run_one_at_a_time(tmp_path):
    """Repeats run as separate invocations make one report: their runs in order, the medians
    over all of them, the failures summed."""
    spec = importlib.util.spec_from_file_location(
        "bench_serve", Path(__file__).resolve().parents[2] / "scripts" / "bench_serve.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    paths = []
    for i, runs in enumerate(
        [[_bench_run(0.7, 2.0)], [_bench_run(0.9, 1.8, 1), _bench_run(0.8, 2.2)]]
    ):
        path = tmp_path / f"r{i}.json"
        path.write_text(
            json.dumps({"benchmark": "serve", "config": {"repeats": len(runs)}, "runs": runs})
        )
        paths.append(str(path))
    report = bench.merge(paths)
    assert [r["throughput_ratio"] for r in report["runs"]] == [0.7, 0.9, 0.8]
    assert report["config"] == {"repeats": 3, "merged_from": 2}
    summary = report["summary"]
    assert summary["throughput_ratio"] == 0.8 and summary["serve_cpu_ms_per_molecule"] == 2.0
    assert summary["serve_molecules_per_s"] == 80.0 and summary["failed_requests"] == 1
    assert (
        summary["targets"]["throughput_ratio >= 0.8"]
        and not summary["targets"]["no failed request"]
    )
