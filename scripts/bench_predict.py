"""Benchmark ``graphormer-urpe predict`` end to end on real drug-like SMILES (MOSES).

Prints JSON. For each model preset and input size, the command runs in a subprocess on the
first N MOSES training SMILES (``scripts/_moses.py`` fetches them outside the repository) with
an untrained checkpoint of that preset (speed does not depend on the weights):

* ``molecules_per_s``: N / wall time of the whole command (start-up, model load, reading,
  featurising, the model, writing the CSV);
* ``peak_rss_mib``: the largest sum of the resident memory of the command and its worker
  processes, sampled every 0.5 s with psutil (pages shared between the forked workers and the
  main process count once per process, so this overstates the memory used);
  ``peak_pss_mib`` the same for the proportional set size (shared pages split between the
  processes that share them: the memory the run actually takes; sampled every 2.5 s, as
  reading it costs CPU time); ``peak_rss_main_mib`` the main process alone;
* ``cpu_s``: user + system CPU time of the command and its workers; ``cpu_ms_per_molecule``
  (main process: ``main_cpu_s``). With C idle cores, C x 1000 / ``cpu_ms_per_molecule`` bounds
  the throughput.

The checkpoints record a training domain (``--domain-molecules``, default 10,000: the record
of the first 10,000 MOSES molecules, as big as a record gets), so ``predict`` compares every
molecule with it and searches its nearest training fingerprint, as it does for a trained
checkpoint (``--no-similarity`` passes that flag on; ``--domain-molecules 0``: no record).

``--baseline REV`` runs the same measurement for the ``predict`` command of an earlier commit
(``git worktree add`` into a temporary folder) on ``--baseline-sizes`` (it reads a CSV);
with ``--pairs K``, K alternating runs of this code and REV's at each of those sizes, with
the medians of each and their ratio (the speed of a shared machine drifts between runs).
``--profile`` measures each stage alone, in this process, on one thread: featurising
(``featurize_chunk``) and the Graphormer features (``flat_graphs``), which ``predict`` runs in
its worker processes, then collating and the model's forward pass, which it runs in the main
process; in molecules/s and CPU ms per molecule. Run::

    python scripts/bench_predict.py --profile
    python scripts/bench_predict.py --sizes 10000 100000 1000000 --presets small
    python scripts/bench_predict.py --sizes 10000 --presets pcqm4mv2-small
    python scripts/bench_predict.py --sizes --baseline 0251eef --baseline-sizes 10000 30000
    python scripts/bench_predict.py --sizes --baseline 0251eef --baseline-sizes 40000 --pairs 3
    python scripts/bench_predict.py --sizes 100000 --device cuda --workers 12 --batch-size 1024
    python scripts/bench_predict.py --smoke --smiles-file some.smi
    python scripts/bench_predict.py --sizes --presets small --baseline main \
        --baseline-sizes 20000 --pairs 3
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import psutil
import torch
from _bench import untrained_checkpoint
from _moses import moses_smiles_file

from graphormer_urpe.datasets.domain import record_of_smiles
from graphormer_urpe.inference.engines.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_WORKERS,
)

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20


def make_checkpoint(preset: str, path: Path, domain: dict | None = None) -> dict:
    """An untrained checkpoint of ``preset`` (OGB featuriser, one regression target), with
    the training-domain record ``domain`` (checkpoint form) where given."""
    model = untrained_checkpoint(path, preset, domain)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "hops": model.config.multi_hop_max_dist,
    }


def pair_arguments(p: argparse.ArgumentParser, size: int) -> argparse.Namespace:
    """The options of the benchmarks that run ``predict`` beside a variant of it, in pairs
    (``--size`` molecules, by default ``size``), parsed; a smoke run's sizes made tiny."""
    p.add_argument("--size", type=int, default=size, help="MOSES molecules (%(default)s)")
    p.add_argument("--pairs", type=int, default=1, help="pairs of runs, one of each kind")
    p.add_argument("--preset", default="small")
    p.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default predict's)")
    p.add_argument("--domain-molecules", type=int, default=10_000)
    p.add_argument("--smiles-file", default=None, help="one SMILES a line, instead of MOSES")
    p.add_argument("--json", default=None, help="also write the report here")
    p.add_argument("--smoke", action="store_true", help="tiny run that checks the script works")
    a = p.parse_args()
    a.no_similarity = False  # what run_stream reads: predict as a user runs it
    if a.smoke:
        a.size, a.pairs, a.domain_molecules = 300, 1, min(a.domain_molecules, 300)
    return a


