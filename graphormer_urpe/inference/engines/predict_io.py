r"""What ``predict`` reads and writes: SMILES files in, one CSV row per input row out.

:func:`read_smiles` reads the SMILES of a CSV column, of a ``.smi`` / ``.txt`` file (one
SMILES a line, a name may follow) or of standard input, lazily; :func:`read_named_smiles`
gives each with its name. :func:`write_predictions_csv` writes :class:`Prediction`\ s as CSV,
a whole line at a time and flushed, so an interrupted run leaves a valid prefix, and counts
what it wrote as it goes (:class:`WriteCounts`). :func:`carry_names` takes the names of a
``.smi`` file past the model, which sees only SMILES, into the output's ``name`` column.

Example::

    smiles, named = carry_names(read_named_smiles("library.smi"))
    counts = WriteCounts()
    with open("out.csv", "w", newline="") as fh:
        write_predictions_csv(named(iter_predictions(model, smiles)), fh, ["y"], names=True,
                              counts=counts)

:func:`read_input_table` reads the same files with their id columns (a CSV's ``name`` or the
columns asked for, a ``.smi`` line's or an SD record's name), which ``predict`` and ``explain``
write back beside each row, so that rows join back to the input by name, not by position.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import math
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import IO, TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor

from ..loading import mean_and_std

if TYPE_CHECKING:
    from ...datasets.domain import DomainCheck
    from ..intervals.calibration import Calibration

__all__ = [
    "DOMAIN_COLUMNS",
    "InputTable",
    "Interrupted",
    "Prediction",
    "PredictionLayout",
    "WriteCounts",
    "carry_names",
    "interrupts_between_rows",
    "prediction_columns",
    "read_input_rows",
    "read_input_table",
    "read_named_smiles",
    "read_smiles",
    "write_predictions_csv",
]


class Prediction(NamedTuple):
    """The result for one input row.

    Attributes:
        index: the row, counted from 0 over the input SMILES.
        smiles: the SMILES as given.
        values: ``[T]`` float32 model outputs (logits for binary tasks; an ensemble's mean),
            or ``None``.
        error: why the row could not be featurised, or ``None``.
        members: see below.
    """

    index: int
    smiles: str
    values: Tensor | None
    error: str | None
    members: Tensor | None = None
    """``[K, T]`` each ensemble member's outputs (``values`` is their mean); ``None`` for one
    model."""
    domain: DomainCheck | None = None
    """How the molecule compares with the model's training molecules (out-of-domain reasons,
    nearest training similarity; :mod:`~graphormer_urpe.datasets.domain`); ``None`` for a row
    that could not be featurised, or a checkpoint without the record (domain unknown)."""
    name: str | None = None
    """The row's name in a ``.smi`` file (``""``: the line has none), or the value of its
    first id column (:attr:`ids`); ``None``: not read."""
    embedding: Tensor | None = None
    """``[D]`` float32 the graph-level vector the head reads (an ensemble: its members'
    side by side; :mod:`~graphormer_urpe.inference.embeddings`), only when asked for
    (``iter_predictions(..., embeddings=True)``); ``None`` otherwise or for an unreadable
    row."""
    ids: tuple[str, ...] | None = None
    """The row's values of the input's id columns (:class:`InputTable`); ``None``: not
    read."""


# --------------------------------------------------------------------------------------
# Reading SMILES
# --------------------------------------------------------------------------------------


def read_smiles(
    source: str | Path, smiles_column: str = "smiles", stdin: IO[str] | None = None
) -> Iterator[str]:
    """The SMILES of a file, read lazily, one per row.

    ``.csv`` / ``.csv.gz``: the ``smiles_column`` column. ``.smi`` / ``.txt`` (optionally
    ``.gz``): the first whitespace-separated field of each line (a name may follow), a first
    line whose field is ``smiles_column`` (any case) being a header; a blank line is a row
    with an empty SMILES. ``-``: standard input (``stdin``), read as CSV when its first line
    names ``smiles_column`` among comma-separated fields, else one SMILES a line.
    """
    for smi, _ in read_named_smiles(source, smiles_column, stdin):
        yield smi


def read_named_smiles(
    source: str | Path, smiles_column: str = "smiles", stdin: IO[str] | None = None
) -> Iterator[tuple[str, str | None]]:
    """:func:`read_smiles`' rows with their names: ``(smiles, name)``, where the name is the
    rest of a ``.smi`` / ``.txt`` line after the SMILES, stripped (``""``: none), and ``None``
    for a CSV's rows."""
    if str(source) == "-":
        yield from _read_stdin(stdin if stdin is not None else sys.stdin, smiles_column)
        return
    name = str(source).lower().removesuffix(".gz")
    from ...datasets.sources.sdf_blocks import is_sdf

    if is_sdf(source):  # records, not lines: read_input_rows / read_input_table read them
        raise ValueError(
            f"{source}: an SD file holds records, not SMILES lines; read_input_table (as "
            "predict and explain do) reads its molecules"
        )
    if not name.endswith((".csv", ".smi", ".txt")):
        raise ValueError(
            f"{source}: unknown input format; expected .csv, .csv.gz, .smi or .txt "
            "(one SMILES a line), .sdf or .sdf.gz (an SD file), or - for standard input"
        )
    opener = gzip.open if str(source).lower().endswith(".gz") else open
    with opener(source, "rt", newline="") as fh:
        if name.endswith(".csv"):
            yield from _csv_column(fh, smiles_column, str(source))
        else:
            yield from _smiles_lines(fh, smiles_column)


