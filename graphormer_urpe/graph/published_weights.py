r"""Graphormer v2 weights from Microsoft's fairseq code and Hugging Face ``transformers``.

Both publish the same model (Hugging Face's ``GraphormerForGraphClassification`` is a port of
fairseq's ``GraphormerModel``) under the same tensor names below ``encoder.graph_encoder``;
they differ only in the head's names. This module maps those state dicts and options onto a
:class:`~graphormer_urpe.graph.model.Graphormer` with the v2 switches of
:class:`~graphormer_urpe.graph.model.GraphormerConfig` (post- or pre-LN layers, embedding
LayerNorm, no final LayerNorm, ``embed_scale``, :class:`~graphormer_urpe.graph.model.TransformHead`)
and back, and feeds this library's dense batches to Hugging Face's model.

Tensor names (v2 → this library; ``GE`` = ``encoder.graph_encoder``, ``L`` = ``layers.i``):

* ``GE.graph_node_feature.*`` → ``encoder.node_embedding.*`` (atom, degree tables, graph token)
* ``GE.graph_attn_bias.*`` → ``encoder.attention_bias.*`` (edge, per-hop, spatial, virtual
  distance)
* ``GE.emb_layer_norm`` → ``encoder.embedding_norm``
* ``GE.L.self_attn.{q,k,v,out}_proj`` → ``encoder.encoder.L.self_attn.*``
* ``GE.L.self_attn_layer_norm`` / ``GE.L.final_layer_norm`` → ``encoder.encoder.L.attn_norm`` /
  ``ffn_norm``; ``GE.L.fc1`` / ``fc2`` → ``encoder.encoder.L.fc1`` / ``fc2``
* ``encoder.lm_head_transform_weight`` / ``encoder.layer_norm`` → ``head.transform`` /
  ``head.norm``
* ``classifier.classifier`` (HF) or ``encoder.embed_out`` (fairseq) → ``head.out``
* ``classifier.lm_output_learned_bias`` (HF) or ``encoder.lm_output_learned_bias`` (fairseq)
  → ``head.bias``

``encoder.graph_encoder.final_layer_norm`` (built for pre-LN models, never applied by either
forward pass) and fairseq's ``encoder.masked_lm_pooler`` (unused for graph prediction) are
ignored; any other tensor is refused. Table sizes: v2's ``num_atoms`` / ``num_edges`` count
the rows after the padding row, so this library's tables have one row more
(``num_atoms = 512 * 9 + 1``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from .batch import GraphormerBatch
from .model import Graphormer, GraphormerConfig

__all__ = [
    "InteropError",
    "V2_IGNORED",
    "v2_to_graphormer",
    "config_from_hf",
    "config_to_hf",
    "graphormer_to_hf_state",
    "hf_inputs",
    "hf_atom_rows",
]

log = logging.getLogger(__name__)


class InteropError(ValueError):
    """A checkpoint, tensor or option that this library cannot represent (one line)."""


_GE = r"encoder\.graph_encoder\."
_V2_TO_OURS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(
            _GE + r"graph_node_feature\.(atom_encoder|in_degree_encoder|out_degree_encoder"
            r"|graph_token)\.weight"
        ),
        r"encoder.node_embedding.\1.weight",
    ),
    (
        re.compile(
            _GE + r"graph_attn_bias\.(edge_encoder|edge_dis_encoder|spatial_pos_encoder"
            r"|graph_token_virtual_distance)\.weight"
        ),
        r"encoder.attention_bias.\1.weight",
    ),
    (re.compile(_GE + r"emb_layer_norm\.(weight|bias)"), r"encoder.embedding_norm.\1"),
    (
        re.compile(
            _GE + r"layers\.(\d+)\.self_attn\.(q_proj|k_proj|v_proj|out_proj)\.(weight|bias)"
        ),
        r"encoder.encoder.layers.\1.self_attn.\2.\3",
    ),
    (
        re.compile(_GE + r"layers\.(\d+)\.self_attn_layer_norm\.(weight|bias)"),
        r"encoder.encoder.layers.\1.attn_norm.\2",
    ),
    (
        re.compile(_GE + r"layers\.(\d+)\.final_layer_norm\.(weight|bias)"),
        r"encoder.encoder.layers.\1.ffn_norm.\2",
    ),
    (
        re.compile(_GE + r"layers\.(\d+)\.(fc1|fc2)\.(weight|bias)"),
        r"encoder.encoder.layers.\1.\2.\3",
    ),
    (re.compile(r"encoder\.lm_head_transform_weight\.(weight|bias)"), r"head.transform.\1"),
    (re.compile(r"encoder\.layer_norm\.(weight|bias)"), r"head.norm.\1"),
    (re.compile(r"(?:classifier\.classifier|encoder\.embed_out)\.weight"), "head.out.weight"),
    (re.compile(r"(?:classifier|encoder)\.lm_output_learned_bias"), "head.bias"),
]
V2_IGNORED = (
    re.compile(_GE + r"final_layer_norm\.(weight|bias)"),
    re.compile(r"encoder\.masked_lm_pooler\.(weight|bias)"),
)
"""v2 tensors that exist in checkpoints but take no part in graph prediction."""

_NODE = "encoder.graph_encoder.graph_node_feature."
_BIAS = "encoder.graph_encoder.graph_attn_bias."


def _normalise_names(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Accept Hugging Face's ``GraphormerModel`` names (no ``encoder.`` prefix) and DDP's
    ``module.`` prefix."""
    out = {}
    for k, v in state.items():
        if k.startswith("module."):
            k = k[len("module.") :]
        if k.startswith(("graph_encoder.", "lm_head_transform_weight.", "layer_norm.")):
            k = "encoder." + k
        out[k] = v
    return out


