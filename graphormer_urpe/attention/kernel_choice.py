r"""Which kernel computes the attention product.

:func:`attention_kernel` chooses, for the code run inside it (a whole training run, say):

* ``"auto"`` (default): the eager kernels: PyTorch's ``scaled_dot_product_attention``
  without :math:`C`, the library's own autograd kernel with it. The fused kernel is opt in:
  measured on a GPU it made URPE's captured training step slower than the eager kernels
  (docs/results/gpu.md);
* ``"fused"``: the fused kernel wherever it can run (a CUDA GPU, or the CPU under Triton's
  interpreter, ``TRITON_INTERPRET=1``), with or without :math:`C`;
* ``"eager"``: never the fused kernel (what ran before it existed).

Before its first use on a device the fused kernel checks itself against a plain computation;
a kernel that fails the check, or fails later, is turned off on that device with one warning
and attention goes on with the eager kernels (:mod:`graphormer_urpe.attention.fused.guard`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["KERNELS", "attention_kernel", "fused_kernel_for"]

KERNELS = ("auto", "fused", "eager")
_choice = ["auto"]


@contextlib.contextmanager
def attention_kernel(kind: str) -> Iterator[None]:
    """Use kernel ``kind`` (one of :data:`KERNELS`) for the attention products computed
    inside the ``with`` block (a captured step keeps the kernel it was captured with)."""
    if kind not in KERNELS:
        raise ValueError(f"attention kernel must be one of {KERNELS}, got {kind!r}")
    before = _choice[0]
    _choice[0] = kind
    try:
        yield
    finally:
        _choice[0] = before


def fused_kernel_for(device: torch.device) -> bool:
    """Whether the fused kernel computes the attention products on ``device`` (with or
    without ``C``) under the current :func:`attention_kernel` choice (and it passed its
    self-check there, :func:`~graphormer_urpe.attention.fused.guard.fused_usable`)."""
    kind = _choice[0]
    if kind != "fused" or torch.compiler.is_compiling():
        return False
    from .fused.guard import fused_usable
    from .fused.kernels import fused_available

    return fused_available(device) and fused_usable(device)
