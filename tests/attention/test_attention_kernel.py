"""The attention kernel choice and URPE's C as a table and an index, through the models.

The fused kernel itself is checked against a plain reference in ``test_fused_attention.py``;
here the models run with it (under Triton's interpreter on the CPU) and must give what they
give with the library's own kernels.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from graphormer_urpe import Graphormer, collate
from graphormer_urpe.attention.attn_scale import IndexedAttnScale
from graphormer_urpe.attention.core import urpe_attention
from graphormer_urpe.attention.kernel_choice import attention_kernel, fused_kernel_for
from graphormer_urpe.graph.encodings import LayerSpatialScales
from graphormer_urpe.graph.static_shapes import StaticShapes
from tests.helpers import graph_zoo, perturb_tables, tiny_config, tiny_xl

HOPS = 4
needs_fused = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="the fused kernel needs Triton"
)


DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
        ],
    ),
]


@pytest.fixture(autouse=True)
def interpreter(request, monkeypatch):
    """Triton's interpreter for CPU tensors (read when the kernels are first built, so set
    before the first call): on tests without a GPU, and on a test's ``cpu`` case."""
    params = getattr(request.node, "callspec", None)
    device = params.params.get("device") if params is not None else None
    if device == "cpu" or (device is None and not torch.cuda.is_available()):
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def _fused_runs() -> bool:
    from graphormer_urpe.attention.fused.kernels import fused_available

    return fused_available(torch.device("cuda" if torch.cuda.is_available() else "cpu"))


def test_indexed_scale_materialises_table_rows():
    gen = torch.Generator().manual_seed(0)
    table = torch.randn(7, 3, generator=gen)
    index = torch.randint(0, 7, (2, 5, 4), generator=gen)
    dense = IndexedAttnScale(table, index).materialize()
    assert dense.shape == (2, 3, 5, 4)
    for b, h, i, j in [(0, 0, 0, 0), (1, 2, 4, 3), (0, 1, 3, 2)]:
        assert dense[b, h, i, j] == table[index[b, i, j], h]
    first = IndexedAttnScale(table, index).first_rows()
    assert torch.equal(first.materialize(), dense[:, :, :1])


def test_attention_kernel_choice_is_scoped_and_checked():
    cpu = torch.device("cpu")
    for dev in (cpu, torch.device("cuda")):  # auto: never (slower on a GPU, measured)
        assert not fused_kernel_for(dev)
    with attention_kernel("eager"):
        assert not fused_kernel_for(cpu)
        with attention_kernel("fused"):
            assert fused_kernel_for(cpu) == _fused_runs()
        assert not fused_kernel_for(cpu)
    with pytest.raises(ValueError, match="attention kernel"):
        with attention_kernel("flash"):
            pass


def test_urpe_attention_takes_an_indexed_scale_on_every_kernel():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    table = torch.rand(5, 3, generator=gen, dtype=torch.float64) + 0.5
    index = torch.randint(0, 5, (2, 6, 6), generator=gen)
    bias = torch.randn(2, 3, 6, 6, generator=gen, dtype=torch.float64)
    bias[:, :, :, 4:] = float("-inf")
    with attention_kernel("eager"):
        want = urpe_attention(q, k, v, bias, IndexedAttnScale(table, index).materialize())
        got = urpe_attention(q, k, v, bias, IndexedAttnScale(table, index))
    torch.testing.assert_close(got, want)


def _model_and_batch(attention: str, **kw):
    torch.manual_seed(0)
    cfg = tiny_config(attention=attention, multi_hop_max_dist=HOPS, **kw)
    model = Graphormer(cfg)
    if attention == "urpe":
        with torch.no_grad():
            model.encoder.spatial_scale.scale.uniform_(0.5, 1.5)
            model.encoder.spatial_scale.graph_token_scale.uniform_(0.5, 1.5)
    graphs = graph_zoo(seed=2, count=6)
    gen = torch.Generator().manual_seed(0)
    for g in graphs:
        g.y = torch.randn(1, generator=gen)
    return model, collate(graphs, HOPS, static=StaticShapes(8, HOPS))


def _outputs_and_grads(model, batch, kind: str):
    model.zero_grad(set_to_none=True)
    with attention_kernel(kind):
        out = model(batch)
        out[: batch.num_graphs].square().sum().backward()
    return out.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@needs_fused
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
def test_models_give_the_same_values_and_gradients_with_the_fused_kernel(attention, device):
    model, batch = _model_and_batch(attention)
    model, batch = model.to(device).train(), batch.to(device)  # no dropout: deterministic
    want, want_grads = _outputs_and_grads(model, batch, "eager")
    got, grads = _outputs_and_grads(model, batch, "fused")
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert grads.keys() == want_grads.keys()
    for name, g in grads.items():
        scale = float(want_grads[name].abs().max()) + 1e-6
        assert float((g - want_grads[name]).abs().max()) / scale < 1e-4, name


