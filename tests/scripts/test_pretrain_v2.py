"""Pretrained v2's calls: a state split into parts and joined again, shards streamed to the
steps as they are featurised, and a call resumed from the parts of the one before."""

from __future__ import annotations

import importlib.util
import io
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from graphormer_urpe.io.checkpoint import CheckpointError
from graphormer_urpe.io.parts import load_from_parts, parts_manifest, save_in_parts

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
SMILES = [
    "CCO", "CC(=O)O", "c1ccccc1", "CCN(CC)CC", "CC(C)O", "OC1CCCCC1", "c1ccncc1",
    "CC(=O)Nc1ccc(O)cc1", "CN1CCC[C@H]1c1cccnc1", "O=C(O)c1ccccc1O", "CCOC(=O)C",
    "C1CCNCC1", "Clc1ccccc1", "CC#N", "NCC(=O)O", "CCCCCC", "c1ccc2ccccc2c1", "OCCO",
    "CC(C)(C)O", "C=CC=C", "CSC", "FC(F)F", "c1ccsc1", "c1cc[nH]c1", "CC(N)=O",
    "O=C1CCCC1", "CCOCC", "Brc1ccccc1", "CC(C)CC(C)C", "NC(=O)c1ccccc1", "COc1ccccc1",
    "CC1=CC(=O)C=CC1=O", "OC(=O)CCC(=O)O", "c1ccc(cc1)C(=O)c1ccccc1", "CCCCO", "CNC",
]  # fmt: skip


@pytest.fixture(scope="module")
def v2():
    spec = importlib.util.spec_from_file_location("pretrain_v2", SCRIPTS / "pretrain_v2.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["pretrain_v2"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("pretrain_v2", None)


def _state() -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "model": {"w": torch.randn(300, 7, generator=g), "b": torch.zeros(4000)},
        "step": 12,
        "names": ["a", "b"],
    }


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_parts_join_to_the_saved_state(tmp_path):
    state = _state()
    manifest = save_in_parts(tmp_path, "s", state, part_bytes=1000)
    parts = sorted(tmp_path.glob("s.part[0-9]*"))
    assert [p.name for p in parts] == [p["file"] for p in manifest["parts"]]
    assert len(parts) == -(-manifest["bytes"] // 1000) > 1
    assert all(p.stat().st_size <= 1000 for p in parts)
    # the plain reference: the parts' bytes in order are zlib of what torch.save writes
    joined = zlib.decompress(b"".join(p.read_bytes() for p in parts))
    assert len(joined) == manifest["raw_bytes"]
    assert _same(torch.load(io.BytesIO(joined), weights_only=True), state)
    assert _same(load_from_parts(tmp_path, "s"), state)
    assert manifest["bytes"] < manifest["raw_bytes"]  # the zeros take little room


def test_damaged_missing_and_stale_parts(tmp_path):
    save_in_parts(tmp_path, "s", _state(), part_bytes=1000)
    second = tmp_path / "s.part001"
    data = bytearray(second.read_bytes())
    data[10] ^= 0xFF
    second.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="s.part001"):
        load_from_parts(tmp_path, "s")
    second.unlink()
    with pytest.raises(CheckpointError, match="s.part001 is missing"):
        load_from_parts(tmp_path, "s")
    small = {"step": 1}
    manifest = save_in_parts(tmp_path, "s", small, part_bytes=1000)
    assert len(manifest["parts"]) == 1
    assert sorted(p.name for p in tmp_path.glob("s.part[0-9]*")) == ["s.part000"]  # stale removed
    assert load_from_parts(tmp_path, "s") == small
    assert parts_manifest(tmp_path, "other") is None
    with pytest.raises(CheckpointError, match="no other.parts.json"):
        load_from_parts(tmp_path, "other")