class PairInputs(NamedTuple):
    """What every run of a paired benchmark reads: its working folder (removed at the end),
    the untrained checkpoint and the file of ``--size`` SMILES."""

    work: Path
    checkpoint: Path
    smiles: Path


def run_in_pairs(
    a: argparse.Namespace,
    kinds: tuple[str, str],
    run: Callable[[str, int, PairInputs], dict],
    after_pair: Callable[[dict[str, list[dict]], PairInputs], None] | None = None,
) -> tuple[dict[str, list[dict]], list[float], dict]:
    """``a.pairs`` pairs of runs, ``run(kind, pair, inputs)`` for each of the two ``kinds``,
    which goes first swapping every other pair (so both see the same load of a shared
    machine), then ``after_pair(runs, inputs)``; on :func:`bench_inputs` in a temporary
    folder. Each row is printed to stderr as it comes. Returns the rows of each kind, the
    1-minute load average before and after, and the checkpoint's facts."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-{kinds[1]}-"))
    load = [os.getloadavg()[0]]
    runs: dict[str, list[dict]] = {kind: [] for kind in kinds}
    try:
        molecules, ckpt, model = bench_inputs(a, work)
        inputs = PairInputs(work, ckpt, molecules(a.size))
        for pair in range(a.pairs):
            for kind in kinds if pair % 2 == 0 else kinds[::-1]:
                runs[kind].append(run(kind, pair, inputs))
                print(json.dumps({"run": kind, **runs[kind][-1]}), file=sys.stderr)
            if after_pair is not None:
                after_pair(runs, inputs)
    finally:
        load.append(os.getloadavg()[0])
        shutil.rmtree(work, ignore_errors=True)
    return runs, load, model


def median(runs: list[dict], key: str) -> float:
    """The median of ``key`` over ``runs``, to 2 decimals."""
    return round(statistics.median(r[key] for r in runs), 2)


def pair_report(
    name: str, a: argparse.Namespace, model: dict, load: list, summary: dict, runs: dict, **extra
) -> dict:
    """A paired benchmark's JSON report: its settings (``extra`` among them), the summary,
    every run and the machine."""
    return {
        "benchmark": name,
        "date": datetime.date.today().isoformat(),
        "config": {
            "preset": a.preset,
            **model,
            "pairs": a.pairs,
            **stream_config(a),
            **extra,
            "data": a.smiles_file or "MOSES training SMILES (molsets 0.3.1), first N",
            "load_average_1min_start_end": [round(x, 2) for x in load],
        },
        "summary": summary,
        "runs": runs,
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
    }


def bench_inputs(a: argparse.Namespace, work: Path) -> tuple:
    """What the ``predict`` benchmarks share: ``molecules(n)``, a file of the first ``n`` MOSES
    SMILES (or of ``a.smiles_file``); an untrained ``a.preset`` checkpoint in ``work`` whose
    training domain holds the first ``a.domain_molecules`` of them; and its facts
    (:func:`make_checkpoint`). Returns ``(molecules, checkpoint, facts)``."""

    def molecules(n: int) -> Path:
        return first_lines(a.smiles_file, n, work) if a.smiles_file else moses_smiles_file(n)

    domain = None
    if a.domain_molecules:
        with open(molecules(a.domain_molecules)) as fh:
            domain = record_of_smiles([line.split()[0] for line in fh]).to_dict()
    ckpt = work / f"{a.preset}.pt"
    return molecules, ckpt, make_checkpoint(a.preset, ckpt, domain)


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return [proc, *proc.children(recursive=True)]
    return []


def _rss(procs: list[psutil.Process]) -> int:
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def _pss(procs: list[psutil.Process]) -> int:
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            info = p.memory_full_info()
            total += getattr(info, "pss", info.rss)
    return total


def measure(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict:
    """Run ``cmd`` in ``cwd`` (``python -m`` imports the package found there first); wall
    time, peak memory of its process tree, CPU time."""
    before = os.times()
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    main = psutil.Process(proc.pid)
    peak_rss = peak_pss = peak_main = 0
    main_cpu = 0.0
    tree_cpu: dict[int, float] = {}  # CPU time of every process of the tree, as last seen
    for tick in itertools.count():
        if proc.poll() is not None:
            break
        procs = _tree(main)
        for q in procs:
            with contextlib.suppress(psutil.Error):
                t = q.cpu_times()
                tree_cpu[q.pid] = t.user + t.system
        rss = _rss(procs)
        peak_rss = max(peak_rss, rss)
        if tick % 5 == 0:  # the proportional set size reads every page table: less often
            peak_pss = max(peak_pss, _pss(procs))
        with contextlib.suppress(psutil.Error):
            peak_main = max(peak_main, main.memory_info().rss)
            t = main.cpu_times()
            main_cpu = t.user + t.system
        time.sleep(0.5)
    wall = time.perf_counter() - start
    after = os.times()
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return {
        "seconds": round(wall, 2),
        "peak_rss_mib": round(peak_rss / MIB, 1),
        "peak_pss_mib": round(peak_pss / MIB, 1),
        "peak_rss_main_mib": round(peak_main / MIB, 1),
        "cpu_s": round(cpu, 1),
        "main_cpu_s": round(main_cpu, 1),
        # sampled: counts the processes that are not the command's children too (a Ray
        # cluster's), less their last half second
        "tree_cpu_s": round(sum(tree_cpu.values()), 1),
        "summary": err.strip().splitlines()[-1] if err.strip() else "",
    }


def run_stream(
    a: argparse.Namespace, ckpt: Path, smi: Path, n: int, out: Path, extra: list[str] = ()
) -> dict:
    """This code's ``predict`` on ``smi`` (``n`` molecules), with ``extra`` flags."""
    cmd = [sys.executable, "-m", "graphormer_urpe.cli", "predict", "--checkpoint", str(ckpt)]
    cmd += ["--input", str(smi), "--output", str(out), "--no-progress", "--device", a.device]
    cmd += ["--workers", str(a.workers), "--batch-size", str(a.batch_size)]
    cmd += ["--chunk-size", str(a.chunk_size)]
    if a.no_similarity:
        cmd += ["--no-similarity"]
    if a.threads is not None:
        cmd += ["--threads", str(a.threads)]
    result = {"molecules": n, **measure([*cmd, *extra], REPO)}
    return _rates(result, n)


