r"""The dataset registry: a name → the store of its source → train / valid / test splits.

==================  ===========================================  ==============  ==========
name                source (module)                              default root    featurizer
==================  ===========================================  ==============  ==========
``nci5k``           RDKit's 5k NCI molecules (:mod:`.sources.nci`)       (ships with     ``ogb``
                                                                 RDKit)
``zinc``            ZINC subset (:mod:`.sources.zinc`, PyG's raw files)  ``data/ZINC``   ``zinc``
``zinc-full``       full ZINC (:mod:`.sources.zinc`)                     ``data/ZINC``   ``zinc``
``csv:PATH``        a SMILES CSV (:mod:`.sources.smiles_csv`)            (the file)      ``ogb``
``csv:A,B,C``       separate train, valid, test CSV files        (the files)     ``ogb``
``sdf:PATH``        an SD file, its SD properties as columns     (the file)      ``ogb``
                    (:mod:`.sources.sdf`; also ``csv:X.sdf``)
``pcqm4mv2``        OGB-LSC PCQM4Mv2 (:mod:`.sources.pcqm`; test =       ``data``        ``ogb``
                    test-dev)
``pcqm4m``          OGB-LSC PCQM4M v1 (test: unlabelled)         ``data``        ``ogb``
``ogbg-mol*``       OGB molecule sets (:mod:`.sources.ogbg_mol`)             ``data``        ``ogb``
``pretrain:PATH``   any SMILES file; targets: normalised RDKit   (the file)      ``ogb``
                    2D descriptors (:mod:`.sources.pretrain`)
==================  ===========================================  ==============  ==========

Every source goes into one memory-mapped store (:mod:`.store`, in the store folder of
:mod:`.store.records`), built once in parallel chunks (``workers``) and reused; each split is a
:class:`~graphormer_urpe.datasets.store.StoreGraphDataset` whose batches decode the path
features when they are read. :func:`load_dataset` then applies the input policy
(:func:`~graphormer_urpe.datasets.input_policy.apply_input_policy`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from functools import partial

import numpy as np

from .dataset_splits import DatasetSplits, unreadable_by_split
from .input_policy import apply_input_policy
from .metrics import classification_metrics
from .mol_features import needs_descriptors, with_mol_features
from .sources.nci import NCI5K_PATH, open_nci
from .sources.ogbg_mol import OGBGEvaluator, open_ogbg
from .sources.pcqm import load_lsc_splits
from .sources.pcqm_files import LSC_DATASETS
from .sources.sdf_blocks import is_sdf
from .sources.smiles_csv import open_csv
from .sources.zinc import ZINC_DEFAULT_ROOT, open_zinc
from .spec import DATASET_NAMES, DatasetSpec, parse_dataset_spec, table_paths
from .split_indices import DEFAULT_FRACTIONS, SPLITS, random_split, scaffold_split
from .store import FEATURIZER_NAMES, MoleculeStore, StoreGraphDataset
from .store.records import check_strict

__all__ = [
    "DATASET_NAMES",
    "DatasetSplits",
    "load_dataset",
    "load_nci5k",
    "load_zinc_splits",
    "load_csv",
    "load_ogbg",
    "split_store",
    "store_report",
]

logger = logging.getLogger(__name__)


def _check_featurizer(featurizer: str | None, default: str) -> str:
    chosen = default if featurizer is None else featurizer
    if chosen not in FEATURIZER_NAMES:
        raise ValueError(f"unknown featurizer {chosen!r}; choose one of {sorted(FEATURIZER_NAMES)}")
    return chosen


def split_store(
    store: MoleculeStore,
    method: str = "random",
    seed: int = 0,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
) -> dict[str, np.ndarray]:
    """Train / valid / test store positions of a store's graphs.

    Args:
        store: the store.
        method: ``"random"`` (seeded), ``"scaffold"`` (Bemis–Murcko, over the stored SMILES)
            or ``"column"`` (the split codes stored with the graphs).
        seed: seed of the random split.
        fractions: train / valid / test fractions for ``random`` and ``scaffold``.

    Returns:
        ``{"train", "valid", "test"}`` → sorted positions covering every graph once (with
        ``"column"``: every graph that has a split label).
    """
    if method == "random":
        return random_split(len(store), fractions, seed)
    if method == "scaffold":
        return scaffold_split(store.smiles(np.arange(len(store))), fractions, seed)
    if method == "column":
        codes = store.split_codes
        if codes is None:
            raise ValueError(f"{store.meta['source']}: no split column was given")
        codes = np.asarray(codes)
        return {name: np.flatnonzero(codes == c).astype(np.int64) for c, name in enumerate(SPLITS)}
    raise ValueError(f"unknown split method {method!r}; choose 'random', 'scaffold' or 'column'")


def _why_empty(store: MoleculeStore, method: str, part: str, fractions: Sequence[float]) -> str:
    if method == "column":
        codes = store.split_codes
        present = (
            sorted({SPLITS[c] for c in np.unique(codes) if c >= 0}) if codes is not None else []
        )
        column = store.meta.get("split_column")
        where = f"in split column {column!r}" if column else "in its split files"
        return (
            f"no valid row of {store.meta['source']} has the label {part!r} {where} "
            f"(labels present: {present})"
        )
    return (
        f"a {method} split of {len(store)} graph(s) with fractions {tuple(fractions)} "
        f"leaves it none; add molecules or give a split column"
    )


def _splits_of_store(
    name: str,
    store: MoleculeStore,
    method: str,
    seed: int,
    multi_hop_max_dist: int,
    **fields,
) -> DatasetSplits:
    """:class:`DatasetSplits` over one store, split by ``method``."""
    parts = split_store(store, method, seed)
    for part, pos in parts.items():
        if pos.size == 0:
            why = _why_empty(store, method, part, DEFAULT_FRACTIONS)
            raise ValueError(f"{name}: the {part} split is empty: {why}")
    sets = {p: StoreGraphDataset(store, pos, multi_hop_max_dist, p) for p, pos in parts.items()}
    fields.setdefault("unreadable", unreadable_by_split(store.failures, method))
    fields.setdefault("featurizer", store.featurizer)
    fields.setdefault("target_names", store.target_names)
    return DatasetSplits(name=name, **sets, **fields)


def load_nci5k(
    multi_hop_max_dist: int = 20,
    *,
    featurizer: str | None = None,
    split: str = "random",
    seed: int = 0,
    strict: bool = False,
    limit: int | None = None,
    store_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
    source: str = NCI5K_PATH,
) -> DatasetSplits:
    """RDKit's NCI molecules labelled with penalized logP, split 80/10/10.

    Args:
        multi_hop_max_dist: hops of path bond features in ``edge_input``.
        featurizer: default ``"ogb"``.
        split: ``"random"`` (seeded) or ``"scaffold"``.
        seed: split seed (fixed default 0).
        strict: raise instead of skipping invalid molecules.
        limit: only the first ``limit`` molecules (quick checks).
        store_dir: the store folder.
        workers: processes building the store.
        source: the NCI file (default: the one shipped with RDKit).
    """
    feat = _check_featurizer(featurizer, "ogb")
    store = open_nci(source, feat, limit, store_dir=store_dir, workers=workers)
    if strict:
        check_strict(store, "nci5k", store.describe_row)
    return _splits_of_store("nci5k", store, split, seed, multi_hop_max_dist)


def load_zinc_splits(
    root: str | os.PathLike[str] | None = None,
    multi_hop_max_dist: int = 20,
    *,
    subset: bool = True,
    featurizer: str | None = None,
    store_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
) -> DatasetSplits:
    """ZINC's official splits (subset or full) as :class:`DatasetSplits`."""
    if featurizer not in (None, "zinc"):
        raise ValueError(
            f"ZINC ships pre-featurised graphs (28 atom types); featurizer must be 'zinc', "
            f"got {featurizer!r}"
        )
    root = ZINC_DEFAULT_ROOT if root is None else root
    store = open_zinc(root, subset, store_dir=store_dir, workers=workers)
    name = "zinc" if subset else "zinc-full"
    return _splits_of_store(name, store, "column", 0, multi_hop_max_dist)


