r"""Universal RPE-based (URPE) multi-head attention.

.. math::
    A = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_h}} + B\right) \odot C,
    \qquad \operatorname{out} = \operatorname{Dropout}(A)\, V

The attention layer of the library; it knows nothing about graphs or sequences. A module
each:

* :mod:`.multihead`: :class:`~.multihead.URPEAttention`, the projections around the core;
* :mod:`.core`: the attention product on projected heads (:func:`~.core.urpe_attention`),
  its masks (:func:`~.core.prepare_bias`) and the eager kernels;
* :mod:`.attn_scale`: URPE's :math:`C`, dense or as a table and an index
  (:class:`~.attn_scale.IndexedAttnScale`);
* :mod:`.kernel_choice`: which kernel computes the product
  (:func:`~.kernel_choice.attention_kernel`);
* :mod:`.dropout`: the attention dropout, whose mask the backward pass reuses;
* :mod:`.token_layout`: a padded batch ``[B, N, d]`` as its real tokens ``[T, d]``
  (:class:`~.token_layout.TokenLayout`);
* :mod:`.fused`: the fused Triton kernel and its self-check.

The public names are imported from their modules on first use (PEP 562)::

    from graphormer_urpe.attention import URPEAttention, attention_kernel
"""

from ..utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".multihead": ["URPEAttention"],
        ".core": ["PreparedBias", "prepare_bias", "urpe_attention"],
        ".attn_scale": ["AttnScale", "IndexedAttnScale"],
        ".kernel_choice": ["attention_kernel"],
        ".dropout": ["Dropout", "dropout", "dropout_add", "dropout_mask"],
        ".token_layout": ["TokenLayout", "true_positions"],
    },
    renamed={"IndexedScale": "IndexedAttnScale"},
)
