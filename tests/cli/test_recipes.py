"""The recipe of the README and of the CSV guide, run as written at a tiny scale (a few
molecules, one epoch, two members): the commands a user copies cannot drift from the code."""

from __future__ import annotations

import csv
import re
import shlex
from pathlib import Path

import pytest

from graphormer_urpe import cli
from tests.helpers import SMILES

ROOT = Path(__file__).resolve().parents[2]

TINY = ["--epochs", "1", "--ensemble", "2", "--batch-size", "8", "--threads", "1", "--no-progress"]
"""Appended to the recipe's train command (the last of a repeated flag wins)."""


def recipe(path: Path, heading: str | None = None) -> list[list[str]]:
    """The commands of the first bash block of ``path`` (after ``heading``), continuation
    lines joined and comments left out."""
    text = path.read_text()
    if heading is not None:
        text = text[text.index(heading) :]
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, f"no bash block in {path}"
    joined = block.group(1).replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.strip()]


RECIPES = {
    "README": (ROOT / "README.md", "### 1. Your own CSV"),
    "csv guide": (ROOT / "docs" / "guides" / "csv.md", None),
}


@pytest.mark.parametrize("name", list(RECIPES))
def test_the_recipe_trains_the_recommended_ensemble_and_predicts_with_it(
    name, tmp_path, monkeypatch, capsys
):
    commands = recipe(*RECIPES[name])
    train, predict = commands  # one command trains, one predicts
    assert train[:2] == ["graphormer-urpe", "train"] and predict[:2] == [
        "graphormer-urpe",
        "predict",
    ]
    # the recommended model: fine-tuned from the shipped checkpoint, with descriptors, on a
    # scaffold split, an ensemble; predict uses that ensemble
    flags = dict(zip(train[2::2], train[3::2], strict=False))
    assert flags["--init-from"] == "pretrained" and flags["--mol-features"] == "rdkit2d"
    assert flags["--split"] == "scaffold" and int(flags["--ensemble"]) > 1
    out = flags["--out"]
    assert predict[predict.index("--checkpoint") + 1] == out
    # run as written, at a tiny scale, on the files the recipe names
    monkeypatch.chdir(tmp_path)
    dataset = flags["--dataset"].partition(":")[2]
    target = flags["--target-columns"]
    with open(dataset, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", target])
        for i, s in enumerate(SMILES[:-1] * 2):  # (the last is not a molecule)
            w.writerow([s, i % 7 - 3.5])
    source = predict[predict.index("--input") + 1]
    if not Path(source).exists():
        with open(source, "w") as fh:
            fh.write("smiles\nCCO\nc1ccccc1O\n")
    assert cli.main([*train[1:], *TINY, "--store-dir", str(tmp_path / "cache")]) == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"the ensemble is {out}" in last
    assert cli.main([*predict[1:], "--workers", "0", "--no-progress"]) == 0
    output = predict[predict.index("--output") + 1]
    with open(output) as fh:
        rows = list(csv.DictReader(fh))
    assert rows and f"{target}_std" in rows[0] and all(r[target] for r in rows)
    if "--interval" in predict:  # the ensemble's calibrated interval
        assert all(
            float(r[f"{target}_low"]) <= float(r[target]) <= float(r[f"{target}_high"])
            for r in rows
        )


def test_the_readme_and_the_guide_give_the_same_recipe():
    assert recipe(*RECIPES["README"]) == recipe(*RECIPES["csv guide"])