def _read_stdin(fh: IO[str], smiles_column: str) -> Iterator[tuple[str, str | None]]:
    first = fh.readline()
    rest: Iterable[str] = fh
    fields = next(csv.reader([first]), [])
    if len(fields) > 1 and smiles_column in fields:
        yield from _csv_column(chain([first], rest), smiles_column, "standard input")
    elif first:
        yield from _smiles_lines(chain([first], rest), smiles_column)


def _csv_column(lines: Iterable[str], column: str, where: str) -> Iterator[tuple[str, str | None]]:
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        raise ValueError(f"{where} is empty; expected a CSV header with a {column!r} column")
    if column not in header:
        raise ValueError(f"{where} has no column {column!r}; columns: {', '.join(header)}")
    k = header.index(column)
    for row in reader:
        yield (row[k] if k < len(row) else ""), None


def _smiles_lines(lines: Iterable[str], column: str) -> Iterator[tuple[str, str | None]]:
    for i, line in enumerate(lines):
        fields = line.split(maxsplit=1)
        smi = fields[0] if fields else ""
        if i == 0 and smi.lower() == column.lower():
            continue
        yield smi, fields[1].strip() if len(fields) > 1 else ""


def read_input_rows(
    source: str | Path, smiles_column: str = "smiles", stdin: IO[str] | None = None
) -> Iterator[tuple[str, str | None, str | None]]:
    """``predict``'s input rows, ``(smiles, name, error)``: an SD file's records (``.sdf``,
    ``.sdf.gz``: the canonical SMILES, the title, and why RDKit cannot read the record, see
    :mod:`~graphormer_urpe.datasets.sources.sdf`), else :func:`read_named_smiles`' rows (error
    ``None``)."""
    from ...datasets.sources.sdf_blocks import is_sdf

    if str(source) != "-" and is_sdf(source):
        from ...datasets.sources.sdf import iter_sdf_molecules

        yield from iter_sdf_molecules(source)
        return
    for smi, name in read_named_smiles(source, smiles_column, stdin):
        yield smi, name, None


NAME_COLUMN = "name"
"""The id column kept by default: a CSV's column of that name, a ``.smi`` line's name after
its SMILES, an SD record's title."""


@dataclass
class InputTable:
    """An input file's rows with their id columns (:func:`read_input_table`).

    Attributes:
        id_columns: the names of the id columns carried beside each row (may be empty).
        rows: ``(smiles, ids, error)`` per input row, lazily: ``ids`` one value per id column
            (``""``: empty), ``error`` why an SD record cannot be read (else ``None``).
    """

    id_columns: list[str]
    rows: Iterator[tuple[str, tuple[str, ...], str | None]]


