"""``predict --engine ray``: the run on a Ray cluster (its flags are ``predict``'s, in
:mod:`.predict`). Imported only when ``--engine ray`` is given, so plain ``predict`` never
imports Ray."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from .flags import flag_values

__all__ = ["run_predict_ray"]


def run_predict_ray(args: argparse.Namespace) -> int:
    """``predict --engine ray``: check the flags, run, print the summary line."""
    if not args.input:
        raise ValueError("--engine ray reads --input (a folder, a glob pattern or a file)")
    if not args.output:
        raise ValueError("--engine ray writes to --output, a folder")
    if args.embeddings and os.path.abspath(args.embeddings) != os.path.abspath(args.output):
        raise ValueError(
            "with --engine ray, --embeddings names the --output folder (each part's vectors "
            "go to part-NNNNN.npy beside it)"
        )
    if args.device not in (None, "auto", "cpu"):
        raise ValueError(
            "with --engine ray, --device is auto (GPUs where the cluster has them) or cpu"
        )
    from tqdm.auto import tqdm

    from ..inference.engines.predict_io import WriteCounts, interrupts_between_rows

    disable = None if not args.no_progress else True
    bar = tqdm(desc="predict (ray)", unit="mol", disable=disable, smoothing=0.1)
    # Ctrl-C and SIGTERM stop the run at once: the shard being written is dropped, the
    # complete ones stay in the manifest, and the same command goes on from there
    try:
        with bar, interrupts_between_rows(WriteCounts()):
            summary = _predict(args, bar.update)
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        exc.args = (
            f"{signal.Signals(signum).name}: stopped; the complete shards are kept in "
            f"{os.path.join(args.output, 'manifest.json')}, and the same command goes on "
            "from there",
        )
        raise
    skipped = summary["skipped_shards"]
    done = f" ({skipped} of {summary['shards']} shards complete from an earlier run)"
    print(
        f"graphormer-urpe: wrote {summary['rows']} rows to {args.output}"
        f"{done if skipped else ''}: {summary['rows'] - summary['failed']} molecules "
        f"predicted, {summary['failed']} could not be read, {summary['outside']} out of the "
        f"training domain; manifest {os.path.join(args.output, 'manifest.json')}",
        file=sys.stderr,
    )
    return 0


_RAY_OPTIONS = ("address", "smiles_column", "batch_size", "rows_per_block", "actors", "logits")
_RAY_OPTIONS += ("interval", "num_cpus", "object_store_mib", "featurize")
"""The flags ``predict --engine ray`` passes to
:func:`~graphormer_urpe.inference.engines.ray.engine.predict_on_ray` under their own names."""


def _predict(args: argparse.Namespace, progress) -> dict:
    from ..inference.engines.ray.engine import predict_on_ray

    return predict_on_ray(
        args.checkpoint,
        args.input,
        args.output,
        **flag_values(args, _RAY_OPTIONS),
        similarity=not args.no_similarity,
        embeddings=bool(args.embeddings),
        gpus=args.device != "cpu",
        progress=progress,
    )
