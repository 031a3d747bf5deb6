"""Pictures of explanations, drawn with RDKit: atoms coloured by contribution, a colour bar,
the prediction in the title; and a grid of many molecules.

Colours run from blue (negative) through white (0) to red (positive), on a scale symmetric
about 0 set by the largest ``|contribution|`` of the molecule (of the grid, for a grid).
Molecules of more than :data:`MAX_DRAW_ATOMS` heavy atoms are not drawn
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
    "contribution_colour",
    "draw_contributions",
    "draw_grid",
    "draw_molecule",
]

MAX_DRAW_ATOMS = 100
"""The most heavy atoms drawn in one picture."""

MAX_GRID = 50
"""The most molecules in one grid image."""

SIZE = (420, 360)
"""Width and height of the molecule's panel, in pixels; the colour bar is beside it."""

BAR = 90
"""Width of the colour bar's panel, in pixels."""


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


def _colour_bar(drawer: rdMolDraw2D.MolDraw2D, left: int, height: int, scale: float) -> None:
    """A vertical blue-white-red bar from ``-scale`` (bottom) to ``scale`` (top)."""
    top, bottom, width, pieces = 40, height - 40, 22, 60
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


def draw_contributions(
    smiles: str, values: np.ndarray, title: str, kind: str = "png"
) -> bytes | str:
    """One molecule with its atoms coloured by ``values`` ``[n]``, a colour bar and ``title``.

    Args:
        smiles: the molecule (its RDKit atom order is that of ``values``).
        values: ``[n]`` one contribution per heavy atom.
        title: written above the molecule (e.g. the prediction).
        kind: ``"png"`` (bytes) or ``"svg"`` (text).

    Raises:
        TooLargeToDraw: beyond :data:`MAX_DRAW_ATOMS` heavy atoms.
    """
    mol = _mol(smiles)
    values = np.asarray(values, dtype=np.float64)
    if len(values) != mol.GetNumAtoms():
        raise ValueError(f"{len(values)} values for the {mol.GetNumAtoms()} atoms of {smiles!r}")
    width, height = SIZE
    cls = rdMolDraw2D.MolDraw2DCairo if kind == "png" else rdMolDraw2D.MolDraw2DSVG
    drawer = cls(width + BAR, height, width, height)
    opts = drawer.drawOptions()
    opts.legendFontSize = 16
    opts.legendFraction = 0.12
    opts.legendPosition = rdMolDraw2D.LegendPosition.Top
    scale = float(np.abs(values).max()) if len(values) else 0.0
    atoms, colours, radii = _highlights(values, scale)
    drawer.DrawMolecule(
        mol,
        legend=title,
        highlightAtoms=atoms,
        highlightAtomColors=colours,
        highlightAtomRadii=radii,
        highlightBonds=[],
    )
    _colour_bar(drawer, width + 10, height, scale)
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
    smiles: Sequence[str], values: Sequence[np.ndarray], titles: Sequence[str], per_row: int = 5
) -> bytes:
    """A PNG grid of up to :data:`MAX_GRID` molecules, each coloured by its ``values`` ``[n]``
    on one common scale, titled ``titles``. Molecules too large to draw are left out."""
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
    scale = max(float(np.abs(v).max()) if len(v) else 0.0 for _, v, _ in kept)
    cols = min(per_row, len(kept))
    rows = -(-len(kept) // cols)
    w, h = 300, 260
    drawer = rdMolDraw2D.MolDraw2DCairo(cols * w, rows * h, w, h)
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
    drawer.FinishDrawing()
    return drawer.GetDrawingText()
