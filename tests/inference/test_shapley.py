"""Shapley values of atoms: exact on all orderings against the subset formula, exactly complete
when sampled, exact on an additive model, and shared orderings across an ensemble."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from graphormer_urpe.datasets.featurizers.molecule_graphs import featurize_smiles
from graphormer_urpe.inference.explain.explainer import Explainer
from graphormer_urpe.inference.explain.integrated_gradients import masked_predictions
from graphormer_urpe.inference.explain.shapley import shapley_from_orders, shapley_values
from tests.helpers import MOLS, additive_model, random_tiny_model


def plain_value(model, graph, coalition: set[int], n: int) -> float:
    """Reference v(S): atoms outside S set to the molecule's mean atom embedding, the
    descriptors (player n) to 0 unless in S; one coalition at a time."""
    batch, emb = model.embed([graph])
    emb = emb.detach()
    h = emb.clone()
    mean = emb[0, 1:].mean(0)
    for i in range(n):
        if i not in coalition:
            h[0, 1 + i] = mean
    mol = getattr(batch, "mol_features", None)
    if mol is not None:
        mol = mol if n in coalition else torch.zeros_like(mol)
    with torch.no_grad():
        return float(model.forward_embedded(batch, h, mol)[0, 0])


def plain_shapley(model, graph, players: int) -> np.ndarray:
    """Reference: phi_i = sum over S not holding i of |S|!(p-|S|-1)!/p! [v(S+i) - v(S)]."""
    n = graph.num_nodes
    values = {
        frozenset(s): plain_value(model, graph, set(s), n)
        for k in range(players + 1)
        for s in itertools.combinations(range(players), k)
    }
    phi = np.zeros(players)
    for i in range(players):
        for s, v in values.items():
            if i not in s:
                w = math.factorial(len(s)) * math.factorial(players - len(s) - 1)
                phi[i] += w / math.factorial(players) * (values[s | {i}] - v)
    return phi


@pytest.mark.parametrize("descriptors", [False, True])
def test_all_orderings_give_the_exact_shapley_values(descriptors):
    k = 3
    model = random_tiny_model(seed=7, num_mol_features=k if descriptors else 0)
    graph = featurize_smiles("CC(=O)O", "zinc")  # 4 atoms
    if descriptors:
        graph.mol_x = torch.randn(1, k)
    players = graph.num_nodes + descriptors
    orders = np.array(list(itertools.permutations(range(players))))
    a = shapley_from_orders(model, graph, orders)
    truth = plain_shapley(model, graph, players)
    assert a.atoms[:, 0] == pytest.approx(truth[: graph.num_nodes], abs=1e-5)
    if descriptors:
        assert a.descriptors[0] == pytest.approx(truth[-1], abs=1e-5)
    assert np.ptp(truth) > 1e-3  # the atoms differ: the check can fail


@pytest.mark.parametrize("permutations", [1, 2, 8])
def test_sampled_values_are_exactly_complete(permutations):
    k = 4
    model = random_tiny_model(seed=8, num_mol_features=k)
    graph = featurize_smiles(MOLS[2], "zinc")
    graph.mol_x = torch.randn(1, k)
    a = shapley_values(model, graph, permutations=permutations, seed=3)
    assert abs(a.prediction[0] - a.baseline[0]) > 1e-2
    assert np.abs(a.gap).max() <= 1e-9 * max(1.0, float(np.abs(a.prediction).max()))
    again = shapley_values(model, graph, permutations=permutations, seed=3)
    assert np.array_equal(a.atoms, again.atoms)  # seeded: reproducible


def test_an_additive_model_gets_each_atoms_own_term_from_any_ordering():
    model = additive_model(seed=9)
    for smi in MOLS[:3]:
        graph = featurize_smiles(smi, "zinc")
        n = graph.num_nodes
        alone = masked_predictions(model, graph, ~np.eye(n, dtype=bool))[:, 0]
        base = masked_predictions(model, graph, np.ones((1, n), dtype=bool))[0, 0]
        a = shapley_values(model, graph, permutations=2, seed=1)
        truth = alone - base  # float32 outputs of tens of units: compare to their scale
        assert a.atoms[:, 0] == pytest.approx(truth, abs=1e-5 * np.abs(truth).max())


def test_explainer_shapley_ensemble_is_the_members_mean_and_classification_uses_logits():
    members = [random_tiny_model(seed=s) for s in (3, 4)]
    opts = {"method": "shapley", "permutations": 4, "seed": 5}
    one = [Explainer([m], "zinc", ["y"], **opts).explain(MOLS[3]) for m in members]
    both = Explainer(members, "zinc", ["y"], **opts).explain(MOLS[3])
    assert both.contributions == pytest.approx((one[0].contributions + one[1].contributions) / 2)
    assert both.completeness_error[0] <= 1e-9
    binary = Explainer([members[0]], "zinc", ["active"], task_type="binary", **opts)
    e = binary.explain(MOLS[1])
    logit = float(members[0]([featurize_smiles(MOLS[1], "zinc")])[0, 0].detach())
    assert e.prediction[0] == pytest.approx(logit, abs=1e-5)
    with pytest.raises(ValueError, match="unknown explanation method"):
        Explainer(members, "zinc", ["y"], method="lime")
