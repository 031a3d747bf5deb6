"""What a token budget does to the batches of real molecule sets: padding and the largest batch.

For each CSV, the first epoch's training batches of ``--batch-size`` graphs (today's
default) against those of a token budget (``--max-tokens``, by default the fixed batches'
median padded tokens, so both hold about the same work per batch). Per batching: batches
per epoch, graphs per batch, the largest padded-token count, the attention entries per head
and layer (``B x L^2`` for ``B`` graphs padded to attention length ``L``: what the
``[B, H, L, L]`` tensors of a step hold) of the largest and the median batch, and the
fraction of those entries that belong to real graphs. Lengths are counted on the static
shapes' grid, as a captured GPU step pads them. Prints JSON (and writes it with ``--out``)::

    python scripts/bench_token_budget.py --csv data/lipophilicity.csv --csv data/bace.csv:mol
    python scripts/bench_token_budget.py --smoke
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
from rdkit import Chem, RDLogger

from graphormer_urpe.graph.static_shapes import token_length
from graphormer_urpe.runtime.sampler import EpochBatchSampler


def atom_counts(path: str) -> tuple[str, np.ndarray]:
    """``PATH[:COLUMN]`` → the set's name and the heavy-atom count of every readable SMILES
    (column ``smiles`` by default)."""
    file, _, column = path.partition(":") if not Path(path).exists() else (path, "", "")
    frame = pd.read_csv(file)
    column = column or next(c for c in frame.columns if c.lower() == "smiles")
    RDLogger.DisableLog("rdApp.*")
    mols = (Chem.MolFromSmiles(str(s)) for s in frame[column])
    return f"{Path(file).parent.name}/{Path(file).stem}", np.array(
        [m.GetNumAtoms() for m in mols if m is not None]
    )


def batch_stats(sizes: np.ndarray, sampler: EpochBatchSampler) -> dict:
    """The first epoch's batches of ``sampler`` over graphs of ``sizes`` atoms."""
    batches = sampler.global_batches(0)
    lengths = [token_length(int(sizes[b].max())) for b in batches]
    entries = [len(b) * n * n for b, n in zip(batches, lengths, strict=True)]
    real = float(((sizes + 1) ** 2).sum())
    return {
        "batches": len(batches),
        "graphs_per_batch": round(len(sizes) / len(batches), 1),
        "largest_padded_tokens": max(len(b) * n for b, n in zip(batches, lengths, strict=True)),
        "largest_attention_entries": max(entries),
        "median_attention_entries": int(statistics.median(entries)),
        "real_entry_fraction": round(real / sum(entries), 3),
    }


def compare(name: str, sizes: np.ndarray, batch_size: int, max_tokens: int | None) -> dict:
    """Fixed batches against a token budget on one set."""
    fixed = EpochBatchSampler(len(sizes), batch_size, seed=1)
    if max_tokens is None:  # the fixed batches' median padded tokens
        tokens = [len(b) * token_length(int(sizes[b].max())) for b in fixed.global_batches(0)]
        max_tokens = int(statistics.median(tokens))
    budget = EpochBatchSampler(len(sizes), 1, seed=1, sizes=sizes, max_tokens=max_tokens,
                               length=token_length)  # fmt: skip
    return {
        "set": name,
        "graphs": len(sizes),
        "atoms_median": float(np.median(sizes)),
        "atoms_max": int(sizes.max()),
        "batch_size": batch_size,
        "max_tokens": max_tokens,
        "fixed": batch_stats(sizes, fixed),
        "token_budget": batch_stats(sizes, budget),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--csv", action="append", default=[], help="PATH[:SMILES_COLUMN], repeated")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--smoke", action="store_true", help="also random sizes (2,000 graphs)")
    p.add_argument("--threads", type=int, default=None, help="accepted as by the other scripts")
    p.add_argument("--out", default=None, help="also write the JSON here")
    a = p.parse_args()
    sets = [atom_counts(path) for path in a.csv]
    if a.smoke or not sets:
        sets.append(("random", np.random.default_rng(0).integers(5, 90, size=2000)))
    report = {
        "benchmark": "token_budget",
        "sets": [compare(name, sizes, a.batch_size, a.max_tokens) for name, sizes in sets],
    }
    text = json.dumps(report, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
