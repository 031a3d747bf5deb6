"""The flags sub-commands share: one definition each (:data:`_FLAGS`), and the model,
training and run groups of ``train`` and ``pretrain``."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

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


def add_command(
    sub: argparse._SubParsersAction,
    name: str,
    func: Callable[[argparse.Namespace], int],
    **defaults: object,
) -> argparse.ArgumentParser:
    """The sub-command ``name``: its parser, which runs ``func(args)``. ``func``'s docstring
    gives its line in the command list (the summary line) and its description (the rest);
    ``defaults``: more namespace values the command sets, as ``set_defaults``."""
    summary, _, description = inspect.cleandoc(func.__doc__ or "").partition("\n\n")
    p = sub.add_parser(name, help=summary, description=description)
    p.set_defaults(func=func, **defaults)
    return p


def print_json(report: dict) -> int:
    """Print ``report`` as indented JSON, a command's result; exit status 0."""
    print(json.dumps(report, indent=2))
    return 0


def flag_values(args: argparse.Namespace, names: Iterable[str]) -> dict[str, Any]:
    """``{name: args.name}`` for each of ``names``: the flags a command passes on by their own
    names (as keyword arguments or overrides); a flag the command lacks gives ``None``."""
    return {name: getattr(args, name, None) for name in names}


def positive_int(text: str) -> int:
    """An ``argparse`` type: a whole number of at least 1 (a count: epochs, members, steps),
    so that ``--ensemble 0`` is refused before any work."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def interval_level(text: str) -> float:
    """An ``argparse`` type: an interval's level, strictly between 0 and 1 (``0.9``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie between 0 and 1 (e.g. 0.9), got {value}")
    return value