def load_ogbg(
    name: str,
    root: str | os.PathLike[str] | None = None,
    multi_hop_max_dist: int = 5,
    *,
    store_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
    download: bool = True,
) -> DatasetSplits:
    """An ``ogbg-mol*`` dataset: official scaffold splits, ``task_type`` ``"binary"`` (BCE with
    missing labels masked) or ``"regression"``, the metric and its direction from OGB's
    ``master.csv``, OGB's evaluator."""
    store, info = open_ogbg(name, root, store_dir=store_dir, workers=workers, download=download)
    splits = _splits_of_store(
        name,
        store,
        "column",
        0,
        multi_hop_max_dist,
        target_names=info.task_names,
        metric=info.metric,
        task_type="binary" if info.binary else "regression",
        higher_is_better=info.higher_is_better,
        evaluator=OGBGEvaluator(name),
    )
    logger.info(
        "%s: %d / %d / %d graphs (train / valid / test), %d task(s), %s",
        name,
        len(splits.train),
        len(splits.valid),
        len(splits.test),
        info.num_tasks,
        info.metric,
    )
    return splits


def load_csv(
    spec: str,
    multi_hop_max_dist: int = 20,
    *,
    smiles_column: str = "smiles",
    target_columns: list[str] | None = None,
    task: str = "regression",
    split_column: str | None = None,
    split: str = "random",
    seed: int = 0,
    featurizer: str | None = None,
    descriptors: bool = False,
    strict: bool = False,
    store_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
) -> DatasetSplits:
    """A SMILES CSV (``PATH``) or three per-split CSVs (``TRAIN,VALID,TEST``).

    One file is split by ``split_column`` when given, else by ``split`` (``"random"`` or
    ``"scaffold"``, 0.8/0.1/0.1, seeded). Three files are used as they are; target columns
    inferred from the train file apply to all three. ``task="classification"``: every
    target is a binary label (0 / 1, empty = missing), trained with BCE on one logit per
    target and selected on the mean ROC-AUC (PRC-AUC reported too).

    Args:
        spec: ``PATH`` or ``TRAIN,VALID,TEST``.
        multi_hop_max_dist: hops of path bond features in ``edge_input``.
        smiles_column, target_columns, task: the table's columns and what its targets are
            (``None``: every numeric column).
        split_column, split, seed: how one file is split.
        featurizer, descriptors, strict: the store's graphs (default featuriser ``ogb``), its
            RDKit 2D descriptors, and whether an invalid SMILES raises.
        store_dir, workers: where the store lives and the processes that build it.
    """
    if task not in ("regression", "classification"):
        raise ValueError(f"task must be 'regression' or 'classification', got {task!r}")
    options = {"smiles_column": smiles_column, "featurizer": _check_featurizer(featurizer, "ogb")}
    store_options = {"store_dir": store_dir, "workers": workers, "strict": strict}
    if descriptors:
        store_options["descriptors"] = True
    paths = table_paths(spec)  # one file, or three
    if len(paths) == 1:
        if split_column is not None and split not in ("random", "column"):
            raise ValueError(f"split={split!r} conflicts with split_column={split_column!r}")
        store = open_csv(
            paths[0],
            **options,
            target_columns=target_columns,
            split_column=split_column,
            **store_options,
        )
        method = "column" if split_column is not None else split
        fields = _task_fields(task, [store], store.target_names)
        kind = "sdf" if is_sdf(paths[0]) else "csv"  # its name in logs, reports and stores
        return _splits_of_store(f"{kind}:{spec}", store, method, seed, multi_hop_max_dist, **fields)
    train = open_csv(paths[0], **options, target_columns=target_columns, **store_options)
    names = train.target_names
    stores = [train] + [
        open_csv(p, **options, target_columns=names, **store_options) for p in paths[1:]
    ]
    sets = {
        part: StoreGraphDataset(c, np.arange(len(c)), multi_hop_max_dist, part)
        for part, c in zip(SPLITS, stores, strict=True)
    }
    return DatasetSplits(
        name=f"csv:{spec}",
        featurizer=options["featurizer"],
        target_names=names,
        **sets,
        **_task_fields(task, stores, names),
        unreadable={p: len(c.failures) for p, c in zip(SPLITS, stores, strict=True) if c.failures},
    )


