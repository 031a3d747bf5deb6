"""The ``environment`` section: versions, the GPU and its bf16 support and peak."""

from __future__ import annotations

import os
import platform
import sys

from .runner import Check

# Dense bf16 tensor-core peaks (FLOP/s), from the vendors' data sheets, by device-name match.
BF16_PEAK = (
    ("H200", 989.4e12),
    ("H100 PCIe", 756.0e12),
    ("H100 NVL", 835.0e12),
    ("H100", 989.4e12),
    ("GH200", 989.4e12),
    ("A100", 312.0e12),
    ("L40S", 362.0e12),
    ("L4", 121.0e12),
    ("A10", 125.0e12),
)


def device_precision() -> tuple[str, str]:
    """``(device, precision)``: bf16 autocast on GPUs that have it, fp16 on older ones, fp32 on
    the CPU (stated explicitly on every command line)."""
    import torch

    if not torch.cuda.is_available():
        return "cpu", "fp32"
    return "cuda", "bf16" if torch.cuda.is_bf16_supported() else "fp16"


def bf16_peak(name: str | None) -> float | None:
    """The dense bf16 peak FLOP/s of a GPU by name (``None`` when unknown)."""
    if not name:
        return None
    for key, peak in BF16_PEAK:
        if key in name:
            return peak
    return None


def section_environment(check: Check, res: dict) -> None:
    """Python, torch, CUDA and the carried packages' versions; the GPU, its memory and bf16."""
    import torch

    check.env = res  # filled in place: what is known before a failure stays known
    res["python"] = sys.version.split()[0]
    res["machine"] = platform.machine()
    res["cpu_count"] = os.cpu_count()
    res["torch"] = torch.__version__
    res["cuda_available"] = torch.cuda.is_available()
    res["cuda"] = torch.version.cuda
    res["cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    from importlib import metadata

    for dist in ("torch_geometric", "numpy", "rdkit", "ogb", "transformers", "scikit-learn"):
        try:
            res[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:  # absent packages are part of the report
            res[dist] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        res["gpu"] = p.name
        res["gpu_memory_gib"] = round(p.total_memory / 2**30, 1)
        res["capability"] = f"{p.major}.{p.minor}"
        res["gpu_count"] = torch.cuda.device_count()
        res["bf16_supported"] = torch.cuda.is_bf16_supported()
        res["bf16_peak_flops"] = bf16_peak(p.name)
        res["nccl"] = str(torch.cuda.nccl.version())
    else:
        res["gpu"] = None
        res["bf16_supported"] = False
        res["bf16_peak_flops"] = None
