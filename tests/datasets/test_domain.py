"""The applicability domain: what a training split is made of, new molecules against it, and
the ``domain`` / ``nearest_similarity`` columns of ``predict``."""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from rdkit import Chem, DataStructs
from rdkit.Chem import rdFingerprintGenerator

from graphormer_urpe import cli
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
from graphormer_urpe.inference import iter_predictions, load_model
from tests.helpers import SHARED_DATA, TINY_MODEL

# Marketed drugs: the training molecules and, from the same population, held-out ones whose
# elements, charges and sizes all occur in training.
DRUGS_TRAIN = [
    "CC(=O)Oc1ccccc1C(=O)O",  # aspirin
    "CC(=O)Nc1ccc(O)cc1",  # paracetamol
    "CC(C)Cc1ccc(cc1)C(C)C(=O)O",  # ibuprofen
    "Cn1cnc2c1c(=O)n(C)c(=O)n2C",  # caffeine
    "COc1ccc2cc(ccc2c1)C(C)C(=O)O",  # naproxen
    "OC(=O)Cc1ccccc1Nc1c(Cl)cccc1Cl",  # diclofenac
    "CN(C)CCCN1c2ccccc2Sc2ccc(Cl)cc21",  # chlorpromazine
    "CN1C(=O)CN=C(c2ccccc2)c2cc(Cl)ccc21",  # diazepam
    "CNCCC(Oc1ccc(cc1)C(F)(F)F)c1ccccc1",  # fluoxetine
    "CN(C)C(=N)N=C(N)N",  # metformin
    "CC(C)NCC(O)COc1ccc(CC(N)=O)cc1",  # atenolol
    "CC(C)NCC(O)COc1cccc2ccccc12",  # propranolol
    "CCN(CC)CC(=O)Nc1c(C)cccc1C",  # lidocaine
    "COC(=O)C1=C(C)NC(C)=C(C1c1ccccc1[N+](=O)[O-])C(=O)OC",  # nifedipine
    "Cc1cc(NS(=O)(=O)c2ccc(N)cc2)no1",  # sulfamethoxazole
    "OC(=O)c1cn(C2CC2)c2cc(N3CCNCC3)c(F)cc2c1=O",  # ciprofloxacin
    "COc1ccc2[nH]c(nc2c1)S(=O)Cc1ncc(C)c(OC)c1C",  # omeprazole
    "CC(=O)CC(c1ccccc1)c1c(O)c2ccccc2oc1=O",  # warfarin
    "O=C1NC(=O)C(N1)(c1ccccc1)c1ccccc1",  # phenytoin
    "NC(=O)N1c2ccccc2C=Cc2ccccc12",  # carbamazepine
    "OC1(CCN(CCCC(=O)c2ccc(F)cc2)CC1)c1ccc(Cl)cc1",  # haloperidol
    "CC(C)(C)NCC(O)c1ccc(O)c(CO)c1",  # salbutamol
    "CC(C(=O)O)c1cccc(c1)C(=O)c1ccccc1",  # ketoprofen
    "COc1ccc2n(C(=O)c3ccc(Cl)cc3)c(C)c(CC(=O)O)c2c1",  # indomethacin
    "Cc1ccc(cc1)-c1cc(nn1-c1ccc(cc1)S(N)(=O)=O)C(F)(F)F",  # celecoxib
    "CCCCc1nc(Cl)c(CO)n1Cc1ccc(cc1)-c1ccccc1-c1nn[nH]n1",  # losartan
    "CCCc1nn(C)c2c1nc([nH]c2=O)-c1cc(ccc1OCC)S(=O)(=O)N1CCN(C)CC1",  # sildenafil
    "CCC(=C(c1ccccc1)c1ccc(OCCN(C)C)cc1)c1ccccc1",  # tamoxifen
    "COc1ccc(CCN(C)CCCC(C#N)(C(C)C)c2ccc(OC)c(OC)c2)cc1OC",  # verapamil
    "CNC(=C[N+](=O)[O-])NCCSCc1ccc(CN(C)C)o1",  # ranitidine
    "COc1cc(Cc2cnc(N)nc2N)cc(OC)c1OC",  # trimethoprim
    "NS(=O)(=O)c1cc(C(=O)O)c(NCc2ccco2)cc1Cl",  # furosemide
]
DRUGS_HELD_OUT = [
    "Cn1c2c(c(=O)n(C)c1=O)[nH]cn2",  # theophylline
    "COCCc1ccc(OCC(O)CNC(C)C)cc1",  # metoprolol
    "Clc1cccc(Cl)c1NC1=NCCN1",  # clonidine
    "Nc1nc2n(COCCO)cnc2c(=O)[nH]1",  # acyclovir
    "NS(=O)(=O)c1cc2c(cc1Cl)NCNS2(=O)=O",  # hydrochlorothiazide
    "CCOC(=O)C1=C(COCCN)NC(C)=C(C1c1ccccc1Cl)C(=O)OC",  # amlodipine
    "Cc1ccc(cc1)-c1nc2ccc(C)cn2c1CC(=O)N(C)C",  # zolpidem
    "CN(C)CCCC1(OCc2cc(ccc12)C#N)c1ccc(F)cc1",  # citalopram
    "CNC1CCC(c2ccc(Cl)c(Cl)c2)c2ccccc12",  # sertraline
    "COc1ccc(cc1)C(CN(C)C)C1(O)CCCCC1",  # venlafaxine
    "COc1cc2CC(CC3CCN(Cc4ccccc4)CC3)C(=O)c2cc1OC",  # donepezil
    "O=C1CN(C(=O)N1)/N=C/c1ccc(o1)[N+](=O)[O-]",  # nitrofurantoin
]
SALT = "[Na+].[Cl-]"
HYDROCHLORIDE = "CN(C)CCCN1c2ccccc2Sc2ccc(Cl)cc21.Cl"  # chlorpromazine as its salt
METAL = "[Fe+2]"
FERROCENE = "[CH-]1C=CC=C1.[CH-]1C=CC=C1.[Fe+2]"
CHAIN = "C" * 400


