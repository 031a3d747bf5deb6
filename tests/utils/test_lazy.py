"""Renamed modules keep their old import paths for one release (:mod:`graphormer_urpe.utils.lazy`).

Each old path imports as a stand-in whose names are the new module's own objects, looked up
with a ``DeprecationWarning`` that names the new path; nothing else answers to it.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# old path -> (new path, a public name the old path was imported for)
MOVED = {
    "graphormer_urpe.graph.config": ("graphormer_urpe.graph.model_config", "GraphormerConfig"),
    "graphormer_urpe.runtime.config": ("graphormer_urpe.runtime.train_config", "TrainConfig"),
    "graphormer_urpe.runtime.inputs": ("graphormer_urpe.runtime.run_inputs", "resolve_device"),
    "graphormer_urpe.tuning.config": ("graphormer_urpe.tuning.tune_config", "TuneConfig"),
    "graphormer_urpe.tuning.budget": ("graphormer_urpe.tuning.search_budget", "SearchBudget"),
    "graphormer_urpe.training.budget": ("graphormer_urpe.training.pacing", "Pacer"),
    "graphormer_urpe.training.loop": ("graphormer_urpe.training.run", "train"),
    "graphormer_urpe.sequence.loop": ("graphormer_urpe.sequence.training_loop", "TrainingLoop"),
    "graphormer_urpe.sequence.names": ("graphormer_urpe.sequence.choices", "CORPORA"),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_still_imports_with_a_deprecation_warning(old):
    new, name = MOVED[old]
    stand_in = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import {name} from {new}"):
        value = getattr(stand_in, name)
    assert value is getattr(importlib.import_module(new), name)
    with pytest.warns(DeprecationWarning, match=new):  # the `from old import name` form
        namespace: dict = {}
        exec(f"from {old} import {name}", namespace)
    assert namespace[name] is value
    assert name in dir(stand_in)
    with pytest.warns(DeprecationWarning, match=new):  # and `from old import *`
        everything: dict = {}
        exec(f"from {old} import *", everything)
    assert everything[name] is value
    with pytest.raises(AttributeError), pytest.warns(DeprecationWarning):
        stand_in.no_such_name  # noqa: B018


def test_the_old_paths_are_the_only_ones_the_stand_in_answers_for():
    # a package's attribute access finds the stand-in as it found the module
    import graphormer_urpe.training

    assert graphormer_urpe.training.loop is sys.modules["graphormer_urpe.training.loop"]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("graphormer_urpe.training.no_such_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("graphormer_urpe.config")  # only the renamed module's own package


def test_the_new_paths_import_without_warnings_in_a_fresh_process():
    code = (
        "import warnings; "
        "warnings.filterwarnings('error', '.*graphormer_urpe', DeprecationWarning); "
        + "; ".join(f"from {new} import {name}" for new, name in MOVED.values())
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