def _task_fields(task: str, stores: Sequence[MoleculeStore], names: list[str]) -> dict:
    """The :class:`DatasetSplits` fields of a CSV's task; binary labels are checked."""
    if task == "regression":
        return {}
    for store in stores:
        y = np.asarray(store.targets, dtype=np.float64)
        bad = ~np.isnan(y) & (y != 0) & (y != 1)
        if bad.any():
            row, col = np.argwhere(bad)[0]
            where = store.describe_row(int(store.source_index[row]))
            raise ValueError(
                f"{store.meta['source']} {where}: target column {names[col]!r} holds "
                f"{y[row, col]:g}; --task classification needs labels 0 and 1 (empty = missing)"
            )
    return {
        "task_type": "binary",
        "metric": "rocauc",
        "higher_is_better": True,
        "evaluator": partial(classification_metrics, target_names=names),
    }


def store_report(splits: DatasetSplits) -> dict:
    """The stores behind ``splits``: folder, rows, graphs, failures, bytes; and split sizes."""
    stores = {}
    for part in SPLITS:
        ds = getattr(splits, part)
        store = getattr(ds, "store", None)
        if isinstance(store, MoleculeStore) and str(store.folder) not in stores:
            stores[str(store.folder)] = {
                "store": str(store.folder),
                "rows": int(store.meta["rows"]),
                "graphs": len(store),
                "failures": len(store.failures),
                "bytes": store.nbytes,
            }
    return {
        "dataset": splits.name,
        "graphs": {part: len(getattr(splits, part)) for part in SPLITS},
        "metric": splits.metric,
        "task_type": splits.task_type,
        "stores": list(stores.values()),
    }


