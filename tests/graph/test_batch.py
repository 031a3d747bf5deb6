"""Dense batching: padding, offsets and attention-bias rules."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch_geometric.data import Batch, Data

from graphormer_urpe import GraphormerCollator, GraphormerFeatures, collate
from tests.helpers import graph_zoo
from tests.reference import ref_collate, ref_preprocess

NEG = float("-inf")


def _path3() -> Data:
    # 0-1-2 path, bond types 1 and 3, atom types 5, 0, 7
    return Data(
        x=torch.tensor([[5], [0], [7]]),
        edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]),
        edge_attr=torch.tensor([1, 1, 3, 3]),
        y=torch.tensor([1.5]),
    )


def _single() -> Data:
    return Data(
        x=torch.tensor([[2]]),
        edge_index=torch.zeros(2, 0, dtype=torch.long),
        edge_attr=torch.zeros(0, dtype=torch.long),
        y=torch.tensor([-0.5]),
    )


def test_hand_built_batch_values():
    b = collate([_path3(), _single()], multi_hop_max_dist=20)
    assert b.num_graphs == 2
    assert b.x.shape == (2, 3, 1)
    assert b.x[:, :, 0].tolist() == [[7, 2, 9], [4, 0, 0]]
    assert b.in_degree.tolist() == [[2, 3, 2], [1, 0, 0]]
    assert b.spatial_pos[0].tolist() == [[1, 2, 3], [2, 1, 2], [3, 2, 1]]
    assert b.spatial_pos[1].tolist() == [[1, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert b.edge_input.shape == (2, 3, 3, 2, 1)
    assert b.edge_input[0, 0, 2, :, 0].tolist() == [4, 6]  # raw + 3
    assert b.edge_input[0, 1, 2, :, 0].tolist() == [6, 0]
    assert b.edge_input[0, 1, 1, :, 0].tolist() == [0, 0]
    assert (b.edge_input[1] == 0).all()
    assert b.attn_bias.shape == (2, 4, 4)
    assert (b.attn_bias[0] == 0).all()
    # graph 2: real block 2x2, padded keys -inf for real rows, padded rows see the real keys
    expected = [[0, 0, NEG, NEG], [0, 0, NEG, NEG], [0, 0, NEG, NEG], [0, 0, NEG, NEG]]
    assert b.attn_bias[1].tolist() == expected
    assert b.node_mask.tolist() == [[True, True, True], [True, False, False]]
    assert b.num_nodes.tolist() == [3, 1]
    assert b.y.tolist() == [[1.5], [-0.5]]


def test_spatial_pos_max_masks_far_pairs():
    b = collate([_path3()], spatial_pos_max=2)
    assert b.attn_bias[0, 1, 3] == NEG and b.attn_bias[0, 3, 1] == NEG
    assert b.attn_bias[0, 1, 2] == 0 and b.attn_bias[0, 0, 3] == 0


def test_hop_truncation():
    b = collate([_path3()], multi_hop_max_dist=1)
    assert b.edge_input.shape[3] == 1
    assert b.edge_input[0, 0, 2, :, 0].tolist() == [4]


def test_matches_reference_collator_on_random_graphs():
    graphs = graph_zoo(seed=11, count=40, node_features=3, edge_features=2)
    for start in range(0, 40, 8):
        chunk = graphs[start : start + 8]
        items = []
        for d in chunk:
            sp, ei, deg = ref_preprocess(
                d.edge_index.numpy(), d.edge_attr.numpy(), d.num_nodes, None
            )
            items.append((d.x.numpy(), sp, ei, deg))
        ref = ref_collate(items, multi_hop_max_dist=5, spatial_pos_max=6)
        got = collate(chunk, multi_hop_max_dist=5, spatial_pos_max=6)
        for key, val in ref.items():
            np.testing.assert_array_equal(getattr(got, key).numpy(), val, err_msg=key)


def test_precomputed_features_and_pyg_batch_give_the_same_batch():
    graphs = graph_zoo(seed=2, count=10)
    t = GraphormerFeatures(multi_hop_max_dist=20)
    pre = collate([t(g.clone()) for g in graphs])
    fly = collate(graphs)
    via_batch = collate(Batch.from_data_list([t(g.clone()) for g in graphs]))
    for other in (fly, via_batch):
        for key in ("x", "in_degree", "spatial_pos", "edge_input", "attn_bias", "node_mask"):
            torch.testing.assert_close(getattr(pre, key), getattr(other, key))


def test_torch_dataloader_with_collator_and_to():
    graphs = graph_zoo(seed=3, count=9)
    loader = DataLoader(graphs, batch_size=4, collate_fn=GraphormerCollator(multi_hop_max_dist=3))
    sizes = [b.num_graphs for b in loader]
    assert sizes == [4, 4, 1]
    b = next(iter(loader)).to("cpu")
    assert b.edge_input.shape[3] <= 3 and b.x.dtype == torch.long


def test_empty_list_raises():
    import pytest

    with pytest.raises(ValueError, match="empty"):
        collate([])


def test_batch_keeps_fewer_hops_than_stored():
    """Features cached with 20 hops, collated with 2: the reference truncation applies."""
    graphs = [GraphormerFeatures(20)(g) for g in graph_zoo(seed=21, count=12, edge_features=2)]
    items = []
    for d in graphs:
        sp, ei, deg = ref_preprocess(d.edge_index.numpy(), d.edge_attr.numpy(), d.num_nodes, None)
        items.append((d.x.numpy(), sp, ei, deg))
    ref = ref_collate(items, multi_hop_max_dist=2, spatial_pos_max=1024)
    got = collate(graphs, multi_hop_max_dist=2)
    for key, val in ref.items():
        np.testing.assert_array_equal(getattr(got, key).numpy(), val, err_msg=key)


def test_pad_to_multiple_only_adds_padding():
    import pytest

    graphs = graph_zoo(seed=41, count=9, node_features=2, edge_features=2)
    plain = collate(graphs, multi_hop_max_dist=3)
    n = plain.x.shape[1]
    for m in (1, 4, 8):
        b = collate(graphs, multi_hop_max_dist=3, pad_to_multiple=m)
        k = b.x.shape[1]
        assert (k + 1) % m == 0 and k >= n and k + 1 - (n + 1) < m
        assert b.attn_bias.shape == (9, k + 1, k + 1)
        # the original batch sits in the top-left corner, the rest is padding
        torch.testing.assert_close(b.x[:, :n], plain.x)
        torch.testing.assert_close(b.spatial_pos[:, :n, :n], plain.spatial_pos)
        torch.testing.assert_close(b.edge_input[:, :n, :n], plain.edge_input)
        torch.testing.assert_close(b.attn_bias[:, : n + 1, : n + 1], plain.attn_bias)
        torch.testing.assert_close(b.node_mask[:, :n], plain.node_mask)
        assert not b.node_mask[:, n:].any() and (b.x[:, n:] == 0).all()
        assert (b.in_degree[:, n:] == 0).all() and (b.spatial_pos[:, n:] == 0).all()
        assert (b.attn_bias[:, :, n + 1 :] == NEG).all()  # extra keys are masked
        assert (b.attn_bias[:, n + 1 :, 0] == 0).all()  # extra query rows see the graph token
        torch.testing.assert_close(
            b.token_mask, torch.cat([torch.ones(9, 1).bool(), b.node_mask], 1)
        )
    with pytest.raises(ValueError, match="pad_to_multiple"):
        collate(graphs, pad_to_multiple=0)


def test_collator_pads_to_multiple():
    graphs = graph_zoo(seed=42, count=8)
    collator = GraphormerCollator(multi_hop_max_dist=3, pad_to_multiple=8)
    assert "pad_to_multiple=8" in repr(collator)
    loader = DataLoader(graphs, batch_size=4, collate_fn=collator)
    for b in loader:
        assert (b.x.shape[1] + 1) % 8 == 0


def _assert_same_batch(a, b) -> None:
    for key in ("x", "in_degree", "spatial_pos", "edge_input", "attn_bias", "node_mask", "y"):
        assert torch.equal(getattr(a, key), getattr(b, key)), key
    assert (a.total_nodes, a.path_hops) == (b.total_nodes, b.path_hops)


def test_flat_graphs_collate_like_their_data_list():
    """Slices and joins of FlatGraphs (what streaming prediction collates) give the batch of
    the same graphs as PyG Data, for every hop cut-off and mixed feature widths."""
    from graphormer_urpe.graph.batched_structure import batched_graph_structure
    from graphormer_urpe.graph.flat_graphs import FlatGraphs

    graphs = graph_zoo(seed=5, count=23, node_features=2, edge_features=2)
    for g in graphs:
        g.y = torch.randn(1, 2)
    s = batched_graph_structure(
        np.array([g.num_nodes for g in graphs]),
        torch.cat([g.edge_index for g in graphs], dim=1).numpy(),
        np.array([g.edge_index.shape[1] for g in graphs]),
        torch.cat([g.edge_attr for g in graphs]).numpy(),
        4,
    )
    x = torch.cat([g.x for g in graphs]).numpy()
    y = torch.cat([g.y for g in graphs]).numpy()
    flat = FlatGraphs.from_structures(s, x, y)
    featured = [GraphormerFeatures(4)(g.clone()) for g in graphs]
    joined = FlatGraphs.concat([flat.slice(0, 7), flat.slice(7, 8), flat.slice(8, 23)])
    for hops in (1, 3, 4, 20):
        _assert_same_batch(collate(joined, hops), collate(featured, hops))
        _assert_same_batch(collate(flat.slice(3, 9), hops), collate(featured[3:9], hops))
    narrow = graph_zoo(seed=6, count=4, node_features=1, edge_features=1)
    for g in narrow:
        g.y = torch.randn(1, 2)
    mixed = FlatGraphs.concat([flat.slice(0, 2), collate_input(narrow)])
    _assert_same_batch(collate(mixed, 5), collate(featured[:2] + narrow, 5))


def collate_input(graphs):
    """The FlatGraphs of PyG graphs, through collate's own flattening."""
    from graphormer_urpe.graph.batch import _flatten

    return _flatten([GraphormerFeatures(5)(g.clone()) for g in graphs], 5)


