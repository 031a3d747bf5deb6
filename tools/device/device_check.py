"""One prepared check on one CUDA GPU: environment, correctness, speed, fidelity (compiled).

Run on a GPU machine (after ``bash tools/device/fetch_device_deps.sh`` on a machine with
network, see ``tools/device/device_run.sh``)::

    python tools/device/device_check.py --out OUT

and on the CPU, end to end at tiny sizes (no deadlines, so a busy machine only makes it
slower), to keep the script from rotting::

    python tools/device/device_check.py --smoke --out /tmp/check

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
  memory-mapped store of the sample replicated to 200,000+ molecules, with loader workers and
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
what is measured. Working files (dataset stores, runs) go to ``--work`` (a temporary folder
by default); ``--out`` receives at most 8 files: ``device_report.json``,
``fidelity_curves.png``, ``logs.tar.gz`` (every log, benchmark JSON, run history and config)
and the four runs' ``best.pt`` as ``best_<attention>_seed<k>.pt``.

The parts live in ``tools/device/_device_check/``: the report (``report``), the runner
(``runner``), data preparation (``data``) and one module per section; this file is the
command line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from _device_check.correctness import (
    CUDA_TEST_FILES,
    CUDA_TEST_PROCESSES,
    print_failures,
    section_correctness,
)
from _device_check.data import (
    data_dir,
    pcqm_smiles,
    prepare_pcqm,
    prepare_zinc,
    zinc_dataset_flag,
    zinc_tables,
)
from _device_check.environment import (
    BF16_PEAK,
    bf16_peak,
    device_precision,
    section_environment,
)
from _device_check.fidelity import (
    FIDELITY_ATTENTIONS,
    FIDELITY_RESERVE,
    FIDELITY_SEEDS,
    ZINC_PEAK_LR,
    ZINC_WARMUP_FRACTION,
    section_fidelity,
)
from _device_check.report import (
    DEFAULT_SECTIONS,
    REPORT_NAME,
    SCHEMA,
    SECTIONS,
    STATUSES,
    pack,
    skipped,
    validate_report,
    write_report,
)
from _device_check.runner import (
    CLI,
    GPU_BUDGETS,
    GPU_TOTAL,
    PACK_RESERVE,
    ROOT,
    SCRIPTS,
    SMOKE_BUDGETS,
    SMOKE_MODEL,
    SMOKE_TOTAL,
    Check,
    SectionTimeout,
    SkipSection,
)
from _device_check.speed import (
    E2E_MAX_SECONDS,
    SPEED_MODES,
    section_compiled,
    section_speed,
)

__all__ = [
    "BF16_PEAK",
    "CLI",
    "CUDA_TEST_FILES",
    "CUDA_TEST_PROCESSES",
    "DEFAULT_SECTIONS",
    "E2E_MAX_SECONDS",
    "FIDELITY_ATTENTIONS",
    "FIDELITY_RESERVE",
    "FIDELITY_SEEDS",
    "GPU_BUDGETS",
    "GPU_TOTAL",
    "PACK_RESERVE",
    "REPORT_NAME",
    "ROOT",
    "SCHEMA",
    "SCRIPTS",
    "SECTIONS",
    "SMOKE_BUDGETS",
    "SMOKE_MODEL",
    "SMOKE_TOTAL",
    "SPEED_MODES",
    "STATUSES",
    "ZINC_PEAK_LR",
    "ZINC_WARMUP_FRACTION",
    "Check",
    "SectionTimeout",
    "SkipSection",
    "bf16_peak",
    "data_dir",
    "device_precision",
    "main",
    "pack",
    "pcqm_smiles",
    "prepare_pcqm",
    "prepare_zinc",
    "section_compiled",
    "section_correctness",
    "section_environment",
    "section_fidelity",
    "section_speed",
    "validate_report",
    "zinc_dataset_flag",
    "zinc_tables",
]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for the report and the packed outputs")
    p.add_argument("--work", default=None, help="folder for stores and runs (default: a temp dir)")
    p.add_argument("--data", default=None, help="data folder with zinc/ and pcqm4mv2-sample/")
    p.add_argument("--smoke", action="store_true", help="the whole check on the CPU at tiny sizes")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="total seconds (560; smoke: no deadlines but a 1,800 s guard)",
    )
    p.add_argument(
        "--sections",
        nargs="+",
        default=list(DEFAULT_SECTIONS),
        choices=SECTIONS,
        help="sections to run (default: all but compiled)",
    )
    p.add_argument("--copies", type=int, default=None, help="PCQM4Mv2 sample copies (101)")
    p.add_argument("--prepare", choices=["zinc", "pcqm"], default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the requested sections and write the report; 0 when none failed or timed out."""
    args = _parser().parse_args(argv)
    data = data_dir(args)
    if args.prepare:
        work = Path(args.work)
        os.environ.setdefault("GRAPHORMER_URPE_STORE", str(work / "stores"))
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
                check.sections[name] = skipped("not requested (--sections)")
            elif name == "compiled" and args.smoke:
                check.sections[name] = skipped("compilation takes minutes on a CPU")
            elif name in ("speed", "fidelity", "compiled") and missing:
                check.sections[name] = skipped(f"data not found: {', '.join(missing)}")
            else:
                if name in ("fidelity", "compiled"):
                    check.budgets.pop(name, None)
                check.run_section(name, lambda r, f=funcs[name]: f(check, r))
            if name == "environment" and name not in args.sections:
                section_environment(check, {})  # the other sections read it
    finally:
        check.stop_background()
    report_path = write_report(check, args.smoke)
    if not args.work:
        shutil.rmtree(check.work, ignore_errors=True)
    statuses = {k: v["status"] for k, v in check.sections.items()}
    # last, so that the end of the output (what comes back from a GPU call) shows the causes
    correctness = check.sections.get("correctness", {}).get("results", {})
    print_failures(correctness.get("failure_reports", {}), chars=2000)
    print(json.dumps({"report": str(report_path), "sections": statuses}))
    return 0 if all(s in ("ok", "skipped") for s in statuses.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
