"""RDKit 2D descriptors: values, normalisation, and their place in the store."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import Descriptors

from graphormer_urpe.datasets.featurizers import descriptors as desc
from graphormer_urpe.datasets.featurizers.descriptors import (
    DESCRIPTOR_NAMES,
    EXCLUDED,
    DescriptorNormalizer,
    compute_descriptors,
    descriptor_set_id,
)
from graphormer_urpe.datasets.store import MoleculeStore, build_molecule_store
from graphormer_urpe.datasets.store.location import store_folder
from graphormer_urpe.datasets.store.records import MoleculeRecords, open_store

FIXTURE = [
    "CCO",
    "c1ccccc1O",
    "CC(=O)Nc1ccc(O)cc1",
    "C[C@H](N)C(=O)O",
    "O=C(O)c1ccccc1OC(C)=O",
    "CN1CCC[C@H]1c1cccnc1",
    "[Na+].[Cl-]",
    "C1CC2CCC1C2",  # bridged
    "FC(F)(F)c1ccc(cc1)S(=O)(=O)N",
    "[Se]1C=CC=C1",  # an element Gasteiger has no parameters for
]


def _rdkit_reference(smiles: str) -> np.ndarray:
    """Every kept descriptor computed by RDKit's own function on a fresh molecule."""
    table = dict(Descriptors._descList)
    out = []
    for name in DESCRIPTOR_NAMES:
        mol = Chem.MolFromSmiles(smiles)  # fresh: nothing cached on it
        try:
            v = float(table[name](mol))
        except Exception:
            v = math.nan
        out.append(v if math.isfinite(v) else math.nan)
    return np.asarray(out, dtype=np.float64)


def test_descriptor_list_is_fixed_documented_and_excludes_the_bad_ones():
    names = [n for n, _ in Descriptors._descList]
    assert len(set(DESCRIPTOR_NAMES)) == len(DESCRIPTOR_NAMES) == 202
    assert set(DESCRIPTOR_NAMES) <= set(names)
    assert not set(EXCLUDED) & set(DESCRIPTOR_NAMES)
    assert {"qed", "Ipc", "BCUT2D_MWHI", "MaxPartialCharge"} <= set(EXCLUDED)
    assert descriptor_set_id().startswith(f"{desc.DESCRIPTOR_SET}/rdkit-")


def test_values_equal_rdkits_own_descriptor_functions():
    got = compute_descriptors(FIXTURE)  # [N, K]
    assert got.shape == (len(FIXTURE), len(DESCRIPTOR_NAMES)) and got.dtype == np.float32
    for i, smi in enumerate(FIXTURE):
        ref = _rdkit_reference(smi).astype(np.float32)
        np.testing.assert_array_equal(got[i], ref, err_msg=smi)
    assert np.isfinite(got).all()  # none of the kept ones fails on these molecules


def test_unparsable_smiles_and_failing_descriptors_become_nan(monkeypatch):
    rows = compute_descriptors(["not a smiles", "", "CCO"])
    assert np.isnan(rows[:2]).all() and np.isfinite(rows[2]).all()
    k = DESCRIPTOR_NAMES.index("MolWt")
    real = desc.descriptor_functions

    def broken():
        fns = real()
        fns[k] = lambda mol: 1e300  # beyond float32: recorded as missing
        return fns

    monkeypatch.setattr(desc, "descriptor_functions", broken)
    rows = compute_descriptors(["CCO"])
    assert np.isnan(rows[0, k]) and np.isfinite(np.delete(rows[0], k)).all()


def _raw(rng: np.random.Generator, n: int = 2_000) -> np.ndarray:
    """[n, 4]: a normal column with outliers, a mostly-zero count, a constant, one with NaN."""
    x = np.stack(
        [
            rng.normal(10.0, 2.0, n),
            (rng.random(n) < 0.05).astype(float),
            np.full(n, 3.0),
            rng.exponential(1.0, n),
        ],
        axis=1,
    )
    x[:5, 0] = 1e6  # outliers
    x[::97, 3] = np.nan
    return x.astype(np.float32)


