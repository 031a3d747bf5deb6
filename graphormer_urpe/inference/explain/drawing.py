"""Pictures of explanations, drawn with RDKit: atoms coloured by contribution, a labelled
colour bar, the prediction in the title and a line under the molecule (e.g. how the atoms'
sum and the descriptor term make up the prediction); and a grid of many molecules with its
own colour bar.

Colours run from blue (negative) through white (0) to red (positive), on a scale symmetric
about 0: the ``scale`` given (one for every picture of a call, so that colours compare
across molecules), else the largest ``|contribution|`` of the molecule (of the grid, for a
grid). Molecules of more than :data:`MAX_DRAW_ATOMS` heavy atoms are not drawn
(:class:`TooLargeToDraw`): their atoms would be too small to read.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from rdkit import Chem
from rdkit.Chem.Draw import rdMolDraw2D
from rdkit.Geometry import Point2D

__all__ = [
    "MAX_DRAW_ATOMS",
    "MAX_GRID",
    "TooLargeToDraw",
    "bar_label",
    "contribution_colour",
    "draw_contributions",
    "draw_grid",
    "draw_molecule",
    "largest",
]

MAX_DRAW_ATOMS = 100
"""The most heavy atoms drawn in one picture."""

MAX_GRID = 50
"""The most molecules in one grid image."""

SIZE = (420, 360)
"""Width and height of the molecule's panel, in pixels; the colour bar is beside it."""

BAR = 90
"""Width of the colour bar's panel, in pixels."""

FOOTER = 30
"""Height of the line under the molecule (the ``note``), in pixels."""

LABEL = "contribution"
"""The colour bar's label (its first line; a second may name the target)."""


class TooLargeToDraw(ValueError):
    """A molecule has more heavy atoms than :data:`MAX_DRAW_ATOMS`."""


def contribution_colour(value: float, scale: float) -> tuple[float, float, float]:
    """RGB in ``[0, 1]`` for ``value`` on a blue-white-red scale ``[-scale, scale]``."""
    v = 0.0 if scale <= 0 else float(np.clip(value / scale, -1.0, 1.0))
    if v >= 0:
        return (1.0, 1.0 - 0.75 * v, 1.0 - 0.75 * v)
    return (1.0 + 0.75 * v, 1.0 + 0.75 * v, 1.0)


def _mol(smiles: str) -> Chem.Mol:
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise ValueError(f"RDKit cannot parse SMILES {smiles!r}")
    if mol.GetNumAtoms() > MAX_DRAW_ATOMS:
        raise TooLargeToDraw(
            f"not drawn: {mol.GetNumAtoms()} heavy atoms, more than the {MAX_DRAW_ATOMS} that "
            "can be drawn legibly"
        )
    return mol


def _highlights(values: np.ndarray, scale: float) -> tuple[list[int], dict, dict]:
    atoms = list(range(len(values)))
    colours = {i: contribution_colour(float(v), scale) for i, v in enumerate(values)}
    radii = {i: 0.45 for i in atoms}
    return atoms, colours, radii


def largest(values: Sequence[np.ndarray]) -> float:
    """The largest ``|value|`` of several arrays (0 when there is none): a scale common to
    their pictures."""
    return max((float(np.abs(v).max()) for v in values if len(v)), default=0.0)


def _colour_bar(
    drawer: rdMolDraw2D.MolDraw2D, left: int, height: int, scale: float, label: Sequence[str]
) -> None:
    """A vertical blue-white-red bar from ``-scale`` (bottom) to ``scale`` (top), its
    ``label`` (one or two lines) above it."""
    top, bottom, width, pieces = 48, height - 40, 22, 60
    drawer.SetFillPolys(True)
    step = (bottom - top) / pieces
    for k in range(pieces):
        value = scale * (1 - 2 * (k + 0.5) / pieces)
        drawer.SetColour(contribution_colour(value, scale))
        y = top + k * step
        drawer.DrawRect(Point2D(left, y), Point2D(left + width, y + step + 0.5), rawCoords=True)
    drawer.SetColour((0.0, 0.0, 0.0))
    drawer.SetFillPolys(False)
    drawer.DrawRect(Point2D(left, top), Point2D(left + width, bottom), rawCoords=True)
    drawer.SetFontSize(12)
    for value, y in ((scale, top), (0.0, (top + bottom) / 2), (-scale, bottom)):
        drawer.DrawString(f"{value:+.2g}", Point2D(left + width + 24, y), rawCoords=True)
    drawer.SetFontSize(11)
    for k, line in enumerate(label[:2]):
        drawer.DrawString(line, Point2D(left + BAR / 2 - 10, 12 + 14 * k), 0, rawCoords=True)


def bar_label(target: str | None) -> list[str]:
    """The colour bar's label: ``contribution`` and, given, ``to <target>`` (shortened to
    fit the bar's panel)."""
    if target is None:
        return [LABEL]
    return [LABEL, f"to {target if len(target) <= 12 else target[:11] + '…'}"]


