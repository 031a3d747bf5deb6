"""The other sub-commands: ``demo``, ``convert`` and ``export`` (published weights), ``plot``,
``preprocess`` (dataset stores), and the sequence module's ``synthetic`` and ``lm``."""

from __future__ import annotations

import argparse
import time

from .flags import add_command, add_shared_flags, flag_values, print_json


def run_demo(args: argparse.Namespace) -> int:
    """forward + backward pass on real molecules (no download needed)

    Run a URPE-Graphormer forward and backward pass on molecules from the NCI set that
    ships with RDKit, and print a JSON summary."""
    import torch
    from torch_geometric.data import Batch

    from ..datasets import featurize_smiles
    from ..datasets.sources.nci import read_nci_smiles
    from ..graph import Graphormer, GraphormerFeatures, get_preset
    from ..graph.model import fit_tables

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
    return print_json(report)


def add_demo_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe demo`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "demo", run_demo)
    p.add_argument("--molecules", type=int, default=64, help="number of molecules (default 64)")
    p.add_argument("--preset", default="pcqm4mv2-base", help="model preset (default pcqm4mv2-base)")
    p.add_argument(
        "--attention", choices=["graphormer", "urpe"], default="urpe", help="attention kind"
    )
    p.add_argument("--layers", type=int, default=2, help="number of layers (default 2)")
    p.add_argument("--seed", type=int, default=0, help="random seed")


def run_convert(args: argparse.Namespace) -> int:
    """import published Graphormer weights (Hugging Face or fairseq) as a checkpoint

    Convert a Hugging Face Graphormer folder (config.json + model.safetensors or
    pytorch_model.bin) or a Microsoft fairseq Graphormer checkpoint (.pt) into a checkpoint
    that evaluate, predict and train --init-from read. With --attention urpe the model gets
    URPE's C tables, all 1: same outputs, ready to fine-tune with URPE."""
    from ..training.pretrained import convert_checkpoint

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
    return print_json(report)


def add_convert_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe convert`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "convert", run_convert)
    p.add_argument("source", help="Hugging Face folder or fairseq .pt file (format detected)")
    p.add_argument("--out", required=True, help="checkpoint file to write (e.g. model.pt)")
    p.add_argument(
        "--attention",
        choices=["graphormer", "urpe"],
        help="urpe: add URPE's C tables initialised to 1 (default: keep the source's)",
    )
    p.add_argument(
        "--format",
        choices=["hf", "fairseq", "graphormer-urpe"],
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
        help="path hops the model was trained with, when the file does not record it "
        "(default: the file's, else 5)",
    )
    p.add_argument(
        "--dataset",
        help="dataset evaluate uses by default (default pcqm4mv2 for one output)",
    )
    p.add_argument("--target-names", nargs="+", help="names of the outputs")
    add_shared_flags(p, "--featurizer", featurizer={"help": "input features (default ogb)"})


def run_export(args: argparse.Namespace) -> int:
    """export a checkpoint as a Hugging Face Graphormer folder

    Write CHECKPOINT as a Hugging Face folder (config.json + model.safetensors) that
    transformers' GraphormerForGraphClassification.from_pretrained loads. The model needs
    Hugging Face's switches (--head transform, --no-final-norm); URPE models are refused
    unless --graphormer-only."""
    from ..training.pretrained import export_huggingface

    folder = export_huggingface(args.checkpoint, args.out, graphormer_only=args.graphormer_only)
    return print_json({"out": str(folder), "files": ["config.json", "model.safetensors"]})


