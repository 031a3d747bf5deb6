"""A run's per-epoch history: ``history.csv`` (and TensorBoard events when installed)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from ..io.checkpoint import write_atomic

__all__ = ["History"]


class History:
    """Per-epoch metric rows: CSV (rewritten atomically) and TensorBoard when installed."""

    def __init__(self, out: Path, rows: list[dict[str, Any]], write: bool = True) -> None:
        self.path = out / "history.csv"
        self.rows = rows
        self.write = write
        self.tb = None
        if not write:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out / "tensorboard"))
        except Exception:  # tensorboard is optional
            self.tb = None

    def add(self, row: dict[str, Any]) -> None:
        """Append ``row``; a row of the same epoch as the last one (an epoch cut short by
        ``--time-limit`` and finished after ``--resume``) replaces it, so that each epoch has
        one row."""
        if self.rows and int(self.rows[-1]["epoch"]) == int(row["epoch"]):
            self.rows[-1] = row
        else:
            self.rows.append(row)
        if not self.write:
            return
        keys: list[str] = []
        for r in self.rows:
            keys.extend(k for k in r if k not in keys)
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=keys)
        writer.writeheader()
        writer.writerows(self.rows)
        write_atomic(self.path, buf.getvalue())
        if self.tb is not None:
            for k, v in row.items():
                if k not in ("epoch", "step") and isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, row["step"])
            self.tb.flush()

    def close(self) -> None:
        """Close the TensorBoard writer (the CSV is complete after every :meth:`add`)."""
        if self.tb is not None:
            self.tb.close()
