"""The ``calibrate`` sub-command: build a checkpoint's calibrator from a CSV with targets."""

from __future__ import annotations

import argparse

from .flags import add_command, add_shared_flags, positive_int, print_json


def run_calibrate(args: argparse.Namespace) -> int:
    """calibrate a checkpoint's intervals and probabilities on a CSV with targets

    Predict the molecules of --input (molecules the model did not train on, with a value
    per target) and keep, beside the checkpoint (an ensemble: in its folder), what predict
    --interval needs: the sorted conformal scores (regression) or a temperature per task
    (binary). Runs trained with this version keep one from their validation split already;
    this serves older runs, or a recalibration on molecules closer to those predicted. Prints
    the molecules used and the coverage and width (binary: ECE) on them."""
    import torch

    from ..inference.calibrate_csv import calibrate_from_csv

    torch.set_num_threads(args.threads or 1)
    summary = calibrate_from_csv(
        args.checkpoint,
        args.input,
        args.target_columns,
        args.smiles_column or "smiles",
        args.device or "auto",
        args.workers,
        args.batch_size or 64,
    )
    return print_json(summary)


def add_calibrate_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe calibrate`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "calibrate", run_calibrate)
    checkpoint = {"help": "a best.pt or last.pt file, or the folder of a train --ensemble run"}
    add_shared_flags(p, "--checkpoint", checkpoint=checkpoint)
    p.add_argument("--input", required=True, help="CSV with a SMILES column and the targets")
    targets = "the CSV's column for each of the model's targets, in the model's order"
    add_shared_flags(
        p,
        "--target-columns",
        "--smiles-column",
        "--batch-size",
        "--device",
        target_columns={"required": True, "help": targets},
    )
    p.add_argument(
        "--workers", type=int, default=0, help="featurisation processes (default 0: none)"
    )
    p.add_argument("--threads", type=positive_int, help="CPU threads for the model (default 1)")
