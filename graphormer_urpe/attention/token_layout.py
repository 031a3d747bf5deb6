r"""Unpadded tokens: :class:`TokenLayout` maps a padded batch ``[B, N, d]`` to its ``T`` real
tokens ``[T, d]`` and back, so that projections and everything around the attention product
skip the padding (:class:`~graphormer_urpe.attention.multihead.URPEAttention` pads only the
projected heads, through the autograd functions here).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..utils.compiler import compiler_disable

__all__ = ["TokenLayout", "true_positions"]


def true_positions(mask: Tensor, count: int | None = None) -> Tensor:
    """``[K]`` long: the positions of the ``True`` entries of the 1-D bool ``mask``, ascending.

    With ``count`` (``K``, known on the host) no value is read back from the device: each
    ``True`` entry is scattered to its rank (a cumulative sum), so the result has a size the
    host already knows. Without it, this is ``mask.nonzero()``, which waits for the device.
    """
    if count is None:
        return mask.nonzero().squeeze(1)
    rank = torch.cumsum(mask, 0) - 1  # [L]
    dest = torch.where(mask, rank, torch.full_like(rank, count))  # False -> a spare slot
    out = torch.zeros(count + 1, dtype=torch.long, device=mask.device)
    out.scatter_(0, dest, torch.arange(mask.numel(), device=mask.device))
    return out[:count]


class TokenLayout:
    """Where the real tokens of a padded batch are: ``[B, N, *]`` ↔ ``[T, *]``.

    Tokens are kept in row-major order (sequence by sequence). Build one per forward pass and
    hand it to every layer, so that the index is computed once.

    Args:
        real: ``[B, N]`` bool, ``True`` on real tokens.
        num_tokens: ``T``, the number of real tokens, when the caller knows it on the host
            (e.g. from the collate function): then nothing is read back from the device
            (no host-device synchronisation); ``None``: counted on the device.
        first_real: whether every sequence's first token is real, when the caller knows it
            (``None``: checked on the device).

    Attributes:
        index: ``[T]`` long, flat positions of the real tokens in ``[B * N]``.
        batch_index: ``[T]`` long, the sequence of each real token.
        position: ``[T]`` long, the position of each real token in its sequence.
        key_padding_mask: ``[B, N]`` bool, ``True`` on padding.
    """

    @compiler_disable  # data-dependent sizes: built eagerly, used by compiled code
    def __init__(
        self, real: Tensor, num_tokens: int | None = None, first_real: bool | None = None
    ) -> None:
        if real.dim() != 2 or real.dtype != torch.bool:
            raise ValueError(f"expected a [B, N] bool mask, got {real.dtype} {list(real.shape)}")
        self.batch_size, self.seq_len = (int(s) for s in real.shape)
        self.index = true_positions(real.reshape(-1), num_tokens)  # [T]
        self.batch_index = torch.div(self.index, self.seq_len, rounding_mode="floor")
        self.position = self.index - self.batch_index * self.seq_len
        self.key_padding_mask = ~real
        counts = real.sum(dim=1)
        self._first = torch.cumsum(counts, 0) - counts  # [B]
        if first_real is None:
            first_real = bool(real[:, 0].all()) if real.shape[1] else False
        self._first_real = first_real
        self._rows: dict[int, tuple[Tensor, Tensor, Tensor]] = {}

    @property
    def first(self) -> Tensor:
        """``[B]`` long, the row in ``[T]`` of each sequence's first token (which must be real)."""
        if not self._first_real:
            raise ValueError("every sequence needs a real first token")
        return self._first

    @property
    def num_tokens(self) -> int:
        """``T``, the number of real tokens."""
        return int(self.index.shape[0])

    def pad(self, x: Tensor) -> Tensor:
        """``[T, *]`` → ``[B, N, *]``, zeros on padding."""
        rest = x.shape[1:]
        out = x.new_zeros((self.batch_size * self.seq_len, *rest))
        return out.index_copy(0, self.index, x).view(self.batch_size, self.seq_len, *rest)

    def unpad(self, x: Tensor) -> Tensor:
        """``[B, N, *]`` → ``[T, *]``."""
        return x.reshape(self.batch_size * self.seq_len, *x.shape[2:]).index_select(0, self.index)

    def _head_rows(self, num_heads: int) -> tuple[Tensor, Tensor, Tensor]:
        """Row maps between ``[T * H, d_h]`` (token-major) and ``[B * H * N, d_h]`` (head-major,
        padded), built once per head count:

        * ``to_padded`` ``[T * H]``: the padded row of each token's head;
        * ``from_padded`` ``[B * H * N]``: the token-head row of each padded row, ``T * H`` (an
          appended zero row) on padding;
        * ``fill`` ``[B * H * N]``: the same, with padding rows reading real row 0 instead.
        """
        cached = self._rows.get(num_heads)
        if cached is None:
            dev = self.index.device
            heads = torch.arange(num_heads, device=dev)
            to_padded = (
                (self.batch_index[:, None] * num_heads + heads) * self.seq_len
                + self.position[:, None]
            ).reshape(-1)
            rows = to_padded.numel()
            total = self.batch_size * num_heads * self.seq_len
            from_padded = torch.full((total,), rows, dtype=torch.long, device=dev)
            from_padded[to_padded] = torch.arange(rows, device=dev)
            fill = from_padded.masked_fill(from_padded == rows, 0) if rows else from_padded
            cached = self._rows[num_heads] = (to_padded, from_padded, fill)
        return cached

    def pad_heads(self, x: Tensor, num_heads: int, zeros: bool = True) -> Tensor:
        """``[T, H * d_h]`` → ``[B, H, N, d_h]`` (contiguous): the padded, head-major layout of
        the attention product in one gather.

        Args:
            x: ``[T, H * d_h]`` per-token values.
            num_heads: ``H``.
            zeros: zeros on padding (``True``), or, cheaper, copies of a real row. The copies
                are exact for queries, keys and values of an attention whose padded keys are
                masked and whose padded query rows are discarded (:meth:`unpad_heads`): those
                rows then receive exactly zero gradient, and nothing non-finite enters.
        """
        to_padded, from_padded, fill = self._head_rows(num_heads)
        shape = (self.batch_size, num_heads, self.seq_len, x.shape[1] // num_heads)
        if not zeros and to_padded.numel():
            return _PadHeads.apply(x, to_padded, fill, shape, False)
        return _PadHeads.apply(x, to_padded, from_padded, shape, True)

    def unpad_heads(self, x: Tensor) -> Tensor:
        """``[B, H, N, d_h]`` → ``[T, H * d_h]``, in one gather."""
        to_padded, from_padded, _ = self._head_rows(x.shape[1])
        return _UnpadHeads.apply(x, to_padded, from_padded)


def _to_padded(
    x: Tensor, from_padded: Tensor, shape: tuple[int, ...], zero_row: bool = True
) -> Tensor:
    """``[T, H * d_h]`` → ``shape = [B, H, N, d_h]``: each padded row gathered from its token's
    head; on padding from an appended zero row (``zero_row``) or wherever ``from_padded``
    points."""
    rows = x.reshape(-1, shape[3])  # [T * H, d_h]
    if zero_row:
        rows = torch.cat([rows, rows.new_zeros(1, shape[3])])
    return rows.index_select(0, from_padded).view(shape)


def _from_padded(y: Tensor, to_padded: Tensor) -> Tensor:
    """``[B, H, N, d_h]`` → ``[T, H * d_h]``: the real rows, token-major."""
    rows = y.reshape(-1, y.shape[3]).index_select(0, to_padded)  # [T * H, d_h]
    return rows.view(-1, y.shape[1] * y.shape[3])


class _PadHeads(torch.autograd.Function):
    """:func:`_to_padded` with :func:`_from_padded` as backward: the gradient of the real rows
    (padding rows are either constant zeros or, by :meth:`TokenLayout.pad_heads`'s contract,
    receive zero gradient)."""

    @staticmethod
    def forward(
        ctx,
        x: Tensor,
        to_padded: Tensor,
        from_padded: Tensor,
        shape: tuple[int, ...],
        zero_row: bool,
    ) -> Tensor:
        ctx.save_for_backward(to_padded)
        return _to_padded(x, from_padded, shape, zero_row)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (to_padded,) = ctx.saved_tensors
        return _from_padded(grad, to_padded), None, None, None, None


class _UnpadHeads(torch.autograd.Function):
    """:func:`_from_padded` with :func:`_to_padded` (zeros on padding) as backward."""

    @staticmethod
    def forward(ctx, y: Tensor, to_padded: Tensor, from_padded: Tensor) -> Tensor:
        ctx.save_for_backward(from_padded)
        ctx.shape = tuple(y.shape)
        return _from_padded(y, to_padded)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (from_padded,) = ctx.saved_tensors
        return _to_padded(grad, from_padded, ctx.shape), None, None
