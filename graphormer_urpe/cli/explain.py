"""The ``explain`` sub-command: which atoms drive a trained model's predictions."""

from __future__ import annotations

import argparse
import sys

from .flags import add_command, add_shared_flags, add_smiles_source


def _explainer(checkpoint: str, device: str, **options):
    """The explainer of a checkpoint or an ensemble's folder (its loading, in one place)."""
    from ..inference.explain.explainer import Explainer
    from ..inference.loading import load_models

    return Explainer.from_loaded(load_models(checkpoint, device), **options)


def run_explain(args: argparse.Namespace) -> int:
    """explain predictions atom by atom

    Explain a trained model's predictions: each atom's contribution to each target, against a
    baseline where every atom is the molecule's mean atom (same graph, same bonds), by sampled
    Shapley values of the atoms (the default; the contributions add up exactly to prediction
    minus baseline prediction) or by integrated gradients on the atom embeddings (within 1%).
    An ensemble's folder gives the members' mean.
    Writes to --out:
    atoms.csv (row, smiles, the input's id columns as predict writes them, atom_index,
    element, one contribution column per target, error),
    molecules.csv (prediction, baseline, descriptor term with --mol-features runs, picture),
    mol-<row>.png and .svg (atoms coloured by the contributions to --picture-target, by default
    the first target, on one colour scale for the whole call unless --per-molecule-scale, a
    labelled colour bar, the molecule's name (its first id column, else its row) and the
    prediction in the title, and under it the atoms' sum and the descriptor term that make up
    the prediction minus the baseline) and grid.png (up to 50 molecules, with a colour bar).
    Binary tasks are explained on the logit. An unreadable SMILES gets one atoms.csv row with
    the reason and no picture; a molecule of more than 100 heavy atoms is explained but not
    drawn."""
    import torch

    from ..inference.engines.predict_io import read_input_table
    from ..inference.explain.writing import picture_index, with_input_rows, write_explanations

    torch.set_num_threads(args.threads)
    options = {
        "method": args.method,
        "permutations": args.permutations,
        "steps": args.steps,
        "baseline": args.baseline,
    }
    explainer = _explainer(args.checkpoint, args.device or "auto", **options)
    picture_index(explainer.target_names, args.picture_target)  # a wrong name: before any work
    rows: list[tuple[str, tuple[str, ...], str | None]] = [(s, (), None) for s in args.smiles or []]
    id_columns: list[str] = []
    if args.input:  # a CSV, one SMILES a line or an SD file, as predict reads them
        table = read_input_table(args.input, args.smiles_column, args.id_columns)
        rows, id_columns = list(table.rows), table.id_columns
    smiles = [r[0] for r in rows]
    explanations = with_input_rows(
        explainer.explain_many(smiles, progress=not args.no_progress, total=len(smiles)), rows
    )
    summary = write_explanations(
        explanations,
        args.out,
        explainer.target_names,
        binary=explainer.task_type == "binary",
        pictures=not args.no_pictures,
        descriptors=explainer.mol_features is not None or explainer.trees is not None,
        picture_target=args.picture_target,
        id_columns=id_columns,
        per_molecule_scale=args.per_molecule_scale,
    )
    for line in summary.not_drawn:
        print(f"graphormer-urpe: {line}", file=sys.stderr)
    if summary.scale is not None and summary.drawn:
        print(
            f"graphormer-urpe: every picture colours contributions on one scale, "
            f"±{summary.scale:.3g} (--per-molecule-scale: each molecule its own)",
            file=sys.stderr,
        )
    print(
        f"graphormer-urpe: explained {summary.molecules - summary.failed} of "
        f"{summary.molecules} molecules into {args.out} ({summary.failed} could not be read, "
        f"{summary.drawn} drawn)",
        file=sys.stderr,
    )
    return 0


def add_explain_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe explain`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "explain", run_explain)
    help = "a best.pt or last.pt file, or the folder of a train --ensemble run (the mean "
    help += "of the members' contributions)"
    add_shared_flags(p, "--checkpoint", checkpoint={"help": help})
    add_smiles_source(
        p,
        "a CSV (.csv, .csv.gz) with a SMILES column, a .smi / .txt file with one SMILES a "
        "line, an SD file (.sdf, .sdf.gz), or - for standard input",
    )
    p.add_argument("--out", required=True, help="folder to write the CSVs and pictures into")
    p.add_argument(
        "--method",
        choices=["shapley", "integrated-gradients"],  # inference.explain.METHODS
        default="shapley",
        help="shapley: sampled Shapley values of the atoms, exactly complete (default); or "
        "integrated-gradients on the atom embeddings, complete within 1%%",
    )
    p.add_argument(
        "--permutations",
        type=int,
        default=32,
        help="shapley: orderings of the atoms sampled per molecule, half of them reversed "
        "copies (default 32; each costs one forward pass per atom)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=4,
        help="integrated-gradients: Gauss-Legendre nodes per panel of the integration path "
        "(panels are halved until the contributions are complete within 1%%; default 4)",
    )
    p.add_argument(
        "--baseline",
        choices=["mean", "zero"],
        default="mean",
        help="the atoms' baseline: each atom's embedding replaced by the molecule's mean atom "
        "embedding (default), or by zero",
    )
    p.add_argument("--no-pictures", action="store_true", help="write the CSVs only")
    p.add_argument(
        "--per-molecule-scale",
        action="store_true",
        help="colour each picture on its own molecule's largest contribution (default: one "
        "scale for every picture of the call, the largest contribution drawn, so that "
        "colours compare across molecules)",
    )
    p.add_argument(
        "--picture-target",
        metavar="NAME",
        help="the target whose contributions colour the pictures (default: the first)",
    )
    p.add_argument("--threads", type=int, default=1, help="CPU threads for the model (default 1)")
    add_shared_flags(p, "--device", "--no-progress")
