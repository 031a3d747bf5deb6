r"""Molecular datasets: one module per source, one store behind all of them.

Where a dataset comes from is one file each: :mod:`.smiles_csv` (``csv:PATH``), :mod:`.nci`
(``nci5k``), :mod:`.zinc` (``zinc``, ``zinc-full``), :mod:`.ogbg` (``ogbg-mol*``),
:mod:`.pcqm` (``pcqm4mv2``, ``pcqm4m``), :mod:`.pretrain` (``pretrain:PATH``, any SMILES file
with its RDKit 2D descriptors, :mod:`.descriptors`, as targets). Each reads its files into records
(:class:`~.source.MoleculeRecords`) that go into one memory-mapped store (:mod:`.store`:
2 bytes per atom pair, built once in parallel resumable chunks, kept in the cache folder of
:mod:`.source`); batches decode the path features when they are read. The rest has a module
each: featurisers (:mod:`.featurize`), splits (:mod:`.splitting`), the input policy
(:mod:`.policy`), metrics (:mod:`.metrics`), per-molecule descriptor features joined
before the head (:mod:`.mol_features`, ``--mol-features rdkit2d``) and the name → splits
registry (:mod:`.registry`), which reads a name through :mod:`.spec` (the one parser of
dataset names: :class:`~.spec.DatasetSpec`).

Example::

    from graphormer_urpe.datasets import load_dataset

    splits = load_dataset("nci5k")
    splits.train[0]                      # Data(x=[N, 9], edge_attr=[E, 3], y=[1, 1], ...)
    splits.evaluate(y_pred, y_true)      # {"mae": ..., "rmse": ...}

For your own PyG datasets, :class:`~graphormer_urpe.graph.features.GraphormerFeatures` is the
``pre_transform`` that stores the same features on each ``Data``.

The public names are imported from their modules on first use (PEP 562).
"""

from __future__ import annotations

from ..utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".descriptors": [
            "DESCRIPTOR_NAMES",
            "DescriptorNormalizer",
            "compute_descriptors",
            "descriptor_set_id",
        ],
        ".featurize": [
            "FEATURIZERS",
            "ZINC_ATOM_TYPES",
            "InvalidMoleculeError",
            "UnknownAtomTypeError",
            "featurize_smiles",
            "ogb_smiles_to_graph",
            "zinc_mol_to_graph",
        ],
        ".metrics": ["regression_metrics"],
        ".nci": ["NCI5K_PATH", "open_nci", "read_nci", "read_nci_smiles"],
        ".ogbg": ["OGBGEvaluator", "OGBGInfo", "ogbg_molecule_names", "open_ogbg"],
        ".pcqm": [
            "LSC_DATASETS",
            "LSCData",
            "LSCEvaluator",
            "load_lsc_splits",
            "open_lsc",
            "preprocess_lsc",
        ],
        ".dataset_splits": ["DatasetSplits"],
        ".policy": ["apply_input_policy", "graph_sizes", "target_values"],
        ".pretrain": ["DescriptorTargets", "load_pretrain", "read_smiles_list"],
        ".registry": [
            "DATASET_NAMES",
            "load_csv",
            "load_dataset",
            "load_nci5k",
            "load_ogbg",
            "load_zinc_splits",
            "split_store",
        ],
        ".smiles_csv": ["open_csv", "read_smiles_csv"],
        ".spec": ["DatasetSpec", "parse_dataset_spec"],
        ".source": ["CACHE_ENV", "MoleculeRecords", "default_cache_dir", "open_store", "store_dir"],
        ".splitting": [
            "DEFAULT_FRACTIONS",
            "SPLITS",
            "balanced_scaffold_split",
            "murcko_scaffold",
            "random_split",
            "scaffold_split",
        ],
        ".store": [
            "CachedGraphDataset",
            "MoleculeCache",
            "MoleculeFailure",
            "build_molecule_cache",
            "decode_graphs",
            "featurize_chunk",
            "with_pointers",
        ],
        ".zinc": ["ZINC_DEFAULT_ROOT", "DatasetUnavailableError", "open_zinc"],
        ".zinc_target": ["penalized_logp"],
    },
)
