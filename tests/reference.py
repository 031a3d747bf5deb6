"""Plain reference implementations (oracles) of Graphormer's preprocessing and model maths,
of URPE attention and of a checkpoint's predictions.

Written as directly as possible from the published algorithms (Graphormer's ``algos.pyx``
and ``collator.py``), with Python loops and no vectorisation, so that the fast library code
can be checked against them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from graphormer_urpe import GraphormerCollator, GraphormerFeatures
from graphormer_urpe.datasets import featurize_smiles
from graphormer_urpe.inference import load_model
from graphormer_urpe.inference.engines.stream import SORT_WINDOW

UNREACHABLE = 510


def ref_floyd_warshall(adj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Graphormer's Cython ``floyd_warshall``, transcribed loop for loop."""
    n = adj.shape[0]
    m = [[int(v) for v in row] for row in adj.astype(np.int64)]
    for i in range(n):
        for j in range(n):
            if i == j:
                m[i][j] = 0
            elif m[i][j] == 0:
                m[i][j] = UNREACHABLE
    path = [[-1] * n for _ in range(n)]
    for k in range(n):
        mk = m[k]
        for i in range(n):
            mi = m[i]
            m_ik = mi[k]
            pi = path[i]
            for j in range(n):
                cost = m_ik + mk[j]
                if mi[j] > cost:
                    mi[j] = cost
                    pi[j] = k
    for i in range(n):
        for j in range(n):
            if m[i][j] >= UNREACHABLE:
                path[i][j] = UNREACHABLE
                m[i][j] = UNREACHABLE
    return np.array(m, dtype=np.int64).reshape(n, n), np.array(path, dtype=np.int64).reshape(n, n)


def _all_edges(path: np.ndarray, i: int, j: int) -> list[int]:
    k = int(path[i][j])
    if k == -1:
        return []
    return _all_edges(path, i, k) + [k] + _all_edges(path, k, j)


def ref_gen_edge_input(max_dist: int, path: np.ndarray, edge_feat: np.ndarray) -> np.ndarray:
    """Graphormer's Cython ``gen_edge_input`` with its recursive path expansion."""
    n = path.shape[0]
    out = -1 * np.ones([n, n, max_dist, edge_feat.shape[-1]], dtype=np.int64)
    for i in range(n):
        for j in range(n):
            if i == j or path[i][j] == UNREACHABLE:
                continue
            nodes = [i] + _all_edges(path, i, j) + [j]
            for k in range(len(nodes) - 1):
                out[i, j, k, :] = edge_feat[nodes[k], nodes[k + 1], :]
    return out


