"""The ``graphormer-urpe`` command: a thin layer over the library.

Every sub-command parses its flags into the library's config objects and calls library
functions; errors reach the user as one line (``graphormer-urpe: error: ...``) and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from itertools import chain
from typing import NoReturn

from ._clock import IMPORTED_AT  # the command's start: --time-limit counts from it

__all__ = ["main", "build_parser"]

log = logging.getLogger("graphormer_urpe")


def run_demo(args: argparse.Namespace) -> int:
    """Forward and backward pass of a URPE-Graphormer on real molecules (RDKit's NCI set)."""
    import torch
    from torch_geometric.data import Batch

    from .datasets import featurize_smiles
    from .datasets.nci import read_nci_smiles
    from .graph import Graphormer, GraphormerFeatures, get_preset
    from .graph.model import fit_tables

    torch.manual_seed(args.seed)
    features = GraphormerFeatures(multi_hop_max_dist=5)
    graphs = []
    for smi in read_nci_smiles(limit=4 * args.molecules):
        try:
            graphs.append(features(featurize_smiles(smi, "ogb")))
        except ValueError:  # a few NCI entries are not valid molecules for RDKit
            continue
        if len(graphs) == args.molecules:
            break
    batch = Batch.from_data_list(graphs)
    config = get_preset(args.preset, attention=args.attention, num_layers=args.layers)
    model = Graphormer(fit_tables(config, "ogb"))
    start = time.perf_counter()
    pred = model(batch)
    pred.square().mean().backward()
    seconds = time.perf_counter() - start
    report = {
        "molecules": len(graphs),
        "atoms": int(batch.num_nodes),
        "preset": args.preset,
        "attention": args.attention,
        "layers": args.layers,
        "parameters": sum(p.numel() for p in model.parameters()),
        "prediction_shape": list(pred.shape),
        "forward_backward_seconds": round(seconds, 3),
    }
    print(json.dumps(report, indent=2))
    return 0


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="forward + backward pass on real molecules (no download needed)",
        description="Run a URPE-Graphormer forward and backward pass on molecules from the NCI "
        "set that ships with RDKit, and print a JSON summary.",
    )
    p.add_argument("--molecules", type=int, default=64, help="number of molecules (default 64)")
    p.add_argument("--preset", default="pcqm4mv2-base", help="model preset (default pcqm4mv2-base)")
    p.add_argument(
        "--attention", choices=["graphormer", "urpe"], default="urpe", help="attention kind"
    )
    p.add_argument("--layers", type=int, default=2, help="number of layers (default 2)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.set_defaults(func=run_demo)


MODEL_HELP = {
    "num_layers": "transformer layers L",
    "hidden_dim": "model width d",
    "ffn_dim": "feed-forward hidden width",
    "num_heads": "attention heads H",
    "dropout": "dropout on residual branches",
    "attention_dropout": "dropout on attention probabilities (after URPE's C)",
    "input_dropout": "dropout on the input embeddings",
    "activation_dropout": "dropout after the feed-forward GELU",
    "num_atoms": "rows of the node-feature embedding table",
    "num_degree": "rows of each degree embedding table",
    "num_edges": "rows of the bond-feature embedding table",
    "num_spatial": "rows of the spatial (shortest-path) bias table",
    "num_edge_dis": "number of per-hop HxH edge-encoding matrices",
    "multi_hop_max_dist": "hops of path bond features kept (20 for ZINC, 5 for PCQM4M)",
    "spatial_pos_max": "mask pairs at shortest-path distance >= this",
    "attention": "graphormer (plain RPE) or urpe (adds the learned C)",
    "urpe_num_buckets": "rows of each URPE C table (distances beyond share the last)",
    "urpe_share_layers": "one URPE C table for all layers instead of one per layer",
    "num_targets": "outputs of the head (set from the dataset when training)",
    "num_mol_features": "per-molecule features joined before the head (set by --mol-features)",
    "pre_ln": "pre-LN layers (default; --no-pre-ln: post-LN as in Graphormer v2)",
    "embedding_norm": "LayerNorm on the input embeddings (Graphormer v2)",
    "final_norm": "LayerNorm after the last layer (default; Graphormer v2 has none)",
    "embed_scale": "multiply the input embeddings by this",
    "head": "linear (default) or transform: Graphormer v2's LN(GELU(Linear)) -> Linear head",
}


_SET_BY_THE_DATA = ("num_targets", "num_mol_features", "target_mean", "target_std")
"""Model fields a run sets from its dataset (``--normalize-targets`` decides the scaling)."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    from .graph.config import GraphormerConfig

    g = p.add_argument_group("model (override the preset's architecture)")
    for f in dataclasses.fields(GraphormerConfig):
        if f.name in _SET_BY_THE_DATA:
            continue
        kw: dict = {"dest": f"model.{f.name}", "default": None, "help": MODEL_HELP[f.name]}
        if f.name == "attention":
            kw["choices"] = ["graphormer", "urpe"]
        elif f.name == "head":
            kw["choices"] = ["linear", "transform"]
        elif f.type in ("bool", bool):
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = {"int": int, "float": float, "float | None": float}.get(str(f.type), str)
            kw["metavar"] = f.name.split("_")[-1].upper() if kw["type"] is not str else "VALUE"
        g.add_argument(_flag(f.name), **kw)


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
    from .training.config import make_config, override_config, read_config

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
    """A run folder's name for ``dataset``: a CSV's file stem (``csv:data/mols.csv`` ->
    ``mols``; three files: the first's), else the dataset's name."""
    if not dataset.startswith("csv:"):
        return dataset
    first = dataset[4:].split(",")[0].strip()
    name = os.path.basename(first)
    for suffix in (".gz", ".csv", ".smi", ".txt"):
        name = name.removesuffix(suffix)
    return name or "csv"


def _holds_run(out: str) -> bool:
    return any(os.path.exists(os.path.join(out, f)) for f in ("metrics.json", "last.pt"))


def _started(args: argparse.Namespace) -> float | None:
    """The moment ``--time-limit`` counts from (:func:`main` sets it)."""
    return getattr(args, "started", None)


def run_train(args: argparse.Namespace) -> int:
    """``graphormer-urpe train``."""
    from .training import train

    cfg = train_config(args)
    if args.ensemble > 1:
        from .training.ensemble import train_ensemble

        metrics = train_ensemble(
            cfg, args.ensemble, args.resume, not args.no_progress, started=_started(args)
        )
    else:
        metrics = train(cfg, args.resume, not args.no_progress, started=_started(args))
    print(json.dumps(metrics, indent=2))
    return 0


def _train_config_cls():
    from .training import TrainConfig

    return TrainConfig


_CACHE_DIR_HELP = (
    "folder of the dataset stores (default $GRAPHORMER_URPE_CACHE, else ~/.cache/graphormer-urpe)"
)

_FLAGS: dict[str, dict] = {
    "--device": {"default": None, "help": "auto (default), cpu, cuda, cuda:N"},
    "--no-progress": {"action": "store_true", "help": "no progress bar"},
    "--cache-dir": {"default": None, "help": _CACHE_DIR_HELP},
    "--checkpoint": {"required": True, "help": "a best.pt or last.pt file"},
    "--data-root": {"default": None, "help": "dataset folder, if it moved"},
    "--smiles-column": {"default": None, "help": "CSV: SMILES column (default smiles)"},
    "--target-columns": {"nargs": "+", "default": None, "help": "CSV: target column(s)"},
    "--split-column": {"default": None, "help": "CSV: column holding train/valid/test"},
    "--batch-size": {"type": int, "default": None, "help": "graphs per batch"},
}
"""The flags several sub-commands share, defined once (a command may change a default or
the help where its meaning differs)."""


def _shared(parser: argparse._ActionsContainer, *flags: str, **changes: dict) -> None:
    """Add the shared ``flags`` to ``parser`` (a parser or an argument group), in order;
    ``changes`` by flag name without dashes (``smiles_column={"default": "smiles"}``)."""
    for flag in flags:
        change = changes.get(flag[2:].replace("-", "_"), {})
        parser.add_argument(flag, **{**_FLAGS[flag], **change})


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a molecular property regressor",
        description="Train Graphormer or URPE-Graphormer; select on the validation split, "
        "report the test metric at the best checkpoint. With no flags: the embedded NCI "
        "molecules (from RDKit) labelled with the ZINC target, the small preset, on the CPU "
        "in a few minutes. Preset values apply unless a flag overrides them.",
    )
    p.add_argument(
        "--config",
        default=None,
        metavar="CONFIG_JSON",
        help="repeat a run: start from its saved config.json (flags typed with it override "
        "its fields; --out is needed when its output folder already holds the run)",
    )
    d = p.add_argument_group("data")
    d.add_argument(
        "--dataset",
        default=None,
        help="nci5k (embedded, default), zinc (ZINC-subset), zinc-full, csv:PATH "
        "(or csv:TRAIN,VALID,TEST), pcqm4mv2 or pcqm4m (OGB-LSC; run preprocess first), "
        "ogbg-molhiv, ogbg-molpcba or another ogbg-mol* set",
    )
    root = {"help": "folder of downloaded datasets (default data/<name>)"}
    _shared(d, "--data-root", "--cache-dir", data_root=root)
    d.add_argument(
        "--preprocess-workers",
        type=int,
        default=None,
        help="processes that build a missing dataset store (default 1)",
    )
    _shared(d, "--smiles-column", "--target-columns", "--split-column")
    d.add_argument(
        "--mol-features",
        choices=["none", "rdkit2d"],
        default=None,
        help="CSV: rdkit2d joins each molecule's 202 RDKit 2D descriptors (normalised on the "
        "training split, cached in the store) to the graph representation before the head, "
        "as Chemprop's rdkit_2d_normalized features; predict computes them too; default none",
    )
    d.add_argument(
        "--task",
        choices=["regression", "classification"],
        default=None,
        help="CSV: classification reads the targets as binary labels 0/1 (BCE, one logit per "
        "target, selected on ROC-AUC, PRC-AUC reported; predict writes probabilities); "
        "default regression",
    )
    d.add_argument(
        "--split",
        choices=["random", "scaffold"],
        default=None,
        help="CSV without split column: seeded random or scaffold split 80/10/10",
    )
    d.add_argument("--split-seed", type=int, default=None, help="seed of the random split (0)")
    d.add_argument(
        "--featurizer",
        choices=["zinc", "ogb"],
        default=None,
        help="CSV: ZINC atom types or OGB features (default ogb)",
    )
    d.add_argument(
        "--max-nodes",
        type=int,
        default=None,
        metavar="N",
        help="leave training graphs above N atoms out (logged); valid/test graphs are always kept",
    )
    d.add_argument(
        "--strict",
        action="store_true",
        default=None,
        help="stop at the first invalid SMILES instead of skipping it",
    )
    _add_training_flags(p)
    r = _add_run_flags(p)
    r.add_argument(
        "--init-from",
        default=None,
        metavar="CHECKPOINT",
        help="fine-tune: start from this checkpoint's weights: 'pretrained' (the shipped "
        "small URPE model pretrained on MOSES molecules), a checkpoint of this library (e.g. "
        "from graphormer-urpe convert or pretrain), or a Hugging Face folder; its "
        "architecture, this run's dropouts and --attention; the output layer is "
        "re-initialised when the number of outputs differs",
    )
    r.add_argument(
        "--ensemble",
        type=int,
        default=1,
        metavar="K",
        help="train K members with seeds SEED..SEED+K-1 into OUT/member-<i> and score their "
        "mean on the test split; predict --checkpoint OUT then writes the mean and, as an "
        "uncertainty, the members' standard deviation (default 1: one model)",
    )
    _add_model_flags(p)
    p.set_defaults(func=run_train)


def _add_training_flags(p: argparse.ArgumentParser) -> None:
    """The optimisation flags of ``train`` and ``pretrain``."""
    t = p.add_argument_group("training")
    t.add_argument(
        "--preset",
        default=None,
        help="small (default), zinc-slim, pcqm4mv2-small or pcqm4mv2-base: model + optimisation",
    )
    t.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="epochs (replaces the preset's step count; ignored with --max-steps)",
    )
    t.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="optimizer steps in total (replaces the preset's epochs)",
    )
    _shared(t, "--batch-size")
    t.add_argument("--lr", type=float, default=None, help="peak learning rate")
    t.add_argument("--end-lr", type=float, default=None, help="learning rate at the last step")
    t.add_argument(
        "--warmup-steps",
        type=int,
        default=None,
        help="linear warm-up steps (default: the preset's, scaled to the preset recipe's "
        "fraction of the run when longer than a tenth of it)",
    )
    t.add_argument(
        "--weight-decay",
        type=float,
        default=None,
        help="AdamW weight decay of all parameters but URPE's C",
    )
    t.add_argument(
        "--urpe-weight-decay",
        type=float,
        default=None,
        help="AdamW weight decay of URPE's C tables (default 0)",
    )
    t.add_argument("--clip-norm", type=float, default=None, help="gradient-norm clipping")
    t.add_argument("--no-clip", action="store_true", help="disable gradient clipping")
    t.add_argument(
        "--loss",
        choices=["l1", "mse", "smooth_l1"],
        default=None,
        help="regression loss (default: mse for csv: datasets, selecting on RMSE, as Chemprop; "
        "l1 for the benchmarks); binary tasks always use BCE on logits",
    )
    t.add_argument(
        "--normalize-targets",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="regression: train on targets standardised with the training split's mean and "
        "std, predict in their units (default: on for csv: datasets, off for the benchmarks)",
    )
    t.add_argument("--seed", type=int, default=None, help="random seed")
    t.add_argument("--eval-every", type=int, default=None, help="validate every N epochs")


def _add_run_flags(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The run flags (output, device, checkpoints, resume, time limit) of ``train`` and
    ``pretrain``; returns the group for command-specific ones."""
    r = p.add_argument_group("run")
    r.add_argument("--out", default=None, help="output folder (default runs/DATASET-PRESET-ATTN)")
    _shared(r, "--device")
    r.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16", "fp16"],
        default=None,
        help="auto: bf16 autocast on CUDA, fp32 on CPU",
    )
    r.add_argument(
        "--num-workers",
        type=int,
        default=None,
        help="data-loader worker processes (default: 0 on the CPU, min(8, cores - 2) on a GPU)",
    )
    r.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    r.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="MINUTES",
        help="stop cleanly when this wall-clock budget is spent (checkpoint, test at the best "
        "checkpoint); without --epochs or --max-steps the steps are planned to fill it (from "
        "a measured step rate), else the schedule stays planned over the configured steps; "
        "with --ensemble K it is the whole ensemble's, each member getting an equal share of "
        "what is left when it starts",
    )
    r.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint in OUT (last.pt, else OUT/checkpoints)",
    )
    r.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="STEPS",
        help="also checkpoint every STEPS optimizer steps (default: at epoch ends only)",
    )
    r.add_argument(
        "--keep-checkpoints",
        type=int,
        default=None,
        metavar="K",
        help="rolling checkpoints kept in OUT/checkpoints (default 3)",
    )
    r.add_argument(
        "--bucket-size",
        type=int,
        default=None,
        metavar="K",
        help="size-bucketed batches: sort chunks of K batches by graph size (default 0: off)",
    )
    r.add_argument(
        "--compile",
        action="store_true",
        default=None,
        help="run the model through torch.compile",
    )
    r.add_argument(
        "--attention-kernel",
        choices=["auto", "fused", "eager"],
        default=None,
        help="attention product: auto (default: the fused Triton kernel for URPE on CUDA "
        "GPUs), fused (wherever Triton runs) or eager (PyTorch operators)",
    )
    r.add_argument(
        "--no-capture",
        dest="capture",
        action="store_false",
        default=None,
        help="on a GPU, run every step eagerly instead of replaying it from a CUDA graph "
        "captured per batch shape (the default on one GPU)",
    )
    _shared(r, "--no-progress")
    return r


