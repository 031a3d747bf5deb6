"""scripts/pretrain_data.py: pretraining SMILES without any molecule of the evaluation data."""

from __future__ import annotations

import gzip
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture
def pretrain_data(monkeypatch):
    spec = importlib.util.spec_from_file_location("pretrain_data", SCRIPTS / "pretrain_data.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pretrain_data", module)  # worker processes find it
    spec.loader.exec_module(module)
    return module


def _exclude_folder(root: Path) -> Path:
    """A small folder in the shared data's formats: a MoleculeNet CSV, PCQM4Mv2's raw
    ``data.csv.gz``, ZINC CSV and ``.npz`` graphs, and files without molecules."""
    (root / "moleculenet").mkdir(parents=True)
    (root / "moleculenet" / "esol.csv").write_text(
        "smiles,log_solubility\nOCC,0.1\nC[C@H](N)C(=O)O,0.3\n[Na+].[O-]C(=O)c1ccccc1,1\n"
    )
    raw = root / "pcqm" / "pcqm4m-v2" / "raw"
    raw.mkdir(parents=True)
    with gzip.open(raw / "data.csv.gz", "wt") as f:
        f.write("idx,smiles,homolumogap\n0,c1ccncc1,5.1\n")
    (root / "pcqm" / "test_labels.csv").write_text("idx,split,homolumogap\n1,test-dev,4.4\n")
    (root / "zinc").mkdir()
    (root / "zinc" / "val.csv").write_text("smiles,y\nCC(C)=O,1.0\n")
    # ZINC graphs: CN (types C=0, N=2) and C=O (C=0, O=1, double bond)
    np.savez(
        root / "zinc" / "val_graphs.npz",
        x=np.array([0, 2, 0, 1]),
        edge_index=np.array([[0, 1, 0, 1], [1, 0, 1, 0]]),
        edge_attr=np.array([1, 1, 2, 2]),
        node_ptr=np.array([0, 2, 4]),
        edge_ptr=np.array([0, 2, 4]),
        y=np.zeros(2),
    )
    (root / "README.md").write_text("not data\n")
    return root


def test_molecules_of_the_exclude_folder_are_removed(pretrain_data, tmp_path):
    exclude = _exclude_folder(tmp_path / "shared")
    source = tmp_path / "train.csv.gz"
    kept = ["CCCC", "c1ccccc1", "CC(N)C(=O)N"]
    removed = [
        "C(C)O",  # ethanol, written otherwise
        "CC(N)C(=O)O",  # alanine without its stereo
        "OC(=O)c1ccccc1",  # the acid of a salt
        "n1ccccc1",  # PCQM4Mv2 raw data
        "CC(=O)C",  # ZINC CSV
        "NC",  # ZINC graph
        "C=O",  # ZINC graph
    ]
    with gzip.open(source, "wt") as f:
        f.write("SMILES\n" + "".join(f"{s}\n" for s in [*kept[:2], *removed, "xyz", kept[2]]))
    out = tmp_path / "out" / "pretrain.smi"
    report = pretrain_data.main(
        ["--source", str(source), "--exclude-dir", str(exclude), "--out", str(out)]
    )
    assert out.read_text().split() == kept
    assert report["removed"] == len(removed) and report["unreadable"] == 1
    assert report["written"] == 3 and report["source_rows"] == 11
    assert report["exclude_files"] == {
        "moleculenet/esol.csv": 3,
        "pcqm/pcqm4m-v2/raw/data.csv.gz": 1,
        "zinc/val.csv": 1,
        "zinc/val_graphs.npz": 2,
    }
    assert sorted(report["skipped_files"]) == ["README.md", "pcqm/test_labels.csv"]


def test_the_output_is_never_written_into_the_repository(pretrain_data, tmp_path):
    exclude = _exclude_folder(tmp_path / "shared")
    inside = SCRIPTS.parent / "data" / "x.smi"
    with pytest.raises(SystemExit, match="into the repository"):
        pretrain_data.main(["--exclude-dir", str(exclude), "--out", str(inside)])
    assert not inside.exists()


def test_parallel_filtering_gives_the_same_file(pretrain_data, tmp_path):
    source = [f"C{'C' * (i % 7)}O" for i in range(30)] + ["c1ccccc1"] * 3
    one, two = tmp_path / "one.smi", tmp_path / "two.smi"
    a = pretrain_data.filter_smiles(source, {"CCO"}, one, workers=1)
    b = pretrain_data.filter_smiles(source, {"CCO"}, two, workers=2)
    assert a == b and a["removed"] == 5 and one.read_text() == two.read_text()


def test_shared_data_molecules_are_found(pretrain_data, shared_copy):
    """The real shared folder (copied first): every ZINC graph decodes to its CSV molecule."""
    zinc = shared_copy("zinc")
    (zinc / "train.csv").unlink()  # 23k molecules: too slow for a unit test
    keys, per_file, _ = pretrain_data.exclusion_keys(zinc)
    assert per_file["val_graphs.npz"] == per_file["val.csv"] == 1_000
    graphs = pretrain_data.read_zinc_graphs(zinc / "val_graphs.npz")
    rows = pretrain_data.read_smiles(zinc / "val.csv")
    first = [pretrain_data.canonical_keys(s)[0] for s in (graphs[0], rows[0])]
    assert first[0] == first[1] and first[0] in keys
    assert len(keys) >= 990  # the same 1,000 molecules twice (a few stereoisomers merge)
