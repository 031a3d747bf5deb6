"""OGB's molecule features computed from whole-molecule arrays equal ``smiles2graph``'s."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from ogb.utils import smiles2graph
from rdkit import Chem, rdBase

from graphormer_urpe.datasets import ogb_smiles_to_graph
from graphormer_urpe.datasets.featurizers.ogb_features import (
    ogb_graphs,
    ogb_mol_graph,
    ogb_smiles_graph,
)
from tests.helpers import SHARED_DATA

# every "misc" code and every unusual value OGB encodes: dummy atoms, charges beyond +-5,
# radicals, lone hydrogens, S / SP3D / SP3D2 / unspecified hybridisation, square-planar,
# trigonal-bipyramidal and octahedral chirality, 11 neighbours, dative and quadruple bonds,
# E/Z bonds, salts, isotopes, aromatic rings with [nH]
ODD_SMILES = [
    "*C", "[*]", "[Fe+6]", "[U+7]", "[O-6]", "[CH2]C", "[C]", "[Si]", "[O]", "[H][H]", "[H]",
    "F[S](F)(F)(F)F", "F[S](F)(F)(F)(F)F", "C[Pt@SP1](F)(Cl)Br", "C[S@TB1](F)(Cl)(Br)N",
    "P[Co@OH1](F)(Cl)(Br)(I)N", "[W](C)(C)(C)(C)(C)(C)(C)(C)(C)(C)(C)", "[SH6]",
    "C/C=C/C", "C/C=C\\C", "F/C=C/C=C/Cl", "C1=CC=CC=C1", "C#N", "C=C=C", "[NH3]->[Cu+2]",
    "[Mo]$[Mo]", "C[C@H](F)Cl", "C[C@@H](F)Cl", "CC[C@]1(C)CC=C1", "[Na+].[Cl-]",
    "c1cc[nH]c1", "[2H]C", "[13CH4]", "B1CC1", "C[N+](C)(C)C", "CC(=O)[O-].[Na+]",
    "O=C(O)c1ccccc1-c1ccccc1", "CN1C=NC2=C1C(=O)N(C(=O)N2C)C",
]  # fmt: skip


def assert_same(got: dict, ref: dict) -> None:
    assert got["num_nodes"] == ref["num_nodes"]
    for key in ("node_feat", "edge_index", "edge_feat"):
        assert got[key].dtype == ref[key].dtype == np.int64, key
        assert got[key].shape == ref[key].shape, key
        assert np.array_equal(got[key], ref[key]), key


def test_odd_molecules_equal_smiles2graph():
    with rdBase.BlockLogs():
        for smi in ODD_SMILES:
            ref = smiles2graph(smi)
            assert_same(ogb_smiles_graph(smi), ref)
            assert_same(ogb_mol_graph(Chem.MolFromSmiles(smi)), ref)
            data = ogb_smiles_to_graph(smi)
            assert np.array_equal(data.x.numpy(), ref["node_feat"])
            assert np.array_equal(data.edge_attr.numpy(), ref["edge_feat"])
    # the lists' unusual codes all occur above: misc atomic number, chirality, degree,
    # charge, hybridisation and bond type, and 4 radical electrons
    node = np.concatenate([smiles2graph(s)["node_feat"] for s in ODD_SMILES])
    edge = np.concatenate([smiles2graph(s)["edge_feat"] for s in ODD_SMILES])
    assert node.max(axis=0).tolist() == [118, 4, 11, 11, 6, 4, 5, 1, 1]
    assert edge.max(axis=0).tolist() == [4, 2, 1]


def _atropisomer(smiles: str) -> Chem.Mol:
    """A molecule whose first bond carries a stereo tag that OGB's list lacks."""
    mol = Chem.MolFromSmiles(smiles)
    mol.GetBondWithIdx(0).SetStereo(Chem.BondStereo.STEREOATROPCW)
    return mol


def test_many_molecules_at_once_equal_smiles2graph_one_by_one():
    """``ogb_graphs`` of a list: each molecule's rows exactly as ``smiles2graph`` gives them,
    concatenated, and only the molecule with an unknown bond stereo flagged."""
    with rdBase.BlockLogs():
        mols = [Chem.MolFromSmiles(s) for s in ODD_SMILES]
        mols.insert(5, _atropisomer("CC(=O)Nc1ccccc1"))
        graphs, bad = ogb_graphs(mols)
        refs = [smiles2graph(s) for s in ODD_SMILES]
    assert bad.tolist() == [k == 5 for k in range(len(mols))]
    with pytest.raises(ValueError, match="bond stereo"):
        ogb_mol_graph(mols[5])
    num_nodes, num_edges = graphs["num_nodes"], graphs["num_edges"]
    assert num_nodes[5] == mols[5].GetNumAtoms() and num_edges[5] == 2 * mols[5].GetNumBonds()
    keep = np.arange(len(mols)) != 5
    assert num_nodes[keep].tolist() == [r["num_nodes"] for r in refs]
    assert num_edges[keep].tolist() == [r["edge_index"].shape[1] for r in refs]
    node_at = np.concatenate([[0], np.cumsum(num_nodes)])
    edge_at = np.concatenate([[0], np.cumsum(num_edges)])
    for k, ref in zip(np.flatnonzero(keep), refs, strict=True):
        got = {
            "num_nodes": int(num_nodes[k]),
            "node_feat": graphs["node_feat"][node_at[k] : node_at[k + 1]],
            "edge_index": graphs["edge_index"][:, edge_at[k] : edge_at[k + 1]],
            "edge_feat": graphs["edge_feat"][edge_at[k] : edge_at[k + 1]],
        }
        assert_same(got, ref)
    empty, none_bad = ogb_graphs([])
    assert empty["node_feat"].shape == (0, 9) and empty["edge_feat"].shape == (0, 3)
    assert empty["edge_index"].shape == (2, 0) and none_bad.size == 0


def test_unparsable_smiles_fails_like_smiles2graph():
    with rdBase.BlockLogs():
        for smi in ("C1CC", "not a smiles", "O=[Cl+3]([O-])([O-])[O-]"):
            with pytest.raises(AttributeError):  # OGB calls a method of None
                smiles2graph(smi)
            with pytest.raises(ValueError, match="cannot parse"):
                ogb_smiles_graph(smi)


def test_real_molecules_equal_smiles2graph():
    """The first 400 molecules of each MoleculeNet set beside the project (skipped without
    them)."""
    folder = SHARED_DATA / "moleculenet"
    if not folder.exists():
        pytest.skip(f"{folder} not available")
    smiles = []
    for path in sorted(folder.glob("*.csv")):
        table = pd.read_csv(path)
        column = next(c for c in table.columns if "smiles" in c.lower())
        smiles += table[column].astype(str).tolist()[:400]
    compared = 0
    with rdBase.BlockLogs():
        for smi in smiles:
            if Chem.MolFromSmiles(smi) is None:
                continue
            assert_same(ogb_smiles_graph(smi), smiles2graph(smi))
            compared += 1
    assert compared > 2_300
