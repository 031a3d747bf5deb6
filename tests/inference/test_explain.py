"""Explanations: completeness of integrated gradients, the descriptor term, ensembles, the
faithfulness measures, and the arrays against the written CSV."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

from graphormer_urpe.datasets.featurizers.molecule_graphs import featurize_smiles
from graphormer_urpe.graph.model import Graphormer
from graphormer_urpe.inference.explain.explainer import Explainer
from graphormer_urpe.inference.explain.faithfulness import (
    crippen_atom_contributions,
    deletion_curve,
)
from graphormer_urpe.inference.explain.integrated_gradients import (
    gauss_legendre,
    integrated_gradients,
    masked_predictions,
)
from graphormer_urpe.inference.explain.writing import write_explanations
from graphormer_urpe.inference.rank_correlation import spearman
from tests.helpers import MOLS, additive_model, random_tiny_model


def plain_ig(model: Graphormer, graph, target: int, steps: int = 80) -> np.ndarray:
    """Reference: integrated gradients by the midpoint rule, one path point at a time, on a
    grid ten times finer over ``[0, 0.1]`` (where LayerNorms of small inputs move most)."""
    batch, emb = model.embed([graph])
    emb = emb.detach()
    base = emb.clone()
    base[:, 1:] = emb[:, 1:].mean(1, keepdim=True)  # the default baseline: the mean atom
    total = torch.zeros(emb.shape[1], dtype=torch.float64)
    half = steps // 2
    points = [(0.1 * (k + 0.5) / half, 0.1 / half) for k in range(half)]
    points += [(0.1 + 0.9 * (k + 0.5) / half, 0.9 / half) for k in range(half)]
    for alpha, width in points:
        h = (base + alpha * (emb - base)).requires_grad_(True)
        out = model.forward_embedded(batch, h)[0, target]
        (g,) = torch.autograd.grad(out, h)
        total += ((g * (emb - base)).sum(-1)[0] * width).double()
    return total[1:].numpy()


def test_gauss_legendre_integrates_polynomials_exactly():
    x, w = gauss_legendre(4)
    for degree in range(8):  # exact up to degree 2n - 1
        assert np.sum(w * x**degree) == pytest.approx(1 / (degree + 1), rel=1e-12)


@pytest.mark.parametrize("attention, baseline", [("graphormer", "mean"), ("urpe", "zero")])
def test_regression_contributions_are_complete(attention, baseline):
    model = random_tiny_model(attention=attention, num_targets=2)
    graph = featurize_smiles(MOLS[0], "zinc")
    a = integrated_gradients(model, graph, baseline=baseline)
    delta = a.prediction - a.baseline
    assert np.all(np.abs(delta) > 1e-2)  # a non-trivial check
    assert np.all(np.abs(a.gap) <= 0.01 * np.abs(delta))
    assert a.prediction == pytest.approx(model([graph])[0].detach().numpy(), abs=1e-5)
    assert a.atoms.shape == (graph.num_nodes, 2)


def test_contributions_match_a_plain_midpoint_rule():
    model = random_tiny_model(attention="urpe", num_targets=2)
    graph = featurize_smiles(MOLS[3], "zinc")
    a = integrated_gradients(model, graph)
    ref = plain_ig(model, graph, target=1)
    assert a.atoms[:, 1] == pytest.approx(ref, abs=0.01 * np.abs(ref).sum())


def test_steps_grow_until_complete():
    model = random_tiny_model(scale=0.5)
    graph = featurize_smiles(MOLS[2], "zinc")
    coarse = integrated_gradients(model, graph, steps=1, max_steps=1)
    fine = integrated_gradients(model, graph, steps=1)
    assert fine.steps > 1 and np.abs(fine.gap) < np.abs(coarse.gap)
    assert np.all(np.abs(fine.gap) <= 0.01 * np.abs(fine.prediction - fine.baseline))


def test_classification_is_explained_on_the_logit():
    model = random_tiny_model(seed=1, num_targets=1)
    explainer = Explainer(
        [model], "zinc", ["active"], task_type="binary", method="integrated-gradients"
    )
    e = explainer.explain(MOLS[1])
    logit = float(model([featurize_smiles(MOLS[1], "zinc")])[0, 0].detach())
    assert e.prediction[0] == pytest.approx(logit, abs=1e-5)  # the logit, not a probability
    assert e.completeness_error[0] <= 0.01


def test_descriptor_term_is_separate_and_completes_the_sum():
    k = 5
    model = random_tiny_model(seed=2, num_mol_features=k)
    graph = featurize_smiles(MOLS[0], "zinc")
    graph.mol_x = torch.randn(1, k)
    a = integrated_gradients(model, graph)
    assert a.descriptors is not None and abs(a.descriptors[0]) > 1e-2
    assert np.all(np.abs(a.gap) <= 0.01 * np.abs(a.prediction - a.baseline))
    # a linear head is additive in the descriptors: their term is exactly std * W_m m
    w_m = model.head.weight[:, -k:].detach() * model.target_std[0]
    assert a.descriptors[0] == pytest.approx(float(w_m @ graph.mol_x[0]), rel=1e-4)


def test_ensemble_gives_the_members_mean():
    members = [random_tiny_model(seed=s) for s in (3, 4)]
    fixed = {
        "steps": 8,
        "max_steps": 8,
        "method": "integrated-gradients",
    }  # the same quadrature for members and ensemble
    one = [Explainer([m], "zinc", ["y"], **fixed).explain(MOLS[3]) for m in members]
    both = Explainer(members, "zinc", ["y"], **fixed).explain(MOLS[3])
    mean = (one[0].contributions + one[1].contributions) / 2
    assert both.contributions == pytest.approx(mean, abs=1e-6)
    assert both.prediction == pytest.approx((one[0].prediction + one[1].prediction) / 2)
    # adaptive: complete for the mean, even where the members' differences partly cancel
    assert (
        Explainer(members, "zinc", ["y"], method="integrated-gradients")
        .explain(MOLS[3])
        .completeness_error[0]
        <= 0.01
    )


def test_contributions_rank_atoms_as_a_known_additive_truth():
    model = additive_model()
    rng = np.random.default_rng(0)
    ours, shuffled = [], []
    for smi in MOLS:
        graph = featurize_smiles(smi, "zinc")
        n = graph.num_nodes
        e = Explainer([model], "zinc", ["y"], method="integrated-gradients").explain(smi)
        # truth: each atom alone moved from the baseline (exact for an additive model)
        alone = masked_predictions(model, graph, ~np.eye(n, dtype=bool))[:, 0]
        base = masked_predictions(model, graph, np.ones((1, n), dtype=bool))[0, 0]
        truth = alone - base
        assert truth.sum() == pytest.approx(e.prediction[0] - e.baseline[0], rel=1e-4)
        assert e.contributions[:, 0] == pytest.approx(truth, abs=0.01 * np.abs(truth).sum())
        ours.append(spearman(e.contributions[:, 0], truth))
        shuffled.append(spearman(rng.permutation(e.contributions[:, 0]), truth))
    # near-equal terms (a ring's carbons) may swap ranks: the mean, not every molecule, is ~1
    assert np.mean(ours) > 0.9
    assert np.mean(shuffled) < 0.5


def test_spearman_matches_a_plain_rank_formula():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=12), rng.normal(size=12)
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    plain = 1 - 6 * np.sum((ra - rb) ** 2) / (12 * (12**2 - 1))
    assert spearman(a, b) == pytest.approx(plain)
    assert np.isnan(spearman(np.ones(3), b[:3]))


def test_crippen_atom_terms_sum_to_logp():
    from rdkit import Chem
    from rdkit.Chem import Crippen

    for smi in MOLS + ["[NH4+]", "C[C@H](N)C(=O)O"]:
        terms = crippen_atom_contributions(smi)
        mol = Chem.MolFromSmiles(smi)
        assert len(terms) == mol.GetNumAtoms()
        assert terms.sum() == pytest.approx(Crippen.MolLogP(mol), abs=1e-6)


def test_deletion_curve_ranks_the_additive_truth_above_random():
    model = additive_model(seed=6)
    smi = MOLS[2]
    graph = featurize_smiles(smi, "zinc")
    e = Explainer([model], "zinc", ["y"], method="integrated-gradients").explain(smi)
    d = deletion_curve(
        lambda m: masked_predictions(model, graph, m)[:, 0],
        e.contributions[:, 0],
        [1, 2, 3],
        np.random.default_rng(0),
    )
    # masking the top-k atoms of an additive model removes exactly their contributions
    top = np.sort(e.contributions[:, 0])[::-1]
    assert d["ranked"] == pytest.approx(np.cumsum(top)[:3], abs=0.01 * top[0])
    assert np.all(d["ranked"] > d["random"])


def test_arrays_match_the_csv(tmp_path):
    explainer = Explainer([random_tiny_model(num_targets=2)], "zinc", ["a", "b"])
    smiles = [MOLS[0], "not a smiles((", MOLS[1]]
    explanations = list(explainer.explain_many(smiles))
    summary = write_explanations(explanations, tmp_path, ["a", "b"])
    assert (summary.molecules, summary.failed, summary.drawn) == (3, 1, 2)
    with open(tmp_path / "atoms.csv") as fh:
        rows = list(csv.DictReader(fh))
    for e in explanations:
        mine = [r for r in rows if r["row"] == str(e.index)]
        if e.error is not None:
            assert len(mine) == 1 and mine[0]["atom_index"] == "" and "parse" in mine[0]["error"]
            continue
        assert [r["element"] for r in mine] == e.elements
        got = np.array([[float(r["a"]), float(r["b"])] for r in mine])
        assert got == pytest.approx(e.contributions, rel=1e-5, abs=1e-9)
    assert (tmp_path / "mol-0.png").exists() and not (tmp_path / "mol-1.png").exists()
    assert (tmp_path / "grid.png").read_bytes()[:4] == b"\x89PNG"
