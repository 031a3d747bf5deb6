r"""Training a small Transformer-XL language model with none / APE / RPE / URPE / XL / XL-URPE
positions.

Transformer-XL's recipe (Dai et al., 2019): the training stream is cut into ``batch_size``
contiguous columns read ``tgt_len`` tokens at a time, with the memory of the previous
segment carried from one update to the next (reset at the start of every pass over the
data); Adam, gradient-norm clipping, and a learning rate that follows a (linear warm-up
then) cosine decay to 0. The loss is the mean next-token cross-entropy in nats,

.. math::
    \mathcal{L} = -\frac{1}{BN} \sum_{b, i} \log p_\theta(x_{b, i+1} \mid x_{b, \le i},
    \text{memory}).

Validation and test streams are read the same way (``eval_batch_size`` columns, segments of
``tgt_len``, memory carried; the last partial segment included; the remainder of the
stream that does not fill all columns is dropped) and reported as bits per character
(:math:`\mathcal{L} / \ln 2`, character corpora) or perplexity (:math:`e^{\mathcal{L}}`,
word corpora). The test split is scored once, with the weights of the best validation
evaluation.

:func:`train_lm` writes into its output folder: ``config.json``, ``curve.csv`` (one row per
update; validation columns at evaluations), ``metrics.json``, ``pe_tables.png`` (RPE /
URPE), ``best.pt`` (weights of the best validation evaluation) and rolling resumable
checkpoints (``last.pt`` and ``checkpoints/step-*.pt``: model, optimizer, schedule, RNG
states, the carried memory and the curve so far), all written atomically.
"""

from __future__ import annotations

import copy
import json
import logging
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from ..io.checkpoint import (
    CheckpointKeeper,
    incompatible_checkpoint,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
    write_atomic,
)
from .choices import check_choice
from .corpus import CORPORA, LMCorpus, load_corpus
from .outputs import write_run_files
from .training_loop import Checkpoints, Curve, TrainingLoop, adamw, cosine_warmup
from .xl import TransformerXL, TransformerXLConfig

__all__ = [
    "LMConfig",
    "LM_PRESETS",
    "lm_config",
    "batchify",
    "cosine_warmup",
    "evaluate_lm",
    "train_lm",
]

logger = logging.getLogger(__name__)

LM_CURVE_COLUMNS = ("step", "lr", "train_loss", "valid_loss", "elapsed_s")
_CURVE = Curve(LM_CURVE_COLUMNS, bar_metric=("valid", "valid_loss"))


