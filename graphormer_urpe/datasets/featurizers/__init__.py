"""Molecules into numbers: graphs for the model, descriptors and fingerprints beside them.

=======================  ===================================================================
module                   holds
=======================  ===================================================================
:mod:`.molecule_graphs`  SMILES → PyG graph: the ``zinc`` and ``ogb`` featurisers, parsing and
                         its errors
:mod:`.ogb_features`     OGB's atom and bond features, for one molecule or many at once
:mod:`.descriptors`      RDKit 2D descriptors and their robust normalisation
:mod:`.fingerprints`     Morgan fingerprints and the nearest-neighbour Tanimoto search
=======================  ===================================================================
"""
