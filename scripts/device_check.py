"""One prepared check on one CUDA GPU: environment, correctness, speed, fidelity (compiled).

Run on a GPU machine (after ``bash scripts/fetch_device_deps.sh`` on a machine with network,
see ``scripts/device_run.sh``)::

    python scripts/device_check.py --out OUT

and on the CPU, end to end with tiny budgets, to keep the script from rotting::

    python scripts/device_check.py --smoke --out /tmp/check

Sections run in this order, each timed, each with its own budget, each able to fail without
losing the others' results (every one is recorded in ``OUT/device_report.json`` with its
status, error text and seconds):

* ``environment``: torch and CUDA versions, the GPU's name and memory, bf16 support, the
  versions of the carried packages;
* ``correctness``: ``pytest -m cuda`` (the tests skip on the CPU and check on CUDA);
* ``speed``: ``scripts/bench_train.py`` at the ``pcqm4mv2-base`` size and the ``zinc-slim``
  size, batch 256, bf16 autocast, ours (Graphormer, URPE) in three modes (``eager``: operators
  launched from Python; ``captured``: static batches, the whole step replayed from a CUDA
  graph; ``fused``: captured with the fused attention kernel) and Hugging Face's Graphormer
  (when transformers 4.57 is importable), all in one process per size: graphs/s (median),
  peak memory, model FLOP utilisation, GPU busy fraction, operators per step; then
  ``scripts/bench_attention.py`` (the attention product alone, fused kernel against the
  unfused paths, at both sizes); ``graphormer-urpe train`` end to end (its defaults: captured
  steps) from a PCQM4Mv2
  memory-mapped cache of the sample replicated to 200,000+ molecules, with loader workers and
  pinned memory, so that data loading is inside the figure, and its ratio to the benchmarked
  step's rate;
* ``fidelity``: the ZINC stand-in (``zinc/train.csv`` -> ``zinc/val.csv``, ZINC featuriser,
  ``zinc-slim``), Graphormer and URPE x seeds 1 and 2, four ``graphormer-urpe train``
  processes at once, equal steps chosen from a measured steps/s to fit the remaining budget,
  batch 256, Graphormer's schedule scaled to that budget (warm-up 10% of the steps, linear
  decay); best valid MAE per run, URPE - Graphormer of the means with the seed spread;
* ``compiled`` (opt in, ``--sections compiled``): the speed section's ``bench_train.py`` runs
  with ``--compile``, Graphormer and URPE, zinc-slim first. Compiling takes minutes, so it
  runs in a call of its own.

Everything is passed as explicit flags, so that changes of the CLI's defaults do not change
what is measured. Working files (dataset caches, runs) go to ``--work`` (a temporary folder
by default); ``--out`` receives at most 8 files: ``device_report.json``,
``fidelity_curves.png``, ``logs.tar.gz`` (every log, benchmark JSON, run history and config)
and the four runs' ``best.pt`` as ``best_<attention>_seed<k>.pt``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import importlib.util
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
REPORT_NAME = "device_report.json"
SCHEMA = "graphormer-urpe-device-report/1"
SECTIONS = ("environment", "correctness", "speed", "fidelity", "compiled")
DEFAULT_SECTIONS = SECTIONS[:4]  # "compiled" is opt in: its compilation alone takes minutes
STATUSES = ("ok", "failed", "timeout", "skipped")

# Seconds per section on a GPU; fidelity and compiled get whatever is left of --budget.
# On an H200, correctness needed 118-130 s with 4 test processes and the eager speed runs
# 136 s; compiling one zinc-slim model took 103-112 s, hence a section of its own. The
# captured and fused modes and their tests (Triton compilations) add to both.
GPU_BUDGETS = {"environment": 15, "correctness": 200, "speed": 250}
SMOKE_BUDGETS = {"environment": 10, "correctness": 30, "speed": 40}
GPU_TOTAL, SMOKE_TOTAL = 480, 115
CUDA_TEST_PROCESSES = 4  # pytest-xdist workers sharing the GPU, where xdist is installed
CUDA_TEST_FILES = (  # the files holding tests marked cuda
    "tests/test_cuda.py",
    "tests/test_capture.py",
    "tests/test_fused_attention.py",
    "tests/test_attention_kernel.py",
)
PACK_RESERVE = 8  # seconds kept for writing the report and packing the files

# Dense bf16 tensor-core peaks (FLOP/s), from the vendors' data sheets, by device-name match.
BF16_PEAK = (
    ("H200", 989.4e12),
    ("H100 PCIe", 756.0e12),
    ("H100 NVL", 835.0e12),
    ("H100", 989.4e12),
    ("GH200", 989.4e12),
    ("A100", 312.0e12),
    ("L40S", 362.0e12),
    ("L4", 121.0e12),
    ("A10", 125.0e12),
)

SPEED_MODES = ("eager", "captured", "fused")  # bench_train.py --modes, in this order
FIDELITY_ATTENTIONS = ("graphormer", "urpe")
FIDELITY_SEEDS = (1, 2)
ZINC_PEAK_LR = 2e-4  # Graphormer v1 on ZINC: peak lr 2e-4, 40k warm-up of 400k steps
ZINC_WARMUP_FRACTION = 40_000 / 400_000
E2E_MAX_SECONDS = 50  # the end-to-end run's --time-limit, counted from its launch
CLI = [sys.executable, "-m", "graphormer_urpe.cli"]  # the command line, in this interpreter
SMOKE_MODEL = ["--num-layers", "1", "--hidden-dim", "16", "--ffn-dim", "16", "--num-heads", "2"]
FIDELITY_RESERVE = 25  # seconds the ZINC runs leave for plotting and packing at the latest


# ---------------------------------------------------------------------------------------
# The report and its schema
# ---------------------------------------------------------------------------------------


def validate_report(report: Any) -> list[str]:
    """Problems with a ``device_report.json`` document (empty when it is valid).

    The document is an object with ``schema`` (:data:`SCHEMA`), ``smoke`` (bool), ``budget_s``
    and ``seconds`` (numbers), ``device`` (string), ``files`` (list of file names) and
    ``sections``: one object per name in :data:`SECTIONS`, each with ``status`` (one of
    :data:`STATUSES`), ``seconds`` and ``budget_s`` (numbers), ``error`` (string or null,
    a string whenever the status is ``failed`` or ``timeout``) and ``results`` (object).
    """
    problems: list[str] = []
    if not isinstance(report, dict):
        return [f"the report is a {type(report).__name__}, not an object"]

    def need(obj: dict, key: str, types: tuple, where: str) -> Any:
        if key not in obj:
            problems.append(f"{where}: missing {key!r}")
            return None
        value = obj[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            problems.append(f"{where}.{key}: {type(value).__name__} is not {types}")
        return value

    if report.get("schema") != SCHEMA:
        problems.append(f"schema is {report.get('schema')!r}, expected {SCHEMA!r}")
    need(report, "smoke", (bool,), "report")
    need(report, "budget_s", (int, float), "report")
    need(report, "seconds", (int, float), "report")
    need(report, "device", (str,), "report")
    files = need(report, "files", (list,), "report")
    if isinstance(files, list) and not all(isinstance(f, str) for f in files):
        problems.append("report.files: every entry must be a file name")
    sections = need(report, "sections", (dict,), "report")
    if not isinstance(sections, dict):
        return problems
    for name in SECTIONS:
        sec = sections.get(name)
        where = f"sections.{name}"
        if not isinstance(sec, dict):
            problems.append(f"{where}: missing or not an object")
            continue
        status = need(sec, "status", (str,), where)
        if isinstance(status, str) and status not in STATUSES:
            problems.append(f"{where}.status: {status!r} is not one of {STATUSES}")
        need(sec, "seconds", (int, float), where)
        need(sec, "budget_s", (int, float), where)
        need(sec, "results", (dict,), where)
        if "error" not in sec:
            problems.append(f"{where}: missing 'error'")
        elif sec["error"] is not None and not isinstance(sec["error"], str):
            problems.append(f"{where}.error: must be a string or null")
        elif status in ("failed", "timeout") and not sec["error"]:
            problems.append(f"{where}: status {status} needs an error text")
    extra = set(sections) - set(SECTIONS)
    if extra:
        problems.append(f"sections: unknown section(s) {sorted(extra)}")
    return problems


class SectionTimeout(Exception):
    """A section ran out of its budget."""


class Check:
    """Runs the sections against a shared wall-clock budget and records their results."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.smoke = args.smoke
        self.start = time.monotonic()
        self.total = args.budget or (SMOKE_TOTAL if self.smoke else GPU_TOTAL)
        self.budgets = dict(SMOKE_BUDGETS if self.smoke else GPU_BUDGETS)
        self.out = Path(args.out).resolve()
        self.work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp())
        # every dataset store of the check, in its own work folder (subprocesses inherit it)
        os.environ["GRAPHORMER_URPE_CACHE"] = str(self.work / "stores")
        self.logs = self.work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.out.mkdir(parents=True, exist_ok=True)
        self.sections: dict[str, dict[str, Any]] = {}
        self.deadline = self.start + self.total - PACK_RESERVE
        self.section_deadline = self.deadline
        self.env: dict[str, Any] = {}
        self.background: dict[str, subprocess.Popen] = {}
        self.keep_files: list[Path] = []

    # -- time ----------------------------------------------------------------------------

    def remaining(self) -> float:
        """Seconds left in the current section."""
        return self.section_deadline - time.monotonic()

    def run_section(self, name: str, fn: Callable[[dict], None]) -> None:
        now = time.monotonic()
        budget = self.budgets.get(name, self.deadline - now)
        self.section_deadline = min(now + budget, self.deadline)
        results: dict[str, Any] = {}
        entry: dict[str, Any] = {
            "status": "ok",
            "error": None,
            "budget_s": round(self.section_deadline - now, 1),
            "results": results,
        }
        print(f"[device_check] {name}: budget {entry['budget_s']:.0f} s", file=sys.stderr)
        try:
            if self.section_deadline - now < 1:
                raise SectionTimeout("no time left for this section")
            fn(results)
        except SectionTimeout as exc:
            entry["status"], entry["error"] = "timeout", str(exc)
        except SkipSection as exc:
            entry["status"], entry["error"] = "skipped", str(exc)
        except Exception as exc:  # record and go on with the next section
            entry["status"] = "failed"
            entry["error"] = f"{type(exc).__name__}: {exc}"
            (self.logs / f"{name}_traceback.txt").write_text(traceback.format_exc())
        entry["seconds"] = round(time.monotonic() - now, 1)
        self.sections[name] = entry
        print(
            f"[device_check] {name}: {entry['status']} in {entry['seconds']} s"
            + (f" ({entry['error']})" if entry["error"] else ""),
            file=sys.stderr,
        )

    # -- subprocesses --------------------------------------------------------------------

    def env_vars(self) -> dict[str, str]:
        env = dict(os.environ)
        paths = [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        env.setdefault("OMP_NUM_THREADS", "1" if self.smoke else "4")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def run(
        self, name: str, cmd: list[str], timeout: float | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess:
        """Run ``cmd`` with its output in ``logs/<name>.log``; at most the section's time."""
        limit = self.remaining() if timeout is None else min(timeout, self.remaining())
        if limit < 1:
            raise SectionTimeout(f"{name}: no time left")
        log = self.logs / f"{name}.log"
        with open(log, "w") as fh:
            fh.write("$ " + " ".join(cmd) + "\n")
            fh.flush()
            proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=fh,
                text=True,
                cwd=cwd or ROOT,
                env=self.env_vars(),
                start_new_session=True,
            )
            try:
                out, _ = proc.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                _kill(proc)
                out, _ = proc.communicate()
                fh.write(out or "")
                raise SectionTimeout(f"{name}: stopped after {limit:.0f} s") from None
            fh.write(out or "")
        result = subprocess.CompletedProcess(cmd, proc.returncode, out, "")
        if proc.returncode != 0:
            tail = _tail(log)
            raise RuntimeError(f"{name} exited with {proc.returncode}: {tail}")
        return result

    def launch(self, name: str, cmd: list[str]) -> tuple[subprocess.Popen, IO[str]]:
        """Start ``cmd`` in its own process group, its output in ``logs/NAME.log`` (returned
        open; the caller closes it when the process has ended)."""
        log = open(self.logs / f"{name}.log", "w")  # noqa: SIM115 - the caller closes it
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=self.env_vars(),
            start_new_session=True,
        )
        return proc, log

    def start_background(self, name: str, cmd: list[str]) -> None:
        self.background[name] = self.launch(name, cmd)[0]

    def wait_background(self, name: str) -> None:
        proc = self.background[name]
        try:
            rc = proc.wait(timeout=max(1.0, self.remaining()))
        except subprocess.TimeoutExpired:
            _kill(proc)
            raise SectionTimeout(f"preparing {name} did not finish in time") from None
        if rc != 0:
            raise RuntimeError(
                f"preparing {name} failed ({rc}): {_tail(self.logs / (name + '.log'))}"
            )

    def stop_background(self) -> None:
        for proc in self.background.values():
            if proc.poll() is None:
                _kill(proc)