def _need(state: Mapping[str, Tensor], name: str, source: str) -> Tensor:
    if name not in state:
        raise InteropError(f"{source}: tensor {name} is missing; not a Graphormer checkpoint")
    return state[name]


def v2_to_graphormer(
    state: Mapping[str, Tensor],
    options: Mapping[str, Any],
    source: str = "checkpoint",
    hf_indexing: bool = False,
) -> tuple[GraphormerConfig, dict[str, Tensor], list[str]]:
    """Map a v2 (fairseq or Hugging Face) state dict and its options onto this library.

    Sizes (layers, width, heads, feed-forward width, table rows, outputs) are read from the
    tensors; the options give what tensors cannot show.

    Args:
        state: the v2 state dict (names as in the module docstring).
        options: ``pre_layernorm``, ``multi_hop_max_dist``, ``spatial_pos_max``,
            ``embed_scale``, ``dropout``, ``attention_dropout``, ``activation_dropout`` (all
            optional: ``pre_layernorm`` defaults to whether ``final_layer_norm`` exists,
            ``multi_hop_max_dist`` to 5, ``spatial_pos_max`` to 1024), and options checked for
            support: ``activation_fn`` (``gelu``), ``edge_type`` (``multi_hop``),
            ``share_input_output_embed`` (false), ``bias`` (true), ``num_in_degree`` ==
            ``num_out_degree``.
        source: the checkpoint's name, for messages.
        hf_indexing: the node-feature table follows Hugging Face's preprocessing, which reads
            every node feature one row further than fairseq (see :func:`hf_atom_rows`).

    Returns:
        ``(config, state_dict, ignored)``: a ``GraphormerConfig`` (plain Graphormer
        attention), this library's state dict for :class:`Graphormer` of that config, and the
        v2 tensor names that were left out (unused by v2's forward pass).

    Raises:
        InteropError: a tensor or option this library cannot represent (named in the message).
    """
    state = _normalise_names(state)
    opts = dict(options)
    act = str(opts.get("activation_fn", "gelu"))
    if act != "gelu":
        raise InteropError(f"{source}: activation_fn={act!r} is not supported (only gelu)")
    edge_type = str(opts.get("edge_type", "multi_hop"))
    if edge_type != "multi_hop":
        raise InteropError(f"{source}: edge_type={edge_type!r} is not supported (only multi_hop)")
    for key in ("share_input_output_embed", "share_encoder_input_output_embed"):
        if opts.get(key):
            raise InteropError(f"{source}: {key}=True is not supported")
    if opts.get("bias") is False:
        raise InteropError(f"{source}: bias=False (attention without biases) is not supported")
    for key in ("kdim", "vdim"):
        if opts.get(key) not in (None, opts.get("embedding_dim")):
            raise InteropError(f"{source}: {key}={opts[key]} differs from the width")
    for key in ("layerdrop", "q_noise"):
        if opts.get(key):
            log.warning("%s: %s=%s only acts in training; not carried over", source, key, opts[key])

    mapped: dict[str, Tensor] = {}
    ignored: list[str] = []
    for name, tensor in state.items():
        if any(p.fullmatch(name) for p in V2_IGNORED):
            ignored.append(name)
            continue
        for pattern, target in _V2_TO_OURS:
            if pattern.fullmatch(name):
                mapped[pattern.sub(target, name)] = tensor
                break
        else:
            raise InteropError(
                f"{source}: tensor {name} {tuple(tensor.shape)} has no counterpart in this "
                "library (an unsupported model option)"
            )

    atom = _need(state, _NODE + "atom_encoder.weight", source)
    in_deg = _need(state, _NODE + "in_degree_encoder.weight", source)
    out_deg = _need(state, _NODE + "out_degree_encoder.weight", source)
    edge = _need(state, _BIAS + "edge_encoder.weight", source)
    spatial = _need(state, _BIAS + "spatial_pos_encoder.weight", source)
    edge_dis = _need(state, _BIAS + "edge_dis_encoder.weight", source)
    out_w = mapped.get("head.out.weight")
    if out_w is None:
        raise InteropError(
            f"{source}: no output layer (classifier.classifier.weight or encoder.embed_out.weight)"
        )
    if "head.transform.weight" not in mapped or "head.norm.weight" not in mapped:
        raise InteropError(f"{source}: tensor encoder.lm_head_transform_weight.weight is missing")
    if in_deg.shape != out_deg.shape:
        raise InteropError(
            f"{source}: in-degree table {tuple(in_deg.shape)} and out-degree table "
            f"{tuple(out_deg.shape)} differ in size (this library uses one size for both)"
        )
    for name, table in (
        (_NODE + "atom_encoder.weight", atom),
        (_BIAS + "edge_encoder.weight", edge),
    ):
        if bool(table[0].ne(0).any()):
            raise InteropError(
                f"{source}: tensor {name} has a non-zero padding row 0 (this library skips "
                "padded features instead of adding that row)"
            )
    hidden = atom.shape[1]
    heads = spatial.shape[1]
    layers = sorted(
        {int(m.group(1)) for k in state if (m := re.match(_GE + r"layers\.(\d+)\.", k))}
    )
    if layers != list(range(len(layers))):
        raise InteropError(f"{source}: layer indices {layers} are not 0..L-1")
    ffn = _need(state, "encoder.graph_encoder.layers.0.fc1.weight", source).shape[0]
    if hidden % heads:
        raise InteropError(f"{source}: width {hidden} is not divisible by {heads} heads")
    if edge_dis.shape[0] % (heads * heads) or edge_dis.shape[1] != 1:
        raise InteropError(
            f"{source}: tensor {_BIAS}edge_dis_encoder.weight {tuple(edge_dis.shape)} is not "
            f"[num_edge_dis * {heads} * {heads}, 1]"
        )
    pre_ln = opts.get("pre_layernorm")
    if pre_ln is None:
        pre_ln = "encoder.graph_encoder.final_layer_norm.weight" in state
    mhmd = opts.get("multi_hop_max_dist")
    if mhmd is None:
        mhmd = 5
        log.warning("%s: multi_hop_max_dist not recorded; using v2's default 5", source)
    embed_scale = opts.get("embed_scale")
    dropout = float(opts.get("dropout", 0.0))
    config = GraphormerConfig(
        num_layers=len(layers),
        hidden_dim=hidden,
        ffn_dim=ffn,
        num_heads=heads,
        dropout=dropout,
        attention_dropout=float(opts.get("attention_dropout", 0.1)),
        input_dropout=dropout,
        activation_dropout=float(opts.get("activation_dropout", 0.1)),
        num_atoms=atom.shape[0],
        num_degree=in_deg.shape[0],
        num_edges=edge.shape[0],
        num_spatial=spatial.shape[0],
        num_edge_dis=edge_dis.shape[0] // (heads * heads),
        multi_hop_max_dist=int(mhmd),
        spatial_pos_max=int(opts.get("spatial_pos_max", 1024)),
        attention="graphormer",
        num_targets=out_w.shape[0],
        pre_ln=bool(pre_ln),
        embedding_norm="encoder.embedding_norm.weight" in mapped,
        final_norm=False,
        embed_scale=None if embed_scale is None else float(embed_scale),
        head="transform",
    )
    if config.num_edge_dis < config.multi_hop_max_dist:
        raise InteropError(
            f"{source}: multi_hop_max_dist={config.multi_hop_max_dist} exceeds the "
            f"{config.num_edge_dis} per-hop matrices of {_BIAS}edge_dis_encoder.weight"
        )
    if hf_indexing:
        key = "encoder.node_embedding.atom_encoder.weight"
        mapped[key] = hf_atom_rows(mapped[key], to_hf=False)
    bias = mapped["head.bias"]
    if bias.numel() != 1:
        raise InteropError(f"{source}: the output bias has {bias.numel()} entries, not 1")
    mapped["head.bias"] = bias.reshape(1)
    return config, mapped, ignored