def _mols(smiles: list[str]) -> list[Chem.Mol]:
    mols = [Chem.MolFromSmiles(s) for s in smiles]
    assert all(m is not None for m in mols)
    return mols


def _max_atoms(smiles: list[str]) -> int:
    return max(m.GetNumAtoms() for m in _mols(smiles))


def _check(record: DomainRecord, smiles: list[str], similarity: bool = True) -> list[DomainCheck]:
    mols: list = []
    targets = np.zeros((len(smiles), 1))
    arrays, failures, _ = featurize_chunk(smiles, targets, 0, record.featurizer, mols=mols)
    assert not failures and len(mols) == len(smiles)
    result = record.check(arrays, mols if similarity else None)
    return [result[k] for k in range(len(result))]


def _reference_nearest(train: list[str], query: list[str]) -> np.ndarray:
    """RDKit's own answer: the largest ``BulkTanimotoSimilarity`` over the training set."""
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=FINGERPRINT_BITS)
    fps = [gen.GetFingerprint(m) for m in _mols(train)]
    return np.array(
        [max(DataStructs.BulkTanimotoSimilarity(gen.GetFingerprint(m), fps)) for m in _mols(query)]
    )


@pytest.fixture(scope="module")
def record() -> DomainRecord:
    return record_of_smiles(DRUGS_TRAIN)


# --------------------------------------------------------------------------------------
# The record and the comparison
# --------------------------------------------------------------------------------------


def test_the_record_holds_what_the_training_molecules_are_made_of(record):
    assert record.molecules == len(DRUGS_TRAIN) and record.featurizer == "ogb"
    assert record.max_atoms == _max_atoms(DRUGS_TRAIN) and record.max_fragments == 1
    species = {
        (a.GetAtomicNum(), a.GetFormalCharge()) for m in _mols(DRUGS_TRAIN) for a in m.GetAtoms()
    }
    assert {tuple(p) for p in record.species.tolist()} == species
    assert record.checks == ("elements", "charges", "fragments", "atoms", "similarity")
    assert record.fingerprints is not None
    assert record.fingerprints.shape == (len(DRUGS_TRAIN), FINGERPRINT_BITS // 8)


def test_salts_metals_and_giants_are_out_of_domain_with_their_reasons(record):
    top = _max_atoms(DRUGS_TRAIN)
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
        m.GetNumAtoms() for m in _mols(DRUGS_TRAIN + DRUGS_HELD_OUT)
    ]