def test_normalisation_is_robust_finite_and_round_trips():
    rng = np.random.default_rng(0)
    raw = _raw(rng)
    norm = DescriptorNormalizer.fit(raw, ["a", "b", "c", "d"])
    z = norm.transform(raw)
    assert z.dtype == np.float32 and np.isfinite(z).all()
    assert np.abs(z).max() <= norm.clip
    assert z[::97, 3].tolist() == [0.0] * len(z[::97, 3])  # missing → 0
    assert norm.nonfinite == [0, 0, 0, int(np.isnan(raw[:, 3]).sum())]
    assert abs(float(np.median(z[:, 0]))) < 0.05 and 0.8 < float(np.std(z[5:, 0])) < 1.2
    assert norm.scale[1] > 0 and np.abs(z[:, 1]).max() > 0  # IQR 0: falls back to the std
    assert (z[:, 2] == 0).all() and norm.scale[2] == 1.0  # constant
    inside = (raw >= norm.low) & (raw <= norm.high) & (np.abs(z) < norm.clip)
    back = norm.inverse_transform(z)
    np.testing.assert_allclose(back[inside], raw[inside], rtol=1e-5, atol=1e-5)
    assert inside.mean() > 0.9


def test_normalisation_is_recorded_and_re_applied_to_new_molecules():
    raw = compute_descriptors(FIXTURE)
    norm = DescriptorNormalizer.fit(raw)
    record = json.loads(json.dumps(norm.to_dict()))  # what a checkpoint keeps
    assert record["names"] == list(DESCRIPTOR_NAMES) and record["rdkit_version"]
    again = DescriptorNormalizer.from_dict(record)
    new = ["CCN", "c1ccncc1"]
    np.testing.assert_array_equal(
        again.transform(compute_descriptors(new)), norm.transform(compute_descriptors(new))
    )
    with pytest.raises(ValueError, match=r"\[N, 202\]"):
        norm.transform(np.zeros((2, 3)))


def test_fit_subsamples_large_inputs_with_a_seed():
    raw = _raw(np.random.default_rng(1), 5_000)
    a = DescriptorNormalizer.fit(raw, list("abcd"), max_rows=1_000, seed=3)
    b = DescriptorNormalizer.fit(raw, list("abcd"), max_rows=1_000, seed=3)
    c = DescriptorNormalizer.fit(raw, list("abcd"), max_rows=1_000, seed=4)
    assert a.fitted_on == 1_000 and a.to_dict() == b.to_dict() and a.center != c.center


def test_store_keeps_descriptors_of_the_kept_molecules_across_chunks(tmp_path):
    smiles = [*FIXTURE[:4], "not a smiles", *FIXTURE[4:]]
    report = build_molecule_store(
        tmp_path / "s",
        smiles,
        np.zeros((len(smiles), 0)),
        target_names=[],
        keep_smiles=True,
        descriptors=True,
        chunk_size=3,
        progress=False,
    )
    assert report.graphs == len(FIXTURE) and len(report.failures) == 1
    cache = MoleculeStore(tmp_path / "s")
    assert cache.has_descriptors and cache.descriptor_names == list(DESCRIPTOR_NAMES)
    assert cache.meta["descriptors"]["set"] == descriptor_set_id()
    stored = np.asarray(cache.descriptors)
    assert stored.shape == (len(FIXTURE), len(DESCRIPTOR_NAMES)) and stored.dtype == np.float32
    np.testing.assert_array_equal(stored, compute_descriptors(cache.smiles(range(len(cache)))))
    assert cache.smiles(range(len(cache))) == FIXTURE


def test_store_records_nonfinite_counts(tmp_path, monkeypatch):
    k = DESCRIPTOR_NAMES.index("BertzCT")
    real = desc.descriptor_functions

    def broken():
        fns = real()
        fns[k] = lambda mol: math.inf
        return fns

    monkeypatch.setattr(desc, "descriptor_functions", broken)
    build_molecule_store(
        tmp_path / "s", FIXTURE[:3], np.zeros((3, 0)), target_names=[], descriptors=True
    )
    assert MoleculeStore(tmp_path / "s").meta["descriptors"]["nonfinite"] == {"BertzCT": 3}


