"""``graphormer-urpe explain`` end to end on a tiny trained run."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from graphormer_urpe import cli
from graphormer_urpe.inference.explain import drawing, writing
from graphormer_urpe.inference.explain.explainer import METHODS
from tests.helpers import SMILES, TINY_MODEL

DRAW_ATOMS = 12
"""The largest molecule drawn in this module's tests (the library's limit, lowered)."""
LONG = "C" * (DRAW_ATOMS + 5)  # a chain too large to draw


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("explain")
    table = root / "mols.csv"
    with open(table, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "heavy_atoms"])
        for s in SMILES:
            w.writerow([s, sum(ch.isalpha() and ch not in "lr" for ch in s)])
    args = ["train", "--dataset", f"csv:{table}", "--data-root", str(root / "data")]
    args += ["--store-dir", str(root / "cache"), "--target-columns", "heavy_atoms"]
    args += ["--out", str(root / "run"), *TINY_MODEL, "--epochs", "1", "--batch-size", "8"]
    assert cli.main([*args, "--no-progress", "--threads", "1"]) == 0
    return root / "run"


def _read(path: Path) -> list[dict[str, str]]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


@pytest.fixture
def draw_atoms(monkeypatch) -> None:
    """Molecules of more than :data:`DRAW_ATOMS` heavy atoms are not drawn: a chain just over
    the limit is explained in far fewer forward passes than one over the library's 100."""
    assert drawing.MAX_DRAW_ATOMS > DRAW_ATOMS
    for module in (drawing, writing):
        monkeypatch.setattr(module, "MAX_DRAW_ATOMS", DRAW_ATOMS)


