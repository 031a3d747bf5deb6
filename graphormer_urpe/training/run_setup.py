"""Setting up a training run: the config to run (a checkpoint's when resuming), the data,
the model, the loaders, the optimizer and schedule, the targets and the baselines."""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from ..datasets.spec import names_table
from ..graph.batch import GraphormerBatch, GraphormerCollator
from ..graph.model import Graphormer
from ..graph.shapes import token_length
from ..io.checkpoint import incompatible_checkpoint
from ..runtime.capture import CaptureBackend, CapturedStep, default_backend
from ..runtime.config import TrainConfig
from ..runtime.inputs import build_model, dataset_targets, load_splits
from ..runtime.loaders import _eval_loader, loader_workers
from ..runtime.loaders import make_collator as _collator
from ..runtime.precision import Precision
from ..runtime.sampler import EpochBatchSampler
from .budget import Schedule
from .run_state import RunState, log
from .run_trees import RunTrees, fit_run_trees
from .steps import StepTotals, make_optimizer, parameter_groups, step_body

__all__ = ["RunSetup", "first_missing"]


def first_missing(folder: Path) -> Path:
    """The topmost of ``folder`` and its parents that does not exist yet (``folder`` itself
    when it exists): what ``folder.mkdir(parents=True)`` creates."""
    made = folder.absolute()
    for parent in made.parents:
        if parent.exists():
            break
        made = parent
    return made


