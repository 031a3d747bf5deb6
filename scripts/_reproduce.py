"""Shared parts of the reproduction scripts (``reproduce_*.py``): their output flags and
their start-up."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch


def add_output_flags(p: argparse.ArgumentParser, name: str, threads: int) -> None:
    """Add ``--threads`` (default ``threads``), ``--out-dir`` (default ``runs/<name>``) and
    ``--figure``."""
    p.add_argument(
        "--threads", type=int, default=threads, help=f"torch intra-op threads (default: {threads})"
    )
    p.add_argument(
        "--out-dir",
        type=Path,
        default=Path("runs") / name,
        help=f"output folder (default: runs/{name})",
    )
    p.add_argument("--figure", type=Path, help="also write the figure to this path")


def set_up(args: argparse.Namespace) -> None:
    """Log INFO lines with their time and logger, and compute on ``args.threads`` threads."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