def add_export_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe export`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "export", run_export)
    p.add_argument("checkpoint", help="a checkpoint of this library (best.pt, last.pt, model.pt)")
    p.add_argument("--out", required=True, help="folder to write")
    p.add_argument(
        "--graphormer-only",
        action="store_true",
        help="export a URPE model's plain-Graphormer part (its C tables are left out)",
    )


def run_plot(args: argparse.Namespace) -> int:
    """plot learning curves and the learned URPE C of a run

    Write RUN_DIR/curves.png (training loss, validation metric) and, for URPE models,
    RUN_DIR/attn_scale.png (learned C per head against shortest-path distance)."""
    from ..training import plot_run

    for run in args.run_dir:
        for path in plot_run(run):
            print(path)
    if args.compare:
        from ..training.plots import plot_comparison

        print(plot_comparison(args.run_dir, args.compare))
    return 0


def add_plot_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe plot`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "plot", run_plot)
    p.add_argument("run_dir", nargs="+", help="one or more folders written by train")
    p.add_argument("--compare", help="also write one PNG comparing the runs' validation curves")


def run_preprocess(args: argparse.Namespace) -> int:
    """build a dataset's store once (parallel, resumable) and report it

    Download (when absent) and preprocess a dataset into its memory-mapped store in the
    store folder: SMILES -> graph -> shortest paths, in resumable chunks with --workers
    processes (an interrupted run continues where it stopped). Prints a JSON report: the
    store folder(s), graphs, failures, size and time (for pcqm4mv2 / pcqm4m also molecules/s
    and the projection to the full dataset). train and evaluate build a missing store
    themselves; this command does it ahead of time."""
    import time

    from ..datasets import LSC_DATASETS, load_dataset, preprocess_lsc
    from ..datasets.registry import store_report

    if args.dataset in LSC_DATASETS:
        report = preprocess_lsc(
            args.dataset,
            args.data_root,
            workers=args.workers,
            chunk_size=args.chunk_size,
            download=not args.no_download,
            progress=not args.no_progress,
            store_dir=args.store_dir,
        )
    else:
        t0 = time.perf_counter()
        # the flags named as load_dataset's keyword arguments
        names = ("strict", "smiles_column", "target_columns", "split_column", "split")
        names += ("featurizer", "store_dir", "workers")
        splits = load_dataset(args.dataset, args.data_root, **flag_values(args, names))
        report = {"seconds": round(time.perf_counter() - t0, 3), **store_report(splits)}
    return print_json(report)


def add_preprocess_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe preprocess`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "preprocess", run_preprocess)
    p.add_argument(
        "--dataset",
        required=True,
        help="any dataset train takes: nci5k, zinc, zinc-full, csv:PATH, csv:TRAIN,VALID,TEST, "
        "pcqm4mv2, pcqm4m or an ogbg-mol* name; or pretrain:PATH, the store (with RDKit "
        "descriptors) of a pretraining SMILES file",
    )
    p.add_argument("--data-root", help="folder of downloaded datasets (default data/<name>)")
    add_shared_flags(p, "--store-dir")
    p.add_argument("--workers", type=int, default=1, help="parallel processes (default 1)")
    p.add_argument(
        "--chunk-size",
        type=int,
        default=20_000,
        help="pcqm4mv2 / pcqm4m: molecules per resumable chunk of a new build (default 20000)",
    )
    column = {"default": "smiles", "help": "CSV: SMILES column"}
    add_shared_flags(
        p, "--smiles-column", "--target-columns", "--split-column", smiles_column=column
    )
    p.add_argument(
        "--split", choices=["random", "scaffold"], default="random", help="CSV: split rule"
    )
    add_shared_flags(p, "--featurizer", featurizer={"help": "CSV: featuriser (ogb)"})
    p.add_argument("--strict", action="store_true", help="fail on any invalid molecule")
    p.add_argument("--no-download", action="store_true", help="fail instead of downloading")
    add_shared_flags(p, "--no-progress")


def add_synthetic_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe synthetic`` and its flags to the sub-commands ``sub``."""
    from .sequence import add_synthetic_parser

    add_synthetic_parser(sub)


def add_lm_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe lm`` and its flags to the sub-commands ``sub``."""
    from .sequence import add_lm_parser

    add_lm_parser(sub)