class SkipSection(Exception):
    """The section cannot run here (e.g. no data); recorded as ``skipped``."""


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, 9)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


def _tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])[-1500:]


# ---------------------------------------------------------------------------------------
# Data preparation (run in background processes while the GPU is busy with other sections)
# ---------------------------------------------------------------------------------------


def data_dir(args: argparse.Namespace) -> Path:
    """``--data``, else ``.device/data`` (carried), else ``../shared/data``."""
    if args.data:
        return Path(args.data).resolve()
    for cand in (ROOT / ".device" / "data", ROOT.parent / "shared" / "data"):
        if (cand / "zinc" / "train.csv").exists():
            return cand
    return ROOT / ".device" / "data"


def _head_csv(src: Path, dst: Path, rows: int | None) -> None:
    """Copy ``src`` to ``dst``, keeping the header and the first ``rows`` rows (all: None)."""
    with open(src, newline="") as fi, open(dst, "w", newline="") as fo:
        for i, line in enumerate(fi):
            if rows is not None and i > rows:
                break
            fo.write(line)


def zinc_tables(work: Path, data: Path, smoke: bool) -> tuple[Path, Path]:
    """The ZINC stand-in's train / valid tables in ``work`` (the first rows in smoke mode)."""
    folder = work / "zinc"
    folder.mkdir(parents=True, exist_ok=True)
    train, valid = folder / "train.csv", folder / "val.csv"
    if not train.exists():
        _head_csv(data / "zinc" / "train.csv", train, 160 if smoke else None)
        _head_csv(data / "zinc" / "val.csv", valid, 40 if smoke else None)
    return train, valid


