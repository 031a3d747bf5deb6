"""Training configuration: one dataclass, named presets that reproduce published set-ups.

A preset names both a model (:data:`graphormer_urpe.graph.model.PRESETS`) and the
optimisation hyper-parameters it was published with. Every field can be overridden, and every
``graphormer-urpe train`` flag maps to exactly one field of :class:`TrainConfig` or of
:class:`~graphormer_urpe.graph.model.GraphormerConfig`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Literal

from ..graph.model import GraphormerConfig, get_preset

__all__ = ["TrainConfig", "TRAIN_PRESETS", "make_config"]


@dataclass
class TrainConfig:
    """Everything a training run needs; saved next to its checkpoints as ``config.json``."""

    dataset: str = "nci5k"
    """``nci5k`` (embedded, no download), ``zinc``, ``zinc-full``, ``csv:PATH``, ``pcqm4mv2``,
    ``pcqm4m`` or an ``ogbg-mol*`` name."""
    data_root: str | None = None
    preset: str = "small"
    model: GraphormerConfig = field(default_factory=lambda: get_preset("small"))
    epochs: int | None = 20
    """Number of epochs; ignored when ``max_steps`` is set."""
    max_steps: int | None = None
    batch_size: int = 64
    lr: float = 5e-4
    """Peak learning rate, reached after ``warmup_steps``."""
    end_lr: float = 1e-9
    warmup_steps: int = 500
    weight_decay: float = 0.01
    clip_norm: float | None = 5.0
    loss: Literal["l1", "mse"] = "l1"
    seed: int = 1
    device: str = "auto"
    """``auto`` (CUDA when available), ``cpu``, ``cuda``, ``cuda:1``, ..."""
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """``auto``: bfloat16 autocast on CUDA GPUs that support it, float32 elsewhere."""
    num_workers: int = 0
    threads: int | None = None
    """CPU threads for torch (``None``: torch's default, one per core)."""
    eval_every: int = 1
    """Evaluate on the validation split every this many epochs."""
    checkpoint_every: int | None = None
    """Also write a checkpoint every this many optimizer steps (``None``: at epoch ends only)."""
    keep_checkpoints: int = 3
    """Rolling step checkpoints kept in ``OUT/checkpoints`` (``last.pt`` is the newest)."""
    bucket_size: int = 0
    """Size-bucketed batches: sort chunks of this many batches by graph size (``0``: off)."""
    compile: bool = False
    """Run the model through ``torch.compile`` (dynamic shapes)."""
    out: str = "runs/default"
    smiles_column: str = "smiles"
    target_columns: list[str] | None = None
    split_column: str | None = None
    split: Literal["random", "scaffold"] = "random"
    split_seed: int = 0
    """Seed of the random split (kept apart from ``seed`` so the split stays fixed)."""
    featurizer: str | None = None
    strict: bool = False
    max_nodes: int | None = None
    """Leave training graphs with more atoms out (logged); valid/test graphs are always kept."""
    init_from: str | None = None
    """Start from this checkpoint's weights (e.g. a converted published Graphormer): its
    architecture, the run's dropouts and attention; the output layer is re-initialised when
    the number of outputs differs. Ignored when resuming."""

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        d = dict(d)
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown TrainConfig fields: {sorted(unknown)}")
        model = d.pop("model", None)
        cfg = cls(**d)
        if model is not None:
            cfg.model = GraphormerConfig.from_dict(model)
        return cfg


# Graphormer's published optimisation: AdamW, linear warm-up to lr, linear decay to 1e-9
# over max_steps, batch 256, L1, seed 1.
_GRAPHORMER = dict(epochs=None, batch_size=256, lr=2e-4, end_lr=1e-9, loss="l1", seed=1)

TRAIN_PRESETS: dict[str, dict] = {
    # A few minutes on a laptop CPU with the embedded NCI molecules.
    "small": dict(
        epochs=20,
        max_steps=None,
        batch_size=64,
        lr=5e-4,
        end_lr=1e-9,
        warmup_steps=500,
        weight_decay=0.01,
        clip_norm=5.0,
        loss="l1",
        seed=1,
    ),
    # Graphormer v1 on ZINC-subset: 40k warm-up, 400k steps, weight decay 0.01, no clipping.
    "zinc-slim": dict(
        _GRAPHORMER, max_steps=400_000, warmup_steps=40_000, weight_decay=0.01, clip_norm=None
    ),
    # Graphormer base on PCQM4Mv2 (v2 recipe): 60k warm-up, 1M steps, clip 5, no weight decay.
    "pcqm4mv2-base": dict(
        _GRAPHORMER, max_steps=1_000_000, warmup_steps=60_000, weight_decay=0.0, clip_norm=5.0
    ),
    # Graphormer-Small on PCQM4M (v1 recipe): as base, with v1's default weight decay 0.01.
    "pcqm4mv2-small": dict(
        _GRAPHORMER, max_steps=1_000_000, warmup_steps=60_000, weight_decay=0.01, clip_norm=5.0
    ),
}


def make_config(
    preset: str = "small", model_overrides: dict | None = None, **overrides
) -> TrainConfig:
    """A :class:`TrainConfig` from ``preset``, with training and model fields overridden.

    Args:
        preset: a name in :data:`TRAIN_PRESETS` (also a model preset).
        model_overrides: fields of :class:`GraphormerConfig` to change.
        **overrides: fields of :class:`TrainConfig` to change (``None`` values are ignored).
    """
    if preset not in TRAIN_PRESETS:
        raise KeyError(f"unknown preset {preset!r}; choose from {sorted(TRAIN_PRESETS)}")
    model = get_preset(
        preset, **{k: v for k, v in (model_overrides or {}).items() if v is not None}
    )
    cfg = TrainConfig(preset=preset, model=model, **TRAIN_PRESETS[preset])
    given = {k: v for k, v in overrides.items() if v is not None}
    if "max_steps" in given:
        given.setdefault("epochs", None)
    return replace(cfg, **given)