@dataclass
class LMConfig:
    """Configuration of one language-modelling run.

    Attributes:
        corpus: ``"pydoc" | "wikitext-2" | "wikitext-103"``.
        data_root: where WikiText is (or is downloaded to).
        corpus_seed: seed of the ``pydoc`` topic split.
        model: the :class:`~graphormer_urpe.sequence.xl.TransformerXLConfig`
            (``vocab_size`` 0 is filled in from the corpus).
        steps: number of updates.
        batch_size: parallel training columns ``B``.
        lr: peak learning rate.
        warmup_steps: linear warm-up updates.
        schedule: ``"cosine"`` (Transformer-XL) or ``"linear"`` decay to 0 after warm-up.
        clip_norm: gradient-norm clipping (Transformer-XL: 0.25), ``None`` for none.
        weight_decay: decoupled weight decay.
        eval_every: evaluate on the validation split every this many updates (and at the end).
        eval_batch_size: parallel columns when scoring valid / test.
        max_eval_tokens: score only the first this many tokens of valid during training
            (``None``: all of it); the final validation and test scores use whole splits.
        checkpoint_every: write a resumable checkpoint every this many updates (and at the
            end); 0 for only the end.
        keep_checkpoints: step checkpoints kept.
        seed: seed of the initialisation and dropout.
    """

    corpus: str = "pydoc"
    data_root: str = "data"
    corpus_seed: int = 0
    model: TransformerXLConfig = field(default_factory=TransformerXLConfig)
    steps: int = 1000
    batch_size: int = 16
    lr: float = 2e-3
    warmup_steps: int = 50
    schedule: Literal["cosine", "linear"] = "cosine"
    clip_norm: float | None = 0.25
    weight_decay: float = 0.0
    eval_every: int = 200
    eval_batch_size: int = 16
    max_eval_tokens: int | None = None
    checkpoint_every: int = 500
    keep_checkpoints: int = 2
    seed: int = 1

    def __post_init__(self) -> None:
        check_choice("corpus", self.corpus, CORPORA)
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(
                f"warmup_steps must be in [0, steps) = [0, {self.steps}), got {self.warmup_steps}"
            )
        if self.schedule not in ("cosine", "linear"):
            raise ValueError(f"unknown schedule {self.schedule!r}; expected cosine or linear")
        if min(self.batch_size, self.eval_batch_size, self.eval_every) < 1:
            raise ValueError("batch_size, eval_batch_size and eval_every must be >= 1")
        if self.checkpoint_every < 0:
            raise ValueError(f"checkpoint_every must be >= 0, got {self.checkpoint_every}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LMConfig:
        """Inverse of :meth:`to_dict`."""
        data = dict(data)
        model = TransformerXLConfig(**data.pop("model"))
        return cls(model=model, **data)


# The cpu set-up by what each field is about.
_CPU: dict[str, Any] = (
    dict(pe="urpe", width=128, layers=3, heads=4, ffn=512, init_std=0.02)  # the model
    | dict(tgt_len=64, mem_len=64, dropout=0.1)  # segments, memory, dropout
    | dict(steps=1000, batch_size=16, lr=2e-3, warmup_steps=50, clip_norm=0.25)  # updates
    | dict(eval_every=200, eval_batch_size=16)  # validation
)

#: Named run set-ups: run fields and model fields together.
LM_PRESETS: dict[str, dict[str, Any]] = {
    # Minutes per run on one CPU thread on the embedded corpus (docs/results/code-notes.md).
    "cpu": _CPU,
    # The cpu model at half width and two layers, trained 10x longer: the reproduction's
    # set-up, long enough for the validation curves to flatten (docs/results/code-notes.md).
    "cpu-small": (
        _CPU
        | dict(width=64, layers=2, ffn=256)
        | dict(steps=10_000, warmup_steps=500, eval_every=500, checkpoint_every=1_000)
    ),
    # Transformer-XL base on WikiText-103 (Dai et al. 2019; run_wt103_base.sh): 16 layers,
    # d 410, 10 heads of 41, d_inner 2100, tgt_len = mem_len = 150, dropout 0.1, Adam at
    # 2.5e-4 with cosine decay and no warm-up, clip 0.25, 200k updates of 60 columns; its
    # relative attention and tied adaptive softmax (cutoffs 20k / 40k / 200k, div_val 1).
    "paper": (
        dict(pe="xl", width=410, layers=16, heads=10, ffn=2100, init_std=0.02)
        | dict(adaptive_cutoffs=[20_000, 40_000, 200_000])
        | dict(tgt_len=150, mem_len=150, dropout=0.1, attention_dropout=0.0)
        | dict(steps=200_000, batch_size=60, lr=2.5e-4, warmup_steps=0, clip_norm=0.25)
        | dict(eval_every=4_000, eval_batch_size=10, checkpoint_every=4_000)
    ),
}


def lm_config(
    preset: str = "cpu", corpus: str = "pydoc", pe: str | None = None, **overrides: Any
) -> LMConfig:
    """A named run configuration with optional overrides.

    * ``"cpu"``: 3 post-LN layers of width 128 (4 heads, ffn 512), segments of 64 tokens with
      64 memory states, 1,000 updates of 16 columns at peak lr ``2e-3`` (50 warm-up, cosine
      decay), dropout 0.1, URPE: sized for one CPU thread on the embedded corpus (its time:
      docs/results/code-notes.md).
    * ``"cpu-small"``: 2 layers of width 64 (4 heads, ffn 256), the same segments, 10,000
      updates (500 warm-up, validation every 500): the set-up of ``scripts/reproduce_lm.py``.
    * ``"paper"``: Transformer-XL base for WikiText-103 (16 layers, d 410, 10 heads of 41,
      d_inner 2100, tgt_len = mem_len = 150, dropout 0.1, lr ``2.5e-4`` cosine, 200k updates
      of 60 columns, clip 0.25) with its relative attention (``xl``) and tied adaptive
      softmax (cutoffs 20000 / 40000 / 200000); for GPUs.

    Args:
        preset: ``"cpu"``, ``"cpu-small"`` or ``"paper"``.
        corpus: ``"pydoc" | "wikitext-2" | "wikitext-103"``.
        pe: ``"none" | "ape" | "rpe" | "urpe" | "xl" | "xl-urpe"``; ``None``: the preset's
            (``urpe`` for ``cpu`` / ``cpu-small``, ``xl`` for ``paper``).
        **overrides: fields of :class:`LMConfig` or of
            :class:`~graphormer_urpe.sequence.xl.TransformerXLConfig`; ``None`` values are
            ignored. Overriding ``steps`` alone keeps the preset's warm-up fraction.
    """
    check_choice("preset", preset, sorted(LM_PRESETS))
    overrides = {k: v for k, v in overrides.items() if v is not None}
    model_fields = {f.name for f in fields(TransformerXLConfig)}
    run_fields = {f.name for f in fields(LMConfig)} - {"model"}
    unknown = set(overrides) - model_fields - run_fields
    if unknown:
        raise ValueError(f"unknown configuration fields: {sorted(unknown)}")
    base = dict(LM_PRESETS[preset])
    merged = {**base, **overrides}
    if "steps" in overrides and "warmup_steps" not in overrides:
        merged["warmup_steps"] = int(round(base["warmup_steps"] / base["steps"] * merged["steps"]))
    if pe is not None:
        merged["pe"] = pe
    model = TransformerXLConfig(**{k: v for k, v in merged.items() if k in model_fields})
    run = {k: v for k, v in merged.items() if k in run_fields}
    return LMConfig(corpus=corpus, model=model, **run)


def batchify(stream: Tensor, columns: int) -> Tensor:
    """Cut a ``[T]`` stream into ``columns`` contiguous rows ``[columns, T // columns]``
    (the last ``T mod columns`` tokens are dropped)."""
    width = stream.numel() // columns
    if width < 2:
        raise ValueError(f"a stream of {stream.numel()} tokens is too short for {columns} columns")
    return stream[: width * columns].view(columns, width)


def _segments(length: int, tgt_len: int, partial: bool) -> list[tuple[int, int]]:
    """``(start, n)`` of the segments of a row of ``length`` tokens (``n`` inputs, each with the
    next token as target)."""
    out = []
    start = 0
    while start + 1 < length:
        n = min(tgt_len, length - 1 - start)
        if n < tgt_len and not partial:
            break
        out.append((start, n))
        start += n
    return out


@torch.no_grad()
def evaluate_lm(
    model: TransformerXL,
    stream: Tensor,
    batch_size: int = 16,
    max_tokens: int | None = None,
) -> tuple[float, int]:
    """Mean next-token cross-entropy (nats) over a ``[T]`` stream, read as ``batch_size``
    columns in segments of ``tgt_len`` with the memory carried between segments.

    Returns:
        ``(loss per scored token, number of scored tokens)``.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    if max_tokens is not None:
        stream = stream[: max_tokens + 1]
    columns = max(1, min(batch_size, stream.numel() // 2))
    data = batchify(stream, columns).to(device)
    memory = None
    total, count = 0.0, 0
    for start, n in _segments(data.shape[1], model.config.tgt_len, partial=True):
        x = data[:, start : start + n]
        y = data[:, start + 1 : start + n + 1]
        logits, memory = model(x, memory)
        total += float(
            F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1), reduction="sum"
            )
        )
        count += y.numel()
    model.train(was_training)
    return total / max(1, count), count


def _score(loss: float, level: str) -> tuple[str, float]:
    if level == "char":
        return "bpc", loss / math.log(2)
    return "ppl", math.exp(min(loss, 700.0))


def train_lm(
    config: LMConfig,
    out_dir: str | Path | None = None,
    *,
    corpus: LMCorpus | None = None,
    resume: bool = False,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> dict[str, Any]:
    """Train a :class:`~graphormer_urpe.sequence.xl.TransformerXL` language model.

    Args:
        config: the run configuration.
        out_dir: the run folder (``None``: write nothing, no checkpoints).
        corpus: an already loaded corpus (default: :func:`load_corpus` of ``config.corpus``).
        resume: continue from the newest checkpoint in ``out_dir`` when there is one (its
            configuration is used; ``steps`` may be raised on the command line).
        device: torch device.
        progress: tqdm progress bar.

    Returns:
        Metrics: ``valid_loss`` / ``test_loss`` (nats per token, test at the best validation
        evaluation), ``valid_bpc`` / ``test_bpc`` (character corpora) or ``valid_ppl`` /
        ``test_ppl`` (word corpora), ``best_step``, ``initial_valid_loss``, ``steps``,
        ``wall_time_s`` (this process's training time, evaluation included),
        ``num_parameters``, corpus sizes, ``config``, ``evals`` and ``files``.
    """
    device = torch.device(device)
    out = None if out_dir is None else Path(out_dir)
    keeper = None if out is None else CheckpointKeeper(out, config.keep_checkpoints)
    config, found = _resumed_config(config, keeper if resume else None)
    if corpus is None:
        corpus = load_corpus(config.corpus, config.data_root, seed=config.corpus_seed)
    config = _with_vocab(config, len(corpus.vocab))

    torch.manual_seed(config.seed)
    model = TransformerXL(config.model).to(device)
    optimizer, scheduler = adamw(
        model, config.lr, config.weight_decay, (config.schedule, config.warmup_steps, config.steps)
    )
    stream = _TrainStream(model, batchify(corpus.train, config.batch_size).to(device))
    if not stream.segments:
        raise ValueError(
            f"the training split ({corpus.train.numel()} tokens) is too short for "
            f"{config.batch_size} columns of tgt_len {config.model.tgt_len}"
        )
    name = f"lm/{config.model.pe}"
    loop = TrainingLoop(model, optimizer, scheduler, config, name, logger, _CURVE, progress)
    validation = _Validation(model, corpus.valid, config, out)
    loop.checkpoints = Checkpoints(
        keeper, config.checkpoint_every, lambda: _checkpoint_state(loop, stream, validation, device)
    )
    if found is not None:
        _restore(found, loop, stream, validation, device)
    logger.info(
        "lm %s / %s: %d parameters, %d updates of %d x %d tokens (memory %d), %s",
        config.corpus,
        config.model.pe,
        loop.num_parameters,
        config.steps,
        config.batch_size,
        config.model.tgt_len,
        config.model.mem_len,
        corpus.summary(),
    )
    if out is not None:
        write_atomic(out / "config.json", json.dumps(config.to_dict(), indent=2) + "\n")
    if validation.initial is None:
        validation.initial = validation.loss()
    wall = loop.run(stream.loss, validation)

    if validation.best_state is not None:
        model.load_state_dict(validation.best_state)
    metrics = _final_metrics(model, corpus, config, loop, validation, loop.facts(wall, device))
    if out is not None:
        files = ["config.json", "metrics.json", "curve.csv", "best.pt", "last.pt"]
        title = f"{config.corpus} / {config.model.pe.upper()}"
        write_run_files(out, loop, metrics, title, files)
    return metrics


def _resumed_config(
    config: LMConfig, keeper: CheckpointKeeper | None
) -> tuple[LMConfig, tuple[Path, dict[str, Any]] | None]:
    """The configuration to run and the newest checkpoint of ``keeper`` (``None``: start
    afresh). A resumed run takes the checkpoint's configuration with ``config.steps``."""
    found = None if keeper is None else keeper.latest()
    if keeper is not None and found is None:
        logger.info("nothing to resume in %s: starting afresh", keeper.out)
    if found is None:
        return config, None
    path, ckpt = found
    with incompatible_checkpoint(path):
        saved = LMConfig.from_dict(ckpt["config"])
    if config.steps != saved.steps:
        logger.info("resuming with steps %d (checkpoint: %d)", config.steps, saved.steps)
        saved.steps = config.steps
    logger.info("resuming from %s at update %d", path, int(ckpt["step"]))
    return saved, found


def _with_vocab(config: LMConfig, vocab_size: int) -> LMConfig:
    """``config`` with the model's ``vocab_size`` filled in from the corpus (0) or checked."""
    if config.model.vocab_size == 0:
        config = copy.deepcopy(config)
        config.model.vocab_size = vocab_size
    elif config.model.vocab_size != vocab_size:
        raise ValueError(
            f"model vocab_size {config.model.vocab_size} != corpus vocabulary {vocab_size}"
        )
    return config


class _TrainStream:
    """The training columns ``[B, T]`` read in segments of ``tgt_len``, one per update, with
    the memory carried from one update to the next (reset at every pass over the data)."""

    def __init__(self, model: TransformerXL, data: Tensor) -> None:
        self.model = model
        self.data = data
        self.segments = _segments(data.shape[1], model.config.tgt_len, partial=False)
        self.memory: list[Tensor] | None = None

    def loss(self, step: int) -> tuple[Tensor, dict[str, Any]]:
        """Mean next-token cross-entropy of update ``step`` (0-based); no extra columns."""
        seg = step % len(self.segments)
        if seg == 0:
            self.memory = None  # a new pass over the data
        s0, n = self.segments[seg]
        x = self.data[:, s0 : s0 + n]
        y = self.data[:, s0 + 1 : s0 + n + 1]
        logits, self.memory = self.model(x, self.memory)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        return loss, {}


class _Validation:
    """Validation during training: the loss on (the first ``max_eval_tokens`` of) the
    validation split, the initial one, and the best one with its weights (saved as
    ``best.pt`` in the run folder)."""

    def __init__(self, model: TransformerXL, valid: Tensor, config: LMConfig, out: Path | None):
        self.model, self.valid, self.config, self.out = model, valid, config, out
        self.initial: float | None = None
        self.best_loss, self.best_step = math.inf, 0
        self.best_state: dict[str, Tensor] | None = None

    def loss(self) -> float:
        """The validation loss of the model now."""
        cfg = self.config
        return evaluate_lm(self.model, self.valid, cfg.eval_batch_size, cfg.max_eval_tokens)[0]

    def __call__(self, step: int) -> dict[str, float]:
        """The validation metrics after update ``step``, keeping the best weights."""
        v_loss = self.loss()
        if v_loss < self.best_loss:
            self.best_loss, self.best_step = v_loss, step
            self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            if self.out is not None:
                config = json.dumps(self.config.to_dict())
                best = {"config": config, "model": self.best_state, "step": step}
                save_checkpoint(self.out / "best.pt", best)
        return {"valid_loss": v_loss}


def _checkpoint_state(
    loop: TrainingLoop, stream: _TrainStream, validation: _Validation, device: torch.device
) -> dict[str, Any]:
    """A resumable checkpoint: configuration, training state, memory, curve and RNG."""
    history = {
        "rows": loop.rows,
        "evals": loop.evals,
        "initial": validation.initial,
        "best_loss": validation.best_loss,
        "best_step": validation.best_step,
    }
    memory = stream.memory
    return {
        "config": json.dumps(validation.config.to_dict()),
        **loop.training_state(),
        "memory": [] if memory is None else [t.cpu() for t in memory],
        "history": json.dumps(history),
        "rng": rng_state(device),
    }


def _restore(
    found: tuple[Path, dict[str, Any]],
    loop: TrainingLoop,
    stream: _TrainStream,
    validation: _Validation,
    device: torch.device,
) -> None:
    """Inverse of :func:`_checkpoint_state`, and the best weights from ``best.pt``."""
    path, ckpt = found
    with incompatible_checkpoint(path):
        loop.load_training_state(ckpt)
        stream.memory = [t.to(device) for t in ckpt["memory"]] or None
        history = json.loads(ckpt["history"])
        loop.rows, loop.evals = history["rows"], history["evals"]
        validation.initial = history["initial"]
        validation.best_loss, validation.best_step = history["best_loss"], history["best_step"]
        set_rng_state(ckpt["rng"], device)
    out = validation.out
    if out is not None and (out / "best.pt").is_file():
        validation.best_state = load_checkpoint(out / "best.pt", map_location=device)["model"]


def _final_metrics(
    model: TransformerXL,
    corpus: LMCorpus,
    config: LMConfig,
    loop: TrainingLoop,
    validation: _Validation,
    facts: dict[str, Any],
) -> dict[str, Any]:
    """The metrics of a finished run: whole valid and test splits scored with ``model`` (the
    best weights), ``files`` still empty; ``facts`` are the loop's."""
    valid_loss, valid_tokens = evaluate_lm(model, corpus.valid, config.eval_batch_size)
    test_loss, test_tokens = evaluate_lm(model, corpus.test, config.eval_batch_size)
    initial_valid = validation.initial
    assert initial_valid is not None
    unit, valid_score = _score(valid_loss, corpus.level)
    _, test_score = _score(test_loss, corpus.level)
    _, initial_score = _score(initial_valid, corpus.level)
    rows = loop.rows
    return {
        "corpus": config.corpus,
        "level": corpus.level,
        "pe": config.model.pe,
        f"valid_{unit}": round(valid_score, 5),
        f"test_{unit}": round(test_score, 5),
        "valid_loss": round(valid_loss, 6),
        "test_loss": round(test_loss, 6),
        f"initial_valid_{unit}": round(initial_score, 5),
        "initial_valid_loss": round(initial_valid, 6),
        "best_step": validation.best_step,
        "final_train_loss": rows[-1]["train_loss"] if rows else None,
        "steps": config.steps,
        "valid_tokens": valid_tokens,
        "test_tokens": test_tokens,
        **facts,
        **{k: v for k, v in corpus.summary().items() if k not in ("corpus", "level")},
        "config": config.to_dict(),
        "evals": loop.evals,
        "files": [],
    }
