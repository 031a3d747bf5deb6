"""Attention dropout that the attention's backward pass can replay: the keep-mask is drawn
once (:func:`dropout_mask`) and kept, instead of a random state to re-run.

:class:`Dropout` is ``nn.Dropout`` on the same code; :func:`dropout_add` fuses the residual
add of a transformer layer.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Dropout", "dropout", "dropout_add", "dropout_mask"]


def _fast_random(device: torch.device) -> bool:
    """Whether this library's CPU dropout masks apply (eager CPU; compiled code uses its own)."""
    return device.type == "cpu" and not torch.compiler.is_compiling()


def dropout_mask(
    shape: torch.Size | tuple[int, ...], p: float, device: torch.device, dtype: torch.dtype
) -> Tensor:
    r"""A dropout keep-mask: entries 0 with probability ``p``, else :math:`1 / (1 - p)`.

    On the CPU the mask is drawn from 16-bit uniform integers (four per 64-bit draw of the
    generator, faster than ``bernoulli_``: docs/results/code-notes.md); ``p`` is then rounded
    to a multiple of :math:`2^{-16}` and the kept entries are scaled by the exact inverse keep
    rate, so the mask is unbiased. Elsewhere it is ``bernoulli_``.

    Args:
        shape: the mask's shape.
        p: drop probability in ``[0, 1)``.
        device: where to build it.
        dtype: its floating dtype.

    Returns:
        ``shape`` tensor of ``dtype``.
    """
    if device.type != "cpu":
        keep = torch.empty(shape, device=device, dtype=dtype).bernoulli_(1.0 - p)
        return keep.div_(1.0 - p)
    n = math.prod(shape)
    drop = round(p * 65536)
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=device)
    bits.random_(-(2**63), None)  # full 64-bit range: four uniform int16 per draw
    keep = torch.empty(shape, dtype=dtype, device=device)
    torch.ge(bits.view(torch.int16)[:n].view(shape), drop - 32768, out=keep)  # 1.0 = kept
    return keep.mul_(65536.0 / (65536 - drop))


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Same as :func:`torch.nn.functional.dropout`, with the faster CPU mask of
    :func:`dropout_mask` (and nothing at all when ``p == 0`` or not training).

    Shapes:
        any → same.
    """
    if not training or p == 0.0:
        return x
    if p >= 1.0 or not _fast_random(x.device):
        return F.dropout(x, p, training=True)
    return x * dropout_mask(x.shape, p, x.device, x.dtype)


def dropout_add(x: Tensor, h: Tensor, p: float, training: bool) -> Tensor:
    """``x + dropout(h)`` in one pass on the CPU (``addcmul`` with the keep-mask).

    Shapes:
        ``x``, ``h``: same shape → same shape.
    """
    if not training or p == 0.0:
        return x + h
    if p >= 1.0 or not _fast_random(h.device):
        return x + F.dropout(h, p, training=True)
    return torch.addcmul(x, h, dropout_mask(h.shape, p, h.device, h.dtype))


class Dropout(nn.Dropout):
    """:class:`torch.nn.Dropout` with the faster CPU mask of :func:`dropout_mask`.

    Shapes:
        any → same.
    """

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)
