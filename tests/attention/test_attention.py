"""URPE attention core against a naive reference formula."""

from __future__ import annotations

import pytest
import torch

from graphormer_urpe import URPEAttention, urpe_attention
from tests.helpers import attention_inputs
from tests.reference import naive_attention


@pytest.mark.parametrize("with_scale", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
def test_matches_naive_formula(with_scale, with_bias, with_mask):
    q, k, v, bias, scale, kpm = attention_inputs()
    args = dict(
        attn_bias=bias if with_bias else None,
        attn_scale=scale if with_scale else None,
        key_padding_mask=kpm if with_mask else None,
    )
    out = urpe_attention(q, k, v, **args)
    ref = naive_attention(
        q,
        k,
        v,
        bias=args["attn_bias"],
        scale=args["attn_scale"],
        key_padding_mask=args["key_padding_mask"],
    )
    assert out.shape == q.shape
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


def test_scale_of_ones_equals_standard_attention():
    q, k, v, bias, _, kpm = attention_inputs(1)
    ones = torch.ones(1, 1, 1, 1).expand(3, 4, 7, 7)
    plain = urpe_attention(q, k, v, attn_bias=bias, key_padding_mask=kpm)
    urpe = urpe_attention(q, k, v, attn_bias=bias, attn_scale=ones, key_padding_mask=kpm)
    torch.testing.assert_close(plain, urpe, atol=1e-6, rtol=1e-5)


def test_scale_is_not_renormalised():
    q, k, v, *_ = attention_inputs(2)
    half = torch.full((1, 1, 7, 7), 0.5)
    torch.testing.assert_close(
        urpe_attention(q, k, v, attn_scale=half),
        0.5 * urpe_attention(q, k, v),
        atol=1e-6,
        rtol=1e-5,
    )


def test_padded_keys_get_zero_probability():
    q, k, v, _, scale, kpm = attention_inputs(3)
    v2 = v.clone()
    v2[0, :, -2:] = 1e6  # padded keys' values must not leak into any output
    a = urpe_attention(q, k, v, attn_scale=scale, key_padding_mask=kpm)
    b = urpe_attention(q, k, v2, attn_scale=scale, key_padding_mask=kpm)
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("with_scale", [False, True])
def test_fully_masked_rows_are_zero_and_finite(with_scale):
    q, k, v, bias, scale, _ = attention_inputs(4)
    bias = bias.clone()
    bias[:, :, 2, :] = float("-inf")  # query row 2 may attend to nothing
    kpm = torch.zeros(3, 7, dtype=torch.bool)
    kpm[2] = True  # every key of graph 2 is padding
    q.requires_grad_(True)
    s = scale.clone().requires_grad_(True)
    out = urpe_attention(
        q, k, v, attn_bias=bias, attn_scale=s if with_scale else None, key_padding_mask=kpm
    )
    assert torch.isfinite(out).all()
    assert (out[:, :, 2] == 0).all() and (out[2] == 0).all()
    out.square().sum().backward()
    assert torch.isfinite(q.grad).all()
    if with_scale:
        assert torch.isfinite(s.grad).all()


def test_gradients_reach_scale():
    q, k, v, bias, scale, kpm = attention_inputs(5)
    s = scale.clone().requires_grad_(True)
    urpe_attention(q, k, v, attn_bias=bias, attn_scale=s, key_padding_mask=kpm).sum().backward()
    assert s.grad is not None and s.grad.abs().sum() > 0
    # a padded key's scale cannot matter
    assert (s.grad[0, :, :, -2:] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("with_scale", [False, True])
def test_half_precision(dtype, with_scale):
    q, k, v, bias, scale, kpm = attention_inputs(6)
    ref = naive_attention(q, k, v, bias, scale if with_scale else None, kpm)
    out = urpe_attention(
        q.to(dtype),
        k.to(dtype),
        v.to(dtype),
        attn_bias=bias,
        attn_scale=scale if with_scale else None,
        key_padding_mask=kpm,
    )
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    tol = 2e-2 if dtype == torch.float16 else 6e-2
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


def test_module_composes_projections_and_heads():
    torch.manual_seed(0)
    m = URPEAttention(embed_dim=16, num_heads=4).eval()
    x = torch.randn(2, 5, 16)
    bias = torch.randn(2, 4, 5, 5)
    scale = torch.rand(1, 4, 5, 5)
    out = m(x, attn_bias=bias, attn_scale=scale)

    def heads(t):
        return t.view(2, 5, 4, 4).transpose(1, 2)

    q, k, v = heads(m.q_proj(x)), heads(m.k_proj(x)), heads(m.v_proj(x))
    ref = naive_attention(q, k, v, bias, scale).float().transpose(1, 2).reshape(2, 5, 16)
    torch.testing.assert_close(out, m.out_proj(ref), atol=1e-5, rtol=1e-5)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    m = URPEAttention(embed_dim=16, num_heads=2, dropout=0.5)
    x = torch.randn(2, 6, 16)
    scale = torch.rand(1, 2, 6, 6)
    m.eval()
    a, b = m(x, attn_scale=scale), m(x, attn_scale=scale)
    torch.testing.assert_close(a, b)
    m.train()
    assert not torch.allclose(m(x, attn_scale=scale), a)


def test_rejects_indivisible_width():
    with pytest.raises(ValueError, match="divisible"):
        URPEAttention(embed_dim=10, num_heads=4)


# --- the fused attention product, dropout masks and unpadded tokens -------------------------


@pytest.mark.parametrize(
    "bias_shape, scale_shape, with_mask",
    [
        ((2, 3, 5, 5), (2, 3, 5, 5), True),
        ((1, 3, 5, 5), (1, 3, 1, 5), False),
        (None, None, False),
        ((2, 3, 5, 5), None, True),
        (None, (2, 3, 5, 5), False),
    ],
)
def test_attention_core_gradients(bias_shape, scale_shape, with_mask):
    """The hand-written backward of the attention product against finite differences."""
    from graphormer_urpe.attention.core import _AttentionCore
    from graphormer_urpe.attention.dropout import dropout_mask

    g = torch.Generator().manual_seed(0)

    def leaf(t):
        return t.double().requires_grad_(True)

    q, k, v = (leaf(torch.randn(2, 3, 5, 4, generator=g)) for _ in range(3))
    bias = None if bias_shape is None else leaf(torch.randn(bias_shape, generator=g))
    scale = None if scale_shape is None else leaf(torch.rand(scale_shape, generator=g))
    mask = None
    if with_mask:
        mask = dropout_mask((2, 3, 5, 5), 0.3, torch.device("cpu"), torch.float64)
    assert torch.autograd.gradcheck(
        lambda *a: _AttentionCore.apply(*a, mask), (q, k, v, bias, scale)
    )


@pytest.mark.parametrize("with_scale", [False, True])
def test_attention_dropout_matches_naive_formula_with_the_same_mask(with_scale, monkeypatch):
    """Dropout acts on softmax(.) ⊙ C (after C), with the usual 1/(1-p) rescaling."""
    from graphormer_urpe.attention import core
    from graphormer_urpe.attention.dropout import dropout_mask

    q, k, v, bias, scale, kpm = attention_inputs(7)
    mask = dropout_mask((3, 4, 7, 7), 0.4, torch.device("cpu"), torch.float32)
    monkeypatch.setattr(core, "dropout_mask", lambda *a, **kw: mask)
    s = scale if with_scale else torch.ones(1, 1, 1, 1)
    out = urpe_attention(
        q, k, v, bias, s if with_scale else None, kpm, dropout_p=0.4, training=True
    )
    ref = naive_attention(q, k, v, bias, s * mask, kpm)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


def test_dropout_mask_is_unbiased():
    from graphormer_urpe.attention.dropout import Dropout, dropout, dropout_mask

    torch.manual_seed(0)
    m = dropout_mask((400, 500), 0.1, torch.device("cpu"), torch.float32)
    kept = m != 0
    assert abs(1.0 - kept.float().mean().item() - 0.1) < 3e-3
    assert abs(m.mean().item() - 1.0) < 5e-3
    assert torch.unique(m[kept]).numel() == 1
    x = torch.randn(10, 10)
    assert dropout(x, 0.5, training=False) is x and dropout(x, 0.0, training=True) is x
    layer = Dropout(0.3)
    assert isinstance(layer, torch.nn.Dropout) and layer.p == 0.3
    layer.eval()
    assert layer(x) is x


def _layout(seed=0, b=4, n=6):
    from graphormer_urpe.attention.token_layout import TokenLayout

    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, n + 1, (b,), generator=g)
    lengths[0] = n  # one full row
    real = torch.arange(n)[None, :] < lengths[:, None]  # [B, N]
    return TokenLayout(real), real


def test_token_layout_round_trips():
    layout, real = _layout()
    t = int(real.sum())
    x = torch.randn(t, 8)
    dense = layout.pad(x)  # [B, N, 8]
    assert dense.shape == (4, 6, 8) and (dense[~real] == 0).all()
    torch.testing.assert_close(dense[real], x)
    torch.testing.assert_close(layout.unpad(dense), x)
    heads = layout.pad_heads(x, 2)  # [B, 2, N, 4]
    torch.testing.assert_close(heads, dense.view(4, 6, 2, 4).transpose(1, 2))
    torch.testing.assert_close(layout.unpad_heads(heads), x)
    torch.testing.assert_close(layout.first, torch.cumsum(real.sum(1), 0) - real.sum(1))


@pytest.mark.parametrize("with_scale", [False, True])
def test_attention_on_real_tokens_equals_padded_attention(with_scale):
    layout, real = _layout(1)
    torch.manual_seed(0)
    m = URPEAttention(embed_dim=16, num_heads=4).eval()
    x = torch.randn(4, 6, 16)
    bias = torch.randn(4, 4, 6, 6)
    scale = torch.rand(4, 4, 6, 6) if with_scale else None
    dense = m(x, attn_bias=bias, attn_scale=scale, key_padding_mask=~real)
    xt = x[real].requires_grad_(True)
    tokens = m(xt, attn_bias=bias, attn_scale=scale, layout=layout)  # padding mask from layout
    torch.testing.assert_close(tokens, dense[real], atol=1e-6, rtol=1e-5)
    first = m.first_query(xt, attn_bias=bias, attn_scale=scale, layout=layout)
    torch.testing.assert_close(first, dense[:, 0], atol=1e-6, rtol=1e-5)
    dense_first = m.first_query(x, bias, scale, key_padding_mask=~real)
    torch.testing.assert_close(dense_first, dense[:, 0], atol=1e-6, rtol=1e-5)
