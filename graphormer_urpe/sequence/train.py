r"""Training on the synthetic sequence tasks (Position Identification, Even Token Prediction).

Reference recipe (spec §5.3): Adam (:math:`\beta = (0.9, 0.999)`, :math:`\epsilon = 10^{-8}`,
no weight decay, no clipping), a linear warm-up from 0 to the peak learning rate followed by
a linear decay to 0 at the last update, and the loss

.. math::
    \mathcal{L} = \frac{1}{|S|} \sum_{(b, i) \in S} -\log p_\theta(y_{b,i} \mid x_b)

summed over the scored positions :math:`S` of the batch and divided by their number (logits
over the full ``V + 11`` dictionary). Accuracy is the fraction of scored positions whose
argmax is the target, measured on a fixed, seeded validation set. The loop itself is
:class:`~graphormer_urpe.sequence.training_loop.TrainingLoop`.

:func:`train_synthetic` returns the metrics and, given an output directory, writes
``metrics.json``, ``curve.csv`` (one row per update; validation columns filled at evaluation
steps) and ``pe_tables.png`` (the learned ``B`` and ``C`` per head against the offset
``j - i``; RPE / URPE only), each atomically.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .choices import check_choice
from .model import SequenceModelConfig, SequenceTransformer
from .outputs import plot_positional_tables, write_run_files
from .outputs import png_bytes as png_bytes  # re-exported from its earlier home
from .tasks import SyntheticBatch, SyntheticTask, TaskName
from .training_loop import Curve, TrainingLoop, adamw, linear_warmup_decay
from .training_loop import optimizer_update as optimizer_update  # re-exported from its earlier home

__all__ = [
    "SyntheticConfig",
    "synthetic_config",
    "RUN_PRESETS",
    "linear_warmup_decay",
    "masked_loss_and_hits",
    "evaluate",
    "train_synthetic",
    "plot_positional_tables",
]

logger = logging.getLogger(__name__)

CURVE_COLUMNS = (
    "step",
    "lr",
    "train_loss",
    "train_accuracy",
    "valid_loss",
    "valid_accuracy",
    "elapsed_s",
)
_CURVE = Curve(CURVE_COLUMNS, bar_metric=("valid_acc", "valid_accuracy"))


@dataclass
class SyntheticConfig:
    """Configuration of one synthetic-task training run.

    Attributes:
        task: ``"pi"`` (Position Identification) or ``"etp"`` (Even Token Prediction).
        model: the model configuration; its ``vocab`` and ``max_len`` also define the task
            (vocabulary ``V`` and sequence length ``L``).
        steps: number of updates.
        batch_size: sequences per update.
        lr: peak learning rate.
        warmup_steps: linear warm-up updates from 0 to ``lr``; then linear decay to 0.
        weight_decay: decoupled (AdamW-style) weight decay; 0 in the reference.
        adam_betas: Adam betas.
        adam_eps: Adam epsilon.
        clip_norm: gradient-norm clipping, ``None`` for none (reference).
        valid_size: sequences in the fixed validation set.
        valid_seed: seed of the validation set (independent of ``seed`` so that runs with
            different seeds are scored on the same sequences).
        eval_every: evaluate every this many updates (and after the last one).
        eval_batch_size: sequences per evaluation forward pass.
        seed: seed of the model initialisation and of the online training stream.
    """

    task: TaskName = "pi"
    model: SequenceModelConfig = field(default_factory=SequenceModelConfig)
    steps: int = 2000
    batch_size: int = 32
    lr: float = 2e-3
    warmup_steps: int = 200
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    clip_norm: float | None = None
    valid_size: int = 256
    valid_seed: int = 12345
    eval_every: int = 100
    eval_batch_size: int = 128
    seed: int = 1

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(
                f"warmup_steps must be in [0, steps) = [0, {self.steps}), got {self.warmup_steps}"
            )
        if self.batch_size < 1 or self.valid_size < 1 or self.eval_every < 1:
            raise ValueError("batch_size, valid_size and eval_every must be >= 1")
        self.make_task()  # validates task name, vocabulary and length

    def make_task(self) -> SyntheticTask:
        """The :class:`SyntheticTask` this run trains on."""
        return SyntheticTask(self.task, vocab=self.model.vocab, length=self.model.max_len)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return asdict(self)


# Shared by both tasks of a preset: sequences per update and in the validation set.
_CPU = dict(batch_size=32, valid_size=256)
_PAPER = dict(batch_size=128, valid_size=6_400)

#: Run settings of the presets, per task. ``max_len`` is the task length ``L``.
RUN_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {
        "pi": dict(_CPU, max_len=128, steps=2000, lr=2e-3, warmup_steps=200, eval_every=100),
        "etp": dict(_CPU, max_len=16, steps=8000, lr=1e-3, warmup_steps=800, eval_every=250),
    },
    "paper": {
        task: dict(_PAPER, max_len=128, steps=40_000, lr=7e-5, warmup_steps=6_000, eval_every=1_000)
        for task in ("pi", "etp")
    },
}


def synthetic_config(
    preset: str = "cpu", task: TaskName = "pi", pe: str = "urpe", **overrides: Any
) -> SyntheticConfig:
    """A named run configuration with optional overrides.

    * ``"paper"``: the reference set-up (spec §5.2/5.3): 3 layers, width 768, 12 heads,
      ffn 3072, ``L = 128``, batch 128, peak lr ``7e-5``, 6,000 warm-up of 40,000 updates,
      6,400 validation sequences.
    * ``"cpu"``: 2 post-LN layers, width 64, 4 heads, ffn 256, batch 32, 10% warm-up, 256
      validation sequences, sized for two CPU cores (a few minutes per run). PI keeps the
      paper's ``L = 128`` (2,000 updates at peak lr ``2e-3``); ETP uses ``L = 16`` (8,000
      updates at ``1e-3``) because at this model size URPE needs far more updates to learn
      the ``i -> 2i+1`` copy at longer lengths (see ``docs/synthetic.md``).

    In both presets the output projection is tied to the token embedding for ETP and
    untied for PI, as in the paper's scripts.

    Args:
        preset: ``"cpu"`` or ``"paper"``.
        task: ``"pi"`` or ``"etp"``.
        pe: ``"none" | "ape" | "rpe" | "urpe"``.
        **overrides: fields of :class:`SyntheticConfig`, or of :class:`SequenceModelConfig`
            (``width``, ``layers``, ``heads``, ``ffn``, ``vocab``, ``max_len``,
            ``rel_buckets``, ``share_scale``, ``tie_weights``, ``init_std``, dropouts).
            ``None`` values are ignored, so unset command-line flags can be passed through.
            When ``steps`` is overridden but ``warmup_steps`` is not, the warm-up keeps the
            preset's fraction of the updates.

    Returns:
        The :class:`SyntheticConfig`.
    """
    check_choice("preset", preset, sorted(RUN_PRESETS))
    if task not in RUN_PRESETS[preset]:
        raise ValueError(f"unknown synthetic task {task!r}; expected 'pi' or 'etp'")
    overrides = {k: v for k, v in overrides.items() if v is not None}
    model_fields = set(SequenceModelConfig.__dataclass_fields__)
    unknown = set(overrides) - model_fields - set(SyntheticConfig.__dataclass_fields__)
    if unknown:
        raise ValueError(f"unknown configuration fields: {sorted(unknown)}")
    base = dict(RUN_PRESETS[preset][task])
    base_steps, base_warmup = base["steps"], base["warmup_steps"]
    merged = {**base, **overrides}
    if "steps" in overrides and "warmup_steps" not in overrides:
        merged["warmup_steps"] = int(round(base_warmup / base_steps * merged["steps"]))
    model_over = {k: v for k, v in merged.items() if k in model_fields}
    run_over = {k: v for k, v in merged.items() if k not in model_fields}
    model_over.setdefault("tie_weights", task == "etp")
    model = SequenceModelConfig.preset(preset, pe=pe, **model_over)
    return SyntheticConfig(task=task, model=model, **run_over)


def masked_loss_and_hits(logits: Tensor, batch: SyntheticBatch) -> tuple[Tensor, Tensor, int]:
    """Summed cross-entropy and argmax hits over the scored positions.

    Args:
        logits: ``[B, L, V + 11]``.
        batch: targets and mask ``[B, L]``.

    Returns:
        ``(loss_sum [] float, hits [] long, n_scored)``.
    """
    n_vocab = logits.shape[-1]
    targets = batch.targets.masked_fill(~batch.mask, -100).reshape(-1)  # [B * L]
    flat = logits.reshape(-1, n_vocab)  # [B * L, V + 11]
    loss_sum = F.cross_entropy(flat.float(), targets, ignore_index=-100, reduction="sum")
    hits = flat.detach().argmax(dim=-1).eq(targets).sum()  # -100 never matches
    return loss_sum, hits, int(batch.mask.sum())


@torch.no_grad()
def evaluate(
    model: SequenceTransformer, data: SyntheticBatch, batch_size: int = 128
) -> tuple[float, float]:
    """Mean loss and token accuracy over the scored positions of ``data``.

    Returns:
        ``(loss per scored token, accuracy in [0, 1])``.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    loss_total, hits_total, n_total = 0.0, 0, 0
    for start in range(0, len(data), batch_size):
        chunk = data.slice(start, start + batch_size).to(device)
        loss_sum, hits, n = masked_loss_and_hits(model(chunk.tokens), chunk)
        loss_total += float(loss_sum)
        hits_total += int(hits)
        n_total += n
    model.train(was_training)
    return loss_total / max(1, n_total), hits_total / max(1, n_total)


