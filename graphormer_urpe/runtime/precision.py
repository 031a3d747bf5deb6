"""Numeric precision of a model's forward (and, in training, its backward): autocast and
gradient scaling, shared by training and prediction."""

from __future__ import annotations

import contextlib

import torch

__all__ = ["Precision"]


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

    def autocast(self, cache: bool = True) -> contextlib.AbstractContextManager:
        """The autocast region (nothing for ``fp32``); ``cache=False`` for captured steps,
        whose weight casts must be recomputed at every replay."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=cache)
