"""Tests of causal URPE language modelling: Transformer-XL, its corpora and training loop."""

from __future__ import annotations

import io
import json
import math
import shutil
import signal
import urllib.error
import zipfile
from collections import Counter
from pathlib import Path

import pytest
import torch

from graphormer_urpe.io.checkpoint import TrainingInterrupted, load_checkpoint
from graphormer_urpe.sequence import (
    CorpusUnavailableError,
    TransformerXL,
    TransformerXLConfig,
    evaluate_lm,
    lm_config,
    pydoc_corpus,
    relative_position_index,
    train_lm,
    wikitext_corpus,
)
from graphormer_urpe.sequence import corpus as corpus_module
from graphormer_urpe.sequence import lm as lm_module
from graphormer_urpe.sequence.lm import batchify, cosine_warmup
from graphormer_urpe.sequence.model import RelativePositionTable
from graphormer_urpe.sequence.xl_attention import SegmentAttention
from tests.helpers import perturb_tables, tiny_xl

# --------------------------------------------------------------------------- helpers


# --------------------------------------------------------------------------- model


def test_causal_relative_index_matches_plain_distances() -> None:
    index, rows = relative_position_index(6, causal=True)
    assert rows == 6
    for i in range(6):
        for j in range(6):
            assert int(index[i, j]) == (i - j if j <= i else 0)
    table = RelativePositionTable(7, num_heads=2, causal=True)
    assert table.weight.shape == (7, 2)
    rect = table(7, query_len=3)  # queries at window positions 4, 5, 6
    assert rect.shape == (1, 2, 3, 7)
    for qi, i in enumerate(range(4, 7)):
        for j in range(i + 1):
            assert torch.equal(rect[0, :, qi, j], table.weight[i - j])
    offsets, values = table.by_offset()
    assert offsets.tolist() == list(range(-6, 1))
    assert torch.equal(values[:, -1], table.weight[0].detach())  # offset 0
    with pytest.raises(ValueError, match="one row per offset"):
        relative_position_index(6, num_buckets=8, causal=True)


def test_attention_with_memory_matches_plain_reference() -> None:
    """One URPE attention over [memory; x] with causal B and C equals a loop-by-loop oracle."""
    torch.manual_seed(0)
    b, m, n, d, h = 2, 5, 4, 12, 3
    attn = SegmentAttention(d, h).eval()
    mem, x = torch.randn(b, m, d), torch.randn(b, n, d)
    bias_table, scale_table = torch.randn(m + n, h), 1 + 0.3 * torch.randn(m + n, h)
    future = torch.zeros(n, m + n)
    bias = torch.empty(1, h, n, m + n)
    scale = torch.empty(1, h, n, m + n)
    for i in range(n):
        for j in range(m + n):
            dist = m + i - j
            future[i, j] = float("-inf") if dist < 0 else 0.0
            bias[0, :, i, j] = bias_table[max(dist, 0)]
            scale[0, :, i, j] = scale_table[max(dist, 0)]
    got = attn(x, bias + future, scale, memory=mem)

    kv = torch.cat([mem, x], 1)
    dh = d // h
    q = attn.q_proj(x).view(b, n, h, dh)
    k = attn.k_proj(kv).view(b, m + n, h, dh)
    v = attn.v_proj(kv).view(b, m + n, h, dh)
    out = torch.zeros(b, n, h, dh)
    for bi in range(b):
        for hi in range(h):
            for i in range(n):
                allowed = range(m + i + 1)
                s = torch.stack(
                    [
                        q[bi, i, hi] @ k[bi, j, hi] / math.sqrt(dh) + bias[0, hi, i, j]
                        for j in allowed
                    ]
                )
                p = torch.softmax(s, 0)
                for jj, j in enumerate(allowed):
                    out[bi, i, hi] += p[jj] * scale[0, hi, i, j] * v[bi, j, hi]
    want = attn.out_proj(out.reshape(b, n, d))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pe", ["none", "ape", "rpe", "urpe", "xl", "xl-urpe"])
