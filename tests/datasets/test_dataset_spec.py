"""The dataset name is parsed in one place: every kind the registry accepts, the text given
back as written, and clear errors for names it does not know."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphormer_urpe.datasets.sources.pcqm_files import LSC_DATASETS
from graphormer_urpe.datasets.spec import (
    LSC_NAMES,
    DatasetSpec,
    names_table,
    parse_dataset_spec,
)


@pytest.mark.parametrize(
    "text,kind,name,paths",
    [
        ("nci5k", "nci5k", "nci5k", ()),
        ("zinc", "zinc", "zinc", ()),
        ("zinc-full", "zinc-full", "zinc-full", ()),
        ("pcqm4mv2", "pcqm4mv2", "pcqm4mv2", ()),
        ("pcqm4m", "pcqm4m", "pcqm4m", ()),
        ("ogbg-molhiv", "ogbg", "ogbg-molhiv", ()),
        ("csv:data/mols.csv", "csv", "", ("data/mols.csv",)),
        ("csv:a.csv, b.csv ,c.csv", "csv", "", ("a.csv", "b.csv", "c.csv")),
        ("sdf:ligands.sdf.gz", "sdf", "", ("ligands.sdf.gz",)),
        ("pretrain:zinc.smi", "pretrain", "", ("zinc.smi",)),
        ("pretrain:a,b.smi", "pretrain", "", ("a,b.smi",)),  # one file, never split
    ],
)
def test_every_kind_parses_and_gives_its_text_back(text, kind, name, paths):
    spec = parse_dataset_spec(text)
    assert (spec.kind, spec.name, spec.paths) == (kind, name, paths)
    assert str(spec) == text
    assert parse_dataset_spec(str(spec)) == spec
    assert spec.is_table == (kind in ("csv", "sdf"))
    assert names_table(text) == spec.is_table


def test_an_existing_file_with_a_comma_is_one_file(tmp_path: Path):
    path = tmp_path / "a,b.csv"
    path.write_text("smiles,y\nC,1\n")
    assert parse_dataset_spec(f"csv:{path}").paths == (str(path),)
    with pytest.raises(ValueError, match="three comma-separated paths"):  # not there: 2 files
        parse_dataset_spec(f"csv:{tmp_path / 'x,y.csv'}")


@pytest.mark.parametrize(
    "text,message",
    [
        ("qm9", "unknown dataset 'qm9'; choose one of"),
        ("csv:", "unknown dataset 'csv:'"),
        ("pretrain:", "unknown dataset 'pretrain:'"),
        ("ogbg-", "unknown dataset 'ogbg-'"),
        ("tsv:x.tsv", "unknown dataset 'tsv:x.tsv'"),
        ("csv:a.csv,b.csv", "three comma-separated paths"),
        ("sdf:a,b,c,d", "three comma-separated paths"),
    ],
)
def test_bad_names_are_refused_with_what_was_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        parse_dataset_spec(text)
    assert names_table(text) is False


def test_a_name_that_is_not_text_is_refused():
    with pytest.raises(TypeError, match="a dataset name is a string"):
        parse_dataset_spec(Path("x.csv"))  # type: ignore[arg-type]


def test_the_spec_is_frozen_and_knows_the_registry_s_lsc_sets():
    spec = parse_dataset_spec("csv:x.csv")
    with pytest.raises(AttributeError):
        spec.kind = "sdf"  # type: ignore[misc]
    assert spec == DatasetSpec(kind="csv", location="x.csv", paths=("x.csv",))
    assert set(LSC_NAMES) == set(LSC_DATASETS)
