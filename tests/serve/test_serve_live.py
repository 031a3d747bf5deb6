"""``serve`` on a real socket: clients that go away mid-request, a bounded load of concurrent
clients, and the web page in a real browser (headless Chromium from the system's packages,
driven by Playwright; skipped, with the reason, where either is missing)."""

from __future__ import annotations

import csv
import http.client
import io
import json
import os
import shutil
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import VALID

pytest.importorskip("fastapi", reason="the serve extra is not installed")
uvicorn = pytest.importorskip("uvicorn", reason="the serve extra is not installed")

from graphormer_urpe.serve import ModelService, create_app  # noqa: E402


class LiveServer:
    """``app`` served by uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, app) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}/"

    def post(self, path: str, body: dict, timeout: float = 60) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = json.dumps(body)
            conn.request("POST", path, data, {"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, json.loads(r.read())
        finally:
            conn.close()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def live(tiny_run):
    service = ModelService.load(tiny_run[1] / "best.pt", workers=1, threads=1)
    server = LiveServer(create_app(service))
    yield server
    server.stop()
    service.close()


def _raw(port: int, data: bytes, read: bool = False) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        return s.recv(65536) if read else b""


def test_clients_that_go_away_leave_the_server_serving(live):
    body = json.dumps({"smiles": VALID * 20}).encode()
    head = b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    # a body cut short, a whole request whose answer nobody reads, a connection left empty
    _raw(live.port, head + b"Content-Length: 5000\r\n\r\n" + body[:100])
    _raw(live.port, head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    _raw(live.port, b"")
    _raw(live.port, b"GARBAGE / NOT-HTTP\r\n\r\n")
    over = json.dumps({"smiles": ["CCO"] * 1001}).encode()
    answer = _raw(live.port, head + f"Content-Length: {len(over)}\r\n\r\n".encode() + over, True)
    assert answer.startswith(b"HTTP/1.1 413")
    status, out = live.post("/predict", {"smiles": ["CCO", "C(("]})
    assert status == 200 and out["rows"][0]["error"] is None and out["rows"][1]["error"]


def _rss() -> int:
    import psutil

    return psutil.Process(os.getpid()).memory_info().rss


def test_bounded_load_of_concurrent_clients(live):
    """8 clients x 10 requests of 10 SMILES: every request answered, each with the rows the
    same molecules get alone, in order; memory no higher after a second round."""
    pool = [*VALID, "C((", *VALID[::-1]]
    requests = [[pool[(i * 7 + k) % len(pool)] for k in range(10)] for i in range(80)]
    status, alone = live.post("/predict", {"smiles": pool})
    assert status == 200
    expected = {row["smiles"]: row for row in alone["rows"]}

    def run(part: list[list[str]]) -> list[tuple[int, dict]]:
        return [live.post("/predict", {"smiles": r}) for r in part]

    def round_of_load() -> None:
        with ThreadPoolExecutor(8) as ex:
            answers = [a for part in ex.map(run, [requests[k::8] for k in range(8)]) for a in part]
        assert len(answers) == len(requests)
        for status, out in answers:
            assert status == 200 and out["molecules"] == 10
            for row in out["rows"]:
                want = expected[row["smiles"]]
                assert row["error"] == want["error"] and row["domain"] == want["domain"]
                if want["error"] is None:
                    assert row["heavy_atoms"] == pytest.approx(want["heavy_atoms"], abs=1e-5)

    round_of_load()
    before = _rss()
    round_of_load()
    assert _rss() - before < 64 * 2**20


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium on this machine (apt-get install -y chromium)")


def test_the_page_in_a_real_browser(live, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed")
    chromium = _chromium()
    with sync_api.sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        except Exception as exc:  # a browser that cannot start here (no display libraries)
            pytest.skip(f"Chromium at {chromium} does not start: {str(exc).splitlines()[0]}")
        try:
            page = browser.new_page(accept_downloads=True)
            page.goto(live.url)
            assert "heavy_atoms" in page.inner_text("header")
            page.fill("#smiles", "CCO\nnot_a_smiles((\nc1ccccc1O\n")
            page.click("#predict")
            page.wait_for_selector("#results")
            rows = page.locator("#results tbody tr")
            assert rows.count() == 3
            texts = [rows.nth(i).inner_text() for i in range(3)]
            assert "CCO" in texts[0] and "c1ccccc1O" in texts[2]
            assert "RDKit cannot parse" in texts[1]
            assert page.locator("#results tbody tr svg").count() == 2  # the molecules drawn
            assert "interval" in page.inner_text("#results thead")
            # sort by the prediction, descending then ascending: the failed row stays last
            header = page.locator("#results thead th", has_text="heavy_atoms").first
            header.click()
            header.click()
            order = [rows.nth(i).get_attribute("data-smiles") for i in range(3)]
            assert order[-1] == "not_a_smiles(("
            # a row's atom picture
            page.locator("#results tbody tr[data-smiles='c1ccccc1O']").click()
            page.wait_for_selector("#picture svg", timeout=60_000)
            assert page.get_attribute("#picture", "data-smiles") == "c1ccccc1O"
            # the table as CSV
            with page.expect_download() as download:
                page.click("#download")
            target = tmp_path / "predictions.csv"
            download.value.save_as(target)
            table = list(csv.reader(io.StringIO(target.read_text())))
            assert table[0][:2] == ["smiles", "heavy_atoms"] and len(table) == 4
            assert [r[0] for r in table[1:]] == ["CCO", "not_a_smiles((", "c1ccccc1O"]
            assert table[2][-1].startswith("RDKit cannot parse")
        finally:
            browser.close()
