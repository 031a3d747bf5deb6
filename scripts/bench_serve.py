"""Benchmark ``graphormer-urpe serve`` under load against streaming ``predict`` on the same
molecules, in the same run. Prints JSON (``--out``: also writes it).

An untrained checkpoint of ``--preset`` (speed does not depend on the weights) records the
training domain of the first ``--domain-molecules`` molecules, so every molecule is checked
and its nearest training fingerprint searched, as for a trained checkpoint. The molecules are
the ZINC molecules of the shared data (else RDKit's NCI set), cycled to
``clients x requests x per_request`` rows. Each repeat, in turn:

* ``predict``: ``graphormer-urpe predict --input mols.smi --output out.csv`` in a subprocess
  (its default settings), wall time of the whole command: molecules/s;
* ``serve``: ``graphormer-urpe serve`` in a subprocess on a loopback port; once it answers,
  ``--clients`` threads (one keep-alive connection each, in this process) send ``--requests``
  requests of ``--per-request`` SMILES each; molecules/s over the whole load, the latency of
  each request (p50, p99), failed requests (any answer but 200, or no answer);
  then one client sends ``--single`` requests of one SMILES (p50, p99); the server's memory
  (resident set of the server and its featurising process) after a first round of the load
  and after the last; then faults: clients that go away mid-request and a request over each
  limit, after which the server must still answer.

The medians over the repeats are the figures (a shared machine's speed drifts). Targets:
``throughput_ratio`` (serve / predict) >= 0.8; ``single_p99_ms`` <= 100; no failed request.
``--screenshot PATH`` also takes a picture of the page with headless Chromium (Playwright).

    python scripts/bench_serve.py --out docs/results/serve_bench.json \\
        --screenshot docs/figures/serve_page.png
    python scripts/bench_serve.py --smoke

On a busy machine each repeat can run as its own invocation (``--repeats 1 --out rN.json``),
and ``--merge r1.json r2.json r3.json --out all.json`` makes one report of their runs.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import importlib.util
import json
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _bench import molecules, untrained_checkpoint

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "graphormer_urpe.cli", *args]


def run_predict(ckpt: Path, smi: Path, work: Path) -> dict:
    """Streaming ``predict`` over the whole file: molecules/s of the command."""
    out = work / "predict.csv"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    cmd = _cli("predict", "--checkpoint", str(ckpt), "--input", str(smi), "--output", str(out))
    subprocess.run([*cmd, "--no-progress"], check=True, cwd=REPO, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    rows = sum(1 for _ in open(out)) - 1
    return {
        "molecules": rows,
        "seconds": round(seconds, 2),
        "molecules_per_s": rows / seconds,
        "cpu_ms_per_molecule": round(1000 * cpu / rows, 3),
    }


class Server:
    """``graphormer-urpe serve`` in a subprocess, on a free loopback port."""

    def __init__(self, ckpt: Path, workers: int, extra: list[str]) -> None:
        self.port = _free_port()
        cmd = _cli("serve", "--checkpoint", str(ckpt), "--port", str(self.port))
        self.proc = subprocess.Popen(
            [*cmd, "--workers", str(workers), *extra], cwd=REPO, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                if self.request("GET", "/model")[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.2)

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body, headers)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def cpu_s(self) -> float:
        """CPU seconds (user + system) of the server and its live children so far."""
        import psutil

        p = psutil.Process(self.proc.pid)
        total = 0.0
        for q in [p, *p.children(recursive=True)]:
            t = q.cpu_times()
            total += t.user + t.system
        return total

    def rss_mib(self) -> float:
        """Resident memory of the server and its children (MiB)."""
        import psutil

        p = psutil.Process(self.proc.pid)
        procs = [p, *p.children(recursive=True)]
        return sum(q.memory_info().rss for q in procs) / 2**20

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _client(port: int, bodies: list[bytes], latencies: list[float], failures: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for body in bodies:
        start = time.perf_counter()
        try:
            conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            if r.status != 200:
                failures.append(f"{r.status}: {data[:200]!r}")
        except (OSError, http.client.HTTPException) as exc:
            failures.append(repr(exc))
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            continue
        latencies.append(time.perf_counter() - start)
    conn.close()


def load(server: Server, smiles: list[str], clients: int, requests: int, per: int) -> dict:
    """``clients`` concurrent clients, each ``requests`` requests of ``per`` SMILES; the
    server's memory sampled every half second meanwhile (``rss_mib``: at a quarter, half,
    three quarters of the load and at its end)."""
    bodies = [
        [
            json.dumps(
                {"smiles": smiles[(c * requests + r) * per : (c * requests + r + 1) * per]}
            ).encode()
            for r in range(requests)
        ]
        for c in range(clients)
    ]
    latencies: list[float] = []
    failures: list[str] = []
    threads = [
        threading.Thread(target=_client, args=(server.port, b, latencies, failures)) for b in bodies
    ]
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            samples.append(server.rss_mib())

    sampler = threading.Thread(target=sample)
    cpu = server.cpu_s()
    client_cpu = time.process_time()
    start = time.perf_counter()
    sampler.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    cpu = server.cpu_s() - cpu
    client_cpu = time.process_time() - client_cpu
    done.set()
    sampler.join()
    samples.append(server.rss_mib())
    quarters = [samples[min(len(samples) - 1, len(samples) * k // 4)] for k in (1, 2, 3)]
    return {
        "molecules": clients * requests * per,
        "seconds": round(seconds, 2),
        "molecules_per_s": clients * requests * per / seconds,
        "p50_ms": _percentile(latencies, 50),
        "p99_ms": _percentile(latencies, 99),
        "failed_requests": len(failures),
        "failures": failures[:5],
        "rss_mib": [round(v, 1) for v in [*quarters, samples[-1]]],
        "server_cpu_ms_per_molecule": round(1000 * cpu / (clients * requests * per), 3),
        "client_cpu_ms_per_molecule": round(1000 * client_cpu / (clients * requests * per), 3),
    }


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return round(ordered[k] * 1000, 2)


def single(server: Server, smiles: list[str], count: int) -> dict:
    """One client, ``count`` requests of one SMILES each (after 20 to warm up)."""
    latencies: list[float] = []
    failures: list[str] = []
    bodies = [json.dumps({"smiles": [smiles[i % len(smiles)]]}).encode() for i in range(count)]
    _client(server.port, bodies[:20], [], failures)
    _client(server.port, bodies, latencies, failures)
    return {
        "requests": count,
        "p50_ms": _percentile(latencies, 50),
        "p99_ms": _percentile(latencies, 99),
        "failed_requests": len(failures),
    }


def faults(server: Server) -> dict:
    """Clients that go away mid-request and a request over each limit; then the server must
    still answer. Returns each fault's status (``None``: the client left) and the check."""
    head = b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    body = json.dumps({"smiles": ["CCO"] * 500}).encode()
    statuses: dict[str, int | None] = {}
    for name, data in (
        ("body cut short", head + b"Content-Length: 100000\r\n\r\n" + body[:100]),
        ("answer not read", head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body),
    ):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(data)
        statuses[name] = None
    over = {
        "molecules": json.dumps({"smiles": ["CCO"] * 1001}).encode(),
        "atoms": json.dumps({"smiles": ["C" * 201]}).encode(),
        "body": json.dumps({"smiles": ["C" * 100] * 110_000}).encode(),
    }
    for name, data in over.items():
        statuses[f"over the {name} limit"] = server.request("POST", "/predict", data)[0]
    ok = server.request("POST", "/predict", json.dumps({"smiles": ["CCO"]}).encode())[0]
    return {"statuses": statuses, "still_serving": ok == 200}