def run_pretrain(args: argparse.Namespace) -> int:
    """``graphormer-urpe pretrain``: ``train`` on ``pretrain:INPUT`` (descriptor targets)."""
    from .training import train

    args.dataset = f"pretrain:{args.input}"
    if args.loss is None:
        args.loss = "smooth_l1"
    if args.out is None:
        stem = os.path.basename(args.input).split(".")[0] or "smiles"
        args.out = os.path.join("runs", f"pretrain-{stem}-{args.preset or 'small'}")
    metrics = train(train_config(args), args.resume, not args.no_progress, started=_started(args))
    print(json.dumps(metrics, indent=2))
    return 0


def _add_pretrain(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pretrain",
        help="self-supervised pretraining on any SMILES file (RDKit descriptor targets)",
        description="Pretrain a URPE-Graphormer on the RDKit 2D descriptors of the molecules "
        "of a SMILES file: multi-target regression on the normalised descriptors (smooth L1 "
        "by default, mean over descriptors), with the training loop, checkpoints, --resume, "
        "--time-limit, torchrun and presets of train. The molecules and their descriptors "
        "are cached in a store (built once, in parallel with --preprocess-workers); a random "
        "1%% of the molecules selects the best checkpoint, another 1%% is the test split. "
        "The checkpoints record the descriptor names, their normalisation and the RDKit "
        "version; fine-tune with train --init-from OUT/best.pt (the head is reset).",
    )
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
        type=int,
        default=None,
        help="processes that build the store (featurisation + descriptors; default 1)",
    )
    d.add_argument(
        "--split-seed", type=int, default=None, help="seed of the 98/1/1 random split (0)"
    )
    d.add_argument(
        "--max-nodes",
        type=int,
        default=None,
        metavar="N",
        help="leave training graphs above N atoms out (logged)",
    )
    _add_training_flags(p)
    _add_run_flags(p)
    _add_model_flags(p)
    p.set_defaults(func=run_pretrain)


