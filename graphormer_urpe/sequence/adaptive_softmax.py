r"""Adaptive softmax with the output weights tied to the token embedding (Grave et al., 2017).

Transformer-XL's ``ProjectedAdaptiveLogSoftmax`` with ``div_val = 1``, the set-up of its
WikiText-103 base model: the vocabulary, sorted by decreasing frequency, is cut at
``cutoffs`` :math:`c_1 < \dots < c_n` into a head (words :math:`[0, c_1)`) and :math:`n`
tail clusters :math:`[c_t, c_{t+1})`. The head scores its words and one logit per cluster;
a word of cluster :math:`t` gets

.. math::
    \log p(w) = \log \operatorname{softmax}(\text{head})_{t}
    + \log \operatorname{softmax}(\text{tail}_t)_{w},

where every word logit is :math:`E_w^\top h + b_w` with :math:`E` the (tied) token embedding,
so the only new parameters are the cluster logits' weights and biases (:math:`n(d + 1)`).
With ``div_val = 1`` no projection is needed (Transformer-XL adds none either).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["TiedAdaptiveLogSoftmax"]


class TiedAdaptiveLogSoftmax(nn.Module):
    r"""Log-probabilities of an adaptive softmax whose word weights are given (tied).

    Args:
        dim: hidden width ``d``.
        vocab_size: ``V``.
        cutoffs: increasing cluster boundaries in ``(0, V)``.

    Shapes:
        ``forward(hidden [..., d], weight [V, d], bias [V])`` → ``[..., V]`` log-probabilities.
    """

    def __init__(self, dim: int, vocab_size: int, cutoffs: list[int]) -> None:
        super().__init__()
        bounds = [0, *cutoffs, vocab_size]
        if not cutoffs or any(a >= b for a, b in zip(bounds, bounds[1:], strict=False)):
            raise ValueError(f"cutoffs must increase within (0, {vocab_size}), got {cutoffs}")
        self.bounds = bounds
        self.cluster_weight = nn.Parameter(torch.zeros(len(cutoffs), dim))  # [n, d]
        self.cluster_bias = nn.Parameter(torch.zeros(len(cutoffs)))  # [n]

    def reset_parameters(self, std: float = 0.02) -> None:
        """Cluster weights normal(0, ``std``), biases 0."""
        nn.init.normal_(self.cluster_weight, mean=0.0, std=std)
        nn.init.zeros_(self.cluster_bias)

    def forward(self, hidden: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        head_end = self.bounds[1]
        head = torch.cat(
            [
                F.linear(hidden, weight[:head_end], bias[:head_end]),
                F.linear(hidden, self.cluster_weight, self.cluster_bias),
            ],
            dim=-1,
        )
        head = torch.log_softmax(head.float(), dim=-1)  # [..., c_1 + n]
        parts = [head[..., :head_end]]
        for t, (lo, hi) in enumerate(zip(self.bounds[1:-1], self.bounds[2:], strict=True)):
            tail = torch.log_softmax(F.linear(hidden, weight[lo:hi], bias[lo:hi]).float(), dim=-1)
            parts.append(tail + head[..., head_end + t, None])  # [..., c_{t+1} - c_t]
        return torch.cat(parts, dim=-1)

    def extra_repr(self) -> str:
        return f"cutoffs={self.bounds[1:-1]}, vocab_size={self.bounds[-1]}"
