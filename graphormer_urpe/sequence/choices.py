"""The names the sequence sub-commands choose from: corpora and positional schemes.

Plain data, no torch: the command line offers them as choices without importing the models
(:mod:`.corpus`, :mod:`.model` and :mod:`.xl` re-export them).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

__all__ = [
    "CORPORA",
    "CorpusName",
    "LM_PE_SCHEMES",
    "LMPEName",
    "PE_SCHEMES",
    "PEName",
    "check_choice",
]

CorpusName = Literal["pydoc", "wikitext-2", "wikitext-103"]
#: The corpora :func:`~graphormer_urpe.sequence.corpus.load_corpus` knows.
CORPORA: tuple[CorpusName, ...] = ("pydoc", "wikitext-2", "wikitext-103")

PEName = Literal["none", "ape", "rpe", "urpe"]
#: The positional schemes, in the order the paper's Figure 1 lists them.
PE_SCHEMES: tuple[PEName, ...] = ("none", "ape", "rpe", "urpe")

LMPEName = Literal["none", "ape", "rpe", "urpe", "xl", "xl-urpe"]
#: The positional schemes of the language model: the synthetic model's four and
#: Transformer-XL's relative attention without and with URPE.
LM_PE_SCHEMES: tuple[LMPEName, ...] = ("none", "ape", "rpe", "urpe", "xl", "xl-urpe")


def check_choice(what: str, name: str, choices: Collection[str]) -> None:
    """Raise ``ValueError("unknown {what} {name!r}; expected one of {choices}")`` unless
    ``name`` is one of ``choices`` (shown as given)."""
    if name not in choices:
        raise ValueError(f"unknown {what} {name!r}; expected one of {choices}")
