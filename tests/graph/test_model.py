"""Graphormer / URPE-Graphormer model: parameter counts, reference maths, invariances."""

from __future__ import annotations

import copy

import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader as PyGDataLoader

from graphormer_urpe import (
    PRESETS,
    Graphormer,
    GraphormerConfig,
    GraphormerEncoder,
    GraphormerFeatures,
    collate,
    get_preset,
)
from graphormer_urpe.graph.encodings import LayerSpatialScales
from tests.helpers import graph_zoo, load_zinc_val_graphs, random_graph, tiny_config

PAPER_GRAPHORMER_PARAMS = 489_321
PAPER_URPE_PARAMS = 491_737


def n_params(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def test_zinc_slim_parameter_counts_match_the_paper():
    g = n_params(Graphormer.from_preset("zinc-slim"))
    u = n_params(Graphormer.from_preset("zinc-slim", attention="urpe"))
    assert abs(g - PAPER_GRAPHORMER_PARAMS) / PAPER_GRAPHORMER_PARAMS < 1e-3
    assert u - g == PAPER_URPE_PARAMS - PAPER_GRAPHORMER_PARAMS == 2416
    shared = n_params(Graphormer.from_preset("zinc-slim", attention="urpe", urpe_share_layers=True))
    assert shared - g == 25 * 8 + 2 * 8


def test_pcqm4mv2_base_is_the_47m_model():
    n = n_params(Graphormer.from_preset("pcqm4mv2-base"))
    assert abs(n - 47.1e6) / 47.1e6 < 2e-3
    assert PRESETS["pcqm4mv2-base"].multi_hop_max_dist == 5


def test_unknown_preset_and_bad_config():
    with pytest.raises(KeyError, match="unknown preset"):
        get_preset("nope")
    with pytest.raises(ValueError, match="attention"):
        GraphormerConfig(attention="softmax")
    with pytest.raises(ValueError, match="unknown"):
        GraphormerConfig.from_dict({"hidden": 3})


def reference_attention_bias(module, batch):
    """Graphormer v1's graph attention bias, transcribed (per-hop bmm, mean over features)."""
    h = module.num_heads
    attn_bias = batch.attn_bias
    spatial_pos = batch.spatial_pos
    n_graph, n_node = batch.x.shape[:2]
    graph_attn_bias = attn_bias.clone().unsqueeze(1).repeat(1, h, 1, 1)
    sp = spatial_pos.clamp(max=module.spatial_pos_encoder.num_embeddings - 1)
    spatial_bias = module.spatial_pos_encoder(sp).permute(0, 3, 1, 2)
    graph_attn_bias[:, :, 1:, 1:] = graph_attn_bias[:, :, 1:, 1:] + spatial_bias
    t = module.graph_token_virtual_distance.weight.view(1, h, 1)
    graph_attn_bias[:, :, 1:, 0] = graph_attn_bias[:, :, 1:, 0] + t
    graph_attn_bias[:, :, 0, :] = graph_attn_bias[:, :, 0, :] + t
    sp_ = spatial_pos.clone()
    sp_[sp_ == 0] = 1
    sp_ = torch.where(sp_ > 1, sp_ - 1, sp_)
    sp_ = sp_.clamp(0, module.multi_hop_max_dist)
    edge_input = batch.edge_input[:, :, :, : module.multi_hop_max_dist, :]
    edge_input = module.edge_encoder(edge_input).mean(-2)
    max_dist = edge_input.size(-2)
    if max_dist == 0:  # no graph has an edge: no multi-hop term
        return graph_attn_bias + attn_bias.unsqueeze(1)
    flat = edge_input.permute(3, 0, 1, 2, 4).reshape(max_dist, -1, h)
    flat = torch.bmm(flat, module.edge_dis_encoder.weight.reshape(-1, h, h)[:max_dist, :, :])
    edge_input = flat.reshape(max_dist, n_graph, n_node, n_node, h).permute(1, 2, 3, 0, 4)
    edge_input = (edge_input.sum(-2) / (sp_.float().unsqueeze(-1))).permute(0, 3, 1, 2)
    graph_attn_bias[:, :, 1:, 1:] = graph_attn_bias[:, :, 1:, 1:] + edge_input
    return graph_attn_bias + attn_bias.unsqueeze(1)


@pytest.mark.parametrize("fe", [1, 3])
def test_attention_bias_matches_graphormer_reference(fe):
    torch.manual_seed(0)
    graphs = graph_zoo(seed=4, count=12, node_features=fe, edge_features=fe)
    cfg = tiny_config(multi_hop_max_dist=4, num_atoms=512 * fe + 1, num_edges=512 * fe + 1)
    enc = GraphormerEncoder(cfg)
    batch = enc.collate(graphs)
    got = enc.attention_bias(batch)
    ref = reference_attention_bias(enc.attention_bias, batch)
    finite = torch.isfinite(ref)
    assert torch.equal(finite, torch.isfinite(got))
    torch.testing.assert_close(got[finite], ref[finite], atol=1e-6, rtol=1e-5)


def _permute(data: Data, perm: torch.Tensor) -> Data:
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    return Data(x=data.x[perm], edge_index=inv[data.edge_index], edge_attr=data.edge_attr, y=data.y)


@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
def test_node_permutation_invariance(attention):
    """Invariant up to float error when the path features cannot depend on tie-breaking.

    Floyd–Warshall's tie-breaking picks one of several equally short paths by node order, so
    the multi-hop edge features of a pair may change under renumbering when tied paths carry
    different bonds; with one bond type every tied path has the same features.
    """
    torch.manual_seed(0)
    model = GraphormerEncoder(tiny_config(attention=attention)).eval()
    graphs = [g for g in graph_zoo(seed=9, count=20) if g.num_nodes > 3][:6]
    for g in graphs:
        g.edge_attr = torch.ones_like(g.edge_attr)
    node_emb, graph_emb = model(graphs)
    g = torch.Generator().manual_seed(1)
    perms = [torch.randperm(d.num_nodes, generator=g) for d in graphs]
    node_p, graph_p = model([_permute(d, p) for d, p in zip(graphs, perms, strict=True)])
    torch.testing.assert_close(graph_emb, graph_p, atol=1e-5, rtol=1e-4)
    start = 0
    for d, p in zip(graphs, perms, strict=True):
        n = d.num_nodes
        torch.testing.assert_close(
            node_emb[start : start + n][p], node_p[start : start + n], atol=1e-4, rtol=1e-4
        )
        start += n


def test_urpe_equals_graphormer_at_initialisation():
    torch.manual_seed(0)
    plain = Graphormer(tiny_config()).eval()
    urpe = Graphormer(tiny_config(attention="urpe")).eval()
    missing, unexpected = urpe.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and all("spatial_scale" in k for k in missing)
    graphs = graph_zoo(seed=6, count=16)
    torch.testing.assert_close(plain(graphs), urpe(graphs), atol=1e-5, rtol=1e-5)
    # and URPE differs once C moves away from 1
    with torch.no_grad():
        urpe.encoder.spatial_scale.scale[:, 2:] = 0.3
    assert not torch.allclose(plain(graphs), urpe(graphs), atol=1e-4)


def test_output_independent_of_batch_composition():
    torch.manual_seed(0)
    model = Graphormer(tiny_config(attention="urpe")).eval()
    graphs = graph_zoo(seed=8, count=10)
    together = model(graphs)
    alone = torch.cat([model([g]) for g in graphs])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-4)


