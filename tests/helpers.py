"""Plain helpers the tests share: molecule lists, small models and checkpoints, file writers,
the command line of a tiny training run. Fixtures live in ``conftest.py``; plain reference
implementations in ``reference.py``. No test module imports another."""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import gzip
import io
import json
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from ogb.utils import smiles2graph
from rdkit import Chem, DataStructs
from rdkit.Chem import rdFingerprintGenerator
from torch_geometric.data import Data

from graphormer_urpe import (
    Graphormer,
    GraphormerCollator,
    GraphormerFeatures,
    collate,
    get_preset,
)
from graphormer_urpe.datasets import featurize_smiles, penalized_logp, zinc_mol_to_graph
from graphormer_urpe.datasets.domain import FINGERPRINT_BITS, record_of_smiles
from graphormer_urpe.datasets.featurizers.descriptors import (
    DescriptorNormalizer,
    compute_descriptors,
)
from graphormer_urpe.datasets.store import chunks as chunks_module
from graphormer_urpe.graph.model import GraphormerConfig, fit_tables
from graphormer_urpe.graph.published_weights import hf_inputs
from graphormer_urpe.graph.static_shapes import StaticShapes
from graphormer_urpe.inference.loading import load_model
from graphormer_urpe.io.checkpoint import load_checkpoint, save_checkpoint
from graphormer_urpe.runtime import make_config
from graphormer_urpe.runtime.capture import EagerGraphs
from graphormer_urpe.runtime.train_config import TrainConfig, build_train_config
from graphormer_urpe.sequence import TransformerXL, TransformerXLConfig
from graphormer_urpe.sequence.model import RelativePositionTable
from graphormer_urpe.training import run as training_run
from graphormer_urpe.training import steps
from graphormer_urpe.training.pacing import RunCosts
from graphormer_urpe.training.run import (
    Precision,
    StepTotals,
    build_model,
    linear_schedule,
    make_optimizer,
    step_body,
)
from graphormer_urpe.training.run_costs import CostProbe
from graphormer_urpe.training.trainer import Trainer

# ---- random graphs and the shared ZINC validation graphs
ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