def stream_config(a: argparse.Namespace) -> dict:
    """The ``predict`` options a report records."""
    keys = ("workers", "batch_size", "chunk_size", "threads", "device", "domain_molecules")
    return {k: getattr(a, k) for k in keys}


def _rates(result: dict, n: int) -> dict:
    result["molecules_per_s"] = round(n / result["seconds"], 1)
    result["cpu_ms_per_molecule"] = round(1000 * result["cpu_s"] / n, 3)
    result["main_cpu_ms_per_molecule"] = round(1000 * result["main_cpu_s"] / n, 3)
    return result


def run_baseline(rev: str, ckpt: Path, smi: Path, n: int, work: Path, device: str = "cpu") -> dict:
    """The ``predict`` command of commit ``rev`` (reads a CSV with a ``smiles`` column), its
    model on ``device``."""
    tree = work / f"rev-{rev}"
    if not tree.exists():
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev],
            check=True,
            capture_output=True,
        )
    table = work / f"moses_{n}.csv"
    with open(smi) as src, open(table, "w") as dst:
        dst.write("smiles\n")
        shutil.copyfileobj(src, dst)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "graphormer_urpe.cli", "predict", "--checkpoint", str(ckpt)]
    cmd += ["--input", str(table), "--output", str(work / "base.csv"), "--no-progress"]
    result = {"molecules": n, "rev": rev, **measure(cmd + ["--device", device], tree, env)}
    return _rates(result, n)