def read_input_table(
    source: str | Path,
    smiles_column: str = "smiles",
    id_columns: Sequence[str] | None = None,
    stdin: IO[str] | None = None,
) -> InputTable:
    """:func:`read_input_rows`' rows with the values of the input's id columns.

    ``id_columns`` ``None`` keeps :data:`NAME_COLUMN`: a CSV's ``name`` column where it has
    one (else no id column), a ``.smi`` / ``.txt`` line's name, an SD record's title. Named
    columns are a CSV's columns or an SD file's properties (``name``: the record's title; a
    record without the property gets ``""``); a ``.smi`` / ``.txt`` file has only ``name``.

    Raises:
        ValueError: a named column that the CSV does not have (naming its columns), one asked
            of a ``.smi`` / ``.txt`` file, or the SMILES column itself.
    """
    wanted = list(id_columns) if id_columns is not None else None
    if wanted is not None and smiles_column in wanted:
        raise ValueError(f"--id-columns names the SMILES column {smiles_column!r}")
    from ...datasets.sources.sdf_blocks import is_sdf

    if str(source) != "-" and is_sdf(source):
        columns = wanted if wanted is not None else [NAME_COLUMN]
        return InputTable(columns, _sdf_rows(source, columns))
    if str(source) == "-":
        fh = stdin if stdin is not None else sys.stdin
        first = fh.readline()
        fields = next(csv.reader([first]), [])
        lines: Iterable[str] = chain([first], fh)
        if len(fields) > 1 and smiles_column in fields:
            return _csv_table(fields, lines, smiles_column, wanted, "standard input")
        rows = _smiles_lines(lines, smiles_column) if first else iter(())
        return _named_table(rows, wanted, "standard input")
    name = str(source).lower().removesuffix(".gz")
    if name.endswith(".csv"):
        opener = gzip.open if str(source).lower().endswith(".gz") else open
        with opener(source, "rt", newline="") as fh:
            header = next(csv.reader(fh), [])
        return _csv_table(header, _reopened(source), smiles_column, wanted, str(source))
    return _named_table(read_named_smiles(source, smiles_column, stdin), wanted, str(source))


def _reopened(source: str | Path) -> Iterator[str]:
    """The lines of a (gzipped) text file, opened when first read and closed at the end."""
    opener = gzip.open if str(source).lower().endswith(".gz") else open
    with opener(source, "rt", newline="") as fh:
        yield from fh


def _csv_table(
    header: list[str],
    lines: Iterable[str],
    smiles_column: str,
    wanted: list[str] | None,
    where: str,
) -> InputTable:
    """A CSV's rows (``lines``, header included) with the id columns ``wanted``."""
    if not header:
        raise ValueError(f"{where} is empty; expected a CSV header with a {smiles_column!r} column")
    if wanted is None:
        wanted = [NAME_COLUMN] if NAME_COLUMN in header else []
    missing = [c for c in [smiles_column, *wanted] if c not in header]
    if missing:
        raise ValueError(
            f"{where} has no column {', '.join(map(repr, missing))}; columns: " + ", ".join(header)
        )
    k, at = header.index(smiles_column), [header.index(c) for c in wanted]

    def rows() -> Iterator[tuple[str, tuple[str, ...], str | None]]:
        reader = csv.reader(lines)
        next(reader, None)  # the header
        for row in reader:
            ids = tuple(row[j] if j < len(row) else "" for j in at)
            yield (row[k] if k < len(row) else ""), ids, None

    return InputTable(wanted, rows())


def _named_table(
    rows: Iterable[tuple[str, str | None]], wanted: list[str] | None, where: str
) -> InputTable:
    """One-SMILES-a-line rows with their names as the ``name`` id column."""
    if wanted is not None and wanted != [NAME_COLUMN]:
        raise ValueError(
            f"{where}: a file of one SMILES a line has only a {NAME_COLUMN!r} id column (the "
            f"text after each SMILES); --id-columns names columns of a CSV or SD file"
        )
    return InputTable([NAME_COLUMN], ((s, (n or "",), None) for s, n in rows))


