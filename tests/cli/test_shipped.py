"""The pretrained checkpoint that ships in the package, and the name that stands for it."""

from __future__ import annotations

import json

import pytest
import torch

from graphormer_urpe import cli
from graphormer_urpe.datasets.featurizers.descriptors import DESCRIPTOR_NAMES
from graphormer_urpe.inference import load_model, predict_smiles
from graphormer_urpe.io.checkpoint import (
    SHIPPED,
    WEIGHTS,
    CheckpointError,
    load_checkpoint,
    resolve_checkpoint,
)
from graphormer_urpe.runtime.train_config import (
    PRETRAINED_MOL_FEATURES,
    make_config,
    resolve_mol_features,
)
from tests.helpers import SMILES


def test_the_shipped_checkpoint_reproduces_its_stored_outputs():
    ckpt = load_checkpoint("pretrained")
    assert resolve_checkpoint("pretrained") == WEIGHTS / SHIPPED["pretrained"]
    assert ckpt["pretrain"]["descriptors"]["names"] == list(DESCRIPTOR_NAMES)
    assert "optimizer" not in ckpt and ckpt["shipped"]["command"].startswith("graphormer-urpe")
    ref = ckpt["shipped"]["reference"]
    model = load_model("pretrained", "cpu")
    values, errors = predict_smiles(model, ref["smiles"], progress=False, workers=0)
    assert errors == [None] * len(ref["smiles"])
    torch.testing.assert_close(values, torch.tensor(ref["outputs"]), rtol=1e-4, atol=1e-4)
    assert WEIGHTS.joinpath(SHIPPED["pretrained"]).stat().st_size < 10 * 2**20


def test_a_file_of_the_same_name_wins_and_a_missing_shipped_file_is_explained(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pretrained").write_text("not a checkpoint")
    assert resolve_checkpoint("pretrained").resolve() == tmp_path / "pretrained"
    (tmp_path / "pretrained").unlink()
    monkeypatch.setattr("graphormer_urpe.io.checkpoint.WEIGHTS", tmp_path / "none")
    with pytest.raises(CheckpointError, match="shipped checkpoint 'pretrained'.*missing"):
        load_checkpoint("pretrained")


def test_train_init_from_pretrained_starts_from_the_shipped_encoder(tmp_path):
    rows = [f"{s},{0.1 * i:.2f}" for i, s in enumerate(SMILES)]
    data = tmp_path / "mols.csv"
    data.write_text("smiles,y\n" + "\n".join(rows) + "\n")
    out = tmp_path / "run"
    code = cli.main(
        ["train", "--dataset", f"csv:{data}", "--target-columns", "y", "--init-from"]
        + ["pretrained", "--max-steps", "2", "--out", str(out), "--no-progress", "--threads", "1"]
        + ["--store-dir", str(tmp_path / "cache")]
    )
    assert code == 0
    shipped = load_checkpoint("pretrained")["model"]
    tuned = load_checkpoint(out / "last.pt")["model"]
    encoder = [k for k in shipped if k.startswith("encoder.")]
    assert encoder and all(k in tuned and tuned[k].shape == shipped[k].shape for k in encoder)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["init_from"] == "pretrained"
    # without --mol-features, the fine-tuning recipe's are joined before the head
    config = json.loads((out / "config.json").read_text())
    assert config["mol_features"] == PRETRAINED_MOL_FEATURES != "none"
    assert config["model"]["num_mol_features"] == len(DESCRIPTOR_NAMES)


@pytest.mark.parametrize(
    ("init_from", "dataset", "given", "used"),
    [
        ("pretrained", "csv:x.csv", "auto", PRETRAINED_MOL_FEATURES),
        ("pretrained", "csv:x.csv", "none", "none"),  # a kind given is kept
        ("pretrained", "csv:x.csv", "rdkit2d+morgan", "rdkit2d+morgan"),
        (None, "csv:x.csv", "auto", "none"),  # from scratch
        ("runs/a/best.pt", "csv:x.csv", "auto", "none"),  # another checkpoint
        ("pretrained", "zinc", "auto", "none"),  # not a csv: set
    ],
)
def test_auto_mol_features_are_the_recipes_only_for_the_pretrained_start_on_csv(
    init_from, dataset, given, used
):
    config = make_config("small", dataset=dataset, init_from=init_from, mol_features=given)
    assert resolve_mol_features(config).mol_features == used