def config_from_hf(hf: Mapping[str, Any] | Any) -> dict[str, Any]:
    """The options of a Hugging Face ``GraphormerConfig`` (object or ``config.json`` dict) in
    the form :func:`v2_to_graphormer` reads."""
    d = dict(hf) if isinstance(hf, Mapping) else hf.to_dict()
    if d.get("num_in_degree") != d.get("num_out_degree"):
        raise InteropError(
            f"num_in_degree ({d.get('num_in_degree')}) != num_out_degree "
            f"({d.get('num_out_degree')}): this library uses one degree table size"
        )
    keys = (
        "pre_layernorm",
        "multi_hop_max_dist",
        "spatial_pos_max",
        "embed_scale",
        "dropout",
        "attention_dropout",
        "activation_dropout",
        "activation_fn",
        "edge_type",
        "share_input_output_embed",
        "bias",
        "kdim",
        "vdim",
        "embedding_dim",
        "layerdrop",
        "q_noise",
    )
    return {k: d[k] for k in keys if k in d}


def config_to_hf(config: GraphormerConfig) -> dict[str, Any]:
    """A Hugging Face ``GraphormerConfig`` (as a ``config.json`` dict) of ``config``.

    Raises:
        InteropError: ``config`` uses a switch Hugging Face's model does not have (a final
            LayerNorm, the ``linear`` head, per-molecule features, URPE attention).
    """
    c = config
    if c.final_norm:
        raise InteropError(
            "final_norm=True: Hugging Face's Graphormer applies no LayerNorm after the last "
            "layer (train with --no-final-norm)"
        )
    if c.head != "transform":
        raise InteropError(
            f"head={c.head!r}: Hugging Face's Graphormer has the transform head "
            "(train with --head transform)"
        )
    if c.num_mol_features:
        raise InteropError(
            f"num_mol_features={c.num_mol_features}: Hugging Face's Graphormer reads graphs "
            "only (the model was trained with --mol-features)"
        )
    if c.target_std is not None:
        raise InteropError(
            "target_mean / target_std: Hugging Face's Graphormer predicts the head's output "
            "as it is (the model was trained on standardised targets; --no-normalize-targets)"
        )
    if c.attention != "graphormer":
        raise InteropError(
            "attention='urpe': Hugging Face's Graphormer has no URPE C tables (export the "
            "plain-Graphormer part with graphormer_only=True / --graphormer-only)"
        )
    if c.input_dropout != c.dropout:
        log.warning(
            "Hugging Face's Graphormer uses dropout (%s) on the input embeddings too, not "
            "input_dropout (%s); only training is affected",
            c.dropout,
            c.input_dropout,
        )
    return {
        "model_type": "graphormer",
        "architectures": ["GraphormerForGraphClassification"],
        "num_classes": c.num_targets,
        "num_atoms": c.num_atoms - 1,
        "num_edges": c.num_edges - 1,
        "num_in_degree": c.num_degree,
        "num_out_degree": c.num_degree,
        "num_spatial": c.num_spatial,
        "num_edge_dis": c.num_edge_dis,
        "multi_hop_max_dist": c.multi_hop_max_dist,
        "spatial_pos_max": c.spatial_pos_max,
        "edge_type": "multi_hop",
        "num_hidden_layers": c.num_layers,
        "embedding_dim": c.hidden_dim,
        "ffn_embedding_dim": c.ffn_dim,
        "num_attention_heads": c.num_heads,
        "dropout": c.dropout,
        "attention_dropout": c.attention_dropout,
        "activation_dropout": c.activation_dropout,
        "encoder_normalize_before": c.embedding_norm,
        "pre_layernorm": c.pre_ln,
        "apply_graphormer_init": True,
        "activation_fn": "gelu",
        "embed_scale": c.embed_scale,
        "torch_dtype": "float32",
    }


