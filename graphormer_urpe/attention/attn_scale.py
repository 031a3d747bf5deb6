r"""URPE's ``C`` (``attn_scale``): a dense tensor, or a table and an index.

:class:`IndexedAttnScale` gives :math:`C` the way every caller builds it: a small table of
per-head values and, per query-key pair, the row to read,

.. math::
    C_{b,h,i,j} = \text{table}[\text{index}_{b,i,j},\, h],

so that the fused kernel (:mod:`graphormer_urpe.attention.fused`) reads :math:`C` where it
needs it instead of a materialised ``[B, H, N_q, N_k]`` tensor per layer; the other kernels
materialise it (:meth:`IndexedAttnScale.materialize`).
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

__all__ = ["IndexedAttnScale", "AttnScale"]


class IndexedAttnScale(NamedTuple):
    """URPE's ``C`` as ``table[index[b, i, j], h]``.

    Attributes:
        table: ``[R, H]`` float (differentiable).
        index: ``[B|1, N_q, N_k]`` integer rows of ``table``, in ``[0, R)``.
    """

    table: Tensor
    index: Tensor

    def materialize(self) -> Tensor:
        """``C`` as ``[B|1, H, N_q, N_k]``."""
        return self.table.t()[:, self.index].transpose(0, 1)

    def first_rows(self) -> IndexedAttnScale:
        """The ``C`` of the first query of every sequence: ``index [B|1, 1, N_k]``."""
        return IndexedAttnScale(self.table, self.index[:, :1, :])


AttnScale = Tensor | IndexedAttnScale
"""URPE's ``C``: dense, broadcastable to ``[B, H, N_q, N_k]``, or an :class:`IndexedAttnScale`."""
