"""Pretraining (``graphormer-urpe pretrain``'s run, through the library): descriptor targets, a
learning run, exact resume, fine-tuning."""

from __future__ import annotations

import csv
import gzip
import json
import signal
from pathlib import Path

import numpy as np
import pytest
import rdkit
import torch

from graphormer_urpe.datasets import load_dataset
from graphormer_urpe.datasets.featurizers.descriptors import (
    DESCRIPTOR_NAMES,
    DescriptorNormalizer,
    compute_descriptors,
)
from graphormer_urpe.datasets.sources.nci import read_nci_smiles
from graphormer_urpe.datasets.sources.pretrain import DescriptorTargets, read_smiles_list
from graphormer_urpe.io.checkpoint import TrainingInterrupted, load_checkpoint
from graphormer_urpe.runtime.train_config import TrainConfig, build_train_config, make_config
from graphormer_urpe.training import train
from graphormer_urpe.training.pretrained import init_from_checkpoint
from tests.helpers import TINY_MODEL_FIELDS, assert_same_run, loss_hook

# 120 NCI molecules → a 98/1/1 split of 117/1/2 → 8 batches of 16 per epoch
STEPS = 96


@pytest.fixture(scope="module")
def smi_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("smi") / "mols.smi"
    smiles = list(read_nci_smiles(limit=120))
    path.write_text("smiles\n" + "".join(f"{s} name{i}\n" for i, s in enumerate(smiles)))
    return path


def _pretrain_config(smi: Path, store: Path, out: Path, **extra) -> TrainConfig:
    """The config ``graphormer-urpe pretrain --input SMI`` builds for a tiny model (smooth L1
    on the descriptors, 96 steps of 16 molecules, one thread on the CPU), with ``extra``."""
    return build_train_config(
        model_overrides=TINY_MODEL_FIELDS,
        dataset=f"pretrain:{smi}",
        loss="smooth_l1",
        store_dir=str(store),
        out=str(out),
        batch_size=16,
        max_steps=STEPS,
        warmup_steps=4,
        lr=5e-3,
        threads=1,
        device="cpu",
        **extra,
    )


@pytest.fixture(scope="module")
def reference(smi_file, tmp_path_factory) -> tuple[Path, Path]:
    """An uninterrupted pretraining run (dropout on, so the RNG state matters)."""
    base = tmp_path_factory.mktemp("pretrain")
    store, out = base / "store", base / "run"
    train(_pretrain_config(smi_file, store, out, checkpoint_every=5), progress=False)
    return store, out


def test_smiles_files_of_every_kind_are_read(tmp_path):
    smi = tmp_path / "a.smi"
    smi.write_text("SMILES\nCCO ethanol\n\nc1ccccc1\n\n")
    assert read_smiles_list(smi) == (["CCO", "", "c1ccccc1"], 2)
    plain = tmp_path / "b.txt"
    plain.write_text("CCO\nCCN\n")
    assert read_smiles_list(plain) == (["CCO", "CCN"], 1)
    table = tmp_path / "c.csv.gz"
    with gzip.open(table, "wt", newline="") as f:
        csv.writer(f).writerows([["id", "SMILES"], ["1", "CCO"], ["2", " CCN "]])
    assert read_smiles_list(table, "SMILES") == (["CCO", "CCN"], 2)
    with pytest.raises(ValueError, match="column 'smiles' not found"):
        read_smiles_list(table)


def test_pretraining_lowers_the_loss_and_records_the_descriptors(smi_file, reference):
    store, out = reference
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == STEPS and metrics["loss"] == "smooth_l1"
    assert metrics["pretrain_descriptors"] == len(DESCRIPTOR_NAMES)
    rows = list(csv.DictReader(open(out / "history.csv")))
    losses = [float(r["train_loss"]) for r in rows]
    assert losses[-1] < 0.9 * losses[0]
    assert metrics["best_valid_mae"] < metrics["baseline_valid_mae"]
    assert not (out / "test_predictions.csv").exists()  # not 2 x 202 columns per molecule
    record = load_checkpoint(out / "best.pt")["pretrain"]
    assert record["molecules"] == 120 and record["split"] == {"train": 117, "valid": 1, "test": 2}
    assert record["descriptors"]["names"] == list(DESCRIPTOR_NAMES)
    assert record["descriptors"]["rdkit_version"] == rdkit.__version__
    # the recorded normalisation, applied to a molecule's fresh descriptors, gives its target
    norm = DescriptorNormalizer.from_dict(record["descriptors"])
    splits = load_dataset(f"pretrain:{smi_file}", store_dir=str(store))
    assert isinstance(splits.train, DescriptorTargets)
    smiles = splits.train.smiles()[:5]
    want = norm.transform(compute_descriptors(smiles))
    got = torch.cat([splits.train[i].y for i in range(5)]).numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.abs(want).max() > 1  # scaled values, not all zero


def test_max_nodes_keeps_the_descriptor_targets(smi_file, reference):
    store, _ = reference
    full = load_dataset(f"pretrain:{smi_file}", store_dir=str(store))
    small = load_dataset(f"pretrain:{smi_file}", store_dir=str(store), max_nodes=15)
    assert isinstance(small.train, DescriptorTargets) and 0 < len(small.train) < len(full.train)
    assert small.train[0].y.shape == (1, len(DESCRIPTOR_NAMES))
    assert "202 targets" in repr(small)


def test_pretraining_resumes_exactly_after_sigterm(smi_file, reference, tmp_path, monkeypatch):
    store, ref_out = reference
    out = tmp_path / "run"
    config = _pretrain_config(smi_file, store, out, checkpoint_every=5)
    loss_hook(monkeypatch, 13, lambda: signal.raise_signal(signal.SIGTERM))
    with pytest.raises(TrainingInterrupted) as stopped:
        train(config, progress=False)
    assert stopped.value.signum == signal.SIGTERM
    ckpt = load_checkpoint(out / "last.pt")
    assert ckpt["step"] == 13 and ckpt["position"] == {"epoch": 1, "batch": 5}
    monkeypatch.undo()
    train(config, resume=True, progress=False)
    assert_same_run(ref_out, out)


def test_fine_tuning_from_a_pretraining_checkpoint_resets_the_head(reference, tmp_path):
    _, out = reference
    config = make_config("small").model
    model, report = init_from_checkpoint(out / "best.pt", config, "ogb", len(DESCRIPTOR_NAMES))
    head = set(model.head_output_names())
    assert head <= set(report.initialised)  # reset even with as many outputs
    assert set(report.loaded) == set(model.state_dict()) - head
    saved = load_checkpoint(out / "best.pt")["model"]
    name = next(n for n in report.loaded if n.startswith("encoder."))
    assert torch.equal(model.state_dict()[name], saved[name])
    table = tmp_path / "task.csv"
    smiles = list(read_nci_smiles(limit=40))
    table.write_text("smiles,y\n" + "".join(f"{s},{len(s) / 10}\n" for s in smiles))
    run = tmp_path / "fine"
    config = build_train_config(
        dataset=f"csv:{table}",
        target_columns=["y"],
        out=str(run),
        init_from=str(out / "best.pt"),
        epochs=1,
        batch_size=8,
        threads=1,
        device="cpu",
    )
    train(config, progress=False)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["init_from"] == str(out / "best.pt") and "init_valid_rmse" in metrics
    assert load_checkpoint(run / "best.pt").get("pretrain") is None