def test_pyg_batch_inputs_equal_dense_inputs():
    torch.manual_seed(0)
    enc = GraphormerEncoder(tiny_config()).eval()
    graphs = graph_zoo(seed=10, count=8)
    t = GraphormerFeatures(multi_hop_max_dist=20)
    pyg = Batch.from_data_list([t(g.clone()) for g in graphs])
    node_a, graph_a = enc(pyg)
    node_b, graph_b = enc(collate(graphs))
    node_c, graph_c = enc(Batch.from_data_list(graphs))  # features computed on the fly
    assert node_a.shape == (pyg.num_nodes, 32) and graph_a.shape == (8, 32)
    torch.testing.assert_close(node_a, node_b)
    torch.testing.assert_close(graph_a, graph_c)
    torch.testing.assert_close(node_a, node_c)


def test_encoder_as_a_layer_in_a_pyg_model():
    """A user's model: Graphormer node embeddings feed a PyG pooling and a linear head."""
    from torch_geometric.nn import global_mean_pool

    class UserModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = GraphormerEncoder(tiny_config(attention="urpe"))
            self.out = torch.nn.Linear(64, 1)

        def forward(self, batch):
            nodes, graph = self.enc(batch)
            return self.out(torch.cat([global_mean_pool(nodes, batch.batch), graph], dim=-1))

    graphs = [GraphormerFeatures(20)(g) for g in graph_zoo(seed=12, count=12)]
    loader = PyGDataLoader(graphs, batch_size=6)
    model = UserModel()
    batch = next(iter(loader))
    out = model(batch)
    assert out.shape == (6, 1)
    out.sum().backward()
    assert model.enc.spatial_scale.scale.grad.abs().sum() > 0


