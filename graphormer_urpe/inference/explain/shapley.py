r"""Shapley values of the atoms of a Graphormer, by sampled permutations (exactly complete).

The players are the molecule's atoms, and the per-molecule features (``--mol-features``) as
one more player. A coalition :math:`S` is the molecule with every atom outside :math:`S`
replaced by the baseline atom (by default the molecule's mean atom embedding, as for
integrated gradients: :mod:`.integrated_gradients`) and, when the descriptor player is
outside :math:`S`, the descriptors at their baseline 0 (the training median after the run's
normalisation). With :math:`v(S)` the model's output on that coalition, atom
:math:`i`'s Shapley value is

.. math::
    \phi_i = \frac{1}{n!} \sum_{\pi} \big[ v(P_i^\pi \cup \{i\}) - v(P_i^\pi) \big],

the mean over orderings :math:`\pi` of the players of its marginal contribution when it
joins the players :math:`P_i^\pi` that come before it. It is estimated on ``permutations``
orderings drawn at random, each with its reverse (antithetic pairs: an atom early in one is
late in the other, which cancels much of the sampling noise).

**Completeness is exact, not approximate.** In every ordering the marginals telescope to
:math:`v(\text{all}) - v(\varnothing)`, the prediction minus the baseline's, so their mean
does too (to rounding), whatever the number of orderings; more orderings only lower the
sampling noise of each atom's value. An ordering of :math:`p` players costs :math:`p - 1`
forward passes of the molecule (the empty and the full coalitions are shared).

Why a second method: integrated gradients follows one straight path from the baseline, on
which every atom moves at once; a Shapley value averages an atom's effect over the contexts
of the other atoms (some real, some baseline), which is what "this atom's part of the
prediction" means for a model with interactions between atoms.
"""

from __future__ import annotations

import numpy as np
from torch import Tensor
from torch_geometric.data import Data

from ...graph.model import Graphormer
from .integrated_gradients import Attribution, coalition_outputs, path_ends

__all__ = ["DEFAULT_PERMUTATIONS", "shapley_from_orders", "shapley_values"]

DEFAULT_PERMUTATIONS = 32
"""Orderings of the players drawn per molecule, unless asked otherwise."""


def _orders(players: int, permutations: int, seed: int) -> np.ndarray:
    """``[P, players]`` orderings: ``permutations // 2`` random ones (at least one) and
    their reverses."""
    rng = np.random.default_rng(seed)
    half = np.stack([rng.permutation(players) for _ in range(max(permutations // 2, 1))])
    return np.concatenate([half, half[:, ::-1]])


def shapley_from_orders(
    model: Graphormer,
    graph: Data,
    orders: np.ndarray,
    baseline: str = "mean",
    features: tuple[Tensor, Tensor, Tensor | None] | None = None,
) -> Attribution:
    """Shapley values as the mean marginal contribution over the given orderings.

    Args:
        model: the model (put in eval mode here).
        graph: one molecule (``mol_x`` ``[1, K]`` with per-molecule features).
        orders: ``[P, p]`` orderings of the players (each row a permutation of ``0..p-1``;
            all ``p!`` of them give the exact Shapley values).
        baseline: ``mean`` or ``zero``.
        features: the molecule's embeddings, baseline and descriptors, when already computed.

    Returns:
        The :class:`~.integrated_gradients.Attribution`; ``steps`` counts the
        forward evaluations of the molecule.
    """
    model.eval()
    features = features or path_ends(model, graph, baseline)
    orders = np.asarray(orders)
    count, players = orders.shape
    rank = np.argsort(orders, axis=1)  # [P, p]: the position of each player in each order
    joined = np.arange(players + 1)[None, :, None] > rank[:, None, :]  # [P, p + 1, p]
    ends = coalition_outputs(model, graph, joined[0, [0, -1]], baseline, features)  # [2, T]
    inner = joined[:, 1:-1].reshape(-1, players)
    values = np.empty((count, players + 1, ends.shape[1]))
    values[:, 0], values[:, -1] = ends[0], ends[1]
    if players > 1:
        values[:, 1:-1] = coalition_outputs(model, graph, inner, baseline, features).reshape(
            count, players - 1, -1
        )
    marginal = np.diff(values, axis=1)  # [P, p, T]: the player at each position's marginal
    phi = np.take_along_axis(marginal, rank[:, :, None], axis=1).mean(0)  # [p, T]
    n = graph.num_nodes
    return Attribution(
        atoms=phi[:n],
        descriptors=phi[n] if players > n else None,
        prediction=ends[1],
        baseline=ends[0],
        steps=2 + len(inner),
    )


def shapley_values(
    model: Graphormer,
    graph: Data,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
    baseline: str = "mean",
) -> Attribution:
    """Sampled Shapley values of ``model``'s outputs over one molecule's atoms (and its
    descriptors as one player), exactly complete (see the module's text).

    Args:
        model: the model (put in eval mode here).
        graph: one molecule, featurised as the model was trained.
        permutations: orderings drawn (half at random, half their reverses); the cost is
            ``permutations * (players - 1)`` forward evaluations of the molecule.
        seed: seeds the orderings (the same seed gives the same values).
        baseline: ``mean`` or ``zero``.

    Returns:
        The :class:`~.integrated_gradients.Attribution` (atoms ``[n, T]`` in
        the graph's node order).
    """
    if permutations < 1:
        raise ValueError(f"permutations must be at least 1, got {permutations}")
    model.eval()
    features = path_ends(model, graph, baseline)
    players = graph.num_nodes + (features[2] is not None)
    orders = _orders(players, permutations, seed)
    return shapley_from_orders(model, graph, orders, baseline, features)
