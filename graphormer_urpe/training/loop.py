"""The training loop: AdamW, linear warm-up + linear decay, masked L1/MSE/BCE, best-checkpointing.

:func:`train` runs a whole experiment from a :class:`~graphormer_urpe.training.config.TrainConfig`
and writes into ``config.out``:

* ``config.json``: the resolved config (model included)
* ``history.csv``: one row per evaluated epoch (TensorBoard events too when installed)
* ``last.pt`` / ``best.pt``: checkpoints (atomic; ``torch.load(weights_only=True)``)
* ``metrics.json``: dataset, attention, preset, parameters, steps, epochs,
  ``best_valid_<metric>``, ``test_<metric>`` at the best checkpoint (only when the test split
  has labels: ``test_has_labels``), the mean-predictor baseline, wall time and training graphs
  per second.

The dataset decides the loss and the selection rule: ``task_type == "binary"`` trains one
logit per task with BCE (missing labels masked), otherwise ``config.loss``; the best checkpoint
maximises the metric when ``higher_is_better`` (ROC-AUC, AP) and minimises it otherwise.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import math
import random
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from ..graph.batch import GraphormerBatch, GraphormerCollator
from ..graph.model import Graphormer, GraphormerConfig, fit_tables
from .checkpoint import (
    atomic_write_bytes,
    atomic_write_text,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from .config import TrainConfig

__all__ = [
    "train",
    "predict",
    "masked_loss",
    "linear_schedule",
    "resolve_device",
    "Precision",
    "build_model",
    "load_splits",
    "make_loader",
    "dataset_targets",
    "seed_everything",
]

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeds code that uses the global RNG
    torch.manual_seed(seed)


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` → the first CUDA GPU when available, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {name!r} requested but CUDA is not available")
    return device


class Precision:
    """Autocast and gradient scaling for one of ``fp32``, ``bf16``, ``fp16`` (or ``auto``).

    ``auto`` picks bfloat16 autocast on CUDA GPUs that support it, float16 with a gradient
    scaler on older GPUs, and float32 on the CPU.
    """

    def __init__(self, kind: str, device: torch.device) -> None:
        if kind == "auto":
            if device.type == "cuda":
                kind = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
            else:
                kind = "fp32"
        if kind not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"precision must be auto, fp32, bf16 or fp16, got {kind!r}")
        self.kind = kind
        self.device = device
        self.dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[kind]
        self.scaler = torch.amp.GradScaler(device.type, enabled=kind == "fp16")

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)


def linear_schedule(step: int, warmup: int, total: int, peak: float, end: float) -> float:
    """Graphormer's schedule: linear warm-up from 0 to ``peak``, then linear decay to ``end``.

    Returns the learning rate at ``step`` (0-based count of optimizer steps already taken).
    """
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    if step >= total:
        return end
    frac = (step - warmup) / max(1, total - warmup)
    return end + (peak - end) * (1.0 - frac)


def masked_loss(pred: Tensor, target: Tensor, kind: str = "l1") -> Tensor:
    """Mean L1 (``l1``), squared error (``mse``) or binary cross-entropy on logits (``bce``,
    targets 0/1) over the finite entries of ``target`` (``[B, T]`` each)."""
    mask = torch.isfinite(target)
    filled = torch.where(mask, target, torch.zeros_like(target)).float()
    if kind == "bce":
        err = nn.functional.binary_cross_entropy_with_logits(pred.float(), filled, reduction="none")
    else:
        diff = pred.float() - filled
        err = diff.abs() if kind == "l1" else diff.square()
    return (err * mask).sum() / mask.sum().clamp(min=1)


def dataset_targets(dataset: Dataset) -> Tensor:
    """All targets of a dataset of graphs as ``[N, T]`` float."""
    if callable(getattr(type(dataset), "target_matrix", None)):  # read without building graphs
        if len(dataset) == 0:
            raise ValueError("the dataset is empty")
        return dataset.target_matrix().float()
    ys = [dataset[i].y.reshape(1, -1).float() for i in range(len(dataset))]
    if not ys:
        raise ValueError("the dataset is empty")
    return torch.cat(ys, dim=0)


def make_loader(
    dataset: Dataset,
    config: GraphormerConfig,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    num_workers: int = 0,
    pin_memory: bool = False,
) -> DataLoader:
    """A ``DataLoader`` yielding :class:`GraphormerBatch` es for ``dataset``."""
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        collate_fn=GraphormerCollator(config.multi_hop_max_dist, config.spatial_pos_max),
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
    )


def build_model(config: GraphormerConfig, featurizer: str, num_targets: int) -> Graphormer:
    """The model for a dataset: tables grown to fit its featuriser, one output per target."""
    return Graphormer(fit_tables(replace(config, num_targets=num_targets), featurizer))


@torch.no_grad()
def predict(
    model: nn.Module,
    loader: DataLoader,
    device: torch.device,
    precision: Precision | None = None,
    progress: bool = False,
    desc: str = "predict",
) -> tuple[Tensor, Tensor | None]:
    """Predictions ``[N, T]`` (float32, CPU) and targets ``[N, T]`` (or ``None``)."""
    model.eval()
    preds, ys = [], []
    ctx = precision.autocast if precision is not None else contextlib.nullcontext
    for batch in tqdm(loader, desc=desc, disable=not progress, leave=False):
        batch = batch.to(device, non_blocking=True)
        with ctx():
            out = model(batch)
        preds.append(out.float().cpu())
        if batch.y is not None:
            ys.append(batch.y.cpu())
    y = torch.cat(ys) if len(ys) == len(preds) and ys else None
    return torch.cat(preds), y


class _History:
    """Per-epoch metric rows: CSV (rewritten atomically) and TensorBoard when installed."""

    def __init__(self, out: Path, rows: list[dict[str, Any]]) -> None:
        self.path = out / "history.csv"
        self.rows = rows
        self.tb = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(out / "tensorboard"))
        except Exception:  # tensorboard is optional
            self.tb = None

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        keys: list[str] = []
        for r in self.rows:
            keys.extend(k for k in r if k not in keys)
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=keys)
        writer.writeheader()
        writer.writerows(self.rows)
        atomic_write_text(self.path, buf.getvalue())
        if self.tb is not None:
            for k, v in row.items():
                if k not in ("epoch", "step") and isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, row["step"])
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def _batches_for_epoch(loader: DataLoader, seed: int, epoch: int) -> Iterator[GraphormerBatch]:
    # The shuffling order of an epoch depends only on (seed, epoch): resumable and reproducible.
    if loader.generator is not None:
        loader.generator.manual_seed(seed * 100_003 + epoch)
    return iter(loader)


def load_splits(config: TrainConfig):
    """The :class:`~graphormer_urpe.datasets.DatasetSplits` a run's config names."""
    from ..datasets import load_dataset

    return load_dataset(
        config.dataset,
        root=config.data_root,
        multi_hop_max_dist=config.model.multi_hop_max_dist,
        strict=config.strict,
        smiles_column=config.smiles_column,
        target_columns=config.target_columns,
        split_column=config.split_column,
        split=config.split,
        seed=config.split_seed,
        featurizer=config.featurizer,
    )


