"""The files a sequence run writes: its learning curve, its positional tables and its metrics.

``curve.csv`` has one row per update (validation columns empty between evaluations);
``pe_tables.png`` plots the learned ``B`` and ``C`` of each head against the offset ``j - i``
(RPE / URPE-style models only); ``metrics.json`` is the run's metrics. Each is written
atomically.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from ..io.checkpoint import write_atomic

if TYPE_CHECKING:
    from .training_loop import TrainingLoop

__all__ = ["curve_csv", "plot_positional_tables", "png_bytes", "write_run_files"]


def curve_csv(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """The curve rows as CSV text with a header of ``columns`` (``None`` written empty)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in columns})
    return buf.getvalue()


def plot_positional_tables(model: nn.Module, path: Path, title: str = "") -> bool:
    """Plot the learned ``B`` and ``C`` of each head against the relative offset ``j - i``.

    One panel for ``B`` (``model.rel_bias``) and one per distinct ``C`` table
    (``model.rel_scales``; one when shared across layers). Written atomically as PNG with the
    Agg backend.

    Returns:
        ``True`` if a figure was written, ``False`` when the model has no relative tables
        (``none`` / ``ape``).
    """
    tables: list[tuple[str, Any]] = []
    if model.rel_bias is not None:
        tables.append(("B (additive, inside softmax)", model.rel_bias))
    if model.rel_scales is not None:
        shared = len(model.rel_scales) == 1
        for i, t in enumerate(model.rel_scales):
            name = "C (multiplicative)" + ("" if shared else f", layer {i}")
            tables.append((name, t))
    if not tables:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, len(tables), figsize=(5.5 * len(tables), 3.6), squeeze=False, layout="constrained"
    )
    for ax, (name, table) in zip(axes[0], tables, strict=True):
        offsets, values = table.by_offset()  # [R], [H, R]
        for h in range(values.shape[0]):
            ax.plot(offsets.numpy(), values[h].numpy(), lw=1.0, label=f"head {h}")
        ax.set_xlabel("relative offset j - i")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, ncol=2)
    if title:
        fig.suptitle(title)
    write_atomic(path, png_bytes(fig))
    return True


def png_bytes(fig: Any) -> bytes:
    """A matplotlib figure as PNG bytes (110 dpi); the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def write_run_files(
    out: Path, loop: TrainingLoop, metrics: dict[str, Any], title: str, files: list[str]
) -> None:
    """Write ``curve.csv`` (the loop's rows), ``pe_tables.png`` (when its model has relative
    tables; ``title`` on top) and ``metrics.json`` into ``out``; ``metrics["files"]`` becomes
    ``files`` (the run's other files) with ``pe_tables.png`` when written. Logged to the
    loop's logger."""
    write_atomic(out / "curve.csv", curve_csv(loop.rows, loop.curve.columns))
    if plot_positional_tables(loop.model, out / "pe_tables.png", title=title):
        files.append("pe_tables.png")
    metrics["files"] = files
    write_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    loop.log.info("wrote %s to %s", ", ".join(files), out)