def test_descriptor_option_is_in_the_store_key_and_a_changed_option_rebuilds(monkeypatch):
    calls = {"n": 0}

    def read() -> MoleculeRecords:
        calls["n"] += 1
        return MoleculeRecords(np.arange(3), np.zeros((3, 0)), [], smiles=FIXTURE[:3])

    plain = store_folder("pretrain", "x", {"sha256": "abc"}, None)
    with_desc = store_folder("pretrain", "x", {"sha256": "abc", "descriptors": "v"}, None)
    assert plain != with_desc
    a = open_store(plain, read, featurizer="ogb", description="x")
    assert not a.has_descriptors and calls["n"] == 1
    with pytest.raises(ValueError, match="without descriptors"):
        open_store(plain, read, featurizer="ogb", description="x", descriptors=True)
    b = open_store(with_desc, read, featurizer="ogb", description="x", descriptors=True)
    assert b.has_descriptors and calls["n"] == 2  # built anew in its own folder
    monkeypatch.setattr(desc, "compute_descriptors", lambda s: pytest.fail("recomputed"))
    c = open_store(with_desc, read, featurizer="ogb", description="x", descriptors=True)
    assert calls["n"] == 2 and np.array_equal(c.descriptors, b.descriptors)  # reused


def test_an_unfinished_build_with_the_other_option_is_discarded(tmp_path):
    folder = tmp_path / "s"
    targets = np.zeros((4, 0))
    build_molecule_store(folder, FIXTURE[:4], targets, target_names=[], chunk_size=2)
    (folder / "meta.json").unlink()  # pretend the build stopped before its end
    plan = {"format": "graphormer-urpe-mmap/2", "rows": 4, "targets": 0, "chunk_size": 2}
    (folder / "plan.json").write_text(json.dumps({**plan, "descriptors": False}))
    (folder / "chunks" / "000000").mkdir(parents=True)
    report = build_molecule_store(
        folder, FIXTURE[:4], targets, target_names=[], chunk_size=2, descriptors=True
    )
    assert report.chunks_computed == 2  # nothing of the plain build was reused
    assert MoleculeStore(folder).has_descriptors


def test_another_rdkit_version_warns_once_per_process(caplog, monkeypatch):
    record = DescriptorNormalizer.fit(compute_descriptors(FIXTURE)).to_dict()
    record["rdkit_version"] = "1999.01.1"
    monkeypatch.setattr(desc, "_WARNED", set())
    with caplog.at_level("WARNING", logger=desc.__name__):
        for _ in range(3):  # e.g. one call per streamed chunk
            DescriptorNormalizer.from_dict(record)
    warned = [r for r in caplog.records if "RDKit 1999.01.1" in r.getMessage()]
    assert len(warned) == 1


def test_two_builders_of_one_store_at_once_build_it_once(tmp_path, monkeypatch):
    """Two searches' trials once built one store at the same moment and one failed: the
    second builder now waits for the first and opens its store."""
    import threading
    import time

    from graphormer_urpe.datasets.store import records as store_records

    real, builds = store_records.build_molecule_store, []

    def slow_build(*args, **kw):  # holds the build open long enough for the other to arrive
        builds.append(threading.get_ident())
        time.sleep(0.5)
        return real(*args, **kw)

    monkeypatch.setattr(store_records, "build_molecule_store", slow_build)
    records = MoleculeRecords(
        rows=np.arange(len(FIXTURE)),
        targets=np.zeros((len(FIXTURE), 0)),
        target_names=[],
        smiles=list(FIXTURE),
    )
    folder = store_folder("csv", "mols", {"case": "race"}, tmp_path)
    opened, errors = [], []

    def open_it():
        try:
            cache = open_store(
                folder,
                lambda: records,
                featurizer="ogb",
                description="mols",
                descriptors=True,
                progress=False,
            )
            opened.append(len(cache))
        except Exception as exc:  # noqa: BLE001 - the assertion reports it
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and opened == [len(FIXTURE)] * 2
    assert len(builds) == 1
