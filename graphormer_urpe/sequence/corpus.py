r"""Language-modelling corpora: WikiText-2 / WikiText-103 (word level) and Python's docs (chars).

Every corpus becomes an :class:`LMCorpus`: a vocabulary and three 1-D token streams
(train / valid / test) that a causal language model reads left to right.

* ``wikitext-2`` / ``wikitext-103``: the official token files ``wiki.train.tokens``,
  ``wiki.valid.tokens`` and ``wiki.test.tokens`` of ``wikitext-2-v1.zip`` /
  ``wikitext-103-v1.zip`` (unpacked to ``<root>/wikitext-2/`` or ``<root>/wikitext-103/``).
  The vocabulary is the usual word-level one of Transformer-XL and fairseq: every line is
  split on whitespace and ends with ``<eos>`` (empty lines included); the symbols are the
  training split's, most frequent first after ``<eos>``; WikiText already writes rare words
  as ``<unk>``, and a word of valid / test missing from train is mapped to ``<unk>`` too
  (counted in :attr:`LMCorpus.unknown`). Tokenised splits are cached next to the files.
* ``pydoc``: the English text of Python's own documentation topics, shipped with every
  CPython as :data:`pydoc_data.topics.topics` (79 topics, about 465k characters), at
  character level. Whole topics go to valid and test by a seeded shuffle until each holds at
  least its fraction of the characters; the rest is train. The vocabulary is the training
  split's characters (most frequent first) plus ``<unk>``. No download.
"""

from __future__ import annotations

import http.client
import io
import logging
import os
import random
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor
from tqdm.auto import tqdm

from ..io.checkpoint import write_atomic
from .choices import CORPORA, CorpusName, check_choice

__all__ = [
    "CORPORA",
    "CorpusName",
    "CorpusUnavailableError",
    "LMCorpus",
    "Vocabulary",
    "WIKITEXT_FILES",
    "WIKITEXT_URLS",
    "download_wikitext",
    "load_corpus",
    "pydoc_corpus",
    "read_wikitext_file",
    "wikitext_corpus",
]

logger = logging.getLogger(__name__)

#: Official archives (Salesforce Research's WikiText release).
WIKITEXT_URLS: dict[str, str] = {
    "wikitext-2": "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
    "wikitext-103": "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-v1.zip",
}
#: The token file of each split inside ``<root>/<name>/``.
WIKITEXT_FILES: dict[str, str] = {
    "train": "wiki.train.tokens",
    "valid": "wiki.valid.tokens",
    "test": "wiki.test.tokens",
}
EOS = "<eos>"
UNK = "<unk>"
_CACHE_NAME = "lm_tokens.pt"
_CACHE_VERSION = 1


class CorpusUnavailableError(FileNotFoundError):
    """A corpus's files are missing and could not be downloaded."""


