"""Published Graphormer weights: Hugging Face and fairseq import, export, fine-tuning.

The oracle is Hugging Face's ``GraphormerForGraphClassification`` (transformers 4.57, a port
of Microsoft's fairseq Graphormer v2) with random weights, run on the same real molecules.
The fairseq files are written here in the layout of Microsoft's ``graphormer/models/
graphormer.py`` (``GraphormerEncoder``: ``graph_encoder``, ``lm_head_transform_weight``,
``layer_norm``, ``embed_out``, ``lm_output_learned_bias``, ``masked_lm_pooler``) with
``modules/graphormer_graph_encoder.py``, ``graphormer_graph_encoder_layer.py`` and
``graphormer_layers.py`` below ``graph_encoder`` (the names Hugging Face kept).
"""

from __future__ import annotations

import argparse
import json
import logging

import pytest
import torch

from graphormer_urpe import get_preset
from graphormer_urpe.datasets import featurize_smiles
from graphormer_urpe.datasets.sources.nci import read_nci_smiles
from graphormer_urpe.graph.model import Graphormer, fit_tables
from graphormer_urpe.graph.published_weights import InteropError
from graphormer_urpe.training.pretrained import (
    convert_checkpoint,
    export_huggingface,
    init_from_checkpoint,
    read_graphormer,
)
from tests.helpers import (
    batch_of,
    hf_config,
    hf_model,
    hf_predict,
)

transformers = pytest.importorskip("transformers")
from transformers.models.deprecated.graphormer import (  # noqa: E402
    modeling_graphormer,
)

# disconnected molecules (salts): unreachable pairs take the last spatial row
EXTRA = ["CC(=O)[O-].[Na+]", "c1ccccc1.O", "C[N+](C)(C)C.[Cl-]"]


def molecules(count: int = 24) -> list[str]:
    out = []
    for smi in [*EXTRA, *read_nci_smiles(limit=4 * count)]:
        try:
            featurize_smiles(smi, "ogb")
        except ValueError:
            continue
        out.append(smi)
        if len(out) == count:
            break
    return out


