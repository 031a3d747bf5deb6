r"""The store behind every dataset: memory-mapped molecules, built in parallel chunks, read lazily.

A store is a folder of flat numpy arrays (``.npy``, opened with ``mmap_mode="r"``) plus
``meta.json``. For ``M`` molecules with ``N_m`` atoms and ``E_m`` directed bonds:

================  ===================  ======================================================
array             shape                content
================  ===================  ======================================================
``x``             ``[sum N, F]``       atom features (OGB: ``F = 9``), narrowest integer dtype
``edge_index``    ``[2, sum E]``       directed bonds, node ids local to each molecule
``edge_attr``     ``[sum E, F_e]``     bond features (OGB: ``F_e = 3``)
``y``             ``[M, T]`` float32   targets, ``NaN`` = missing (e.g. the test splits)
``node_ptr``      ``[M + 1]`` int64    offsets into ``x``; likewise ``edge_ptr``
``source_index``  ``[M]`` int64        the source row of each stored molecule
``smiles_bytes``  ``[sum len]`` uint8  SMILES (UTF-8) of SMILES sources; ``smiles_ptr``
                                       ``[M + 1]`` their offsets
``split``         ``[M]`` int8         split codes (0 train, 1 valid, 2 test) when the
                                       source labels its splits
``descriptors``   ``[M, K]`` float32   RDKit 2D descriptors
                                       (:mod:`..featurizers.descriptors`), only in stores
                                       built with ``descriptors=True``; ``NaN`` = the
                                       descriptor failed or was not finite
================  ===================  ======================================================

No pairwise data is stored (the store's size per molecule: docs/results/code-notes.md),
against the 30 bytes *per atom pair* of an ``int16`` ``[N, N, D, F_e]`` ``edge_input`` tensor
(``D = 5``, ``F_e = 3``), which would also tie the store to one ``multi_hop_max_dist``. The
Graphormer features are computed when graphs are read, for a whole batch at once when the
``DataLoader`` asks through ``__getitems__``, from the bonds
(:func:`~graphormer_urpe.graph.batched_structure.batched_graph_structure`); the graph that comes
out is identical to what :class:`~graphormer_urpe.graph.transform.GraphormerFeatures` stores.
(Format 1 also kept two ``[N, N]`` shortest-path matrices per molecule, 2 bytes per atom
pair that reading never used; its stores are left alone and rebuilt under format 2.)

**Building** (:func:`build_molecule_store`) splits the source rows into fixed chunks (the chunk
size is recorded in ``plan.json`` on the first run). Each chunk is featurised (OGB's features,
:mod:`..featurizers.ogb_features`, or the ZINC featuriser; sources of ready graphs such as
ZINC's pickles and OGB's raw files skip this step) and written to ``chunks/<id>/`` atomically
(a temporary folder renamed into place), by ``workers`` processes.
An interrupted build resumes with the chunks that are missing; finished chunks are never
recomputed. When all are there they are concatenated into the final arrays (again through
temporary files), ``meta.json`` is written last, and the chunks are removed.

**Descriptors** (``descriptors=True``, SMILES sources only): each chunk also computes the
RDKit 2D descriptors of its molecules (:func:`~..featurizers.descriptors.compute_descriptors`,
in the same worker processes, from the same SMILES), raw and unnormalised;
``meta.json["descriptors"]`` records the descriptor set and RDKit version
(:func:`~..featurizers.descriptors.descriptor_set_id`), the names and how many values per
descriptor were not finite. The option is part of the build plan, and sources put it in
their store's key (:func:`~.location.store_folder`), so a store built without descriptors is
never reused for a request with them: that builds its own store. They cost several times the
featurisation (measured: docs/results/code-notes.md).

**Failures.** A SMILES that RDKit cannot parse, or a molecule without atoms, is left out:
it is recorded (source row, SMILES, reason) in ``meta.json["failures"]``, counted and logged.
Consumers decide what a missing molecule means (training skips it with a logged count;
a submission refuses).

**The code**: :mod:`.format` (file names, arrays, reports), :mod:`.chunks` (featurising
and writing one chunk), :mod:`.build` (planning, running and merging the chunks) and
:mod:`.read` (:class:`MoleculeStore`, :class:`StoreGraphDataset`); this module gives
their public names.
"""

from __future__ import annotations

from .build import build_molecule_store, existing_store_report
from .chunks import GraphDict, featurize_chunk, featurize_smiles_list, graph_arrays, write_chunk
from .format import (
    DEFAULT_CHUNK_SIZE,
    FEATURIZER_NAMES,
    META_FILE,
    SPLIT_NAMES,
    STORE_FORMAT,
    ChunkResult,
    MoleculeFailure,
    StoreReport,
    store_is_complete,
)
from .read import (
    MoleculeStore,
    StoreGraphDataset,
    decode_graphs,
    flat_graphs,
    gather_arrays,
    with_pointers,
)

__all__ = [  # the code is in store_format, chunks, store_build and store_read
    "STORE_FORMAT",
    "DEFAULT_CHUNK_SIZE",
    "FEATURIZER_NAMES",
    "META_FILE",
    "SPLIT_NAMES",
    "StoreReport",
    "StoreGraphDataset",
    "ChunkResult",
    "GraphDict",
    "MoleculeStore",
    "MoleculeFailure",
    "gather_arrays",
    "build_molecule_store",
    "store_is_complete",
    "decode_graphs",
    "existing_store_report",
    "featurize_chunk",
    "featurize_smiles_list",
    "flat_graphs",
    "graph_arrays",
    "with_pointers",
    "write_chunk",
]
