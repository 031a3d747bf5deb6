"""Where a dataset comes from: one module per source, each reading its files into
:class:`~graphormer_urpe.datasets.store.records.MoleculeRecords` for the store.

=====================  =====================================================================
module                 holds
=====================  =====================================================================
:mod:`.smiles_csv`     ``csv:PATH``: a SMILES table with target columns
:mod:`.sdf`            ``sdf:PATH``: an SD file as a table (its text records: :mod:`.sdf_blocks`)
:mod:`.table_records`  a table's SMILES, target and split columns as records
:mod:`.table_check`    a table's head checked in a second, before any heavy import
:mod:`.nci`            ``nci5k``: RDKit's 5,000 NCI molecules, labelled with
                       :mod:`.penalized_logp`
:mod:`.zinc`           ``zinc``, ``zinc-full``: PyG's raw ZINC files
:mod:`.ogbg_mol`       ``ogbg-mol*``: OGB's graph-property molecule sets
:mod:`.pcqm`           ``pcqm4mv2``, ``pcqm4m``: OGB-LSC (their files: :mod:`.pcqm_files`)
:mod:`.pretrain`       ``pretrain:PATH``: a SMILES file with its RDKit descriptors as targets
:mod:`.download`       one streamed download, and the error of files that cannot be had
=====================  =====================================================================
"""