def _sdf_rows(
    source: str | Path, columns: list[str]
) -> Iterator[tuple[str, tuple[str, ...], str | None]]:
    """An SD file's rows: each record's SMILES, its title (``name``) or properties, error."""
    from ...datasets.sources.sdf import block_smiles
    from ...datasets.sources.sdf_blocks import iter_sdf_blocks, sdf_properties, sdf_title

    for block in iter_sdf_blocks(source):
        smiles, error = block_smiles(block)
        props = sdf_properties(block) if set(columns) - {NAME_COLUMN} else {}
        ids = tuple(sdf_title(block) if c == NAME_COLUMN else props.get(c, "") for c in columns)
        yield smiles, ids, error


def carry_names(
    rows: Iterable[
        tuple[str, str | None]
        | tuple[str, str | None, str | None]
        | tuple[str, tuple[str, ...], str | None]
    ],
) -> tuple[Iterator[str], Callable[[Iterable[Prediction]], Iterator[Prediction]]]:
    """Split :func:`read_named_smiles`' (or :func:`read_input_rows`', or
    :attr:`InputTable.rows`) rows into the SMILES for the model and a function that gives its
    predictions (one per row, in input order) their names back (a tuple of id values: in
    :attr:`Prediction.ids`), and a row's own error (an SD record RDKit cannot read) in place
    of the model's.

    The names of the rows read but not yet predicted wait in a queue: a few chunks' worth,
    however long the input.
    """
    waiting: deque[tuple[str | tuple[str, ...] | None, str | None]] = deque()

    def smiles() -> Iterator[str]:
        for row in rows:
            waiting.append((row[1], row[2] if len(row) > 2 else None))
            yield row[0]

    def named(predictions: Iterable[Prediction]) -> Iterator[Prediction]:
        for p in predictions:
            name, error = waiting.popleft()
            if error is not None:
                p = p._replace(values=None, members=None, domain=None, error=error, embedding=None)
            if isinstance(name, tuple):  # id values: the first is the row's name too
                yield p._replace(ids=name, name=name[0] if name else None)
            else:
                yield p._replace(name=name)

    return smiles(), named


# --------------------------------------------------------------------------------------
# Writing CSV
# --------------------------------------------------------------------------------------


DOMAIN_COLUMNS = ("domain", "nearest_similarity")
"""The applicability-domain columns of the CSV (see :func:`write_predictions_csv`)."""


def prediction_columns(
    target_names: Sequence[str],
    binary: bool,
    logits: bool,
    std: bool = False,
    domain: bool = False,
    names: bool = False,
    interval: bool = False,
    id_columns: Sequence[str] = (),
) -> list[str]:
    """The CSV header: ``smiles``, the ``id_columns`` (with ``names`` and none given:
    ``name``), one column per target (``prob_`` / ``logit_`` prefixed for binary tasks), for
    an ensemble (``std``) one ``<column>_std`` per target, with ``interval`` ``<target>_low``
    and ``<target>_high`` per target, with ``domain`` the :data:`DOMAIN_COLUMNS`, ``error``.

    Raises:
        ValueError: an id column with the name of another column.
    """
    if binary:
        prefix = "logit_" if logits else "prob_"
        target_names = [prefix + n for n in target_names]
    spread = [f"{n}_std" for n in target_names] if std else []
    bounds = [f"{n}_{side}" for n in target_names for side in ("low", "high")] if interval else []
    ids = list(id_columns) or ([NAME_COLUMN] if names else [])
    extra = (*spread, *bounds, *(DOMAIN_COLUMNS if domain else ()))
    header = ["smiles", *ids, *target_names, *extra, "error"]
    clash = sorted({c for c in header if header.count(c) > 1})
    if clash:
        raise ValueError(
            f"the id column {', '.join(map(repr, clash))} has the name of an output column; "
            "rename it in the input"
        )
    return header