@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
def test_tiny_overfit_loss_decreases(attention):
    torch.manual_seed(0)
    graphs = [g for g in graph_zoo(seed=13, count=40) if g.num_nodes > 1][:16]
    for i, g in enumerate(graphs):
        g.y = torch.tensor([[float(g.num_nodes % 5) + 0.1 * i]])
    model = Graphormer(tiny_config(attention=attention))
    batch = model.encoder.collate(graphs)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(150):
        opt.zero_grad()
        loss = (model(batch) - batch.y).abs().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.25 * losses[0]


def test_real_zinc_batch_forward_backward():
    graphs = load_zinc_val_graphs(limit=64)
    torch.manual_seed(0)
    model = Graphormer.from_preset("zinc-slim", attention="urpe")
    out = model(graphs)
    assert out.shape == (64, 1) and torch.isfinite(out).all()
    (out - model.encoder.collate(graphs).y).abs().mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_bfloat16_autocast_forward_is_close_to_float32():
    torch.manual_seed(0)
    model = Graphormer(tiny_config(attention="urpe")).eval()
    graphs = graph_zoo(seed=14, count=8)
    batch = model.encoder.collate(graphs)
    ref = model(batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(batch)
    assert torch.isfinite(low).all()
    torch.testing.assert_close(low.float(), ref, atol=5e-2, rtol=5e-2)


def test_shared_and_per_layer_scales():
    torch.manual_seed(0)
    per = GraphormerEncoder(tiny_config(attention="urpe"))
    shared = GraphormerEncoder(tiny_config(attention="urpe", urpe_share_layers=True))
    assert per.spatial_scale.scale.shape == (3, 25, 4)
    assert shared.spatial_scale.scale.shape == (1, 25, 4)
    batch = per.collate(graph_zoo(seed=15, count=4))
    c = per.spatial_scale(batch.spatial_pos, batch.node_mask, 1)
    assert c.shape == (4, 4, batch.x.shape[1] + 1, batch.x.shape[1] + 1)
    pad = ~batch.node_mask
    assert (c[:, :, :, 1:][pad[:, None, None, :].expand_as(c[:, :, :, 1:])] == 0).all()


def test_state_dict_round_trip():
    m = Graphormer(tiny_config(attention="urpe"))
    m2 = Graphormer(copy.deepcopy(m.config))
    m2.load_state_dict(m.state_dict())
    graphs = graph_zoo(seed=16, count=4)
    m.eval(), m2.eval()
    torch.testing.assert_close(m(graphs), m2(graphs))


def test_too_small_tables_give_a_clear_error():
    model = Graphormer(tiny_config())  # ZINC-sized tables
    graphs = graph_zoo(seed=17, count=3, node_features=9, edge_features=3)
    with pytest.raises(ValueError, match="num_atoms"):
        model(graphs)


# --- unpadded tokens against the plain padded computation ---------------------------------


def plain_padded_forward(enc: GraphormerEncoder, batch) -> torch.Tensor:
    """The whole encoder written plainly on padded ``[B, n+1, d]`` tensors (the oracle).

    Node embeddings by ``nn.Embedding`` sums, ``B`` by the Graphormer transcription above,
    ``C`` by ``nn.functional.embedding`` + permute, and every layer as the paper's equations.
    """
    ne = enc.node_embedding
    x = ne.atom_encoder(batch.x).sum(-2) + ne.in_degree_encoder(batch.in_degree)
    x = x + ne.out_degree_encoder(batch.out_degree)
    b = x.shape[0]
    x = torch.cat([ne.graph_token.weight.expand(b, 1, -1), x], dim=1)  # [B, n+1, d]
    bias = reference_attention_bias(enc.attention_bias, batch)  # [B, H, n+1, n+1]
    index = None
    if enc.spatial_scale is not None:
        index = enc.spatial_scale.index(batch.spatial_pos, batch.node_mask)
    for i, layer in enumerate(enc.encoder.layers):
        att = layer.self_attn
        hn = layer.attn_norm(x)

        def heads(t, att=att):
            return t.view(b, -1, att.num_heads, att.head_dim).transpose(1, 2)

        q, k, v = heads(att.q_proj(hn)), heads(att.k_proj(hn)), heads(att.v_proj(hn))
        probs = torch.softmax(q @ k.transpose(-1, -2) / att.head_dim**0.5 + bias, dim=-1)
        if index is not None:
            sc = enc.spatial_scale
            table = sc.scale[i if sc.scale.shape[0] > 1 else 0]
            rows = torch.cat([table, sc.graph_token_scale, table.new_zeros(1, table.shape[1])])
            probs = probs * torch.nn.functional.embedding(index, rows).permute(0, 3, 1, 2)
        out = (probs @ v).transpose(1, 2).reshape(b, -1, att.embed_dim)
        x = x + att.out_proj(out)
        x = x + layer.fc2(torch.nn.functional.gelu(layer.fc1(layer.ffn_norm(x))))
    return enc.encoder.final_norm(x)


def _equal_sized_graphs(n: int, count: int, seed: int) -> list[Data]:

    rng = __import__("numpy").random.default_rng(seed)
    return [random_graph(rng, n, 0.3, node_features=3, edge_features=3) for _ in range(count)]


def _perturbed_encoder(attention: str, **kw) -> GraphormerEncoder:
    torch.manual_seed(0)
    cfg = tiny_config(
        attention=attention,
        multi_hop_max_dist=4,
        num_atoms=512 * 3 + 1,
        num_edges=512 * 3 + 1,
        **kw,
    )
    enc = GraphormerEncoder(cfg).train()  # train mode: all dropouts are 0
    with torch.no_grad():  # move every parameter away from its initial value
        for p in enc.parameters():
            p.add_(0.05 * torch.randn_like(p))
        for m in enc.modules():
            if isinstance(m, torch.nn.Embedding) and m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()
    return enc


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
        for n, p in module.named_parameters()
    }