def ref_preprocess(
    edge_index: np.ndarray, edge_attr: np.ndarray, num_nodes: int, multi_hop_max_dist: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Graphormer's ``preprocess_item`` for one graph, then the collator's hop truncation.

    Returns ``(spatial_pos [N,N], edge_input [N,N,D,Fe], in_degree [N])`` unshifted.
    """
    if edge_attr.ndim == 1:
        edge_attr = edge_attr[:, None]
    fe = edge_attr.shape[1]
    adj = np.zeros((num_nodes, num_nodes), dtype=bool)
    for s, d in zip(edge_index[0], edge_index[1], strict=True):
        adj[s, d] = True
    attn_edge_type = np.zeros((num_nodes, num_nodes, fe), dtype=np.int64)
    for e in range(edge_index.shape[1]):
        for f in range(fe):
            attn_edge_type[edge_index[0, e], edge_index[1, e], f] = (
                edge_attr[e, f] + 1 + 512 * f + 1
            )
    dist, path = ref_floyd_warshall(adj)
    max_dist = int(np.amax(dist)) if num_nodes else 0
    edge_input = ref_gen_edge_input(max_dist, path, attn_edge_type)
    if multi_hop_max_dist is not None:
        edge_input = edge_input[:, :, :multi_hop_max_dist, :]
    return dist, edge_input, adj.astype(np.int64).sum(axis=1)


def ref_collate(items, multi_hop_max_dist: int, spatial_pos_max: int):
    """Graphormer's collator for graphs given as ``(x [N,F], spatial_pos, edge_input, degree)``.

    Returns a dict of the padded, shifted tensors (numpy), following ``collator.py`` step by step.
    """
    n = max(it[0].shape[0] for it in items)
    f = max(it[0].shape[1] for it in items)
    edge_inputs = [it[2][:, :, :multi_hop_max_dist, :] for it in items]
    d = max(e.shape[2] for e in edge_inputs)
    fe = max(e.shape[3] for e in edge_inputs)
    b = len(items)
    out = {
        "x": np.zeros((b, n, f), dtype=np.int64),
        "in_degree": np.zeros((b, n), dtype=np.int64),
        "spatial_pos": np.zeros((b, n, n), dtype=np.int64),
        "edge_input": np.zeros((b, n, n, d, fe), dtype=np.int64),
        "attn_bias": np.full((b, n + 1, n + 1), -np.inf, dtype=np.float32),
    }
    for g, (x, sp, _, deg) in enumerate(items):
        k = x.shape[0]
        graph_bias = np.zeros((k + 1, k + 1), dtype=np.float32)
        graph_bias[1:, 1:][sp >= spatial_pos_max] = -np.inf
        for i in range(k):
            for c in range(x.shape[1]):
                out["x"][g, i, c] = x[i, c] + 1 + 512 * c + 1
            out["in_degree"][g, i] = deg[i] + 1
            for j in range(k):
                out["spatial_pos"][g, i, j] = sp[i, j] + 1
        e = edge_inputs[g]
        out["edge_input"][g, :k, :k, : e.shape[2], : e.shape[3]] = e + 1
        out["attn_bias"][g, : k + 1, : k + 1] = graph_bias
        out["attn_bias"][g, k + 1 :, : k + 1] = 0
    return out


def naive_attention(q, k, v, bias=None, scale=None, key_padding_mask=None):
    """softmax(q kᵀ/√d + B) ⊙ C, then · v, in float64, rows with every key forbidden -> 0."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.double()
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    out = torch.zeros(*scores.shape[:-1], v.shape[-1], dtype=torch.float64)
    b, h, nq, _ = scores.shape
    for bi in range(b):
        for hi in range(h):
            for i in range(nq):
                row = scores[bi, hi, i]
                if torch.isinf(row).all():
                    continue  # fully masked: output stays 0
                p = torch.softmax(row, dim=-1)
                if scale is not None:
                    p = p * scale.expand(b, h, nq, -1)[bi, hi, i].double()
                out[bi, hi, i] = p @ v[bi, hi]
    return out


@torch.no_grad()
def predict_reference(ckpt: Path, smiles: list[str], batch_size: int):
    """``(values, errors)`` per row, computed plainly, one molecule at a time."""
    loaded = load_model(ckpt, "cpu")
    cfg = loaded.model.config
    transform = GraphormerFeatures(cfg.multi_hop_max_dist)
    collator = GraphormerCollator(cfg.multi_hop_max_dist, cfg.spatial_pos_max)
    graphs, keep, errors = [], [], [None] * len(smiles)
    for i, smi in enumerate(smiles):
        try:
            graphs.append(transform(featurize_smiles(smi, loaded.featurizer)))
            keep.append(i)
        except ValueError as exc:
            errors[i] = str(exc)
    values: list[torch.Tensor | None] = [None] * len(smiles)
    window = SORT_WINDOW * batch_size  # valid molecules, sorted by atom count, then batched
    for w in range(0, len(graphs), window):
        members = sorted(range(w, min(w + window, len(graphs))), key=lambda i: graphs[i].num_nodes)
        for start in range(0, len(members), batch_size):
            part = members[start : start + batch_size]
            out = loaded.model(collator([graphs[i] for i in part]))
            for i, row in zip(part, out, strict=True):
                values[keep[i]] = row
    return values, errors
