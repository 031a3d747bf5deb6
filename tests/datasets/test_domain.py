"""The applicability domain: what a training split is made of, new molecules against it, and
the ``domain`` / ``nearest_similarity`` columns of ``predict``."""

from __future__ import annotations

import csv
import io
import shutil

import numpy as np
import pytest
import torch
from rdkit import Chem

from graphormer_urpe.datasets.domain import (
    FINGERPRINT_BITS,
    FINGERPRINT_CAP,
    DomainCheck,
    DomainRecord,
    domain_record,
    fragment_counts,
    record_of_smiles,
)
from graphormer_urpe.datasets.store import (
    MoleculeStore,
    StoreGraphDataset,
    build_molecule_store,
    featurize_chunk,
)
from tests.helpers import (
    DRUGS_HELD_OUT,
    DRUGS_TRAIN,
    SHARED_DATA,
    max_atoms,
    mols_of,
    reference_nearest,
)

SALT = "[Na+].[Cl-]"
HYDROCHLORIDE = "CN(C)CCCN1c2ccccc2Sc2ccc(Cl)cc21.Cl"  # chlorpromazine as its salt
METAL = "[Fe+2]"
FERROCENE = "[CH-]1C=CC=C1.[CH-]1C=CC=C1.[Fe+2]"
CHAIN = "C" * 400


def _check(record: DomainRecord, smiles: list[str], similarity: bool = True) -> list[DomainCheck]:
    mols: list = []
    targets = np.zeros((len(smiles), 1))
    arrays, failures, _ = featurize_chunk(smiles, targets, 0, record.featurizer, mols=mols)
    assert not failures and len(mols) == len(smiles)
    result = record.check(arrays, mols if similarity else None)
    return [result[k] for k in range(len(result))]


@pytest.fixture(scope="module")
def record() -> DomainRecord:
    return record_of_smiles(DRUGS_TRAIN)


# --------------------------------------------------------------------------------------
# The record and the comparison
# --------------------------------------------------------------------------------------