def train_synthetic(
    config: SyntheticConfig,
    out_dir: str | Path | None = None,
    *,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> dict[str, Any]:
    """Train a :class:`SequenceTransformer` on PI or ETP and report validation accuracy.

    Args:
        config: the run configuration.
        out_dir: where to write ``metrics.json``, ``curve.csv`` and ``pe_tables.png``;
            ``None`` writes nothing.
        device: torch device.
        progress: show a tqdm progress bar.

    Returns:
        Metrics: ``valid_accuracy`` / ``valid_loss`` (after the last update),
        ``best_valid_accuracy``, ``steps_to_99`` (first evaluation step with accuracy >= 0.99,
        or ``None``), ``position_blind_accuracy`` (the best a model without position
        information can expect), ``steps``, ``wall_time_s``, ``num_parameters``, ``config``,
        ``evals`` (the evaluation rows) and ``files``.
    """
    task = config.make_task()
    device = torch.device(device)
    torch.manual_seed(config.seed)
    model = SequenceTransformer(config.model).to(device)
    train_gen = torch.Generator().manual_seed(config.seed)
    valid = task.validation_set(config.valid_size, config.valid_seed)
    optimizer, scheduler = adamw(
        model,
        config.lr,
        config.weight_decay,
        ("linear", config.warmup_steps, config.steps),
        betas=config.adam_betas,
        eps=config.adam_eps,
    )
    name = f"{config.task}/{config.model.pe}"
    loop = TrainingLoop(model, optimizer, scheduler, config, name, logger, _CURVE, progress)
    logger.info(
        "synthetic %s / %s: %d parameters, %d updates of %d sequences (L=%d, V=%d)",
        config.task,
        config.model.pe,
        loop.num_parameters,
        config.steps,
        config.batch_size,
        task.length,
        task.vocab,
    )

    def train_loss(step: int) -> tuple[Tensor, dict[str, Any]]:
        batch = task.sample(config.batch_size, train_gen).to(device)
        loss_sum, hits, n = masked_loss_and_hits(model(batch.tokens), batch)
        return loss_sum / n, {"train_accuracy": round(int(hits) / n, 6)}

    def validate(step: int) -> dict[str, float]:
        v_loss, v_acc = evaluate(model, valid, config.eval_batch_size)
        return {"valid_loss": v_loss, "valid_accuracy": v_acc}

    wall = loop.run(train_loss, validate)
    metrics = _metrics(config, task, loop, loop.facts(wall, device))
    if out_dir is not None:
        title = f"{config.task.upper()} / {config.model.pe.upper()} (V={config.model.vocab})"
        files = ["metrics.json", "curve.csv"]
        write_run_files(Path(out_dir), loop, metrics, title, files)
    return metrics


def _metrics(
    config: SyntheticConfig, task: SyntheticTask, loop: TrainingLoop, facts: dict[str, Any]
) -> dict[str, Any]:
    """The metrics of a finished run (``files`` still empty); ``facts`` are the loop's."""
    evals = loop.evals
    final = evals[-1]
    return {
        "task": config.task,
        "pe": config.model.pe,
        "vocab": config.model.vocab,
        "length": config.model.max_len,
        "valid_accuracy": final["valid_accuracy"],
        "valid_loss": final["valid_loss"],
        "best_valid_accuracy": max(e["valid_accuracy"] for e in evals),
        "steps_to_99": next((e["step"] for e in evals if e["valid_accuracy"] >= 0.99), None),
        "position_blind_accuracy": task.position_blind_accuracy,
        "final_train_loss": loop.rows[-1]["train_loss"],
        "steps": config.steps,
        **facts,
        "config": config.to_dict(),
        "evals": evals,
        "files": [],
    }