def run_evaluate(args: argparse.Namespace) -> int:
    """``graphormer-urpe evaluate``."""
    from .io.checkpoint import write_atomic
    from .training import evaluate_checkpoint

    result = evaluate_checkpoint(
        args.checkpoint,
        args.split,
        args.data_root,
        args.device or "auto",
        progress=not args.no_progress,
        cache_dir=args.cache_dir,
        workers=args.workers,
    )
    out = args.output or os.path.join(
        os.path.dirname(os.path.abspath(args.checkpoint)), f"eval_{args.split}.json"
    )
    write_atomic(out, json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="evaluate a checkpoint on a split",
        description="Compute the metric of a checkpoint on a split of the dataset it was "
        "trained on; print it and write eval_SPLIT.json next to the checkpoint.",
    )
    _shared(p, "--checkpoint")
    p.add_argument(
        "--split",
        choices=["train", "valid", "test"],
        default="test",
        help="split to evaluate (default test)",
    )
    _shared(p, "--data-root", "--cache-dir")
    p.add_argument(
        "--workers", type=int, default=1, help="processes that build a missing store (default 1)"
    )
    _shared(p, "--device")
    p.add_argument("--output", default=None, help="JSON file to write")
    _shared(p, "--no-progress")
    p.set_defaults(func=run_evaluate)