def graphormer_to_hf_state(model: Graphormer, graphormer_only: bool = False) -> dict[str, Tensor]:
    """Hugging Face ``GraphormerForGraphClassification`` state dict of ``model``.

    Args:
        model: a model whose config :func:`config_to_hf` accepts.
        graphormer_only: leave URPE's C tables out (outputs then change unless every C is 1).

    Returns:
        Contiguous CPU float tensors under Hugging Face's names (the unused pre-LN
        ``graph_encoder.final_layer_norm`` gets LayerNorm's initial values).
    """
    config = model.config
    if graphormer_only and config.attention == "urpe":
        config = replace(config, attention="graphormer")
        scale = model.encoder.spatial_scale
        if scale is not None and not (
            bool(scale.scale.eq(1).all()) and bool(scale.graph_token_scale.eq(1).all())
        ):
            log.warning(
                "exporting the plain-Graphormer part: the URPE C tables are left out and "
                "are not all 1, so the exported model's outputs differ"
            )
    config_to_hf(config)  # raises on what Hugging Face cannot hold
    reverse = {
        "encoder.node_embedding.": "encoder.graph_encoder.graph_node_feature.",
        "encoder.attention_bias.": "encoder.graph_encoder.graph_attn_bias.",
        "encoder.embedding_norm.": "encoder.graph_encoder.emb_layer_norm.",
        "head.transform.": "encoder.lm_head_transform_weight.",
        "head.norm.": "encoder.layer_norm.",
        "head.out.": "classifier.classifier.",
    }
    layer = re.compile(r"encoder\.encoder\.layers\.(\d+)\.(.*)")
    sub = {"attn_norm": "self_attn_layer_norm", "ffn_norm": "final_layer_norm"}
    out: dict[str, Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name.startswith("encoder.spatial_scale."):
            continue
        t = tensor.detach().to("cpu", torch.float32).contiguous().clone()
        if name == "head.bias":
            out["classifier.lm_output_learned_bias"] = t
            continue
        if m := layer.fullmatch(name):
            first, rest = m.group(2).split(".", 1)
            out[f"encoder.graph_encoder.layers.{m.group(1)}.{sub.get(first, first)}.{rest}"] = t
            continue
        for ours, theirs in reverse.items():
            if name.startswith(ours):
                out[theirs + name[len(ours) :]] = t
                break
        else:
            raise InteropError(f"tensor {name} has no Hugging Face counterpart")
    atom = "encoder.graph_encoder.graph_node_feature.atom_encoder.weight"
    out[atom] = hf_atom_rows(out[atom], to_hf=True)
    if config.pre_ln:
        d = config.hidden_dim
        out["encoder.graph_encoder.final_layer_norm.weight"] = torch.ones(d)
        out["encoder.graph_encoder.final_layer_norm.bias"] = torch.zeros(d)
    return out


def hf_inputs(batch: GraphormerBatch) -> dict[str, Tensor]:
    """The keyword inputs of Hugging Face's ``GraphormerForGraphClassification`` for a batch:
    the tensors its ``preprocess_item`` + ``GraphormerDataCollator(spatial_pos_max=1024)`` give
    for the same molecules (the multi-hop path features cut to the hops the model reads).

    Its preprocessing shifts node features one index further than Microsoft's code and this
    library (``raw + 3 + 512 f`` instead of ``raw + 2 + 512 f``; see :func:`hf_atom_rows`);
    every other index is the same. Its model masks padded keys itself (from
    ``input_nodes[:, :, 0] == 0``), so ``attn_bias`` is all zeros, as its collator makes it.
    ``attn_edge_type`` (read only by the ``edge_type != "multi_hop"`` variant) is zeros.

    Shapes:
        ``input_nodes`` ``[B, n, F]``, ``input_edges`` ``[B, n, n, D, F_e]``, ``attn_bias``
        ``[B, n + 1, n + 1]``, ``in_degree`` / ``out_degree`` ``[B, n]``, ``spatial_pos``
        ``[B, n, n]``, ``attn_edge_type`` ``[B, n, n, F_e]``.
    """
    b, n = batch.spatial_pos.shape[:2]
    fe = batch.edge_input.shape[-1]
    return {
        "input_nodes": torch.where(batch.x > 0, batch.x + 1, 0),
        "input_edges": batch.edge_input,
        "attn_bias": torch.zeros_like(batch.attn_bias),
        "in_degree": batch.in_degree,
        "out_degree": batch.out_degree,
        "spatial_pos": batch.spatial_pos,
        "attn_edge_type": batch.x.new_zeros(b, n, n, max(fe, 1)),
    }


def hf_atom_rows(table: Tensor, to_hf: bool) -> Tensor:
    """Move the node-feature table between Hugging Face's indexing and this library's.

    Hugging Face's ``preprocess_item`` adds one more to node features than Microsoft's code
    (``convert_to_single_emb(x) + 1``, then ``+ 1`` again for padding), so a feature that this
    library (and fairseq) reads from row ``k`` is read by Hugging Face from row ``k + 1``; row
    0 is padding in both. Converting keeps the same outputs on the same molecules. Hugging
    Face's row 1 is never read; this library's last row is never read by molecules either
    (it would need a raw feature value of 510), and each becomes zeros.

    Args:
        table: ``[num_atoms, d]`` in Hugging Face's indexing (``to_hf=False``) or this
            library's (``to_hf=True``).

    Returns:
        ``[num_atoms, d]`` in the other indexing.
    """
    out = torch.zeros_like(table)
    if to_hf:
        out[2:] = table[1:-1]
    else:
        out[1:-1] = table[2:]
    return out
