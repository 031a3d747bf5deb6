"""Training steps of this tree against an earlier commit, interleaved in one process (A/B).

A benchmark run in separate processes on a shared machine moves by 10-30% from run to run,
more than the change it is meant to show. Here the earlier commit's package is extracted
(``git archive``) under another name and imported beside this tree's, both models get the
same weights and the same batches, and blocks of steps alternate between them, so both see
the same machine. Prints JSON: median and minimum step times per side and their ratios
(``ratio`` > 1: this tree is faster). Run::

    python scripts/bench_ab.py --baseline 4617611
    python scripts/bench_ab.py --baseline HEAD~3 --preset pcqm4mv2-small --batch-size 32
    python scripts/bench_ab.py --baseline HEAD --smoke

CPU only: both sides run the eager step (forward, L1 loss, backward, fused AdamW) of
:func:`~graphormer_urpe.training.run.make_optimizer` on batches sized to their graphs.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch
from _bench import molecules, ogb_items, pyg_graphs, report

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "graphormer_urpe"


def import_commit(commit: str, dest: Path):
    """The package of ``commit`` imported as ``gu_<hash>`` from ``dest``."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", commit], cwd=ROOT, check=True, capture_output=True,
        text=True,
    ).stdout.strip()  # fmt: skip
    archive = dest / "pkg.tar"
    with open(archive, "wb") as fh:
        subprocess.run(["git", "archive", commit, PACKAGE], cwd=ROOT, check=True, stdout=fh)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    name = f"gu_{sha}"
    (dest / PACKAGE).rename(dest / name)  # its own imports are relative
    spec = importlib.util.spec_from_file_location(
        name, dest / name / "__init__.py", submodule_search_locations=[str(dest / name)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"{commit}: no package at {dest / name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its modules import it by name, relatively
    spec.loader.exec_module(module)
    return module, sha


def _side(pkg, cfg, attention: str, state: dict | None, graphs, bs: int):
    make_optimizer = importlib.import_module(f"{pkg.__name__}.training.run").make_optimizer
    model = pkg.Graphormer(cfg, attention=attention).train()
    if state is not None:
        model.load_state_dict(state)
    batches = [
        pkg.collate(graphs[i : i + bs], cfg.multi_hop_max_dist)
        for i in range(0, len(graphs) - bs + 1, bs)
    ]
    opt = make_optimizer(model.parameters(), 1e-4, 0.01)

    def step(batch) -> None:
        opt.zero_grad(set_to_none=True)
        loss = (model(batch).float() - batch.y).abs().mean()
        loss.backward()
        opt.step()

    return model, batches, step


def compare(a, old, attention: str, graphs) -> dict:
    """Interleaved step times of this tree's and the old package's model."""
    import graphormer_urpe as new

    cfg_new = new.graph.model.fit_tables(new.get_preset(a.preset), "ogb")
    cfg_old = old.graph.model.fit_tables(old.get_preset(a.preset), "ogb")
    torch.manual_seed(0)
    model, new_batches, new_step = _side(new, cfg_new, attention, None, graphs, a.batch_size)
    _, old_batches, old_step = _side(
        old, cfg_old, attention, model.state_dict(), graphs, a.batch_size
    )
    sides = {"this": (new_step, new_batches), "baseline": (old_step, old_batches)}
    for step, batches in sides.values():
        for b in batches[: a.warmup]:
            step(b)
    times: dict[str, list[float]] = {"this": [], "baseline": []}
    for block in range(a.blocks):
        order = ["this", "baseline"] if block % 2 else ["baseline", "this"]
        for name in order:
            step, batches = sides[name]
            for i in range(a.block_steps):
                b = batches[(block * a.block_steps + i) % len(batches)]
                start = time.perf_counter()
                step(b)
                times[name].append(time.perf_counter() - start)
    out: dict = {
        k: {"median_ms": round(1000 * statistics.median(v), 2), "min_ms": round(1000 * min(v), 2)}
        for k, v in times.items()
    }
    out["ratio_of_medians"] = round(
        out["baseline"]["median_ms"] / out["this"]["median_ms"], 3
    )  # > 1: this tree is faster
    out["ratio_of_minima"] = round(out["baseline"]["min_ms"] / out["this"]["min_ms"], 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, help="the commit to compare with")
    p.add_argument("--preset", default="zinc-slim")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--molecules", type=int, default=1024)
    p.add_argument("--blocks", type=int, default=10, help="alternations of the two sides")
    p.add_argument("--block-steps", type=int, default=4, help="steps per side and block")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--attention", nargs="+", default=["graphormer", "urpe"])
    p.add_argument("--smiles-file", default=None, help="molecules (default: ZINC or NCI)")
    p.add_argument("--smoke", action="store_true", help="tiny run that checks the script works")
    a = p.parse_args()
    if a.smoke:
        a.molecules, a.batch_size, a.blocks, a.block_steps, a.warmup = 16, 8, 2, 1, 1
    torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        old, sha = import_commit(a.baseline, Path(tmp))
        smiles, source, selection = molecules(a.molecules, a.smiles_file)
        graphs = pyg_graphs(ogb_items(smiles), 20)
        results = {att: compare(a, old, att, graphs) for att in a.attention}
    config = {
        "baseline": sha,
        "preset": a.preset,
        "batch_size": a.batch_size,
        "threads": a.threads,
        "blocks": a.blocks,
        "block_steps": a.block_steps,
        "molecules": len(graphs),
        "source": source,
        **selection,
        "note": "interleaved blocks of eager CPU training steps of both packages in one "
        "process, same weights and batches; ratio > 1: this tree is faster",
    }
    report("train_ab", config, results)


if __name__ == "__main__":
    main()
