r"""SD files as text: records split on ``$$$$`` lines, read lazily, and their titles and
SD properties, without RDKit (cheap enough to check a file's first records at once).

A record is the text between two ``$$$$`` lines: the molecule's title on its first line, its
connection table up to ``M  END``, then its SD properties, each a ``> <Name>`` line (more may
follow the name on that line, e.g. ``> <pIC50> (1)``) with its value on the lines after it,
up to a blank line. :mod:`.sdf` reads the molecules with RDKit; :mod:`.table_check` checks the
properties' names and values before any of that.

Example::

    for i, block in enumerate(iter_sdf_blocks("ligands.sdf.gz")):
        print(i, sdf_title(block), sdf_properties(block))
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator

__all__ = ["SDF_SUFFIXES", "is_sdf", "iter_sdf_blocks", "sdf_title", "sdf_properties"]

SDF_SUFFIXES = (".sdf", ".sdf.gz", ".sd", ".sd.gz", ".mol", ".mol.gz")
"""File names read as SD files (case-insensitive)."""


def is_sdf(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an SD file (by its suffix, :data:`SDF_SUFFIXES`)."""
    return str(path).lower().endswith(SDF_SUFFIXES)


def iter_sdf_blocks(path: str | os.PathLike[str]) -> Iterator[str]:
    """The records of the SD file ``path`` (``.gz``: gzip), one text block each, without
    the ``$$$$`` line, read lazily (one record in memory at a time). A last record without
    its ``$$$$`` is yielded when it holds more than blank lines."""
    opener = gzip.open if str(path).lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as fh:
        lines: list[str] = []
        for line in fh:
            if line.rstrip("\r\n").rstrip() == "$$$$":
                yield "".join(lines)
                lines = []
            else:
                lines.append(line)
        if any(line.strip() for line in lines):
            yield "".join(lines)


def sdf_title(block: str) -> str:
    """The record's title: its first line, stripped."""
    return block.split("\n", 1)[0].strip()


def sdf_properties(block: str) -> dict[str, str]:
    """The record's SD properties, ``{name: value}`` (a value of several lines joined with
    ``\\n``, stripped), in file order; the first of a repeated name is kept."""
    lines = block.splitlines()
    start = next((i + 1 for i, line in enumerate(lines) if line.startswith("M  END")), 0)
    props: dict[str, str] = {}
    name: str | None = None
    value: list[str] = []
    for line in lines[start:]:
        if name is None:
            if line.startswith(">") and "<" in line:
                name = line[line.index("<") + 1 :].split(">", 1)[0]
                value = []
        elif line.strip() == "":
            props.setdefault(name, "\n".join(value).strip())
            name = None
        else:
            value.append(line)
    if name is not None:
        props.setdefault(name, "\n".join(value).strip())
    return props
