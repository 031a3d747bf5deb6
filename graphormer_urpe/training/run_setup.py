"""Setting up a training run, one function per part: the config to run (a checkpoint's when
resuming), the data, the model, the loaders, the targets and baselines, the step and the
optimizer; and :class:`RunFolder`, which removes what a refused run wrote."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from ..datasets.spec import names_table
from ..graph.batch import GraphormerBatch
from ..graph.model import Graphormer
from ..graph.static_shapes import token_length
from ..io.checkpoint import CheckpointKeeper, incompatible_checkpoint
from ..runtime.capture import CaptureBackend, CapturedStep, default_backend
from ..runtime.distributed import DistContext
from ..runtime.loaders import loader_workers, make_collator, split_loader
from ..runtime.precision import Precision
from ..runtime.run_inputs import build_model, dataset_targets, load_splits
from ..runtime.sampler import EpochBatchSampler
from ..runtime.train_config import TrainConfig
from .pacing import Schedule
from .run_state import Clock, RunData, RunLaunch, RunOptimizer, log
from .run_trees import RunTrees, fit_run_trees
from .steps import StepTotals, make_optimizer, parameter_groups, step_body

__all__ = [
    "BackendChoice",
    "PER_LAUNCH_FIELDS",
    "RunFolder",
    "build_run_model",
    "capture_backend",
    "domain_record",
    "fit_trees",
    "first_missing",
    "load_run_splits",
    "make_run_data",
    "make_run_optimizer",
    "make_stepper",
    "resumed_config",
    "target_scaling",
    "wrap_model",
]

PER_LAUNCH_FIELDS = (
    "out",
    "device",
    "checkpoint_every",
    "keep_checkpoints",
    "num_workers",
    "threads",
    "time_limit",
    "capture",
    "attention_kernel",
)
"""Fields a resumed run takes from the new command line; all others come from the checkpoint."""


def first_missing(folder: Path) -> Path:
    """The topmost of ``folder`` and its parents that does not exist yet (``folder`` itself
    when it exists): what ``folder.mkdir(parents=True)`` creates."""
    made = folder.absolute()
    for parent in made.parents:
        if parent.exists():
            break
        made = parent
    return made


class RunFolder:
    """A run's folder: made by rank 0 (with the parents it lacks) once the data loaded, so
    that a failed start leaves no empty run folder; :meth:`discard` removes it again."""

    def __init__(self, out: Path, main: bool) -> None:
        self.out, self.main = out, main
        self.made = out.absolute()  # the topmost folder this run creates
        if main:
            self.made = first_missing(out)
            out.mkdir(parents=True, exist_ok=True)

    def discard(self) -> None:
        """Remove what setting up the run wrote (its folder, when nothing else is in it),
        for a run refused before its first step (its history closed first)."""
        if not self.main:
            return
        (self.out / "config.json").unlink(missing_ok=True)
        (self.out / "history.csv").unlink(missing_ok=True)
        shutil.rmtree(self.out / "tensorboard", ignore_errors=True)
        folder = self.out.absolute()
        while True:  # the run's folder, and the parents it made (runs/), when empty
            with contextlib.suppress(OSError):
                folder.rmdir()
            if folder == self.made or folder.parent == folder:
                break
            folder = folder.parent


def resumed_config(
    config: TrainConfig, keeper: CheckpointKeeper, resume: bool
) -> tuple[TrainConfig, dict[str, Any] | None, Path | None]:
    """The config to run (the checkpoint's, with this launch's :data:`PER_LAUNCH_FIELDS`) and
    the checkpoint to continue from (and its path), when resuming and there is one."""
    found = keeper.latest() if resume else None
    if found is None:
        if resume:
            log.info("nothing to resume in %s: starting afresh", config.out)
        return config, None, None
    path, ckpt = found
    with incompatible_checkpoint(path):
        saved = TrainConfig.from_dict(ckpt["config"])
    config = replace(saved, **{f: getattr(config, f) for f in PER_LAUNCH_FIELDS})
    log.info("resuming from %s (step %d)", path, ckpt["step"])
    return config, ckpt, path


def load_run_splits(config: TrainConfig, ctx: DistContext) -> Any:
    """The run's :class:`~graphormer_urpe.datasets.DatasetSplits`: one process per machine
    builds any missing store, the others then read it; an empty split is an error."""
    if ctx.local_rank == 0:
        splits = load_splits(config)
    ctx.barrier()
    if ctx.local_rank != 0:
        splits = load_splits(config)
    for name in ("train", "valid", "test"):
        if len(getattr(splits, name)) == 0:
            raise ValueError(f"the {name} split of {splits.name} is empty")
    return splits


def build_run_model(
    config: TrainConfig, ckpt: dict[str, Any] | None, splits: Any, notes: list[str]
) -> tuple[Graphormer, Any]:
    """The model (from ``--init-from`` on a fresh run) and ``--init-from``'s report (else
    ``None``); a fresh run's model standardises its targets when asked (:func:`target_scaling`,
    whose line goes to ``notes``)."""
    if config.init_from and ckpt is None:
        from .pretrained import init_from_checkpoint

        model, report = init_from_checkpoint(
            config.init_from,
            config.model,
            splits.featurizer,
            splits.num_targets,
            splits.num_mol_features,
        )
    else:
        model = build_model(
            config.model, splits.featurizer, splits.num_targets, splits.num_mol_features
        )
        report = None
    if ckpt is None:  # a resumed run keeps the scaling it started with (in its config)
        model.set_target_scaling(*target_scaling(config, splits, notes))
    return model, report


def target_scaling(
    config: TrainConfig, splits: Any, notes: list[str]
) -> tuple[list[float] | None, ...]:
    """The training targets' mean and standard deviation ``[T]`` each when the run
    standardises its targets (``normalize_targets``), else ``(None, None)``; the line that
    says so goes to ``notes``."""
    on = config.normalize_targets
    if on is None:
        on = names_table(splits.name)
    if not on or splits.task_type != "regression":
        return None, None
    y = dataset_targets(splits.train).double()  # [N, T], NaN: missing
    mean = torch.nan_to_num(torch.nanmean(y, dim=0))
    std = torch.sqrt(torch.nanmean((y - mean).square(), dim=0))
    std = torch.where(torch.isfinite(std) & (std > 1e-8), std, torch.ones_like(std))
    notes.append(
        f"targets standardised with the training split's mean "
        f"{', '.join(f'{v:.4g}' for v in mean.tolist())} and std "
        f"{', '.join(f'{v:.4g}' for v in std.tolist())} (--no-normalize-targets turns this off)"
    )
    return mean.tolist(), std.tolist()


def domain_record(splits: Any, clock: Clock, notes: list[str]) -> dict[str, Any] | None:
    """What the training molecules are made of, in the checkpoint form that ``predict``
    compares new molecules with (:mod:`~graphormer_urpe.datasets.domain`); its line goes to
    ``notes``."""
    from ..datasets.domain import domain_record as record_of

    start = clock()
    record = record_of(splits.train, splits.featurizer)
    if record is None:
        return None
    notes.append(f"domain record ({clock() - start:.1f} s): {record.summary()}")
    return record.to_dict()


def fit_trees(
    launch: RunLaunch, splits: Any, model: Graphormer, fresh: bool, notes: list[str]
) -> RunTrees:
    """The run's trees head, fitted before the first step (:mod:`.run_trees`), drawing
    nothing from the global RNG that the network's training then lacks; its line goes to
    ``notes``."""
    config = launch.config
    starting = fresh and config.init_from is not None
    with torch.random.fork_rng(devices=[]):
        trees = fit_run_trees(
            splits, model, launch.out, config.seed, starting, config.batch_size, launch.precision
        )
    graph_token = f", the starting model's graph token [{trees.trees.embedding_dim}]"
    notes.append(
        f"trees head ({trees.seconds:.1f} s): LightGBM on descriptors, "
        f"{', '.join(trees.trees.fingerprints)} fingerprints"
        f"{graph_token if trees.trees.embedding_dim else ''}; blended on the validation split"
    )
    return trees


BackendChoice = Callable[[TrainConfig, DistContext, Precision], "CaptureBackend | None"]
"""How a run chooses to capture its steps (:func:`capture_backend`; tests give their own)."""


def capture_backend(
    config: TrainConfig, ctx: DistContext, precision: Precision
) -> CaptureBackend | None:
    """How steps are captured (``config.capture``), or ``None``: eagerly."""
    if not config.capture or ctx.device.type != "cuda":
        return None
    reason = (
        "several processes"
        if ctx.enabled
        else "--compile"
        if config.compile
        else "fp16, whose grad scaler decides on the host"
        if precision.kind == "fp16"
        else None
    )
    if reason is not None:
        log.info("training steps run eagerly (not captured as CUDA graphs): %s", reason)
        return None
    return default_backend(ctx.device)


def make_run_data(
    launch: RunLaunch,
    splits: Any,
    model: Graphormer,
    static: bool,
    domain: dict[str, Any] | None,
    metric: str,
) -> RunData:
    """The loaders (``static``: batches of static shapes, for captured steps), the loss, the
    selection ``metric``'s direction, the evaluation targets and the mean predictor's metric."""
    from ..datasets import graph_sizes

    config, ctx, device = launch.config, launch.ctx, launch.device
    workers = loader_workers(config.num_workers, device)
    static_batch = config.batch_size if static else None
    collate = make_collator(model.config, device, static_batch, config.max_tokens)
    by_size = bool(config.bucket_size) or config.max_tokens is not None
    sampler = EpochBatchSampler(
        len(splits.train), config.batch_size, shuffle=True, seed=config.seed,
        num_replicas=ctx.world_size, rank=ctx.rank,
        sizes=graph_sizes(splits.train) if by_size else None,  # [n_train]
        bucket_size=config.bucket_size, max_tokens=config.max_tokens,
        length=token_length,  # the same batches whether the run captures or not
    )  # fmt: skip
    train_loader = DataLoader(
        splits.train, batch_sampler=sampler, collate_fn=collate, num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=False,  # a new epoch may start mid-way (resume)
        generator=torch.Generator(),  # the loader never draws from the global RNG
    )  # fmt: skip
    eval_loaders = {
        name: split_loader(
            getattr(splits, name),
            model.config,
            config.batch_size,
            ctx,
            workers,
            static,
            config.max_tokens,
        )  # fmt: skip
        for name in ("valid", "test")
    }
    # binary tasks: one logit per task and BCE; the metric's direction decides "best"
    loss_kind = "bce" if splits.task_type == "binary" else config.loss
    scale = model.target_std if model.config.target_std is not None else None
    mean = torch.nanmean(dataset_targets(splits.train), dim=0, keepdim=True)  # [1, T]
    data = RunData(
        splits, domain, sampler, train_loader, eval_loaders, collate, loss_kind, scale,
        metric, splits.higher_is_better, mean, {}, {}, True,
    )  # fmt: skip
    _targets_and_baselines(data)
    return data


def _targets_and_baselines(data: RunData) -> None:
    """Fill ``data``'s evaluation targets and the mean predictor's metric per split."""
    splits = data.splits
    for name in data.eval_loaders:
        y = data.targets[name] = dataset_targets(getattr(splits, name))
        if name == "test" and not bool(torch.isfinite(y).any()):
            data.test_labelled, data.baseline[name] = False, None  # e.g. PCQM4Mv2 test-dev
            log.info("the test split of %s has no labels: no test metric", splits.name)
            continue
        data.baseline[name] = splits.evaluate(data.mean.expand_as(y), y)[data.metric]


def make_stepper(
    launch: RunLaunch,
    data: RunData,
    backend: CaptureBackend | None,
    net: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    totals: StepTotals,
    precision: Precision,
) -> CapturedStep:
    """A training step of ``net`` (captured per batch shape when ``backend`` is given)."""
    config = launch.config

    def body(batch: GraphormerBatch, set_to_none: bool, step: int | Tensor) -> Tensor:
        return step_body(
            net, batch, optimizer, precision, totals, step, data.loss_kind,
            config.clip_norm, data.loss_scale, set_to_none, autocast_cache=set_to_none,
        )  # fmt: skip

    # a failed step is redone eagerly, except under several processes: their gradient
    # exchange would be left half done
    return CapturedStep(
        optimizer, scheduler, body, launch.device, backend,
        keep=totals.tensors(), retry=not launch.ctx.enabled,
    )  # fmt: skip


def make_run_optimizer(
    config: TrainConfig,
    model: Graphormer,
    ckpt: dict[str, Any] | None,
    ckpt_path: Path | None,
    warmup: int,
    total: int,
    device: torch.device,
) -> RunOptimizer:
    """AdamW (one group, as the run began, when it is resumed from a checkpoint written
    before URPE's C had its own weight-decay group) and its re-plannable schedule."""
    groups = parameter_groups(model, config.weight_decay, config.urpe_weight_decay)
    saved_groups = ckpt.get("optimizer", {}).get("param_groups", []) if ckpt else []
    if len(saved_groups) == 1 < len(groups):
        log.warning(
            "%s was written before URPE's C had its own weight-decay group: this run "
            "continues with one group (weight decay %g on C too), as it started",
            ckpt_path,
            config.weight_decay,
        )
        groups = list(model.parameters())
    optimizer = make_optimizer(groups, config.lr, config.weight_decay)
    # a re-plannable linear_schedule (see RunBudget.replan); checkpoints keep it (a restored
    # one replaces it: the scheduler reads the optimizer's current schedule)
    schedule = Schedule(warmup, total, config.lr, config.end_lr)
    run = RunOptimizer(optimizer, schedule, StepTotals(device))
    run.scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: run.schedule(s) / config.lr
    )
    return run


def wrap_model(model: nn.Module, config: TrainConfig, ctx: DistContext) -> nn.Module:
    """``model`` as trained: in DDP under several processes, compiled with ``--compile``."""
    net = model
    if ctx.enabled:
        cuda = ctx.device.type == "cuda"
        net = nn.parallel.DistributedDataParallel(model, device_ids=[ctx.device] if cuda else None)
    if config.compile:
        net = torch.compile(net, dynamic=True)
    return net