def load_dataset(
    name: str | DatasetSpec,
    root: str | None = None,
    multi_hop_max_dist: int = 20,
    *,
    strict: bool = False,
    smiles_column: str = "smiles",
    target_columns: list[str] | None = None,
    split_column: str | None = None,
    split: str = "random",
    seed: int = 0,
    featurizer: str | None = None,
    max_nodes: int | None = None,
    store_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
    task: str = "regression",
    mol_features: str = "none",
    mol_features_record: dict | None = None,
) -> DatasetSplits:
    """Load a dataset by name: ``nci5k``, ``zinc``, ``zinc-full``, ``csv:PATH``,
    ``csv:TRAIN,VALID,TEST``, ``pcqm4mv2``, ``pcqm4m``, an ``ogbg-mol*`` name or
    ``pretrain:PATH`` (a SMILES file with its RDKit descriptors as targets).

    Args:
        name: the source (see the module table), as text or parsed
            (:func:`~.spec.parse_dataset_spec`).
        root: dataset root for downloaded sets: ``data/ZINC`` for ZINC, ``data`` for the OGB
            sets (unused by ``nci5k`` and CSV files).
        multi_hop_max_dist: hops of path bond features in ``edge_input`` (applied when
            graphs are read; the store does not depend on it).
        strict: invalid SMILES raise instead of being reported and left out.
        smiles_column: CSV: the SMILES column.
        target_columns: CSV: the target columns (``None``: every numeric column).
        split_column: CSV: a column of ``train``/``valid``/``test`` labels.
        split: ``"random"`` or ``"scaffold"`` for ``nci5k`` and single CSV files without a
            split column (the other sets have official splits).
        seed: seed of the random split.
        featurizer: ``"zinc"`` or ``"ogb"``; default ``zinc`` for ZINC, ``ogb`` otherwise
            (OGB sets accept only ``ogb``).
        max_nodes: leave training graphs with more than this many atoms out (logged);
            validation and test graphs are always kept. ``None``: no limit.
        store_dir: the folder of the stores (default: :func:`~.store.location.default_store_dir`).
        workers: processes that build a missing store.
        task: CSV: ``"regression"`` or ``"classification"`` (binary labels: BCE, ROC-AUC and
            PRC-AUC); the other sets have their own task.
        mol_features: one of :data:`~.mol_features.MOL_FEATURES` (CSV datasets): every
            graph carries its molecule features as ``mol_x`` (:mod:`.mol_features`).
        mol_features_record: a run's ``DatasetSplits.mol_features``: normalise with its
            statistics instead of the training split's (evaluating a trained model).

    Returns:
        The :class:`DatasetSplits`, filtered by
        :func:`~graphormer_urpe.datasets.input_policy.apply_input_policy`.

    Raises:
        ValueError: unknown name, featuriser or split method; bad CSV columns; an empty split
            or a validation split without labels (the message names the split and dataset).
        InvalidMoleculeError: with ``strict``, any molecule that cannot be featurised (the
            message names the file, the rows and the SMILES).
        DatasetUnavailableError: a dataset's raw files missing and not downloadable.
    """
    spec = name if isinstance(name, DatasetSpec) else parse_dataset_spec(name)
    name = str(spec)
    store_options = {"store_dir": store_dir, "workers": workers}
    if task != "regression" and not spec.is_table:  # an SD file: a table of its SD properties
        raise ValueError(f"task={task!r} applies to csv: datasets; {name} has its own task")
    descriptors = needs_descriptors(mol_features)
    if mol_features != "none" and not spec.is_table:
        raise ValueError(
            f"molecule features ({mol_features}) are computed for csv: datasets, not {name}"
        )
    splits: DatasetSplits
    if spec.kind == "nci5k":
        splits = load_nci5k(
            multi_hop_max_dist,
            featurizer=featurizer,
            split=split,
            seed=seed,
            strict=strict,
            **store_options,
        )
    elif spec.kind in ("zinc", "zinc-full"):
        splits = load_zinc_splits(
            root,
            multi_hop_max_dist,
            subset=spec.kind == "zinc",
            featurizer=featurizer,
            **store_options,
        )
    elif spec.kind in LSC_DATASETS or spec.kind == "ogbg":
        if featurizer not in (None, "ogb"):
            raise ValueError(
                f"{name} ships OGB features; featurizer must be 'ogb', got {featurizer!r}"
            )
        if spec.kind in LSC_DATASETS:
            splits = load_lsc_splits(name, root, multi_hop_max_dist, strict=strict, **store_options)
        else:
            splits = load_ogbg(name, root, multi_hop_max_dist, **store_options)
    elif spec.kind == "pretrain":
        from .sources.pretrain import load_pretrain

        splits = load_pretrain(
            spec.location,
            multi_hop_max_dist,
            smiles_column=smiles_column,
            seed=seed,
            **store_options,
        )
    else:  # a table: csv:PATH, csv:TRAIN,VALID,TEST or sdf:PATH
        splits = load_csv(
            spec.location,
            multi_hop_max_dist,
            strict=strict,
            smiles_column=smiles_column,
            target_columns=target_columns,
            split_column=split_column,
            split=split,
            seed=seed,
            featurizer=featurizer,
            task=task,
            descriptors=descriptors,
            **store_options,
        )
    splits = with_mol_features(splits, mol_features, mol_features_record)
    return apply_input_policy(splits, max_nodes)
