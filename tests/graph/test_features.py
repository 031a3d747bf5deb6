"""Structural features against the plain reference (bit-identical), per graph and batched."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data, InMemoryDataset

from graphormer_urpe import GraphormerFeatures, graph_structure
from graphormer_urpe.graph import add_features as add_features_module
from graphormer_urpe.graph import batched_structure as batched_module
from graphormer_urpe.graph.add_features import add_graphormer_features
from graphormer_urpe.graph.batched_structure import (
    batched_graph_structure,
    next_hop_floyd_warshall,
    size_buckets,
)
from graphormer_urpe.graph.structure import floyd_warshall, has_graphormer_features
from tests.helpers import graph_zoo, load_zinc_val_graphs, random_graph, write_zinc_raw
from tests.reference import _all_edges, ref_floyd_warshall, ref_preprocess


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
    for data in graphs[::4]:  # 250 spread over the set (the plain reference is slow)
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


# --------------------------------------------------------------------------------------
# The batched path: many graphs at once, identical to the per-graph transform
# --------------------------------------------------------------------------------------


def _assert_same_graph(got: Data, want: Data) -> None:
    assert sorted(got.keys()) == sorted(want.keys())
    for key in want.keys():
        a, b = got[key], want[key]
        if isinstance(b, torch.Tensor):
            assert a.dtype == b.dtype and a.shape == b.shape, (key, a.dtype, a.shape, b.shape)
            assert torch.equal(a, b), key
        else:
            assert a == b, key


def _assert_batched_equals_per_graph(graphs: list[Data], hops: int) -> None:
    before = [sorted(g.keys()) for g in graphs]
    transform = GraphormerFeatures(multi_hop_max_dist=hops)
    want = [transform(g) for g in graphs]
    got = add_graphormer_features(graphs, hops)
    assert len(got) == len(graphs)
    for g, w in zip(got, want, strict=True):
        _assert_same_graph(g, w)
    assert [sorted(g.keys()) for g in graphs] == before  # the inputs are left as they were
    again = transform.apply_many(graphs)
    for g, w in zip(again, want, strict=True):
        _assert_same_graph(g, w)


@pytest.mark.parametrize("hops", [1, 3, 20])
@pytest.mark.parametrize("edge_features", [1, 3])
def test_batched_features_equal_transform_on_random_graphs(hops, edge_features):
    # 1-node, edgeless, disconnected, rings with tied shortest paths, sizes 1..25 in one call
    graphs = graph_zoo(seed=40 + hops + edge_features, count=150, edge_features=edge_features)
    _assert_batched_equals_per_graph(graphs, hops)


def _odd_graphs() -> list[Data]:
    """Graphs the batched path must handle exactly like the transform, in one list."""
    rng = np.random.default_rng(11)
    zoo = graph_zoo(seed=3, count=12)
    empty = Data(
        x=torch.zeros((0, 1), dtype=torch.long),
        edge_index=torch.zeros((2, 0), dtype=torch.long),
        edge_attr=torch.zeros((0,), dtype=torch.long),
        num_nodes=0,
    )
    no_attr = graph_zoo(seed=4, count=3)[2]
    del no_attr.edge_attr
    float_attr = graph_zoo(seed=5, count=3)[2]
    float_attr.edge_attr = float_attr.edge_attr.float()  # not batchable: per graph
    wide = graph_zoo(seed=6, count=4, edge_features=3)
    # directed edges, self-loops and a repeated edge with other features (the last one wins)
    src, dst = np.nonzero(rng.random((9, 9)) < 0.3)
    src, dst = np.append(src, [4, 2, src[0]]), np.append(dst, [4, 2, dst[0]])
    directed = Data(
        edge_index=torch.from_numpy(np.stack([src, dst]).astype(np.int64)),
        edge_attr=torch.from_numpy(rng.integers(0, 5, size=src.size)),
        num_nodes=9,
    )
    # large graphs: the narrow (<= 63 nodes) and wide Floyd–Warshall variants
    big = [random_graph(rng, size, 0.04) for size in (64, 130)]
    return [*zoo[:6], empty, no_attr, float_attr, *wide, directed, *big, *zoo[6:]]


@pytest.mark.parametrize("chunk_pairs", [None, 60])
def test_batched_features_equal_transform_on_odd_graphs(chunk_pairs, monkeypatch):
    if chunk_pairs is not None:  # many small chunks
        monkeypatch.setattr(add_features_module, "_PAIRS_PER_CHUNK", chunk_pairs)
    _assert_batched_equals_per_graph(_odd_graphs(), 4)


def test_batched_graph_structure_matches_reference():
    rng = np.random.default_rng(8)
    graphs = _odd_graphs()[:14]
    graphs = [g for g in graphs if g.edge_attr is not None and not g.edge_attr.is_floating_point()]
    graphs = [g for g in graphs if g.edge_attr.dim() == 1]
    rng.shuffle(graphs)  # not in order of size
    n = [g.num_nodes for g in graphs]
    for hops in (None, 2, 7):
        s = batched_graph_structure(
            np.array(n),
            np.concatenate([g.edge_index.numpy() for g in graphs], axis=1),
            np.array([g.edge_index.shape[1] for g in graphs]),
            np.concatenate([g.edge_attr.numpy() for g in graphs]),
            hops,
        )
        assert len(s) == len(graphs)
        for k, g in enumerate(graphs):
            ei, ea = g.edge_index.numpy(), g.edge_attr.numpy()
            sp, edge_input, deg = ref_preprocess(ei, ea, n[k], hops)
            got = s.graph(k)
            np.testing.assert_array_equal(got.spatial_pos, sp)
            assert got.edge_input.shape == edge_input.shape
            np.testing.assert_array_equal(got.edge_input, edge_input)
            np.testing.assert_array_equal(got.degree, deg)
            assert s.hops[k] == edge_input.shape[2]


@pytest.mark.parametrize("stacks", ["one per size", "sizes merged"])
def test_padded_stacks_give_each_graph_its_own_structure(stacks, monkeypatch):
    # every size its own stack, or every size up to 63 nodes padded into one stack
    round_cost = 0 if stacks == "one per size" else 10**12
    monkeypatch.setattr(batched_module, "FW_ROUND_COST", round_cost)
    monkeypatch.setattr(batched_module, "FW_STACK_COST", 0)
    _assert_batched_equals_per_graph([*graph_zoo(seed=12, count=60), *_odd_graphs()], 3)


def _bucket_cost(sizes: list[int], counts: list[int], cuts: list[tuple[int, int]]) -> float:
    return sum(
        sizes[b - 1] * (batched_module.FW_ROUND_COST + sum(counts[a:b]) * sizes[b - 1] ** 2)
        + batched_module.FW_STACK_COST
        for a, b in cuts
    )


def test_size_buckets_are_the_cheapest_split():
    rng = np.random.default_rng(21)
    for _ in range(40):
        k = int(rng.integers(1, 8))
        sizes = sorted(rng.choice(np.arange(1, 80), size=k, replace=False).tolist())
        counts = rng.integers(1, 60, size=k).tolist()
        got = size_buckets(sizes, counts)
        assert [a for a, _ in got] == [0, *[b for _, b in got[:-1]]] and got[-1][1] == k
        assert all(b - a == 1 for a, b in got if sizes[b - 1] > 63)  # wide graphs never padded
        best = float("inf")  # every split into runs of consecutive sizes
        for mask in range(2 ** (k - 1)):
            bounds = [0, *[i + 1 for i in range(k - 1) if mask >> i & 1], k]
            cuts = list(zip(bounds[:-1], bounds[1:], strict=True))
            if any(b - a > 1 and sizes[b - 1] > 63 for a, b in cuts):
                continue
            best = min(best, _bucket_cost(sizes, counts, cuts))
        assert _bucket_cost(sizes, counts, got) == pytest.approx(best)
    assert size_buckets([], []) == []


def test_next_hop_is_the_second_node_of_the_reference_path():
    rng = np.random.default_rng(9)
    for size, p in ((7, 0.3), (12, 0.2), (70, 0.05)):
        adj = rng.random((5, size, size)) < p
        adj[1] |= adj[1].T  # undirected ones too
        dist, nxt = next_hop_floyd_warshall(adj)
        for g in range(adj.shape[0]):
            ref_dist, ref_path = ref_floyd_warshall(adj[g])
            np.testing.assert_array_equal(dist[g], ref_dist)
            for i in range(size):
                for j in range(size):
                    if 0 < ref_dist[i, j] < 510:
                        nodes = [i, *_all_edges(ref_path, i, j), j]
                        assert nxt[g, i, j] == nodes[1]


def test_real_zinc_validation_graphs_batched_equal_transform():
    graphs = load_zinc_val_graphs()
    assert len(graphs) == 1000
    _assert_batched_equals_per_graph(graphs[::4], 20)  # 250 in one call, spread over the set


def test_batched_errors_name_the_graph():
    graphs = graph_zoo(seed=2, count=6)
    ring = graphs[1]  # the zoo's second graph is a ring
    bad = ring.clone()
    bad.edge_index = bad.edge_index.clone()
    bad.edge_index[0, 0] = bad.num_nodes + 3
    with pytest.raises(ValueError, match=r"graph 4: .*outside"):
        add_graphormer_features([*graphs[:4], bad, graphs[5]], 5)
    neg = ring.clone()
    neg.edge_attr = neg.edge_attr.clone()
    neg.edge_attr[0] = -1
    with pytest.raises(ValueError, match=r"graph 1: .*integers"):
        add_graphormer_features([graphs[0], neg], 5)
    with warnings.catch_warnings(), pytest.raises(ValueError, match=r"graph 1: .*num_nodes"):
        warnings.simplefilter("ignore")  # PyG warns that it cannot infer num_nodes
        add_graphormer_features([graphs[0], Data()], 5)
    with pytest.raises(ValueError, match="num_edges"):
        batched_graph_structure(np.array([3]), np.zeros((2, 2), dtype=np.int64), np.array([1]))


def test_batched_progress_bar_and_subclass_fallback():
    graphs = graph_zoo(seed=13, count=10)
    out = add_graphormer_features(graphs, 3, progress=True)
    assert all(has_graphormer_features(g) for g in out)

    class Tagged(GraphormerFeatures):
        def forward(self, data: Data) -> Data:
            data = super().forward(data)
            data.tag = torch.ones(1)
            return data

    tagged = Tagged(3).apply_many(graphs)
    assert all(hasattr(g, "tag") for g in tagged)
    for g, w in zip(tagged, out, strict=True):
        assert torch.equal(g.edge_input, w.edge_input)


class _BatchedToy(_Toy):
    def process(self):
        self.save(self.pre_transform.apply_many(self._graphs), self.processed_paths[0])


def test_batched_processing_gives_the_same_inmemory_dataset(tmp_path):
    graphs = graph_zoo(seed=14, count=30, edge_features=3)
    per_graph = _Toy(str(tmp_path / "a"), graphs)
    batched = _BatchedToy(str(tmp_path / "b"), graphs)
    assert len(per_graph) == len(batched) == 30
    _assert_same_graph(batched._data, per_graph._data)
    assert sorted(batched.slices) == sorted(per_graph.slices)
    for key, value in per_graph.slices.items():
        assert torch.equal(batched.slices[key], value), key


def _assert_graphs_equal(got: Data, want: Data) -> None:
    """Same structure and Graphormer features (dtype, shape, values); ``y`` by value."""
    for key in ("x", "edge_index", "edge_attr", *_FEATURE_KEYS):
        a, b = getattr(got, key), getattr(want, key)
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), key
    assert torch.equal(got.y.reshape(-1), want.y.reshape(-1).float())


_FEATURE_KEYS = ("spatial_pos", "edge_input", "edge_input_hops", "degree")


def test_zinc_store_gives_pygs_graphs_with_the_transforms_features(tmp_path):
    from torch_geometric.datasets import ZINC

    from graphormer_urpe.datasets import load_zinc_splits

    write_zinc_raw(tmp_path / "ours")
    write_zinc_raw(tmp_path / "pyg")
    for subset in (False, True):
        splits = load_zinc_splits(tmp_path / "ours", 3, subset=subset)
        for split, ours in (("train", splits.train), ("val", splits.valid), ("test", splits.test)):
            # PyG's own reader, calling the transform graph by graph
            pyg = ZINC(str(tmp_path / "pyg"), subset, split, pre_transform=GraphormerFeatures(3))
            assert len(ours) == len(pyg) > 0
            for k in range(len(pyg)):
                _assert_graphs_equal(ours[k], pyg[k])
            batch = ours.__getitems__(list(range(len(ours))))  # decoded together, as batches are
            for k in range(len(pyg)):
                _assert_graphs_equal(batch[k], pyg[k])


def test_smiles_csv_store_gives_the_transforms_features(tmp_path):
    from graphormer_urpe.datasets import featurize_smiles, load_dataset

    smiles = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "C1CC1C(=O)O", "CC[NH3+].CC(=O)[O-]", "C"]
    smiles = smiles * 3
    path = tmp_path / "mols.csv"
    rows = [f"{s},{k * 0.5},{('train', 'valid', 'test')[k % 3]}" for k, s in enumerate(smiles)]
    path.write_text("smiles,y,fold\n" + "\n".join(rows) + "\n")
    for featurizer, hops in (("ogb", 5), ("zinc", 2), ("zinc", 20)):
        splits = load_dataset(
            f"csv:{path}", multi_hop_max_dist=hops, featurizer=featurizer, split_column="fold"
        )
        for part in (splits.train, splits.valid, splits.test):
            for k, row in enumerate(part.source_index):
                want = GraphormerFeatures(hops)(featurize_smiles(smiles[row], featurizer))
                want.y = torch.tensor([[row * 0.5]])
                _assert_graphs_equal(part[k], want)


def test_the_old_features_module_still_gives_its_names_with_a_warning():
    import graphormer_urpe.graph.features as old
    from graphormer_urpe.graph import structure
    from graphormer_urpe.graph.transform import GraphormerFeatures

    with pytest.warns(DeprecationWarning, match="graphormer_urpe.graph.structure"):
        assert old.graph_structure is structure.graph_structure
    with pytest.warns(DeprecationWarning, match="graphormer_urpe.graph.add_features"):
        assert old.add_graphormer_features is add_graphormer_features
    with pytest.warns(DeprecationWarning, match="graphormer_urpe.graph.transform"):
        assert old.GraphormerFeatures is GraphormerFeatures
    with pytest.raises(AttributeError):
        old.not_a_name  # noqa: B018
