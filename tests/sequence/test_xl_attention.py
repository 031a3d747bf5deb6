"""Tests of Transformer-XL's relative attention on the URPE core, and of the adaptive softmax."""

from __future__ import annotations

import math

import pytest
import torch

from graphormer_urpe.sequence import TransformerXL, TransformerXLConfig, lm_config
from graphormer_urpe.sequence.adaptive_softmax import TiedAdaptiveLogSoftmax
from graphormer_urpe.sequence.xl_attention import (
    XLPositions,
    XLRelativeAttention,
    relative_shift,
    sinusoid_encoding,
    xl_position_bias,
)
from tests.helpers import tiny_xl


def _loop_scores(q, k, r_proj, u, v, m):
    """Transformer-XL's score of every allowed (query, key) pair, one at a time (float64).

    ``q [H, N, d_h]``, ``k [H, M + N, d_h]``, ``r_proj(d) -> [H, d_h]`` (``W_R r_d`` per head);
    returns ``[H, N, M + N]`` with -inf on future keys, before the 1 / sqrt(d_h) scaling.
    """
    h, n, _ = q.shape
    out = torch.full((h, n, m + n), float("-inf"), dtype=torch.float64)
    for i in range(n):
        for j in range(m + i + 1):
            wr = r_proj(m + i - j)  # [H, d_h]
            for hh in range(h):
                out[hh, i, j] = (
                    q[hh, i] @ k[hh, j] + q[hh, i] @ wr[hh] + u[hh] @ k[hh, j] + v[hh] @ wr[hh]
                )
    return out


@pytest.mark.parametrize("memory_len", [0, 5])
def test_relative_shift_equals_the_direct_formula(memory_len: int) -> None:
    """B from the relative shift + the core's q k^T / sqrt(d_h) equal the O(N M) loop of
    q_i.k_j + q_i.W_R r_{i-j} + u.k_j + v.W_R r_{i-j}, scaled by 1 / sqrt(d_h)."""
    gen = torch.Generator().manual_seed(0)
    b, h, n, m, dh, d = 2, 3, 6, memory_len, 4, 10
    kk = m + n
    q = torch.randn(b, h, n, dh, generator=gen, dtype=torch.float64)
    k = torch.randn(b, h, kk, dh, generator=gen, dtype=torch.float64)
    w_r = torch.randn(h * dh, d, generator=gen, dtype=torch.float64)
    u = torch.randn(h, dh, generator=gen, dtype=torch.float64)
    v = torch.randn(h, dh, generator=gen, dtype=torch.float64)

    def r_proj(dist: int) -> torch.Tensor:  # W_R r_dist, [H, d_h]
        r = sinusoid_encoding(torch.tensor([dist]), d).double()[0]
        return (w_r @ r).view(h, dh)

    rel = torch.stack([r_proj(dist) for dist in range(kk, -1, -1)], dim=1)  # [H, K + 1, d_h]
    bias = xl_position_bias(q, k, rel, u, v)
    got = q @ k.transpose(-1, -2) / math.sqrt(dh) + bias
    for bi in range(b):
        want = _loop_scores(q[bi], k[bi], r_proj, u, v, m) / math.sqrt(dh)
        assert torch.equal(torch.isinf(got[bi]), torch.isinf(want))
        ok = ~torch.isinf(want)
        torch.testing.assert_close(got[bi][ok], want[ok], rtol=1e-12, atol=1e-12)


