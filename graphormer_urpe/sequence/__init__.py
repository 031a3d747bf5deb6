"""The paper's synthetic sequence tasks on the URPE attention core.

Position Identification / Even Token Prediction data (:mod:`.tasks`), a RoBERTa-style
sequence transformer with no PE, learned absolute PE, RPE or URPE (:mod:`.model`), its
training (:mod:`.train`) and the ``synthetic`` command-line sub-command (:mod:`.cli`)::

    from graphormer_urpe.sequence import synthetic_config, train_synthetic

    metrics = train_synthetic(synthetic_config("cpu", task="pi", pe="urpe"), "runs/pi_urpe")
    metrics["valid_accuracy"]

Causal language modelling on the same core: a small Transformer-XL (:mod:`.xl`; its relative
attention in :mod:`.xl_attention`, its adaptive softmax in :mod:`.adaptive_softmax`), its corpora
(:mod:`.corpus`: Python's documentation text, WikiText-2/103) and training (:mod:`.lm`,
the ``lm`` sub-command)::

    from graphormer_urpe.sequence import lm_config, train_lm

    metrics = train_lm(lm_config("cpu", corpus="pydoc", pe="urpe"), "runs/lm_urpe")
    metrics["test_bpc"]

Both train with the one loop of :mod:`.loop` (optimiser steps, schedule, validation cadence,
checkpoints and interruption) and write their files with :mod:`.outputs`.

The public names are imported from their modules on first use (PEP 562).
"""

from .._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".cli": ["add_lm_parser", "add_synthetic_parser", "run_lm", "run_synthetic"],
        ".corpus": [
            "CorpusUnavailableError",
            "LMCorpus",
            "Vocabulary",
            "load_corpus",
            "pydoc_corpus",
            "wikitext_corpus",
        ],
        ".lm": ["LM_PRESETS", "LMConfig", "evaluate_lm", "lm_config", "train_lm"],
        ".loop": ["linear_warmup_decay"],
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
        ".names": ["CORPORA", "LM_PE_SCHEMES", "LMPEName", "PE_SCHEMES", "PEName"],
        ".xl": ["TransformerXL", "TransformerXLConfig"],
    },
)