def test_explain_writes_csvs_pictures_and_reports_bad_rows(run, tmp_path, capsys, draw_atoms):
    inp = tmp_path / "in.csv"
    inp.write_text(f"smiles\nCCO\nnot_a_smiles((\nc1ccccc1O\n{LONG}\n")
    out = tmp_path / "out"
    args = ["explain", "--checkpoint", str(run / "best.pt"), "--input", str(inp)]
    # two orderings: the files are under test here (Shapley values themselves: test_shapley.py),
    # and the chain costs one forward pass per atom and ordering
    assert cli.main([*args, "--out", str(out), "--no-progress", "--permutations", "2"]) == 0
    err = capsys.readouterr().err
    assert f"row 3: not drawn: {len(LONG)} heavy atoms" in err
    assert "explained 3 of 4 molecules" in err and "1 could not be read, 2 drawn" in err

    atoms = _read(out / "atoms.csv")
    assert list(atoms[0]) == ["row", "smiles", "atom_index", "element", "heavy_atoms", "error"]
    assert [r["element"] for r in atoms if r["row"] == "0"] == ["C", "C", "O"]
    (bad,) = [r for r in atoms if r["row"] == "1"]
    assert bad["atom_index"] == "" and bad["heavy_atoms"] == "" and "parse" in bad["error"]
    assert sum(r["row"] == "3" for r in atoms) == len(LONG)  # explained, not drawn

    mols = _read(out / "molecules.csv")
    assert [m["picture"] for m in mols[:3]] == ["mol-0.png", "", "mol-2.png"]
    assert mols[3]["picture"].startswith("not drawn")
    for row, m in enumerate(mols):
        if row == 1:
            continue
        total = sum(float(r["heavy_atoms"]) for r in atoms if r["row"] == str(row))
        delta = float(m["heavy_atoms"]) - float(m["heavy_atoms_baseline"])
        assert total == pytest.approx(delta, rel=0.011, abs=2e-5)  # completeness, via the CSV
    for name in ("mol-0.png", "mol-2.png", "grid.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in (out / "mol-0.svg").read_text()
    assert not (out / "mol-1.png").exists() and not (out / "mol-3.png").exists()


def test_explain_smiles_flag_no_pictures_and_a_missing_checkpoint(run, tmp_path, capsys):
    out = tmp_path / "one"
    args = ["explain", "--checkpoint", str(run / "best.pt"), "--smiles", "CCN", "--no-pictures"]
    assert cli.main([*args, "--out", str(out), "--no-progress"]) == 0
    assert len(_read(out / "atoms.csv")) == 3 and not list(out.glob("*.png"))
    ig = [*args, "--out", str(tmp_path / "ig"), "--no-progress", "--method"]
    assert cli.main([*ig, "integrated-gradients", "--steps", "2"]) == 0
    (m,) = _read(tmp_path / "ig" / "molecules.csv")
    total = sum(float(r["heavy_atoms"]) for r in _read(tmp_path / "ig" / "atoms.csv"))
    delta = float(m["heavy_atoms"]) - float(m["heavy_atoms_baseline"])
    assert total == pytest.approx(delta, rel=0.011, abs=2e-5)  # complete within 1%
    for method in METHODS:  # the command offers every method of the library
        assert cli.build_parser().parse_args([*ig, method]).method == method
    missing = ["explain", "--checkpoint", str(tmp_path / "nothing"), "--smiles", "C"]
    assert cli.main([*missing, "--out", str(out)]) == 2
    assert "graphormer-urpe: error:" in capsys.readouterr().err


def test_pictures_colour_by_the_target_asked_for(tmp_path, monkeypatch):
    from graphormer_urpe.inference.explain.explainer import MoleculeExplanation

    drawn: list[tuple[list[float], str]] = []

    def fake_draw(smiles, values, title, fmt, **style):
        drawn.append((list(values), title))
        return b"\x89PNG" if fmt == "png" else "<svg/>"

    monkeypatch.setattr(writing, "draw_contributions", fake_draw)
    monkeypatch.setattr(writing, "draw_grid", lambda smiles, values, titles, **kw: b"\x89PNG")
    e = MoleculeExplanation(
        index=0,
        smiles="CCO",
        elements=["C", "C", "O"],
        contributions=np.array([[1.0, -3.0], [2.0, 0.5], [3.0, 4.0]]),
        prediction=np.array([6.0, 1.5]),
        baseline=np.array([0.0, 0.0]),
    )
    for target, column in ((None, 0), ("b", 1)):
        drawn.clear()
        writing.write_explanations([e], tmp_path / str(target), ["a", "b"], picture_target=target)
        assert drawn[0][0] == e.contributions[:, column].tolist()
        assert drawn[0][1].startswith(f"row 0: {'ab'[column]} = {e.prediction[column]:.3g}")
    with pytest.raises(ValueError, match="'c' is not a target of this model; its targets: a, b"):
        writing.write_explanations([e], tmp_path / "c", ["a", "b"], picture_target="c")


def test_a_picture_target_the_model_lacks_is_one_line(run, tmp_path, capsys):
    args = ["explain", "--checkpoint", str(run / "best.pt"), "--smiles", "CCN"]
    assert cli.main([*args, "--out", str(tmp_path / "x"), "--picture-target", "logP"]) == 2
    err = capsys.readouterr().err
    assert "error: --picture-target 'logP' is not a target" in err and "heavy_atoms" in err
    assert not (tmp_path / "x").exists()


def test_explain_keeps_the_input_names_and_reads_sd_files(run, tmp_path):
    from rdkit import Chem

    inp = tmp_path / "in.csv"
    inp.write_text("name,smiles\naspirin-like,CC(=O)O\nbad,xx((\n")
    args = ["explain", "--checkpoint", str(run / "best.pt"), "--no-pictures", "--no-progress"]
    assert cli.main([*args, "--input", str(inp), "--out", str(tmp_path / "csv")]) == 0
    mols = _read(tmp_path / "csv" / "molecules.csv")
    assert list(mols[0])[:4] == ["row", "smiles", "name", "atoms"]
    assert [m["name"] for m in mols] == ["aspirin-like", "bad"]
    atoms = _read(tmp_path / "csv" / "atoms.csv")
    assert list(atoms[0])[:3] == ["row", "smiles", "name"]
    assert {r["name"] for r in atoms if r["row"] == "0"} == {"aspirin-like"}

    sdf = tmp_path / "in.sdf"
    with Chem.SDWriter(str(sdf)) as w:
        for name, smi in (("ethanol", "CCO"), ("phenol", "c1ccccc1O")):
            mol = Chem.MolFromSmiles(smi)
            mol.SetProp("_Name", name)
            w.write(mol)
    assert cli.main([*args, "--input", str(sdf), "--out", str(tmp_path / "sdf")]) == 0
    mols = _read(tmp_path / "sdf" / "molecules.csv")
    assert [(m["name"], m["smiles"], m["error"]) for m in mols] == [
        ("ethanol", "CCO", ""),
        ("phenol", "Oc1ccccc1", ""),
    ]


def _explained(index: int, contributions: list[float], ids=(), descriptors=None):
    from graphormer_urpe.inference.explain.explainer import MoleculeExplanation

    values = np.array(contributions)[:, None]
    total = values.sum() + (0.0 if descriptors is None else descriptors)
    return MoleculeExplanation(
        index=index,
        smiles="C" * len(contributions),
        elements=["C"] * len(contributions),
        contributions=values,
        descriptors=None if descriptors is None else np.array([descriptors]),
        prediction=np.array([6.28 + total]),
        baseline=np.array([6.28]),
        ids=ids,
    )


def test_pictures_share_one_scale_name_the_molecule_and_show_the_descriptor_term(
    tmp_path, monkeypatch
):

    calls: list[dict] = []

    def fake_draw(smiles, values, title, fmt, **style):
        calls.append({"title": title, "fmt": fmt, **style})
        return b"\x89PNG" if fmt == "png" else "<svg/>"

    grids: list[dict] = []
    monkeypatch.setattr(writing, "draw_contributions", fake_draw)
    monkeypatch.setattr(
        writing,
        "draw_grid",
        lambda s, v, titles, **kw: grids.append(kw | {"t": titles}) or b"\x89PNG",
    )
    mols = [
        _explained(0, [0.38, -0.1, 0.2], ids=("cpd-7",), descriptors=0.57),
        _explained(1, [0.13, -0.05], ids=("",)),
    ]
    summary = writing.write_explanations(mols, tmp_path / "a", ["pIC50"], descriptors=True)
    pngs = [c for c in calls if c["fmt"] == "png"]
    assert [c["scale"] for c in pngs] == [0.38, 0.38] and summary.scale == 0.38
    assert pngs[0]["label"] == ["contribution", "to pIC50"]
    assert pngs[0]["title"].startswith("cpd-7: pIC50 = 7.33")  # the name, not "row 0"
    assert pngs[1]["title"].startswith("row 1: pIC50")  # no name: the row
    # the whole answer under the molecule: atoms' sum and descriptor term
    assert pngs[0]["note"] == "atoms +0.48 + descriptors +0.57 = prediction - baseline (+1.05)"
    assert pngs[1]["note"] == "atoms +0.08 = prediction - baseline (+0.08)"
    assert grids[0]["scale"] == 0.38 and grids[0]["label"] == ["contribution", "to pIC50"]
    assert grids[0]["t"][0].startswith("cpd-7: ")
    calls.clear()
    summary = writing.write_explanations(mols, tmp_path / "b", ["pIC50"], per_molecule_scale=True)
    assert [c["scale"] for c in calls] == [None] * 4 and summary.scale is None


def test_drawn_pictures_carry_a_colour_bar_and_the_note():
    from io import BytesIO

    from PIL import Image

    from graphormer_urpe.inference.explain.drawing import (
        BAR,
        FOOTER,
        SIZE,
        draw_contributions,
        draw_grid,
    )

    values = np.array([0.3, -0.2, 0.1])
    plain = Image.open(BytesIO(draw_contributions("CCO", values, "t")))
    noted = Image.open(BytesIO(draw_contributions("CCO", values, "t", note="atoms +0.2")))
    assert plain.size == (SIZE[0] + BAR, SIZE[1])
    assert noted.size == (SIZE[0] + BAR, SIZE[1] + FOOTER)
    # the note is written: the footer is not blank
    footer = np.asarray(noted.convert("L"))[SIZE[1] :, :]
    assert footer.min() < 128
    grid = Image.open(BytesIO(draw_grid(["CCO", "CCN"], [values, values[:3]], ["a", "b"])))
    assert grid.size[0] == 2 * 300 + BAR
    bar = np.asarray(grid.convert("RGB"))[60:80, 2 * 300 + 12 : 2 * 300 + 30].astype(int)
    assert (bar[..., 0] - bar[..., 2]).mean() > 100  # the bar's top is red
