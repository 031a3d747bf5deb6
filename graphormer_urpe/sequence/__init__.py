"""The paper's synthetic sequence tasks on the URPE attention core.

Position Identification / Even Token Prediction data (:mod:`.tasks`), a RoBERTa-style
sequence transformer with no PE, learned absolute PE, RPE or URPE (:mod:`.model`), its
training loop (:mod:`.train`) and the ``synthetic`` command-line sub-command (:mod:`.cli`)::

    from graphormer_urpe.sequence import synthetic_config, train_synthetic

    metrics = train_synthetic(synthetic_config("cpu", task="pi", pe="urpe"), "runs/pi_urpe")
    metrics["valid_accuracy"]

Causal language modelling on the same core: a small Transformer-XL (:mod:`.xl`; its relative
attention in :mod:`.xl_attention`, its adaptive softmax in :mod:`.adaptive_softmax`), its corpora
(:mod:`.corpus`: Python's documentation text, WikiText-2/103) and training loop (:mod:`.lm`,
the ``lm`` sub-command)::

    from graphormer_urpe.sequence import lm_config, train_lm

    metrics = train_lm(lm_config("cpu", corpus="pydoc", pe="urpe"), "runs/lm_urpe")
    metrics["test_bpc"]
"""

from .cli import add_lm_parser, add_synthetic_parser, run_lm, run_synthetic
from .corpus import (
    CORPORA,
    CorpusUnavailableError,
    LMCorpus,
    Vocabulary,
    load_corpus,
    pydoc_corpus,
    wikitext_corpus,
)
from .lm import LM_PRESETS, LMConfig, evaluate_lm, lm_config, train_lm
from .model import (
    PE_SCHEMES,
    PEName,
    RelativePositionTable,
    SequenceModelConfig,
    SequenceTransformer,
    relative_position_index,
    t5_relative_bucket,
)
from .tasks import (
    FIRST_INPUT_TOKEN,
    NUM_SPECIAL_TOKENS,
    PAD_INDEX,
    SyntheticBatch,
    SyntheticTask,
    TaskName,
)
from .train import (
    RUN_PRESETS,
    SyntheticConfig,
    evaluate,
    linear_warmup_decay,
    masked_loss_and_hits,
    plot_positional_tables,
    synthetic_config,
    train_synthetic,
)
from .xl import LM_PE_SCHEMES, LMPEName, TransformerXL, TransformerXLConfig

__all__ = [
    "CORPORA",
    "CorpusUnavailableError",
    "LMConfig",
    "LMCorpus",
    "LM_PRESETS",
    "LM_PE_SCHEMES",
    "LMPEName",
    "TransformerXL",
    "TransformerXLConfig",
    "Vocabulary",
    "add_lm_parser",
    "evaluate_lm",
    "lm_config",
    "load_corpus",
    "pydoc_corpus",
    "run_lm",
    "train_lm",
    "wikitext_corpus",
    "FIRST_INPUT_TOKEN",
    "NUM_SPECIAL_TOKENS",
    "PAD_INDEX",
    "PE_SCHEMES",
    "PEName",
    "RUN_PRESETS",
    "RelativePositionTable",
    "SequenceModelConfig",
    "SequenceTransformer",
    "SyntheticBatch",
    "SyntheticConfig",
    "SyntheticTask",
    "TaskName",
    "add_synthetic_parser",
    "evaluate",
    "linear_warmup_decay",
    "masked_loss_and_hits",
    "plot_positional_tables",
    "relative_position_index",
    "run_synthetic",
    "synthetic_config",
    "t5_relative_bucket",
    "train_synthetic",
]
