"""Tests of the synthetic sequence tasks, the sequence model and its training loop."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from graphormer_urpe.sequence import (
    PAD_INDEX,
    PE_SCHEMES,
    SequenceModelConfig,
    SequenceTransformer,
    SyntheticTask,
    evaluate,
    linear_warmup_decay,
    masked_loss_and_hits,
    relative_position_index,
    synthetic_config,
    t5_relative_bucket,
    train_synthetic,
)

# --------------------------------------------------------------------------- helpers


def _reference_t5_bucket(r: int, num_buckets: int = 64, max_distance: int = 128) -> int:
    """Plain-Python transcription of the reference ``relative_position_bucket`` (one offset)."""
    half = num_buckets // 2
    max_exact = half // 2
    n = abs(r)
    if n < max_exact:
        val = n
    else:
        frac = math.log(n / max_exact) / math.log(max_distance / max_exact)
        val = max_exact + int(frac * (half - max_exact))
        val = min(val, half - 1)
    return val if r >= 0 else -val


def _small_config(pe: str, **kw) -> SequenceModelConfig:
    base = dict(vocab=50, max_len=16, width=32, layers=2, heads=4, ffn=64, pe=pe, init_std=0.07)
    base.update(kw)
    return SequenceModelConfig(**base)


# --------------------------------------------------------------------------- tasks


def test_pi_targets_and_scored_positions() -> None:
    task = SyntheticTask("pi", vocab=1000, length=128)
    batch = task.sample(4, torch.Generator().manual_seed(0))
    assert batch.tokens.shape == batch.targets.shape == batch.mask.shape == (4, 128)
    assert torch.equal(batch.targets[0], torch.arange(1, 129))
    assert torch.equal(batch.targets[3], batch.targets[0])
    # Position 0's target is the padding index and is the only unscored position.
    assert (batch.targets[:, 0] == PAD_INDEX).all()
    assert not batch.mask[:, 0].any() and batch.mask[:, 1:].all()
    assert int(batch.mask.sum()) == 4 * task.num_scored == 4 * 127
    assert task.dictionary_size == 1011
    assert task.position_blind_accuracy == pytest.approx(1 / 127)


def test_etp_targets_filler_and_token_range() -> None:
    task = SyntheticTask("etp", vocab=1000, length=128)
    batch = task.sample(8, torch.Generator().manual_seed(1))
    tok, tgt = batch.tokens, batch.targets
    low, high = task.token_range
    assert (low, high) == (11, 991)
    assert int(tok.min()) >= low and int(tok.max()) < high
    for i in range(64):
        assert torch.equal(tgt[:, i], tok[:, 2 * i + 1])
    assert (tgt[:, 64:] == 998).all() and task.filler == 998
    assert not (tok == task.filler).any()  # the filler never appears in inputs
    assert batch.mask.all()  # every ETP position is scored
    assert task.position_blind_accuracy == 0.5


def test_task_determinism_by_seed() -> None:
    task = SyntheticTask("etp", vocab=1000, length=32)
    a = task.validation_set(16, seed=7)
    b = task.validation_set(16, seed=7)
    c = task.validation_set(16, seed=8)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.tokens, c.tokens)
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    s1 = [task.sample(2, g1).tokens for _ in range(3)]
    s2 = [task.sample(2, g2).tokens for _ in range(3)]
    assert all(torch.equal(x, y) for x, y in zip(s1, s2, strict=True))
    assert not torch.equal(s1[0], s1[1])  # the online stream moves on


def test_task_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="even length"):
        SyntheticTask("etp", vocab=1000, length=31)
    with pytest.raises(ValueError, match="unknown synthetic task"):
        SyntheticTask("copy", vocab=1000, length=32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vocab"):
        SyntheticTask("pi", vocab=10, length=8)
    with pytest.raises(ValueError, match="shape"):
        SyntheticTask("pi", vocab=100, length=8).targets(torch.zeros(2, 9, dtype=torch.long))


# --------------------------------------------------------------------------- relative positions


def test_t5_bucket_matches_plain_reference() -> None:
    offsets = torch.arange(-300, 301)
    for nb, md in ((64, 128), (32, 128), (16, 40)):
        got = t5_relative_bucket(offsets, nb, md).tolist()
        want = [_reference_t5_bucket(r, nb, md) for r in offsets.tolist()]
        assert got == want, (nb, md)
    # Spot values of the spec: |r| < 16 exact, 16 + floor(log(|r|/16)/log(8)*16) capped at 31.
    b = t5_relative_bucket(torch.tensor([0, 15, -15, 16, 20, 127, -127, 1000]))
    assert b.tolist() == [0, 15, -15, 16, 17, 31, -31, 31]


def test_relative_position_index_layouts() -> None:
    idx, rows = relative_position_index(128, None)
    assert rows == 255 and idx.shape == (128, 128)
    i, j = 5, 90
    assert int(idx[i, j]) == j - i + 127 and int(idx[j, i]) == i - j + 127
    assert int(idx.min()) == 0 and int(idx.max()) == 254

    idx, rows = relative_position_index(128, 64, 128)
    assert rows == 65
    used = set(idx.unique().tolist())
    assert used == set(range(65)) - {31, 32}  # the reference's two unused rows
    assert int(idx[0, 0]) == 33  # offset 0 -> 0 + 2 + 31
    rel = torch.arange(128)[None, :] - torch.arange(128)[:, None]
    ref = torch.tensor(
        [[_reference_t5_bucket(int(r)) for r in row] for row in rel.tolist()], dtype=torch.long
    )
    ref = torch.where(ref >= 0, ref + 2, ref)
    assert torch.equal(idx, ref - ref.min())  # the reference's "subtract the minimum"


# --------------------------------------------------------------------------- model


@pytest.mark.parametrize("pe", PE_SCHEMES)
def test_schemes_shapes_and_matrices(pe: str) -> None:
    torch.manual_seed(0)
    cfg = _small_config(pe)
    model = SequenceTransformer(cfg)
    tokens = SyntheticTask("pi", vocab=50, length=16).sample(3, torch.Generator().manual_seed(0))
    logits = model(tokens.tokens)
    assert logits.shape == (3, 16, 61)
    assert torch.isfinite(logits).all()
    bias, scales = model.positional_matrices(12)
    assert (model.embed_positions is not None) == (pe == "ape")
    if pe in ("none", "ape"):
        assert bias is None and scales is None
        return
    assert bias is not None and bias.shape == (1, 4, 12, 12)
    # Toeplitz in (i, j): B[h, i, j] depends on j - i only; shorter inputs use the corner.
    assert torch.equal(bias[0, :, 1:, 1:], bias[0, :, :-1, :-1])
    assert torch.equal(bias, model.positional_matrices(16)[0][..., :12, :12])
    if pe == "rpe":
        assert scales is None
        return
    assert scales is not None and len(scales) == cfg.layers
    assert all(torch.equal(c, torch.ones(1, 4, 12, 12)) for c in scales)


def test_bucketed_and_per_layer_tables() -> None:
    model = SequenceTransformer(_small_config("urpe", rel_buckets=8, rel_max_distance=16))
    assert model.rel_bias is not None and model.rel_bias.weight.shape == (9, 4)
    assert model.rel_scales is not None and len(model.rel_scales) == 1
    per_layer = SequenceTransformer(_small_config("urpe", layers=3, share_scale=False))
    assert per_layer.rel_scales is not None and len(per_layer.rel_scales) == 3
    with torch.no_grad():
        per_layer.rel_scales[1].weight.fill_(2.0)
    _, scales = per_layer.positional_matrices(8)
    assert scales is not None
    assert [float(c.detach().mean()) for c in scales] == [1.0, 2.0, 1.0]


@pytest.mark.parametrize("pe", PE_SCHEMES)
def test_padding_keys_are_masked(pe: str) -> None:
    torch.manual_seed(1)
    model = SequenceTransformer(_small_config(pe)).eval()
    tokens = torch.randint(11, 40, (2, 16))
    padded = tokens.clone()
    padded[:, 10:] = PAD_INDEX
    with torch.no_grad():
        full = model(padded)[:, :10]
        short = model(tokens[:, :10])
    torch.testing.assert_close(full, short, rtol=1e-4, atol=1e-5)
    if pe == "urpe":
        _, scales = model.positional_matrices(16, padded.eq(PAD_INDEX))
        assert scales is not None
        assert (scales[0][:, :, :, 10:] == 0).all() and (scales[0][:, :, :, :10] == 1).all()


def test_urpe_equals_rpe_at_initialisation() -> None:
    torch.manual_seed(2)
    rpe = SequenceTransformer(_small_config("rpe")).eval()
    urpe = SequenceTransformer(_small_config("urpe")).eval()
    missing, unexpected = urpe.load_state_dict(rpe.state_dict(), strict=False)
    assert unexpected == [] and all(k.startswith("rel_scales.") for k in missing) and missing
    tokens = torch.randint(11, 40, (4, 16))
    with torch.no_grad():
        out_rpe, out_urpe = rpe(tokens), urpe(tokens)
        torch.testing.assert_close(out_urpe, out_rpe, rtol=1e-5, atol=1e-5)
        # ... and the multiplicative matrix is what makes them differ afterwards.
        c = urpe.rel_scales[0].weight
        c.mul_(torch.linspace(0.5, 1.5, c.numel()).view_as(c))
        assert not torch.allclose(urpe(tokens), out_rpe, rtol=1e-3, atol=1e-3)


def test_no_pe_is_permutation_equivariant_and_ape_is_not() -> None:
    torch.manual_seed(3)
    tokens = torch.randint(11, 40, (2, 16))
    perm = torch.randperm(16)
    none = SequenceTransformer(_small_config("none")).eval()
    ape = SequenceTransformer(_small_config("ape")).eval()
    with torch.no_grad():
        torch.testing.assert_close(none(tokens[:, perm]), none(tokens)[:, perm])
        assert not torch.allclose(ape(tokens[:, perm]), ape(tokens)[:, perm], atol=1e-4)


def test_weight_tying_and_bert_init() -> None:
    tied = SequenceTransformer(_small_config("ape", tie_weights=True, init_std=0.02))
    untied = SequenceTransformer(_small_config("ape", tie_weights=False))
    assert tied.output_weight is tied.embed_tokens.weight
    assert untied.output_weight is not untied.embed_tokens.weight
    with torch.no_grad():
        w = tied.encoder.layers[0].self_attn.q_proj.weight
        assert 0.015 < float(w.std()) < 0.025  # BERT init overrides the core's Xavier init
        assert float(tied.encoder.layers[0].self_attn.q_proj.bias.abs().sum()) == 0.0
        assert float(tied.embed_tokens.weight[PAD_INDEX].abs().sum()) == 0.0
        assert float(tied.embed_positions.weight[PAD_INDEX].abs().sum()) == 0.0
        assert tied.rel_bias is None and tied.rel_scales is None  # APE: no relative tables


def test_config_validation_and_presets() -> None:
    with pytest.raises(ValueError, match="positional scheme"):
        SequenceModelConfig(pe="alibi")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="divisible"):
        SequenceModelConfig(width=30, heads=4)
    paper = synthetic_config("paper", "etp", "urpe")
    m = paper.model
    assert (m.layers, m.width, m.heads, m.ffn, m.init_std) == (3, 768, 12, 3072, 0.02)
    assert (paper.steps, paper.warmup_steps, paper.batch_size) == (40_000, 6_000, 128)
    assert paper.lr == 7e-5 and paper.valid_size == 6_400
    assert m.max_len == 128 and m.vocab == 1000 and m.tie_weights and m.share_scale
    assert not synthetic_config("paper", "pi", "urpe").model.tie_weights
    cpu = synthetic_config("cpu", "pi", "rpe", vocab=10_000, steps=400, width=None)
    assert cpu.model.vocab == 10_000 and cpu.steps == 400 and cpu.model.pe == "rpe"
    assert cpu.warmup_steps == 40  # the preset's warm-up fraction follows ``steps``
    with pytest.raises(ValueError, match="unknown configuration"):
        synthetic_config("cpu", "pi", "urpe", bogus=1)


# --------------------------------------------------------------------------- training


def test_schedule_warmup_then_linear_decay() -> None:
    m = [linear_warmup_decay(s, 10, 100) for s in range(100)]
    assert m[0] == pytest.approx(0.1) and m[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(m[:9], m[1:10], strict=True))
    assert all(a > b for a, b in zip(m[10:-1], m[11:], strict=True))
    assert m[-1] == pytest.approx(1 / 90)


def test_masked_loss_ignores_unscored_positions() -> None:
    task = SyntheticTask("pi", vocab=50, length=8)
    batch = task.sample(3, torch.Generator().manual_seed(0))
    logits = torch.randn(3, 8, task.dictionary_size)
    logits[:, 0, :] = 1e4  # garbage on the unscored position must not matter
    loss_sum, hits, n = masked_loss_and_hits(logits, batch)
    ref = sum(
        float(torch.nn.functional.cross_entropy(logits[b, i], batch.targets[b, i], reduction="sum"))
        for b in range(3)
        for i in range(1, 8)
    )
    assert n == 21 and float(loss_sum) == pytest.approx(ref, rel=1e-5)
    perfect = torch.nn.functional.one_hot(batch.targets, task.dictionary_size).float() * 50
    assert int(masked_loss_and_hits(perfect, batch)[1]) == 21


def test_short_training_urpe_learns_pi_and_no_pe_cannot(tmp_path, one_thread) -> None:
    """URPE learns PI far beyond chance; no PE stays at what a position-blind model can do."""
    torch.manual_seed(0)
    # 400 steps: URPE is at 0.93 after 300 and at 1.0 after 400 (seed 0, one thread)
    common = dict(vocab=50, max_len=16, width=32, layers=2, heads=4, ffn=64, steps=400)
    common.update(batch_size=16, lr=3e-3, valid_size=64, eval_every=100, seed=0)
    res = {}
    for pe in ("urpe", "none"):
        cfg = synthetic_config("cpu", "pi", pe, **common)
        res[pe] = train_synthetic(cfg, tmp_path / pe, progress=False)
    blind = SyntheticTask("pi", vocab=50, length=16).position_blind_accuracy  # 1/15
    assert res["urpe"]["valid_accuracy"] > 0.9
    assert res["none"]["valid_accuracy"] < 2 * blind
    # Output files: metrics, a curve row per update, and the B/C plot for URPE only.
    metrics = json.loads((tmp_path / "urpe" / "metrics.json").read_text())
    assert metrics["valid_accuracy"] == pytest.approx(res["urpe"]["valid_accuracy"])
    assert metrics["config"]["model"]["pe"] == "urpe" and metrics["steps"] == 400
    with open(tmp_path / "urpe" / "curve.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 400 and rows[-1]["valid_accuracy"] != ""
    assert (tmp_path / "urpe" / "pe_tables.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "none" / "pe_tables.png").exists()
    assert not list(tmp_path.glob("*/*.tmp"))


def test_evaluate_matches_manual_accuracy() -> None:
    torch.manual_seed(4)
    model = SequenceTransformer(_small_config("ape"))
    data = SyntheticTask("etp", vocab=50, length=16).validation_set(10, seed=1)
    loss, acc = evaluate(model, data, batch_size=3)
    with torch.no_grad():
        pred = model(data.tokens).argmax(-1)
    assert acc == pytest.approx(float((pred == data.targets)[data.mask].float().mean()))
    assert loss > 0 and model.training  # evaluate restores the training mode
