r"""Integrated gradients on the atom embeddings of a Graphormer, with checked completeness.

For a molecule with atom (node) embeddings :math:`x_i` (atom-type + degree embeddings, the
rows the encoder starts from), a baseline :math:`x'_i` and per-molecule features :math:`m`
(baseline :math:`m'`), the contribution of atom :math:`i` to output :math:`t` is

.. math::
    \phi_{i,t} = (x_i - x'_i) \cdot \int_0^1
        \frac{\partial f_t}{\partial x_i}\big(x' + \alpha (x - x'),\, m' + \alpha (m - m')\big)
        \, d\alpha

and the descriptor term is the same integral over :math:`m`. Along one straight path from the
baseline, the contributions add up to :math:`f_t(x, m) - f_t(x', m')` (completeness).

**The quadrature is adaptive and checked piece by piece.** The path ``[0, 1]`` is cut into
panels; on each, Gauss–Legendre quadrature gives the contributions, whose sum must equal
:math:`f(b) - f(a)`, the outputs at the panel's ends (computed directly). A panel that misses
its share of the tolerance is halved, until the whole sum is within ``rtol`` of
:math:`f(1) - f(0)` (or ``atol``, in the outputs' units, when that is about zero). The first
panels are log-spaced (:data:`PANELS`) because the integrand is far from uniform: a LayerNorm
is scale-invariant, so an atom's normalised embedding :math:`\operatorname{LN}(\alpha x_i)`
swings from the LayerNorm's bias to its full value while :math:`\alpha \lesssim
\sqrt{\epsilon} / \operatorname{std}(x_i)` (a few hundredths for trained models) and barely
moves after, so evenly spread nodes miss completeness on trained models (measured:
docs/results/code-notes.md).

**The baseline** (``baseline="mean"``, the default) replaces every atom's embedding by the
molecule's mean atom embedding: the same graph made of identical "average" atoms. The graph
token keeps its learned embedding, and the attention bias ``B`` (shortest-path distances, bond
features along paths) and URPE's ``C`` stay those of the molecule, so bonds and graph shape
are part of the baseline and are not attributed. Per-molecule features (``--mol-features``) go
to 0, their training split's median after the run's normalisation. ``baseline="zero"`` (every
atom embedding zero) was the first choice; on validation molecules of a model trained on
Crippen logP it ranked atoms *against* Crippen's terms (mean Spearman -0.16), the mean baseline
with them (0.59 on 30 molecules), so the mean is the default.

:func:`masked_predictions` gives the prediction with chosen atoms set to the baseline
(deletion curves, :mod:`graphormer_urpe.inference.explain.faithfulness`); :func:`coalition_outputs`
also sets the per-molecule features to theirs (Shapley values,
:mod:`graphormer_urpe.inference.explain.shapley`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from ...graph.model import Graphormer

__all__ = [
    "Attribution",
    "BASELINES",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_RTOL",
    "DEFAULT_STEPS",
    "MAX_DEPTH",
    "PANELS",
    "gauss_legendre",
    "integrated_gradients",
    "coalition_outputs",
    "masked_predictions",
    "path_ends",
]

log = logging.getLogger(__name__)

CHUNK = 32
"""Path points (copies of the molecule) per forward pass."""


@lru_cache(maxsize=16)
def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights ``[n]`` each of ``n``-point Gauss–Legendre quadrature on ``[0, 1]``
    (exact for polynomials of degree ``2n - 1``; the weights sum to 1)."""
    if n < 1:
        raise ValueError(f"quadrature needs at least 1 node, got {n}")
    t, w = np.polynomial.legendre.leggauss(n)
    return (t + 1.0) / 2.0, w / 2.0


PANELS = (0.0, 1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)
"""Edges of the first quadrature panels on the path ``[0, 1]`` (see the module's text)."""

BASELINES = ("mean", "zero")
"""Baselines of the atoms: every atom's embedding replaced by the molecule's mean atom
embedding (``mean``, the default), or by zero (``zero``)."""

MAX_DEPTH = 12
"""The most times a panel is halved."""

DEFAULT_STEPS = 4
"""Gauss–Legendre nodes per panel, unless asked otherwise."""
DEFAULT_MAX_STEPS = 4096
"""The most quadrature nodes per molecule, unless asked otherwise."""
DEFAULT_RTOL = 0.01
"""The completeness tolerance, relative to ``|prediction - baseline|``, unless asked
otherwise."""


@dataclass
class Attribution:
    """Integrated gradients of one molecule (see the module's text).

    Attributes:
        atoms: ``[n, T]`` contribution of each atom to each output.
        descriptors: ``[T]`` the per-molecule features' term, or ``None`` without them.
        prediction: ``[T]`` the model's output (a logit for a binary task).
        baseline: ``[T]`` the output at the baseline.
        steps: quadrature nodes used (all panels together).
    """

    atoms: np.ndarray
    descriptors: np.ndarray | None
    prediction: np.ndarray
    baseline: np.ndarray
    steps: int

    @property
    def total(self) -> np.ndarray:
        """``[T]`` the sum of all contributions (atoms and descriptor term)."""
        total = self.atoms.sum(0)
        return total if self.descriptors is None else total + self.descriptors

    @property
    def gap(self) -> np.ndarray:
        """``[T]`` prediction - baseline - sum of contributions (0 for exact completeness)."""
        return self.prediction - self.baseline - self.total


