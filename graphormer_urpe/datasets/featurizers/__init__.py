"""Molecules into numbers: graphs for the model, descriptors and fingerprints beside them.

=======================  ===================================================================
module                   holds
=======================  ===================================================================
:mod:`.molecule_graphs`  SMILES → PyG graph: the ``zinc`` and ``ogb`` featurisers by name
:mod:`.smiles`           SMILES → RDKit molecule, and the error of one that cannot be read
:mod:`.zinc_atoms`       the ZINC benchmark's 28 atom types and its Kekulé bond orders
:mod:`.ogb_features`     OGB's atom and bond features, for one molecule or many at once
:mod:`.descriptors`      RDKit 2D descriptors and their robust normalisation
:mod:`.fingerprints`     Morgan fingerprints and the nearest-neighbour Tanimoto search
=======================  ===================================================================
"""