def run_predict(args: argparse.Namespace) -> int:
    """``graphormer-urpe predict``: streams rows to the output as their batches finish.

    SIGTERM ends it as Ctrl-C does: the rows written so far stay a valid CSV, the featurising
    processes are stopped, and the last line says how many rows were written."""
    import torch

    from .training.ensemble import load_models
    from .training.predict_io import (
        WriteCounts,
        carry_names,
        interrupts_between_rows,
        read_named_smiles,
    )
    from .training.stream import default_threads, iter_predictions, write_predictions_csv

    torch.set_num_threads(args.threads or default_threads(args.workers))
    models = load_models(args.checkpoint, args.device or "auto")
    lm = models[0]
    binary = lm.task_type == "binary"
    if args.logits and not binary:
        raise ValueError(
            f"--logits applies to binary tasks; {args.checkpoint} predicts regression targets"
        )
    smiles, with_names, named = args.smiles, None, False
    if args.input:
        rows = read_named_smiles(args.input, args.smiles_column)
        first = next(rows, None)
        named = first is not None and first[1] is not None  # one SMILES a line: its names
        smiles, with_names = carry_names(chain([first] if first else [], rows))
    counts = WriteCounts()
    predictions = iter_predictions(
        models,
        smiles,
        batch_size=args.batch_size,
        workers=args.workers,
        chunk_size=args.chunk_size,
        progress=not args.no_progress,
        similarity=not args.no_similarity,
    )
    results = with_names(predictions) if with_names else predictions
    where = f" to {args.output}" if args.output else ""
    try:
        with interrupts_between_rows(counts), contextlib.ExitStack() as stack:
            out = sys.stdout
            if args.output:  # written line by line: an interrupted run leaves a valid prefix
                out = stack.enter_context(open(args.output, "w", newline="", encoding="utf-8"))
            write_predictions_csv(
                results,
                out,
                lm.target_names,
                binary,
                args.logits,
                std=len(models) > 1,
                domain=True,
                names=named,
                counts=counts,
            )
    except KeyboardInterrupt as exc:
        results.close()  # stops the featurising processes now
        predictions.close()
        signum = getattr(exc, "signum", signal.SIGINT)
        exc.args = (
            f"{signal.Signals(signum).name}: stopped after writing {counts.rows} rows{where} "
            f"(the input's first {counts.rows}, a valid CSV)",
        )
        raise
    domain = f"{counts.outside} out of the training domain"
    if lm.domain is None:
        domain = "training domain unknown (the checkpoint does not record it)"
    print(
        f"graphormer-urpe: wrote {counts.rows} rows{where}: {counts.rows - counts.failed} "
        f"molecules predicted, {counts.failed} could not be read, {domain}",
        file=sys.stderr,
    )
    return 0


