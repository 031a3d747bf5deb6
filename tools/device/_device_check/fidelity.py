"""The ``fidelity`` section: Graphormer against URPE on the ZINC stand-in, two seeds each,
four ``graphormer-urpe train`` processes at once, steps fitted to the remaining budget."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from .data import data_dir, zinc_dataset_flag, zinc_tables
from .environment import device_precision
from .runner import CLI, SMOKE_MODEL, Check, SectionTimeout, kill, run_flags, tail

FIDELITY_ATTENTIONS = ("graphormer", "urpe")
FIDELITY_SEEDS = (1, 2)
ZINC_PEAK_LR = 2e-4  # Graphormer v1 on ZINC: peak lr 2e-4, 40k warm-up of 400k steps
ZINC_WARMUP_FRACTION = 40_000 / 400_000
FIDELITY_RESERVE = 25  # seconds the ZINC runs leave for plotting and packing at the latest


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
        *run_flags(dev, prec, 0 if check.smoke else 2, out),
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
            kill(proc)
            timed_out.append(name)
        log.close()
    if timed_out:
        raise SectionTimeout(f"{', '.join(timed_out)} did not finish in time")
    bad = [
        f"{name} exited with {proc.returncode}: {tail(check.logs / (name + '.log'), 3)}"
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
    """Graphormer and URPE x two seeds on the ZINC stand-in, equal steps fitted to the budget;
    each run's best valid MAE and URPE - Graphormer of the means."""
    dev, prec = device_precision()
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
    safety = None if check.smoke else check.remaining() - FIDELITY_RESERVE  # (smoke: sizes)
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