def train(config: TrainConfig, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train, select on the validation split, test at the best checkpoint; see module doc.

    Args:
        config: the run.
        resume: continue from ``config.out/last.pt`` when it exists (the saved config wins,
            except for ``out`` and ``device``).
        progress: show a tqdm progress bar.

    Returns:
        The ``metrics.json`` contents.
    """
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(config.device)
    precision = Precision(config.precision, device)
    ckpt = None
    if resume and (out / "last.pt").exists():
        ckpt = load_checkpoint(out / "last.pt")
        saved = TrainConfig.from_dict(ckpt["config"])
        config = replace(saved, out=config.out, device=config.device)
        log.info("resuming %s after epoch %d, step %d", out, ckpt["epoch"], ckpt["step"])
    seed_everything(config.seed)
    if config.threads:
        torch.set_num_threads(config.threads)

    splits = load_splits(config)
    for name in ("train", "valid", "test"):
        if len(getattr(splits, name)) == 0:
            raise ValueError(f"the {name} split of {splits.name} is empty")
    model = build_model(config.model, splits.featurizer, splits.num_targets).to(device)
    config = replace(config, model=model.config)
    atomic_write_text(out / "config.json", config.to_json())
    n_params = sum(p.numel() for p in model.parameters())
    metric = splits.metric

    train_loader = make_loader(
        splits.train,
        model.config,
        config.batch_size,
        True,
        config.seed,
        config.num_workers,
        device.type == "cuda",
    )
    eval_loaders = {
        name: make_loader(
            getattr(splits, name),
            model.config,
            config.batch_size,
            False,
            0,
            config.num_workers,
            device.type == "cuda",
        )
        for name in ("valid", "test")
    }
    steps_per_epoch = len(train_loader)
    total = config.max_steps or (config.epochs or 1) * steps_per_epoch
    epochs = math.ceil(total / steps_per_epoch)
    warmup = config.warmup_steps
    if warmup >= total:
        warmup = max(1, total // 10)
        log.warning(
            "warmup_steps (%d) >= total steps (%d): warming up over %d steps instead",
            config.warmup_steps,
            total,
            warmup,
        )
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=config.lr,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=config.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: linear_schedule(s, warmup, total, config.lr, config.end_lr) / config.lr,
    )

    # binary tasks: one logit per task and BCE; the metric's direction decides "best"
    loss_kind = "bce" if splits.task_type == "binary" else config.loss
    higher = splits.higher_is_better
    train_y = dataset_targets(splits.train)
    mean = torch.nanmean(train_y, dim=0, keepdim=True)  # [1, T]
    baseline: dict[str, float | None] = {}
    test_labelled = True
    for name in eval_loaders:
        y = dataset_targets(getattr(splits, name))
        if name == "test" and not bool(torch.isfinite(y).any()):
            test_labelled, baseline[name] = False, None  # e.g. PCQM4Mv2 test-dev
            log.info("the test split of %s has no labels: no test metric", splits.name)
            continue
        baseline[name] = splits.evaluate(mean.expand_as(y), y)[metric]
    log.info(
        "%s: %d/%d/%d graphs, %d targets, %s features | %s %s, %d parameters | %d steps "
        "(%d epochs x %d), batch %d, lr %.2g, device %s, %s",
        splits.name,
        len(splits.train),
        len(splits.valid),
        len(splits.test),
        splits.num_targets,
        splits.featurizer,
        config.preset,
        model.config.attention,
        n_params,
        total,
        epochs,
        steps_per_epoch,
        config.batch_size,
        config.lr,
        device,
        precision.kind,
    )

    start_epoch, step, best, best_epoch = 0, 0, -math.inf if higher else math.inf, -1
    rows: list[dict[str, Any]] = []
    train_seconds, train_graphs = 0.0, 0
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        precision.scaler.load_state_dict(ckpt["scaler"])
        set_rng_state(ckpt["rng"])
        start_epoch, step = ckpt["epoch"] + 1, ckpt["step"]
        best, best_epoch = ckpt["best"], ckpt["best_epoch"]
        rows = json.loads(ckpt["history"])
        train_seconds, train_graphs = ckpt["train_seconds"], ckpt["train_graphs"]
    history = _History(out, [])
    for r in rows:
        history.add(r)

    def state(epoch: int) -> dict[str, Any]:
        return {
            "config": config.to_json(),
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": precision.scaler.state_dict(),
            "rng": rng_state(),
            "epoch": epoch,
            "step": step,
            "best": best,
            "best_epoch": best_epoch,
            "history": json.dumps(history.rows),
            "train_seconds": train_seconds,
            "train_graphs": train_graphs,
            "featurizer": splits.featurizer,
            "target_names": list(splits.target_names),
            "metric": metric,
            "train_mean": mean,
        }

    wall_start = time.perf_counter()
    bar = tqdm(total=total, initial=step, desc="train", disable=not progress, dynamic_ncols=True)
    for epoch in range(start_epoch, epochs):
        if step >= total:
            break
        model.train()
        losses = []
        t0 = time.perf_counter()
        for batch in _batches_for_epoch(train_loader, config.seed, epoch):
            if step >= total:
                break
            batch = batch.to(device, non_blocking=True)
            with precision.autocast():
                pred = model(batch)
            loss = masked_loss(pred, batch.y, loss_kind)
            if not torch.isfinite(loss):
                save_checkpoint(out / "nonfinite.pt", state(epoch - 1))
                raise RuntimeError(
                    f"non-finite loss at step {step} (epoch {epoch}); last good state saved to "
                    f"{out / 'nonfinite.pt'}; lower --lr or check the data"
                )
            optimizer.zero_grad(set_to_none=True)
            precision.scaler.scale(loss).backward()
            if config.clip_norm:
                precision.scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
            precision.scaler.step(optimizer)
            precision.scaler.update()
            scheduler.step()
            step += 1
            train_graphs += batch.num_graphs
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{losses[-1]:.4f}")
        train_seconds += time.perf_counter() - t0
        row: dict[str, Any] = {
            "epoch": epoch,
            "step": step,
            "lr": optimizer.param_groups[0]["lr"],
            "train_loss": float(np.mean(losses)) if losses else math.nan,
        }
        last_epoch = epoch == epochs - 1 or step >= total
        if (epoch + 1) % config.eval_every == 0 or last_epoch:
            p, y = predict(model, eval_loaders["valid"], device, precision)
            value = splits.evaluate(p, y)[metric]
            row[f"valid_{metric}"] = value
            if (value > best) if higher else (value < best):
                best, best_epoch = value, epoch
                save_checkpoint(out / "best.pt", state(epoch))
            log.info(
                "epoch %d step %d: train %s %.4f, valid %s %.4f (best %.4f @ %d)",
                epoch,
                step,
                loss_kind,
                row["train_loss"],
                metric,
                value,
                best,
                best_epoch,
            )
        row["seconds"] = round(train_seconds, 2)
        history.add(row)
        save_checkpoint(out / "last.pt", state(epoch))
    bar.close()
    history.close()

    if not (out / "best.pt").exists():
        raise RuntimeError(f"no validation result was recorded in {out}")
    best_ckpt = load_checkpoint(out / "best.pt")
    model.load_state_dict(best_ckpt["model"])
    test: dict[str, float] = {}
    if test_labelled:
        p, y = predict(model, eval_loaders["test"], device, precision)
        test = splits.evaluate(p, y)
    metrics = {
        "dataset": splits.name,
        "attention": model.config.attention,
        "preset": config.preset,
        "parameters": n_params,
        "steps": step,
        "epochs": len(history.rows),
        f"best_valid_{metric}": best,
        "best_epoch": best_epoch,
        **{f"test_{k}": v for k, v in test.items()},
        f"baseline_valid_{metric}": baseline["valid"],
        f"baseline_test_{metric}": baseline["test"],
        "test_has_labels": test_labelled,
        **(
            {}
            if test_labelled
            else {"test_note": f"the test split of {splits.name} has no labels; no test metric"}
        ),
        "task_type": splits.task_type,
        "higher_is_better": higher,
        "loss": loss_kind,
        "train_graphs": len(splits.train),
        "valid_graphs": len(splits.valid),
        "test_graphs": len(splits.test),
        "wall_seconds": round(time.perf_counter() - wall_start, 2),
        "train_seconds": round(train_seconds, 2),
        "graphs_per_second": round(train_graphs / train_seconds, 2) if train_seconds else None,
        "device": str(device),
        "precision": precision.kind,
        "seed": config.seed,
    }
    atomic_write_bytes(out / "metrics.json", json.dumps(metrics, indent=2).encode())
    log.info(
        "best valid %s %.4f (epoch %d), test %s %s; mean predictor valid %.4f test %s",
        metric,
        best,
        best_epoch,
        metric,
        f"{test[metric]:.4f}" if test_labelled else "n/a (no labels)",
        baseline["valid"],
        "n/a" if baseline["test"] is None else f"{baseline['test']:.4f}",
    )
    return metrics
