"""The sub-commands that use a trained model: ``evaluate``, ``predict`` (streaming, with its
interruption and names) and ``submit`` (OGB-LSC)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys

from .flags import (
    add_command,
    add_shared_flags,
    add_smiles_source,
    interval_level,
    positive_int,
    print_json,
)


def run_evaluate(args: argparse.Namespace) -> int:
    """evaluate a checkpoint on a split

    Compute the metric of a checkpoint on a split of the dataset it was trained on; print
    it and write eval_SPLIT.json next to the checkpoint."""
    from ..inference import evaluate_checkpoint
    from ..io.checkpoint import write_atomic

    result = evaluate_checkpoint(
        args.checkpoint,
        args.split,
        args.data_root,
        args.device or "auto",
        progress=not args.no_progress,
        store_dir=args.store_dir,
        workers=args.workers,
    )
    out = args.output or os.path.join(
        os.path.dirname(os.path.abspath(args.checkpoint)), f"eval_{args.split}.json"
    )
    write_atomic(out, json.dumps(result, indent=2))
    return print_json(result)


def add_evaluate_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe evaluate`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "evaluate", run_evaluate)
    add_shared_flags(p, "--checkpoint")
    p.add_argument(
        "--split",
        choices=["train", "valid", "test"],
        default="test",
        help="split to evaluate (default test)",
    )
    add_shared_flags(p, "--data-root", "--store-dir")
    p.add_argument(
        "--workers", type=int, default=1, help="processes that build a missing store (default 1)"
    )
    add_shared_flags(p, "--device")
    p.add_argument("--output", help="JSON file to write")
    add_shared_flags(p, "--no-progress")


def run_predict(args: argparse.Namespace) -> int:
    """predict molecules from SMILES or an SD file

    Predict the targets of molecules with a trained checkpoint. Streams CSV (smiles, the
    input's id columns: a CSV's name column or --id-columns, a .smi line's or an SD record's
    name; one column per target, domain, nearest_similarity, error)
    to --output or standard output, one row per input row in input order, as each batch
    finishes; invalid SMILES get an empty prediction and the reason. domain says 'in', or
    'out: <reasons>' for a molecule unlike every training molecule (an element or charge
    never seen, more fragments or heavy atoms than any); nearest_similarity is the Tanimoto
    similarity of its nearest training molecule (Morgan fingerprints). Binary tasks (ogbg-molhiv,
    ...) give probabilities in prob_<task> columns (calibrated on the validation split where
    the run keeps its calibration), or raw scores in logit_<task> with --logits; --interval
    adds a calibrated interval per regression target."""
    if args.engine == "ray":  # a Ray cluster: imported only here
        from .predict_ray import run_predict_ray

        if args.id_columns:
            raise ValueError("--id-columns applies to --engine local (a shard keeps its name)")

        return run_predict_ray(args)
    # SIGTERM ends it as Ctrl-C does: the rows written so far stay a valid CSV, the
    # featurising processes are stopped, and the last line says how many rows were written.
    import torch

    from ..inference.embeddings import embedding_dim
    from ..inference.engines.predict_io import (
        WriteCounts,
        carry_names,
        interrupts_between_rows,
        read_input_table,
        write_predictions_csv,
    )
    from ..inference.engines.stream import default_threads, iter_predictions
    from ..inference.loading import load_models

    torch.set_num_threads(args.threads or default_threads(args.workers))
    models = load_models(args.checkpoint, args.device or "auto")
    loaded = models[0]
    binary = loaded.task_type == "binary"
    if args.logits and not binary:
        raise ValueError(
            f"--logits applies to binary tasks; {args.checkpoint} predicts regression targets"
        )
    from ..inference.intervals.calibration import check_interval_request

    level = args.interval
    calibration = check_interval_request(
        args.checkpoint, level, loaded.task_type, loaded.target_names
    )
    smiles, with_names, id_columns = args.smiles, None, []
    if args.input:  # the input's id columns go back beside each row
        table = read_input_table(args.input, args.smiles_column, args.id_columns)
        smiles, with_names = carry_names(table.rows)
        id_columns = table.id_columns
    counts = WriteCounts()
    predictions = iter_predictions(
        models,
        smiles,
        batch_size=args.batch_size,
        workers=args.workers,
        chunk_size=args.chunk_size,
        progress=not args.no_progress,
        similarity=not args.no_similarity
        or bool(level is not None and calibration and calibration.needs_similarity),
        embeddings=bool(args.embeddings),
    )
    results = with_names(predictions) if with_names else predictions
    where = f" to {args.output}" if args.output else ""
    try:
        with interrupts_between_rows(counts), contextlib.ExitStack() as stack:
            out = sys.stdout
            written = results
            if args.embeddings:  # the vectors the head reads, row by row beside the CSV
                written = _embeddings_tee(stack, args, models, results)
            if args.output:  # written line by line: an interrupted run leaves a valid prefix
                out = stack.enter_context(open(args.output, "w", newline="", encoding="utf-8"))
            write_predictions_csv(
                written,
                out,
                loaded.target_names,
                binary,
                args.logits,
                std=len(models) > 1,
                domain=True,
                counts=counts,
                calibration=calibration,
                level=level,
                id_columns=id_columns,
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
    if loaded.domain is None:
        domain = "training domain unknown (the checkpoint does not record it)"
    print(
        f"graphormer-urpe: wrote {counts.rows} rows{where}: {counts.rows - counts.failed} "
        f"molecules predicted, {counts.failed} could not be read, {domain}",
        file=sys.stderr,
    )
    if args.embeddings:
        dim = embedding_dim([m.model for m in models])
        print(
            f"graphormer-urpe: wrote embeddings [{counts.rows}, {dim}] to {args.embeddings}",
            file=sys.stderr,
        )
    return 0


def _embeddings_tee(stack: contextlib.ExitStack, args: argparse.Namespace, models, results):
    """``results`` as they are, each row's embedding written to ``--embeddings`` on its way
    (the files close with ``stack``)."""
    from ..inference.engines.embeddings_io import EmbeddingWriter

    source = str(args.checkpoint)
    writer = stack.enter_context(
        EmbeddingWriter(args.embeddings, [m.model for m in models], source)
    )
    return writer.tee(results)


def add_predict_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe predict`` and its flags to the sub-commands ``sub``."""
    from ..inference.engines.defaults import DEFAULT_BATCH_SIZE, DEFAULT_CHUNK_SIZE, DEFAULT_WORKERS

    p = add_command(sub, "predict", run_predict, exit_at_once=True)
    p.add_argument(
        "--checkpoint",
        required=True,
        help="a best.pt or last.pt file, or the folder of a train --ensemble run (each row "
        "then gets the members' mean and, in <target>_std columns, their standard deviation)",
    )
    add_smiles_source(p)
    p.add_argument("--output", help="CSV file to write (default: stdout)")
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
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        help=f"molecules per model batch (default {DEFAULT_BATCH_SIZE})",
    )
    p.add_argument(
        "--chunk-size",
        type=positive_int,
        default=DEFAULT_CHUNK_SIZE,
        help=f"SMILES per featurisation task (default {DEFAULT_CHUNK_SIZE})",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        help="CPU threads for the model (default: the CPU cores left after --workers, at "
        "least 1; more threads than free cores slow everything down)",
    )
    p.add_argument(
        "--interval",
        type=interval_level,
        metavar="LEVEL",
        help="regression: write <target>_low and <target>_high, a split-conformal interval "
        "holding the true value with probability LEVEL (e.g. 0.9), from the run's "
        "calibration (kept by train; graphormer-urpe calibrate builds it for older runs)",
    )
    add_shared_flags(p, "--device")
    p.add_argument(
        "--no-similarity",
        action="store_true",
        help="leave the nearest_similarity column empty: skip the search of each molecule's "
        "nearest training fingerprint (the domain column's checks still run; an --interval "
        "scaled by the distance to the training set still searches)",
    )
    p.add_argument(
        "--embeddings",
        metavar="FILE.npy",
        help="also write each row's graph-level vector (what the head reads: the graph "
        "token, joined to the descriptors of a --mol-features model; an ensemble's members "
        "side by side) to this .npy, in input order, NaN rows for unreadable SMILES, with "
        "FILE.json (dimension, rows) and FILE.ids.csv (row, name, smiles, error)",
    )
    add_shared_flags(p, "--no-progress")
    _add_ray_flags(p)