def screenshot(server: Server, path: Path, smiles: list[str]) -> str | None:
    """A picture of the page with ``smiles`` and the atom picture of the first row."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "Playwright is not installed"
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return "no Chromium (apt-get install -y chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"http://127.0.0.1:{server.port}/")
        page.fill("#smiles", "\n".join(smiles))
        page.click("#predict")
        page.wait_for_selector("#results")
        page.locator("#results tbody tr").first.click()
        page.wait_for_selector("#picture svg", timeout=60_000)
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path), full_page=True)
        browser.close()
    return None


def summarise(runs: list[dict]) -> dict:
    """The medians over ``runs`` (each repeat's figures), the failures summed, the targets."""

    def med(get) -> float:
        return round(statistics.median(get(r) for r in runs), 3)

    summary = {
        "predict_molecules_per_s": med(lambda r: r["predict"]["molecules_per_s"]),
        "serve_molecules_per_s": med(lambda r: r["serve"]["molecules_per_s"]),
        "throughput_ratio": med(lambda r: r["throughput_ratio"]),
        # CPU per molecule: robust to other jobs on the machine, unlike molecules/s
        "predict_cpu_ms_per_molecule": med(lambda r: r["predict"]["cpu_ms_per_molecule"]),
        "serve_cpu_ms_per_molecule": med(lambda r: r["serve"]["server_cpu_ms_per_molecule"]),
        "load_p50_ms": med(lambda r: r["serve"]["p50_ms"]),
        "load_p99_ms": med(lambda r: r["serve"]["p99_ms"]),
        "single_p50_ms": med(lambda r: r["single"]["p50_ms"]),
        "single_p99_ms": med(lambda r: r["single"]["p99_ms"]),
        "failed_requests": sum(
            r["serve"]["failed_requests"] + r["single"]["failed_requests"] for r in runs
        ),
        "memory_growth_mib": med(
            lambda r: r["server_rss_mib"]["after_load"] - r["server_rss_mib"]["after_warm_up"]
        ),
        # the last three quarters of the load: flat memory grows by little here
        "memory_growth_last_three_quarters_mib": med(
            lambda r: r["serve"]["rss_mib"][-1] - r["serve"]["rss_mib"][0]
        ),
        "still_serving_after_faults": all(r["faults"]["still_serving"] for r in runs),
    }
    summary["targets"] = {
        "throughput_ratio >= 0.8": summary["throughput_ratio"] >= 0.8,
        "single_p99_ms <= 100": summary["single_p99_ms"] <= 100,
        "no failed request": summary["failed_requests"] == 0,
    }
    return summary


def merge(paths: list[str]) -> dict:
    """One report of the runs of earlier reports of this script (repeats run as separate
    invocations, e.g. to keep each one short on a busy machine): their runs in order, the
    medians over all of them, the first report's configuration."""
    reports = [json.loads(Path(p).read_text()) for p in paths]
    runs = [r for rep in reports for r in rep["runs"]]
    first = reports[0]
    config = {**first["config"], "repeats": len(runs), "merged_from": len(reports)}
    return {**first, "config": config, "summary": summarise(runs), "runs": runs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--requests", type=int, default=200, help="per client")
    p.add_argument("--per-request", type=int, default=10, help="SMILES per request")
    p.add_argument("--single", type=int, default=300, help="requests of one SMILES")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--preset", default="small")
    p.add_argument("--workers", type=int, default=1, help="serve's featurising processes")
    p.add_argument("--domain-molecules", type=int, default=10_000)
    p.add_argument("--smiles-file", help="molecules from this file (one SMILES a line)")
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--screenshot", help="a PNG of the page (headless Chromium)")
    p.add_argument(
        "--threads", type=int, default=None, help="serve's model threads (default: serve's own)"
    )
    p.add_argument("--smoke", action="store_true", help="a tiny run that checks the script")
    p.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="run nothing: one report of these reports' runs (the medians over all of them)",
    )
    a = p.parse_args()
    if a.merge:
        text = json.dumps(merge(a.merge), indent=2)
        print(text)
        if a.out:
            Path(a.out).write_text(text + "\n")
        return
    if a.smoke:
        a.clients, a.requests, a.per_request, a.single, a.repeats = 2, 5, 4, 10, 1
        a.domain_molecules = min(a.domain_molecules, 200)
    total = a.clients * a.requests * a.per_request
    distinct, source, selection = molecules(total, a.smiles_file)
    smiles = [distinct[i % len(distinct)] for i in range(total)]
    from graphormer_urpe.datasets.domain import record_of_smiles

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        work = Path(tmp)
        smi = work / "mols.smi"
        smi.write_text("".join(f"{s}\n" for s in smiles))
        domain = None
        if a.domain_molecules:
            domain = record_of_smiles(distinct[: a.domain_molecules]).to_dict()
        ckpt = work / "best.pt"
        untrained_checkpoint(ckpt, a.preset, domain)
        serve_flags = [] if a.threads is None else ["--threads", str(a.threads)]
        runs = []
        for _ in range(a.repeats):
            base = run_predict(ckpt, smi, work)
            server = Server(ckpt, a.workers, serve_flags)
            try:
                warm = load(
                    server, smiles[: a.clients * a.per_request * 5], a.clients, 5, a.per_request
                )
                rss_before = server.rss_mib()
                served = load(server, smiles, a.clients, a.requests, a.per_request)
                rss_after = server.rss_mib()
                one = single(server, distinct, a.single)
                broken = faults(server)
            finally:
                server.stop()
            runs.append(
                {
                    "predict": base,
                    "serve": served,
                    "warm_up_failed_requests": warm["failed_requests"],
                    "single": one,
                    "server_rss_mib": {"after_warm_up": rss_before, "after_load": rss_after},
                    "faults": broken,
                    "throughput_ratio": served["molecules_per_s"] / base["molecules_per_s"],
                }
            )
        picture = None
        if a.screenshot:
            server = Server(ckpt, a.workers, serve_flags)
            try:
                picture = screenshot(
                    server, Path(a.screenshot), ["CCO", "not_a_smiles((", distinct[0], "C[Se]C"]
                )
            finally:
                server.stop()

    summary = summarise(runs)
    report = {
        "benchmark": "serve",
        "date": datetime.date.today().isoformat(),
        "config": {
            "clients": a.clients,
            "requests_per_client": a.requests,
            "smiles_per_request": a.per_request,
            "molecules": total,
            "distinct_molecules": len(distinct),
            "source": source,
            **selection,
            "preset": a.preset,
            "serve_workers": a.workers,
            "serve_threads": a.threads,
            "domain_molecules": a.domain_molecules,
            "repeats": a.repeats,
            "screenshot": a.screenshot if a.screenshot and picture is None else picture,
            # what uvicorn picks up where installed (the serve extra installs both)
            "httptools": importlib.util.find_spec("httptools") is not None,
            "uvloop": importlib.util.find_spec("uvloop") is not None,
        },
        "summary": summary,
        "runs": runs,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
    }
    text = json.dumps(report, indent=2)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