def test_sampler_draws_each_ready_molecule_once_per_pass(v2):
    names = ["train-000", "train-001"]
    calls = []

    def ready():  # the second shard is featurised before the sampler's third look
        calls.append(1)
        return {"train-000": 25} if len(calls) <= 2 else {"train-000": 25, "train-001": 15}

    sampler = v2.StreamSampler(ready, names, 10, seed=0, refresh_seconds=0.0)
    it = iter(sampler)
    first = [next(it) for _ in range(2)]
    assert all(i >> v2.SHARD_BITS == 0 for b in first for i in b)  # only shard 0 is ready
    rest = [next(it) for _ in range(2)]  # shard 1 arrives: 40 molecules in this pass
    ids = [i for b in first + rest for i in b]
    expected = [i for i in range(25)] + [(1 << v2.SHARD_BITS) | i for i in range(15)]
    assert sorted(ids) == expected  # each once, none repeated before the pass ends
    assert sampler.drawn == {"train-000": 25, "train-001": 15}
    assert sampler.passes == 0
    again = [i for _ in range(4) for i in next(it)]
    assert sorted(again) == expected and sampler.passes == 1


def test_a_resumed_call_continues_the_run(v2, tmp_path):
    pytest.importorskip("rdkit")
    src = tmp_path / "mols.smi"
    src.write_text("\n".join(SMILES) + "\n")
    data, work = tmp_path / "data", tmp_path / "work"
    manifest = v2.pack([src], data, shards=2, valid=6)
    assert manifest["molecules"] == len(SMILES)
    assert sum(s["molecules"] for s in manifest["shards"].values()) == len(SMILES)
    names = [v2.shard_name(0), v2.shard_name(1)]
    v2.featurize(data, work, [v2.VALID, *names], workers=1)
    ready = v2.ready_path(work, data)
    assert set(v2._ready_counts(ready)) == {v2.VALID, *names}

    from graphormer_urpe.datasets.featurizers.descriptors import DescriptorNormalizer
    from graphormer_urpe.datasets.store import MoleculeStore

    first = MoleculeStore(v2._read_json(ready, {})[names[0]]["store"])
    normalizer = DescriptorNormalizer.fit(first.descriptors[:], first.descriptor_names)
    config = v2.model_config(num_layers=1, hidden_dim=16, ffn_dim=16, num_heads=2,
                             attention_dropout=0.0)  # fmt: skip
    dataset = v2.ShardedDescriptors(ready, names, normalizer, config.multi_hop_max_dist)
    counts = {n: m for n, m in v2._ready_counts(ready).items() if n != v2.VALID}
    it = iter(v2.StreamSampler(lambda: counts, names, 4, seed=0))

    def trainer():
        t = v2.Trainer(config, len(normalizer.names), torch.device("cpu"), "fp32", 1e-3, 2, 8)
        return t, t.collator(4)

    t0, collate = trainer()
    batches = [collate(dataset.__getitems__(next(it))) for _ in range(6)]
    assert batches[0].y.shape == (4, len(normalizer.names))
    for b in batches[:3]:
        t0.train_step(b)
    save_in_parts(tmp_path / "out", "state", t0.state(), part_bytes=50_000)
    resumed, _ = trainer()
    resumed.restore(load_from_parts(tmp_path / "out", "state"))
    assert resumed.step == 3
    for b in batches[3:]:
        resumed.train_step(b)

    # the plain reference: one run whose AdamW loses exp_avg and rounds exp_avg_sq to
    # bfloat16 at step 3, as the state carries them
    ref, _ = trainer()
    for b in batches[:3]:
        ref.train_step(b)
    for s in ref.optimizer.state.values():
        s["exp_avg"].zero_()
        s["exp_avg_sq"].copy_(s["exp_avg_sq"].bfloat16().float())
    for b in batches[3:]:
        ref.train_step(b)
    assert resumed.step == ref.step == 6
    assert resumed.optimizer.param_groups[0]["lr"] == ref.optimizer.param_groups[0]["lr"]
    ref_weights = ref.model.state_dict()
    for k, a in resumed.model.state_dict().items():
        assert torch.equal(a, ref_weights[k]), k
    before = t0.model.state_dict()
    assert any(not torch.equal(a, before[k]) for k, a in ref_weights.items())  # it trained

    state = t0.state()
    assert all(
        s["exp_avg_sq"].dtype == torch.bfloat16 and "exp_avg" not in s
        for s in state["optimizer"]["state"].values()
    )
    np.testing.assert_array_equal(
        v2.full_optimizer_state(state["optimizer"])["state"][0]["exp_avg"].numpy(), 0.0
    )
