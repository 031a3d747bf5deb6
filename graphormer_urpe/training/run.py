"""A training run: AdamW, linear warm-up + linear decay, masked L1/MSE/BCE, best-checkpointing.

:func:`train` runs a whole experiment from a
:class:`~graphormer_urpe.runtime.train_config.TrainConfig` and writes into ``config.out``:

* ``config.json``: the resolved config (model included)
* ``history.csv``: one row per evaluated epoch (TensorBoard events too when installed)
* ``checkpoints/step-<step>.pt``: rolling checkpoints (the newest ``keep_checkpoints``), written
  at every epoch end and every ``checkpoint_every`` steps, each holding model, optimizer,
  scheduler, grad scaler, every process's RNG states and the data position (epoch, batch);
  ``last.pt`` is the newest of them and ``best.pt`` the best validation epoch (all atomic,
  loaded with ``torch.load(weights_only=True)``). SIGTERM / SIGINT save one at the current
  step before stopping; ``resume=True`` continues exactly where a checkpoint left off.
* ``metrics.json``: dataset, attention, preset, parameters, steps, epochs,
  ``best_valid_<metric>``, ``test_<metric>`` at the best checkpoint (only when the test split
  has labels: ``test_has_labels``), the mean-predictor baseline, wall time and training graphs
  per second.

A pretraining set (``pretrain:PATH``, see :mod:`graphormer_urpe.datasets.sources.pretrain`) is
trained like any multi-target regression; its checkpoints also hold ``"pretrain"`` (the descriptor
names, their normalisation and the RDKit version), and its test split writes no
``test_predictions.csv``.

The dataset decides the loss and the selection rule: ``task_type == "binary"`` trains one
logit per task with BCE (missing labels masked), otherwise ``config.loss`` (by default MSE for
``csv:`` datasets, selected on RMSE, and L1 for the benchmarks, selected on their metric); the
best checkpoint maximises the metric when ``higher_is_better`` (ROC-AUC, AP) and minimises it
otherwise. A ``csv:`` regression also standardises its targets (``normalize_targets``): the
model's head predicts ``(y - mean) / std`` of the training split, the loss is taken in those
units, and the model returns predictions in the targets' own.

A run is a :class:`~graphormer_urpe.training.trainer.Trainer`, made of parts of one concept
each (its budget, plan line, checkpoints, epoch loop and report); the step is in
:mod:`.steps`, the loaders, predictions and the run's inputs in
:mod:`graphormer_urpe.runtime` and :mod:`graphormer_urpe.inference`, and the names listed in
``__all__`` stay importable from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..attention.kernel_choice import attention_kernel
from ..inference.prediction import predict, predict_dataset
from ..io.checkpoint import TrainingInterrupted, stop_requests
from ..runtime.distributed import init_distributed
from ..runtime.loaders import make_loader
from ..runtime.precision import Precision
from ..runtime.run_inputs import (
    build_model,
    dataset_targets,
    load_splits,
    resolve_device,
    seed_everything,
    selection_metric,
)
from ..runtime.train_config import TrainConfig
from .pacing import NoTimeToTrain, RunCosts
from .steps import (
    StepTotals,
    linear_schedule,
    make_optimizer,
    masked_loss,
    parameter_groups,
    step_body,
    train_step,
)
from .trainer import Trainer

__all__ = [
    "train",
    "Trainer",
    "TrainingInterrupted",
    "stop_requests",
    "predict",
    "masked_loss",
    "linear_schedule",
    "resolve_device",
    "Precision",
    "build_model",
    "make_optimizer",
    "parameter_groups",
    "load_splits",
    "make_loader",
    "dataset_targets",
    "seed_everything",
    "selection_metric",
    "train_step",
    "step_body",
    "predict_dataset",
    "StepTotals",
]


def train(
    config: TrainConfig,
    resume: bool = False,
    progress: bool = True,
    started: float | None = None,
    costs: RunCosts | None = None,
    check: Callable[[Trainer], None] | None = None,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, Any]:
    """Train, select on the validation split, test at the best checkpoint; see module doc.

    Under ``torchrun`` (``WORLD_SIZE > 1`` in the environment) this runs distributed data
    parallel: ``config.batch_size`` graphs per process and step, metrics over whole splits,
    rank 0 writing everything.

    Args:
        config: the run.
        resume: continue from the newest checkpoint in ``config.out`` when there is one (the
            saved config wins, except for ``out``, ``device`` and the checkpointing fields).
        progress: show a tqdm progress bar.
        started: the ``time.perf_counter()`` from which ``config.time_limit`` counts (default:
            now; the command line passes its own start).
        costs: the run's costs measured earlier (an ensemble measures once); ``None``:
            measured here where needed (:class:`~graphormer_urpe.training.pacing.RunCosts`).
        check: called with the set-up :class:`~graphormer_urpe.training.trainer.Trainer`
            before its first step (it may refuse the plan by raising).
        on_epoch: called after each validated epoch, once its history row and checkpoint
            are written, with the epoch and every validation metric of it (the selection
            metric among them) and ``progress``, the share of the planned steps done; an
            exception it raises ends the run there and reaches the
            caller (a hyper-parameter search prunes a trial this way).

    Returns:
        The ``metrics.json`` contents (``measured_costs`` among them).

    Raises:
        TrainingInterrupted: SIGTERM or SIGINT arrived; a checkpoint was saved first.
        RuntimeError: the loss became non-finite (the last good state is in ``nonfinite.pt``).
        NoTimeToTrain: the time limit went to loading the data and measuring.
    """
    ctx = init_distributed(resolve_device(config.device))
    try:
        with stop_requests() as stop, attention_kernel(config.attention_kernel):
            trainer = Trainer(
                config, ctx, stop, resume=resume, started=started, costs=costs, on_epoch=on_epoch
            )
            if check is not None:
                check(trainer)
            if trainer.no_time is not None:
                trainer.discard()
                raise NoTimeToTrain(trainer.no_time)
            return trainer.run(progress)
    finally:
        ctx.close()