def test_relative_shift_gradients_equal_the_direct_formula() -> None:
    """The hand-written backward of the shifted scores gives the loop formula's gradients."""
    gen = torch.Generator().manual_seed(1)
    b, h, n, m, dh, d = 2, 2, 5, 3, 4, 6
    kk = m + n

    def leaf(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_()

    q, k, w_r, u, v = (
        leaf(b, h, n, dh),
        leaf(b, h, kk, dh),
        leaf(h * dh, d),
        leaf(h, dh),
        leaf(h, dh),
    )
    weight = torch.randn(b, h, n, kk, generator=gen, dtype=torch.float64)

    def r_proj(dist: int) -> torch.Tensor:
        r = sinusoid_encoding(torch.tensor([dist]), d).double()[0]
        return (w_r @ r).view(h, dh)

    rel = torch.stack([r_proj(dist) for dist in range(kk, -1, -1)], dim=1)
    got = q @ k.transpose(-1, -2) / math.sqrt(dh) + xl_position_bias(q, k, rel, u, v)
    want = torch.stack([_loop_scores(q[i], k[i], r_proj, u, v, m) for i in range(b)])
    want = want / math.sqrt(dh)
    grads = []
    for scores in (got, want):
        finite = scores.masked_fill(torch.isinf(scores), 0.0)
        grads.append(torch.autograd.grad((finite * weight).sum(), (q, k, w_r, u, v)))
    for g_got, g_want in zip(*grads, strict=True):
        torch.testing.assert_close(g_got, g_want, rtol=1e-10, atol=1e-10)


def test_relative_shift_moves_every_row_by_its_query() -> None:
    n, k = 3, 5
    scores = torch.arange(n * (k + 1), dtype=torch.float32).view(1, n, k + 1)
    out = relative_shift(scores)
    assert out.shape == (1, n, k)
    m = k - n
    for i in range(n):
        for j in range(m + i + 1):
            assert out[0, i, j] == scores[0, i, n - i + j]


def test_xl_attention_layer_equals_a_plain_reference() -> None:
    """One relative-attention layer with memory equals softmax of the loop scores times V."""
    torch.manual_seed(5)
    b, m, n, d, h = 2, 4, 5, 12, 3
    dh = d // h
    attn = XLRelativeAttention(d, h).double().eval()
    mem, x = torch.randn(b, m, d).double(), torch.randn(b, n, d).double()
    u, v = torch.randn(h, dh).double(), torch.randn(h, dh).double()
    enc = sinusoid_encoding(torch.arange(m + n, -1, -1), d).double()
    scale = 1 + 0.3 * torch.randn(1, h, n, m + n).double()
    got = attn(x, XLPositions(enc, u, v), scale, memory=mem)

    kv = torch.cat([mem, x], 1)
    q = attn.q_proj(x).view(b, n, h, dh).transpose(1, 2)
    k = attn.k_proj(kv).view(b, m + n, h, dh).transpose(1, 2)
    val = attn.v_proj(kv).view(b, m + n, h, dh).transpose(1, 2)

    def r_proj(dist: int) -> torch.Tensor:
        r = sinusoid_encoding(torch.tensor([dist]), d).double()[0]
        return attn.r_proj(r).view(h, dh)

    outs = []
    for bi in range(b):
        s = _loop_scores(q[bi], k[bi], r_proj, u, v, m) / math.sqrt(dh)
        p = torch.softmax(s, -1) * scale[0]  # [H, N, K]
        outs.append((p @ val[bi]).transpose(0, 1).reshape(n, d))
    want = attn.out_proj(torch.stack(outs))
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_xl_gradients_reach_u_v_and_w_r() -> None:
    torch.manual_seed(6)
    model = tiny_xl("xl-urpe").train()
    logits, mem = model(torch.randint(0, 40, (2, 8)))
    logits, _ = model(torch.randint(0, 40, (2, 8)), mem)
    logits.logsumexp(-1).sum().backward()
    for name in ("u", "v", "encoder.layers.0.self_attn.r_proj.weight", "rel_scales.0.weight"):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name


def test_adaptive_softmax_equals_a_plain_two_level_softmax() -> None:
    torch.manual_seed(7)
    d, vocab, cutoffs = 6, 11, [4, 7]
    ada = TiedAdaptiveLogSoftmax(d, vocab, cutoffs)
    ada.reset_parameters(0.5)
    weight, bias, h = torch.randn(vocab, d), torch.randn(vocab), torch.randn(3, d)
    with torch.no_grad():
        got = ada(h, weight, bias)
    assert got.shape == (3, vocab)
    torch.testing.assert_close(got.logsumexp(-1), torch.zeros(3), atol=1e-5, rtol=0)
    for t in range(3):
        head = [weight[w] @ h[t] + bias[w] for w in range(4)]  # the head's words, clusters
        head += [(ada.cluster_weight[c] @ h[t] + ada.cluster_bias[c]).detach() for c in range(2)]
        p_head = torch.softmax(torch.stack(head), 0)
        for w in range(vocab):
            if w < 4:
                p = p_head[w]
            else:
                c, lo, hi = (0, 4, 7) if w < 7 else (1, 7, 11)
                tail = torch.stack([weight[x] @ h[t] + bias[x] for x in range(lo, hi)])
                p = p_head[4 + c] * torch.softmax(tail, 0)[w - lo]
            assert float(got[t, w].exp()) == pytest.approx(float(p), rel=1e-5)
    with pytest.raises(ValueError, match="cutoffs"):
        TiedAdaptiveLogSoftmax(d, vocab, [7, 4])


def test_paper_preset_has_the_published_151m_parameters() -> None:
    """Transformer-XL base with WikiText-103's 267,735 symbols: Dai et al. report 151M.

    Counted as every parameter of the model once (the tied embedding / output weight once),
    built on the meta device (no memory). The count must equal the reference code's layout
    exactly (per layer: q, k, v, o and W_R without biases, two LayerNorms, the feed-forward
    block; u and v shared; embedding, output bias and 3 adaptive-softmax clusters) and be
    within 0.5% of 151M."""
    cfg = lm_config("paper", "wikitext-103", vocab_size=267_735)
    assert cfg.model.pe == "xl" and cfg.model.adaptive_cutoffs == [20_000, 40_000, 200_000]
    assert (cfg.model.layers, cfg.model.width, cfg.model.heads) == (16, 410, 10)
    assert (cfg.model.ffn, cfg.model.tgt_len, cfg.model.mem_len) == (2100, 150, 150)
    with torch.device("meta"):
        model = TransformerXL(cfg.model)
    count = sum(p.numel() for p in model.parameters())
    d, f, v, layers = 410, 2100, 267_735, 16
    per_layer = 5 * d * d + 2 * 2 * d + (d * f + f) + (f * d + d)
    reference = layers * per_layer + 2 * d + v * d + v + 3 * (d + 1)
    assert count == reference == 151_107_538
    assert abs(count - 151e6) / 151e6 < 0.005
    # On a character corpus the cutoffs lie beyond the vocabulary: one full softmax.
    small = TransformerXLConfig(vocab_size=102, adaptive_cutoffs=[20_000, 40_000, 200_000])
    assert small.cutoffs == [] and TransformerXL(small).adaptive is None
