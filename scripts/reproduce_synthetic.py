#!/usr/bin/env python
"""Reproduce the paper's synthetic-task comparison (Luo et al., NeurIPS 2022, Figure 1).

Trains every combination of task (Position Identification, Even Token Prediction) x
positional scheme (none, APE, RPE, URPE) x vocabulary size, one run after the other, then
writes into ``--out-dir``:

* one folder per run (``metrics.json``, ``curve.csv``, ``pe_tables.png``),
* ``results.json`` and ``results.md`` (a Markdown table of validation accuracies),
* a figure in the style of the paper's Figure 1 (validation accuracy curves and final
  accuracy bars per scheme), also copied to ``--figure`` when given,

and prints the results as JSON on stdout.

Values that differ per task can be given as ``--steps 2000`` (every task) or
``--steps pi=2000 etp=8000``. Example (the CPU set-up of ``docs/synthetic.md``)::

    python scripts/reproduce_synthetic.py --threads 1 --figure docs/figures/synthetic.png
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

from _reproduce import add_output_flags, label_schemes, set_up

from graphormer_urpe.io.checkpoint import write_atomic
from graphormer_urpe.sequence import PE_SCHEMES, synthetic_config, train_synthetic
from graphormer_urpe.sequence.outputs import png_bytes

TASKS = ("pi", "etp")
TASK_TITLES = {"pi": "Position Identification", "etp": "Even Token Prediction"}
SCHEME_LABELS = {"none": "no PE", "ape": "APE", "rpe": "RPE", "urpe": "URPE"}
SCHEME_COLORS = {"none": "#7f7f7f", "ape": "#1f77b4", "rpe": "#ff7f0e", "urpe": "#2ca02c"}

logger = logging.getLogger("reproduce_synthetic")


def _per_task(values: list[str] | None, cast: type, name: str) -> dict[str, Any]:
    """Parse ``["2000"]`` or ``["pi=2000", "etp=8000"]`` into ``{task: value}``."""
    if not values:
        return {}
    out: dict[str, Any] = {}
    for item in values:
        if "=" in item:
            task, _, raw = item.partition("=")
            if task not in TASKS:
                raise SystemExit(f"--{name}: unknown task {task!r} in {item!r}")
            out[task] = cast(raw)
        else:
            for task in TASKS:
                out[task] = cast(item)
    return out


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS), help="tasks to run")
    p.add_argument(
        "--schemes", nargs="+", choices=PE_SCHEMES, default=list(PE_SCHEMES), help="schemes"
    )
    p.add_argument(
        "--vocabs",
        nargs="+",
        type=int,
        default=[1000],
        help="vocabulary sizes V (the paper: 1000 10000)",
    )
    p.add_argument("--preset", choices=("cpu", "paper"), default="cpu", help="base preset")
    per_task = "; one value or TASK=VALUE per task"
    p.add_argument("--steps", nargs="+", help="updates per run" + per_task)
    p.add_argument("--length", nargs="+", help="sequence length L" + per_task)
    p.add_argument("--lr", nargs="+", help="peak learning rate" + per_task)
    p.add_argument("--batch-size", nargs="+", help="sequences per update" + per_task)
    p.add_argument("--width", type=int, help="model width (default: the preset's)")
    p.add_argument("--layers", type=int, help="encoder layers (default: the preset's)")
    p.add_argument("--heads", type=int, help="attention heads (default: the preset's)")
    p.add_argument("--seed", type=int, default=1, help="seed of every run (default: 1)")
    add_output_flags(p, "synthetic_repro", threads=2)
    p.add_argument(
        "--resume",
        action="store_true",
        help="reuse runs whose metrics.json already holds the same configuration",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    return p.parse_args(argv)


def _summary(m: dict[str, Any]) -> dict[str, Any]:
    cfg = m["config"]
    return {
        "task": m["task"],
        "pe": m["pe"],
        "vocab": m["vocab"],
        "length": m["length"],
        "steps": m["steps"],
        "batch_size": cfg["batch_size"],
        "lr": cfg["lr"],
        "valid_accuracy": m["valid_accuracy"],
        "best_valid_accuracy": m["best_valid_accuracy"],
        "steps_to_99": m["steps_to_99"],
        "position_blind_accuracy": m["position_blind_accuracy"],
        "wall_time_s": m["wall_time_s"],
        "num_parameters": m["num_parameters"],
        "run_dir": m.get("run_dir"),
    }


def _markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| Task | L | V | Scheme | Valid acc. (final) | Best | Updates to 99% "
        "| Position-blind bound | Updates | Time (s) |\n"
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in rows:
        to99 = "—" if r["steps_to_99"] is None else f"{r['steps_to_99']:,}"
        lines.append(
            f"| {r['task'].upper()} | {r['length']} | {r['vocab']:,} | {SCHEME_LABELS[r['pe']]} "
            f"| {100 * r['valid_accuracy']:.2f}% | {100 * r['best_valid_accuracy']:.2f}% "
            f"| {to99} | {100 * r['position_blind_accuracy']:.2f}% | {r['steps']:,} "
            f"| {r['wall_time_s']:.0f} |"
        )
    return head + "\n".join(lines) + "\n"


def _figure(rows: list[dict[str, Any]], evals: dict[tuple, list[dict]], tasks: list[str]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    vocabs = sorted({r["vocab"] for r in rows})
    styles = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(
        2, len(tasks), figsize=(5.2 * len(tasks), 6.6), squeeze=False, layout="constrained"
    )
    for col, task in enumerate(tasks):
        task_rows = [r for r in rows if r["task"] == task]
        if not task_rows:
            continue
        length = task_rows[0]["length"]
        ax = axes[0][col]
        for r in task_rows:
            ev = evals[(r["task"], r["pe"], r["vocab"])]
            ls = styles[vocabs.index(r["vocab"]) % len(styles)]
            label = SCHEME_LABELS[r["pe"]] + (f" (V={r['vocab']:,})" if len(vocabs) > 1 else "")
            ax.plot(
                [e["step"] for e in ev],
                [100 * e["valid_accuracy"] for e in ev],
                ls,
                marker="o",
                ms=2.5,
                color=SCHEME_COLORS[r["pe"]],
                label=label,
            )
        ax.axhline(
            100 * task_rows[0]["position_blind_accuracy"],
            color="k",
            lw=0.8,
            ls=":",
            label="position-blind bound",
        )
        ax.set_title(f"{TASK_TITLES[task]} (L={length})")
        ax.set_xlabel("update")
        ax.set_ylabel("validation accuracy (%)")
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)

        ax = axes[1][col]
        schemes = [s for s in PE_SCHEMES if any(r["pe"] == s for r in task_rows)]
        width = 0.8 / len(vocabs)
        for k, vocab in enumerate(vocabs):
            xs, hs, cs = [], [], []
            for i, s in enumerate(schemes):
                match = [r for r in task_rows if r["pe"] == s and r["vocab"] == vocab]
                if match:
                    xs.append(i + (k - (len(vocabs) - 1) / 2) * width)
                    hs.append(100 * match[0]["valid_accuracy"])
                    cs.append(SCHEME_COLORS[s])
            bars = ax.bar(xs, hs, width=width * 0.95, color=cs, alpha=1.0 - 0.35 * k)
            ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_ylim(0, 110)
        vs = ", ".join(f"{v:,}" for v in vocabs)
        labels = [SCHEME_LABELS[s] for s in schemes]
        title = f"{task.upper()}: after the last update (V = {vs})"
        label_schemes(ax, labels, "final validation accuracy (%)", title)
    return png_bytes(fig)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    set_up(args)
    steps = _per_task(args.steps, int, "steps")
    length = _per_task(args.length, int, "length")
    lr = _per_task(args.lr, float, "lr")
    batch = _per_task(args.batch_size, int, "batch-size")

    rows: list[dict[str, Any]] = []
    evals: dict[tuple, list[dict]] = {}
    start = time.perf_counter()
    for vocab in args.vocabs:
        for task in args.tasks:
            for pe in args.schemes:
                cfg = synthetic_config(
                    args.preset,
                    task,
                    pe,
                    vocab=vocab,
                    steps=steps.get(task),
                    max_len=length.get(task),
                    lr=lr.get(task),
                    batch_size=batch.get(task),
                    width=args.width,
                    layers=args.layers,
                    heads=args.heads,
                    seed=args.seed,
                )
                run_dir = args.out_dir / f"{task}_{pe}_v{vocab}"
                metrics_path = run_dir / "metrics.json"
                metrics = None
                if args.resume and metrics_path.exists():
                    old = json.loads(metrics_path.read_text())
                    if old.get("config") == json.loads(json.dumps(cfg.to_dict())):
                        logger.info("reusing %s", run_dir)
                        metrics = old
                if metrics is None:
                    metrics = train_synthetic(cfg, run_dir, progress=not args.no_progress)
                metrics["run_dir"] = str(run_dir)
                rows.append(_summary(metrics))
                evals[(task, pe, vocab)] = metrics["evals"]
    total = time.perf_counter() - start

    result = {
        "preset": args.preset,
        "threads": args.threads,
        "total_wall_time_s": round(total, 1),
        "command": " ".join(["python", "scripts/reproduce_synthetic.py", *sys.argv[1:]])
        if argv is None
        else None,
        "runs": rows,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out_dir / "results.json", json.dumps(result, indent=2) + "\n")
    write_atomic(args.out_dir / "results.md", _markdown(rows))
    png = _figure(rows, evals, [t for t in TASKS if t in args.tasks])
    write_atomic(args.out_dir / "synthetic.png", png)
    if args.figure is not None:
        write_atomic(args.figure, png)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