@needs_fused
def test_urpe_scales_reach_the_fused_kernel_as_table_and_index():
    model, batch = _model_and_batch("urpe")
    enc = model.encoder
    with attention_kernel("fused"):
        scales = LayerSpatialScales(
            enc.spatial_scale, batch.spatial_pos, batch.node_mask, enc.config.num_layers
        )
        c = scales[1]
    assert isinstance(c, IndexedAttnScale)
    assert c.table.shape == (enc.config.urpe_num_buckets + 3, enc.config.num_heads)
    assert c.index.dtype == torch.int32 and c.index.shape == batch.attn_bias.shape
    with attention_kernel("eager"):
        dense = LayerSpatialScales(
            enc.spatial_scale, batch.spatial_pos, batch.node_mask, enc.config.num_layers
        )[1]
    torch.testing.assert_close(c.materialize(), dense)


@needs_fused
@pytest.mark.parametrize("device", DEVICES)
def test_the_sequence_models_dense_scales_run_in_the_fused_kernel(device):
    from graphormer_urpe.sequence.model import SequenceModelConfig, SequenceTransformer

    torch.manual_seed(0)
    cfg = SequenceModelConfig(vocab=30, max_len=12, layers=2, width=16, heads=2, ffn=32, pe="urpe")
    dtype = torch.float64 if device == "cpu" else torch.float32
    model = SequenceTransformer(cfg).to(device, dtype)
    with torch.no_grad():
        for t in model.rel_scales:
            for p in t.parameters():
                p.uniform_(0.5, 1.5)
    tokens = torch.randint(11, 35, (3, 12), generator=torch.Generator().manual_seed(1))
    tokens = tokens.to(device)
    outs = {}
    for kind in ("eager", "fused"):
        model.zero_grad(set_to_none=True)
        with attention_kernel(kind):
            out = model.features(tokens)
            out.square().sum().backward()
        outs[kind] = (out.detach(), [p.grad.clone() for p in model.rel_scales.parameters()])
    tol = dict(atol=1e-8, rtol=1e-6) if dtype == torch.float64 else dict(atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(outs["fused"][0], outs["eager"][0], **tol)
    for a, b in zip(outs["fused"][1], outs["eager"][1], strict=True):
        torch.testing.assert_close(a, b, **tol)


@needs_fused
@pytest.mark.parametrize("pe", ["urpe", "xl-urpe"])
def test_the_language_models_run_in_the_fused_kernel(pe):
    """Causal masks, a memory of the previous segment and (xl-urpe) query-dependent biases:
    the fused kernel gives the eager logits and gradients."""

    torch.manual_seed(5)
    model = tiny_xl(pe, tgt_len=6, mem_len=6, share_scale=False).train()
    perturb_tables(model)
    tokens = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(2))
    outs = {}
    for kind in ("eager", "fused"):
        model.zero_grad(set_to_none=True)
        with attention_kernel(kind):
            first, memory = model(tokens[:, :6])
            second, _ = model(tokens[:, 6:], memory)
            (first.square().sum() + second.square().sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        outs[kind] = (torch.cat([first, second], 1).detach(), grads)
    torch.testing.assert_close(outs["fused"][0], outs["eager"][0], atol=1e-5, rtol=1e-5)
    assert outs["fused"][1].keys() == outs["eager"][1].keys()
    scale = max(float(g.abs().max()) for g in outs["eager"][1].values())
    for name, g in outs["fused"][1].items():  # (a key bias's gradient is 0 up to rounding)
        assert float((g - outs["eager"][1][name]).abs().max()) <= 1e-5 * scale, name


def test_one_indexed_attn_scale_is_shared_by_every_layer_of_an_encoder():
    """An :class:`IndexedAttnScale` (a table and an index, itself a tuple) passed once is the
    ``C`` of every layer, as its dense tensor is, not a sequence of per-layer ``C``."""
    from graphormer_urpe.encoder import Encoder

    torch.manual_seed(0)
    enc = Encoder(3, embed_dim=8, ffn_dim=16, num_heads=2, dropout=0.0, attention_dropout=0.0)
    enc.eval()
    x = torch.randn(2, 5, 8)
    table = 0.5 + torch.rand(4, 2)
    index = torch.randint(0, 4, (2, 5, 5))
    indexed = IndexedAttnScale(table, index)
    dense = indexed.materialize()  # [B, H, N, N]
    torch.testing.assert_close(enc(x, attn_scale=indexed), enc(x, attn_scale=dense))
    assert not torch.allclose(enc(x, attn_scale=dense), enc(x))  # C changes the output


def test_the_old_name_of_indexed_attn_scale_still_works_and_warns():
    import graphormer_urpe.attention as attention

    with pytest.warns(DeprecationWarning, match="IndexedAttnScale"):
        old = attention.IndexedScale
    assert old is IndexedAttnScale
    assert "IndexedScale" not in attention.__all__ and "AttnScale" in attention.__all__
