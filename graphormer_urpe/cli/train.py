"""``graphormer-urpe train`` and ``pretrain``: their flags into a
:class:`~graphormer_urpe.training.TrainConfig`, then the library's training loop."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys

from .flags import (
    _add_data_flags,
    _add_model_flags,
    _add_run_flags,
    _add_training_flags,
    _command,
    _print_json,
    _shared,
    positive_int,
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
    """The :class:`~graphormer_urpe.training.TrainConfig` of ``graphormer-urpe train ARGS``.

    Every flag typed (its value is not ``None``) beats the preset, or the saved config of
    ``--config``; the model's attention is URPE unless ``--attention`` or the saved config
    says otherwise.
    """
    from ..runtime.config import make_config, override_config, read_config

    model_over, over = _overrides(args)
    keep = {f.name for f in dataclasses.fields(_train_config_cls())} - {"model", "preset"}
    given = {k: v for k, v in over.items() if k in keep and v is not None}
    if args.no_clip:
        given["clip_norm"] = 0.0
    if args.config:
        if args.preset is not None:
            raise ValueError(
                f"--preset cannot be combined with --config: {args.config} names its preset"
            )
        cfg = override_config(read_config(args.config), model_over, **given)
        if "out" not in given and not args.resume and _holds_run(cfg.out):
            raise ValueError(
                f"{cfg.out} already holds the run of {args.config}; pass --out to repeat it "
                "elsewhere (or --resume to continue it)"
            )
        return cfg
    if model_over.get("attention") is None:
        model_over["attention"] = "urpe"
    cfg = make_config(args.preset or "small", model_overrides=model_over, **given)
    if cfg.time_limit is not None and not {"epochs", "max_steps"} & set(given):
        cfg = dataclasses.replace(cfg, fill_time_limit=True)  # steps planned to fill it
    if "out" not in given:
        tag = "".join(c if c.isalnum() or c in "-_." else "_" for c in _dataset_tag(cfg.dataset))
        out = os.path.join("runs", f"{tag}-{cfg.preset}-{cfg.model.attention}")
        cfg = dataclasses.replace(cfg, out=out)
    return cfg


def _dataset_tag(dataset: str) -> str:
    """A run folder's name for ``dataset``: a CSV's or SD file's stem (``csv:data/mols.csv``
    -> ``mols``; three files: the first's), else the dataset's name."""
    from ..datasets.spec import names_table, parse_dataset_spec

    if not names_table(dataset):
        return dataset
    spec = parse_dataset_spec(dataset)
    name = os.path.basename(spec.paths[0])
    for suffix in (".gz", ".csv", ".smi", ".txt", ".sdf"):
        name = name.removesuffix(suffix)
    return name or spec.kind


def _holds_run(out: str) -> bool:
    return any(os.path.exists(os.path.join(out, f)) for f in ("metrics.json", "last.pt"))


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
        from ..datasets.table_head import check_table_head

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
    _print_json(metrics)
    from ..inference.intervals.calibration import coverage_lines

    for line in coverage_lines(metrics):  # how the intervals held on the test molecules
        print(f"graphormer-urpe: {line}", file=sys.stderr)
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


def _train_config_cls():
    from ..runtime.config import TrainConfig

    return TrainConfig


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, "train", run_train)
    p.add_argument(
        "--config",
        metavar="CONFIG_JSON",
        help="repeat a run: start from its saved config.json (flags typed with it override "
        "its fields; --out is needed when its output folder already holds the run)",
    )
    _add_data_flags(p)
    _add_training_flags(p)
    r = _add_run_flags(p)
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
    _add_model_flags(p)


def run_pretrain(args: argparse.Namespace) -> int:
    """self-supervised pretraining on any SMILES file (RDKit descriptor targets)

    Pretrain a URPE-Graphormer on the RDKit 2D descriptors of the molecules of a SMILES
    file: multi-target regression on the normalised descriptors (smooth L1 by default, mean
    over descriptors), with the training loop, checkpoints, --resume, --time-limit, torchrun
    and presets of train. The molecules and their descriptors are cached in a store (built
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
    return _print_json(metrics)


def _add_pretrain(sub: argparse._SubParsersAction) -> None:
    p = _command(sub, "pretrain", run_pretrain)
    p.set_defaults(config=None)
    d = p.add_argument_group("data")
    d.add_argument(
        "--input",
        required=True,
        help="SMILES file: .smi / .txt (one SMILES a line, a name may follow; .gz too) or "
        ".csv / .csv.gz with --smiles-column",
    )
    _shared(d, "--smiles-column", "--cache-dir")
    d.add_argument(
        "--preprocess-workers",
        type=positive_int,
        help="processes that build the store (featurisation + descriptors; default 1)",
    )
    d.add_argument("--split-seed", type=int, help="seed of the 98/1/1 random split (0)")
    d.add_argument(
        "--max-nodes",
        type=positive_int,
        metavar="N",
        help="leave training graphs above N atoms out (logged)",
    )
    _add_training_flags(p)
    _add_run_flags(p)
    _add_model_flags(p)
