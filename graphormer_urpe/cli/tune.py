"""``graphormer-urpe tune``: its flags into a :class:`~graphormer_urpe.tuning.tune_config.
TuneConfig`, then the library's search (:func:`~graphormer_urpe.tuning.search.tune`)."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace

from .flags import (
    add_command,
    add_data_flags,
    add_shared_flags,
    flag_values,
    positive_int,
    print_json,
)

__all__ = ["run_tune", "tune_config"]

_DATA_FIELDS = (
    "dataset",
    "data_root",
    "store_dir",
    "preprocess_workers",
    "smiles_column",
    "target_columns",
    "split_column",
    "mol_features",
    "task",
    "split",
    "split_seed",
    "featurizer",
    "max_nodes",
    "strict",
)
_RUN_FIELDS = ("device", "threads", "num_workers", "precision")
_SEARCH_FIELDS = ("time_limit", "trials", "storage", "study", "final_ensemble", "epochs")
_SEARCH_FIELDS += ("trial_minutes",)
"""The flags that are fields of :class:`~graphormer_urpe.tuning.config.TuneConfig` by the
same name."""

OPTUNA_MISSING = "tune needs Optuna: pip install 'graphormer-urpe[tune]' (or pip install optuna)"


def tune_config(args: argparse.Namespace):
    """The :class:`~graphormer_urpe.tuning.tune_config.TuneConfig` of ``graphormer-urpe tune ARGS``
    and the data's short name: trials start from the ``small`` preset with URPE attention
    and the data and run flags given; a ``--mol-features``, ``--init-from`` or ``--loss``
    given is fixed, not searched."""
    from ..runtime.train_config import DEFAULT_ATTENTION, make_config, run_name
    from ..tuning.tune_config import TuneConfig

    given = flag_values(args, _DATA_FIELDS + _RUN_FIELDS)
    base = make_config("small", model_overrides={"attention": DEFAULT_ATTENTION}, **given)
    tag = run_name(base.dataset)
    config = TuneConfig(
        base=base,
        out=args.out or os.path.join("runs", f"tune-{tag}"),
        seed=args.sampler_seed,
        **flag_values(args, _SEARCH_FIELDS),
    )
    fixed = {"mol_features": args.mol_features, "init_from": args.init_from, "loss": args.loss}
    config.space = replace(config.space, **{k: (v,) for k, v in fixed.items() if v is not None})
    return config, tag


def run_tune(args: argparse.Namespace) -> int:
    """search hyper-parameters with Optuna (TPE, pruning), on one machine or many

    Search learning rate, weight decay, dropouts, layers, width, warm-up, batch size,
    --mol-features, --init-from pretrained and the regression loss (MSE or Huber; each of the
    last three fixed instead when given) with Optuna's TPE sampler, pruning trials on their
    per-epoch validation metric, all within --time-limit. OUT gets trials.csv, the best
    trial's config.json (train --config repeats it), history.png and importances.png. The
    study lives in OUT/study.db unless --storage names a shared database or journal file;
    running the same command again, or on other machines at once, continues the same
    study. Needs the tune extra (Optuna)."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise RuntimeError(OPTUNA_MISSING) from None
    from ..tuning.search import tune

    config, tag = tune_config(args)
    summary = tune(
        config, tag, progress=not args.no_progress, started=getattr(args, "started", None)
    )
    return print_json(summary)


def add_tune_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe tune`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "tune", run_tune)
    add_data_flags(p)
    s = p.add_argument_group("search")
    s.add_argument(
        "--time-limit",
        type=float,
        required=True,
        metavar="MINUTES",
        help="wall-clock budget of the whole command (trials, final ensemble, report); each "
        "trial gets an equal share",
    )
    s.add_argument(
        "--trials",
        type=int,
        metavar="N",
        help="stop once the study holds N finished trials (over every process working on "
        "it); default: as many as the time limit allows (each trial planned as 1/12 of it)",
    )
    s.add_argument(
        "--storage",
        metavar="URL",
        help="the study's storage: a database URL (postgresql://..., mysql://..., "
        "sqlite:///PATH) or an Optuna journal file path on a shared file system; "
        "default: OUT/study.db",
    )
    s.add_argument(
        "--study",
        metavar="NAME",
        help="the study's name (default: the data file's name and a hash of its content, "
        "targets and split); a name made for other data is refused",
    )
    s.add_argument(
        "--final-ensemble",
        type=int,
        default=0,
        metavar="K",
        help="then train K models of the best configuration into OUT/ensemble (its share of "
        "the time limit is kept for it)",
    )
    s.add_argument(
        "--epochs",
        type=positive_int,
        help="epochs per trial (default: each trial plans its steps to fill its share)",
    )
    s.add_argument(
        "--trial-minutes",
        type=float,
        metavar="MIN",
        help="each trial's (and ensemble member's) time; give the time the chosen recipe "
        "will train in, since a recipe is tuned for its budget (default: an equal share of "
        "--time-limit, 1/12 of it unless --trials is given)",
    )
    s.add_argument("--sampler-seed", type=int, help="seed of the TPE sampler (default: fresh)")
    s.add_argument(
        "--init-from",
        choices=["none", "pretrained"],
        help="fix the start instead of searching it: pretrained (the shipped model; its "
        "architecture, so layers and width are not searched) or none (from scratch)",
    )
    s.add_argument(
        "--loss",
        choices=["mse", "smooth_l1"],
        help="regression: fix the loss instead of searching it (MSE or Huber)",
    )
    r = p.add_argument_group("run")
    r.add_argument("--out", help="output folder (default runs/tune-DATASET)")
    add_shared_flags(r, "--device", "--no-progress")
    r.add_argument("--threads", type=positive_int, help="CPU threads for torch")
    add_shared_flags(r, "--num-workers", "--precision")
