r"""``predict --engine ray``: a library of SMILES files screened on a Ray cluster with Ray Data.

::

    input shards (a folder or glob of .csv, .csv.gz, .smi, .parquet files)
      ──read tasks (shards.read_shard)──▶ blocks of rows_per_block rows
      ──actors, one model copy each (predictor.Predictor)──▶ predict's columns
            CPU cluster: each actor featurises its block and runs the model (one core each)
            GPU cluster: CPU tasks featurise, an actor per GPU runs the captured forward
      ──in input order, to this process──▶ part-00000.csv, ... + manifest.json (output)

The rows of every shard reach this process in input order (Ray Data's ``preserve_order``),
where they are written to the shard's part file. Ray retries a failed task, and restarts an
actor that died (its process killed, its machine lost) and runs its batch again, so every
input row is written exactly once; the writer checks it row by row. A re-run with the same
``output`` skips the shards the manifest records as complete.

Without an ``address`` this starts a Ray cluster on this machine (its cores, an object store
of ``object_store_memory`` bytes) for the run; ``auto`` joins the cluster this machine
belongs to (``ray start``), ``HOST:PORT`` the one whose head is there, and ``ray://HOST:PORT``
uses Ray Client (``pip install "ray[client]"``). An address that cannot be reached ends the
run at once with :class:`ClusterUnreachable`, before anything is written.

Example::

    from graphormer_urpe.inference import predict_on_ray

    summary = predict_on_ray("runs/x/best.pt", "library/", "predictions/")
    summary["rows"], summary["failed"], summary["skipped_shards"]
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...loading import load_models
from ..defaults import DEFAULT_BATCH_SIZE, DEFAULT_OBJECT_STORE_MIB, DEFAULT_ROWS_PER_BLOCK
from ..stream import Featurizing
from .output import Manifest, PartWriter
from .predictor import FeaturizedPredictor, Predictor, featurize_block, output_layout
from .shards import list_shards, read_shard, shards_have_names

__all__ = [
    "ClusterUnreachable",
    "connect",
    "predict_on_ray",
]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
"""How long the head's address may take to answer before the run is refused."""


class ClusterUnreachable(ConnectionError):
    """The Ray cluster's address does not answer (or Ray Client is missing for ``ray://``)."""


def _import_ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"the Ray engine needs Ray Data ({exc}); install it with "
            "pip install 'graphormer-urpe[ray]'"
        ) from None
    return ray


