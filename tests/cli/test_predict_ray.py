"""``predict --engine ray`` on a local Ray cluster (2 CPUs, started once for the module).

Each part file must hold its input shard's rows in order, with the columns and cells of
local ``predict`` on that shard (the values within float rounding: the batches are cut from
other windows); an actor killed in the middle of a run is restarted by Ray and its batch run
again, every row still written exactly once; a re-run skips the complete shards; an address
that does not answer ends the command with one line and writes nothing.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import MIXED, VALID, input_files

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
psutil = pytest.importorskip("psutil")

from graphormer_urpe import cli  # noqa: E402
from graphormer_urpe.inference.engines.ray.engine import predict_on_ray  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster on this machine for the module's tests (started once: seconds)."""
    if ray.is_initialized():
        ray.shutdown()
    # ray.init installs SIGINT and SIGTERM handlers that outlive the cluster: the tests
    # after these ones get this process's own back
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=80 * 2**20,
        logging_level="warning",
        log_to_driver=False,
    )
    yield
    ray.shutdown()
    for sig, handler in kept.items():
        signal.signal(sig, handler)


def _local(domain_ckpt: Path, path: Path, folder: Path) -> list[list[str]]:
    """Local ``predict``'s CSV rows for one input file."""
    out = folder / f"local-{path.name}.csv"
    args = ["predict", "--checkpoint", str(domain_ckpt), "--input", str(path), "--output", str(out)]
    assert cli.main([*args, "--workers", "0", "--no-progress", "--device", "cpu"]) == 0
    return list(csv.reader(io.StringIO(out.read_text())))


def _same_rows(got: list[list[str]], want: list[list[str]], values: slice) -> None:
    """Equal rows, the value cells within float rounding."""
    assert got[0] == want[0] and len(got) == len(want)
    for g, w in zip(got[1:], want[1:], strict=True):
        assert g[: values.start] == w[: values.start] and g[values.stop :] == w[values.stop :]
        for a, b in zip(g[values], w[values], strict=True):
            assert (a == b == "") or abs(float(a) - float(b)) <= 1e-5 * (1 + abs(float(b)))


def test_every_format_gives_local_predicts_rows(cluster, domain_ckpt, tmp_path, capsys):
    inputs = input_files(tmp_path / "in", MIXED)
    inputs["smi"].unlink()  # a run's shards are all CSV / Parquet, or all one-SMILES-a-line
    (tmp_path / "in" / "e.csv").write_text("id,smiles\n")  # an empty shard
    out = tmp_path / "out"
    args = ["predict", "--engine", "ray", "--checkpoint", str(domain_ckpt), "--no-progress"]
    args += ["--input", str(tmp_path / "in"), "--output", str(out)]
    assert cli.main([*args, "--rows-per-block", "5", "--batch-size", "4"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    shards = sorted(p for p in (tmp_path / "in").iterdir())
    assert [s["input"] for s in manifest["shards"]] == [str(p) for p in shards]
    want = _local(domain_ckpt, inputs["csv"], tmp_path)  # every format holds the same rows
    for shard, path in zip(manifest["shards"], shards, strict=True):
        got = list(csv.reader(io.StringIO((out / shard["output"]).read_text())))
        if path.name == "e.csv":
            assert got == [manifest["columns"]] and shard["rows"] == 0
            continue
        assert shard["rows"] == len(MIXED) == len(got) - 1
        assert shard["failed"] == sum(r[-1] != "" for r in got[1:]) > 0
        _same_rows(got, want, slice(1, 3))
    err = capsys.readouterr().err
    rows = 3 * len(MIXED) if "parquet" in inputs else 2 * len(MIXED)
    assert f"wrote {rows} rows to {out}" in err and "could not be read" in err
    # a re-run finds every shard complete: nothing is run again, nothing rewritten
    stamps = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*")}
    assert cli.main([*args, "--rows-per-block", "5"]) == 0
    assert f"{len(shards)} of {len(shards)} shards complete" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("part-*")} == stamps


def _actors() -> list[psutil.Process]:
    """The processes of this cluster's Predictor actors."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "Predictor" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            continue
    return found


def test_a_killed_actor_is_retried_and_rows_are_written_once(cluster, domain_ckpt, tmp_path):
    smiles = [*MIXED, *VALID, *MIXED]
    folder = tmp_path / "in"
    folder.mkdir()
    for k in range(2):
        lines = "".join(f"{s}\tm{k}-{i}\n" if s else "\n" for i, s in enumerate(smiles))
        (folder / f"s{k}.smi").write_text(lines)
    killed: list[int] = []

    def kill_one(rows: int) -> None:  # after the first rows are written: mid-run
        if not killed:
            actors = _actors()
            assert actors, "no actor process found"
            os.kill(actors[0].pid, signal.SIGKILL)
            killed.append(actors[0].pid)

    out = tmp_path / "out"
    summary = predict_on_ray(
        domain_ckpt, folder, out, rows_per_block=4, batch_size=4, embeddings=True, progress=kill_one
    )
    assert killed and summary["rows"] == 2 * len(smiles)
    manifest = json.loads((out / "manifest.json").read_text())
    for k, shard in enumerate(manifest["shards"]):
        got = list(csv.reader(io.StringIO((out / shard["output"]).read_text())))
        assert [r[1] for r in got[1:]] == [f"m{k}-{i}" if s else "" for i, s in enumerate(smiles)]
        assert [r[0] for r in got[1:]] == smiles  # each row once, in order
        want = _local(domain_ckpt, folder / f"s{k}.smi", tmp_path)
        _same_rows(got, want, slice(2, 4))
        emb = np.load(out / shard["embeddings"])
        readable = np.array([r[-1] == "" for r in got[1:]])
        assert emb.shape == (len(smiles), 16)
        assert np.isfinite(emb[readable]).all() and np.isnan(emb[~readable]).all()
    # a shard whose part is gone is written again, the other one is left as it was
    (out / "part-00001.csv").unlink()
    before = (out / "part-00000.csv").stat().st_mtime_ns
    again = predict_on_ray(
        domain_ckpt, folder, out, rows_per_block=8, batch_size=4, embeddings=True
    )
    assert again["skipped_shards"] == 1 and again["rows"] == len(smiles)
    assert (out / "part-00000.csv").stat().st_mtime_ns == before
    assert (out / "part-00001.csv").read_text().count("\n") == len(smiles) + 1


@pytest.mark.parametrize("address", ["127.0.0.1:9", "ray://127.0.0.1:9"])
def test_an_unreachable_cluster_is_one_line_and_writes_nothing(
    domain_ckpt, tmp_path, capsys, address
):
    (tmp_path / "in.smi").write_text("CCO\n")
    out = tmp_path / "out"
    args = ["predict", "--engine", "ray", "--checkpoint", str(domain_ckpt), "--address", address]
    assert cli.main([*args, "--input", str(tmp_path / "in.smi"), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("graphormer-urpe: error: ")
    assert "127.0.0.1:9" in err[0] and not out.exists()