def _add_predict(sub: argparse._SubParsersAction) -> None:
    from .training.stream_defaults import DEFAULT_BATCH_SIZE, DEFAULT_CHUNK_SIZE, DEFAULT_WORKERS

    p = sub.add_parser(
        "predict",
        help="predict molecules from SMILES",
        description="Predict the targets of molecules with a trained checkpoint. Streams CSV "
        "(smiles, name for one-SMILES-a-line input, one column per target, domain, "
        "nearest_similarity, error) to --output or "
        "standard output, one row per "
        "input row in input order, as each batch finishes; invalid SMILES get an empty "
        "prediction and the reason. domain says 'in', or 'out: <reasons>' for a molecule "
        "unlike every training molecule (an element or charge never seen, more fragments or "
        "heavy atoms than any); nearest_similarity is the Tanimoto similarity of its nearest "
        "training molecule (Morgan fingerprints). Binary tasks (ogbg-molhiv, ...) give "
        "probabilities in prob_<task> columns, or raw scores in logit_<task> with --logits.",
    )
    p.add_argument(
        "--checkpoint",
        required=True,
        help="a best.pt or last.pt file, or the folder of a train --ensemble run (each row "
        "then gets the members' mean and, in <target>_std columns, their standard deviation)",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--smiles", nargs="+", help="one or more SMILES strings")
    src.add_argument(
        "--input",
        help="a CSV (.csv, .csv.gz) with a SMILES column, a .smi / .txt file with one SMILES a "
        "line (a name may follow: it goes to the name column), or - for standard input (CSV "
        "when its first line names "
        "--smiles-column, else one SMILES a line)",
    )
    column = {"default": "smiles", "help": "SMILES column of --input"}
    _shared(p, "--smiles-column", smiles_column=column)
    p.add_argument("--output", default=None, help="CSV file to write (default: stdout)")
    p.add_argument(
        "--logits",
        action="store_true",
        help="binary tasks: write the raw scores (logit_<task>) instead of sigmoid "
        "probabilities (prob_<task>)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=DEFAULT_WORKERS,
        help=f"featurisation processes (default {DEFAULT_WORKERS}; 0: in the main process)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help=f"molecules per model batch (default {DEFAULT_BATCH_SIZE})",
    )
    p.add_argument(
        "--chunk-size",
        type=int,
        default=DEFAULT_CHUNK_SIZE,
        help=f"SMILES per featurisation task (default {DEFAULT_CHUNK_SIZE})",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for the model (default: the CPU cores left after --workers, at "
        "least 1; more threads than free cores slow everything down)",
    )
    _shared(p, "--device")
    p.add_argument(
        "--no-similarity",
        action="store_true",
        help="leave the nearest_similarity column empty: skip the search of each molecule's "
        "nearest training fingerprint (the domain column's checks still run)",
    )
    _shared(p, "--no-progress")
    p.set_defaults(func=run_predict, exit_at_once=True)


def run_convert(args: argparse.Namespace) -> int:
    """``graphormer-urpe convert``."""
    from .training.pretrained import convert_checkpoint

    options = {}
    if args.multi_hop_max_dist is not None:
        options["multi_hop_max_dist"] = args.multi_hop_max_dist
    src = convert_checkpoint(
        args.source,
        args.out,
        attention=args.attention,
        format=args.format,
        unsafe_load=args.unsafe_load,
        options=options,
        dataset=args.dataset,
        target_names=args.target_names,
        featurizer=args.featurizer,
    )
    c = src.model.config
    report = {
        "out": args.out,
        "format": src.format,
        "attention": c.attention,
        "parameters": sum(p.numel() for p in src.model.parameters()),
        "layers": c.num_layers,
        "hidden_dim": c.hidden_dim,
        "num_heads": c.num_heads,
        "pre_ln": c.pre_ln,
        "num_targets": c.num_targets,
        "multi_hop_max_dist": c.multi_hop_max_dist,
        "ignored": src.ignored,
    }
    print(json.dumps(report, indent=2))
    return 0


def _add_convert(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert",
        help="import published Graphormer weights (Hugging Face or fairseq) as a checkpoint",
        description="Convert a Hugging Face Graphormer folder (config.json + model.safetensors "
        "or pytorch_model.bin) or a Microsoft fairseq Graphormer checkpoint (.pt) into a "
        "checkpoint that evaluate, predict and train --init-from read. With --attention urpe "
        "the model gets URPE's C tables, all 1: same outputs, ready to fine-tune with URPE.",
    )
    p.add_argument("source", help="Hugging Face folder or fairseq .pt file (format detected)")
    p.add_argument("--out", required=True, help="checkpoint file to write (e.g. model.pt)")
    p.add_argument(
        "--attention",
        choices=["graphormer", "urpe"],
        default=None,
        help="urpe: add URPE's C tables initialised to 1 (default: keep the source's)",
    )
    p.add_argument(
        "--format",
        choices=["hf", "fairseq", "graphormer-urpe"],
        default=None,
        help="skip format detection",
    )
    p.add_argument(
        "--unsafe-load",
        action="store_true",
        help="read a fairseq file with torch.load(weights_only=False): fairseq pickles its "
        "settings; only for files you trust",
    )
    p.add_argument(
        "--multi-hop-max-dist",
        type=int,
        default=None,
        help="path hops the model was trained with, when the file does not record it "
        "(default: the file's, else 5)",
    )
    p.add_argument(
        "--dataset",
        default=None,
        help="dataset evaluate uses by default (default pcqm4mv2 for one output)",
    )
    p.add_argument("--target-names", nargs="+", default=None, help="names of the outputs")
    p.add_argument(
        "--featurizer", choices=["ogb", "zinc"], default=None, help="input features (default ogb)"
    )
    p.set_defaults(func=run_convert)


def run_export(args: argparse.Namespace) -> int:
    """``graphormer-urpe export``."""
    from .training.pretrained import export_huggingface

    folder = export_huggingface(args.checkpoint, args.out, graphormer_only=args.graphormer_only)
    print(json.dumps({"out": str(folder), "files": ["config.json", "model.safetensors"]}))
    return 0


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export a checkpoint as a Hugging Face Graphormer folder",
        description="Write CHECKPOINT as a Hugging Face folder (config.json + "
        "model.safetensors) that transformers' GraphormerForGraphClassification.from_pretrained "
        "loads. The model needs Hugging Face's switches (--head transform, --no-final-norm); "
        "URPE models are refused unless --graphormer-only.",
    )
    p.add_argument("checkpoint", help="a checkpoint of this library (best.pt, last.pt, model.pt)")
    p.add_argument("--out", required=True, help="folder to write")
    p.add_argument(
        "--graphormer-only",
        action="store_true",
        help="export a URPE model's plain-Graphormer part (its C tables are left out)",
    )
    p.set_defaults(func=run_export)


def run_plot(args: argparse.Namespace) -> int:
    """``graphormer-urpe plot``."""
    from .training import plot_run

    for run in args.run_dir:
        for path in plot_run(run):
            print(path)
    if args.compare:
        from .training.plots import plot_comparison

        print(plot_comparison(args.run_dir, args.compare))
    return 0


def _add_plot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plot",
        help="plot learning curves and the learned URPE C of a run",
        description="Write RUN_DIR/curves.png (training loss, validation metric) and, for URPE "
        "models, RUN_DIR/urpe_scale.png (learned C per head against shortest-path distance).",
    )
    p.add_argument("run_dir", nargs="+", help="one or more folders written by train")
    p.add_argument(
        "--compare", default=None, help="also write one PNG comparing the runs' validation curves"
    )
    p.set_defaults(func=run_plot)


