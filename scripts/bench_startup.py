"""Benchmark the start-up of the ``graphormer-urpe`` command: what one call costs a script.

Prints JSON. Each command runs ``--repeats`` times (5 by default), each time as a fresh
process (``python -m graphormer_urpe.cli ...``, this checkout first on ``PYTHONPATH``), and
the report gives every run's wall time, the median, and the CPU time (user + system) of the
process and its children:

* ``help``: ``graphormer-urpe --help`` (argument parsing only);
* ``predict``: ``graphormer-urpe predict --checkpoint CKPT --smiles CCO`` with an untrained
  checkpoint of the ``small`` preset (OGB features, URPE) that records a training domain of
  10,000 fingerprints (the most a record keeps), built first in a temporary folder;
* ``train``: ``graphormer-urpe train --max-steps 1`` on the default dataset (the embedded NCI
  molecules), into a temporary folder; its dataset store is built once, untimed, before the
  timed runs (``--store-dir`` in the temporary folder);
* ``torch``: ``python -c "import torch"``, the floor under ``predict`` on this machine at this
  moment (a reference: not a command of the package, measured for this checkout only).

For each command one more, untimed, run under ``python -X importtime`` records which heavy
modules the command imported (``imported``: torch, torch._dynamo, torch_geometric, triton,
pandas, ...) and how long importing each of them took as the command first imported it
(``import_ms``, cumulative: a module's time includes what it imported; ``import_total_ms``:
all imports together, a little inflated by ``-X importtime`` itself).

``--baseline REV`` measures commit ``REV`` too (``git worktree add`` into the temporary
folder), alternating its runs with this checkout's so that the drift of a shared machine
tilts neither; the report then has ``baseline`` and ``ratio`` (baseline median / this
median) per command. ``--smoke``: one run of ``help`` and ``predict`` (no ``train``, no
``torch``), to check that the script works. Run::

    python scripts/bench_startup.py
    python scripts/bench_startup.py --baseline 073d327
    python scripts/bench_startup.py --commands help predict --repeats 9
    python scripts/bench_startup.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import report, untrained_checkpoint

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ("help", "predict", "train", "torch")
HEAVY = (
    "torch",
    "torch._dynamo",
    "torch._inductor",
    "torch_geometric",
    "triton",
    "transformers",
    "pandas",
    "scipy",
    "sklearn",
    "ogb",
    "rdkit.Chem",
    "numpy",
    "matplotlib",
    "sympy",
    "networkx",
)
"""The modules whose import the report follows (each costs 0.1 s to seconds)."""

# Runs the command as ``python -m graphormer_urpe.cli`` would, and writes the heavy modules
# it imported (at exit, whatever the exit status, and however it exits: predict ends with
# os._exit) to the file named by the first argument.
_PROBE = """
import atexit, json, os, runpy, sys
out, heavy = sys.argv[1], {heavy!r}
record = lambda: open(out, "w").write(json.dumps([m for m in heavy if m in sys.modules]))
atexit.register(record)
exit_now = os._exit
os._exit = lambda code: (record(), exit_now(code))
sys.argv = ["graphormer-urpe", *sys.argv[2:]]
runpy.run_module("graphormer_urpe.cli", run_name="__main__", alter_sys=True)
"""


def build_checkpoint(path: Path) -> None:
    """An untrained ``small`` checkpoint (OGB featuriser, one regression target, URPE) with a
    training-domain record as big as records get: 10,000 fingerprints (RDKit's 5,000 NCI
    molecules twice), which ``predict`` loads and searches as for a trained checkpoint."""
    from graphormer_urpe.datasets.domain import FINGERPRINT_CAP, record_of_smiles
    from graphormer_urpe.datasets.sources.nci import read_nci_smiles

    smiles = read_nci_smiles()
    smiles = (smiles * (FINGERPRINT_CAP // len(smiles) + 1))[:FINGERPRINT_CAP]
    domain = record_of_smiles(smiles).to_dict()
    untrained_checkpoint(path, "small", domain, attention="urpe")


def cli_args(name: str, work: Path, ckpt: Path, run: str) -> list[str]:
    """The ``graphormer-urpe`` arguments of command ``name`` (``train`` writes to
    ``work/runs/RUN``)."""
    if name == "help":
        return ["--help"]
    if name == "predict":
        return ["predict", "--checkpoint", str(ckpt), "--smiles", "CCO", "--no-progress"]
    out, cache = work / "runs" / run, work / "cache"
    return ["train", "--max-steps", "1", "--out", str(out), "--store-dir", str(cache)] + [
        "--no-progress"
    ]


def interpreter_args(name: str, work: Path, ckpt: Path, run: str) -> list[str]:
    """What ``python`` runs for command ``name``: ``-m graphormer_urpe.cli ARGS``, or
    ``-c "import torch"`` for the reference ``torch``."""
    if name == "torch":
        return ["-c", "import torch"]
    return ["-m", "graphormer_urpe.cli", *cli_args(name, work, ckpt, run)]


def timed(args: list[str], env: dict[str, str], cwd: Path) -> dict:
    """One fresh ``python ARGS``: wall and CPU seconds (the process and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}