def test_flat_graphs_take_gathers_graphs_in_any_order():
    graphs = graph_zoo(seed=8, count=12, node_features=2, edge_features=2)
    featured = [GraphormerFeatures(3)(g.clone()) for g in graphs]
    flat = collate_input(graphs)
    order = np.array([7, 0, 11, 3, 3, 5])
    _assert_same_batch(collate(flat.take(order), 3), collate([featured[i] for i in order], 3))


def test_path_input_is_the_dense_layout_of_graphs_with_fewer_stored_hops():
    """Graphs whose features keep fewer hops than the batch have no rows for the missing hops:
    the dense layout reads 0 there, and the hops still count (their features are 0)."""
    from graphormer_urpe.graph.batch import path_input_from_dense

    graphs = graph_zoo(seed=9, count=6, node_features=1, edge_features=2)
    featured = [GraphormerFeatures(1 if i % 2 else 4)(g.clone()) for i, g in enumerate(graphs)]
    b = collate(featured, multi_hop_max_dist=3)
    n, d = b.x.shape[1], b.max_hops
    dense = torch.zeros(len(graphs), n, n, d, 2, dtype=torch.long)
    for i, g in enumerate(featured):
        k = g.num_nodes
        hops = min(g.edge_input_hops.item(), d)
        block = g.edge_input.view(k, k, -1, 2)[:, :, :hops].long() + 1
        dense[i, :k, :k, :hops] = block
    assert torch.equal(b.edge_input, dense)
    assert torch.equal(path_input_from_dense(b.spatial_pos, dense), b.path_input)
    hops = (b.spatial_pos - 1).clamp(0, d).masked_fill(b.spatial_pos > 510, 0)
    assert b.path_hops == int(hops.sum())