def run_preprocess(args: argparse.Namespace) -> int:
    """``graphormer-urpe preprocess``."""
    import time

    from .datasets import LSC_DATASETS, load_dataset, preprocess_lsc
    from .datasets.registry import store_report

    if args.dataset in LSC_DATASETS:
        report = preprocess_lsc(
            args.dataset,
            args.data_root,
            workers=args.workers,
            chunk_size=args.chunk_size,
            download=not args.no_download,
            progress=not args.no_progress,
            cache_dir=args.cache_dir,
        )
    else:
        t0 = time.perf_counter()
        splits = load_dataset(
            args.dataset,
            args.data_root,
            strict=args.strict,
            smiles_column=args.smiles_column,
            target_columns=args.target_columns,
            split_column=args.split_column,
            split=args.split,
            featurizer=args.featurizer,
            cache_dir=args.cache_dir,
            workers=args.workers,
        )
        report = {"seconds": round(time.perf_counter() - t0, 3), **store_report(splits)}
    print(json.dumps(report, indent=2))
    return 0


def _add_preprocess(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "preprocess",
        help="build a dataset's store once (parallel, resumable) and report it",
        description="Download (when absent) and preprocess a dataset into its memory-mapped "
        "store in the cache folder: SMILES -> graph -> shortest paths, in resumable chunks "
        "with --workers processes (an interrupted run continues where it stopped). Prints a "
        "JSON report: the store folder(s), graphs, failures, size and time (for pcqm4mv2 / "
        "pcqm4m also molecules/s and the projection to the full dataset). train and "
        "evaluate build a missing store themselves; this command does it ahead of time.",
    )
    p.add_argument(
        "--dataset",
        required=True,
        help="any dataset train takes: nci5k, zinc, zinc-full, csv:PATH, csv:TRAIN,VALID,TEST, "
        "pcqm4mv2, pcqm4m or an ogbg-mol* name; or pretrain:PATH, the store (with RDKit "
        "descriptors) of a pretraining SMILES file",
    )
    p.add_argument(
        "--data-root", default=None, help="folder of downloaded datasets (default data/<name>)"
    )
    _shared(p, "--cache-dir")
    p.add_argument("--workers", type=int, default=1, help="parallel processes (default 1)")
    p.add_argument(
        "--chunk-size",
        type=int,
        default=20_000,
        help="pcqm4mv2 / pcqm4m: molecules per resumable chunk of a new build (default 20000)",
    )
    column = {"default": "smiles", "help": "CSV: SMILES column"}
    _shared(p, "--smiles-column", "--target-columns", "--split-column", smiles_column=column)
    p.add_argument(
        "--split", choices=["random", "scaffold"], default="random", help="CSV: split rule"
    )
    p.add_argument(
        "--featurizer", choices=["zinc", "ogb"], default=None, help="CSV: featuriser (ogb)"
    )
    p.add_argument("--strict", action="store_true", help="fail on any invalid molecule")
    p.add_argument("--no-download", action="store_true", help="fail instead of downloading")
    _shared(p, "--no-progress")
    p.set_defaults(func=run_preprocess)