BATCHES = {
    "mixed_sizes_and_single_atoms": lambda: graph_zoo(
        seed=31, count=18, node_features=3, edge_features=3
    ),
    "nothing_padded": lambda: _equal_sized_graphs(7, 5, seed=32),
    "single_atoms_only": lambda: _equal_sized_graphs(1, 3, seed=33),
}


@pytest.mark.parametrize("case", sorted(BATCHES))
@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
@pytest.mark.parametrize("pad_to_multiple", [1, 8])
def test_unpadded_encoder_equals_padded_computation(case, attention, pad_to_multiple):
    """Forward values of the real tokens and gradients of every parameter, in float32."""
    enc = _perturbed_encoder(attention)
    graphs = BATCHES[case]()
    batch = collate(graphs, 4, spatial_pos_max=6, pad_to_multiple=pad_to_multiple)
    assert (batch.x.shape[1] + 1) % pad_to_multiple == 0
    real = batch.token_mask  # [B, n+1]
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(int(real.sum()), 32, generator=g)

    ref = plain_padded_forward(enc, batch)[real]  # [T, d]
    (ref * weight).sum().backward()
    ref_grads = _grads(enc)
    enc.zero_grad(set_to_none=True)

    got, tokens = enc.forward_tokens(batch)
    (got * weight).sum().backward()
    got_grads = _grads(enc)

    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    assert tokens.num_tokens == int(real.sum())
    for name, r in ref_grads.items():
        # float32 rounding grows with the gradient's scale (some reach ~100 here)
        scale = max(1.0, r.abs().max().item())
        torch.testing.assert_close(got_grads[name], r, atol=1e-6 * scale, rtol=1e-4, msg=name)
    # the dense view pads with zeros around the same values
    dense = enc.forward_dense(batch)
    torch.testing.assert_close(dense[real], got)
    assert (dense[~real] == 0).all()