def zinc_dataset_flag(work: Path, data: Path, smoke: bool) -> str:
    train, valid = zinc_tables(work, data, smoke)
    return f"csv:{train},{valid},{valid}"  # selection and report on the valid molecules


def pcqm_smiles(work: Path, data: Path) -> Path:
    """The PCQM4Mv2 sample's SMILES, one per line under a header, as ``work/pcqm_smiles.csv``
    (the benchmarks' ``--smiles-file`` reads the first column; OGB's table starts with idx)."""
    path = work / "pcqm_smiles.csv"
    if not path.exists():
        raw = data / "pcqm4mv2-sample" / "pcqm4m-v2" / "raw" / "data.csv.gz"
        with gzip.open(raw, "rt", newline="") as fh:
            rows = csv.DictReader(fh)
            text = "smiles\n" + "".join(f"{r['smiles']}\n" for r in rows)
        path.write_text(text)
    return path


def prepare_zinc(work: Path, data: Path, smoke: bool) -> None:
    """Featurise the ZINC stand-in once into its store (the runs then read it)."""
    from graphormer_urpe.training import make_config
    from graphormer_urpe.training.loop import load_splits

    config = make_config(
        "zinc-slim",
        dataset=zinc_dataset_flag(work, data, smoke),
        data_root=str(work / "zinc-root"),
        target_columns=["y"],
        featurizer="zinc",
    )
    splits = load_splits(config)
    print(json.dumps({"train": len(splits.train), "valid": len(splits.valid)}))


