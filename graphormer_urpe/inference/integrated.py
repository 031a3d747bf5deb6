r"""Integrated gradients on the atom embeddings of a Graphormer, with checked completeness.

For a molecule with atom (node) embeddings :math:`x_i` (atom-type + degree embeddings, the
rows the encoder starts from), a baseline :math:`x'_i` and per-molecule features :math:`m`
(baseline :math:`m'`), the contribution of atom :math:`i` to output :math:`t` is

.. math::
    \phi_{i,t} = (x_i - x'_i) \cdot \int_0^1
        \frac{\partial f_t}{\partial x_i}\big(x' + \alpha (x - x'),\, m' + \alpha (m - m')\big)
        \, d\alpha

and the descriptor term is the same integral over :math:`m`. Along one straight path from the
baseline, the contributions add up to :math:`f_t(x, m) - f_t(x', m')` (completeness); the
integral is taken by Gauss–Legendre quadrature on :math:`[0, 1]` whose number of nodes doubles
until the sum is within ``rtol`` of that difference (or ``atol``, in the target's units, when
the difference is about zero).

**The baseline.** Every atom's embedding is zero; the graph token keeps its learned
embedding, and the attention bias ``B`` (shortest-path distances, bond features along paths)
and URPE's ``C`` stay those of the molecule. The baseline prediction is thus "this molecular
graph with no atom identities". Per-molecule features (``--mol-features``) go to 0, their
training split's median after the run's normalisation. Bonds and graph shape are part of the
baseline and are not attributed.

:func:`masked_predictions` gives the prediction with chosen atoms set to the baseline
(deletion curves, :mod:`graphormer_urpe.inference.faithfulness`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from ..graph.model import Graphormer

__all__ = ["Attribution", "gauss_legendre", "integrated_gradients", "masked_predictions"]

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


@dataclass
class Attribution:
    """Integrated gradients of one molecule (see the module's text).

    Attributes:
        atoms: ``[n, T]`` contribution of each atom to each output.
        descriptors: ``[T]`` the per-molecule features' term, or ``None`` without them.
        prediction: ``[T]`` the model's output (a logit for a binary task).
        baseline: ``[T]`` the output at the baseline.
        steps: quadrature nodes used.
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


def _features(model: Graphormer, graph: Data) -> tuple[Tensor, Tensor, Tensor | None]:
    """The molecule's embeddings ``[1, n + 1, d]``, their baseline and its per-molecule
    features ``[1, K]`` (or ``None``)."""
    batch, emb = model.embed([graph])
    emb = emb.detach()
    base = emb.clone()
    base[:, 1:] = 0.0  # atoms -> 0; the graph token (position 0) is kept
    mol = batch.mol_features
    if mol is not None and model.config.num_mol_features:
        mol = mol.to(emb.dtype).detach()
    else:
        mol = None
    return emb, base, mol


def _integrate(
    model: Graphormer, graph: Data, emb: Tensor, base: Tensor, mol: Tensor | None, steps: int
) -> tuple[Tensor, Tensor | None]:
    """Quadrature of the path integral with ``steps`` nodes: atoms ``[n, T]``, descriptor
    term ``[T]`` (or ``None``)."""
    nodes, weights = gauss_legendre(steps)
    num_targets = model.config.num_targets
    delta = emb - base  # [1, n + 1, d]
    atoms = torch.zeros(emb.shape[1], num_targets, dtype=torch.float64, device=emb.device)
    desc = None if mol is None else torch.zeros(num_targets, dtype=torch.float64)
    for start in range(0, steps, CHUNK):
        a = torch.as_tensor(nodes[start : start + CHUNK], dtype=emb.dtype, device=emb.device)
        w = torch.as_tensor(weights[start : start + CHUNK], dtype=torch.float64, device=emb.device)
        batch, _ = model.embed([graph] * len(a))
        h = (base + a[:, None, None] * delta).requires_grad_(True)  # [k, n + 1, d]
        inputs = [h]
        m = None
        if mol is not None:
            m = (a[:, None] * mol).requires_grad_(True)  # [k, K]
            inputs.append(m)
        out = model.forward_embedded(batch, h, m)  # [k, T]
        for t in range(num_targets):
            grads = torch.autograd.grad(out[:, t].sum(), inputs, retain_graph=t + 1 < num_targets)
            per_token = (grads[0] * delta).sum(-1).double()  # [k, n + 1]
            atoms[:, t] += (w[:, None] * per_token).sum(0)
            if desc is not None:
                desc[t] += float((w * (grads[1] * mol).sum(-1).double().cpu()).sum())
    return atoms[1:], desc


def integrated_gradients(
    model: Graphormer,
    graph: Data,
    steps: int = 16,
    max_steps: int = 512,
    rtol: float = 0.01,
    atol: float = 1e-5,
) -> Attribution:
    """Integrated gradients of ``model``'s outputs on one molecule's atom embeddings.

    Args:
        model: the model (put in eval mode here).
        graph: one molecule, featurised as the model was trained (``mol_x`` ``[1, K]`` with
            per-molecule features).
        steps: quadrature nodes to start with; doubled until complete.
        max_steps: the most nodes tried (a warning is logged when still incomplete).
        rtol: completeness: ``|prediction - baseline - sum| <= rtol * |prediction - baseline|
            + atol`` for every output.
        atol: the absolute slack, in the outputs' units.

    Returns:
        The :class:`Attribution` (atoms ``[n, T]`` in the graph's node order).
    """
    model.eval()
    emb, base, mol = _features(model, graph)
    batch, _ = model.embed([graph])
    with torch.no_grad():
        pred = model.forward_embedded(batch, emb, mol)[0].double()  # [T]
        zero = None if mol is None else torch.zeros_like(mol)
        basepred = model.forward_embedded(batch, base, zero)[0].double()  # [T]
    n = steps
    while True:
        atoms, desc = _integrate(model, graph, emb, base, mol, n)
        result = Attribution(
            atoms=atoms.cpu().numpy(),
            descriptors=None if desc is None else desc.numpy(),
            prediction=pred.cpu().numpy(),
            baseline=basepred.cpu().numpy(),
            steps=n,
        )
        allowed = rtol * np.abs(result.prediction - result.baseline) + atol
        if np.all(np.abs(result.gap) <= allowed):
            return result
        if n * 2 > max_steps:
            log.warning(
                "integrated gradients incomplete after %d steps: gap %s, allowed %s",
                n,
                result.gap.tolist(),
                allowed.tolist(),
            )
            return result
        n *= 2


@torch.no_grad()
def masked_predictions(model: Graphormer, graph: Data, masks: np.ndarray) -> np.ndarray:
    """Outputs with chosen atoms' embeddings set to the baseline (zero).

    Args:
        model: the model.
        graph: one molecule.
        masks: ``[M, n]`` booleans, ``True`` = masked.

    Returns:
        ``[M, T]`` outputs, one row per mask.
    """
    model.eval()
    emb, _, mol = _features(model, graph)
    masks = np.asarray(masks, dtype=bool)
    out = []
    for start in range(0, len(masks), CHUNK):
        part = torch.as_tensor(masks[start : start + CHUNK], device=emb.device)  # [k, n]
        batch, _ = model.embed([graph] * len(part))
        keep = torch.cat([torch.ones_like(part[:, :1]), ~part], dim=1)  # [k, n + 1]
        h = emb * keep[:, :, None].to(emb.dtype)
        m = None if mol is None else mol.expand(len(part), -1)
        out.append(model.forward_embedded(batch, h, m).double().cpu())
    return torch.cat(out).numpy() if out else np.zeros((0, model.config.num_targets))