class Vocabulary:
    """Symbols ↔ ids.

    Args:
        symbols: the symbols in id order (unique).
        unk: the symbol unknown inputs map to (must be among ``symbols``), or ``None`` to
            reject unknown symbols.
    """

    def __init__(self, symbols: Iterable[str], unk: str | None = UNK) -> None:
        self.symbols = list(symbols)
        self.index = {s: i for i, s in enumerate(self.symbols)}
        if len(self.index) != len(self.symbols):
            raise ValueError("vocabulary symbols must be unique")
        if unk is not None and unk not in self.index:
            raise ValueError(f"unknown-symbol {unk!r} is not in the vocabulary")
        self.unk = unk

    def __len__(self) -> int:
        return len(self.symbols)

    @classmethod
    def from_counts(
        cls, counts: Counter[str], specials: Iterable[str] = (), unk: str | None = UNK
    ) -> Vocabulary:
        """``specials`` first, then the counted symbols by decreasing count (ties: first seen),
        then ``unk`` when it was not counted."""
        symbols = list(dict.fromkeys(specials))
        seen = set(symbols)
        symbols += [s for s, _ in counts.most_common() if s not in seen]
        if unk is not None and unk not in symbols:
            symbols.append(unk)
        return cls(symbols, unk)

    def encode(self, symbols: Iterable[str]) -> tuple[Tensor, int]:
        """Ids of ``symbols`` and how many were unknown (mapped to ``unk``).

        Returns:
            ``(ids [T] long, n_unknown)``.

        Raises:
            KeyError: an unknown symbol and no ``unk``.
        """
        index = self.index
        if self.unk is None:
            ids = [index[s] for s in symbols]
            return torch.tensor(ids, dtype=torch.long), 0
        unk = index[self.unk]
        ids = [index.get(s, -1) for s in symbols]
        t = torch.tensor(ids, dtype=torch.long)
        missing = t.eq(-1)
        n_unknown = int(missing.sum())
        return t.masked_fill_(missing, unk), n_unknown

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Symbols of ``ids``."""
        return [self.symbols[int(i)] for i in ids]


@dataclass
class LMCorpus:
    """A tokenised language-modelling corpus.

    Attributes:
        name: ``"pydoc"``, ``"wikitext-2"``, ...
        level: ``"char"`` (metrics in bits per character) or ``"word"`` (perplexity).
        vocab: the :class:`Vocabulary`.
        train / valid / test: ``[T]`` long token streams.
        unknown: per split, how many symbols were mapped to ``<unk>`` because the training
            split lacks them (symbols written as ``<unk>`` in the source are not counted).
        documents: per split, the names of the documents it is made of, in order (``pydoc``:
            topic names; empty for corpora that come split).
    """

    name: str
    level: Literal["char", "word"]
    vocab: Vocabulary
    train: Tensor
    valid: Tensor
    test: Tensor
    unknown: dict[str, int] = field(default_factory=dict)
    documents: dict[str, list[str]] = field(default_factory=dict)

    def split(self, name: str) -> Tensor:
        """The ``[T]`` stream of ``"train" | "valid" | "test"``."""
        if name not in ("train", "valid", "test"):
            raise ValueError(f"unknown split {name!r}; expected train, valid or test")
        return getattr(self, name)

    def summary(self) -> dict[str, int | str]:
        """Sizes, for logs and metrics."""
        return {
            "corpus": self.name,
            "level": self.level,
            "vocab_size": len(self.vocab),
            **{f"{s}_tokens": int(self.split(s).numel()) for s in ("train", "valid", "test")},
            **{f"{s}_unknown": n for s, n in self.unknown.items()},
        }


# ---------------------------------------------------------------------------------- pydoc


def pydoc_corpus(
    seed: int = 0, valid_fraction: float = 0.1, test_fraction: float = 0.1
) -> LMCorpus:
    """Python's documentation topics at character level, split by topic.

    Topics (sorted by name, then shuffled with ``random.Random(seed)``) go to valid until it
    holds at least ``valid_fraction`` of all characters, then to test until it holds
    ``test_fraction``; the rest, in name order, is train. Each topic's text ends with a
    newline before the next one starts.

    Returns:
        An :class:`LMCorpus` with ``level="char"``.
    """
    try:
        from pydoc_data.topics import topics
    except ImportError as exc:  # some system Pythons ship the standard library without it
        raise CorpusUnavailableError(
            f"this Python has no pydoc_data.topics ({exc}); install its full standard library "
            "or use --corpus wikitext-2"
        ) from exc

    if not (
        0 < valid_fraction < 1 and 0 < test_fraction < 1 and valid_fraction + test_fraction < 1
    ):
        raise ValueError(
            f"valid_fraction and test_fraction must be in (0, 1) with a sum below 1, got "
            f"{valid_fraction} and {test_fraction}"
        )
    names = sorted(topics)
    texts = {n: topics[n] if topics[n].endswith("\n") else topics[n] + "\n" for n in names}
    total = sum(len(t) for t in texts.values())
    order = names[:]
    random.Random(seed).shuffle(order)
    parts: dict[str, list[str]] = {"valid": [], "test": []}
    it = iter(order)
    for split, frac in (("valid", valid_fraction), ("test", test_fraction)):
        size = 0
        while size < frac * total:
            name = next(it)
            parts[split].append(name)
            size += len(texts[name])
    held_out = set(parts["valid"]) | set(parts["test"])
    documents = {
        "train": [n for n in names if n not in held_out],
        "valid": sorted(parts["valid"]),
        "test": sorted(parts["test"]),
    }
    text = {split: "".join(texts[n] for n in docs) for split, docs in documents.items()}
    vocab = Vocabulary.from_counts(Counter(text["train"]))
    ids, unknown = {}, {}
    for split, t in text.items():
        ids[split], unknown[split] = vocab.encode(t)
    logger.info(
        "pydoc corpus: %d topics (train %d, valid %d, test %d), %d characters, vocabulary %d",
        len(names),
        len(documents["train"]),
        len(documents["valid"]),
        len(documents["test"]),
        total,
        len(vocab),
    )
    return LMCorpus(
        "pydoc", "char", vocab, ids["train"], ids["valid"], ids["test"], unknown, documents
    )


# ---------------------------------------------------------------------------------- WikiText


def read_wikitext_file(path: str | os.PathLike, progress: bool = False) -> list[str]:
    """The word-level symbols of a WikiText token file: each line split on whitespace,
    followed by ``<eos>`` (empty lines give just ``<eos>``).

    Raises:
        CorpusUnavailableError: the file does not exist.
        ValueError: the file is not UTF-8 (naming the file and line).
    """
    path = Path(path)
    if not path.is_file():
        raise CorpusUnavailableError(f"{path} does not exist")
    symbols: list[str] = []
    with open(path, "rb") as fh:
        size = path.stat().st_size
        with tqdm(
            total=size, unit="B", unit_scale=True, desc=path.name, disable=not progress
        ) as bar:
            for lineno, raw in enumerate(fh, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise ValueError(f"{path}:{lineno}: not UTF-8 ({exc.reason})") from exc
                symbols.extend(line.split())
                symbols.append(EOS)
                bar.update(len(raw))
    return symbols


def _wikitext_help(name: str, folder: Path) -> str:
    files = ", ".join(WIKITEXT_FILES.values())
    return f"download {WIKITEXT_URLS[name]} by hand and unzip it so that {folder} holds {files}"


def download_wikitext(name: str, root: str | os.PathLike, timeout: float = 30.0) -> Path:
    """Download and unpack the official ``<name>-v1.zip`` into ``<root>/<name>/``.

    Returns:
        The folder holding the three token files.

    Raises:
        CorpusUnavailableError: the download or the archive failed (one line, saying where to
            put the files by hand).
    """
    check_choice("WikiText corpus", name, list(WIKITEXT_URLS))
    root = Path(root)
    folder = root / name
    url = WIKITEXT_URLS[name]
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    try:
        archive = tmp / "download.zip"
        logger.info("downloading %s from %s", name, url)
        with open(archive, "wb") as fh, urllib.request.urlopen(url, timeout=timeout) as resp:
            total = int(resp.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=name) as bar:
                for block in iter(lambda: resp.read(1 << 20), b""):
                    fh.write(block)
                    bar.update(len(block))
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
        src = tmp / name
        missing = [f for f in WIKITEXT_FILES.values() if not (src / f).is_file()]
        if missing:
            raise zipfile.BadZipFile(f"the archive has no {name}/{missing[0]}")
        folder.mkdir(parents=True, exist_ok=True)
        for f in WIKITEXT_FILES.values():
            shutil.move(str(src / f), str(folder / f))
    except (OSError, http.client.HTTPException, zipfile.BadZipFile) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise CorpusUnavailableError(
            f"{name} token files not found in {folder} and downloading {url} failed "
            f"({type(exc).__name__}: {reason}); {_wikitext_help(name, folder)}"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _source_stamp(folder: Path) -> list[list[int | str]]:
    return [
        [f, (folder / f).stat().st_size, (folder / f).stat().st_mtime_ns]
        for f in WIKITEXT_FILES.values()
    ]


def wikitext_corpus(
    name: str = "wikitext-103",
    root: str | os.PathLike = "data",
    download: bool = True,
    cache: bool = True,
    progress: bool = True,
) -> LMCorpus:
    """WikiText-2 or WikiText-103 at word level from ``<root>/<name>/wiki.*.tokens``.

    The tokenised splits and vocabulary are cached in ``<root>/<name>/lm_tokens.pt`` (rebuilt
    when a token file's size or modification time changes).

    Args:
        name: ``"wikitext-2"`` or ``"wikitext-103"``.
        root: data root.
        download: fetch the official archive when the files are missing.
        cache: read / write the tokenised cache.
        progress: tqdm progress while reading the files.

    Raises:
        CorpusUnavailableError: files missing (and not downloadable), in one line.
    """
    check_choice("WikiText corpus", name, list(WIKITEXT_URLS))
    folder = Path(root) / name
    if not all((folder / f).is_file() for f in WIKITEXT_FILES.values()):
        if not download:
            raise CorpusUnavailableError(
                f"{name} token files not found in {folder}; {_wikitext_help(name, folder)}"
            )
        download_wikitext(name, root)
    stamp = _source_stamp(folder)
    cache_path = folder / _CACHE_NAME
    if cache and cache_path.is_file():
        try:
            blob = torch.load(cache_path, weights_only=True)
            if blob.get("version") == _CACHE_VERSION and blob.get("source") == stamp:
                vocab = Vocabulary(blob["symbols"])
                logger.info("%s: tokens from cache %s", name, cache_path)
                return LMCorpus(
                    name,
                    "word",
                    vocab,
                    blob["train"].long(),
                    blob["valid"].long(),
                    blob["test"].long(),
                    dict(blob["unknown"]),
                )
            logger.info("%s: cache %s is stale; re-tokenising", name, cache_path)
        except Exception as exc:  # unreadable cache: rebuild it
            logger.warning("%s: cannot read cache %s (%s); re-tokenising", name, cache_path, exc)
    words = {
        split: read_wikitext_file(folder / f, progress=progress)
        for split, f in WIKITEXT_FILES.items()
    }
    vocab = Vocabulary.from_counts(Counter(words["train"]), specials=[EOS])
    ids, unknown = {}, {}
    for split, w in words.items():
        ids[split], unknown[split] = vocab.encode(w)
    corpus = LMCorpus(name, "word", vocab, ids["train"], ids["valid"], ids["test"], unknown)
    logger.info("%s: %s", name, corpus.summary())
    if cache:
        dtype = torch.int32 if len(vocab) < 2**31 else torch.long
        buf = io.BytesIO()
        torch.save(
            {
                "version": _CACHE_VERSION,
                "source": stamp,
                "symbols": vocab.symbols,
                "unknown": unknown,
                **{s: ids[s].to(dtype) for s in WIKITEXT_FILES},
            },
            buf,
        )
        write_atomic(cache_path, buf.getvalue())
    return corpus


def load_corpus(
    name: str, root: str | os.PathLike = "data", download: bool = True, seed: int = 0
) -> LMCorpus:
    """The corpus ``name`` (one of :data:`CORPORA`); ``seed`` fixes the ``pydoc`` split."""
    if name == "pydoc":
        return pydoc_corpus(seed=seed)
    if name in WIKITEXT_URLS:
        return wikitext_corpus(name, root, download=download)
    raise ValueError(f"unknown corpus {name!r}; expected one of {CORPORA}")