def prepare_pcqm(work: Path, data: Path, copies: int, workers: int) -> None:
    """A PCQM4Mv2 cache of the sample replicated ``copies`` times, in OGB's layout.

    The sample's raw files are copied to ``work/pcqm-sample`` and preprocessed as usual; the
    replicated dataset ``work/pcqm-rep/pcqm4m-v2`` gets a ``data.csv.gz`` and ``split_dict.pt``
    with every row repeated ``copies`` times (so the dataset opens as any other), and its
    cache is written by tiling the sample's processed arrays instead of featurising the same
    molecules ``copies`` times.
    """
    import numpy as np
    import torch

    from graphormer_urpe.datasets import preprocess_lsc
    from graphormer_urpe.datasets.pcqm import LSC_DATASETS, _store_dir, load_split_dict
    from graphormer_urpe.datasets.source import file_digest
    from graphormer_urpe.datasets.store import (
        META_FILE,
        MoleculeCache,
        cache_is_complete,
    )

    src_root = work / "pcqm-sample"
    if not src_root.exists():
        shutil.copytree(data / "pcqm4mv2-sample", src_root)
        for p in src_root.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
    report = preprocess_lsc("pcqm4mv2", src_root, workers=1, download=False, progress=False)
    cache = MoleculeCache(report["cache_dir"])
    arrays = cache.open()
    folder = work / "pcqm-rep" / "pcqm4m-v2"
    (folder / "raw").mkdir(parents=True, exist_ok=True)
    src_folder = src_root / "pcqm4m-v2"
    with gzip.open(src_folder / "raw" / "data.csv.gz", "rt", newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    r = len(body)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for k in range(copies):
        for i, row in enumerate(body):
            w.writerow([k * r + i, *row[1:]])
    with gzip.open(folder / "raw" / "data.csv.gz", "wt", compresslevel=1) as fh:
        fh.write(buf.getvalue())
    splits = load_split_dict(src_folder / "split_dict.pt", tuple(_split_names()))
    torch.save(
        {
            name: np.concatenate([idx + k * r for k in range(copies)])
            for name, idx in splits.items()
        },
        folder / "split_dict.pt",
    )
    digest = file_digest(folder / "raw" / "data.csv.gz")
    dst = _store_dir(LSC_DATASETS["pcqm4mv2"], folder / "raw" / "data.csv.gz", None)
    if cache_is_complete(dst):
        return
    dst.mkdir(parents=True, exist_ok=True)
    m = len(cache)

    def tiled_ptr(ptr: np.ndarray) -> np.ndarray:
        counts = np.diff(ptr)
        out = np.zeros(m * copies + 1, dtype=np.int64)
        np.cumsum(np.tile(counts, copies), out=out[1:])
        return out

    for name in ("x", "edge_attr", "y"):
        np.save(dst / f"{name}.npy", np.concatenate([arrays[name]] * copies, axis=0))
    np.save(dst / "edge_index.npy", np.concatenate([arrays["edge_index"]] * copies, axis=1))
    src_index = np.asarray(arrays["source_index"])
    np.save(dst / "source_index.npy", np.concatenate([src_index + k * r for k in range(copies)]))
    for name in ("node_ptr", "edge_ptr"):
        np.save(dst / f"{name}.npy", tiled_ptr(np.asarray(arrays[name])))
    meta = dict(cache.meta)
    meta.update(
        rows=r * copies,
        graphs=m * copies,
        failures=[
            {**f, "index": f["index"] + k * r} for k in range(copies) for f in meta["failures"]
        ],
        source=f"{meta.get('source', 'PCQM4Mv2')} sample x{copies}",
        source_sha256=digest,
    )
    (dst / META_FILE).write_text(json.dumps(meta))
    print(json.dumps({"molecules": m * copies, "cache": str(dst)}))


def _split_names() -> list[str]:
    from graphormer_urpe.datasets.pcqm import LSC_DATASETS

    return list(LSC_DATASETS["pcqm4mv2"].splits)


# ---------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------


def _device_precision() -> tuple[str, str]:
    """``(device, precision)``: bf16 autocast on GPUs that have it, fp16 on older ones, fp32 on
    the CPU (stated explicitly on every command line)."""
    import torch

    if not torch.cuda.is_available():
        return "cpu", "fp32"
    return "cuda", "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def bf16_peak(name: str | None) -> float | None:
    """The dense bf16 peak FLOP/s of a GPU by name (``None`` when unknown)."""
    if not name:
        return None
    for key, peak in BF16_PEAK:
        if key in name:
            return peak
    return None


def section_environment(check: Check, res: dict) -> None:
    import torch

    check.env = res  # filled in place: what is known before a failure stays known
    res["python"] = sys.version.split()[0]
    res["machine"] = platform.machine()
    res["cpu_count"] = os.cpu_count()
    res["torch"] = torch.__version__
    res["cuda_available"] = torch.cuda.is_available()
    res["cuda"] = torch.version.cuda
    res["cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    from importlib import metadata

    for dist in ("torch_geometric", "numpy", "rdkit", "ogb", "transformers", "scikit-learn"):
        try:
            res[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:  # absent packages are part of the report
            res[dist] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        res["gpu"] = p.name
        res["gpu_memory_gib"] = round(p.total_memory / 2**30, 1)
        res["capability"] = f"{p.major}.{p.minor}"
        res["gpu_count"] = torch.cuda.device_count()
        res["bf16_supported"] = torch.cuda.is_bf16_supported()
        res["bf16_peak_flops"] = bf16_peak(p.name)
        res["nccl"] = str(torch.cuda.nccl.version())
    else:
        res["gpu"] = None
        res["bf16_supported"] = False
        res["bf16_peak_flops"] = None


def section_correctness(check: Check, res: dict) -> None:
    junit = check.logs / "correctness_junit.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "cuda",
        "-p",
        "no:cacheprovider",
        "-rs",
        "-v",
        "--durations=0",
        f"--junitxml={junit}",
        *CUDA_TEST_FILES,
    ]
    if importlib.util.find_spec("xdist") is not None:  # compiling dominates: use the CPU cores
        cmd[-1:-1] = ["-n", str(CUDA_TEST_PROCESSES)]
    try:
        check.run("correctness_pytest", cmd)
    except RuntimeError as exc:
        res.update(_junit_summary(junit))
        raise RuntimeError(f"{res.get('failed', '?')} cuda test(s) failed: {exc}") from None
    except SectionTimeout:
        res.update(_verbose_summary(check.logs / "correctness_pytest.log"))  # no JUnit file
        raise
    res.update(_junit_summary(junit))
    if res.get("tests", 0) == 0:
        raise RuntimeError("pytest -m cuda collected no tests")


def _verbose_summary(log: Path) -> dict[str, Any]:
    """The outcomes ``pytest -v`` printed before it was stopped."""
    cases: dict[str, str] = {}
    for line in log.read_text(errors="replace").splitlines():
        for outcome in ("PASSED", "FAILED", "ERROR", "SKIPPED"):
            if "::" in line and f" {outcome}" in line:  # "[gw0] [ 3%] PASSED a.py::t" too
                test = next(t for t in line.split() if "::" in t)
                cases[test.split("::", 1)[1]] = outcome.lower()
    counts = {o: sum(v == o for v in cases.values()) for o in ("passed", "failed", "skipped")}
    return {"tests_before_stop": len(cases), **counts, "cases": cases}


def _junit_summary(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    out: dict[str, Any] = {
        k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")
    }
    out["passed"] = out["tests"] - out["failures"] - out["errors"] - out["skipped"]
    out["failed"] = out["failures"] + out["errors"]
    cases: dict[str, str] = {}
    for case in suite.iter("testcase"):
        name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        status = "passed"
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                status = tag if tag != "skipped" else "skipped"
                if tag != "skipped":
                    status += ": " + (el.get("message") or "")[:300]
        cases[name] = status
    out["cases"] = cases
    return out


def _bench(check: Check, name: str, flags: list[str], timeout: float | None = None) -> dict:
    proc = check.run(name, [sys.executable, str(SCRIPTS / "bench_train.py"), *flags], timeout)
    report = json.loads(proc.stdout)
    (check.logs / f"{name}.json").write_text(json.dumps(report, indent=2))
    return report


def _speed_plan(check: Check) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """The benchmarked sizes (preset, its flags) and the flags common to every run."""
    dev, prec = _device_precision()
    data = data_dir(check.args)
    zinc_flag = ["--smiles-file", str(data / "zinc" / "train.csv")]
    pcqm_flag = ["--smiles-file", str(pcqm_smiles(check.work, data))]
    peak = check.env.get("bf16_peak_flops")
    extra = ["--peak-flops", str(peak)] if peak else []
    if check.smoke:
        tiny = ["--num-layers", "1", "--molecules", "16", "--batch-size", "8"]
        sizes = [("zinc-slim", [*tiny, *pcqm_flag])]  # reads the PCQM4Mv2 SMILES as on a GPU
        steps = ["--steps", "2", "--warmup", "1", "--threads", "1"]
    else:
        sizes = [  # each size on its own dataset's molecules
            ("pcqm4mv2-base", ["--molecules", "1024", "--batch-size", "256", *pcqm_flag]),
            ("zinc-slim", ["--molecules", "1024", "--batch-size", "256", *zinc_flag]),
        ]
        steps = ["--steps", "8", "--warmup", "3"]
    common = ["--device", dev, "--precision", prec, *extra, *steps]
    if dev == "cuda":
        common += ["--pad-to-multiple", "8", "--modes", *SPEED_MODES]
    else:  # the fused kernel runs on the CPU under Triton's slow interpreter only
        common += ["--modes", "eager", "captured"]
    return sizes, common


def _bench_into(check: Check, res: dict, key: str, flags: list[str], failures: list) -> None:
    """One benchmark into ``res[key]``; a failure is recorded and the section goes on."""
    try:
        res[key] = _bench(check, key, flags)
    except SectionTimeout:
        raise
    except Exception as exc:
        failures.append(f"{key}: {exc}")
        res[key] = {"error": str(exc)[:2000]}


def section_speed(check: Check, res: dict) -> None:
    sizes, common = _speed_plan(check)
    peer = ["--peer", "hf"] if _transformers_graphormer() else []
    res["peer"] = "hf" if peer else "unavailable (transformers<=4.57 not importable)"
    failures: list[str] = []
    for preset, flags in sizes:
        _bench_into(
            check,
            res,
            f"{preset}_train_steps",
            ["--preset", preset, *flags, *common, *peer],
            failures,
        )
    # the attention product alone: fused kernel against the unfused paths
    kernel = [sys.executable, str(SCRIPTS / "bench_attention.py")]
    if check.smoke:
        kernel.append("--smoke")  # (the fused kernel is skipped without Triton's interpreter)
    try:
        proc = check.run("attention_kernels", kernel)
        res["attention_kernels"] = json.loads(proc.stdout)
    except SectionTimeout:
        raise
    except Exception as exc:
        failures.append(f"attention_kernels: {exc}")
        res["attention_kernels"] = {"error": str(exc)[:2000]}
    # end to end from the memory-mapped cache, data loading inside the figure
    try:
        dev, prec = _device_precision()
        res["pcqm4mv2_end_to_end"] = _end_to_end(check, dev, prec, res)
    except SectionTimeout:
        raise
    except Exception as exc:
        failures.append(f"pcqm4mv2_end_to_end: {exc}")
        res["pcqm4mv2_end_to_end"] = {"error": str(exc)[:2000]}
    res["summary"] = _speed_summary(res)
    if failures:
        raise RuntimeError("; ".join(failures)[:3000])


def section_compiled(check: Check, res: dict) -> None:
    """``--compile`` training steps, Graphormer and URPE in one process per size.

    Opt in (``--sections compiled``): on an H200 each model's first step, the compilation,
    took 103-112 s at zinc-slim size, too long to share the default check's 480 s.
    """
    sizes, common = _speed_plan(check)
    failures: list[str] = []
    for preset, flags in reversed(sizes):  # the small model compiles faster: first
        key = f"{preset}_compiled"
        run = ["--preset", preset, *flags, *common, "--compile", "--no-memory"]
        run += ["--attention", "graphormer", "urpe", "--warmup", "3", "--steps", "6"]
        _bench_into(check, res, key, run, failures)
    res["summary"] = _speed_summary(res)
    if failures:
        raise RuntimeError("; ".join(failures)[:3000])


def _transformers_graphormer() -> bool:
    sys.path.insert(0, str(SCRIPTS))
    try:
        from _bench import hf_graphormer

        return hf_graphormer() is not None
    finally:
        sys.path.remove(str(SCRIPTS))


def _speed_summary(res: dict) -> dict:
    """The target ratios per size: each mode against eager, URPE against Graphormer and ours
    against Hugging Face (each model at its fastest mode), GPU busy fractions, FLOP use and
    operators per step; the end-to-end rate against the benchmarked step."""
    out: dict[str, Any] = {}
    for key, rep in res.items():
        if not isinstance(rep, dict) or "results" not in rep:
            continue
        r = {k: v for k, v in rep["results"].items() if isinstance(v, dict) and "step_ms" in v}
        row: dict[str, Any] = {k: v["graphs_per_s"] for k, v in r.items()}
        best = {}
        for a in ("graphormer", "urpe"):
            modes = {
                m: row.get(f"ours_{a}" + ("" if m == "eager" else f"_{m}")) for m in SPEED_MODES
            }
            modes = {m: v for m, v in modes.items() if v}
            if not modes:
                continue
            best[a] = max(modes.values())
            row[f"{a}_best"] = best[a]
            row[f"{a}_best_mode"] = max(modes, key=modes.get)
            for m, v in modes.items():
                if m != "eager" and "eager" in modes:
                    row[f"{a}_{m}_over_eager"] = round(v / modes["eager"], 2)
            if "hf" in row:
                row[f"{a}_best_over_hf"] = round(best[a] / row["hf"], 2)
        if len(best) == 2:
            row["urpe_best_over_graphormer_best"] = round(best["urpe"] / best["graphormer"], 3)
        for name, field in (
            ("gpu_busy_fraction", ("gpu_activity", "busy_fraction")),
            ("mfu", ("mfu",)),
            ("ops_per_step", ("ops_per_step",)),
        ):
            values = {}
            for k, v in r.items():
                for f in field:
                    v = v.get(f) if isinstance(v, dict) else None
                if v is not None:
                    values[k] = v
            if values:  # busy well below 1: the step waits on the host, not the GPU
                row[name] = values
        out[key] = row
    e2e = res.get("pcqm4mv2_end_to_end", {})
    if "graphs_per_second" in e2e:
        out["end_to_end_graphs_per_s"] = e2e["graphs_per_second"]
        bench = out.get("pcqm4mv2-base_train_steps", {}).get("graphormer_best")
        if bench:
            out["end_to_end_over_bench"] = round(e2e["graphs_per_second"] / bench, 3)
    return out


def _end_to_end(check: Check, dev: str, prec: str, res: dict) -> dict:
    """``graphormer-urpe train`` on the replicated PCQM4Mv2 cache: training graphs/s."""
    check.wait_background("pcqm_cache")
    run = check.work / "runs" / "pcqm-e2e"
    shutil.rmtree(run, ignore_errors=True)
    if check.smoke:
        steps, batch, workers = 3, 16, 1
        model = SMOKE_MODEL
    else:
        # about 30 s of training at the fastest rate just measured
        results = res.get("pcqm4mv2-base_train_steps", {}).get("results", {})
        rates = [
            results.get(f"ours_graphormer{m}", {}).get("graphs_per_s") for m in ("", "_captured")
        ]
        rate = max([r for r in rates if r] or [2000.0])
        batch, workers = 256, min(8, max(1, (os.cpu_count() or 2) - 2))
        steps = int(min(3000, max(30, 30 * rate / batch)))
        model = []
    cmd = [
        *CLI,
        "train",
        "--dataset",
        "pcqm4mv2",
        "--data-root",
        str(check.work / "pcqm-rep"),
        "--preset",
        "pcqm4mv2-base",
        *model,
        "--attention",
        "graphormer",
        "--batch-size",
        str(batch),
        "--max-steps",
        str(steps),
        "--warmup-steps",
        str(max(1, steps // 10)),
        "--lr",
        "2e-4",
        "--seed",
        "1",
        "--device",
        dev,
        "--precision",
        prec,
        "--num-workers",
        str(workers),
        "--keep-checkpoints",
        "1",
        "--out",
        str(run),
        "--no-progress",
    ]
    if check.smoke:
        cmd += ["--threads", "1"]
    else:  # a loader slower than the benchmarked step must not eat the compiled runs' time
        limit = max(0.25, min(E2E_MAX_SECONDS, check.remaining() - 25)) / 60
        cmd += ["--time-limit", f"{limit:.3f}"]
    check.run("pcqm4mv2_end_to_end", cmd)
    metrics = json.loads((run / "metrics.json").read_text())
    for f in run.glob("*.pt"):
        f.unlink()  # large and not needed: keep the figures only
    shutil.rmtree(run / "checkpoints", ignore_errors=True)
    return {
        "graphs_per_second": metrics["graphs_per_second"],
        "steps": metrics["steps"],
        "batch_size": batch,
        "num_workers": workers,
        "train_seconds": metrics["train_seconds"],
        "wall_seconds": metrics["wall_seconds"],
        "train_graphs_in_cache": metrics["train_graphs"],
        "stopped_on_time": metrics["stopped_on_time"],
        "precision": metrics["precision"],
        "note": "training graphs / training-loop seconds of graphormer-urpe train (loader with "
        "worker processes and pinned memory included; validation excluded); first steps "
        "(CUDA warm-up) included; the run stops at its step count or its --time-limit "
        f"(at most {E2E_MAX_SECONDS} s from launch), whichever comes first",
    }


def _train_cmd(
    check: Check,
    dataset: str,
    attention: str,
    seed: int,
    steps: int,
    out: Path,
    dev: str,
    prec: str,
    time_limit_s: float | None = None,
) -> list[str]:
    cmd = [
        *CLI,
        "train",
        "--dataset",
        dataset,
        "--data-root",
        str(check.work / "zinc-root"),
        "--target-columns",
        "y",
        "--featurizer",
        "zinc",
        "--preset",
        "zinc-slim",
        "--attention",
        attention,
        "--seed",
        str(seed),
        "--max-steps",
        str(steps),
        "--warmup-steps",
        str(max(1, round(ZINC_WARMUP_FRACTION * steps))),
        "--batch-size",
        "8" if check.smoke else "256",
        "--lr",
        str(ZINC_PEAK_LR),
        "--end-lr",
        "1e-9",
        "--weight-decay",
        "0.01",
        "--no-clip",
        "--loss",  # ZINC's recipe on its CSV: L1 on the raw target, selected on MAE
        "l1",
        "--no-normalize-targets",
        "--eval-every",
        "1",
        "--device",
        dev,
        "--precision",
        prec,
        "--num-workers",
        "0" if check.smoke else "2",
        "--keep-checkpoints",
        "1",
        "--out",
        str(out),
        "--no-progress",
    ]
    if check.smoke:
        cmd += SMOKE_MODEL
        cmd += ["--threads", "1"]
    if time_limit_s is not None:
        cmd += ["--time-limit", f"{max(time_limit_s, 1.0) / 60:.4f}"]
    return cmd


def _run_four(
    check: Check,
    tag: str,
    steps: int,
    dev: str,
    prec: str,
    limit: float,
    time_limit_s: float | None = None,
) -> dict:
    """The four runs at once; ``{(attention, seed): run folder}`` after all have finished.

    ``limit``: seconds after which they are killed; ``time_limit_s``: each run's own
    ``--time-limit`` (a clean stop with its results, before ``limit``)."""
    dataset = zinc_dataset_flag(check.work, data_dir(check.args), check.smoke)
    procs = {}
    for a in FIDELITY_ATTENTIONS:
        for s in FIDELITY_SEEDS:
            out = check.work / "runs" / f"{tag}-{a}-seed{s}"
            shutil.rmtree(out, ignore_errors=True)
            name = f"fidelity_{tag}_{a}_seed{s}"
            cmd = _train_cmd(check, dataset, a, s, steps, out, dev, prec, time_limit_s)
            proc, log = check.launch(name, cmd)
            procs[(a, s)] = (proc, log, out, name)
    end = time.monotonic() + min(limit, check.remaining())
    timed_out = []
    for proc, log, _, name in procs.values():
        try:
            proc.wait(timeout=max(0.5, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill(proc)
            timed_out.append(name)
        log.close()
    if timed_out:
        raise SectionTimeout(f"{', '.join(timed_out)} did not finish in time")
    bad = [
        f"{name} exited with {proc.returncode}: {_tail(check.logs / (name + '.log'), 3)}"
        for proc, _, _, name in procs.values()
        if proc.returncode != 0
    ]
    if bad:
        raise RuntimeError("; ".join(bad)[:3000])
    return {key: out for key, (_, _, out, _) in procs.items()}


def _steps_per_s(runs: dict) -> float:
    """Training steps/s of the slowest of the runs (each sharing the device with the others)."""
    rates = []
    for out in runs.values():
        m = json.loads((out / "metrics.json").read_text())
        rates.append(m["steps"] / m["train_seconds"])
    return min(rates)


def _train_rows(check: Check) -> int:
    train, _ = zinc_tables(check.work, data_dir(check.args), check.smoke)
    with open(train) as fh:
        return sum(1 for _ in fh) - 1


def section_fidelity(check: Check, res: dict) -> None:

    dev, prec = _device_precision()
    check.wait_background("zinc_cache")
    batch = 8 if check.smoke else 256
    if check.smoke:  # no probe: 3 steps (the rate is still measured, on the runs themselves)
        steps = 3
    else:
        probe_steps = 40
        t0 = time.monotonic()
        probe = _run_four(check, "probe", probe_steps, dev, prec, check.remaining())
        probe_wall = time.monotonic() - t0
        rate = _steps_per_s(probe)
        overhead = max(0.0, probe_wall - probe_steps / rate)  # start-up, evaluation, writing
        budget = check.remaining() - overhead - FIDELITY_RESERVE  # plotting and packing
        steps = int(rate * budget * 0.9)
        res["probe"] = {
            "steps": probe_steps,
            "steps_per_s_per_process": round(rate, 2),
            "wall_s": round(probe_wall, 1),
            "overhead_s": round(overhead, 1),
        }
        if steps < 10:
            raise SectionTimeout(f"only {steps} steps would fit in the remaining time")
    warm = max(1, round(ZINC_WARMUP_FRACTION * steps))
    res["schedule"] = {
        "steps": steps,
        "warmup_steps": warm,
        "batch_size": batch,
        "epochs": round(steps * batch / _train_rows(check), 2),
        "peak_lr": ZINC_PEAK_LR,
        "end_lr": 1e-9,
        "weight_decay": 0.01,
        "clip": None,
        "precision": prec,
        "note": "Graphormer's ZINC recipe (40k warm-up of 400k linear-decay steps) scaled to "
        "the steps that fit the budget at the measured rate; four processes at once",
    }
    # a clean stop at the latest FIDELITY_RESERVE s before the end, should the steps not fit
    safety = check.remaining() - FIDELITY_RESERVE
    runs = _run_four(check, "main", steps, dev, prec, check.remaining() - 10, safety)
    per_run = {}
    best: dict[str, list[float]] = {a: [] for a in FIDELITY_ATTENTIONS}
    for (a, s), out in runs.items():
        m = json.loads((out / "metrics.json").read_text())
        per_run[f"{a}_seed{s}"] = {
            "best_valid_mae": m["best_valid_mae"],
            "best_epoch": m["best_epoch"],
            "steps": m["steps"],
            "epochs": m["epochs"],
            "train_seconds": m["train_seconds"],
            "graphs_per_second": m["graphs_per_second"],
            "stopped_on_time": m["stopped_on_time"],
            "parameters": m["parameters"],
            "baseline_valid_mae": m["baseline_valid_mae"],
        }
        best[a].append(m["best_valid_mae"])
        ckpt = check.out / f"best_{a}_seed{s}.pt"
        shutil.copyfile(out / "best.pt", ckpt)
        check.keep_files.append(ckpt)
    res["runs"] = per_run
    res["steps_per_s_per_process"] = round(_steps_per_s(runs), 2)
    g, u = best["graphormer"], best["urpe"]
    done = {r["steps"] for r in per_run.values()}
    res["comparison"] = {
        "equal_steps": len(done) == 1,
        "graphormer_mean": statistics.mean(g),
        "urpe_mean": statistics.mean(u),
        "urpe_minus_graphormer": statistics.mean(u) - statistics.mean(g),
        "graphormer_seed_spread": max(g) - min(g),
        "urpe_seed_spread": max(u) - min(u),
        "note": (
            "smoke: the first 160 training and 40 validation molecules, a 1-layer model"
            if check.smoke
            else "best valid MAE on the 1,000 official ZINC-subset validation molecules after "
            "training on the 23,445-molecule stand-in"
        )
        + "; negative = URPE lower",
    }
    png = check.out / "fidelity_curves.png"
    order = [runs[(a, s)] for a in FIDELITY_ATTENTIONS for s in FIDELITY_SEEDS]
    check.run(
        "fidelity_plot",
        [
            *CLI,
            "plot",
            *map(str, order),
            "--compare",
            str(png),
        ],
        timeout=60,
    )
    check.keep_files.append(png)


# ---------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------


def pack(check: Check) -> list[str]:
    """``logs.tar.gz``: logs, benchmark JSON and the runs' small files."""
    tar_path = check.out / "logs.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        tar.add(check.logs, arcname="logs")
        runs = check.work / "runs"
        if runs.exists():
            for f in sorted(runs.rglob("*")):
                if f.is_file() and f.suffix in (".csv", ".json", ".png"):
                    tar.add(f, arcname=str(Path("runs") / f.relative_to(runs)))
    return [tar_path.name]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for the report and the packed outputs")
    p.add_argument("--work", default=None, help="folder for caches and runs (default: a temp dir)")
    p.add_argument("--data", default=None, help="data folder with zinc/ and pcqm4mv2-sample/")
    p.add_argument("--smoke", action="store_true", help="the whole check on the CPU, tiny budgets")
    p.add_argument("--budget", type=float, default=None, help="total seconds (480; smoke 115)")
    p.add_argument(
        "--sections",
        nargs="+",
        default=list(DEFAULT_SECTIONS),
        choices=SECTIONS,
        help="sections to run (default: all but compiled)",
    )
    p.add_argument("--copies", type=int, default=None, help="PCQM4Mv2 sample copies (101)")
    p.add_argument("--prepare", choices=["zinc", "pcqm"], default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    data = data_dir(args)
    if args.prepare:
        work = Path(args.work)
        os.environ.setdefault("GRAPHORMER_URPE_CACHE", str(work / "stores"))
        if args.prepare == "zinc":
            prepare_zinc(work, data, args.smoke)
        else:
            prepare_pcqm(work, data, args.copies, workers=1)
        return 0

    check = Check(args)
    copies = args.copies or (2 if args.smoke else 101)  # 1,999 x 101 = 201,899 molecules
    missing = [
        str(data / f)
        for f in ("zinc/train.csv", "zinc/val.csv", "pcqm4mv2-sample")
        if not (data / f).exists()
    ]
    base = [sys.executable, str(Path(__file__).resolve()), "--out", str(check.out)]
    base += ["--work", str(check.work), "--data", str(data)] + (["--smoke"] if args.smoke else [])
    if not missing:
        if "fidelity" in args.sections:
            check.start_background("zinc_cache", [*base, "--prepare", "zinc"])
        if "speed" in args.sections:
            check.start_background(
                "pcqm_cache", [*base, "--prepare", "pcqm", "--copies", str(copies)]
            )
    funcs = {
        "environment": section_environment,
        "correctness": section_correctness,
        "speed": section_speed,
        "fidelity": section_fidelity,
        "compiled": section_compiled,
    }
    try:
        for name in SECTIONS:
            if name not in args.sections:
                check.sections[name] = _skipped("not requested (--sections)")
            elif name == "compiled" and args.smoke:
                check.sections[name] = _skipped("compilation takes minutes on a CPU")
            elif name in ("speed", "fidelity", "compiled") and missing:
                check.sections[name] = _skipped(f"data not found: {', '.join(missing)}")
            else:
                if name in ("fidelity", "compiled"):
                    check.budgets.pop(name, None)
                check.run_section(name, lambda r, f=funcs[name]: f(check, r))
            if name == "environment" and name not in args.sections:
                section_environment(check, {})  # the other sections read it
    finally:
        check.stop_background()
    files = pack(check) + [f.name for f in check.keep_files]
    report = {
        "schema": SCHEMA,
        "smoke": bool(args.smoke),
        "budget_s": check.total,
        "seconds": round(time.monotonic() - check.start, 1),
        "device": check.env.get("gpu") or f"cpu ({platform.machine()})",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": [REPORT_NAME, *files],
        "sections": check.sections,
    }
    problems = validate_report(report)
    if problems:  # a bug in this script: say so in the report itself
        report["schema_problems"] = problems
    (check.out / REPORT_NAME).write_text(json.dumps(report, indent=2))
    if not args.work:
        shutil.rmtree(check.work, ignore_errors=True)
    statuses = {k: v["status"] for k, v in check.sections.items()}
    print(json.dumps({"report": str(check.out / REPORT_NAME), "sections": statuses}))
    return 0 if all(s in ("ok", "skipped") for s in statuses.values()) else 1


def _skipped(reason: str) -> dict:
    return {"status": "skipped", "error": reason, "seconds": 0.0, "budget_s": 0.0, "results": {}}


if __name__ == "__main__":
    sys.exit(main())