def path_ends(
    model: Graphormer, graph: Data, baseline: str = "mean"
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The two ends of the path that attributions integrate or mask along: the molecule's
    embeddings ``[1, n + 1, d]``, their baseline ``[1, n + 1, d]`` (the graph token kept;
    see :data:`BASELINES`) and its per-molecule features ``[1, K]`` (or ``None``), as
    :func:`integrated_gradients`, :func:`coalition_outputs` and the Shapley values
    (:mod:`~graphormer_urpe.inference.explain.shapley`) take them."""
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; choose one of {BASELINES}")
    batch, emb = model.embed([graph])
    emb = emb.detach()
    base = emb.clone()  # the graph token (position 0) is kept
    if baseline == "zero":
        base[:, 1:] = 0.0
    else:
        base[:, 1:] = emb[:, 1:].mean(1, keepdim=True)
    mol = batch.mol_features
    if mol is not None and model.config.num_mol_features:
        mol = mol.to(emb.dtype).detach()
    else:
        mol = None
    return emb, base, mol


def _outputs(
    model: Graphormer, graph: Data, emb: Tensor, base: Tensor, mol: Tensor | None, alphas
) -> np.ndarray:
    """Outputs ``[len(alphas), T]`` at points ``alphas`` of the path."""
    out = []
    with torch.no_grad():
        for start in range(0, len(alphas), CHUNK):
            a = torch.as_tensor(alphas[start : start + CHUNK], dtype=emb.dtype, device=emb.device)
            batch, _ = model.embed([graph] * len(a))
            h = base + a[:, None, None] * (emb - base)
            m = None if mol is None else a[:, None] * mol
            out.append(model.forward_embedded(batch, h, m).double().cpu())
    return torch.cat(out).numpy()


def _panel_integrals(
    model: Graphormer,
    graph: Data,
    emb: Tensor,
    base: Tensor,
    mol: Tensor | None,
    panels: list[tuple[float, float]],
    nodes: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre integrals of each panel with ``nodes`` nodes: atoms ``[P, n, T]`` and
    the descriptor term ``[P, T]`` (zeros without per-molecule features)."""
    x, w = gauss_legendre(nodes)
    alphas = np.concatenate([a + (b - a) * x for a, b in panels])
    weights = np.concatenate([(b - a) * w for a, b in panels])
    owner = torch.as_tensor(np.repeat(np.arange(len(panels)), nodes))
    num_targets = model.config.num_targets
    delta = emb - base  # [1, n + 1, d]
    atoms = torch.zeros(len(panels), emb.shape[1], num_targets, dtype=torch.float64)
    desc = torch.zeros(len(panels), num_targets, dtype=torch.float64)
    for start in range(0, len(alphas), CHUNK):
        a = torch.as_tensor(alphas[start : start + CHUNK], dtype=emb.dtype, device=emb.device)
        wk = torch.as_tensor(weights[start : start + CHUNK], dtype=torch.float64)
        who = owner[start : start + CHUNK]
        batch, _ = model.embed([graph] * len(a))
        h = (base + a[:, None, None] * delta).requires_grad_(True)  # [k, n + 1, d]
        inputs = [h]
        if mol is not None:
            inputs.append((a[:, None] * mol).requires_grad_(True))  # [k, K]
        out = model.forward_embedded(batch, h, inputs[1] if mol is not None else None)
        for t in range(num_targets):
            grads = torch.autograd.grad(out[:, t].sum(), inputs, retain_graph=t + 1 < num_targets)
            per_token = (grads[0] * delta).sum(-1).double().cpu()  # [k, n + 1]
            atoms[:, :, t].index_add_(0, who, wk[:, None] * per_token)
            if mol is not None:
                desc[:, t].index_add_(0, who, wk * (grads[1] * mol).sum(-1).double().cpu())
    return atoms[:, 1:].numpy(), desc.numpy()


def integrated_gradients(
    model: Graphormer,
    graph: Data,
    steps: int = DEFAULT_STEPS,
    max_steps: int = DEFAULT_MAX_STEPS,
    rtol: float = DEFAULT_RTOL,
    atol: float = 1e-5,
    baseline: str = "mean",
) -> Attribution:
    """Integrated gradients of ``model``'s outputs on one molecule's atom embeddings.

    Args:
        model: the model (put in eval mode here).
        graph: one molecule, featurised as the model was trained (``mol_x`` ``[1, K]`` with
            per-molecule features).
        steps: Gauss–Legendre nodes per panel.
        max_steps: the most nodes in all (panels are no longer halved beyond it, nor beyond
            :data:`MAX_DEPTH` halvings; a warning is logged when still incomplete).
        rtol: completeness: ``|prediction - baseline - sum| <= rtol * |prediction - baseline|
            + atol`` for every output.
        atol: the absolute slack, in the outputs' units.
        baseline: ``mean`` or ``zero`` (:data:`BASELINES`).

    Returns:
        The :class:`Attribution` (atoms ``[n, T]`` in the graph's node order).
    """
    model.eval()
    emb, base, mol = path_ends(model, graph, baseline)
    f0, f1 = _outputs(model, graph, emb, base, mol, [0.0, 1.0])
    allowed = rtol * np.abs(f1 - f0) + atol  # [T]
    share = 0.5 * allowed / (len(PANELS) - 1)  # each first panel's part of half of it
    pending = [(a, b, share) for a, b in zip(PANELS[:-1], PANELS[1:], strict=True)]
    ends = dict(zip(PANELS, _outputs(model, graph, emb, base, mol, PANELS), strict=True))
    ends[0.0], ends[1.0] = f0, f1
    atoms = np.zeros((graph.num_nodes, len(f0)))
    desc = np.zeros(len(f0))
    used = 0
    for depth in range(MAX_DEPTH + 1):
        parts, terms = _panel_integrals(
            model, graph, emb, base, mol, [p[:2] for p in pending], steps
        )
        used += steps * len(pending)
        last = depth == MAX_DEPTH or used + 2 * steps * len(pending) > max_steps
        split = []
        for (a, b, tol), part, term in zip(pending, parts, terms, strict=True):
            gap = ends[b] - ends[a] - part.sum(0) - term
            if np.all(np.abs(gap) <= tol) or last:
                atoms += part
                desc += term
            else:
                split.append((a, b, tol))
        if not split:
            break
        mids = [(a + b) / 2 for a, b, _ in split]
        ends.update(zip(mids, _outputs(model, graph, emb, base, mol, mids), strict=True))
        pending = [
            q
            for (a, b, tol), m in zip(split, mids, strict=True)
            for q in ((a, m, tol / 2), (m, b, tol / 2))
        ]
    result = Attribution(
        atoms=atoms,
        descriptors=None if mol is None else desc,
        prediction=f1,
        baseline=f0,
        steps=used,
    )
    if not np.all(np.abs(result.gap) <= allowed):
        log.warning(
            "integrated gradients incomplete after %d steps: gap %s, allowed %s",
            used,
            result.gap.tolist(),
            allowed.tolist(),
        )
    return result


@torch.no_grad()
def coalition_outputs(
    model: Graphormer,
    graph: Data,
    present: np.ndarray,
    baseline: str = "mean",
    features: tuple[Tensor, Tensor, Tensor | None] | None = None,
) -> np.ndarray:
    """Outputs on coalitions of the players (the atoms, then the descriptors if any).

    Args:
        model: the model (in eval mode).
        graph: one molecule of ``n`` atoms.
        present: ``[M, p]`` booleans, ``True`` = the player keeps its real value; ``p`` is
            ``n``, or ``n + 1`` for a model with per-molecule features (the last column).
        baseline: ``mean`` or ``zero`` (:data:`BASELINES`).
        features: the molecule's embeddings, baseline and descriptors, when already computed.

    Returns:
        ``[M, T]`` outputs, one row per coalition.
    """
    emb, base, mol = features or path_ends(model, graph, baseline)
    n = graph.num_nodes
    present = np.asarray(present, dtype=bool)
    if present.ndim != 2 or present.shape[1] != n + (mol is not None):
        raise ValueError(
            f"coalitions must be [M, {n + (mol is not None)}] (atoms"
            f"{' + descriptors' if mol is not None else ''}), got {list(present.shape)}"
        )
    out = []
    for start in range(0, len(present), CHUNK):
        part = torch.as_tensor(present[start : start + CHUNK], device=emb.device)  # [k, p]
        batch, _ = model.embed([graph] * len(part))
        keep = torch.cat([torch.ones_like(part[:, :1]), part[:, :n]], dim=1)  # [k, n + 1]
        h = torch.where(keep[:, :, None], emb, base)
        m = None if mol is None else part[:, n:].to(mol.dtype) * mol  # [k, K]
        out.append(model.forward_embedded(batch, h, m).double().cpu())
    return torch.cat(out).numpy() if out else np.zeros((0, model.config.num_targets))


def masked_predictions(
    model: Graphormer, graph: Data, masks: np.ndarray, baseline: str = "mean"
) -> np.ndarray:
    """Outputs with chosen atoms' embeddings set to the baseline's (the per-molecule
    features, if any, kept).

    Args:
        model: the model.
        graph: one molecule.
        masks: ``[M, n]`` booleans, ``True`` = masked.
        baseline: ``mean`` or ``zero`` (:data:`BASELINES`).

    Returns:
        ``[M, T]`` outputs, one row per mask.
    """
    model.eval()
    features = path_ends(model, graph, baseline)
    present = ~np.asarray(masks, dtype=bool).reshape(-1, graph.num_nodes)
    if features[2] is not None:
        present = np.concatenate([present, np.ones((len(present), 1), dtype=bool)], axis=1)
    return coalition_outputs(model, graph, present, baseline, features)
