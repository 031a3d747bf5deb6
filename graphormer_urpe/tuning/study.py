"""A search's Optuna study: its storage (embedded SQLite, a shared database or a journal
file), and the study itself, tied to one problem by its fingerprint.

Nothing here is home-made: several processes that open the same storage and study name
work on one study through Optuna's own storage; a trial's number is given by the storage.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from .problem import Problem
    from .space import SearchSpace

__all__ = ["open_storage", "open_study", "default_storage", "FINGERPRINT_ATTR", "SPACE_ATTR"]

log = logging.getLogger(__name__)

FINGERPRINT_ATTR = "graphormer_urpe_fingerprint"
"""The study's user attribute that holds its problem's fingerprint."""

SPACE_ATTR = "graphormer_urpe_space"
"""The study's user attribute that holds its search space (ranges and fixed choices)."""

STUDY_DB = "study.db"
"""The embedded default storage's file in the run folder."""


def default_storage(out: str | Path) -> str:
    """The embedded default: a SQLite file in the run folder ``out``."""
    return f"sqlite:///{Path(out).resolve() / STUDY_DB}"


def open_storage(storage: str) -> optuna.storages.BaseStorage:
    """Connect to ``storage``: an RDB URL (``sqlite:///PATH``, ``postgresql://...``,
    ``mysql://...``) or the path of an Optuna journal file (a file system every process
    can reach, for machines without a shared database).

    Raises:
        ValueError: one line, when it cannot be reached (nothing is written then).
    """
    import optuna

    try:
        if "://" in storage:
            return _rdb(storage)
        from optuna.storages.journal import JournalFileBackend

        path = Path(storage)
        if not path.parent.is_dir():
            raise FileNotFoundError(f"folder {path.parent} does not exist")
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    except Exception as exc:  # a driver missing, a refused connection, a bad path
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"--storage {storage} cannot be reached: {text}") from None


SCHEMA_TRIES = 5
"""Attempts at opening a database whose tables another process is creating at that moment
(its schema record is written once: the loser of the race meets a duplicate, then finds
the tables made)."""


def _rdb(url: str) -> optuna.storages.RDBStorage:
    import optuna

    for attempt in range(SCHEMA_TRIES):
        try:
            return optuna.storages.RDBStorage(url)
        except Exception as exc:
            racing = type(exc).__name__ == "IntegrityError" or "already exists" in str(exc)
            if not racing or attempt == SCHEMA_TRIES - 1:
                raise
            log.debug("%s: tables being created by another process; again", url)
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def open_study(
    storage: optuna.storages.BaseStorage,
    name: str,
    problem: Problem,
    sampler: optuna.samplers.BaseSampler,
    pruner: optuna.pruners.BasePruner,
    space: SearchSpace | None = None,
) -> optuna.Study:
    """The study ``name`` in ``storage``, created for ``problem`` (and ``space``) when new.

    Raises:
        ValueError: the study exists for another problem (another data file, target, task,
            split or objective) or another search space (say a fixed ``--init-from``), or
            optimises in the other direction.
    """
    import optuna

    direction = "maximize" if problem.maximize else "minimize"
    study = optuna.create_study(
        storage=storage,
        study_name=name,
        direction=direction,
        sampler=sampler,
        pruner=pruner,
        load_if_exists=True,
    )
    saved = study.user_attrs.get(FINGERPRINT_ATTR)
    if saved is None:
        if study.trials:
            raise ValueError(
                f"study {name!r} already holds trials of an unknown problem; give another --study"
            )
        study.set_user_attr(FINGERPRINT_ATTR, problem.fingerprint)
        study.set_user_attr("objective", problem.objective)
    elif saved != json.loads(json.dumps(problem.fingerprint)):
        raise ValueError(
            f"study {name!r} was made for other data ({_difference(saved, problem.fingerprint)}); "
            "give another --study, or the data it was made for"
        )
    if space is not None:
        _check_space(study, name, json.loads(json.dumps(asdict(space))))
    if study.direction.name.lower() != direction:
        raise ValueError(f"study {name!r} does not {direction} {problem.objective}")
    return study


def _check_space(study: optuna.Study, name: str, space: dict[str, Any]) -> None:
    """Record ``space`` with a study that has none (new, or made before spaces were
    recorded); refuse one made with another."""
    saved = study.user_attrs.get(SPACE_ATTR)
    if saved is None:
        study.set_user_attr(SPACE_ATTR, space)
    elif saved != space:
        raise ValueError(
            f"study {name!r} was made with another search space ({_difference(saved, space)}); "
            "give another --study, or the same choices"
        )


def _difference(saved: dict[str, Any], now: dict[str, Any]) -> str:
    """What differs between two fingerprints, in a few words."""
    keys = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
    return "; ".join(f"{k}: {saved.get(k)!r} there, {now.get(k)!r} here" for k in keys[:3])