def run_submit(args: argparse.Namespace) -> int:
    """``graphormer-urpe submit``."""
    from .training.submit import submit_checkpoint

    result = submit_checkpoint(
        args.checkpoint,
        args.split,
        args.out,
        data_root=args.data_root,
        device=args.device or "auto",
        batch_size=args.batch_size,
        allow_partial=args.allow_partial,
        progress=not args.no_progress,
    )
    print(json.dumps(result, indent=2))
    return 0


def _add_submit(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "submit",
        help="write an OGB-LSC test submission (PCQM4Mv2 / PCQM4M)",
        description="Predict every molecule of a PCQM4Mv2 test split (test-dev or "
        "test-challenge; test for PCQM4M) with a checkpoint and write OGB's submission file "
        "(y_pred_pcqm4m-v2_SPLIT.npz) with OGB's save_test_submission. A split that does not "
        "have the official size is refused unless --allow-partial.",
    )
    _shared(p, "--checkpoint")
    p.add_argument(
        "--split",
        required=True,
        choices=["test-dev", "test-challenge", "test"],
        help="test-dev or test-challenge (PCQM4Mv2), test (PCQM4M)",
    )
    p.add_argument("--out", required=True, help="folder for the submission file")
    p.add_argument(
        "--allow-partial",
        action="store_true",
        help="write a split of non-official size anyway (numpy, OGB's format), e.g. a sample",
    )
    _shared(p, "--data-root", "--device", "--batch-size", "--no-progress")
    p.set_defaults(func=run_submit)