@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
def test_graph_token_readout_equals_full_last_layer(attention):
    """Graphormer computes only the graph tokens in the last layer: same values and grads."""
    torch.manual_seed(0)
    model = Graphormer(tiny_config(attention=attention)).train()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    batch = model.encoder.collate(graph_zoo(seed=34, count=12))
    out = model(batch)
    out.square().sum().backward()
    fast = _grads(model)
    model.zero_grad(set_to_none=True)
    h, tokens = model.encoder.forward_tokens(batch)
    ref = model.head(h.index_select(0, tokens.graph_index))
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
    for name, r in _grads(model).items():
        torch.testing.assert_close(fast[name], r, atol=1e-6, rtol=1e-4, msg=name)


def test_attention_bias_gradients_match_graphormer_reference():
    torch.manual_seed(0)
    graphs = graph_zoo(seed=35, count=12, node_features=3, edge_features=3)
    cfg = tiny_config(multi_hop_max_dist=4, num_atoms=512 * 3 + 1, num_edges=512 * 3 + 1)
    enc = GraphormerEncoder(cfg)
    module = enc.attention_bias
    batch = enc.collate(graphs)
    ref = reference_attention_bias(module, batch)
    upstream = torch.randn(ref.shape).masked_fill(~torch.isfinite(ref), 0.0)
    (ref.masked_fill(~torch.isfinite(ref), 0.0) * upstream).sum().backward()
    ref_grads = _grads(module)
    module.zero_grad(set_to_none=True)
    got = module(batch)
    (got.masked_fill(~torch.isfinite(got), 0.0) * upstream).sum().backward()
    for name, r in ref_grads.items():
        torch.testing.assert_close(_grads(module)[name], r, atol=1e-6, rtol=1e-5, msg=name)


def test_dense_encoder_layer_api_still_works():
    """A user calling the layers on dense [B, N, d] input gets the padded computation."""
    enc = _perturbed_encoder("urpe")
    batch = collate(graph_zoo(seed=36, count=8, node_features=3, edge_features=3), 4)
    h = enc.node_embedding(batch)  # [B, n+1, d]
    scales = LayerSpatialScales(enc.spatial_scale, batch.spatial_pos, batch.node_mask, 3)
    dense = enc.encoder(h, attn_bias=enc.attention_bias(batch), attn_scale=scales)
    real = batch.token_mask
    torch.testing.assert_close(dense[real], enc.forward_tokens(batch)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attention", ["graphormer", "urpe"])
def test_outputs_unchanged_by_pad_to_multiple(attention):
    enc = _perturbed_encoder(attention).eval()
    model = Graphormer(enc.config).eval()
    graphs = graph_zoo(seed=43, count=11, node_features=3, edge_features=3)
    b1 = collate(graphs, 4, pad_to_multiple=1)
    b8 = collate(graphs, 4, pad_to_multiple=8)
    assert b8.x.shape[1] > b1.x.shape[1]
    for a, b in zip(enc(b1), enc(b8), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model(b1), model(b8), atol=1e-5, rtol=1e-5)
