"""Writing explanations: ``atoms.csv``, ``molecules.csv``, one PNG and SVG per molecule and a
grid image, into one folder.

``atoms.csv``: ``row, smiles``, the input's id columns (e.g. ``name``), ``atom_index,
element``, one ``<target>`` column per target with
the atom's contribution, and ``error``; one row per atom, and one row with empty atom cells and
the reason in ``error`` for an input that could not be read. ``molecules.csv``: one row per
input row (``row, smiles``, the id columns, ``atoms``) with the prediction, the baseline
prediction and (``--mol-features``) the descriptor term per target, the quadrature steps,
the picture's file name or why there is none, and ``error``.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...io.files import write_atomic
from .drawing import (
    MAX_DRAW_ATOMS,
    MAX_GRID,
    TooLargeToDraw,
    bar_label,
    draw_contributions,
    draw_grid,
    largest,
)
from .explainer import MoleculeExplanation

__all__ = [
    "ExplainSummary",
    "atom_rows",
    "molecule_name",
    "picture_index",
    "picture_title",
    "whole_answer",
    "with_input_rows",
    "write_explanations",
]

log = logging.getLogger(__name__)


@dataclass
class ExplainSummary:
    """What :func:`write_explanations` wrote."""

    molecules: int = 0
    failed: int = 0
    drawn: int = 0
    not_drawn: list[str] = field(default_factory=list)
    """``"row <i>: <reason>"`` for each readable molecule without a picture."""
    scale: float | None = None
    """The colour scale shared by every picture (``None``: each molecule its own, or none
    drawn)."""


def picture_index(target_names: list[str], name: str | None) -> int:
    """The column of target ``name`` (``None``: the first); ``ValueError`` names the
    choices when the model has no such target."""
    if name is None:
        return 0
    if name not in target_names:
        raise ValueError(
            f"--picture-target {name!r} is not a target of this model; its targets: "
            + ", ".join(target_names)
        )
    return target_names.index(name)


def _num(v: float) -> str:
    return "" if v != v else f"{float(v):.6g}"


def with_input_rows(
    explanations: Iterable[MoleculeExplanation],
    rows: Iterable[tuple[str, tuple[str, ...], str | None]],
) -> Iterator[MoleculeExplanation]:
    """The explanations of an input's rows (:attr:`~graphormer_urpe.inference.engines.predict_io.
    InputTable.rows`, in the same order) with each row's id values, and a row's own error
    (an SD record RDKit cannot read, whose empty SMILES the explainer refused) in place of
    the explainer's."""
    for e, (_, ids, error) in zip(explanations, rows, strict=True):
        e.ids = tuple(ids)
        if error is not None:
            e.error = error
        yield e


def _first_cells(e: MoleculeExplanation, num_ids: int) -> list[str]:
    """A row's ``row, smiles`` and ``num_ids`` id cells (``e.ids``, padded with ``""``)."""
    return [str(e.index), e.smiles, *e.ids[:num_ids], *[""] * (num_ids - len(e.ids))]


def atom_rows(e: MoleculeExplanation, num_targets: int, num_ids: int = 0) -> list[list[str]]:
    """``atoms.csv`` rows of one explanation (one per atom, or one with the error);
    ``num_ids`` id cells follow the SMILES (``e.ids``, padded with ``""``)."""
    first = _first_cells(e, num_ids)
    if e.error is not None:
        return [[*first, "", "", *[""] * num_targets, e.error]]
    return [
        [*first, str(i), el, *[_num(v) for v in e.contributions[i]], ""]
        for i, el in enumerate(e.elements)
    ]


def molecule_name(e: MoleculeExplanation) -> str:
    """What a picture calls the molecule: its first id value (e.g. its ``name``), else
    ``row <i>``."""
    return e.ids[0] if e.ids and e.ids[0] else f"row {e.index}"


def picture_title(e: MoleculeExplanation, target: str, j: int, binary: bool) -> str:
    """The title of a molecule's picture: its name (:func:`molecule_name`), the prediction of
    target ``j`` (named ``target``; a binary task's logit) and the baseline's."""
    what = f"logit {target}" if binary else target
    return f"{molecule_name(e)}: {what} = {e.prediction[j]:.3g} (baseline {e.baseline[j]:.3g})"


def whole_answer(e: MoleculeExplanation, j: int) -> str:
    """The line under a picture: how the atoms' sum and, for a ``--mol-features`` model,
    the descriptor term make up ``prediction - baseline`` of target ``j``."""
    parts = [f"atoms {e.contributions[:, j].sum():+.3g}"]
    if e.descriptors is not None:
        parts.append(f"descriptors {e.descriptors[j]:+.3g}")
    delta = e.prediction[j] - e.baseline[j]
    return f"{' + '.join(parts)} = prediction - baseline ({delta:+.3g})"


def _draw(
    e: MoleculeExplanation, out: Path, target: str, j: int, binary: bool, scale: float | None
) -> str:
    """Writes ``mol-<row>.png`` and ``.svg`` coloured by target ``j`` (named ``target``) on
    ``scale`` (``None``: the molecule's own); returns the PNG's name or why there is none."""
    title = picture_title(e, target, j, binary)
    values = e.contributions[:, j]
    style = {"scale": scale, "label": bar_label(target), "note": whole_answer(e, j)}
    try:
        png = draw_contributions(e.smiles, values, title, "png", **style)
        svg = draw_contributions(e.smiles, values, title, "svg", **style)
    except TooLargeToDraw as exc:
        return str(exc)
    name = f"mol-{e.index}"
    write_atomic(out / f"{name}.png", png)
    write_atomic(out / f"{name}.svg", svg)
    return f"{name}.png"


def write_explanations(
    explanations: Iterable[MoleculeExplanation],
    out: str | Path,
    target_names: list[str],
    binary: bool = False,
    pictures: bool = True,
    descriptors: bool = False,
    picture_target: str | None = None,
    id_columns: Sequence[str] = (),
    per_molecule_scale: bool = False,
) -> ExplainSummary:
    """Write every explanation into folder ``out`` (created); see the module's text.

    Pictures colour atoms by the contributions to ``picture_target`` (default: the first
    target; a name not in ``target_names`` raises ``ValueError``). The grid (``grid.png``) holds
    the first :data:`~.drawing.MAX_GRID` molecules that could be drawn.
    ``descriptors``: write the ``<target>_descriptors`` columns (a model with per-molecule
    features). ``id_columns``: the input's id columns, written after ``smiles`` from each
    explanation's ``ids`` (the first names the molecule in the pictures' titles).

    Every picture of the call, the grid's too, shares one colour scale: the largest
    ``|contribution|`` among the molecules drawn (so colours compare across molecules;
    :attr:`ExplainSummary.scale`); ``per_molecule_scale`` gives each molecule its own.
    Each picture also writes how the atoms' sum and the descriptor term make up the
    prediction minus the baseline.
    """
    j = picture_index(target_names, picture_target)
    scale = None
    if pictures and not per_molecule_scale:  # one scale: every explanation first
        explanations = list(explanations)
        drawn = [e for e in explanations if e.error is None and len(e.elements) <= MAX_DRAW_ATOMS]
        scale = largest([e.contributions[:, j] for e in drawn])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t = len(target_names)
    atoms, mols = io.StringIO(), io.StringIO()
    aw, mw = csv.writer(atoms), csv.writer(mols)
    ids = list(id_columns)
    aw.writerow(["row", "smiles", *ids, "atom_index", "element", *target_names, "error"])
    desc_cols = [f"{n}_descriptors" for n in target_names] if descriptors else []
    mw.writerow(
        ["row", "smiles", *ids, "atoms", *target_names]
        + [f"{n}_baseline" for n in target_names]
        + desc_cols
        + ["steps", "picture", "error"]
    )
    summary = ExplainSummary(scale=scale)
    grid: list[MoleculeExplanation] = []
    for e in explanations:
        summary.molecules += 1
        aw.writerows(atom_rows(e, t, len(ids)))
        picture = ""
        if e.error is not None:
            summary.failed += 1
        elif pictures:
            picture = _draw(e, out, target_names[j], j, binary, scale)
            if picture.endswith(".png"):
                summary.drawn += 1
                if len(grid) < MAX_GRID:
                    grid.append(e)
            else:
                summary.not_drawn.append(f"row {e.index}: {picture}")
        desc = [""] * len(desc_cols)
        if desc_cols and e.descriptors is not None:
            desc = [_num(v) for v in e.descriptors]
        mw.writerow(
            _first_cells(e, len(ids))
            + [str(len(e.elements))]
            + [_num(v) for v in e.prediction]
            + [_num(v) for v in e.baseline]
            + desc
            + [e.steps, picture, e.error or ""]
        )
    write_atomic(out / "atoms.csv", atoms.getvalue())
    write_atomic(out / "molecules.csv", mols.getvalue())
    if grid:
        png = draw_grid(
            [e.smiles for e in grid],
            [e.contributions[:, j] for e in grid],
            [f"{molecule_name(e)}: {e.prediction[j]:.3g}" for e in grid],
            scale=scale,
            label=bar_label(target_names[j]),
        )
        write_atomic(out / "grid.png", png)
    return summary
