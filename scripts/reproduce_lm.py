#!/usr/bin/env python
"""Compare positional schemes in a small Transformer-XL language model (several seeds).

The paper's third experiment (Luo et al., NeurIPS 2022) puts URPE into Transformer-XL on
WikiText-103 ("Transformer-XL base -> + URPE"). This script runs the same comparison at CPU
size on the embedded corpus (Python's documentation text, character level) by default:
Transformer-XL's relative attention (``xl``) against ``xl-urpe``, plus no PE, APE, the
scalar RPE and URPE, every scheme x seed, one run after the other, with the ``lm`` command's
``cpu-small`` preset. It writes into ``--out-dir``:

* one folder per run (``metrics.json``, ``curve.csv``, ``pe_tables.png``, checkpoints),
* ``results.json`` and ``results.md`` (one row per run and one per scheme: the mean and
  half-range over seeds of valid / test bits per character, or perplexity on word corpora,
  wall time, and how much validation improved over each run's last 1,000 updates),
* ``lm.png``: validation curves and the test score per scheme,

copies the table and figure to ``--table-md`` / ``--table-json`` / ``--figure`` when given,
and prints the results as JSON. Runs can be split over processes (``--schemes``) writing to
the same ``--out-dir``; a last call with ``--resume`` then reuses them all and writes the
table. Example (the set-up of ``docs/lm.md``)::

    python scripts/reproduce_lm.py --threads 1 --figure docs/figures/lm.png \
        --table-md docs/results/lm_results.md --table-json docs/results/lm_results.json
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _reproduce import add_output_flags, label_schemes, set_up

from graphormer_urpe.io.checkpoint import write_atomic
from graphormer_urpe.sequence import (
    LM_PE_SCHEMES,
    LM_PRESETS,
    lm_config,
    load_corpus,
    train_lm,
)
from graphormer_urpe.sequence.corpus import CORPORA
from graphormer_urpe.sequence.outputs import png_bytes

PE_SCHEMES = LM_PE_SCHEMES
SCHEME_LABELS = {
    "none": "no PE",
    "ape": "APE",
    "rpe": "RPE",
    "urpe": "URPE",
    "xl": "XL",
    "xl-urpe": "XL + URPE",
}
SCHEME_COLORS = {
    "none": "#7f7f7f",
    "ape": "#1f77b4",
    "rpe": "#ff7f0e",
    "urpe": "#2ca02c",
    "xl": "#9467bd",
    "xl-urpe": "#d62728",
}
#: Updates over which the convergence criterion looks back.
LOOKBACK = 1000

logger = logging.getLogger("reproduce_lm")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", choices=CORPORA, default="pydoc", help="corpus (default: pydoc)")
    p.add_argument("--data-root", default="data", help="WikiText folder root (default: data)")
    p.add_argument(
        "--schemes", nargs="+", choices=PE_SCHEMES, default=list(PE_SCHEMES), help="schemes"
    )
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2], help="seeds (default: 1 2)")
    p.add_argument("--preset", choices=sorted(LM_PRESETS), default="cpu-small", help="base preset")
    p.add_argument("--steps", type=int, help="updates per run (default: the preset's)")
    add_output_flags(p, "lm_repro", threads=1)
    p.add_argument("--table-md", type=Path, help="also write the Markdown table to this path")
    p.add_argument("--table-json", type=Path, help="also write results.json to this path")
    p.add_argument(
        "--resume",
        action="store_true",
        help="reuse finished runs with the same configuration; continue interrupted ones",
    )
    p.add_argument(
        "--collect",
        action="store_true",
        help="train nothing: tabulate the finished runs with the same configuration "
        "(and name the missing ones)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    return p.parse_args(argv)


def _unit(level: str) -> str:
    return "bpc" if level == "char" else "ppl"


def _score(loss: float, unit: str) -> float:
    return loss / math.log(2) if unit == "bpc" else math.exp(loss)


def _last_gain(evals: list[dict[str, Any]], unit: str) -> float | None:
    """Relative improvement of the validation score over the last ``LOOKBACK`` updates
    (``(s(T - LOOKBACK) - s(T)) / s(T - LOOKBACK)``), or ``None`` without an evaluation there."""
    by_step = {e["step"]: _score(e["valid_loss"], unit) for e in evals}
    last = max(by_step)
    if last - LOOKBACK not in by_step:
        return None
    before = by_step[last - LOOKBACK]
    return (before - by_step[last]) / before


def _summary(m: dict[str, Any], seed: int, run_dir: Path) -> dict[str, Any]:
    u = _unit(m["level"])
    return {
        "pe": m["pe"],
        "seed": seed,
        f"valid_{u}": m[f"valid_{u}"],
        f"test_{u}": m[f"test_{u}"],
        "valid_loss": m["valid_loss"],
        "test_loss": m["test_loss"],
        "best_step": m["best_step"],
        "steps": m["steps"],
        "wall_time_s": m["wall_time_s"],
        "num_parameters": m["num_parameters"],
        "last_1000_gain": _last_gain(m["evals"], u),
        "run_dir": str(run_dir),
    }


def _mean_spread(values: list[float]) -> tuple[float, float]:
    """Mean and half the range (the seed spread) of ``values``."""
    return statistics.fmean(values), (max(values) - min(values)) / 2


def _per_scheme(rows: list[dict[str, Any]], unit: str) -> list[dict[str, Any]]:
    out = []
    for pe in PE_SCHEMES:
        rs = [r for r in rows if r["pe"] == pe]
        if not rs:
            continue
        valid = _mean_spread([r[f"valid_{unit}"] for r in rs])
        test = _mean_spread([r[f"test_{unit}"] for r in rs])
        gains = [r["last_1000_gain"] for r in rs if r["last_1000_gain"] is not None]
        out.append(
            {
                "pe": pe,
                "seeds": [r["seed"] for r in rs],
                f"mean_valid_{unit}": valid[0],
                f"spread_valid_{unit}": valid[1],
                f"mean_test_{unit}": test[0],
                f"spread_test_{unit}": test[1],
                "median_wall_time_s": statistics.median(r["wall_time_s"] for r in rs),
                "num_parameters": rs[0]["num_parameters"],
                "max_last_1000_gain": max(gains) if gains else None,
            }
        )
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def _markdown(rows: list[dict[str, Any]], schemes: list[dict[str, Any]], unit: str) -> str:
    name = "bits per character" if unit == "bpc" else "perplexity"
    text = (
        f"Per scheme (mean ± half-range over seeds; {name}, lower is better; last column: the "
        f"largest relative improvement of validation {unit} over a run's last {LOOKBACK:,} "
        "updates):\n\n"
        f"| Scheme | Parameters | Valid {unit} | Test {unit} | Time per run (s) "
        f"| Gain over last {LOOKBACK:,} |\n"
        "|---|---:|---:|---:|---:|---:|\n"
    )
    for s in schemes:
        text += (
            f"| {SCHEME_LABELS[s['pe']]} | {s['num_parameters']:,} "
            f"| {s[f'mean_valid_{unit}']:.3f} ± {s[f'spread_valid_{unit}']:.3f} "
            f"| {s[f'mean_test_{unit}']:.3f} ± {s[f'spread_test_{unit}']:.3f} "
            f"| {s['median_wall_time_s']:.0f} | {_pct(s['max_last_1000_gain'])} |\n"
        )
    text += (
        f"\nPer run:\n\n| Scheme | Seed | Valid {unit} | Test {unit} | Best update | Updates "
        f"| Time (s) | Gain over last {LOOKBACK:,} |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    for r in rows:
        text += (
            f"| {SCHEME_LABELS[r['pe']]} | {r['seed']} | {r[f'valid_{unit}']:.3f} "
            f"| {r[f'test_{unit}']:.3f} | {r['best_step']:,} | {r['steps']:,} "
            f"| {r['wall_time_s']:.0f} | {_pct(r['last_1000_gain'])} |\n"
        )
    return text


def _figure(
    rows: list[dict[str, Any]], evals: dict[tuple[str, int], list[dict]], unit: str, title: str
) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted({r["seed"] for r in rows})
    styles = ["-", "--", ":", "-."]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4), layout="constrained")
    last = max(r["steps"] for r in rows)
    for ax, start in ((axes[0], 0), (axes[1], last // 2)):  # all updates; the second half
        for r in rows:
            ev = [e for e in evals[(r["pe"], r["seed"])] if e["step"] >= start]
            ax.plot(
                [e["step"] for e in ev],
                [_score(e["valid_loss"], unit) for e in ev],
                styles[seeds.index(r["seed"]) % len(styles)],
                marker="o",
                ms=2.5,
                color=SCHEME_COLORS[r["pe"]],
                label=f"{SCHEME_LABELS[r['pe']]} (seed {r['seed']})",
            )
        ax.set_xlabel("update")
        ax.set_ylabel(f"validation {unit}")
        ax.grid(alpha=0.3)
    axes[0].set_title(f"{title}: validation during training")
    axes[1].set_title(f"from update {last // 2:,} on")
    axes[0].legend(fontsize=7, ncol=2)
    ax = axes[2]
    schemes = [s for s in PE_SCHEMES if any(r["pe"] == s for r in rows)]
    for i, pe in enumerate(schemes):
        vals = [r[f"test_{unit}"] for r in rows if r["pe"] == pe]
        bar = ax.bar([i], [statistics.fmean(vals)], color=SCHEME_COLORS[pe], width=0.6)
        ax.bar_label(bar, fmt="%.3f", fontsize=8)
        ax.scatter([i] * len(vals), vals, color="k", s=10, zorder=3)
    lo = min(r[f"test_{unit}"] for r in rows)
    hi = max(r[f"test_{unit}"] for r in rows)
    ax.set_ylim(lo - 0.6 * (hi - lo + 0.05), hi + 0.3 * (hi - lo + 0.05))
    label_schemes(
        ax,
        [SCHEME_LABELS[s] for s in schemes],
        f"test {unit} (mean, dots: seeds)",
        f"{title}: test {unit} at the best validation",
        fontsize=8,
    )
    return png_bytes(fig)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    set_up(args)
    corpus = load_corpus(args.corpus, args.data_root)
    unit = _unit(corpus.level)

    rows: list[dict[str, Any]] = []
    evals: dict[tuple[str, int], list[dict]] = {}
    missing: list[dict[str, Any]] = []
    start = time.perf_counter()
    for seed in args.seeds:
        for pe in args.schemes:
            cfg = lm_config(
                args.preset,
                args.corpus,
                pe,
                steps=args.steps,
                seed=seed,
                data_root=args.data_root,
                vocab_size=len(corpus.vocab),
            )
            run_dir = args.out_dir / f"{args.corpus}_{pe}_s{seed}"
            metrics_path = run_dir / "metrics.json"
            metrics = None
            if (args.resume or args.collect) and metrics_path.exists():
                old = json.loads(metrics_path.read_text())
                if old.get("config") == json.loads(json.dumps(cfg.to_dict())):
                    logger.info("reusing %s", run_dir)
                    metrics = old
            if metrics is None and args.collect:
                logger.warning("no finished run in %s: left out", run_dir)
                missing.append({"pe": pe, "seed": seed})
                continue
            if metrics is None:
                interrupted = args.resume and not metrics_path.exists()
                metrics = train_lm(
                    cfg, run_dir, corpus=corpus, resume=interrupted, progress=not args.no_progress
                )
            rows.append(_summary(metrics, seed, run_dir))
            evals[(pe, seed)] = metrics["evals"]
    total = time.perf_counter() - start
    rows.sort(key=lambda r: (PE_SCHEMES.index(r["pe"]), r["seed"]))
    schemes = _per_scheme(rows, unit)

    result = {
        "corpus": args.corpus,
        "preset": args.preset,
        "unit": unit,
        "threads": args.threads,
        "total_wall_time_s": round(total, 1),
        "sum_of_run_times_s": round(sum(r["wall_time_s"] for r in rows), 1),
        "command": " ".join(["python", "scripts/reproduce_lm.py", *sys.argv[1:]])
        if argv is None
        else None,
        "schemes": schemes,
        "runs": rows,
        "missing_runs": missing,
    }
    table = _markdown(rows, schemes, unit)
    png = _figure(rows, evals, unit, args.corpus)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2) + "\n"
    write_atomic(args.out_dir / "results.json", text)
    write_atomic(args.out_dir / "results.md", table)
    write_atomic(args.out_dir / "lm.png", png)
    for path, data in ((args.figure, png), (args.table_md, table), (args.table_json, text)):
        if path is not None:
            write_atomic(path, data)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
