"""Files a run writes are written whole: ``write_atomic``."""

from __future__ import annotations

import os
import stat

import pytest

from graphormer_urpe.io.checkpoint import write_atomic


def test_write_atomic_replaces_whole_files_with_a_normal_mode(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "metrics.json"
    write_atomic(path, '{"a": 1}')  # text as UTF-8, the folder made
    write_atomic(path, b'{"b": 2}')
    assert path.read_bytes() == b'{"b": 2}'
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask  # not mkstemp's 0600
    # a failure while writing leaves the old file and no temporary file behind
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "new")
    assert path.read_bytes() == b'{"b": 2}' and sorted(p.name for p in path.parent.iterdir()) == [
        "metrics.json"
    ]