def draw_contributions(
    smiles: str,
    values: np.ndarray,
    title: str,
    kind: str = "png",
    scale: float | None = None,
    label: Sequence[str] = (LABEL,),
    note: str | None = None,
) -> bytes | str:
    """One molecule with its atoms coloured by ``values`` ``[n]``, a labelled colour bar,
    ``title`` and ``note``.

    Args:
        smiles: the molecule (its RDKit atom order is that of ``values``).
        values: ``[n]`` one contribution per heavy atom.
        title: written above the molecule (e.g. its name and the prediction).
        kind: ``"png"`` (bytes) or ``"svg"`` (text).
        scale: the colour scale's end, ``|value|`` drawn at full colour (``None``: the
            molecule's largest ``|value|``); larger values are drawn at full colour.
        label: the colour bar's label, one or two lines (:func:`bar_label`).
        note: a line under the molecule (e.g. the atoms' sum and the descriptor term).

    Raises:
        TooLargeToDraw: beyond :data:`MAX_DRAW_ATOMS` heavy atoms.
    """
    mol = _mol(smiles)
    values = np.asarray(values, dtype=np.float64)
    if len(values) != mol.GetNumAtoms():
        raise ValueError(f"{len(values)} values for the {mol.GetNumAtoms()} atoms of {smiles!r}")
    width, height = SIZE
    cls = rdMolDraw2D.MolDraw2DCairo if kind == "png" else rdMolDraw2D.MolDraw2DSVG
    drawer = cls(width + BAR, height + (FOOTER if note else 0), width, height)
    opts = drawer.drawOptions()
    opts.legendFontSize = 16
    opts.legendFraction = 0.12
    opts.legendPosition = rdMolDraw2D.LegendPosition.Top
    scale = largest([values]) if scale is None else float(scale)
    atoms, colours, radii = _highlights(values, scale)
    drawer.DrawMolecule(
        mol,
        legend=title,
        highlightAtoms=atoms,
        highlightAtomColors=colours,
        highlightAtomRadii=radii,
        highlightBonds=[],
    )
    _colour_bar(drawer, width + 10, height, scale, label)
    if note:
        drawer.SetColour((0.0, 0.0, 0.0))
        drawer.SetFontSize(13)
        drawer.DrawString(note, Point2D(12, height + FOOTER / 2), 1, rawCoords=True)
    drawer.FinishDrawing()
    return drawer.GetDrawingText()


def draw_molecule(smiles: str, size: tuple[int, int] = (150, 110)) -> str:
    """An SVG of the molecule alone, ``size`` (width, height) pixels, without the XML
    declaration (so that it can sit inside an HTML page).

    Raises:
        ValueError: RDKit cannot parse ``smiles``.
        TooLargeToDraw: beyond :data:`MAX_DRAW_ATOMS` heavy atoms.
    """
    mol = _mol(smiles)
    drawer = rdMolDraw2D.MolDraw2DSVG(*size)
    drawer.drawOptions().clearBackground = False
    drawer.DrawMolecule(mol)
    drawer.FinishDrawing()
    text = drawer.GetDrawingText()
    return text[text.index("<svg") :]


def draw_grid(
    smiles: Sequence[str],
    values: Sequence[np.ndarray],
    titles: Sequence[str],
    per_row: int = 5,
    scale: float | None = None,
    label: Sequence[str] = (LABEL,),
) -> bytes:
    """A PNG grid of up to :data:`MAX_GRID` molecules, each coloured by its ``values`` ``[n]``
    on one common scale (``scale``, else the grid's largest ``|value|``) shown by a labelled
    colour bar beside the grid, titled ``titles``. Molecules too large to draw are left
    out."""
    kept = []
    for s, v, t in zip(smiles, values, titles, strict=True):
        try:
            kept.append((_mol(s), np.asarray(v, dtype=np.float64), t))
        except ValueError:
            continue
        if len(kept) == MAX_GRID:
            break
    if not kept:
        raise ValueError("no molecule to draw in the grid")
    scale = largest([v for _, v, _ in kept]) if scale is None else float(scale)
    cols = min(per_row, len(kept))
    rows = -(-len(kept) // cols)
    w, h = 300, 260
    # the bar's panel beside the panels (narrower than one, so it holds no molecule)
    drawer = rdMolDraw2D.MolDraw2DCairo(cols * w + BAR, max(rows * h, 260), w, h)
    drawer.drawOptions().legendFontSize = 14
    highlights = [_highlights(v, scale) for _, v, _ in kept]
    drawer.DrawMolecules(
        [m for m, _, _ in kept],
        legends=[t for _, _, t in kept],
        highlightAtoms=[a for a, _, _ in highlights],
        highlightAtomColors=[c for _, c, _ in highlights],
        highlightAtomRadii=[r for _, _, r in highlights],
        highlightBonds=[[] for _ in kept],
    )
    _colour_bar(drawer, cols * w + 10, max(rows * h, 260), scale, label)
    drawer.FinishDrawing()
    return drawer.GetDrawingText()