def positive_float(text: str) -> float:
    """An ``argparse`` type: a finite number above 0 (a duration: ``--time-limit 0`` is
    refused before any work)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_model_flags(p: argparse.ArgumentParser) -> None:
    from ..graph.model_config import GraphormerConfig

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


_STORE_DIR_HELP = (
    "folder of the dataset stores (default $GRAPHORMER_URPE_STORE, else "
    "~/.cache/graphormer-urpe; --cache-dir, its previous name, works until the next minor release)"
)

_FLAGS: dict[str, dict] = {
    "--device": {"default": None, "help": "auto (default), cpu, cuda, cuda:N"},
    "--no-progress": {"action": "store_true", "help": "no progress bar"},
    "--store-dir": {"default": None, "help": _STORE_DIR_HELP},
    "--checkpoint": {"required": True, "help": "a best.pt or last.pt file"},
    "--data-root": {"default": None, "help": "dataset folder, if it moved"},
    "--smiles-column": {"default": None, "help": "CSV: SMILES column (default smiles)"},
    "--target-columns": {
        "nargs": "+",
        "default": None,
        "help": "CSV: target column(s); SD file: SD properties",
    },
    "--split-column": {
        "default": None,
        "help": "CSV: column (SD file: property) holding train/valid/test",
    },
    "--batch-size": {"type": positive_int, "default": None, "help": "graphs per batch"},
    "--preprocess-workers": {
        "type": positive_int,
        "help": "processes that build a missing dataset store (default 1)",
    },
    "--split-seed": {
        "type": int,
        "help": "seed of the random split, or of how a scaffold split deals its held-out "
        "families to valid and test (0)",
    },
    "--featurizer": {
        "choices": ["zinc", "ogb"],
        "help": "CSV: ZINC atom types or OGB features (default ogb)",
    },
    "--max-nodes": {
        "type": positive_int,
        "metavar": "N",
        "help": "leave training graphs above N atoms out (logged); valid/test graphs are "
        "always kept",
    },
    "--precision": {
        "choices": ["auto", "fp32", "bf16", "fp16"],
        "help": "auto: bf16 autocast on CUDA, fp32 on CPU",
    },
    "--num-workers": {
        "type": int,
        "help": "data-loader worker processes (default: 0 on the CPU, min(8, cores - 2) on a GPU)",
    },
}
"""The flags several sub-commands share, defined once (a command may change a default or
the help where its meaning differs)."""


_PREVIOUS_NAMES = {"--store-dir": "--cache-dir"}
"""Shared flags → their previous names, which still work (saying so on standard error) until
the next minor release."""


class _PreviousName(argparse.Action):
    """A flag's previous name: stores its value where the flag does and says on standard error
    that the name is deprecated (the help lists the flag only)."""

    def __init__(self, option_strings: list[str], dest: str, name_now: str, **kw) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kw)
        self.name_now = name_now

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(
            f"graphormer-urpe: warning: {option_string} is deprecated: use {self.name_now} "
            "(the old name goes in the next minor release)",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def add_shared_flags(parser: argparse._ActionsContainer, *flags: str, **changes: dict) -> None:
    """Add the shared ``flags`` to ``parser`` (a parser or an argument group), in order;
    ``changes`` by flag name without dashes (``smiles_column={"default": "smiles"}``)."""
    for flag in flags:
        change = changes.get(flag[2:].replace("-", "_"), {})
        action = parser.add_argument(flag, **{**_FLAGS[flag], **change})
        if flag in _PREVIOUS_NAMES:
            parser.add_argument(
                _PREVIOUS_NAMES[flag],
                dest=action.dest,
                default=action.default,
                action=_PreviousName,
                name_now=flag,
            )


def add_data_flags(p: argparse.ArgumentParser) -> None:
    """The data flags of ``train`` and ``tune``: the set, its targets, split and inputs."""
    d = p.add_argument_group("data")
    d.add_argument(
        "--dataset",
        help="nci5k (embedded, default), zinc (ZINC-subset), zinc-full, csv:PATH "
        "(or csv:TRAIN,VALID,TEST), sdf:PATH (an SD file, .sdf or .sdf.gz: --target-columns "
        "name SD properties; each record's title is its name column), pcqm4mv2 or pcqm4m "
        "(OGB-LSC; run preprocess first), "
        "ogbg-molhiv, ogbg-molpcba or another ogbg-mol* set",
    )
    root = {"help": "folder of downloaded datasets (default data/<name>)"}
    add_shared_flags(d, "--data-root", "--store-dir", data_root=root)
    add_shared_flags(
        d, "--preprocess-workers", "--smiles-column", "--target-columns", "--split-column"
    )
    d.add_argument(
        "--mol-features",
        choices=["auto", "none", "rdkit2d", "morgan", "rdkit2d+morgan"],
        help="CSV: rdkit2d joins each molecule's 202 RDKit 2D descriptors (normalised on the "
        "training split, kept in the store) to the graph representation before the head, "
        "as Chemprop's rdkit_2d_normalized features; morgan its 2048-bit Morgan count "
        "fingerprint (radius 2, log(1 + count)), as Chemprop's morgan_count; rdkit2d+morgan "
        "both; predict computes them too; default auto: the fine-tuning recipe's "
        "(rdkit2d) with --init-from pretrained, else none",
    )
    d.add_argument(
        "--trees",
        choices=["auto", "on", "off"],
        help="CSV / SDF: on fits gradient-boosted trees (LightGBM) on each molecule's RDKit "
        "descriptors, Morgan and Avalon counts, ErG and the starting model's graph token beside "
        "the network (an ensemble's members share one fit), "
        "and blends the two with a weight chosen on the validation split (predict, serve, "
        "evaluate and the intervals give the blend); default auto: on with --init-from",
    )
    d.add_argument(
        "--task",
        choices=["regression", "classification"],
        help="CSV: classification reads the targets as binary labels 0/1 (BCE, one logit per "
        "target, selected on ROC-AUC, PRC-AUC reported; predict writes probabilities); "
        "default regression",
    )
    d.add_argument(
        "--split",
        choices=["random", "scaffold"],
        help="CSV without split column: seeded random or scaffold split 80/10/10 (scaffold: "
        "the largest scaffold families train, the others are dealt alike to valid and test)",
    )
    add_shared_flags(d, "--split-seed", "--featurizer", "--max-nodes")
    d.add_argument(
        "--strict",
        action="store_true",
        default=None,
        help="stop at the first invalid SMILES instead of skipping it",
    )


_INPUT_HELP = (
    "a CSV (.csv, .csv.gz) with a SMILES column, a .smi / .txt file with one SMILES a "
    "line (a name may follow: it goes to the name column), an SD file (.sdf, .sdf.gz: each "
    "record's title goes to the name column), or - for standard input (CSV "
    "when its first line names "
    "--smiles-column, else one SMILES a line)"
)


def add_smiles_source(p: argparse.ArgumentParser, input_help: str = _INPUT_HELP) -> None:
    """``--smiles`` or ``--input`` (one of them, required), and ``--smiles-column``: the
    molecules of ``predict`` and ``explain``."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--smiles", nargs="+", help="one or more SMILES strings")
    src.add_argument("--input", help=input_help)
    column = {"default": "smiles", "help": "SMILES column of --input"}
    add_shared_flags(p, "--smiles-column", smiles_column=column)
    p.add_argument(
        "--id-columns",
        nargs="+",
        metavar="COLUMN",
        help="columns of --input written back beside each row (a CSV's columns or an SD "
        "file's properties; default: name, where the input has it: a CSV's name column, the "
        "name after a .smi line's SMILES, an SD record's title)",
    )


