"""Writing explanations: ``atoms.csv``, ``molecules.csv``, one PNG and SVG per molecule and a
grid image, into one folder.

``atoms.csv``: ``row, smiles, atom_index, element``, one ``<target>`` column per target with
the atom's contribution, and ``error``; one row per atom, and one row with empty atom cells and
the reason in ``error`` for an input that could not be read. ``molecules.csv``: one row per
input row with the prediction, the baseline prediction and (``--mol-features``) the
descriptor term per target, the quadrature steps, the picture's file name or why there is
none, and ``error``.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..io.files import write_atomic
from .draw import MAX_GRID, TooLargeToDraw, draw_contributions, draw_grid
from .explain import MoleculeExplanation

__all__ = ["ExplainSummary", "atom_rows", "picture_index", "picture_title", "write_explanations"]

log = logging.getLogger(__name__)


@dataclass
class ExplainSummary:
    """What :func:`write_explanations` wrote."""

    molecules: int = 0
    failed: int = 0
    drawn: int = 0
    not_drawn: list[str] = field(default_factory=list)
    """``"row <i>: <reason>"`` for each readable molecule without a picture."""


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


def atom_rows(e: MoleculeExplanation, num_targets: int) -> list[list[str]]:
    """``atoms.csv`` rows of one explanation (one per atom, or one with the error)."""
    if e.error is not None:
        return [[str(e.index), e.smiles, "", "", *[""] * num_targets, e.error]]
    return [
        [str(e.index), e.smiles, str(i), el, *[_num(v) for v in e.contributions[i]], ""]
        for i, el in enumerate(e.elements)
    ]


def picture_title(e: MoleculeExplanation, target: str, j: int, binary: bool) -> str:
    """The title of a molecule's picture: its row, the prediction of target ``j`` (named
    ``target``; a binary task's logit) and the baseline's."""
    what = f"logit {target}" if binary else target
    return f"row {e.index}: {what} = {e.prediction[j]:.3g} (baseline {e.baseline[j]:.3g})"


def _draw(e: MoleculeExplanation, out: Path, target: str, j: int, binary: bool) -> str:
    """Writes ``mol-<row>.png`` and ``.svg`` coloured by target ``j`` (named ``target``);
    returns the PNG's name or why there is none."""
    title = picture_title(e, target, j, binary)
    values = e.contributions[:, j]
    try:
        png = draw_contributions(e.smiles, values, title, "png")
        svg = draw_contributions(e.smiles, values, title, "svg")
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
) -> ExplainSummary:
    """Write every explanation into folder ``out`` (created); see the module's text.

    Pictures colour atoms by the contributions to ``picture_target`` (default: the first
    target; a name not in ``target_names`` raises ``ValueError``). The grid (``grid.png``) holds
    the first :data:`~graphormer_urpe.inference.draw.MAX_GRID` molecules that could be drawn.
    ``descriptors``: write the ``<target>_descriptors`` columns (a model with per-molecule
    features).
    """
    j = picture_index(target_names, picture_target)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t = len(target_names)
    atoms, mols = io.StringIO(), io.StringIO()
    aw, mw = csv.writer(atoms), csv.writer(mols)
    aw.writerow(["row", "smiles", "atom_index", "element", *target_names, "error"])
    desc_cols = [f"{n}_descriptors" for n in target_names] if descriptors else []
    mw.writerow(
        ["row", "smiles", "atoms", *target_names, *[f"{n}_baseline" for n in target_names]]
        + desc_cols
        + ["steps", "picture", "error"]
    )
    summary = ExplainSummary()
    grid: list[MoleculeExplanation] = []
    for e in explanations:
        summary.molecules += 1
        aw.writerows(atom_rows(e, t))
        picture = ""
        if e.error is not None:
            summary.failed += 1
        elif pictures:
            picture = _draw(e, out, target_names[j], j, binary)
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
            [e.index, e.smiles, len(e.elements)]
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
            [f"row {e.index}: {e.prediction[j]:.3g}" for e in grid],
        )
        write_atomic(out / "grid.png", png)
    return summary