def test_changing_future_tokens_leaves_earlier_logits_unchanged(pe: str) -> None:
    torch.manual_seed(1)
    model = tiny_xl(pe)
    perturb_tables(model)
    x = torch.randint(0, 40, (3, 8))
    y = x.clone()
    y[:, 5:] = (y[:, 5:] + 7) % 40  # change positions 5..7
    with torch.no_grad():
        a, mem_a = model(x)
        b, _ = model(y)
        assert torch.equal(a[:, :5], b[:, :5])
        assert not torch.allclose(a[:, 5:], b[:, 5:])
        # With memory: a second segment after x's memory, again changed from position 3 on.
        x2 = torch.randint(0, 40, (3, 8))
        y2 = x2.clone()
        y2[:, 3:] = (y2[:, 3:] + 11) % 40
        a2, mem2 = model(x2, mem_a)
        b2, _ = model(y2, mem_a)
        assert torch.equal(a2[:, :3], b2[:, :3])
        assert not torch.allclose(a2[:, 3:], b2[:, 3:])
        # A third segment with a full memory (mem_len 16 = two segments).
        a3, _ = model(x, mem2)
        assert a3.shape == (3, 8, 40) and torch.isfinite(a3).all()


@pytest.mark.parametrize(("base", "scaled", "distance"), [("rpe", "urpe", 3), ("xl", "xl-urpe", 2)])
def test_urpe_equals_its_base_scheme_at_initialisation(base: str, scaled: str, distance: int):
    torch.manual_seed(2)
    plain = tiny_xl(base)
    urpe = tiny_xl(scaled)
    missing = urpe.load_state_dict(plain.state_dict(), strict=False).missing_keys
    assert missing == ["rel_scales.0.weight"]
    assert torch.all(urpe.rel_scales[0].weight == 1.0)
    x1, x2 = torch.randint(0, 40, (2, 8)), torch.randint(0, 40, (2, 8))
    with torch.no_grad():
        a1, ma = plain(x1)
        b1, mb = urpe(x1)
        a2, _ = plain(x2, ma)
        b2, _ = urpe(x2, mb)
    torch.testing.assert_close(a1, b1)
    torch.testing.assert_close(a2, b2)
    with torch.no_grad():
        urpe.rel_scales[0].weight[distance].fill_(0.5)  # C now differs at that distance
        c2, _ = urpe(x2, mb)
    assert not torch.allclose(a2, c2)


@pytest.mark.parametrize("pe", ["none", "ape", "rpe", "urpe", "xl", "xl-urpe"])
@pytest.mark.parametrize("pre_ln", [False, True])
def test_memory_across_segments_equals_one_long_pass(pe: str, pre_ln: bool) -> None:
    """With mem_len covering everything before the last segment, three segments of 8 give the
    logits of one causal pass over all 24 tokens (same weights, same window of 24)."""
    torch.manual_seed(3)
    seg = tiny_xl(pe, tgt_len=8, mem_len=16, pre_ln=pre_ln, share_scale=False)
    perturb_tables(seg)
    long = tiny_xl(pe, tgt_len=24, mem_len=0, pre_ln=pre_ln, share_scale=False)
    long.load_state_dict(seg.state_dict())
    x = torch.randint(0, 40, (2, 24))
    with torch.no_grad():
        full, no_mem = long(x)
        memory, parts = None, []
        for s in range(0, 24, 8):
            out, memory = seg(x[:, s : s + 8], memory)
            parts.append(out)
    assert no_mem is None
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-5, atol=1e-5)
    # The memory is the last mem_len inputs of every layer, without gradient.
    assert len(memory) == 2 and all(t.shape == (2, 16, 32) for t in memory)
    assert not any(t.requires_grad for t in memory)


def test_memory_is_truncated_and_detached_in_training() -> None:
    torch.manual_seed(4)
    model = tiny_xl("urpe", tgt_len=8, mem_len=5).train()
    x = torch.randint(0, 40, (2, 8))
    logits, mem = model(x)
    assert [t.shape for t in mem] == [torch.Size([2, 5, 32])] * 2
    assert logits.requires_grad and not mem[0].requires_grad
    _, mem2 = model(x, mem)
    assert mem2[0].shape == (2, 5, 32)
    with pytest.raises(ValueError, match="exceeds the window"):
        model(torch.randint(0, 40, (2, 9)), mem)


# --------------------------------------------------------------------------- corpora


