r"""Molecular datasets: sources read into one store, featurisers, splits and metrics.

The package is cut by concept:

* :mod:`.sources`: where a dataset comes from, one module per source: ``csv:PATH``
  (:mod:`.sources.smiles_csv`), ``sdf:PATH`` (:mod:`.sources.sdf`), ``nci5k``
  (:mod:`.sources.nci`), ``zinc`` and ``zinc-full`` (:mod:`.sources.zinc`), ``ogbg-mol*``
  (:mod:`.sources.ogbg_mol`), ``pcqm4mv2`` and ``pcqm4m`` (:mod:`.sources.pcqm`) and
  ``pretrain:PATH`` (:mod:`.sources.pretrain`: any SMILES file with its RDKit 2D descriptors
  as targets). Each reads its files into records
  (:class:`~.store.records.MoleculeRecords`).
* :mod:`.store`: the records go into one memory-mapped store (2 bytes per atom pair, built
  once in parallel resumable chunks, kept in the folder :mod:`.store.location` names);
  batches decode the path features when they are read.
* :mod:`.featurizers`: molecules into numbers: the graph featurisers
  (:mod:`.featurizers.molecule_graphs`: ZINC's atom types, OGB's features), RDKit 2D
  descriptors, Morgan fingerprints.
* beside them, a module each: the dataset names (:mod:`.spec`, the one parser of dataset
  names: :class:`~.spec.DatasetSpec`), the name → splits registry (:mod:`.registry`), the
  splits a loader returns (:mod:`.dataset_splits`) and how they are drawn
  (:mod:`.split_indices`), the input policy (:mod:`.input_policy`), metrics (:mod:`.metrics`),
  per-molecule features joined before the head (:mod:`.mol_features`,
  ``--mol-features rdkit2d``) and the applicability domain (:mod:`.domain`, reading what
  molecules are made of with :mod:`.composition`).

Example::

    from graphormer_urpe.datasets import load_dataset

    splits = load_dataset("nci5k")
    splits.train[0]                      # Data(x=[N, 9], edge_attr=[E, 3], y=[1, 1], ...)
    splits.evaluate(y_pred, y_true)      # {"mae": ..., "rmse": ...}

For your own PyG datasets, :class:`~graphormer_urpe.graph.transform.GraphormerFeatures` is the
``pre_transform`` that stores the same features on each ``Data``.

The public names are imported from their modules on first use (PEP 562). The names from before
the store was called a store (``MoleculeCache``, ``CachedGraphDataset``,
``build_molecule_cache``, ``default_cache_dir``, ``CACHE_ENV``, and ``store_dir``, now
``store_folder``) still resolve, with a ``DeprecationWarning``, until the next minor release.
"""

from __future__ import annotations

from ..utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".featurizers.descriptors": [
            "DESCRIPTOR_NAMES",
            "DescriptorNormalizer",
            "compute_descriptors",
            "descriptor_set_id",
        ],
        ".featurizers.molecule_graphs": ["FEATURIZERS", "featurize_smiles", "ogb_smiles_to_graph"],
        ".featurizers.smiles": ["InvalidMoleculeError"],
        ".featurizers.zinc_atoms": ["ZINC_ATOM_TYPES", "UnknownAtomTypeError", "zinc_mol_to_graph"],
        ".metrics": ["regression_metrics"],
        ".sources.nci": ["NCI5K_PATH", "open_nci", "read_nci", "read_nci_smiles"],
        ".sources.ogbg_mol": ["OGBGEvaluator", "OGBGInfo", "ogbg_molecule_names", "open_ogbg"],
        ".sources.pcqm_files": ["LSC_DATASETS"],
        ".sources.pcqm": [
            "LSCData",
            "LSCEvaluator",
            "load_lsc_splits",
            "open_lsc",
            "preprocess_lsc",
        ],
        ".dataset_splits": ["DatasetSplits"],
        ".input_policy": ["apply_input_policy", "graph_sizes", "target_values"],
        ".sources.pretrain": ["DescriptorTargets", "load_pretrain", "read_smiles_list"],
        ".registry": [
            "DATASET_NAMES",
            "load_csv",
            "load_dataset",
            "load_nci5k",
            "load_ogbg",
            "load_zinc_splits",
            "split_store",
        ],
        ".sources.smiles_csv": ["open_csv", "read_smiles_csv"],
        ".spec": ["DatasetSpec", "parse_dataset_spec"],
        ".store.location": ["STORE_ENV", "default_store_dir", "store_folder"],
        ".store.records": ["MoleculeRecords", "open_store"],
        ".split_indices": [
            "DEFAULT_FRACTIONS",
            "SPLITS",
            "balanced_scaffold_split",
            "murcko_scaffold",
            "random_split",
            "scaffold_split",
        ],
        ".store": [
            "StoreGraphDataset",
            "MoleculeStore",
            "MoleculeFailure",
            "build_molecule_store",
            "decode_graphs",
            "featurize_chunk",
            "with_pointers",
        ],
        ".sources.zinc": ["ZINC_DEFAULT_ROOT", "open_zinc"],
        ".sources.download": ["DatasetUnavailableError"],
        ".sources.penalized_logp": ["penalized_logp"],
    },
    renamed={
        "CACHE_ENV": "STORE_ENV",
        "CachedGraphDataset": "StoreGraphDataset",
        "MoleculeCache": "MoleculeStore",
        "build_molecule_cache": "build_molecule_store",
        "default_cache_dir": "default_store_dir",
        "store_dir": "store_folder",
    },
)