def run_pairs(a: argparse.Namespace, ckpt: Path, smi: Path, n: int, work: Path) -> dict:
    """``a.pairs`` alternating runs of this code and of commit ``a.baseline`` on the same
    ``n`` molecules (which goes first alternates too), with the medians of each and their
    ratio: a comparison that the drift of a shared machine's speed does not tilt."""
    runs: dict[str, list[dict]] = {"this": [], "baseline": []}
    for k in range(a.pairs):
        order = ("this", "baseline") if k % 2 == 0 else ("baseline", "this")
        for side in order:
            if side == "this":
                row = run_stream(a, ckpt, smi, n, work / "out.csv")
            else:
                row = run_baseline(a.baseline, ckpt, smi, n, work, a.device)
            runs[side].append(row)
            print(json.dumps({"pair": k, "side": side, **row}), file=sys.stderr)
    median = {
        side: {
            key: statistics.median(r[key] for r in rows)
            for key in ("molecules_per_s", "cpu_ms_per_molecule", "main_cpu_ms_per_molecule")
        }
        for side, rows in runs.items()
    }
    ratio = median["this"]["molecules_per_s"] / median["baseline"]["molecules_per_s"]
    return {"molecules": n, "rev": a.baseline, "median": median, "ratio": round(ratio, 3), **runs}