def _add_synthetic(sub: argparse._SubParsersAction) -> None:
    from .sequence.cli import add_synthetic_parser

    add_synthetic_parser(sub)


def _add_lm(sub: argparse._SubParsersAction) -> None:
    from .sequence.cli import add_lm_parser

    add_lm_parser(sub)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (one sub-parser per command)."""
    parser = argparse.ArgumentParser(
        prog="graphormer-urpe",
        description="Graphormer and Universal RPE attention for molecular property prediction.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return parser


_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_train,
    _add_pretrain,
    _add_evaluate,
    _add_predict,
    _add_plot,
    _add_synthetic,
    _add_lm,
    _add_demo,
    _add_preprocess,
    _add_submit,
    _add_convert,
    _add_export,
]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``graphormer-urpe`` console script (``argv`` None: this process is
    the command, and a command that holds nothing open ends it at once, see
    :func:`_exit_now`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # this process is the command (argv None): its start is the package's import, else now
    args.started = IMPORTED_AT if argv is None else time.perf_counter()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
    )
    code = _run(args)
    if argv is None and getattr(args, "exit_at_once", False):
        _exit_now(code)
    return code


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; its exit status, with one line on standard error for a
    failure (``--verbose``: the traceback) or an interruption."""
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGINT during training (saved)
        print(f"graphormer-urpe: {str(exc) or 'interrupted'}", file=sys.stderr)
        return 128 + int(getattr(exc, "signum", signal.SIGINT))
    except Exception as exc:  # one line for the user; --verbose shows the traceback
        if args.verbose:
            raise
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        text = str(msg).strip().splitlines()[0] if str(msg).strip() else type(exc).__name__
        if not isinstance(exc, (ValueError, KeyError, OSError, RuntimeError)):
            text = f"{type(exc).__name__}: {text} (run with --verbose for the traceback)"
        print(f"graphormer-urpe: error: {text}", file=sys.stderr)
        return 2


def _exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once its output is flushed, without Python's teardown.

    A process that imported torch spends about a second ending on a 2-core machine
    (finalisers of torch's operator libraries, the collection of every object): a third of
    a one-molecule ``predict``. Commands that leave nothing open (``predict``: its file is
    closed and its featurising processes stopped when it returns) skip it.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (| head) or stream: nothing to add
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