def test_the_record_holds_what_the_training_molecules_are_made_of(record):
    assert record.molecules == len(DRUGS_TRAIN) and record.featurizer == "ogb"
    assert record.max_atoms == max_atoms(DRUGS_TRAIN) and record.max_fragments == 1
    species = {
        (a.GetAtomicNum(), a.GetFormalCharge()) for m in mols_of(DRUGS_TRAIN) for a in m.GetAtoms()
    }
    assert {tuple(p) for p in record.species.tolist()} == species
    assert record.checks == ("elements", "charges", "fragments", "atoms", "similarity")
    assert record.fingerprints is not None
    assert record.fingerprints.shape == (len(DRUGS_TRAIN), FINGERPRINT_BITS // 8)


def test_salts_metals_and_giants_are_out_of_domain_with_their_reasons(record):
    top = max_atoms(DRUGS_TRAIN)
    salt, metal, ferrocene, chain, hcl = _check(
        record, [SALT, METAL, FERROCENE, CHAIN, HYDROCHLORIDE]
    )
    assert hcl.reasons == ("fragments 2 > 1",)
    assert salt.reasons == ("element Na", "charge [Cl-]", "fragments 2 > 1")
    assert salt.label == "out: element Na; charge [Cl-]; fragments 2 > 1"
    assert metal.reasons == ("element Fe",)
    assert ferrocene.reasons == ("element Fe", "charge [C-]", "fragments 3 > 1")
    assert chain.reasons == (f"atoms 400 > {top}",)
    assert (salt.atoms, salt.fragments, chain.atoms, chain.fragments) == (2, 2, 400, 1)
    assert not any(c.in_domain for c in (salt, metal, ferrocene, chain, hcl))
    for c in (salt, metal, ferrocene):
        assert c.nearest_similarity is not None and c.nearest_similarity < 0.2


def test_drug_like_molecules_are_in_domain(record):
    checks = _check(record, DRUGS_TRAIN + DRUGS_HELD_OUT)
    assert all(c.in_domain and c.label == "in" and c.reasons == () for c in checks)
    assert [c.fragments for c in checks] == [1] * len(checks)
    assert [c.atoms for c in checks] == [
        m.GetNumAtoms() for m in mols_of(DRUGS_TRAIN + DRUGS_HELD_OUT)
    ]


def test_nearest_similarity_is_rdkits_bulk_tanimoto(record):
    own = _check(record, DRUGS_TRAIN)
    assert [c.nearest_similarity for c in own] == [1.0] * len(DRUGS_TRAIN)
    held = [c.nearest_similarity for c in _check(record, DRUGS_HELD_OUT)]
    np.testing.assert_allclose(held, reference_nearest(DRUGS_TRAIN, DRUGS_HELD_OUT), atol=1e-6)
    assert max(held) < 1.0
    # random training sets and queries, and a query with more than 255 bits set
    rng = np.random.default_rng(7)
    pool = DRUGS_TRAIN + DRUGS_HELD_OUT
    big = ".".join(DRUGS_TRAIN)
    for size in (1, 5, 17):
        train = [pool[k] for k in rng.choice(len(pool), size, replace=False)]
        train += [big] if size == 17 else []  # then more than 255 shared bits
        query = [pool[k] for k in rng.choice(len(pool), 9, replace=False)] + [big, CHAIN]
        got = [c.nearest_similarity for c in _check(record_of_smiles(train), query)]
        np.testing.assert_allclose(got, reference_nearest(train, query), atol=1e-6)


def test_the_similarity_can_be_left_out(record):
    checks = _check(record, [SALT, DRUGS_TRAIN[0]], similarity=False)
    assert [c.nearest_similarity for c in checks] == [None, None]
    assert checks[0].reasons == ("element Na", "charge [Cl-]", "fragments 2 > 1")


def test_fragment_counts_are_rdkits():
    smiles = ["C1.C1", SALT, "CC(=O)[O-].[Na+]", "C", "C.C.C", "c1ccccc1.O", FERROCENE, CHAIN]
    smiles += DRUGS_TRAIN[:5]
    arrays, failures, _ = featurize_chunk(smiles, np.zeros((len(smiles), 1)), 0, "ogb")
    assert not failures
    got = fragment_counts(arrays["num_nodes"], arrays["edge_index"], arrays["num_edges"])
    assert got.tolist() == [len(Chem.GetMolFrags(m)) for m in mols_of(smiles)]
    assert got.tolist()[:5] == [1, 2, 2, 1, 3]


def test_fingerprints_are_capped_with_a_seeded_sample():
    a = record_of_smiles(DRUGS_TRAIN, cap=10)
    assert a.fingerprints is not None and a.fingerprints.shape == (10, FINGERPRINT_BITS // 8)
    assert a.fingerprint_pool == len(DRUGS_TRAIN) and a.cap == 10
    assert a.molecules == len(DRUGS_TRAIN)  # the other checks see every molecule
    again, other = (
        record_of_smiles(DRUGS_TRAIN, cap=10),
        record_of_smiles(DRUGS_TRAIN, cap=10, seed=1),
    )
    assert np.array_equal(a.fingerprints, again.fingerprints)
    assert not np.array_equal(a.fingerprints, other.fingerprints)
    sims = np.array([c.nearest_similarity for c in _check(a, DRUGS_TRAIN)])
    assert (sims == 1.0).sum() == 10  # the sampled ones, and no other


def test_the_record_loads_weights_only_and_stays_small(record, tmp_path):
    path = tmp_path / "r.pt"
    torch.save({"domain": record.to_dict()}, path)
    back = DomainRecord.from_dict(torch.load(path, weights_only=True)["domain"])
    assert np.array_equal(back.species, record.species)
    assert np.array_equal(back.fingerprints, record.fingerprints)
    assert (back.max_atoms, back.max_fragments, back.molecules) == (
        record.max_atoms,
        record.max_fragments,
        record.molecules,
    )
    assert back.checks == record.checks
    # at the cap, the record is its packed fingerprints and a few kilobytes
    rng = np.random.default_rng(0)
    packed = rng.integers(0, 256, (FINGERPRINT_CAP, FINGERPRINT_BITS // 8), dtype=np.uint8)
    full = DomainRecord("ogb", 10**6, record.species, 1, 60, packed, 10**6)
    torch.save({"domain": full.to_dict()}, path)
    bound = FINGERPRINT_CAP * FINGERPRINT_BITS // 8 + 16 * 1024
    assert path.stat().st_size <= bound <= 1.3 * 2**20


@pytest.mark.parametrize("featurizer", ["ogb", "zinc"])
def test_a_store_without_smiles_records_all_but_the_similarity(tmp_path, featurizer):
    arrays, failures, _ = featurize_chunk(
        DRUGS_TRAIN, np.zeros((len(DRUGS_TRAIN), 1)), 0, featurizer
    )
    kept = [s for i, s in enumerate(DRUGS_TRAIN) if i not in {f.index for f in failures}]
    assert len(kept) >= 20
    ptr = np.concatenate([[0], np.cumsum(arrays["num_nodes"])])
    eptr = np.concatenate([[0], np.cumsum(arrays["num_edges"])])
    graphs = [
        {
            "node_feat": np.asarray(arrays["x"][ptr[g] : ptr[g + 1]], dtype=np.int64),
            "edge_index": np.asarray(arrays["edge_index"][:, eptr[g] : eptr[g + 1]], np.int64),
            "edge_feat": np.asarray(arrays["edge_attr"][eptr[g] : eptr[g + 1]], dtype=np.int64),
            "num_nodes": int(arrays["num_nodes"][g]),
        }
        for g in range(len(kept))
    ]
    store = tmp_path / "store"
    build_molecule_store(
        store, None, np.zeros(len(kept)), graphs=graphs, featurizer=featurizer, progress=False
    )
    cache = MoleculeStore(store)
    assert not cache.has_smiles
    rec = domain_record(StoreGraphDataset(cache, np.arange(len(kept))), featurizer)
    assert rec is not None and rec.fingerprints is None
    assert rec.checks == ("elements", "charges", "fragments", "atoms")
    from_smiles = record_of_smiles(kept, featurizer)
    assert np.array_equal(rec.species, from_smiles.species)
    assert (rec.max_atoms, rec.max_fragments, rec.molecules) == (
        from_smiles.max_atoms,
        from_smiles.max_fragments,
        len(kept),
    )
    back = DomainRecord.from_dict(rec.to_dict())
    (chain,) = _check(back, [CHAIN])
    assert chain.reasons == (f"atoms 400 > {max_atoms(kept)}",) and chain.nearest_similarity is None


def test_zinc_molecules_against_zinc_training_molecules(tmp_path):
    src = SHARED_DATA / "zinc"
    if not (src / "train.csv").exists():
        pytest.skip("the shared ZINC data is not here")
    for name in ("train.csv", "val.csv"):
        shutil.copy(src / name, tmp_path / name)

    def column(name: str) -> list[str]:
        with open(tmp_path / name) as fh:
            return [row["smiles"] for row in csv.DictReader(fh)]

    train, val = column("train.csv")[:2000], column("val.csv")
    rec = record_of_smiles(train)
    assert rec.max_fragments == 1
    checks = _check(rec, val)
    assert all(c.in_domain for c in checks)  # the same population
    rng = np.random.default_rng(0)
    pick = rng.choice(len(val), 100, replace=False)
    got = [checks[k].nearest_similarity for k in pick]
    np.testing.assert_allclose(got, reference_nearest(train, [val[k] for k in pick]), atol=1e-6)
    own = [c.nearest_similarity for c in _check(rec, [train[k] for k in rng.choice(2000, 50)])]
    assert own == [1.0] * 50
    salt, metal, chain = _check(rec, [SALT, METAL, CHAIN])
    assert salt.reasons == ("element Na", "charge [Cl-]", "fragments 2 > 1")
    assert metal.reasons == ("element Fe",) and chain.reasons[0].startswith("atoms 400 > ")


# --------------------------------------------------------------------------------------
# the columns predict writes (the command end to end: tests/cli/test_predict_domain.py)
# --------------------------------------------------------------------------------------


def test_domain_cells_of_the_csv_writer():
    from graphormer_urpe.inference.engines.predict_io import Prediction, write_predictions_csv

    preds = [
        Prediction(0, "CCO", torch.tensor([1.0]), None, domain=DomainCheck((), 0.25, 3, 1)),
        Prediction(
            1, SALT, torch.tensor([2.0]), None, domain=DomainCheck(("element Na",), None, 2, 2)
        ),
        Prediction(2, "C", torch.tensor([3.0]), None),
        Prediction(3, "x((", None, "cannot parse"),
    ]
    fh = io.StringIO()
    assert write_predictions_csv(preds, fh, ["y"], domain=True) == (4, 1)
    rows = list(csv.reader(io.StringIO(fh.getvalue())))
    assert rows == [
        ["smiles", "y", "domain", "nearest_similarity", "error"],
        ["CCO", "1", "in", "0.250", ""],
        [SALT, "2", "out: element Na", "", ""],
        ["C", "3", "unknown", "", ""],
        ["x((", "", "", "", "cannot parse"],
    ]
    plain = io.StringIO()
    write_predictions_csv(preds, plain, ["y"])  # without domain: the columns as they were
    assert plain.getvalue().splitlines()[0] == "smiles,y,error"
