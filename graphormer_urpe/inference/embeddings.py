r"""Embeddings: the graph-level vector a trained model's head reads, for other models.

For a molecule the vector is :meth:`~graphormer_urpe.graph.model.Graphormer.head_input`:
the graph token's final representation ``h_0`` ``[d]``, joined to the per-molecule
descriptors ``m`` ``[K]`` where the model was trained with ``--mol-features`` (the descriptors
as the head sees them, standardised as in training):

.. math::
    e = [h_0, m] \in \mathbb{R}^{d + K}

An ensemble gives its members' vectors side by side, in member order: ``[e_1, ..., e_M]``
``[M (d + K)]``. Each member learned a space of its own (a mean of unrelated coordinates
would mean nothing), and one row per molecule holding every member is what Chemprop's
``fingerprint`` gives an ensemble (v1: one set of columns per model; v2: one file per model).
Slice ``[:, i * (d + K) : (i + 1) * (d + K)]`` for member ``i`` alone.

The vector comes from the prediction's own forward pass (:class:`WithHeadInput`), so
``predict --embeddings`` costs one copy of it per molecule on top of ``predict``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..graph.model import Graphormer

__all__ = ["WithHeadInput", "embedding_dim"]


class WithHeadInput(nn.Module):
    """A model whose output carries the head's input after the predictions.

    Shapes:
        graphs → ``[B, T + d + K]``: ``[:, :T]`` the model's output, ``[:, T:]`` the
        head's input (see the module's text), float32.
    """

    def __init__(self, model: Graphormer) -> None:
        super().__init__()
        self.model = model

    def forward(self, data) -> Tensor:
        pred, x = self.model.forward_with_head_input(data)  # [B, T], [B, d + K]
        return torch.cat([pred.float(), x.float()], dim=1)


def embedding_dim(models: Sequence[Graphormer]) -> int:
    """The length of an embedding row: ``sum over members of (d + K)``."""
    return sum(m.config.hidden_dim + m.config.num_mol_features for m in models)