def random_graph(
    rng: np.random.Generator,
    n: int,
    p: float,
    kind: str = "random",
    node_features: int = 1,
    edge_features: int = 1,
    num_targets: int = 1,
) -> Data:
    """An undirected graph (both directions stored) of ``kind`` random / ring / edgeless / split."""
    if kind == "ring" and n > 2:
        a = np.zeros((n, n), dtype=bool)
        a[np.arange(n), (np.arange(n) + 1) % n] = True
        # add a chord sometimes so several shortest paths tie
        if n > 5:
            a[0, n // 2] = True
    elif kind == "edgeless":
        a = np.zeros((n, n), dtype=bool)
    elif kind == "split" and n > 3:  # two components
        h = n // 2
        a = np.zeros((n, n), dtype=bool)
        a[:h, :h] = rng.random((h, h)) < max(p, 0.5)
        a[h:, h:] = rng.random((n - h, n - h)) < max(p, 0.5)
    else:
        a = rng.random((n, n)) < p
    a = np.triu(a, 1)
    a = a | a.T
    src, dst = np.nonzero(a)
    e = src.size
    # the same bond features in both directions, as molecules store them
    und = {}
    attrs = np.zeros((e, edge_features), dtype=np.int64)
    for idx, (s, d) in enumerate(zip(src, dst, strict=True)):
        key = (min(s, d), max(s, d))
        if key not in und:
            und[key] = rng.integers(0, 4, size=edge_features)
        attrs[idx] = und[key]
    x = rng.integers(0, 20, size=(n, node_features))
    return Data(
        x=torch.from_numpy(x),
        edge_index=torch.from_numpy(np.stack([src, dst]).astype(np.int64)),
        edge_attr=torch.from_numpy(attrs.squeeze(1) if edge_features == 1 else attrs),
        y=torch.randn(1, num_targets, generator=torch.Generator().manual_seed(int(n))),
        num_nodes=n,
    )


def graph_zoo(seed: int = 0, count: int = 200, **kw) -> list[Data]:
    """Hundreds of graphs covering random, ring, edgeless, disconnected and 1-node cases."""
    rng = np.random.default_rng(seed)
    kinds = ["random", "ring", "edgeless", "split", "random"]
    out = []
    for i in range(count):
        n = 1 if i % 17 == 0 else int(rng.integers(2, 26))
        out.append(random_graph(rng, n, float(rng.uniform(0.05, 0.4)), kinds[i % len(kinds)], **kw))
    return out


def load_zinc_val_graphs(limit: int | None = None) -> list[Data]:
    """The official ZINC-subset validation graphs (skips the test when the data is absent)."""
    path = SHARED_DATA / "zinc" / "val_graphs.npz"
    if not path.exists():
        pytest.skip(f"real ZINC validation graphs not available at {path}")
    z = np.load(path)
    graphs = []
    total = len(z["y"]) if limit is None else limit
    for g in range(total):
        a, b = z["node_ptr"][g], z["node_ptr"][g + 1]
        e0, e1 = z["edge_ptr"][g], z["edge_ptr"][g + 1]
        graphs.append(
            Data(
                x=torch.from_numpy(z["x"][a:b].astype(np.int64)).view(-1, 1),
                edge_index=torch.from_numpy(z["edge_index"][:, e0:e1].astype(np.int64)),
                edge_attr=torch.from_numpy(z["edge_attr"][e0:e1].astype(np.int64)),
                y=torch.tensor([float(z["y"][g])]),
            )
        )
    return graphs


# ---- the small molecule table and the command line of a tiny training run
SMILES = [  # 40 small molecules; the CSV fixture ``table`` pairs them with heavy-atom counts
    "CCO",
    "CCN",
    "CCC",
    "CCCC",
    "CCCCC",
    "c1ccccc1",
    "c1ccccc1O",
    "c1ccccc1N",
    "CC(=O)O",
    "CC(=O)N",
    "CCOC",
    "CCOCC",
    "C1CCCCC1",
    "C1CCCC1",
    "CC(C)C",
    "CC(C)(C)C",
    "OCCO",
    "NCCN",
    "c1ccncc1",
    "c1ccoc1",
    "c1ccsc1",
    "CC#N",
    "C=CC",
    "C=CC=C",
    "CCCl",
    "CCBr",
    "CCF",
    "OC(=O)c1ccccc1",
    "Nc1ccccc1O",
    "CC(=O)Nc1ccc(O)cc1",
    "COc1ccccc1",
    "CCCCCC",
    "CCCCCCC",
    "C1CC1",
    "C1CCC1",
    "OC1CCCCC1",
    "NC1CCCCC1",
    "CCS",
    "CSC",
    "CC(O)C",
]


def heavy_atoms_csv(path: Path) -> Path:
    """Write the CSV of the 40 molecules of ``SMILES`` with RDKit's heavy-atom counts
    (column ``heavy_atoms``) to ``path``."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["smiles", "heavy_atoms"])
        for s in SMILES:
            w.writerow([s, Chem.MolFromSmiles(s).GetNumHeavyAtoms()])
    return path


TINY_MODEL = ["--num-layers", "2", "--hidden-dim", "16", "--ffn-dim", "16", "--num-heads", "2"]


def train_args(table: Path, root: Path, out: Path, *extra: str) -> list[str]:
    """The arguments of ``train`` for a tiny model on the CSV ``table`` (target column
    ``heavy_atoms``, 3 epochs of batches of 8, one thread), then ``extra``."""
    return [
        "train",
        "--dataset",
        f"csv:{table}",
        "--data-root",
        str(root),
        "--target-columns",
        "heavy_atoms",
        "--out",
        str(out),
        *TINY_MODEL,
        "--batch-size",
        "8",
        "--epochs",
        "3",
        "--warmup-steps",
        "2",
        "--lr",
        "1e-3",
        "--no-progress",
        "--threads",
        "1",
        *extra,
    ]


TINY_MODEL_FIELDS = {"num_layers": 2, "hidden_dim": 16, "ffn_dim": 16, "num_heads": 2}
"""``TINY_MODEL`` as the model fields of a config."""

URPE_NO_DROPOUT = {"attention": "urpe", "dropout": 0.0, "attention_dropout": 0.0}
"""Model fields of a URPE run without dropout (``--attention urpe --dropout 0
--attention-dropout 0``): runs that differ only in how their steps run give the same numbers."""


def tiny_train_config(
    table: Path, root: Path, out: Path, model: dict | None = None, **fields
) -> TrainConfig:
    """The config of ``train_args(table, root, out)`` built through the library (what the
    command builds from those flags); ``model`` and ``fields`` override or add fields."""
    given = dict(
        dataset=f"csv:{table}",
        data_root=str(root),
        target_columns=["heavy_atoms"],
        out=str(out),
        batch_size=8,
        epochs=3,
        warmup_steps=2,
        lr=1e-3,
        threads=1,
    )
    return build_train_config(
        model_overrides={**TINY_MODEL_FIELDS, **(model or {})}, **{**given, **fields}
    )


class FakeClock:
    """Seconds that pass only when a test moves them on (:meth:`advance`), and a microsecond
    at each reading, as a monotonic clock never reads the same twice; a run's ``clock=``."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1e-6
        return self.now

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass."""
        self.now += seconds


def steady_probe(load: list[float], measure: bool = False) -> type[CostProbe]:
    """A trainer's cost probe (``probe=``) whose costs are fixed sizes (a step 0.2 s, a
    validation and the test 0.1 s each, a checkpoint 0.05 s, the set-up 1 s, the measurement
    0.5 s) times the machine's load, ``load``'s last value (append to it to make the next
    measurement slower). With ``measure``, the real measurement runs first (its steps and
    batches, which leave the run's RNG as it was) and its timings are dropped."""

    class SteadyProbe(CostProbe):
        def measure(self) -> RunCosts:
            if measure:
                super().measure()
            x = load[-1]
            steps, every = self.data.steps_per_epoch, self.launch.config.eval_every
            return RunCosts(0.2 * x, 0.1 * x, 0.1 * x, 0.05 * x, steps, every, 1.0 * x, 0.5)

    return SteadyProbe


# ---- Hugging Face's Graphormer (the oracle of the published weights)
def batch_of(smiles: list[str], multi_hop_max_dist: int):
    """The OGB-featurised batch of ``smiles`` with ``multi_hop_max_dist`` hops."""
    transform = GraphormerFeatures(multi_hop_max_dist)
    graphs = [transform(featurize_smiles(s, "ogb")) for s in smiles]
    return collate(graphs, multi_hop_max_dist)


def hf_config(size: str, layers: int, pre_ln: bool, hops: int, outputs: int, **kw):
    """Hugging Face config of one of this library's preset sizes, with OGB-sized tables (needs
    ``transformers``)."""
    from transformers.models.deprecated.graphormer import configuration_graphormer

    c = fit_tables(get_preset(size, multi_hop_max_dist=hops), "ogb")
    return configuration_graphormer.GraphormerConfig(
        num_classes=outputs,
        num_atoms=c.num_atoms - 1,
        num_edges=c.num_edges - 1,
        num_in_degree=c.num_degree,
        num_out_degree=c.num_degree,
        num_spatial=c.num_spatial,
        num_edge_dis=c.num_edge_dis,
        multi_hop_max_dist=hops,
        num_hidden_layers=layers,
        embedding_dim=c.hidden_dim,
        ffn_embedding_dim=c.ffn_dim,
        num_attention_heads=c.num_heads,
        pre_layernorm=pre_ln,
        apply_graphormer_init=True,
        **kw,
    )


def hf_model(config, seed: int = 0):
    """Random Hugging Face Graphormer in eval mode; LayerNorms and biases moved off their
    initial values so that every tensor matters (padding rows stay zero; needs ``transformers``)."""
    from transformers.models.deprecated.graphormer import modeling_graphormer

    torch.manual_seed(seed)
    model = modeling_graphormer.GraphormerForGraphClassification(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def hf_predict(model, batch) -> torch.Tensor:
    """A Hugging Face Graphormer's outputs on one of this library's batches."""
    with torch.no_grad():
        return model(**hf_inputs(batch)).logits


# ---- the applicability domain's molecules
# Marketed drugs: the training molecules and, from the same population, held-out ones whose
# elements, charges and sizes all occur in training.
DRUGS_TRAIN = [
    "CC(=O)Oc1ccccc1C(=O)O",  # aspirin
    "CC(=O)Nc1ccc(O)cc1",  # paracetamol
    "CC(C)Cc1ccc(cc1)C(C)C(=O)O",  # ibuprofen
    "Cn1cnc2c1c(=O)n(C)c(=O)n2C",  # caffeine
    "COc1ccc2cc(ccc2c1)C(C)C(=O)O",  # naproxen
    "OC(=O)Cc1ccccc1Nc1c(Cl)cccc1Cl",  # diclofenac
    "CN(C)CCCN1c2ccccc2Sc2ccc(Cl)cc21",  # chlorpromazine
    "CN1C(=O)CN=C(c2ccccc2)c2cc(Cl)ccc21",  # diazepam
    "CNCCC(Oc1ccc(cc1)C(F)(F)F)c1ccccc1",  # fluoxetine
    "CN(C)C(=N)N=C(N)N",  # metformin
    "CC(C)NCC(O)COc1ccc(CC(N)=O)cc1",  # atenolol
    "CC(C)NCC(O)COc1cccc2ccccc12",  # propranolol
    "CCN(CC)CC(=O)Nc1c(C)cccc1C",  # lidocaine
    "COC(=O)C1=C(C)NC(C)=C(C1c1ccccc1[N+](=O)[O-])C(=O)OC",  # nifedipine
    "Cc1cc(NS(=O)(=O)c2ccc(N)cc2)no1",  # sulfamethoxazole
    "OC(=O)c1cn(C2CC2)c2cc(N3CCNCC3)c(F)cc2c1=O",  # ciprofloxacin
    "COc1ccc2[nH]c(nc2c1)S(=O)Cc1ncc(C)c(OC)c1C",  # omeprazole
    "CC(=O)CC(c1ccccc1)c1c(O)c2ccccc2oc1=O",  # warfarin
    "O=C1NC(=O)C(N1)(c1ccccc1)c1ccccc1",  # phenytoin
    "NC(=O)N1c2ccccc2C=Cc2ccccc12",  # carbamazepine
    "OC1(CCN(CCCC(=O)c2ccc(F)cc2)CC1)c1ccc(Cl)cc1",  # haloperidol
    "CC(C)(C)NCC(O)c1ccc(O)c(CO)c1",  # salbutamol
    "CC(C(=O)O)c1cccc(c1)C(=O)c1ccccc1",  # ketoprofen
    "COc1ccc2n(C(=O)c3ccc(Cl)cc3)c(C)c(CC(=O)O)c2c1",  # indomethacin
    "Cc1ccc(cc1)-c1cc(nn1-c1ccc(cc1)S(N)(=O)=O)C(F)(F)F",  # celecoxib
    "CCCCc1nc(Cl)c(CO)n1Cc1ccc(cc1)-c1ccccc1-c1nn[nH]n1",  # losartan
    "CCCc1nn(C)c2c1nc([nH]c2=O)-c1cc(ccc1OCC)S(=O)(=O)N1CCN(C)CC1",  # sildenafil
    "CCC(=C(c1ccccc1)c1ccc(OCCN(C)C)cc1)c1ccccc1",  # tamoxifen
    "COc1ccc(CCN(C)CCCC(C#N)(C(C)C)c2ccc(OC)c(OC)c2)cc1OC",  # verapamil
    "CNC(=C[N+](=O)[O-])NCCSCc1ccc(CN(C)C)o1",  # ranitidine
    "COc1cc(Cc2cnc(N)nc2N)cc(OC)c1OC",  # trimethoprim
    "NS(=O)(=O)c1cc(C(=O)O)c(NCc2ccco2)cc1Cl",  # furosemide
]
DRUGS_HELD_OUT = [
    "Cn1c2c(c(=O)n(C)c1=O)[nH]cn2",  # theophylline
    "COCCc1ccc(OCC(O)CNC(C)C)cc1",  # metoprolol
    "Clc1cccc(Cl)c1NC1=NCCN1",  # clonidine
    "Nc1nc2n(COCCO)cnc2c(=O)[nH]1",  # acyclovir
    "NS(=O)(=O)c1cc2c(cc1Cl)NCNS2(=O)=O",  # hydrochlorothiazide
    "CCOC(=O)C1=C(COCCN)NC(C)=C(C1c1ccccc1Cl)C(=O)OC",  # amlodipine
    "Cc1ccc(cc1)-c1nc2ccc(C)cn2c1CC(=O)N(C)C",  # zolpidem
    "CN(C)CCCC1(OCc2cc(ccc12)C#N)c1ccc(F)cc1",  # citalopram
    "CNC1CCC(c2ccc(Cl)c(Cl)c2)c2ccccc12",  # sertraline
    "COc1ccc(cc1)C(CN(C)C)C1(O)CCCCC1",  # venlafaxine
    "COc1cc2CC(CC3CCN(Cc4ccccc4)CC3)C(=O)c2cc1OC",  # donepezil
    "O=C1CN(C(=O)N1)/N=C/c1ccc(o1)[N+](=O)[O-]",  # nitrofurantoin
]


def mols_of(smiles: list[str]) -> list[Chem.Mol]:
    """RDKit's molecules of ``smiles`` (each must parse)."""
    mols = [Chem.MolFromSmiles(s) for s in smiles]
    assert all(m is not None for m in mols)
    return mols


def max_atoms(smiles: list[str]) -> int:
    """The most atoms of a molecule of ``smiles``."""
    return max(m.GetNumAtoms() for m in mols_of(smiles))


def reference_nearest(train: list[str], query: list[str]) -> np.ndarray:
    """Plain reference: each query molecule's highest Tanimoto similarity to ``train``
    (RDKit's Morgan fingerprints of radius 2)."""
    """RDKit's own answer: the largest ``BulkTanimotoSimilarity`` over the training set."""
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=FINGERPRINT_BITS)
    fps = [gen.GetFingerprint(m) for m in mols_of(train)]
    return np.array(
        [
            max(DataStructs.BulkTanimotoSimilarity(gen.GetFingerprint(m), fps))
            for m in mols_of(query)
        ]
    )


# ---- embeddings: a tiny checkpoint and the plain reference
EMBEDDING_HIDDEN = 16
"""The width of :func:`embedding_checkpoint`'s model."""


def embedding_checkpoint(path: Path, mol_features: dict | None = None, seed: int = 0) -> Path:
    """A tiny untrained OGB-featurised model of width :data:`EMBEDDING_HIDDEN` with targets
    ``a`` and ``b`` (with descriptors: ``mol_features``), written to ``path``."""
    torch.manual_seed(seed)
    k = 0 if mol_features is None else len(mol_features["descriptors"]["names"])
    width = EMBEDDING_HIDDEN
    config = make_config(
        "small",
        model_overrides=dict(num_layers=2, hidden_dim=width, ffn_dim=width, num_heads=2),
    )
    model = build_model(config.model, "ogb", 2, num_mol_features=k)
    config.model = model.config
    state = {
        "config": config.to_json(),
        "model": model.state_dict(),
        "featurizer": "ogb",
        "target_names": ["a", "b"],
        "metric": "mae",
        "task_type": "regression",
    }
    if mol_features is not None:
        state["mol_features"] = mol_features
    save_checkpoint(path, state)
    return path


@torch.no_grad()
def embedding_reference(path: Path, smiles: list[str]) -> np.ndarray:
    """Plain reference of the embeddings of ``smiles`` by the checkpoint ``path``, ``[N, d + K]``:
    one molecule at a time, the graph token's final state joined by hand
    to the normalised descriptors; NaN rows where featurising fails."""
    lm = load_model(path, "cpu")
    model, cfg = lm.model.eval(), lm.model.config
    transform = GraphormerFeatures(cfg.multi_hop_max_dist)
    collate = GraphormerCollator(cfg.multi_hop_max_dist, cfg.spatial_pos_max)
    rows = []
    for smi in smiles:
        try:
            graph = transform(featurize_smiles(smi, lm.featurizer))
        except ValueError:
            rows.append(np.full(cfg.hidden_dim + cfg.num_mol_features, np.nan, np.float32))
            continue
        h = model.encoder.forward_graphs(collate([graph]))[0]  # [d]
        if cfg.num_mol_features:
            norm = DescriptorNormalizer.from_dict(lm.mol_features["descriptors"])
            m = torch.from_numpy(norm.transform(compute_descriptors([smi]))[0]).float()
            h = torch.cat([h, m])
        rows.append(h.numpy())
    return np.stack(rows)


# ---- comparing two runs; hooking the training loss
def assert_same_run(a: Path, b: Path) -> None:
    """Two runs' folders hold the same metrics, the same last weights and as many history rows."""
    ma = json.loads((a / "metrics.json").read_text())
    mb = json.loads((b / "metrics.json").read_text())
    for key in ("steps", "epochs", "best_epoch"):
        assert ma[key] == mb[key]
    assert mb["best_valid_mae"] == pytest.approx(ma["best_valid_mae"], abs=1e-6)
    assert mb["test_mae"] == pytest.approx(ma["test_mae"], abs=1e-6)
    wa = load_checkpoint(a / "last.pt")["model"]
    wb = load_checkpoint(b / "last.pt")["model"]
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    assert (a / "history.csv").read_text().count("\n") == (b / "history.csv").read_text().count(
        "\n"
    )


def loss_hook(monkeypatch, at_call: int, action) -> None:
    """Run ``action`` inside the ``at_call``-th training loss computation (1-based)."""
    real = steps.masked_loss
    calls = {"n": 0}

    def hooked(pred, target, kind="l1", scale=None):
        if torch.is_grad_enabled():  # training steps only
            calls["n"] += 1
            if calls["n"] == at_call:
                action()
        return real(pred, target, kind, scale)

    monkeypatch.setattr(steps, "masked_loss", hooked)


# ---- a small Graphormer configuration
def tiny_config(**kw) -> GraphormerConfig:
    """The ``zinc-slim`` preset at 3 layers of width 32 (4 heads), no dropout; ``kw`` overrides."""
    base = dict(
        num_layers=3,
        hidden_dim=32,
        ffn_dim=32,
        num_heads=4,
        dropout=0.0,
        attention_dropout=0.0,
        input_dropout=0.0,
    )
    base.update(kw)
    return get_preset("zinc-slim", **base)


# ---- a small Transformer-XL
def tiny_xl(pe: str, **kw) -> TransformerXL:
    """A small Transformer-XL (2 layers of width 32, segments of 8, a memory of 16) in eval mode."""
    base = dict(vocab_size=40, tgt_len=8, mem_len=16, width=32, layers=2, heads=4, ffn=64)
    base.update(pe=pe, dropout=0.0, init_std=0.1)
    base.update(kw)
    return TransformerXL(TransformerXLConfig(**base)).eval()


def perturb_tables(model: TransformerXL) -> None:
    """Move B and C away from their initial values so the tests see them act."""
    gen = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for t in model.modules():
            if isinstance(t, RelativePositionTable):
                t.weight.add_(0.5 * torch.randn(t.weight.shape, generator=gen))


# ---- molecules for prediction (valid, invalid, mixed) and a tiny untrained checkpoint
VALID = [
    "CCO",
    "c1ccccc1",
    "CC(=O)Nc1ccc(O)cc1",
    "C1CCCCC1",
    "CC(C)(C)C",
    "OCCO",
    "c1ccncc1",
    "CC#N",
    "C=CC=C",
    "OC(=O)c1ccccc1",
    "C",
    "CCCCCCCCCC",
    "C1CC1",
    "CCS",
    "NC1CCCCC1",
    "COc1ccccc1",
    "c1ccc2ccccc2c1",
    "CC(O)C",
    "O=C(O)CCC(=O)O",
    "CN1CCC[C@H]1c1cccnc1",
]


BAD = ["not_a_smiles((", "", "C1CC", "c1cccc1"]


SALT = "CC(=O)[O-].[Na+]"  # disconnected: valid for OGB, an unknown atom type for ZINC


SELENIUM = "C[Se]C"  # valid for OGB, an unknown atom type for ZINC


def mixed_rows() -> list[str]:
    """Valid and invalid rows interleaved, invalid ones at the start, middle and end."""
    rows = [BAD[0], *VALID[:7], BAD[1], SALT, *VALID[7:13], BAD[2], SELENIUM, *VALID[13:]]
    return [*rows, BAD[3], *VALID[:3], BAD[0]]


MIXED = mixed_rows()

EMBEDDING_ROWS = [BAD[0], *VALID[:8], BAD[2], *VALID[8:], *VALID[::-1], BAD[1]]
"""Rows for the embedding tests: invalid ones at the start, middle and end, and enough rows
for several chunks and windows."""


def tiny_checkpoint(path: Path, featurizer: str, task_type: str = "regression", seed: int = 0):
    """A tiny untrained model saved as a checkpoint of this library."""
    torch.manual_seed(seed)
    config = make_config(
        "small",
        model_overrides=dict(
            num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=2, attention="urpe"
        ),
    )
    names = ["a", "b"]
    model = build_model(config.model, featurizer, len(names))
    config.model = model.config
    save_checkpoint(
        path,
        {
            "config": config.to_json(),
            "model": model.state_dict(),
            "featurizer": featurizer,
            "target_names": names,
            "metric": "rocauc" if task_type == "binary" else "mae",
            "task_type": task_type,
        },
    )
    return path


# ---- the operators that make the host wait for the device
SYNCING = {
    "_local_scalar_dense",
    "item",
    "is_nonzero",
    "nonzero",
    "masked_select",
    "unique",
    "_unique",
    "_unique2",
    "unique_consecutive",
    "equal",
}


# ---- random attention inputs
def attention_inputs(seed=0, b=3, h=4, n=7, d=8):
    """Random ``q, k, v`` of shape (b, h, n, d), a bias B (b, h, n, n) with some -inf, a scale
    C (b, h, n, n) in [0, 2) and a key padding mask (b, n) that pads the first two batches."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g) for _ in range(3))
    bias = torch.randn(b, h, n, n, generator=g)
    bias[torch.rand(b, h, n, n, generator=g) < 0.2] = float("-inf")
    scale = torch.rand(b, h, n, n, generator=g) * 2
    kpm = torch.zeros(b, n, dtype=torch.bool)
    kpm[0, -2:] = True
    kpm[1, -1] = True
    return q, k, v, bias, scale, kpm


# ---- SD files
BROKEN = 3


def broken_sdf_block() -> str:
    """An SD record RDKit cannot read (a pentafluorinated carbon), with a ``pIC50``."""
    mol = Chem.MolFromSmiles("C(F)(F)(F)(F)F", sanitize=False)
    mol.SetProp("_Name", "pentafluoro")
    return Chem.MolToMolBlock(mol) + "> <pIC50>\n7.5\n\n"


def write_sdf(path: Path, smiles: list[str], broken: int | None = BROKEN) -> list[str]:
    """An SD file of ``smiles`` (titles ``mol<i>``, an SD property ``pIC50`` and ``series``;
    record ``broken`` replaced by one RDKit cannot read), gzip when the name ends in .gz; the
    records' titles."""
    parts, titles = [], []
    for i, smi in enumerate(smiles):
        if i == broken:
            parts.append(broken_sdf_block() + "$$$$\n")
            titles.append("pentafluoro")
            continue
        mol = Chem.MolFromSmiles(smi)
        title = f"mol{i}"
        mol.SetProp("_Name", title)
        text = Chem.MolToMolBlock(mol)
        heavy = mol.GetNumHeavyAtoms()
        parts.append(f"{text}>  <pIC50>  (1)\n{heavy}\n\n> <series>\nS{i % 2}\n\n$$$$\n")
        titles.append(title)
    data = "".join(parts)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(data)
    else:
        path.write_text(data)
    return titles


# ---- static-shape training steps; a stand-in capture backend
HOPS = 5


def graphs_with_targets(count: int = 40, seed: int = 0) -> list:
    """``count`` graphs of the zoo, each with one random target."""
    graphs = graph_zoo(seed=seed, count=count)
    gen = torch.Generator().manual_seed(seed)
    for g in graphs:
        g.y = torch.randn(1, generator=gen)
    return graphs


def step_setup(attention: str, graphs, seed: int = 0):
    """A tiny model of ``attention`` in training mode with its optimizer, schedule, fp32
    precision and step totals on the CPU."""
    cfg = tiny_config(attention=attention, multi_hop_max_dist=HOPS)
    torch.manual_seed(seed)
    model = Graphormer(cfg).train()
    opt = make_optimizer(model.parameters(), 1e-3, 0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: linear_schedule(s, 2, 10, 1e-3, 1e-9) / 1e-3
    )
    cpu = torch.device("cpu")
    return model, opt, sched, Precision("fp32", cpu), StepTotals(cpu)


def same_shape_batches(graphs, count: int, size: int = 8, seed: int = 1) -> list:
    """``count`` static batches of the same ``size`` graphs in shuffled orders."""
    gen = torch.Generator().manual_seed(seed)
    shapes = StaticShapes(size + 2, HOPS)  # two empty graphs in each
    out = []
    for _ in range(count):
        order = torch.randperm(size, generator=gen).tolist()
        out.append(collate([graphs[i] for i in order], HOPS, static=shapes))
    return out


def bound_body(model, opt, precision, totals, loss="l1"):
    """The training step's body on ``model`` (``step_body`` with these arguments bound), as a
    captured step takes it."""

    def body(batch, set_to_none, step):
        return step_body(
            model, batch, opt, precision, totals, step, loss, 5.0, None, set_to_none, set_to_none
        )

    return body


def stand_in_capture(monkeypatch, backend_type: type = EagerGraphs) -> list:
    """Runs started from now on capture with a stand-in backend (a new ``backend_type`` per
    run), on any device; returns the list of the backends made."""
    backends: list = []

    def backend(config, ctx, precision):
        backends.append(backend_type())
        return backends[-1]

    monkeypatch.setattr(training_run, "Trainer", functools.partial(Trainer, backend=backend))
    return backends


# ---- ZINC's raw files
# Real ZINC-like molecules covering charges, stereo centres, aromatic N-H, rings and S/Cl/Br/F.
ZINC_FIXTURE = [
    "C[C@@]1(c2ccc(F)cc2)NC(=O)N(CN2CCN(S(=O)(=O)c3ccc4ccccc4c3)CC2)C1=O",
    "COCc1ccc(C(=O)Oc2ccc(F)cc2)cc1",
    "O=c1c([N+](=O)[O-])cccn1Cc1ccc(F)cc1Cl",
    "O=C(CSc1ccc2ccccc2n1)NNC(=O)c1cccc([N+](=O)[O-])c1",
    "C[NH+]1CCC(NC(=O)c2ccc(Br)s2)CC1",
    "Cc1cc2c(cc1C)N(Cc1ccc(Cl)cc1)[C@@H](C1=CCC(=O)N=C1)N2",
    "O=C(Nc1cccc(-n2cnnn2)c1)c1cccc2[nH]ccc12",
    "[NH3+]CCCC(=O)N1C[C@@H]2C[C@H](C1)Cn1c2cccc1=O",
    "CC#CCOc1ccc(C[NH2+]C2CC2)cc1",
    "CCN(CC)C(=O)c1ccc([O-])cc1",
]


def zinc_raw_entry(smiles: str) -> dict:
    """One molecule as PyG's raw ZINC pickles store it (atom types, a dense bond-type
    matrix, the target)."""
    g = zinc_mol_to_graph(smiles)
    n = g.num_nodes
    adj = torch.zeros(n, n, dtype=torch.long)
    adj[g.edge_index[0], g.edge_index[1]] = g.edge_attr
    return {
        "num_atom": n,
        "atom_type": g.x.view(-1).clone(),
        "bond_type": adj,
        "logP_SA_cycle_normalized": torch.tensor([penalized_logp(smiles)]),
    }


def write_zinc_raw(root: Path) -> dict[str, list[str]]:
    """PyG's raw layout: per-split pickles of molecule dicts + comma-separated subset indices."""
    raw = root / "raw"
    raw.mkdir(parents=True)
    splits = {"train": ZINC_FIXTURE[:6], "val": ZINC_FIXTURE[6:8], "test": ZINC_FIXTURE[8:]}
    subset_index = {"train": [0, 2, 3, 5], "val": [1], "test": [0, 1]}
    for split, smiles in splits.items():
        with open(raw / f"{split}.pickle", "wb") as f:
            pickle.dump([zinc_raw_entry(s) for s in smiles], f)
        (raw / f"{split}.index").write_text(",".join(map(str, subset_index[split])) + "\n")
    return {s: [splits[s][i] for i in subset_index[s]] for s in splits} | {
        f"full-{s}": splits[s] for s in splits
    }


# ---- the sequence commands
def run_tiny_command(parser: argparse.ArgumentParser, run, words: str, out, capsys) -> dict:
    """Parse ``words`` plus ``--out out``, check they select ``run``, run it (exit status 0)
    and return the JSON summary it printed."""
    args = parser.parse_args(words.split() + ["--out", str(out)])
    assert args.func is run
    assert run(args) == 0
    return json.loads(capsys.readouterr().out)


# ---- interrupting and counting the store's chunk writes
@contextlib.contextmanager
def interrupted_chunk_writes(monkeypatch, after: int) -> Iterator[list[str]]:
    """A store build in the ``with`` block stops (``KeyboardInterrupt``, expected) once
    ``after`` chunks are written; yields the written chunks' names. The writer is real again
    afterwards."""
    real_write = chunks_module.write_chunk
    written: list[str] = []

    def interrupted(chunk_dir, arrays, meta):
        if len(written) == after:
            raise KeyboardInterrupt
        real_write(chunk_dir, arrays, meta)
        written.append(Path(chunk_dir).name)

    monkeypatch.setattr(chunks_module, "write_chunk", interrupted)
    with pytest.raises(KeyboardInterrupt):
        yield written
    monkeypatch.setattr(chunks_module, "write_chunk", real_write)


def count_chunk_rows(monkeypatch) -> list[int]:
    """The list that receives the first row of every chunk featurised from now on."""
    rows: list[int] = []
    real = chunks_module.featurize_chunk

    def counting(*args, **kwargs):
        rows.append(int(kwargs["rows"][0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(chunks_module, "featurize_chunk", counting)
    return rows


# ---- prediction inputs in each file format; a checkpoint with a training record
def domain_checkpoint(path: Path, task_type: str = "regression") -> Path:
    """The tiny checkpoint of the stream tests, with a training record of ``VALID[:12]``
    (so rows are ``in``, ``out: ...`` and have a nearest similarity)."""
    tiny_checkpoint(path, "ogb", task_type)
    state = load_checkpoint(path)
    state["domain"] = record_of_smiles(VALID[:12]).to_dict()
    save_checkpoint(path, state)
    return path


def named_inputs(folder: Path, smiles: list[str]) -> dict[str, Path]:
    """``smiles`` as a CSV with a ``name`` (``m<i>``) and an ``other`` column, a .csv.gz, a .smi
    with names (``mol <i>``) and a .txt of SMILES alone, in ``folder``."""
    paths = {}
    table = io.StringIO()
    w = csv.writer(table, lineterminator="\n")
    w.writerow(["name", "smiles", "other"])
    for i, s in enumerate(smiles):
        w.writerow([f"m{i}", s, i])
    paths["csv"] = folder / "in.csv"
    paths["csv"].write_text(table.getvalue())
    paths["csv.gz"] = folder / "in.csv.gz"
    with gzip.open(paths["csv.gz"], "wt") as fh:
        fh.write(table.getvalue())
    paths["smi"] = folder / "in.smi"
    # a name may follow the SMILES; an empty SMILES is a blank line
    paths["smi"].write_text("".join(f"{s}\tmol {i}\n" if s else "\n" for i, s in enumerate(smiles)))
    paths["txt"] = folder / "in.txt"
    paths["txt"].write_text("smiles\n" + "".join(f"{s}\n" for s in smiles))
    return paths


def input_files(folder: Path, smiles: list[str]) -> dict[str, Path]:
    """``smiles`` as a CSV (with other columns), a .csv.gz, a .smi with names and Parquet."""
    folder.mkdir(parents=True, exist_ok=True)
    table = io.StringIO()
    w = csv.writer(table, lineterminator="\n")
    w.writerow(["id", "smiles"])
    w.writerows([i, s] for i, s in enumerate(smiles))
    paths = {"csv": folder / "a.csv", "csv.gz": folder / "b.csv.gz", "smi": folder / "c.smi"}
    paths["csv"].write_text(table.getvalue())
    with gzip.open(paths["csv.gz"], "wt") as fh:
        fh.write(table.getvalue())
    paths["smi"].write_text("".join(f"{s}\tmol {i}\n" if s else "\n" for i, s in enumerate(smiles)))
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return paths
    paths["parquet"] = folder / "d.parquet"
    pq.write_table(pa.table({"id": list(range(len(smiles))), "smiles": smiles}), paths["parquet"])
    return paths


# ---- PCQM4M's file layout
PCQM_SMILES = [
    "CCO",
    "c1ccccc1",
    "CC(=O)Nc1ccc(O)cc1",
    "CN1C=NC2=C1C(=O)N(C(=O)N2C)C",
    "C[C@H](N)C(=O)O",
    "F/C=C/F",
    "[NH3+]CC(=O)[O-]",
    "[Na+].[Cl-]",
    "C",
    "CCCCCCCCCCCC",
    "c1ccc2ccccc2c1",
    "O=C(O)c1ccccc1O",
    "CC(C)Cc1ccc(cc1)C(C)C(=O)O",
    "C1CCC2(CC1)OCCO2",
    "CCOC(=O)C1=CC=CC=C1N",
    "c1ccncc1",
    "c1ccsc1",
    "CC#N",
    "C=CC=C",
    "OC1CCCCC1",
    "NC1CCCCC1",
    "CCS",
    "CC(O)C",
    "CCN(CC)CC",
    "O=C1CCCC1",
    "c1ccccc1Cl",
    "Brc1ccc(Br)cc1",
    "CC(C)(C)c1ccccc1",
    "OCC(O)CO",
    "C1=CC=C(C=C1)C=O",
    "COc1ccccc1OC",
    "CC(=O)OC1=CC=CC=C1C(=O)O",
    "c1ccc(cc1)-c1ccccc1",
    "CC1=CC(=O)C=CC1=O",
    "N#Cc1ccccc1",
    "CC(N)Cc1ccccc1",
]


def write_lsc_layout(
    root: Path,
    smiles: list[str],
    splits: dict[str, list[int]],
    folder: str = "pcqm4m-v2",
    release: bool = True,
) -> np.ndarray:
    """``<root>/<folder>/raw/data.csv.gz`` + ``split_dict.pt`` as OGB ships them.

    Test rows get an empty gap; the others a gap computed from the PCQM_SMILES. Returns the gaps.
    """
    base = root / folder
    (base / "raw").mkdir(parents=True)
    test_rows = {i for name, rows in splits.items() if name.startswith("test") for i in rows}
    gaps = np.array(
        [np.nan if i in test_rows else 3.0 + 0.1 * len(s) + 0.01 * i for i, s in enumerate(smiles)]
    )
    table = pd.DataFrame({"idx": np.arange(len(smiles)), "smiles": smiles, "homolumogap": gaps})
    with gzip.open(base / "raw" / "data.csv.gz", "wt") as fh:
        table.to_csv(fh, index=False)
    torch.save(
        {k: np.asarray(v, dtype=np.int64) for k, v in splits.items()}, base / "split_dict.pt"
    )
    if release:
        (base / "RELEASE_v1.txt").write_text("fixture\n")
    return gaps


def write_ogbg_layout(root: Path, name: str, smiles: list[str], labels: np.ndarray) -> Path:
    """OGB's csv_mol_download layout for ``name`` (as ``master.csv`` describes it)."""
    folder = root / "_".join(name.split("-"))
    raw = folder / "raw"
    raw.mkdir(parents=True)
    graphs = [smiles2graph(s) for s in smiles]

    def save(file: str, rows) -> None:
        pd.DataFrame(rows).to_csv(raw / file, header=False, index=False, compression="gzip")

    # one row per bond (OGB adds the inverse edges itself: add_inverse_edge=True)
    save("edge.csv.gz", np.concatenate([g["edge_index"][:, ::2] for g in graphs], axis=1).T)
    save("edge-feat.csv.gz", np.concatenate([g["edge_feat"][::2] for g in graphs]))
    save("node-feat.csv.gz", np.concatenate([g["node_feat"] for g in graphs]))
    save("num-node-list.csv.gz", [g["num_nodes"] for g in graphs])
    save("num-edge-list.csv.gz", [g["edge_index"].shape[1] // 2 for g in graphs])
    save("graph-label.csv.gz", labels)
    n = len(smiles)
    split = folder / "split" / "scaffold"
    split.mkdir(parents=True)
    for part, idx in (
        ("train", range(0, n - 12)),
        ("valid", range(n - 12, n - 6)),
        ("test", range(n - 6, n)),
    ):
        pd.DataFrame(list(idx)).to_csv(split / f"{part}.csv.gz", header=False, index=False)
    (folder / "RELEASE_v1.txt").write_text("fixture\n")
    (folder / "mapping").mkdir()
    mapping = pd.DataFrame({"HIV_active": labels[:, 0], "smiles": smiles, "mol_id": range(n)})
    mapping.to_csv(folder / "mapping" / "mol.csv.gz", index=False, compression="gzip")
    return folder


def v2_splits(n: int) -> dict[str, list[int]]:
    """PCQM4Mv2's four splits over ``n`` rows: the test rows are the last 6, ``test-dev`` in
    reverse order."""
    rows = list(range(n))
    return {
        "train": rows[0 : n - 12],
        "valid": rows[n - 12 : n - 6],
        "test-dev": rows[n - 6 : n - 3][::-1],  # order must follow the split file
        "test-challenge": rows[n - 3 :],
    }


# ---- small models for the explanations
MOLS = ["CC(=O)Nc1ccc(O)cc1", "c1ccccc1Cl", "CCN(CC)CCOC(=O)c1ccccc1", "OCC(O)CO"]


def random_tiny_model(seed: int = 0, scale: float = 0.2, **overrides) -> Graphormer:
    """A small random model with weights large enough to be far from linear."""
    torch.manual_seed(seed)
    sizes = dict(num_layers=2, hidden_dim=16, ffn_dim=16, num_heads=2, multi_hop_max_dist=5)
    config = GraphormerConfig(**{**sizes, **overrides})
    model = Graphormer(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, scale)
    t = config.num_targets
    model.set_target_scaling([0.0] * t, [100.0] * t)  # prediction - baseline of about 1
    return model


def additive_model(seed: int = 5) -> Graphormer:
    """A model whose output is a sum of per-atom terms by construction: one pre-LN layer
    with uniform attention (no query/key, no bias B), no feed-forward, no final norm."""
    model = random_tiny_model(seed=seed, scale=0.5, num_layers=1, final_norm=False)
    with torch.no_grad():
        layer = model.encoder.encoder.layers[0]
        for lin in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.fc2):
            lin.weight.zero_()
            lin.bias.zero_()
        for p in model.encoder.attention_bias.parameters():
            p.zero_()
    return model
