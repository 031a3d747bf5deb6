"""The store folder's flag: ``--store-dir``, and its previous name ``--cache-dir``, which still
works and says it is deprecated (a saved config's ``cache_dir``:
``tests/datasets/test_store.py``)."""

from __future__ import annotations

from graphormer_urpe.cli import build_parser


def test_the_store_dir_flag_s_old_name_still_works_and_warns(capsys):
    parser = build_parser()
    assert parser.parse_args(["train", "--store-dir", "/new"]).store_dir == "/new"
    assert "deprecated" not in capsys.readouterr().err
    for command in (["train"], ["preprocess", "--dataset", "nci5k"]):
        assert parser.parse_args([*command, "--cache-dir", "/old"]).store_dir == "/old"
        assert "--cache-dir is deprecated: use --store-dir" in capsys.readouterr().err
