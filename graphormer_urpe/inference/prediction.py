"""Predictions of a model over a loader, a dataset, or (in a run) a whole split shared
among the processes."""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from ..graph.model import Graphormer
from ..runtime.capture import CapturedForward, default_backend
from ..runtime.distributed import DistContext, gather_in_order
from ..runtime.loaders import make_collator
from ..runtime.precision import Precision

__all__ = ["predict", "predict_dataset", "predict_split"]


@torch.no_grad()
def predict(
    model: nn.Module,
    loader: DataLoader,
    device: torch.device,
    precision: Precision | None = None,
    progress: bool = False,
    desc: str = "predict",
    forward: CapturedForward | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Predictions ``[N, T]`` (float32, CPU) and targets ``[N, T]`` (or ``None``); with
    ``forward`` (static batches), its captured passes of ``model``."""
    model.eval()
    preds, ys = [], []
    ctx = precision.autocast if precision is not None else contextlib.nullcontext
    for batch in tqdm(loader, desc=desc, disable=None if progress else True, leave=False):
        if forward is not None:
            out = forward(batch)
        else:
            with ctx():
                out = model(batch.to(device, non_blocking=True))[: batch.num_graphs]
        preds.append(out.float().cpu())
        if batch.y is not None:
            ys.append(batch.y[: batch.num_graphs].cpu())
    y = torch.cat(ys) if len(ys) == len(preds) and ys else None
    return torch.cat(preds), y


def predict_dataset(
    model: Graphormer,
    dataset: Dataset,
    batch_size: int,
    device: torch.device,
    precision: Precision,
    progress: bool = False,
    desc: str = "predict",
    net: nn.Module | None = None,
) -> tuple[Tensor, Tensor | None]:
    """:func:`predict` over ``dataset`` in order; on one CUDA GPU through static batches and
    forward passes captured per batch shape (:class:`~graphormer_urpe.runtime.capture.
    CapturedForward`). ``net``: a module around ``model`` to run instead (for example
    :class:`~graphormer_urpe.inference.embeddings.WithHeadInput`); batches as ``model``
    reads them."""
    net = model if net is None else net
    backend = default_backend(device)
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        collate_fn=make_collator(model.config, device, batch_size if backend else None),
        pin_memory=device.type == "cuda",
    )
    forward = None
    if backend is not None:
        forward = CapturedForward(net, lambda: precision.autocast(False), device, backend)
    return predict(net, loader, device, precision, progress, desc, forward)


def predict_split(
    model: nn.Module,
    loader: DataLoader,
    index: Tensor,
    total: int,
    num_targets: int,
    ctx: DistContext,
    precision: Precision,
    forward: CapturedForward | None = None,
) -> Tensor:
    """Predictions ``[total, T]`` for a whole split shared among the processes of ``ctx``:
    this process predicts the graphs at ``index`` ``[n_r]`` (its share, batched by ``loader``;
    none: an empty share), and every process gets all ``total`` rows back in split order."""
    if len(index):
        pred, _ = predict(model, loader, ctx.device, precision, forward=forward)
    else:
        pred = torch.empty(0, num_targets)
    return gather_in_order(ctx, index, pred, total)
