"""``graphormer-urpe train`` and ``pretrain``: their flags into a
:class:`~graphormer_urpe.training.TrainConfig`, then the library's training loop."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys

from .flags import (
    add_command,
    add_data_flags,
    add_model_flags,
    add_run_flags,
    add_shared_flags,
    add_training_flags,
    positive_int,
    print_json,
)


def _overrides(args: argparse.Namespace) -> tuple[dict, dict]:
    model, train = {}, {}
    for k, v in vars(args).items():
        if k.startswith("model."):
            model[k[6:]] = v
        else:
            train[k] = v
    return model, train


def train_config(args: argparse.Namespace):
    """The :class:`~graphormer_urpe.training.TrainConfig` of ``graphormer-urpe train ARGS``:
    every flag typed (its value is not ``None``) beats the preset, or the saved config of
    ``--config`` (:func:`~graphormer_urpe.runtime.train_config.build_train_config`)."""
    from ..runtime.train_config import TrainConfig, build_train_config

    model_over, over = _overrides(args)
    keep = {f.name for f in dataclasses.fields(TrainConfig)} - {"model", "preset"}
    given = {k: v for k, v in over.items() if k in keep}
    if args.no_clip:
        given["clip_norm"] = 0.0
    return build_train_config(args.preset, args.config, model_over, args.resume, **given)


def _started(args: argparse.Namespace) -> float | None:
    """The moment ``--time-limit`` counts from (:func:`main` sets it)."""
    return getattr(args, "started", None)


def run_train(args: argparse.Namespace) -> int:
    """train a molecular property regressor

    Train Graphormer or URPE-Graphormer; select on the validation split, report the test
    metric at the best checkpoint. With no flags: the embedded NCI molecules (from RDKit)
    labelled with the ZINC target, the small preset, on the CPU in a few minutes. Preset
    values apply unless a flag overrides them."""
    if args.config is None and args.dataset:  # a table's head: checked before any import
        from ..datasets.sources.table_check import check_table_head

        check_table_head(args.dataset, args.smiles_column, args.target_columns, args.split_column)
    from ..training import train

    cfg = train_config(args)
    if args.ensemble > 1:
        from ..training.ensemble import train_ensemble

        metrics = train_ensemble(
            cfg, args.ensemble, args.resume, not args.no_progress, started=_started(args)
        )
    else:
        metrics = train(cfg, args.resume, not args.no_progress, started=_started(args))
    print_json(metrics)
    from ..inference.intervals.calibration import coverage_lines

    for line in coverage_lines(metrics):  # how the intervals held on the test molecules
        print(f"graphormer-urpe: {line}", file=sys.stderr)
    if "time_limit_for_asked" in metrics:  # fewer members than asked fitted
        from ..training.pacing import MIN_USEFUL_EPOCHS

        print(
            f"graphormer-urpe: trained {metrics['ensemble']} of the {metrics['ensemble_asked']} "
            f"members asked for, each {MIN_USEFUL_EPOCHS} epochs or more; --time-limit "
            f"{metrics['time_limit_for_asked']:g} or more trains all of them",
            file=sys.stderr,
        )
    print(f"graphormer-urpe: {where_written(cfg, args.ensemble > 1)}", file=sys.stderr)
    return 0


def where_written(cfg, ensemble: bool) -> str:
    """The last line of ``train``: the checkpoint it wrote (an ensemble: its folder) and the
    ``predict`` command that uses it, on the training file's molecules (``--smiles`` for
    the benchmarks)."""
    ckpt = cfg.out if ensemble else os.path.join(cfg.out, "best.pt")
    from ..datasets.spec import names_table, parse_dataset_spec

    if names_table(cfg.dataset):
        spec = parse_dataset_spec(cfg.dataset)
        source = ["--input", spec.paths[0]]
        if spec.kind == "csv" and cfg.smiles_column not in (None, "smiles"):
            source += ["--smiles-column", cfg.smiles_column]
    else:
        source = ["--smiles", "CCO"]
    command = ["graphormer-urpe", "predict", "--checkpoint", ckpt, *source, "--output", "pred.csv"]
    what = "the ensemble" if ensemble else "the best checkpoint"
    return f"{what} is {ckpt}; predict with: {shlex.join(command)}"


def add_train_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe train`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "train", run_train)
    p.add_argument(
        "--config",
        metavar="CONFIG_JSON",
        help="repeat a run: start from its saved config.json (flags typed with it override "
        "its fields; --out is needed when its output folder already holds the run)",
    )
    add_data_flags(p)
    add_training_flags(p)
    r = add_run_flags(p)
    r.add_argument(
        "--init-from",
        metavar="CHECKPOINT",
        help="fine-tune: start from this checkpoint's weights: 'pretrained' (the shipped "
        "small URPE model pretrained on MOSES molecules), a checkpoint of this library (e.g. "
        "from graphormer-urpe convert or pretrain), or a Hugging Face folder; its "
        "architecture, this run's dropouts and --attention; the output layer is "
        "re-initialised when the number of outputs differs",
    )
    r.add_argument(
        "--ensemble",
        type=positive_int,
        default=1,
        metavar="K",
        help="train K members with seeds SEED..SEED+K-1 into OUT/member-<i> and score their "
        "mean on the test split; predict --checkpoint OUT then writes the mean and, as an "
        "uncertainty, the members' standard deviation (default 1: one model)",
    )
    add_model_flags(p)


def run_pretrain(args: argparse.Namespace) -> int:
    """self-supervised pretraining on any SMILES file (RDKit descriptor targets)

    Pretrain a URPE-Graphormer on the RDKit 2D descriptors of the molecules of a SMILES
    file: multi-target regression on the normalised descriptors (smooth L1 by default, mean
    over descriptors), with the training loop, checkpoints, --resume, --time-limit, torchrun
    and presets of train. The molecules and their descriptors are kept in a store (built
    once, in parallel with --preprocess-workers); a random 1%% of the molecules selects the
    best checkpoint, another 1%% is the test split. The checkpoints record the descriptor
    names, their normalisation and the RDKit version; fine-tune with train --init-from
    OUT/best.pt (the head is reset)."""
    from ..training import train

    args.dataset = f"pretrain:{args.input}"
    if args.loss is None:
        args.loss = "smooth_l1"
    if args.out is None:
        stem = os.path.basename(args.input).split(".")[0] or "smiles"
        args.out = os.path.join("runs", f"pretrain-{stem}-{args.preset or 'small'}")
    metrics = train(train_config(args), args.resume, not args.no_progress, started=_started(args))
    return print_json(metrics)


def add_pretrain_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe pretrain`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "pretrain", run_pretrain)
    p.set_defaults(config=None)
    d = p.add_argument_group("data")
    d.add_argument(
        "--input",
        required=True,
        help="SMILES file: .smi / .txt (one SMILES a line, a name may follow; .gz too) or "
        ".csv / .csv.gz with --smiles-column",
    )
    add_shared_flags(
        d,
        "--smiles-column",
        "--store-dir",
        "--preprocess-workers",
        "--split-seed",
        "--max-nodes",
        preprocess_workers={
            "help": "processes that build the store (featurisation + descriptors; default 1)"
        },
        split_seed={"help": "seed of the 98/1/1 random split (0)"},
        max_nodes={"help": "leave training graphs above N atoms out (logged)"},
    )
    add_training_flags(p)
    add_run_flags(p)
    add_model_flags(p)