def parse_importtime(text: str) -> tuple[dict[str, float], float]:
    """``(ms per followed module, ms of all imports)`` from ``-X importtime`` lines."""
    ms: dict[str, float] = {}
    total = 0.0
    for line in text.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
        if not cumulative.isdigit():  # the header line
            continue
        raw = line.split("|")[-1]
        if raw.startswith(" ") and not raw.startswith("  "):  # one space: a top-level import
            total += int(cumulative) / 1000
        if name in HEAVY and name not in ms:
            ms[name] = round(int(cumulative) / 1000, 1)
    return ms, round(total, 1)


def probe(args: list[str], env: dict[str, str], cwd: Path) -> dict:
    """Which heavy modules ``graphormer-urpe ARGS`` imports, and the import times
    (``-X importtime``)."""
    with tempfile.NamedTemporaryFile("r", suffix=".json", dir=cwd) as out:
        code = _PROBE.format(heavy=HEAVY)
        cmd = [sys.executable, "-X", "importtime", "-c", code, out.name, *args]
        proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False)
        imported = json.loads(out.read() or "null")
    if imported is None:
        raise RuntimeError(f"{' '.join(args)} failed under the probe:\n{proc.stderr[-3000:]}")
    ms, total = parse_importtime(proc.stderr)
    return {"imported": imported, "import_ms": ms, "import_total_ms": total}


def summary(runs: list[dict]) -> dict:
    """Median wall and CPU seconds of ``runs``, and the runs themselves."""
    return {
        "median_wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
        "median_cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 3),
        "wall_s": [r["wall_s"] for r in runs],
        "cpu_s": [r["cpu_s"] for r in runs],
    }


def worktree(rev: str, work: Path) -> Path:
    """Commit ``rev`` checked out in ``work`` (detached worktree)."""
    tree = work / f"rev-{rev}"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev],
        check=True,
        capture_output=True,
    )
    return tree


def environment(tree: Path) -> dict[str, str]:
    """The environment of a run of the code in ``tree`` (first on ``PYTHONPATH``)."""
    path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def main() -> None:
    """Measure the commands and print the JSON report."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commands", nargs="+", choices=COMMANDS, default=None)
    p.add_argument("--repeats", type=int, default=None, help="timed runs per command (5)")
    p.add_argument("--baseline", default=None, metavar="REV", help="also measure this commit")
    p.add_argument("--smoke", action="store_true", help="one run of help and predict")
    a = p.parse_args()
    commands = a.commands or (["help", "predict"] if a.smoke else list(COMMANDS))
    commands = [c for c in COMMANDS if c in commands]  # torch, the reference, last
    repeats = a.repeats or (1 if a.smoke else 5)

    load = [os.getloadavg()[0]]
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        work = Path(tmp)
        ckpt = work / "small.pt"
        build_checkpoint(ckpt)
        trees = {"this": REPO}
        if a.baseline:
            trees["baseline"] = worktree(a.baseline, work)
        envs = {who: environment(tree) for who, tree in trees.items()}
        try:
            for name in commands:
                if name == "train":  # the dataset store, built once and untimed
                    timed(interpreter_args(name, work, ckpt, "store"), envs["this"], work)
                whose = ["this"] if name == "torch" else list(trees)
                runs: dict[str, list[dict]] = {who: [] for who in whose}
                for k in range(repeats):
                    order = whose if k % 2 == 0 else whose[::-1]
                    for who in order:
                        args = interpreter_args(name, work, ckpt, f"{who}-{k}")
                        runs[who].append(timed(args, envs[who], work))
                        print(f"{name} {who} {runs[who][-1]}", file=sys.stderr)
                entry: dict = {}
                for who in whose:
                    entry[who] = summary(runs[who])
                    if name != "torch":
                        args = cli_args(name, work, ckpt, f"{who}-probe")
                        entry[who].update(probe(args, envs[who], work))
                if "baseline" in entry:
                    base, this = entry["baseline"], entry["this"]
                    entry["ratio"] = round(base["median_wall_s"] / this["median_wall_s"], 2)
                    entry = {"this": this, "baseline": base, "ratio": entry["ratio"]}
                results[name] = entry if "baseline" in entry else entry["this"]
        finally:
            if a.baseline:
                remove = ["git", "-C", str(REPO), "worktree", "remove", "--force"]
                subprocess.run([*remove, str(trees["baseline"])], check=False, capture_output=True)
    load.append(os.getloadavg()[0])
    config = {
        "commands": commands,
        "repeats": repeats,
        "baseline": a.baseline,
        "checkpoint": "small preset, untrained, OGB features, URPE, 1 target, a domain record "
        "of 10,000 fingerprints",
        "load_average_1min_start_end": [round(x, 2) for x in load],
    }
    report("startup", config, results)


if __name__ == "__main__":
    main()
