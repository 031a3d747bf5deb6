"""Structural features against the plain reference algorithm (bit-identical)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data, InMemoryDataset

from graphormer_urpe import GraphormerFeatures, graph_structure
from graphormer_urpe.graph.features import floyd_warshall
from tests.conftest import graph_zoo, load_zinc_val_graphs
from tests.reference import ref_floyd_warshall, ref_preprocess


def _check(data: Data, hops: int | None) -> None:
    n = data.num_nodes
    ei, ea = data.edge_index.numpy(), data.edge_attr.numpy()
    sp, edge_input, deg = ref_preprocess(ei, ea, n, hops)
    s = graph_structure(ei, n, ea, hops)
    np.testing.assert_array_equal(s.spatial_pos, sp)
    assert s.edge_input.shape == edge_input.shape
    np.testing.assert_array_equal(s.edge_input, edge_input)
    np.testing.assert_array_equal(s.degree, deg)


@pytest.mark.parametrize("hops", [None, 1, 3, 20])
def test_random_graphs_match_reference(hops):
    for data in graph_zoo(seed=hash(str(hops)) % 1000, count=120):
        _check(data, hops)


def test_multi_column_bond_features_match_reference():
    for data in graph_zoo(seed=7, count=80, node_features=9, edge_features=3):
        _check(data, 5)


def test_floyd_warshall_stack_equals_per_graph():
    rng = np.random.default_rng(3)
    adj = rng.random((6, 9, 9)) < 0.3
    adj = adj | adj.transpose(0, 2, 1)
    dist, path = floyd_warshall(adj)
    for g in range(6):
        d, p = ref_floyd_warshall(adj[g])
        np.testing.assert_array_equal(dist[g], d)
        np.testing.assert_array_equal(path[g], p)


def test_special_graphs():
    single = graph_structure(np.zeros((2, 0), dtype=np.int64), 1, np.zeros(0, dtype=np.int64), 20)
    assert single.spatial_pos.tolist() == [[0]]
    assert single.edge_input.shape == (1, 1, 0, 1)
    edgeless = graph_structure(np.zeros((2, 0), dtype=np.int64), 3, None, 20)
    assert (edgeless.spatial_pos == np.array([[0, 510, 510], [510, 0, 510], [510, 510, 0]])).all()
    assert edgeless.edge_input.shape == (3, 3, 20, 1) and (edgeless.edge_input == -1).all()
    # path 0-1-2: hop features raw + 2
    ei = np.array([[0, 1, 1, 2], [1, 0, 2, 1]])
    s = graph_structure(ei, 3, np.array([1, 1, 3, 3]), 20)
    assert s.edge_input.shape == (3, 3, 2, 1)
    assert s.edge_input[0, 2, :, 0].tolist() == [3, 5]
    assert s.edge_input[2, 0, :, 0].tolist() == [5, 3]
    assert s.edge_input[0, 1, :, 0].tolist() == [3, -1]
    assert s.degree.tolist() == [1, 2, 1]


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="outside"):
        graph_structure(np.array([[0], [5]]), 3)
    with pytest.raises(ValueError, match="rows"):
        graph_structure(np.array([[0, 1], [1, 0]]), 2, np.array([1]))
    with pytest.raises(ValueError, match="integers"):
        graph_structure(np.array([[0, 1], [1, 0]]), 2, np.array([1, -1]))


def test_real_zinc_validation_graphs_bit_identical():
    graphs = load_zinc_val_graphs()
    assert len(graphs) == 1000
    for data in graphs:
        _check(data, 20)


def test_transform_stores_flat_compact_tensors():
    data = graph_zoo(seed=1, count=3)[1]
    n = data.num_nodes
    out = GraphormerFeatures(multi_hop_max_dist=4)(data.clone())
    s = graph_structure(data.edge_index, n, data.edge_attr, 4)
    hops = int(out.edge_input_hops)
    assert out.spatial_pos.dtype == torch.int16 and out.edge_input.dtype == torch.int16
    np.testing.assert_array_equal(out.spatial_pos.view(n, n).numpy(), s.spatial_pos)
    np.testing.assert_array_equal(
        out.edge_input.view(n, n, hops, out.edge_input.shape[1]).numpy(), s.edge_input
    )
    torch.testing.assert_close(out.x, data.x)  # raw features untouched


class _Toy(InMemoryDataset):
    def __init__(self, root, graphs):
        self._graphs = graphs
        super().__init__(root, pre_transform=GraphormerFeatures(multi_hop_max_dist=6))
        self.load(self.processed_paths[0])

    @property
    def raw_file_names(self):
        return []

    @property
    def processed_file_names(self):
        return ["data.pt"]

    def download(self):
        pass

    def process(self):
        self.save([self.pre_transform(g) for g in self._graphs], self.processed_paths[0])


def test_pre_transform_round_trips_through_inmemory_dataset_and_batch(tmp_path):
    graphs = graph_zoo(seed=5, count=20)
    ds = _Toy(str(tmp_path), graphs)
    assert len(ds) == 20
    batch = Batch.from_data_list([ds[i] for i in range(20)])
    back = batch.to_data_list()
    for orig, got in zip(graphs, back, strict=True):
        n = orig.num_nodes
        s = graph_structure(orig.edge_index, n, orig.edge_attr, 6)
        np.testing.assert_array_equal(got.spatial_pos.view(n, n).numpy(), s.spatial_pos)
        hops = int(got.edge_input_hops)
        np.testing.assert_array_equal(
            got.edge_input.view(n, n, hops, got.edge_input.shape[1]).numpy(), s.edge_input
        )