def _head_of(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``HOST:PORT`` or ``ray://HOST:PORT`` address (``None``: other)."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def _probe(address: str, timeout: float) -> None:
    """Raise :class:`ClusterUnreachable` unless ``address`` accepts a connection within
    ``timeout`` seconds (Ray itself would retry for a minute or more)."""
    head = _head_of(address)
    if head is None:
        raise ClusterUnreachable(
            f"cannot read the Ray address {address!r}; expected auto, HOST:PORT or ray://HOST:PORT"
        )
    try:
        with socket.create_connection(head, timeout=timeout):
            pass
    except OSError as exc:
        raise ClusterUnreachable(
            f"cannot reach the Ray cluster at {address} ({exc.strerror or exc}); start it with "
            "`ray start --head` there, or check the address"
        ) from None


def connect(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    object_store_mib: int = DEFAULT_OBJECT_STORE_MIB,
    timeout: float = CONNECT_TIMEOUT_S,
) -> bool:
    """Connect this process to a Ray cluster (see the module's text for ``address``), or
    start one here (``address`` ``None`` and no ``RAY_ADDRESS`` in the environment:
    ``num_cpus`` cores, default all, and an object store of ``object_store_mib`` MiB). A
    process already connected (``ray.init`` called) stays on its cluster, once ``address``
    has been checked.

    Returns:
        Whether this process started the cluster (and so should shut it down).

    Raises:
        ClusterUnreachable: the address does not answer within ``timeout`` seconds, or
            ``ray://`` without Ray Client.
    """
    ray = _import_ray()
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is not None:
        _check_address(address, timeout)
    if ray.is_initialized():
        return False
    if address is None:
        with _own_signal_handlers():
            ray.init(
                num_cpus=num_cpus,
                object_store_memory=object_store_mib * 2**20,
                include_dashboard=False,
                logging_level=logging.WARNING,
            )
        return True
    try:
        with _own_signal_handlers():
            ray.init(address=address, logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise ClusterUnreachable(f"cannot join the Ray cluster at {address}: {exc}") from None
    return False


@contextlib.contextmanager
def _own_signal_handlers() -> Iterator[None]:
    """Keep this process's SIGINT and SIGTERM handlers through ``ray.init`` (which installs
    its own, and leaves them after ``ray.shutdown``): the caller decides what a signal does
    (``predict`` stops the run, keeps the complete shards, and shuts the cluster down)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            if handler is not None:
                signal.signal(sig, handler)


def _check_address(address: str, timeout: float) -> None:
    """Raise :class:`ClusterUnreachable` unless ``address`` can be joined: Ray Client is
    installed for ``ray://``, ``auto`` finds a cluster, the head answers."""
    if address.startswith("ray://"):
        try:
            import grpc  # noqa: F401
            import ray.util.client  # noqa: F401
        except ImportError:
            raise ClusterUnreachable(
                f"{address}: a ray:// address uses Ray Client; install it with "
                "pip install 'ray[client]'"
            ) from None
    if address == "auto":
        found = _auto_address()
        if found is None:
            raise ClusterUnreachable(
                "no Ray cluster found on this machine (address auto); start one with "
                "`ray start --head`, or give its address"
            )
        address = found
    _probe(address, timeout)


def _auto_address() -> str | None:
    """The address ``auto`` stands for (``RAY_ADDRESS``, or the cluster ``ray start`` left
    on this machine), or ``None``."""
    try:
        from ray._private.services import canonicalize_bootstrap_address

        return canonicalize_bootstrap_address("auto")
    except (ImportError, ConnectionError):
        return None


def _read_block(batch: dict[str, np.ndarray], rows_per_block: int, smiles_column: str):
    """Read task: the shards of ``batch`` (columns ``shard``, ``path``) in blocks of rows."""
    for shard, path in zip(batch["shard"].tolist(), batch["path"].tolist(), strict=True):
        yield from read_shard(path, shard, rows_per_block, smiles_column)


def predict_on_ray(
    checkpoint: str | Path,
    source: str | Path,
    output: str | Path,
    *,
    address: str | None = None,
    smiles_column: str = "smiles",
    batch_size: int = DEFAULT_BATCH_SIZE,
    rows_per_block: int = DEFAULT_ROWS_PER_BLOCK,
    actors: int | None = None,
    similarity: bool = True,
    embeddings: bool = False,
    logits: bool = False,
    interval: float | None = None,
    num_cpus: int | None = None,
    object_store_mib: int = DEFAULT_OBJECT_STORE_MIB,
    gpus: bool = True,
    featurize: str = "auto",
    progress: Callable[[int], object] | None = None,
) -> dict[str, Any]:
    """Predict every row of the shards of ``source`` on a Ray cluster into ``output``.

    Args:
        checkpoint: a checkpoint or an ensemble folder; read here and sent to the actors (the
            cluster's machines need not see it).
        source: a folder, a glob pattern or a file
            (:func:`~graphormer_urpe.inference.engines.ray.shards.list_shards`); every machine of
            the cluster must read these paths (a shared file system).
        output: the folder of part files and ``manifest.json`` (written by this process).
        address: the cluster (see the module's text); ``None``: start one here.
        smiles_column: the SMILES column of CSV and Parquet shards.
        batch_size: valid molecules per forward pass.
        rows_per_block: input rows per block (an actor's call).
        actors: model copies (default: one per GPU of the cluster, else one per CPU).
        similarity: search each molecule's nearest training fingerprint.
        embeddings: also write each part's ``.npy`` of embeddings.
        logits: binary tasks: raw scores instead of probabilities.
        interval: a regression's interval level (e.g. ``0.9``).
        num_cpus: a cluster started here: its cores (default all).
        object_store_mib: a cluster started here: its object store (MiB).
        gpus: run the actors on the cluster's GPUs where it has them (``False``: CPUs).
        featurize: ``tasks`` (CPU tasks featurise, the actors only run the model), ``actors``
            (each actor featurises its block), or ``auto``: tasks for GPU actors, the actors
            themselves on a CPU cluster (a CPU actor is a CPU worker: featurising where it
            predicts saves sending the graphs through the object store).
        progress: called with the number of rows of each block written.

    Returns:
        ``rows``, ``failed``, ``outside`` (written in this run), ``shards``,
        ``skipped_shards`` (complete from an earlier run), ``seconds``, ``output``.
    """
    started = time.perf_counter()
    if featurize not in ("auto", "actors", "tasks"):
        raise ValueError(f"featurize is auto, actors or tasks, not {featurize!r}")
    shards = list_shards(source)
    names = shards_have_names(shards)
    models = load_models(checkpoint, "cpu")
    from ...intervals.calibration import check_interval_request

    loaded = models[0]
    calibration = check_interval_request(
        checkpoint, interval, loaded.task_type, loaded.target_names
    )
    layout = output_layout(models, calibration, interval, logits, names)
    ray = _import_ray()
    own = connect(address, num_cpus=num_cpus, object_store_mib=object_store_mib)
    try:
        manifest = Manifest(output, str(checkpoint), layout.header, embeddings)
        sources = [str(p) for p in shards]
        todo = [s for s in sources if not manifest.complete(s)]
        summary = {"shards": len(sources), "skipped_shards": len(sources) - len(todo)}
        manifest.save()
        writer = PartWriter(
            manifest, todo, layout, [m.model for m in models] if embeddings else None, progress
        )
        if todo:
            predictor = {
                "model": models,
                "smiles_column": "smiles",
                "batch_size": batch_size,
                "similarity": similarity,
                "embeddings": embeddings,
                "interval": interval,
                "logits": logits,
                "calibration": calibration,
                "threads": 1,
            }
            layout_of = {"actors": actors, "gpus": gpus, "featurize": featurize}
            try:
                with _data_context(quiet=progress is not None):
                    batches = _run(ray, todo, predictor, rows_per_block, smiles_column, **layout_of)
                    for batch in batches:
                        writer.write(batch)
                writer.finish()
            except BaseException:
                writer.abort()
                raise
        seconds = round(time.perf_counter() - started, 2)
        counts = {"rows": writer.rows, "failed": writer.failed, "outside": writer.outside}
        return {**counts, **summary, "seconds": seconds, "output": str(output)}
    finally:
        if own:
            ray.shutdown()


def _plan(ray, actors: int | None, gpus: bool) -> tuple[int, dict[str, Any]]:
    """How many actors, and each one's resources: a GPU each where the cluster has GPUs
    (and ``gpus``), else a CPU each."""
    resources = ray.cluster_resources()
    cpus, count = int(resources.get("CPU", 1)), int(resources.get("GPU", 0)) if gpus else 0
    if count:
        return actors or count, {"num_gpus": 1, "num_cpus": 1}
    return actors or max(1, cpus), {"num_cpus": 1}


@contextlib.contextmanager
def _data_context(quiet: bool) -> Iterator[None]:
    """Ray Data's settings for the run, restored after it: rows in input order (set before
    the dataset is made: without it, blocks come out as they finish), blocks of at most
    :data:`BLOCK_BYTES`, and with ``quiet`` no progress bars of Ray's own."""
    from ray.data import DataContext

    context = DataContext.get_current()
    options = context.execution_options
    before = (options.preserve_order, context.target_max_block_size, context.enable_progress_bars)
    data_log = logging.getLogger("ray.data")
    level = data_log.level
    options.preserve_order = True
    context.target_max_block_size = BLOCK_BYTES
    if quiet:
        context.enable_progress_bars = False
        data_log.setLevel(logging.WARNING)  # Ray's own progress lines
    try:
        yield
    finally:
        options.preserve_order, context.target_max_block_size, context.enable_progress_bars = before
        data_log.setLevel(level)


BLOCK_BYTES = 128 * 2**10
"""Ray Data's largest block for the run: a read task's blocks are smaller than an actor's
batch, so its blocks spread over all actors (Ray's default, 128 MiB, makes one block of a
whole shard)."""


def _run(
    ray,
    todo: list[str],
    predictor: dict[str, Any],
    rows_per_block: int,
    smiles_column: str,
    actors: int | None,
    gpus: bool,
    featurize: str,
) -> Iterator[dict[str, np.ndarray]]:
    """The dataset of ``todo``'s predicted rows, in input order, as numpy batches."""
    from ray.data import ActorPoolStrategy, TaskPoolStrategy

    items = [{"shard": i, "path": path} for i, path in enumerate(todo)]
    count, resources = _plan(ray, actors, gpus)
    ds = ray.data.from_items(items).map_batches(
        _read_block,
        batch_size=1,
        fn_kwargs={"rows_per_block": rows_per_block, "smiles_column": smiles_column},
        num_cpus=0,
        compute=TaskPoolStrategy(size=1),
    )
    if featurize == "auto":
        featurize = "tasks" if "num_gpus" in resources else "actors"
    udf, batch_size = Predictor, rows_per_block
    if featurize == "tasks":
        models = predictor["model"]
        featurizing = Featurizing.of(models[0], predictor["similarity"])
        ds = ds.map_batches(
            featurize_block,
            batch_size=rows_per_block,
            fn_kwargs={"featurizing": featurizing},
            num_cpus=1,
        )
        udf, batch_size = FeaturizedPredictor, 1
    # Ray Data restarts an actor that died (max_restarts=-1) and retries its batch
    # (max_task_retries=-1), its defaults for actor pools
    ds = ds.map_batches(
        udf,
        fn_constructor_kwargs=predictor,
        batch_size=batch_size,
        compute=ActorPoolStrategy(size=count),
        **resources,
    )
    return ds.iter_batches(batch_size=None, batch_format="numpy")