# Fields a resumed run takes from the new command line; all others come from the checkpoint.
_PER_LAUNCH_FIELDS = (
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


class RunSetup(RunState):
    """The set-up of a run (called by its ``__init__``) and :meth:`discard`, which undoes it."""

    def _resumed_config(
        self, config: TrainConfig, resume: bool
    ) -> tuple[TrainConfig, dict[str, Any] | None, Path | None]:
        """The config to run (the checkpoint's, with this launch's per-launch fields) and the
        checkpoint to continue from, when resuming and there is one."""
        found = self.keeper.latest() if resume else None
        if found is None:
            if resume:
                log.info("nothing to resume in %s: starting afresh", self.out)
            return config, None, None
        path, ckpt = found
        with incompatible_checkpoint(path):
            saved = TrainConfig.from_dict(ckpt["config"])
        config = replace(saved, **{f: getattr(config, f) for f in _PER_LAUNCH_FIELDS})
        log.info("resuming from %s (step %d)", path, ckpt["step"])
        return config, ckpt, path

    def _load_splits(self, config: TrainConfig):
        # one process per machine builds any missing store; the others then read it
        if self.ctx.local_rank == 0:
            splits = load_splits(config)
        self.ctx.barrier()
        if self.ctx.local_rank != 0:
            splits = load_splits(config)
        for name in ("train", "valid", "test"):
            if len(getattr(splits, name)) == 0:
                raise ValueError(f"the {name} split of {splits.name} is empty")
        return splits

    def _domain_record(self) -> dict[str, Any] | None:
        """What the training molecules are made of, in the checkpoint form that ``predict``
        compares new molecules with (:mod:`~graphormer_urpe.datasets.domain`)."""
        from ..datasets.domain import domain_record

        start = self.now()
        record = domain_record(self.splits.train, self.splits.featurizer)
        if record is None:
            return None
        seconds = self.now() - start
        self._after_plan.append(f"domain record ({seconds:.1f} s): {record.summary()}")
        return record.to_dict()

    def _build_model(
        self, config: TrainConfig, ckpt: dict[str, Any] | None
    ) -> tuple[Graphormer, Any]:
        splits = self.splits
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
            model.set_target_scaling(*self._target_scaling(config))
        return model.to(self.device), report

    def _fit_trees(self, config: TrainConfig, fresh: bool) -> RunTrees:
        """The run's trees head, fitted before the first step (:mod:`.run_trees`)."""
        starting = fresh and config.init_from is not None
        trees = fit_run_trees(
            self.splits,
            self.model,
            self.out,
            config.seed,
            starting,
            config.batch_size,
            self.precision,
        )
        graph_token = f", the starting model's graph token [{trees.trees.embedding_dim}]"
        self._after_plan.append(
            f"trees head ({trees.seconds:.1f} s): LightGBM on descriptors, Morgan counts"
            f"{graph_token if trees.trees.embedding_dim else ''}; blended on the validation split"
        )
        return trees

    def _target_scaling(self, config: TrainConfig) -> tuple[list[float] | None, ...]:
        """The training targets' mean and standard deviation ``[T]`` each when the run
        standardises its targets (``normalize_targets``), else ``(None, None)``."""
        splits = self.splits
        on = config.normalize_targets
        if on is None:
            on = names_table(splits.name)
        if not on or splits.task_type != "regression":
            return None, None
        y = dataset_targets(splits.train).double()  # [N, T], NaN: missing
        mean = torch.nan_to_num(torch.nanmean(y, dim=0))
        std = torch.sqrt(torch.nanmean((y - mean).square(), dim=0))
        std = torch.where(torch.isfinite(std) & (std > 1e-8), std, torch.ones_like(std))
        self._after_plan.append(
            f"targets standardised with the training split's mean "
            f"{', '.join(f'{v:.4g}' for v in mean.tolist())} and std "
            f"{', '.join(f'{v:.4g}' for v in std.tolist())} (--no-normalize-targets turns this off)"
        )
        return mean.tolist(), std.tolist()

    def discard(self) -> None:
        """Remove what setting up this run wrote (its folder, when nothing else is in it),
        for a run refused before its first step."""
        if not self.main:
            return
        self.history.close()
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

    def _capture_backend(self) -> CaptureBackend | None:
        """How steps are captured (``config.capture``), or ``None``: eagerly."""
        config = self.config
        if not config.capture or self.device.type != "cuda":
            return None
        reason = (
            "several processes"
            if self.ctx.enabled
            else "--compile"
            if config.compile
            else "fp16, whose grad scaler decides on the host"
            if self.precision.kind == "fp16"
            else None
        )
        if reason is not None:
            log.info("training steps run eagerly (not captured as CUDA graphs): %s", reason)
            return None
        return default_backend(self.device)

    def _stepper(
        self,
        net: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        totals: StepTotals,
        precision: Precision | None = None,
    ) -> CapturedStep:
        """A training step of ``net`` (captured per batch shape when the run captures)."""
        config, precision = self.config, precision or self.precision

        def body(batch: GraphormerBatch, set_to_none: bool, step: int | Tensor) -> Tensor:
            return step_body(
                net, batch, optimizer, precision, totals, step, self.loss_kind,
                config.clip_norm, self.loss_scale, set_to_none, autocast_cache=set_to_none,
            )  # fmt: skip

        # a failed step is redone eagerly, except under several processes: their gradient
        # exchange would be left half done
        return CapturedStep(
            optimizer, scheduler, body, self.device, self.backend,
            keep=totals.tensors(), retry=not self.ctx.enabled,
        )  # fmt: skip

    def _make_loaders(self) -> None:
        from ..datasets import graph_sizes

        config, splits, ctx = self.config, self.splits, self.ctx
        static = self.backend is not None
        self.workers = loader_workers(config.num_workers, self.device)
        collate = self._run_collator()
        by_size = bool(config.bucket_size) or config.max_tokens is not None
        self.sampler = EpochBatchSampler(
            len(splits.train),
            config.batch_size,
            shuffle=True,
            seed=config.seed,
            num_replicas=ctx.world_size,
            rank=ctx.rank,
            sizes=graph_sizes(splits.train) if by_size else None,  # [n_train]
            bucket_size=config.bucket_size,
            max_tokens=config.max_tokens,
            length=token_length,  # the same batches whether the run captures or not
        )
        self.train_loader = DataLoader(
            splits.train,
            batch_sampler=self.sampler,
            collate_fn=collate,
            num_workers=self.workers,
            pin_memory=self.device.type == "cuda",
            persistent_workers=False,  # a new epoch may start mid-way (resume)
            generator=torch.Generator(),  # the loader never draws from the global RNG
        )
        self.eval_loaders = {
            name: _eval_loader(
                getattr(splits, name),
                self.model.config,
                config.batch_size,
                ctx,
                self.workers,
                static,
                config.max_tokens,
            )
            for name in ("valid", "test")
        }

    def _run_collator(self) -> GraphormerCollator:
        """The collate function of the run's batches: static shapes when it captures (of
        ``batch_size`` graphs, or fitting ``max_tokens``)."""
        config = self.config
        static = config.batch_size if self.backend is not None else None
        return _collator(self.model.config, self.device, static, config.max_tokens)

    def _make_optimizer(
        self, ckpt: dict[str, Any] | None, ckpt_path: Path | None, warmup: int
    ) -> None:
        config = self.config
        groups = parameter_groups(self.model, config.weight_decay, config.urpe_weight_decay)
        saved_groups = ckpt.get("optimizer", {}).get("param_groups", []) if ckpt else []
        if len(saved_groups) == 1 < len(groups):
            log.warning(
                "%s was written before URPE's C had its own weight-decay group: this run "
                "continues with one group (weight decay %g on C too), as it started",
                ckpt_path,
                config.weight_decay,
            )
            groups = list(self.model.parameters())
        self.optimizer = make_optimizer(groups, config.lr, config.weight_decay)
        # a re-plannable linear_schedule (see replan); checkpoints keep it
        self.schedule = Schedule(warmup, self.total, config.lr, config.end_lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: self.schedule(s) / config.lr
        )

    def _targets_and_baselines(self) -> None:
        """Loss and selection rule, the evaluation targets and the mean predictor's metric."""
        splits = self.splits
        # binary tasks: one logit per task and BCE; the metric's direction decides "best"
        self.loss_kind = "bce" if splits.task_type == "binary" else self.config.loss
        scaled = self.model.config.target_std is not None
        self.loss_scale = self.model.target_std if scaled else None  # [T]: standardised loss
        self.higher = splits.higher_is_better
        self.mean = torch.nanmean(dataset_targets(splits.train), dim=0, keepdim=True)  # [1, T]
        self.targets: dict[str, Tensor] = {}
        self.baseline: dict[str, float | None] = {}
        self.test_labelled = True
        for name in self.eval_loaders:
            y = self.targets[name] = dataset_targets(getattr(splits, name))
            if name == "test" and not bool(torch.isfinite(y).any()):
                self.test_labelled, self.baseline[name] = False, None  # e.g. PCQM4Mv2 test-dev
                log.info("the test split of %s has no labels: no test metric", splits.name)
                continue
            self.baseline[name] = splits.evaluate(self.mean.expand_as(y), y)[self.metric]

    def _wrap(self, model: nn.Module) -> nn.Module:
        net = model
        if self.ctx.enabled:
            cuda = self.device.type == "cuda"
            net = nn.parallel.DistributedDataParallel(
                model, device_ids=[self.device] if cuda else None
            )
        if self.config.compile:
            net = torch.compile(net, dynamic=True)
        return net
