"""The ``speed`` section (training steps per mode, the attention kernels, ``train`` end to end
from the replicated PCQM4Mv2 store) and the opt-in ``compiled`` section."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from typing import Any

from .data import data_dir, pcqm_smiles
from .environment import device_precision
from .runner import CLI, SCRIPTS, SMOKE_MODEL, Check, SectionTimeout, run_flags

SPEED_MODES = ("eager", "captured", "fused")  # bench_train.py --modes, in this order
E2E_MAX_SECONDS = 50  # the end-to-end run's --time-limit, counted from its launch


def _bench(check: Check, name: str, flags: list[str], timeout: float | None = None) -> dict:
    proc = check.run(name, [sys.executable, str(SCRIPTS / "bench_train.py"), *flags], timeout)
    report = json.loads(proc.stdout)
    (check.logs / f"{name}.json").write_text(json.dumps(report, indent=2))
    return report


def _speed_plan(check: Check) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """The benchmarked sizes (preset, its flags) and the flags common to every run."""
    dev, prec = device_precision()
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
    """Training steps at both sizes, the attention kernels, and ``train`` end to end (see
    ``tools/device/device_check.py``); one failing benchmark is recorded and the others go on."""
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
    # end to end from the memory-mapped store, data loading inside the figure
    try:
        dev, prec = device_precision()
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
    took 103-112 s at zinc-slim size, too long to share the default check's 560 s.
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
    """Whether Hugging Face's Graphormer imports, as the benchmarks see it
    (``scripts/_bench.py``'s ``hf_graphormer``, loaded from its file)."""
    spec = importlib.util.spec_from_file_location("_bench", SCRIPTS / "_bench.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no benchmark helpers at {SCRIPTS / '_bench.py'}")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench.hf_graphormer() is not None


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
    """``graphormer-urpe train`` on the replicated PCQM4Mv2 store: training graphs/s."""
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
        *run_flags(dev, prec, workers, run),
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
