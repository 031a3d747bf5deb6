"""Shared parts of the reproduction scripts (``reproduce_*.py``): their output flags, their
start-up and the labels of their per-scheme bar charts."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

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


def label_schemes(ax: Any, labels: list[str], ylabel: str, title: str, **tick_style: Any) -> None:
    """Label a bar chart with one group of bars per scheme: the schemes' ``labels`` under the
    groups (``tick_style``: e.g. ``fontsize``), the y axis, the title, a horizontal grid."""
    ax.set_xticks(range(len(labels)), labels, **tick_style)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