def _add_ray_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``predict --engine ray`` (a group of ``predict``'s)."""
    from ..inference.engines.defaults import DEFAULT_OBJECT_STORE_MIB, DEFAULT_ROWS_PER_BLOCK

    g = p.add_argument_group(
        "Ray cluster (--engine ray; pip install 'graphormer-urpe[ray]')",
        "--input is a folder, a glob pattern ('lib/*.smi.gz', quoted) or a file of .csv, "
        ".csv.gz, .smi, .txt or .parquet shards; --output a folder of part-NNNNN.csv files "
        "(one per input shard, in its row order, the columns of local predict) and "
        "manifest.json; a re-run skips the shards already complete. --embeddings names the "
        "--output folder: each part's vectors go to part-NNNNN.npy beside it.",
    )
    g.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local (default: streaming predict in this process and --workers) or ray (Ray "
        "Data on a Ray cluster: read tasks, one model copy per actor, a GPU each where the "
        "cluster has GPUs)",
    )
    g.add_argument(
        "--address",
        help="the cluster: auto (the one `ray start` joined this machine to), HOST:PORT (its "
        "head), or ray://HOST:PORT (Ray Client: pip install 'ray[client]'); default: start a "
        "cluster on this machine for the run",
    )
    g.add_argument(
        "--actors",
        type=positive_int,
        help="model copies (default: one per GPU of the cluster, else one per CPU core)",
    )
    g.add_argument(
        "--featurize",
        choices=["auto", "actors", "tasks"],
        default="auto",
        help="where SMILES become graphs: tasks (CPU tasks; the actors only run the model), "
        "actors (each actor featurises its block), auto (default: tasks for GPU actors, the "
        "actors on a CPU cluster)",
    )
    g.add_argument(
        "--rows-per-block",
        type=positive_int,
        default=DEFAULT_ROWS_PER_BLOCK,
        help=f"input rows an actor featurises and predicts at a time (default "
        f"{DEFAULT_ROWS_PER_BLOCK})",
    )
    g.add_argument(
        "--num-cpus",
        type=positive_int,
        help="a cluster started here: its cores (default: all of this machine's)",
    )
    g.add_argument(
        "--object-store-mib",
        type=positive_int,
        default=DEFAULT_OBJECT_STORE_MIB,
        help=f"a cluster started here: its object store, MiB (default "
        f"{DEFAULT_OBJECT_STORE_MIB}: bounded memory)",
    )


def run_submit(args: argparse.Namespace) -> int:
    """write an OGB-LSC test submission (PCQM4Mv2 / PCQM4M)

    Predict every molecule of a PCQM4Mv2 test split (test-dev or test-challenge; test for
    PCQM4M) with a checkpoint and write OGB's submission file (y_pred_pcqm4m-v2_SPLIT.npz)
    with OGB's save_test_submission. A split that does not have the official size is refused
    unless --allow-partial."""
    from ..inference.submit import submit_checkpoint

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
    return print_json(result)


def add_submit_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe submit`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "submit", run_submit)
    add_shared_flags(p, "--checkpoint")
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
    add_shared_flags(p, "--data-root", "--device", "--batch-size", "--no-progress")