def test_nearest_similarity_is_rdkits_bulk_tanimoto(record):
    own = _check(record, DRUGS_TRAIN)
    assert [c.nearest_similarity for c in own] == [1.0] * len(DRUGS_TRAIN)
    held = [c.nearest_similarity for c in _check(record, DRUGS_HELD_OUT)]
    np.testing.assert_allclose(held, _reference_nearest(DRUGS_TRAIN, DRUGS_HELD_OUT), atol=1e-6)
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
        np.testing.assert_allclose(got, _reference_nearest(train, query), atol=1e-6)


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
    assert got.tolist() == [len(Chem.GetMolFrags(m)) for m in _mols(smiles)]
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
    assert (
        chain.reasons == (f"atoms 400 > {_max_atoms(kept)}",) and chain.nearest_similarity is None
    )


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
    np.testing.assert_allclose(got, _reference_nearest(train, [val[k] for k in pick]), atol=1e-6)
    own = [c.nearest_similarity for c in _check(rec, [train[k] for k in rng.choice(2000, 50)])]
    assert own == [1.0] * 50
    salt, metal, chain = _check(rec, [SALT, METAL, CHAIN])
    assert salt.reasons == ("element Na", "charge [Cl-]", "fragments 2 > 1")
    assert metal.reasons == ("element Fe",) and chain.reasons[0].startswith("atoms 400 > ")


# --------------------------------------------------------------------------------------
# predict end to end
# --------------------------------------------------------------------------------------

PREDICT_INPUT = [DRUGS_TRAIN[3], DRUGS_HELD_OUT[0], SALT, "not a smiles((", METAL, CHAIN]


def _train(table: Path, root: Path, out: Path, *extra: str) -> None:
    args = ["train", "--dataset", f"csv:{table}", "--data-root", str(root), "--out", str(out)]
    args += ["--target-columns", "y", "--split-column", "split", *TINY_MODEL]
    args += ["--batch-size", "8", "--epochs", "2", "--warmup-steps", "2", "--lr", "1e-3"]
    assert cli.main([*args, "--no-progress", "--threads", "1", *extra]) == 0


@pytest.fixture(scope="module")
def drug_table(tmp_path_factory) -> Path:
    """The drugs with a target, the training ones in the training split."""
    path = tmp_path_factory.mktemp("drugs") / "drugs.csv"
    held_out = ["valid" if k % 2 else "test" for k in range(len(DRUGS_HELD_OUT))]
    splits = ["train"] * len(DRUGS_TRAIN) + held_out
    pairs = zip(DRUGS_TRAIN + DRUGS_HELD_OUT, splits, strict=True)
    rows = [[s, len(s) / 10, split] for s, split in pairs]
    with open(path, "w", newline="") as fh:
        csv.writer(fh).writerows([["smiles", "y", "split"], *rows])
    return path