def profile(ckpts: dict[str, Path], smi: Path, n: int, batch_size: int) -> dict:
    """Each stage alone in this process on one thread: molecules/s (wall) and CPU ms per
    molecule (this process's CPU time, which other load on the machine barely changes).

    Featurising and the Graphormer features run in the worker processes of ``predict``;
    collating and the model in the main process."""
    from graphormer_urpe import GraphormerCollator
    from graphormer_urpe.datasets.store import featurize_chunk, flat_graphs, with_pointers
    from graphormer_urpe.inference import load_model, read_smiles

    torch.set_num_threads(1)
    smiles = list(itertools.islice(read_smiles(smi), n))
    times: dict[str, tuple[float, float]] = {}

    def timed(name: str, fn):
        wall, cpu = time.perf_counter(), time.process_time()
        value = fn()
        times[name] = (time.perf_counter() - wall, time.process_time() - cpu)
        return value

    arrays, _, _ = timed("featurize", lambda: featurize_chunk(smiles, np.zeros((n, 1)), 0))
    arrays = with_pointers(arrays)
    valid = len(arrays["num_nodes"])
    out: dict = {"molecules": n, "valid": valid, "threads": 1, "batch_size": batch_size}
    out["featurize"] = _stage(valid, *times["featurize"])
    for name, ckpt in ckpts.items():
        loaded = load_model(ckpt, "cpu")
        hops = loaded.model.config.multi_hop_max_dist
        flat, _ = timed("features", lambda h=hops: flat_graphs(arrays, range(valid), h))
        collator = GraphormerCollator(hops, loaded.model.config.spatial_pos_max)
        starts = range(0, valid, batch_size)
        parts = [flat.slice(i, min(i + batch_size, valid)) for i in starts]
        batches = timed("collate", lambda c=collator, p=parts: [c(b) for b in p])
        if name != "small":  # the large model on the first few batches only
            batches = batches[: max(1, 2048 // batch_size)]
        with torch.no_grad():
            timed("model", lambda m=loaded.model, b=batches: [m(x) for x in b])
        seen = sum(len(b) for b in batches)
        stages = {k: _stage(valid, *times[k]) for k in ("features", "collate")}
        stages["model"] = _stage(seen, *times["model"])
        worker = out["featurize"]["cpu_ms_per_molecule"] + stages["features"]["cpu_ms_per_molecule"]
        main = stages["collate"]["cpu_ms_per_molecule"] + stages["model"]["cpu_ms_per_molecule"]
        out[name] = {
            **stages,
            "worker_cpu_ms_per_molecule": round(worker, 3),
            "main_process_cpu_ms_per_molecule": round(main, 3),
            "total_cpu_ms_per_molecule": round(worker + main, 3),
            "bound_2_cores_molecules_per_s": round(2000 / (worker + main), 1),
            "bound_main_process_molecules_per_s": round(1000 / main, 1),
        }
    return out


def first_lines(src: str, n: int, work: Path) -> Path:
    """The first ``n`` lines of ``src`` in a file of their own."""
    path = work / f"first_{n}.smi"
    with open(src) as fh:
        lines = [line for _, line in zip(range(n), fh, strict=False)]
    if len(lines) < n:
        raise ValueError(f"{src} has {len(lines)} lines; {n} asked for")
    path.write_text("".join(lines))
    return path


def _stage(n: int, wall: float, cpu: float) -> dict:
    return {
        "molecules_per_s": round(n / wall, 1),
        "cpu_ms_per_molecule": round(1000 * cpu / n, 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--presets", nargs="+", default=["small", "pcqm4mv2-small"])
    p.add_argument("--workers", type=int, default=DEFAULT_WORKERS)
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    p.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default torch's)")
    p.add_argument("--device", default="cpu", help="where predict runs the model (cpu, cuda)")
    p.add_argument("--baseline", default=None, metavar="REV", help="e.g. 0251eef")
    p.add_argument("--baseline-sizes", type=int, nargs="*", default=[10_000, 30_000])
    p.add_argument(
        "--pairs",
        type=int,
        default=0,
        help="with --baseline: at each --baseline-sizes, this many alternating runs of this "
        "code and REV's, reported with their medians and ratio",
    )
    p.add_argument("--profile", action="store_true", help="time each stage alone")
    p.add_argument("--profile-molecules", type=int, default=5000)
    p.add_argument(
        "--smiles-file",
        default=None,
        help="take the molecules from this file (one SMILES a line) instead of MOSES",
    )
    p.add_argument(
        "--domain-molecules",
        type=int,
        default=10_000,
        help="the checkpoints' training-domain record: of this many MOSES molecules (0: none)",
    )
    p.add_argument(
        "--no-similarity", action="store_true", help="run this code's predict with --no-similarity"
    )
    p.add_argument("--smoke", action="store_true", help="tiny run that checks the script works")
    a = p.parse_args()
    if a.smoke:
        a.sizes, a.presets, a.profile, a.profile_molecules = [300], ["small"], True, 300
        a.domain_molecules = min(a.domain_molecules, 300)
    work = Path(tempfile.mkdtemp(prefix="bench-predict-"))

    def molecules(n: int) -> Path:
        return first_lines(a.smiles_file, n, work) if a.smiles_file else moses_smiles_file(n)

    results: dict = {"stream": [], "baseline": []}
    load = [os.getloadavg()[0]]
    try:
        ckpts, models = {}, {}
        domain = None
        if a.domain_molecules:
            with open(molecules(a.domain_molecules)) as fh:
                train = [line.split()[0] for line in fh if line.strip()]
            domain = record_of_smiles(train).to_dict()
        for preset in a.presets:
            ckpts[preset] = work / f"{preset}.pt"
            models[preset] = make_checkpoint(preset, ckpts[preset], domain)
        if a.profile:
            smi = molecules(a.profile_molecules)
            results["profile"] = profile(ckpts, smi, a.profile_molecules, a.batch_size)
        for preset in a.presets:
            for n in a.sizes:
                row = run_stream(a, ckpts[preset], molecules(n), n, work / "out.csv")
                results["stream"].append({"preset": preset, **models[preset], **row})
                print(json.dumps(results["stream"][-1]), file=sys.stderr)
        if a.baseline and a.pairs:
            results["pairs"] = [
                run_pairs(a, ckpts[a.presets[0]], molecules(n), n, work) for n in a.baseline_sizes
            ]
        elif a.baseline:
            for n in a.baseline_sizes:
                row = run_baseline(a.baseline, ckpts[a.presets[0]], molecules(n), n, work, a.device)
                results["baseline"].append({"preset": a.presets[0], **row})
                print(json.dumps(results["baseline"][-1]), file=sys.stderr)
    finally:
        load.append(os.getloadavg()[0])
        for tree in work.glob("rev-*"):
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False
            )
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "benchmark": "predict",
        "config": {
            **stream_config(a),
            "similarity": not a.no_similarity,
            "gpu": torch.cuda.get_device_name() if a.device.startswith("cuda") else None,
            "data": a.smiles_file or "MOSES training SMILES (molsets 0.3.1), first N",
            "load_average_1min_start_end": [round(x, 2) for x in load],
        },
        "results": results,
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
