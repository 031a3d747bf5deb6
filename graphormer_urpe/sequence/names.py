"""The names the sequence sub-commands choose from: corpora and positional schemes.

Plain data, no torch: the command line offers them as choices without importing the models
(:mod:`.corpus`, :mod:`.model` and :mod:`.xl` re-export them).
"""

from __future__ import annotations

from typing import Literal

__all__ = ["CORPORA", "CorpusName", "LM_PE_SCHEMES", "LMPEName", "PE_SCHEMES", "PEName"]

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
