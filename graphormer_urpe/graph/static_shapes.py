r"""Static batch shapes: a few size buckets, so that one captured step serves many batches.

A GPU step captured once (a CUDA graph) replays only for inputs of the shapes it was
captured with. :class:`StaticShapes` maps every batch to one of a few shapes:

* ``B``: always ``batch_size`` graphs; a shorter batch (the last of an epoch or of an
  evaluation split) is filled with empty graphs (no nodes, targets ``NaN``, so the loss and
  the metrics never see them). With a token budget (``max_tokens = T``) instead, ``B`` is
  the most graphs of the batch's attention length that fit the budget, ``T // (n + 1)``
  after the rounding below: one ``B`` per length;
* ``n + 1``, the attention length (graph token included): rounded up on a geometric grid of
  ``steps_per_doubling`` values per power of two, each a multiple of ``multiple``
  (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, ... with the defaults);
* ``M``, the batch's path hops (rows of ``path_input``): rounded up on the same kind of grid,
  in multiples of ``hop_multiple``; the extra rows are bond feature 0 (none) at hop 0, which
  reads a zero row of the edge tables;
* ``D``, path hops kept per pair: the model's ``multi_hop_max_dist``, whatever the batch holds.
* ``T``, the tokens that the encoder's per-token operations (LayerNorms, projections, the
  feed-forward block) run on: the batch's real tokens (graph tokens and nodes) rounded up on a
  finer grid of ``token_steps_per_doubling`` values per power of two (at most ``B (n + 1)``);
  the extra tokens are padding positions, which only the padded attention product sees
  otherwise. So a static step does the per-token work of the real tokens, not of the whole
  ``[B, n + 1]`` grid.

Each rounding pads by at most ``1 / steps_per_doubling`` of the size (``T`` by
``1 / token_steps_per_doubling``), so a training run sees a handful of shapes; the values on
real graphs are those of the unpadded batch.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StaticShapes", "round_up_geometric", "token_length"]


def round_up_geometric(x: int, steps_per_doubling: int, multiple: int) -> int:
    """``x`` rounded up to the grid of ``steps_per_doubling`` evenly spaced values between
    consecutive powers of two, every value a multiple of ``multiple``.

    Between :math:`2^k` (excluded) and :math:`2^{k+1}` the grid step is
    :math:`\\max(\\text{multiple}, 2^k / \\text{steps})`, so the result exceeds ``x`` by less
    than one step. ``0`` stays ``0``.
    """
    if x < 0 or steps_per_doubling < 1 or multiple < 1:
        raise ValueError(f"round_up_geometric({x}, {steps_per_doubling}, {multiple})")
    if x == 0:
        return 0
    power = 1 << (x - 1).bit_length()  # the next power of two >= x
    step = max(multiple, power // (2 * steps_per_doubling))
    return -(-x // step) * step


@dataclass(frozen=True)
class StaticShapes:
    """The shape buckets of a run's batches (see the module docstring).

    Args:
        batch_size: graphs per batch ``B`` (ignored with ``max_tokens``).
        max_hops: ``D``, path hops kept per pair (the model's ``multi_hop_max_dist``).
        steps_per_doubling: grid values per power of two.
        multiple: the attention length ``n + 1`` is a multiple of this (8 suits tensor cores).
        hop_multiple: granularity of the path-hop count ``M``.
        max_tokens: a token budget: ``B = max_tokens // (n + 1)`` for the bucketed attention
            length ``n + 1`` (:meth:`graphs_for`), so that ``B (n + 1) <= max_tokens``.
        token_steps_per_doubling: grid values per power of two of the token count ``T``
            (:meth:`token_rows`).
    """

    batch_size: int
    max_hops: int
    steps_per_doubling: int = 4
    multiple: int = 8
    hop_multiple: int = 256
    max_tokens: int | None = None
    token_steps_per_doubling: int = 16

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_hops < 0:
            raise ValueError(
                f"StaticShapes needs batch_size >= 1 and max_hops >= 0, got {self.batch_size} "
                f"and {self.max_hops}"
            )
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {self.max_tokens}")

    def graphs_for(self, length: int) -> int:
        """``B`` of the batches whose bucketed attention length is ``length``: ``batch_size``,
        or with a token budget the most graphs that fit it (at least one)."""
        if self.max_tokens is None:
            return self.batch_size
        return max(1, self.max_tokens // length)

    def attention_length(self, tokens: int) -> int:
        """The bucketed attention length for ``tokens`` = ``n + 1`` (largest graph + token)."""
        return round_up_geometric(tokens, self.steps_per_doubling, self.multiple)

    def path_rows(self, hops: int) -> int:
        """The bucketed row count of ``path_input`` for ``hops`` path hops (at least one row,
        so that the hop sum always has a bag to fill)."""
        return round_up_geometric(max(hops, 1), self.steps_per_doubling, self.hop_multiple)

    def token_rows(self, tokens: int, grid: int) -> int:
        """The bucketed token count ``T`` for ``tokens`` real tokens on a ``grid = B (n + 1)``
        token grid: rounded up in multiples of ``multiple``, never past the grid."""
        return min(grid, round_up_geometric(tokens, self.token_steps_per_doubling, self.multiple))


def token_length(atoms: int) -> int:
    """A graph of ``atoms`` atoms under a token budget: the attention length of its batch
    (graph token included) rounded up on the default grid of :class:`StaticShapes`. Counted
    so whether or not the batch is static, a run's batches are the same on every device,
    captured or not, and never hold more padded tokens than the budget."""
    return _DEFAULT_GRID.attention_length(atoms + 1)


_DEFAULT_GRID = StaticShapes(1, 0)
