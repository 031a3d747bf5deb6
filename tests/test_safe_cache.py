"""Processed dataset caches are read with weights_only=True only: crafted files never run."""

from __future__ import annotations

import builtins
import csv
from pathlib import Path

import pytest
import torch

from graphormer_urpe.datasets.smiles import SmilesCSVDataset

from .test_cli import SMILES


class _Payload:
    """Unpickling this runs ``exec`` (what a crafted cache file would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.fixture
def table(tmp_path) -> Path:
    path = tmp_path / "mols.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "y"])
        for s in SMILES[:12]:
            w.writerow([s, len(s)])
    return path


def _dataset(table: Path, root: Path) -> SmilesCSVDataset:
    return SmilesCSVDataset(root, table, target_columns=["y"], multi_hop_max_dist=3)


def test_crafted_processed_file_is_refused_without_running(table, tmp_path):
    root = tmp_path / "cache"
    ds = _dataset(table, root)
    data_file = Path(ds.processed_paths[0])
    marker = tmp_path / "ran"
    torch.save(_Payload(marker), data_file)
    with pytest.raises(ValueError, match="cannot be loaded safely") as err:
        _dataset(table, root)
    assert str(data_file) in str(err.value) and "\n" not in str(err.value)
    assert not marker.exists()


def test_crafted_pre_transform_record_makes_it_reprocess_without_running(table, tmp_path):
    root = tmp_path / "cache"
    first = _dataset(table, root)
    expected = [first[i].spatial_pos.clone() for i in range(len(first))]
    record = Path(first.processed_dir) / "pre_transform.pt"
    assert record.exists()
    marker = tmp_path / "ran"
    torch.save(_Payload(marker), record)
    again = _dataset(table, root)
    assert again.was_processed  # rebuilt instead of trusting the record
    assert not marker.exists()
    assert len(again) == len(expected)
    assert all(torch.equal(again[i].spatial_pos, e) for i, e in enumerate(expected))
    assert isinstance(torch.load(record, weights_only=True), str)  # a fresh, plain record


def test_intact_cache_is_reused(table, tmp_path):
    root = tmp_path / "cache"
    _dataset(table, root)
    again = _dataset(table, root)
    assert not again.was_processed
