r"""A dataset's name, parsed in one place: the kind of source, its files, the set it names.

==========================  ============  ===================  ===============================
text                        ``kind``      ``name``             ``paths``
==========================  ============  ===================  ===============================
``nci5k``                   ``nci5k``     ``nci5k``            ``()``
``zinc``, ``zinc-full``     the name      the name             ``()``
``pcqm4mv2``, ``pcqm4m``    the name      the name             ``()``
``ogbg-molhiv``             ``ogbg``      ``ogbg-molhiv``      ``()``
``csv:PATH``                ``csv``       ``""``               ``(PATH,)``
``csv:TRAIN,VALID,TEST``    ``csv``       ``""``               ``(TRAIN, VALID, TEST)``
``sdf:PATH``                ``sdf``       ``""``               ``(PATH,)``
``pretrain:PATH``           ``pretrain``  ``""``               ``(PATH,)``
==========================  ============  ===================  ===============================

A table's path part is one file (which may hold a comma, when that file exists) or three
comma-separated files. ``str(spec)`` gives the text back as it was written, so a run logs and
names itself as before. The module uses the standard library alone: the command line checks a
table's head with it before torch or RDKit is imported.

Example::

    spec = parse_dataset_spec("csv:data/train.csv,data/valid.csv,data/test.csv")
    spec.kind, spec.paths      # ("csv", ("data/train.csv", "data/valid.csv", "data/test.csv"))
    spec.is_table              # True
    str(spec)                  # "csv:data/train.csv,data/valid.csv,data/test.csv"
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = [
    "DATASET_NAMES",
    "FILE_KINDS",
    "LSC_NAMES",
    "NAMED_SETS",
    "TABLE_KINDS",
    "DatasetSpec",
    "names_table",
    "parse_dataset_spec",
    "table_paths",
]

LSC_NAMES = ("pcqm4mv2", "pcqm4m")
"""The OGB-LSC sets (:mod:`.sources.pcqm`)."""

NAMED_SETS = ("nci5k", "zinc", "zinc-full", *LSC_NAMES)
"""The sets named by a word alone; each is its own kind."""

OGBG_PREFIX = "ogbg-"
"""The OGB molecule sets' names begin with it (``ogbg-molhiv``, ...): kind ``ogbg``."""

TABLE_KINDS = ("csv", "sdf")
"""The kinds of a user's table: a CSV (``csv:``) or an SD file (``sdf:``)."""

FILE_KINDS = (*TABLE_KINDS, "pretrain")
"""The kinds written ``KIND:PATH``."""

DATASET_NAMES = (
    "nci5k",
    "zinc",
    "zinc-full",
    "csv:PATH",
    "csv:TRAIN,VALID,TEST",
    "sdf:PATH",
    "pcqm4mv2",
    "pcqm4m",
    "ogbg-mol*",
    "pretrain:PATH",
)
"""The dataset names the registry accepts, as the errors list them."""


@dataclass(frozen=True)
class DatasetSpec:
    """A parsed dataset name (build one with :func:`parse_dataset_spec`).

    Attributes:
        kind: ``nci5k``, ``zinc``, ``zinc-full``, ``pcqm4mv2``, ``pcqm4m``, ``ogbg``, ``csv``,
            ``sdf`` or ``pretrain``.
        name: a named set's name (``zinc``, ``ogbg-molhiv``); ``""`` for files.
        location: the path part as written (``a.csv`` or ``a.csv,b.csv,c.csv``); ``""`` for
            named sets.
        paths: the files: one, or (tables) train, valid and test.
    """

    kind: str
    name: str = ""
    location: str = ""
    paths: tuple[str, ...] = ()

    @property
    def is_table(self) -> bool:
        """A user's table of molecules and targets (``csv:`` or ``sdf:``)."""
        return self.kind in TABLE_KINDS

    def __str__(self) -> str:
        return f"{self.kind}:{self.location}" if self.kind in FILE_KINDS else self.name


def table_paths(location: str) -> tuple[str, ...]:
    """The files of a table's path part: one file (kept whole when it exists, so its name may
    hold a comma), else three comma-separated files (train, valid, test), stripped.

    Raises:
        ValueError: two, or more than three, comma-separated parts.
    """
    if os.path.exists(location):
        return (location,)
    paths = tuple(p.strip() for p in location.split(","))
    if len(paths) not in (1, 3):
        raise ValueError(
            f"csv dataset spec {location!r}: give one CSV path or three comma-separated paths "
            "(train,valid,test)"
        )
    return paths


def parse_dataset_spec(text: str) -> DatasetSpec:
    """Parse a dataset name (see the module's table).

    Raises:
        ValueError: a name the registry does not know (listing the known ones), a
            ``KIND:`` with no path, or a table of two or more than three files.
    """
    if not isinstance(text, str):
        raise TypeError(f"a dataset name is a string, got {type(text).__name__}: {text!r}")
    if text in NAMED_SETS:
        return DatasetSpec(kind=text, name=text)
    if text.startswith(OGBG_PREFIX) and len(text) > len(OGBG_PREFIX):
        return DatasetSpec(kind="ogbg", name=text)
    kind, sep, location = text.partition(":")
    if not sep or kind not in FILE_KINDS or not location:
        raise ValueError(f"unknown dataset {text!r}; choose one of {list(DATASET_NAMES)}")
    if kind == "pretrain":
        return DatasetSpec(kind=kind, location=location, paths=(location,))
    return DatasetSpec(kind=kind, location=location, paths=table_paths(location))


def names_table(text: str) -> bool:
    """Whether ``text`` names a user's table (``csv:`` or ``sdf:``); any other text, even
    one the registry does not know (a hand-made :class:`~.dataset_splits.DatasetSplits`'s
    name), is not."""
    try:
        return parse_dataset_spec(text).is_table
    except ValueError:
        return False
