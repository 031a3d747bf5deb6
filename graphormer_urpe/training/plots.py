"""Plots of a training run: learning curves and the learned URPE ``C`` per head.

The ``C`` plot is the graph analogue of the paper's Figure 2: for every layer, one line per
head showing :math:`c_h[\\phi]` against shortest-path distance :math:`\\phi` (the last point
collects every longer or unreachable distance).
"""

from __future__ import annotations

import csv
import json
import logging
import math
from pathlib import Path

import torch

from ..io.checkpoint import load_checkpoint

__all__ = [
    "plot_run",
    "plot_curves",
    "plot_attn_scale",
    "plot_comparison",
    "pyplot",
    "save_figure",
]

log = logging.getLogger(__name__)


def pyplot():
    """Matplotlib's ``pyplot`` on the file-only Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path) -> None:
    """Write ``fig`` to the PNG ``path`` atomically (a temporary file, then renamed)."""
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    tmp.replace(path)


def _rows(history_csv: Path) -> list[dict[str, str]]:
    with open(history_csv) as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError(f"{history_csv} has no rows to plot")
    return rows


def plot_curves(history_csv: Path, out: Path) -> Path:
    """Training loss and validation metric per epoch → ``out`` (PNG)."""
    plt = pyplot()
    rows = _rows(history_csv)
    valid_key = next((k for k in rows[0] if k.startswith("valid_")), None)
    epochs = [int(r["epoch"]) for r in rows]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    ax[0].plot(epochs, [float(r["train_loss"]) for r in rows], marker=".")
    ax[0].set(xlabel="epoch", ylabel="train loss", title="training loss")
    if valid_key:
        pts = [(e, float(r[valid_key])) for e, r in zip(epochs, rows, strict=True) if r[valid_key]]
        ax[1].plot([p[0] for p in pts], [p[1] for p in pts], marker=".", color="C1")
        ax[1].set(xlabel="epoch", ylabel=valid_key, title=f"validation {valid_key[6:]}")
    for a in ax:
        a.grid(alpha=0.3)
    save_figure(fig, out)
    plt.close(fig)
    return out


def plot_attn_scale(checkpoint: Path, out: Path) -> Path | None:
    """Learned ``C`` per layer and head against shortest-path distance → ``out`` (PNG).

    Returns ``None`` (and writes nothing) for a model without URPE.
    """
    ckpt = load_checkpoint(checkpoint)
    scale = ckpt["model"].get("encoder.spatial_scale.scale")
    if scale is None:
        return None
    token = ckpt["model"]["encoder.spatial_scale.graph_token_scale"]  # [2, H]
    plt = pyplot()
    tables, buckets, heads = scale.shape
    dist = torch.arange(buckets - 1)  # row r holds distance r - 1; row 0 is padding
    cols = min(tables, 4)
    rows = math.ceil(tables / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), squeeze=False)
    for t in range(rows * cols):
        a = axes[t // cols][t % cols]
        if t >= tables:
            a.axis("off")
            continue
        for h in range(heads):
            a.plot(dist, scale[t, 1:, h].float(), marker=".", lw=1, label=f"head {h}")
        a.axhline(1.0, color="grey", lw=0.6, ls="--")
        a.set(title="shared" if tables == 1 else f"layer {t}", xlabel="shortest-path distance")
        a.set_ylabel("C")
        a.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6, ncol=2)
    fig.suptitle(
        f"learned URPE C per head (graph-token row {token[0].mean():.2f}, "
        f"column {token[1].mean():.2f} on average; last point = {buckets - 2}+ hops)"
    )
    fig.tight_layout()
    save_figure(fig, out)
    plt.close(fig)
    return out


def plot_comparison(run_dirs: list[str | Path], out: str | Path) -> Path:
    """Validation metric against training steps for several runs in one figure → ``out``.

    Each run is labelled by its attention kind, preset and seed (from ``config.json``).
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    key = None
    for run in map(Path, run_dirs):
        rows = _rows(run / "history.csv")
        key = next((k for k in rows[0] if k.startswith("valid_")), key)
        cfg = (
            json.loads((run / "config.json").read_text()) if (run / "config.json").exists() else {}
        )
        attention = cfg.get("model", {}).get("attention", "?")
        label = f"{attention} ({cfg.get('preset', run.name)}, seed {cfg.get('seed', '?')})"
        pts = [(int(r["step"]), float(r[key])) for r in rows if r.get(key)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=label)
    ax.set(xlabel="step", ylabel=key or "validation metric", title="validation curves")
    ax.grid(alpha=0.3)
    ax.legend()
    out = Path(out)
    save_figure(fig, out)
    plt.close(fig)
    return out


def plot_run(run_dir: str | Path) -> list[Path]:
    """Write ``curves.png`` and, for URPE models, ``attn_scale.png`` into ``run_dir``."""
    run = Path(run_dir)
    history = run / "history.csv"
    if not history.exists():
        raise FileNotFoundError(f"{history} not found: is {run} a training run folder?")
    written = [plot_curves(history, run / "curves.png")]
    ckpt = run / "best.pt" if (run / "best.pt").exists() else run / "last.pt"
    if ckpt.exists():
        scale = plot_attn_scale(ckpt, run / "attn_scale.png")
        if scale is not None:
            written.append(scale)
    else:
        log.warning("no checkpoint in %s: skipping the URPE plot", run)
    return written