def ours_predict(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(batch)


CASES = [
    # size, layers, pre-LN, hops, outputs, extra Hugging Face options
    ("zinc-slim", 12, False, 20, 1, {"encoder_normalize_before": True}),
    ("zinc-slim", 12, True, 5, 3, {}),
    ("pcqm4mv2-base", 2, False, 5, 1, {"encoder_normalize_before": True}),
    ("pcqm4mv2-base", 2, True, 20, 4, {"embed_scale": 0.5}),
]


@pytest.mark.parametrize("size,layers,pre_ln,hops,outputs,kw", CASES)
def test_hugging_face_models_convert_exactly(size, layers, pre_ln, hops, outputs, kw):
    hf = hf_model(hf_config(size, layers, pre_ln, hops, outputs, **kw))
    batch = batch_of(molecules(), hops)
    want = hf_predict(hf, batch)  # [B, outputs]
    assert want.shape == (batch.num_graphs, outputs) and want.abs().mean() > 1e-3
    for attention in ("graphormer", "urpe"):
        src = read_graphormer(hf, attention=attention)
        c = src.model.config
        assert (c.pre_ln, c.final_norm, c.head, c.attention) == (
            pre_ln,
            False,
            "transform",
            attention,
        )
        assert c.embedding_norm == bool(kw.get("encoder_normalize_before"))
        assert (c.num_layers, c.multi_hop_max_dist, c.num_targets) == (layers, hops, outputs)
        torch.testing.assert_close(ours_predict(src.model, batch), want, atol=1e-5, rtol=0)
    # the state dict and the model object read the same
    again = read_graphormer(hf.state_dict(), options={"multi_hop_max_dist": hops, **kw})
    torch.testing.assert_close(ours_predict(again.model, batch), want, atol=1e-5, rtol=0)


def fairseq_state(hf) -> dict[str, torch.Tensor]:
    """The fairseq ``GraphormerModel`` state dict holding the same weights as ``hf``.

    Hugging Face's preprocessing reads node feature ``k`` of fairseq's table from row
    ``k + 1`` (one shift more), so the atom table moves up one row; the rest is renamed only.
    """
    out = {}
    for name, t in hf.state_dict().items():
        if name == "classifier.classifier.weight":
            name = "encoder.embed_out.weight"
        elif name == "classifier.lm_output_learned_bias":
            name = "encoder.lm_output_learned_bias"
        elif name.endswith("graph_node_feature.atom_encoder.weight"):
            t = torch.cat([t[:1], t[2:], torch.zeros_like(t[:1])])  # fairseq row k = HF row k+1
        out[name] = t.clone()
    d = hf.config.embedding_dim
    out["encoder.masked_lm_pooler.weight"] = torch.randn(d, d)  # unused for graph prediction
    out["encoder.masked_lm_pooler.bias"] = torch.randn(d)
    return out


def fairseq_args(config, namespace: bool):
    args = dict(
        arch="graphormer_base",
        encoder_layers=config.num_hidden_layers,
        encoder_embed_dim=config.embedding_dim,
        encoder_ffn_embed_dim=config.ffn_embedding_dim,
        encoder_attention_heads=config.num_attention_heads,
        dropout=0.0,
        attention_dropout=0.1,
        act_dropout=0.1,
        pre_layernorm=config.pre_layernorm,
        encoder_normalize_before=config.encoder_normalize_before,
        multi_hop_max_dist=config.multi_hop_max_dist,
        spatial_pos_max=1024,
        edge_type="multi_hop",
        activation_fn="gelu",
        num_classes=config.num_classes,
    )
    return argparse.Namespace(**args) if namespace else args


@pytest.mark.parametrize("pre_ln,hops", [(False, 5), (True, 20)])
def test_fairseq_checkpoints_convert_exactly(tmp_path, pre_ln, hops):
    config = hf_config("zinc-slim", 3, pre_ln, hops, 2, encoder_normalize_before=True)
    hf = hf_model(config, seed=1)
    batch = batch_of(molecules(16), hops)
    want = hf_predict(hf, batch)
    path = tmp_path / "checkpoint_best.pt"
    torch.save({"model": fairseq_state(hf), "args": fairseq_args(config, False)}, path)
    out = tmp_path / "model.pt"
    src = convert_checkpoint(path, out, attention="urpe")
    assert src.format == "fairseq"
    ignored = ["encoder.masked_lm_pooler.bias", "encoder.masked_lm_pooler.weight"]
    if pre_ln:  # built by fairseq for pre-LN models, never applied
        ignored += [f"encoder.graph_encoder.final_layer_norm.{p}" for p in ("bias", "weight")]
    assert sorted(src.ignored) == sorted(ignored)
    assert src.model.config.multi_hop_max_dist == hops and src.model.config.pre_ln == pre_ln
    torch.testing.assert_close(ours_predict(src.model, batch), want, atol=1e-5, rtol=0)
    # the written checkpoint reads back to the same model
    back = read_graphormer(out)
    assert back.format == "graphormer-urpe" and back.model.config.attention == "urpe"
    torch.testing.assert_close(ours_predict(back.model, batch), want, atol=1e-5, rtol=0)


def test_fairseq_pickled_args_need_the_explicit_unsafe_option(tmp_path):
    config = hf_config("zinc-slim", 1, False, 5, 1, encoder_normalize_before=True)
    hf = hf_model(config, seed=2)
    path = tmp_path / "checkpoint_last.pt"
    torch.save({"model": fairseq_state(hf), "args": fairseq_args(config, True)}, path)
    with pytest.raises(InteropError, match="weights_only=True") as err:
        read_graphormer(path)
    assert "--unsafe-load" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(InteropError, match="--unsafe-load") as err:
        convert_checkpoint(path, tmp_path / "m.pt")
    assert "\n" not in str(err.value) and not (tmp_path / "m.pt").exists()
    assert convert_checkpoint(path, tmp_path / "m.pt", unsafe_load=True).format == "fairseq"
    batch = batch_of(molecules(8), 5)
    model = read_graphormer(tmp_path / "m.pt").model
    torch.testing.assert_close(ours_predict(model, batch), hf_predict(hf, batch), atol=1e-5, rtol=0)


def test_unrepresentable_checkpoints_are_refused_in_one_line():
    config = hf_config("zinc-slim", 1, False, 5, 1)
    hf = hf_model(config, seed=3)
    cases = []
    relu = hf_config("zinc-slim", 1, False, 5, 1, activation_fn="relu")
    cases.append((modeling_graphormer.GraphormerForGraphClassification(relu), "activation_fn"))
    state = dict(hf.state_dict())
    state["encoder.graph_encoder.layers.0.layer_scale1"] = torch.ones(80)
    cases.append((state, "encoder.graph_encoder.layers.0.layer_scale1"))
    state = dict(hf.state_dict())
    name = "encoder.graph_encoder.graph_attn_bias.edge_encoder.weight"
    state[name] = state[name].clone()
    state[name][0] = 1.0
    cases.append((state, name))
    state = {k: v for k, v in hf.state_dict().items() if not k.startswith("classifier.")}
    cases.append((state, "output layer"))
    for source, needle in cases:
        with pytest.raises(InteropError) as err:
            read_graphormer(source)
        assert needle in str(err.value) and "\n" not in str(err.value)


def test_export_loads_in_transformers_and_round_trips(tmp_path):
    config = hf_config("zinc-slim", 2, True, 5, 2, encoder_normalize_before=True)
    hf = hf_model(config, seed=4)
    model = read_graphormer(hf).model
    batch = batch_of(molecules(12), 5)
    folder = export_huggingface(model, tmp_path / "hf")
    loaded = modeling_graphormer.GraphormerForGraphClassification.from_pretrained(folder).eval()
    torch.testing.assert_close(
        hf_predict(loaded, batch), ours_predict(model, batch), atol=1e-5, rtol=0
    )
    back = read_graphormer(folder).model
    assert back.config == model.config
    atom = "encoder.node_embedding.atom_encoder.weight"
    for name, t in model.state_dict().items():
        if name == atom:  # the last row is read by no molecule and has no Hugging Face row
            assert torch.equal(back.state_dict()[name][:-1], t[:-1]), name
            assert back.state_dict()[name][-1].eq(0).all()
            continue
        assert torch.equal(back.state_dict()[name], t), name

    # URPE: refused, or its plain part on request (equal outputs while every C is 1)
    urpe = read_graphormer(hf, attention="urpe").model
    with pytest.raises(InteropError, match="graphormer_only"):
        export_huggingface(urpe, tmp_path / "urpe")
    folder = export_huggingface(urpe, tmp_path / "urpe", graphormer_only=True)
    loaded = modeling_graphormer.GraphormerForGraphClassification.from_pretrained(folder).eval()
    torch.testing.assert_close(
        hf_predict(loaded, batch), ours_predict(urpe, batch), atol=1e-5, rtol=0
    )

    # a preset model has a final LayerNorm and a linear head: no Hugging Face equivalent
    with pytest.raises(InteropError, match="final_norm"):
        export_huggingface(Graphormer(fit_tables(get_preset("small"), "ogb")), tmp_path / "x")


def test_export_command_writes_the_folder_and_prints_its_files_as_json(tmp_path, capsys):
    from graphormer_urpe import cli

    path = tmp_path / "model.pt"
    convert_checkpoint(hf_model(hf_config("zinc-slim", 2, True, 5, 2), seed=3), path)
    assert cli.main(["export", str(path), "--out", str(tmp_path / "hf")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["out"] == str(tmp_path / "hf")
    assert sorted(report["files"]) == sorted(p.name for p in (tmp_path / "hf").iterdir())


def test_init_from_reports_loaded_new_and_ignored_tensors(tmp_path):
    config = hf_config("zinc-slim", 2, False, 5, 1, encoder_normalize_before=True)
    path = tmp_path / "model.pt"
    convert_checkpoint(hf_model(config, seed=5), path, attention="urpe")
    run = get_preset("small", attention="graphormer", dropout=0.2)
    model, report = init_from_checkpoint(path, run, "ogb", num_targets=3)
    assert model.config.num_targets == 3 and model.config.dropout == 0.2
    assert model.config.num_layers == 2 and model.config.hidden_dim == 80
    assert model.config.attention == "graphormer" and not model.config.pre_ln
    assert sorted(report.initialised) == ["head.bias", "head.out.weight"]
    assert sorted(report.ignored) == [
        "encoder.spatial_scale.graph_token_scale",
        "encoder.spatial_scale.scale",
    ]
    saved = read_graphormer(path).model.state_dict()
    assert len(report.loaded) == len(saved) - 4
    for name in report.loaded:
        assert torch.equal(model.state_dict()[name], saved[name]), name
    # the same number of outputs: everything is loaded
    model, report = init_from_checkpoint(path, get_preset("small", attention="urpe"), "ogb", 1)
    assert report.initialised == [] and report.ignored == []
    # a Hugging Face folder directly: the same tensors as through the converted checkpoint
    hf_model(config, seed=5).save_pretrained(tmp_path / "hf")
    direct, report = init_from_checkpoint(tmp_path / "hf", run, "ogb", num_targets=1)
    assert report.initialised == [] and report.ignored == []
    for name, t in direct.state_dict().items():
        assert torch.equal(t, saved[name]), name


def test_init_from_logs_a_count_and_the_names_at_debug_level(caplog):
    """The shipped checkpoint: one INFO line with the counts; the names only at -v (DEBUG)."""
    run = get_preset("small", attention="urpe")
    with caplog.at_level(logging.INFO, logger="graphormer_urpe"):
        _, report = init_from_checkpoint("pretrained", run, "ogb", num_targets=1)
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert any(f"loaded {len(report.loaded)} tensors" in m for m in info)
    assert not any(report.loaded[0] in m for m in info)  # no names
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="graphormer_urpe"):
        init_from_checkpoint("pretrained", run, "ogb", num_targets=1)
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any(m.startswith("loaded: ") and report.loaded[-1] in m for m in debug)
