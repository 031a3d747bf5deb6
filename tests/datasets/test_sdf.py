"""SD files: ``train --dataset sdf:FILE.sdf[.gz]`` (targets from SD properties, the title in
``name``), ``predict --input FILE.sdf[.gz]``, a record RDKit cannot read kept with its reason,
and records read lazily."""

from __future__ import annotations

import tracemalloc

import pytest
from rdkit import Chem

from graphormer_urpe.datasets.sources.sdf import iter_sdf_molecules, read_sdf
from graphormer_urpe.datasets.sources.sdf_blocks import iter_sdf_blocks, sdf_properties, sdf_title
from tests.helpers import BROKEN, SMILES, write_sdf

"""The record of the fixtures that RDKit cannot read (a carbon with five bonds)."""


VALID = [s for s in SMILES if Chem.MolFromSmiles(s) is not None]


def test_records_are_read_with_their_properties_and_titles(tmp_path):
    path = tmp_path / "ligands.sdf"
    titles = write_sdf(path, VALID[:6])
    blocks = list(iter_sdf_blocks(path))
    assert [sdf_title(b) for b in blocks] == titles
    props = sdf_properties(blocks[0])
    assert props == {"pIC50": str(Chem.MolFromSmiles(VALID[0]).GetNumHeavyAtoms()), "series": "S0"}
    records = read_sdf(path, ["pIC50"])
    assert records.rows.tolist() == [i for i in range(6) if i != BROKEN]
    assert records.smiles[0] == Chem.MolToSmiles(Chem.MolFromSmiles(VALID[0]))
    assert records.targets[:, 0].tolist() == [
        Chem.MolFromSmiles(VALID[i]).GetNumHeavyAtoms() for i in range(6) if i != BROKEN
    ]
    (failure,) = records.skipped
    assert failure.index == BROKEN and "valence" in failure.reason.lower()


def test_a_missing_property_or_a_bad_value_names_the_record(tmp_path):
    path = tmp_path / "ligands.sdf"
    write_sdf(path, VALID[:4], broken=None)
    with pytest.raises(ValueError, match=r"column\(s\) \['pKi'\] not found.*pIC50"):
        read_sdf(path, ["pKi"])
    with pytest.raises(ValueError, match="record 0: target column 'series' holds 'S0'"):
        read_sdf(path, ["series"])


def test_records_are_read_one_at_a_time(tmp_path):
    """Memory stays flat: reading the first records of a large file holds a few records, not
    the file (a size bound, measured with tracemalloc)."""
    path = tmp_path / "big.sdf"
    write_sdf(path, [VALID[k % len(VALID)] for k in range(3000)], broken=None)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        seen = 0
        for smiles, _, error in iter_sdf_molecules(path):
            assert error is None and smiles
            seen += 1
            if seen == 2000:
                break
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seen == 2000 and peak < size / 20


def test_an_sd_store_lives_under_sdf_and_an_older_csv_one_is_still_read(tmp_path, store_dir):
    from graphormer_urpe.datasets import load_dataset

    path = tmp_path / "ligands.sdf"
    write_sdf(path, VALID)
    splits = load_dataset(f"sdf:{path}", target_columns=["pIC50"])
    assert splits.name == f"sdf:{path}"
    (folder,) = [f for f in (store_dir / "sdf").iterdir() if f.is_dir()]
    assert not (store_dir / "csv").exists()
    # a store built by an earlier version, under csv/: read as it is, not built again
    (store_dir / "csv").mkdir()
    older = folder.rename(store_dir / "csv" / folder.name)
    stamp = (older / "meta.json").stat().st_mtime_ns
    again = load_dataset(f"sdf:{path}", target_columns=["pIC50"])
    assert not (store_dir / "sdf" / folder.name).exists()
    assert (older / "meta.json").stat().st_mtime_ns == stamp
    assert again.train.store.folder == older
    assert len(again.train) == len(splits.train)