def _write_wikitext(folder: Path) -> dict[str, str]:
    texts = {
        "wiki.train.tokens": " \n = Valkyria Chronicles = \n \n The game is a <unk> game . \n"
        " The game began in 2010 , the game . \n",
        "wiki.valid.tokens": " \n = Tower = \n \n The tower is a game . \n",
        "wiki.test.tokens": " The <unk> began . \n \n",
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
    return texts


def _reference_symbols(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        out += line.split() + ["<eos>"]
    return out


def test_wikitext_fixture_loads(tmp_path) -> None:
    texts = _write_wikitext(tmp_path / "wikitext-2")
    corpus = wikitext_corpus("wikitext-2", tmp_path, download=False, progress=False)
    train = _reference_symbols(texts["wiki.train.tokens"])
    counts = Counter(train)
    vocab = corpus.vocab
    assert vocab.symbols[0] == "<eos>"
    assert set(vocab.symbols) == set(train)  # <unk> is a word of the training file
    freq = [counts[s] for s in vocab.symbols[1:]]
    assert freq == sorted(freq, reverse=True)
    assert vocab.decode(corpus.train.tolist()) == train
    valid = _reference_symbols(texts["wiki.valid.tokens"])
    assert corpus.valid.numel() == len(valid)
    unseen = [w for w in valid if w not in counts]
    assert sorted(set(unseen)) == ["Tower", "tower"]
    assert corpus.unknown["valid"] == len(unseen)
    assert vocab.decode(corpus.valid.tolist()) == [w if w in counts else "<unk>" for w in valid]
    assert corpus.level == "word" and corpus.unknown["test"] == 0
    # The tokenised cache gives the same corpus; a changed file invalidates it.
    assert (tmp_path / "wikitext-2" / "lm_tokens.pt").is_file()
    again = wikitext_corpus("wikitext-2", tmp_path, download=False, progress=False)
    assert again.vocab.symbols == vocab.symbols and torch.equal(again.valid, corpus.valid)
    (tmp_path / "wikitext-2" / "wiki.test.tokens").write_text(" Tower \n", encoding="utf-8")
    changed = wikitext_corpus("wikitext-2", tmp_path, download=False, progress=False)
    assert changed.test.numel() == 2 and changed.unknown["test"] == 1


def test_wikitext_missing_files_say_where_to_put_them(tmp_path, monkeypatch) -> None:
    with pytest.raises(CorpusUnavailableError) as info:
        wikitext_corpus("wikitext-103", tmp_path, download=False)
    msg = str(info.value)
    assert "\n" not in msg and "wikitext-103-v1.zip" in msg
    assert str(tmp_path / "wikitext-103") in msg and "wiki.valid.tokens" in msg

    def offline(url, timeout=None):
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(corpus_module.urllib.request, "urlopen", offline)
    with pytest.raises(CorpusUnavailableError) as info:
        wikitext_corpus("wikitext-2", tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and "network is unreachable" in msg
    assert "https://" in msg and str(tmp_path / "wikitext-2") in msg
    assert not list(tmp_path.glob(".wikitext-2.*"))  # the temporary folder is gone


def test_wikitext_download_unpacks_the_official_archive(tmp_path, monkeypatch) -> None:
    texts = _write_wikitext(tmp_path / "src" / "wikitext-2")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in texts:
            zf.write(tmp_path / "src" / "wikitext-2" / name, f"wikitext-2/{name}")
    payload = buf.getvalue()
    seen = []

    class Response(io.BytesIO):
        headers = {"Content-Length": str(len(payload))}

    def fake_urlopen(url, timeout=None):
        seen.append(url)
        return Response(payload)

    monkeypatch.setattr(corpus_module.urllib.request, "urlopen", fake_urlopen)
    corpus = wikitext_corpus("wikitext-2", tmp_path / "data", progress=False)
    assert seen == [corpus_module.WIKITEXT_URLS["wikitext-2"]]
    for name, text in texts.items():
        assert (tmp_path / "data" / "wikitext-2" / name).read_text(encoding="utf-8") == text
    assert corpus.train.numel() == len(_reference_symbols(texts["wiki.train.tokens"]))


def test_pydoc_corpus_is_split_by_topic_with_a_fixed_seed() -> None:
    from pydoc_data.topics import topics

    a, b, c = pydoc_corpus(seed=0), pydoc_corpus(seed=0), pydoc_corpus(seed=1)
    assert torch.equal(a.valid, b.valid) and torch.equal(a.test, b.test)
    assert a.valid.numel() != c.valid.numel() or not torch.equal(a.valid, c.valid)
    total = sum(len(t) + (not t.endswith("\n")) for t in topics.values())
    sizes = [a.split(s).numel() for s in ("train", "valid", "test")]
    assert sum(sizes) == total
    assert sizes[1] >= 0.1 * total and sizes[2] >= 0.1 * total and sizes[0] > 0.5 * total
    # Every split is made of whole topics, each in exactly one split.
    docs = a.documents
    assert sorted(docs["train"] + docs["valid"] + docs["test"]) == sorted(topics)
    train_text = "".join(a.vocab.decode(a.train.tolist()))
    for split in ("train", "valid", "test"):
        want = "".join(
            t if t.endswith("\n") else t + "\n" for t in (topics[n] for n in docs[split])
        )
        got = a.vocab.decode(a.split(split).tolist())
        assert len(got) == len(want)
        unk = [i for i, ch in enumerate(got) if ch == "<unk>"]
        assert len(unk) == a.unknown[split]
        assert all(got[i] == want[i] for i in range(len(want)) if got[i] != "<unk>")
        assert all(want[i] not in train_text for i in unk)
    assert a.level == "char" and len(a.vocab) == len(set(train_text)) + 1


# --------------------------------------------------------------------------- training


def test_cosine_schedule_and_stream_columns() -> None:
    assert cosine_warmup(0, 10, 110) == pytest.approx(0.1)
    assert cosine_warmup(9, 10, 110) == pytest.approx(1.0)
    assert cosine_warmup(10, 10, 110) == pytest.approx(1.0)
    assert cosine_warmup(60, 10, 110) == pytest.approx(0.5)
    assert cosine_warmup(110, 10, 110) == pytest.approx(0.0, abs=1e-12)
    assert cosine_warmup(0, 0, 50) == pytest.approx(1.0)
    cols = batchify(torch.arange(11), 3)
    assert cols.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    with pytest.raises(ValueError, match="too short"):
        batchify(torch.arange(5), 3)
    # Every next-token pair inside a column is scored once, across segment boundaries.
    model = tiny_xl("rpe", tgt_len=4, mem_len=4)
    stream = torch.randint(0, 40, (23,))
    loss, count = evaluate_lm(model, stream, batch_size=2)
    assert count == 2 * (11 - 1)
    data = batchify(stream, 2)
    memory, total = None, 0.0
    with torch.no_grad():
        for start in range(0, 10, 4):
            n = min(4, 10 - start)
            out, memory = model(data[:, start : start + n], memory)
            total += float(
                torch.nn.functional.cross_entropy(
                    out.reshape(-1, 40),
                    data[:, start + 1 : start + n + 1].reshape(-1),
                    reduction="sum",
                )
            )
    assert loss == pytest.approx(total / count, rel=1e-6)


def _tiny(pe: str = "urpe", **kw):
    model = dict(width=32, layers=1, heads=2, ffn=64, tgt_len=16, mem_len=16)
    run = dict(steps=40, batch_size=8, lr=3e-3, warmup_steps=4, seed=3)
    cadence = dict(eval_every=20, eval_batch_size=32, checkpoint_every=20)
    return lm_config("cpu", "pydoc", pe, **{**model, **run, **cadence, **kw})


@pytest.fixture(scope="module")
def pydoc():
    return pydoc_corpus()


def test_tiny_lm_run_lowers_validation_loss(tmp_path, one_thread, pydoc) -> None:
    metrics = train_lm(_tiny(), tmp_path / "run", corpus=pydoc, progress=False)
    assert metrics["valid_loss"] < metrics["initial_valid_loss"] - 0.5
    assert metrics["valid_bpc"] == pytest.approx(metrics["valid_loss"] / math.log(2), abs=1e-4)
    assert metrics["test_bpc"] == pytest.approx(metrics["test_loss"] / math.log(2), abs=1e-4)
    assert metrics["valid_tokens"] > 0.99 * pydoc.valid.numel() - 32
    out = tmp_path / "run"
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["valid_bpc"] == metrics["valid_bpc"] and saved["config"]["model"]["pe"] == "urpe"
    assert (out / "curve.csv").read_text().count("\n") == 41
    assert (out / "pe_tables.png").read_bytes()[:4] == b"\x89PNG"
    # best.pt holds the weights whose validation loss is reported.
    best = load_checkpoint(out / "best.pt")
    model = TransformerXL(_tiny_model_config(saved))
    model.load_state_dict(best["model"])
    loss, _ = evaluate_lm(model, pydoc.valid, 32)
    assert loss == pytest.approx(metrics["valid_loss"], abs=1e-5)


def _tiny_model_config(saved: dict) -> TransformerXLConfig:
    return TransformerXLConfig(**saved["config"]["model"])


@pytest.mark.parametrize("pe", ["xl", "xl-urpe"])
def test_tiny_xl_run_lowers_validation_loss(tmp_path, one_thread, pydoc, pe: str) -> None:
    metrics = train_lm(_tiny(pe), tmp_path / "run", corpus=pydoc, progress=False)
    assert metrics["pe"] == pe
    assert metrics["valid_loss"] < metrics["initial_valid_loss"] - 0.5
    assert metrics["evals"][-1]["valid_loss"] < metrics["evals"][0]["valid_loss"]


@pytest.mark.parametrize("pe", ["urpe", "xl", "xl-urpe"])
def test_resume_continues_exactly(tmp_path, one_thread, pydoc, pe: str) -> None:
    cfg = _tiny(pe, steps=20, eval_every=10, checkpoint_every=10, dropout=0.2)
    full = train_lm(cfg, tmp_path / "a", corpus=pydoc, progress=False)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    (tmp_path / "b" / "last.pt").unlink()
    (tmp_path / "b" / "checkpoints" / "step-000000020.pt").unlink()  # "killed" after 10
    resumed = train_lm(cfg, tmp_path / "b", corpus=pydoc, resume=True, progress=False)
    a, b = load_checkpoint(tmp_path / "a" / "last.pt"), load_checkpoint(tmp_path / "b" / "last.pt")
    assert b["step"] == 20
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert all(torch.equal(x, y) for x, y in zip(a["memory"], b["memory"], strict=True))
    assert resumed["valid_loss"] == full["valid_loss"]
    assert resumed["evals"] == full["evals"]


def test_sigterm_saves_the_update_and_resume_is_exact(tmp_path, one_thread, pydoc, monkeypatch):
    cfg = _tiny(steps=20, eval_every=10, checkpoint_every=10, dropout=0.2)
    full = train_lm(cfg, tmp_path / "a", corpus=pydoc, progress=False)

    class SignalAtUpdate:  # torch.nn.functional, raising SIGTERM during the 7th update's loss
        calls = 0

        def __getattr__(self, name):
            return getattr(torch.nn.functional, name)

        def cross_entropy(self, *args, **kwargs):
            if torch.is_grad_enabled():  # a training update, not an evaluation
                SignalAtUpdate.calls += 1
                if SignalAtUpdate.calls == 7:
                    signal.raise_signal(signal.SIGTERM)
            return torch.nn.functional.cross_entropy(*args, **kwargs)

    monkeypatch.setattr(lm_module, "F", SignalAtUpdate())
    with pytest.raises(TrainingInterrupted) as stopped:
        train_lm(cfg, tmp_path / "b", corpus=pydoc, progress=False)
    assert stopped.value.checkpoint == tmp_path / "b" / "checkpoints" / "step-000000007.pt"
    assert load_checkpoint(tmp_path / "b" / "last.pt")["step"] == 7  # that update finished
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    monkeypatch.undo()
    resumed = train_lm(cfg, tmp_path / "b", corpus=pydoc, resume=True, progress=False)
    a, b = load_checkpoint(tmp_path / "a" / "last.pt"), load_checkpoint(tmp_path / "b" / "last.pt")
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert resumed["valid_loss"] == full["valid_loss"] and resumed["evals"] == full["evals"]
