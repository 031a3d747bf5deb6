r"""Training loop for the synthetic sequence tasks (Position Identification, Even Token Prediction).

Reference recipe (spec §5.3): Adam (:math:`\beta = (0.9, 0.999)`, :math:`\epsilon = 10^{-8}`,
no weight decay, no clipping), a linear warm-up from 0 to the peak learning rate followed by
a linear decay to 0 at the last update, and the loss

.. math::
    \mathcal{L} = \frac{1}{|S|} \sum_{(b, i) \in S} -\log p_\theta(y_{b,i} \mid x_b)

summed over the scored positions :math:`S` of the batch and divided by their number (logits
over the full ``V + 11`` dictionary). Accuracy is the fraction of scored positions whose
argmax is the target, measured on a fixed, seeded validation set.

:func:`train_synthetic` returns the metrics and, given an output directory, writes
``metrics.json``, ``curve.csv`` (one row per update; validation columns filled at evaluation
steps) and ``pe_tables.png`` (the learned ``B`` and ``C`` per head against the offset
``j - i``; RPE / URPE only), each atomically.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from ..io.checkpoint import write_atomic
from .model import SequenceModelConfig, SequenceTransformer
from .tasks import SyntheticBatch, SyntheticTask, TaskName

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


#: Run settings of the presets, per task. ``max_len`` is the task length ``L``.
RUN_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {
        "pi": dict(
            max_len=128,
            steps=2000,
            batch_size=32,
            lr=2e-3,
            warmup_steps=200,
            valid_size=256,
            eval_every=100,
        ),
        "etp": dict(
            max_len=16,
            steps=8000,
            batch_size=32,
            lr=1e-3,
            warmup_steps=800,
            valid_size=256,
            eval_every=250,
        ),
    },
    "paper": {
        task: dict(
            max_len=128,
            steps=40_000,
            batch_size=128,
            lr=7e-5,
            warmup_steps=6_000,
            valid_size=6_400,
            eval_every=1_000,
        )
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
    if preset not in RUN_PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {sorted(RUN_PRESETS)}")
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


def linear_warmup_decay(step: int, warmup_steps: int, total_steps: int) -> float:
    r"""Learning-rate multiplier of update ``step`` (0-based).

    .. math::
        m(s) = \begin{cases} (s + 1) / W & s < W \\ (T - s) / (T - W) & s \ge W \end{cases}

    i.e. a linear ramp to 1 over ``W`` updates, then a linear decay that would reach 0 at
    update ``T`` (fairseq's ``polynomial_decay`` with power 1 and end lr 0).
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


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


def optimizer_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    loss: Tensor,
    clip_norm: float | None,
    step: int,
) -> float:
    """One update from ``loss`` (a scalar): backward, optional gradient-norm clipping, optimiser
    and schedule steps. Returns the loss as a float; a non-finite one raises
    ``FloatingPointError`` naming update ``step``."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    scheduler.step()
    value = float(loss.detach())
    if not math.isfinite(value):
        raise FloatingPointError(f"non-finite training loss {value} at update {step}")
    return value


def plot_positional_tables(model: SequenceTransformer, path: Path, title: str = "") -> bool:
    """Plot the learned ``B`` and ``C`` of each head against the relative offset ``j - i``.

    One panel for ``B`` and one per distinct ``C`` table (one when shared across layers).
    Written atomically as PNG with the Agg backend.

    Returns:
        ``True`` if a figure was written, ``False`` when the model has no relative tables
        (``none`` / ``ape``).
    """
    tables: list[tuple[str, Any]] = []
    if model.rel_bias is not None:
        tables.append(("B (additive, inside softmax)", model.rel_bias))
    if model.rel_scales is not None:
        shared = len(model.rel_scales) == 1
        for i, t in enumerate(model.rel_scales):
            name = "C (multiplicative)" + ("" if shared else f", layer {i}")
            tables.append((name, t))
    if not tables:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, len(tables), figsize=(5.5 * len(tables), 3.6), squeeze=False, layout="constrained"
    )
    for ax, (name, table) in zip(axes[0], tables, strict=True):
        offsets, values = table.by_offset()  # [R], [H, R]
        for h in range(values.shape[0]):
            ax.plot(offsets.numpy(), values[h].numpy(), lw=1.0, label=f"head {h}")
        ax.set_xlabel("relative offset j - i")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, ncol=2)
    if title:
        fig.suptitle(title)
    write_atomic(path, png_bytes(fig))
    return True


def png_bytes(fig: Any) -> bytes:
    """A matplotlib figure as PNG bytes (110 dpi); the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def _curve_csv(rows: list[dict[str, Any]], columns: tuple[str, ...] = CURVE_COLUMNS) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in columns})
    return buf.getvalue()


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

    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=config.lr,
        betas=config.adam_betas,
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: linear_warmup_decay(s, config.warmup_steps, config.steps)
    )
    num_params = sum(p.numel() for p in model.parameters())
    logger.info(
        "synthetic %s / %s: %d parameters, %d updates of %d sequences (L=%d, V=%d)",
        config.task,
        config.model.pe,
        num_params,
        config.steps,
        config.batch_size,
        task.length,
        task.vocab,
    )

    rows: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []
    steps_to_99: int | None = None
    start = time.perf_counter()
    model.train()
    bar = tqdm(
        range(1, config.steps + 1),
        desc=f"{config.task}/{config.model.pe}",
        disable=not progress,
        dynamic_ncols=True,
    )
    for step in bar:
        batch = task.sample(config.batch_size, train_gen).to(device)
        lr = optimizer.param_groups[0]["lr"]
        loss_sum, hits, n = masked_loss_and_hits(model(batch.tokens), batch)
        loss = loss_sum / n
        train_loss = optimizer_update(model, optimizer, scheduler, loss, config.clip_norm, step)
        row: dict[str, Any] = {
            "step": step,
            "lr": lr,
            "train_loss": round(train_loss, 6),
            "train_accuracy": round(int(hits) / n, 6),
            "valid_loss": None,
            "valid_accuracy": None,
            "elapsed_s": round(time.perf_counter() - start, 3),
        }
        if step % config.eval_every == 0 or step == config.steps:
            v_loss, v_acc = evaluate(model, valid, config.eval_batch_size)
            row["valid_loss"] = round(v_loss, 6)
            row["valid_accuracy"] = round(v_acc, 6)
            evals.append({"step": step, "valid_loss": v_loss, "valid_accuracy": v_acc})
            if steps_to_99 is None and v_acc >= 0.99:
                steps_to_99 = step
            logger.info(
                "%s/%s step %d: train loss %.4f, valid loss %.4f, valid acc %.4f",
                config.task,
                config.model.pe,
                step,
                train_loss,
                v_loss,
                v_acc,
            )
            bar.set_postfix(loss=f"{train_loss:.3f}", valid_acc=f"{v_acc:.3f}")
        rows.append(row)
    bar.close()
    wall = time.perf_counter() - start

    final = evals[-1]
    metrics: dict[str, Any] = {
        "task": config.task,
        "pe": config.model.pe,
        "vocab": config.model.vocab,
        "length": config.model.max_len,
        "valid_accuracy": final["valid_accuracy"],
        "valid_loss": final["valid_loss"],
        "best_valid_accuracy": max(e["valid_accuracy"] for e in evals),
        "steps_to_99": steps_to_99,
        "position_blind_accuracy": task.position_blind_accuracy,
        "final_train_loss": rows[-1]["train_loss"],
        "steps": config.steps,
        "wall_time_s": round(wall, 2),
        "num_parameters": num_params,
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "config": config.to_dict(),
        "evals": evals,
        "files": [],
    }
    if out_dir is not None:
        out = Path(out_dir)
        files = ["metrics.json", "curve.csv"]
        write_atomic(out / "curve.csv", _curve_csv(rows))
        title = f"{config.task.upper()} / {config.model.pe.upper()} (V={config.model.vocab})"
        if plot_positional_tables(model, out / "pe_tables.png", title=title):
            files.append("pe_tables.png")
        metrics["files"] = files
        write_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        logger.info("wrote %s to %s", ", ".join(files), out)
    return metrics