@pytest.fixture(scope="module")
def drug_run(drug_table, tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("drug-run")
    _train(drug_table, base / "data", base / "run")
    return base / "run"


def _predict(ckpt: Path, tmp_path: Path, capsys, *extra: str) -> tuple[list[dict], str]:
    table = tmp_path / "in.csv"
    table.write_text("smiles\n" + "".join(f"{s}\n" for s in PREDICT_INPUT))
    out = tmp_path / "out.csv"
    args = ["predict", "--checkpoint", str(ckpt), "--input", str(table), "--output", str(out)]
    args += ["--workers", "1", "--chunk-size", "2", "--no-progress", *extra]
    capsys.readouterr()
    assert cli.main(args) == 0
    with open(out) as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames is not None
        assert reader.fieldnames[-3:] == ["domain", "nearest_similarity", "error"]
        rows = list(reader)
    return rows, capsys.readouterr().err


def test_predict_flags_each_row(drug_run, tmp_path, capsys):
    rows, err = _predict(drug_run / "best.pt", tmp_path, capsys)
    assert [r["smiles"] for r in rows] == PREDICT_INPUT
    top = _max_atoms(DRUGS_TRAIN)
    assert [r["domain"] for r in rows] == [
        "in",
        "in",
        "out: element Na; charge [Cl-]; fragments 2 > 1",
        "",
        "out: element Fe",
        f"out: atoms 400 > {top}",
    ]
    sims = [r["nearest_similarity"] for r in rows]
    assert sims[0] == "1.000" and sims[3] == ""
    want = _reference_nearest(DRUGS_TRAIN, [PREDICT_INPUT[k] for k in (1, 2, 4, 5)])
    np.testing.assert_allclose([float(sims[k]) for k in (1, 2, 4, 5)], want, atol=5e-4)
    assert (
        rows[3]["error"]
        and rows[3]["y"] == ""
        and all(r["y"] for i, r in enumerate(rows) if i != 3)
    )
    assert "5 molecules predicted, 1 could not be read, 3 out of the training domain" in err

    rows_off, _ = _predict(drug_run / "best.pt", tmp_path, capsys, "--no-similarity")
    assert [r["nearest_similarity"] for r in rows_off] == [""] * len(rows)
    assert [r["domain"] for r in rows_off] == [r["domain"] for r in rows]
    assert [r["y"] for r in rows_off] == [r["y"] for r in rows]


def test_the_checkpoint_records_the_training_split(drug_run):
    ckpt = torch.load(drug_run / "best.pt", weights_only=True)
    rec = DomainRecord.from_dict(ckpt["domain"])
    assert ckpt["domain"]["checks"] == list(rec.checks) and "similarity" in rec.checks
    assert rec.molecules == len(DRUGS_TRAIN) and rec.max_atoms == _max_atoms(DRUGS_TRAIN)
    assert rec.fingerprints is not None and len(rec.fingerprints) == len(DRUGS_TRAIN)
    assert np.array_equal(rec.fingerprints, record_of_smiles(DRUGS_TRAIN).fingerprints)
    loaded = load_model(drug_run / "best.pt", "cpu")
    assert loaded.domain is not None and np.array_equal(loaded.domain.species, rec.species)
    # for library users: each Prediction carries its molecule's facts
    preds = list(iter_predictions(loaded, PREDICT_INPUT, workers=0))
    assert [p.domain is None for p in preds] == [False, False, False, True, False, False]
    assert preds[2].domain.reasons == ("element Na", "charge [Cl-]", "fragments 2 > 1")
    assert preds[0].domain.in_domain and preds[0].domain.nearest_similarity == 1.0
    assert preds[5].domain.atoms == 400 and preds[2].domain.fragments == 2


def test_an_older_checkpoint_without_the_record_still_predicts(drug_run, tmp_path, capsys):
    ckpt = torch.load(drug_run / "best.pt", weights_only=True)
    del ckpt["domain"]
    old = tmp_path / "old.pt"
    torch.save(ckpt, old)
    rows, err = _predict(old, tmp_path, capsys)
    new, _ = _predict(drug_run / "best.pt", tmp_path, capsys)
    assert [r["domain"] for r in rows] == ["unknown"] * 3 + [""] + ["unknown"] * 2
    assert [r["nearest_similarity"] for r in rows] == [""] * len(rows)
    assert [r["y"] for r in rows] == [r["y"] for r in new]  # the predictions are unchanged
    assert "training domain unknown" in err and "out of the training domain" not in err
    assert load_model(old, "cpu").domain is None


def test_an_ensemble_uses_its_members_record(drug_table, tmp_path, capsys):
    out = tmp_path / "ens"
    _train(drug_table, tmp_path / "data", out, "--ensemble", "2")
    records = [
        torch.load(out / f"member-{i}" / "best.pt", weights_only=True)["domain"] for i in (0, 1)
    ]
    assert records[0]["species"] == records[1]["species"]
    assert torch.equal(records[0]["fingerprints"]["packed"], records[1]["fingerprints"]["packed"])
    rows, err = _predict(out, tmp_path, capsys)
    member, _ = _predict(out / "member-0" / "best.pt", tmp_path, capsys)
    assert "y_std" in rows[0]
    assert [r["domain"] for r in rows] == [r["domain"] for r in member]
    assert [r["nearest_similarity"] for r in rows] == [r["nearest_similarity"] for r in member]
    assert rows[2]["domain"].startswith("out: element Na") and "3 out of the training" in err


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