@dataclass
class WriteCounts:
    """What :func:`write_predictions_csv` has written so far (kept up to date row by row, so
    a caller whose run is interrupted still knows; see :func:`interrupts_between_rows`)."""

    rows: int = 0
    """Rows written (after the header)."""
    failed: int = 0
    """Of those, rows that could not be featurised."""
    outside: int = 0
    """Of those, molecules out of the training domain."""
    writing: bool = False
    """A row is being written and counted: an interrupt waits for its end."""
    deferred: int = 0
    """A signal that arrived while a row was written (0: none)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the writing of predictions.

    Attributes:
        signum: the signal (the command's exit status is 128 + signum).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def interrupts_between_rows(counts: WriteCounts) -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` at once, except while
    :func:`write_predictions_csv` writes a row and counts it (``counts.writing``): then at
    the end of that row. ``counts.rows`` is so always the number of whole rows in the output.
    (Outside the main thread, where signals cannot be handled, nothing changes.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        if counts.writing:
            counts.deferred = counts.deferred or signum
        else:
            raise Interrupted(signum)

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


@dataclass(frozen=True)
class PredictionLayout:
    """The columns of ``predict``'s output and how a :class:`Prediction` fills them (see
    :func:`write_predictions_csv` for what each holds).

    :meth:`row` gives a prediction's CSV cells. The Ray engine's actors give the same row as
    typed columns (:meth:`numbers`, :meth:`domain_of`), and its writer turns those into the
    same cells with :meth:`cells`: one piece of code for both engines.
    """

    target_names: Sequence[str]
    binary: bool = False
    logits: bool = False
    std: bool = False
    domain: bool = False
    names: bool = False
    calibration: Calibration | None = None
    level: float | None = None
    id_columns: Sequence[str] = ()
    """The input's id columns, written after ``smiles`` from :attr:`Prediction.ids` (none:
    ``name`` from :attr:`Prediction.name` where :attr:`names`)."""

    @property
    def header(self) -> list[str]:
        """The CSV header (:func:`prediction_columns`)."""
        interval = self.level is not None
        return prediction_columns(
            self.target_names,
            self.binary,
            self.logits,
            self.std,
            self.domain,
            self.names,
            interval,
            self.id_columns,
        )

    @property
    def _ids(self) -> int:
        """How many id columns follow ``smiles``."""
        return len(self.id_columns) or int(self.names)

    @property
    def value_columns(self) -> list[str]:
        """The numeric columns, in order: the targets, their ``_std``, ``_low`` and ``_high``."""
        first = 1 + self._ids
        per_target = 1 + self.std + 2 * (self.level is not None)
        return self.header[first : first + len(self.target_names) * per_target]

    def numbers(self, p: Prediction) -> list[float]:
        """The numbers of a predicted row's :attr:`value_columns` (``p.values`` is set)."""
        numbers = _numbers(p, self.binary and not self.logits, self.std, self.calibration)
        if self.level is not None:
            numbers += _interval_numbers(p, self.calibration, self.level)
        return numbers

    @staticmethod
    def domain_of(p: Prediction) -> tuple[str, float | None]:
        """A row's ``(domain, nearest_similarity)``: ``("", None)`` for a row that could not
        be read, ``("unknown", None)`` where the checkpoint has no training record."""
        if p.values is None:
            return "", None
        if p.domain is None:
            return "unknown", None
        return p.domain.label, p.domain.nearest_similarity

    def cells(
        self,
        smiles: str,
        name: str | None,
        numbers: Sequence[float] | None,
        domain: tuple[str, float | None],
        error: str | None,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        """A CSV row from its parts: ``numbers`` (``None``: a row that could not be read)
        those of :meth:`numbers`, ``domain`` that of :meth:`domain_of`, ``ids`` the values of
        :attr:`id_columns` (``None``: ``name`` alone, where :attr:`names`)."""
        if ids is None:
            ids = [name or ""] if self._ids else []
        first = [smiles, *ids, *[""] * (self._ids - len(ids))]
        if numbers is None:
            values = [""] * len(self.value_columns)
        else:
            values = ["" if v != v else f"{v:.6g}" for v in numbers]  # NaN: no value
        if self.domain:
            label, sim = domain
            values += [label, "" if sim is None else f"{sim:.3f}"]
        return [*first, *values, error or ""]

    def row(self, p: Prediction) -> list[str]:
        """The CSV row of ``p``."""
        numbers = None if p.values is None else self.numbers(p)
        return self.cells(p.smiles, p.name, numbers, self.domain_of(p), p.error, p.ids)


def write_predictions_csv(
    predictions: Iterable[Prediction],
    fh: IO[str],
    target_names: Sequence[str],
    binary: bool = False,
    logits: bool = False,
    std: bool = False,
    domain: bool = False,
    names: bool = False,
    counts: WriteCounts | None = None,
    calibration: Calibration | None = None,
    level: float | None = None,
    id_columns: Sequence[str] = (),
) -> tuple[int, int]:
    """Write the header, then one row per prediction, flushed as it comes, so that an
    interrupted run leaves a valid CSV prefix. Binary tasks get sigmoid probabilities unless
    ``logits``. With ``std`` (an ensemble's predictions) each value is the members' mean of
    what the column reports, followed by their standard deviations. With ``domain``, the
    columns ``domain`` (``in``, ``out: <reasons>``, ``unknown`` where the checkpoint has no
    training record, empty for a row that could not be read) and ``nearest_similarity``
    (three decimals; empty where not searched) come before ``error``. With ``names``, a
    ``name`` column after ``smiles`` holds each prediction's :attr:`Prediction.name`;
    ``id_columns`` (the input's, :class:`InputTable`) come there instead, from
    :attr:`Prediction.ids`.
    ``counts`` is kept up to date as rows are written. A binary task's ``calibration``
    (:mod:`~graphormer_urpe.inference.intervals.calibration`) calibrates its probabilities; a
    regression's, with ``level``, gives each target its interval in ``<target>_low`` and
    ``<target>_high`` after the std columns.

    Returns:
        ``(rows, failed)``: rows written and how many of them could not be featurised.
    """
    counts = counts if counts is not None else WriteCounts()
    layout = PredictionLayout(
        target_names, binary, logits, std, domain, names, calibration, level, id_columns
    )
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow(layout.header)
    fh.flush()
    line = io.StringIO()
    row_writer = csv.writer(line, lineterminator="\n")
    for p in predictions:
        row_writer.writerow(layout.row(p))
        counts.writing = True
        fh.write(line.getvalue())  # one whole line per write
        fh.flush()
        counts.rows += 1
        counts.failed += p.values is None
        counts.outside += p.domain is not None and not p.domain.in_domain
        counts.writing = False
        if counts.deferred:
            raise Interrupted(counts.deferred)
        line.seek(0)
        line.truncate()
    return counts.rows, counts.failed


def _interval_numbers(
    p: Prediction, calibration: Calibration | None, level: float | None
) -> list[float]:
    """A predicted row's ``<target>_low`` and ``<target>_high`` numbers, target by target;
    NaN (empty cells) for a molecule out of the training domain: its calibration does not
    hold there (the molecules it was fitted on were all in the domain)."""
    assert calibration is not None and level is not None and p.values is not None
    if p.domain is not None and not p.domain.in_domain:
        return [math.nan] * (2 * len(p.values))
    spread = None if p.members is None else mean_and_std(p.members)[1]
    similarity = None if p.domain is None else p.domain.nearest_similarity
    low, high = calibration.interval(p.values, spread, level, similarity)
    return [v for pair in zip(low.tolist(), high.tolist(), strict=True) for v in pair]


def _numbers(
    p: Prediction, probabilities: bool, std: bool, calibration: Calibration | None = None
) -> list[float]:
    """A predicted row's value numbers (see :func:`write_predictions_csv`)."""
    if probabilities and calibration is not None and calibration.temperature is not None:
        # each member's temperature-scaled probabilities, their mean and std
        members = p.values[None] if p.members is None else p.members  # [K, T]
        t = torch.tensor(calibration.temperature, dtype=members.dtype)
        mean, spread = mean_and_std(torch.sigmoid(members / t))
        return mean.tolist() + spread.tolist() if std else mean.tolist()
    if p.members is None:  # one model: its values as they are
        values = (torch.sigmoid(p.values) if probabilities else p.values).tolist()
        return values + [0.0] * len(values) if std else values
    members = torch.sigmoid(p.members) if probabilities else p.members  # [K, T]
    mean, spread = mean_and_std(members)
    return mean.tolist() + spread.tolist() if std else mean.tolist()