def add_training_flags(p: argparse.ArgumentParser) -> None:
    """The optimisation flags of ``train`` and ``pretrain``."""
    t = p.add_argument_group("training")
    t.add_argument(
        "--preset",
        help="small (default), zinc-slim, pcqm4mv2-small or pcqm4mv2-base: model + optimisation",
    )
    t.add_argument(
        "--epochs",
        type=positive_int,
        help="epochs (replaces the preset's step count; ignored with --max-steps)",
    )
    t.add_argument(
        "--max-steps",
        type=positive_int,
        help="optimizer steps in total (replaces the preset's epochs)",
    )
    add_shared_flags(t, "--batch-size")
    t.add_argument(
        "--max-tokens",
        type=positive_int,
        metavar="T",
        help="a token budget instead of --batch-size: each batch holds as many graphs as fit "
        "T padded tokens (graphs x (largest graph's atoms + 1)), graphs of similar size "
        "together; bounds the memory of batches of large graphs",
    )
    t.add_argument("--lr", type=float, help="peak learning rate")
    t.add_argument("--end-lr", type=float, help="learning rate at the last step")
    t.add_argument(
        "--warmup-steps",
        type=int,
        help="linear warm-up steps (default: the preset's, scaled to the preset recipe's "
        "fraction of the run when longer than a tenth of it)",
    )
    t.add_argument(
        "--warmup-fraction",
        type=float,
        metavar="F",
        help="linear warm-up over this fraction of the planned steps instead (0.05: the "
        "first 5%%; beats --warmup-steps)",
    )
    t.add_argument(
        "--weight-decay",
        type=float,
        help="AdamW weight decay of all parameters but URPE's C",
    )
    t.add_argument(
        "--urpe-weight-decay",
        type=float,
        help="AdamW weight decay of URPE's C tables (default 0)",
    )
    t.add_argument("--clip-norm", type=float, help="gradient-norm clipping")
    t.add_argument("--no-clip", action="store_true", help="disable gradient clipping")
    t.add_argument(
        "--loss",
        choices=["l1", "mse", "smooth_l1"],
        help="regression loss (default: mse for csv: datasets, selecting on RMSE, as Chemprop; "
        "l1 for the benchmarks); binary tasks always use BCE on logits",
    )
    t.add_argument(
        "--normalize-targets",
        action=argparse.BooleanOptionalAction,
        help="regression: train on targets standardised with the training split's mean and "
        "std, predict in their units (default: on for csv: datasets, off for the benchmarks)",
    )
    t.add_argument("--seed", type=int, help="random seed")
    t.add_argument("--eval-every", type=positive_int, help="validate every N epochs")


def add_run_flags(p: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The run flags (output, device, checkpoints, resume, time limit) of ``train`` and
    ``pretrain``; returns the group for command-specific ones."""
    r = p.add_argument_group("run")
    r.add_argument("--out", help="output folder (default runs/DATASET-PRESET-ATTN)")
    add_shared_flags(r, "--device", "--precision", "--num-workers")
    r.add_argument("--threads", type=positive_int, help="CPU threads for torch")
    r.add_argument(
        "--time-limit",
        type=positive_float,
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
        type=positive_int,
        metavar="STEPS",
        help="also checkpoint every STEPS optimizer steps (default: at epoch ends only)",
    )
    r.add_argument(
        "--keep-checkpoints",
        type=positive_int,
        metavar="K",
        help="rolling checkpoints kept in OUT/checkpoints (default 3)",
    )
    r.add_argument(
        "--bucket-size",
        type=int,
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
        help="attention product: auto (default: PyTorch operators; on a GPU the fused "
        "kernel measured slower), fused (the fused Triton kernel wherever Triton runs) or "
        "eager (PyTorch operators)",
    )
    r.add_argument(
        "--no-capture",
        dest="capture",
        action="store_false",
        default=None,
        help="on a GPU, run every step eagerly instead of replaying it from a CUDA graph "
        "captured per batch shape (the default on one GPU)",
    )
    add_shared_flags(r, "--no-progress")
    return r
