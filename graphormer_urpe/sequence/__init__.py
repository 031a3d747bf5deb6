"""The paper's synthetic sequence tasks on the URPE attention core.

Position Identification / Even Token Prediction data (:mod:`.tasks`), a RoBERTa-style
sequence transformer with no PE, learned absolute PE, RPE or URPE (:mod:`.model`), its
training (:mod:`.train`); the ``synthetic`` and ``lm`` sub-commands are in
:mod:`graphormer_urpe.cli.sequence`::

    from graphormer_urpe.sequence import synthetic_config, train_synthetic

    metrics = train_synthetic(synthetic_config("cpu", task="pi", pe="urpe"), "runs/pi_urpe")
    metrics["valid_accuracy"]

Causal language modelling on the same core: a small Transformer-XL (:mod:`.xl`; its relative
attention in :mod:`.xl_attention`, its adaptive softmax in :mod:`.adaptive_softmax`), its corpora
(:mod:`.corpus`: Python's documentation text, WikiText-2/103) and training (:mod:`.lm`)::

    from graphormer_urpe.sequence import lm_config, train_lm

    metrics = train_lm(lm_config("cpu", corpus="pydoc", pe="urpe"), "runs/lm_urpe")
    metrics["test_bpc"]

Both train with the one loop of :mod:`.training_loop` (optimiser steps, schedule, validation
cadence, checkpoints and interruption) and write their files with :mod:`.outputs`.

The public names are imported from their modules on first use (PEP 562). The command-line
functions that lived here (``add_synthetic_parser``, ``run_synthetic``, ``add_lm_parser``,
``run_lm``) moved to :mod:`graphormer_urpe.cli.sequence`; the old names still resolve, with a
``DeprecationWarning``, until the next minor release.
"""

import importlib
import warnings
from typing import Any

from ..utils.lazy import lazy_exports, moved_modules

_lazy_getattr, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".corpus": [
            "CorpusUnavailableError",
            "LMCorpus",
            "Vocabulary",
            "load_corpus",
            "pydoc_corpus",
            "wikitext_corpus",
        ],
        ".lm": ["LM_PRESETS", "LMConfig", "evaluate_lm", "lm_config", "train_lm"],
        ".training_loop": ["linear_warmup_decay"],
        ".model": [
            "RelativePositionTable",
            "SequenceModelConfig",
            "SequenceTransformer",
            "relative_position_index",
            "t5_relative_bucket",
        ],
        ".outputs": ["plot_positional_tables"],
        ".tasks": [
            "FIRST_INPUT_TOKEN",
            "NUM_SPECIAL_TOKENS",
            "PAD_INDEX",
            "SyntheticBatch",
            "SyntheticTask",
            "TaskName",
        ],
        ".train": [
            "RUN_PRESETS",
            "SyntheticConfig",
            "evaluate",
            "masked_loss_and_hits",
            "synthetic_config",
            "train_synthetic",
        ],
        ".choices": ["CORPORA", "LM_PE_SCHEMES", "LMPEName", "PE_SCHEMES", "PEName"],
        ".xl": ["TransformerXL", "TransformerXLConfig"],
    },
)

# the old paths of renamed modules, deprecated
moved_modules(__name__, {"loop": "training_loop", "names": "choices"})

_MOVED_TO_CLI = frozenset({"add_lm_parser", "add_synthetic_parser", "run_lm", "run_synthetic"})
"""Names that moved to :mod:`graphormer_urpe.cli.sequence` (library code parses no argv)."""


def __getattr__(name: str) -> Any:
    if name in _MOVED_TO_CLI:
        warnings.warn(
            f"graphormer_urpe.sequence.{name} moved to graphormer_urpe.cli.sequence.{name}; "
            "the old name goes in the next minor release",
            DeprecationWarning,
            stacklevel=2,
        )
        # resolved by name at run time: the sequence layer itself never imports the CLI
        return getattr(importlib.import_module("graphormer_urpe.cli.sequence"), name)
    return _lazy_getattr(name)
