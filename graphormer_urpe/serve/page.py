"""The web page at ``/``: server-rendered HTML, one small script, nothing from the internet.

The form takes pasted SMILES (one a line; a name may follow) or a file (``.csv``, ``.smi``,
``.sdf``, ...) and an interval level; the answer is the same page with a table of the rows
``predict`` would write, each molecule drawn (the first :data:`DRAWN` rows), its interval and a
flag for molecules out of the training domain. ``page.js`` sorts the table by a column and,
when a row is clicked, asks ``/explain`` for its atom picture. The table downloads as
``predict``'s CSV (a ``data:`` link: no second request).
"""

from __future__ import annotations

import csv
import io
from functools import cache
from html import escape
from importlib import resources
from typing import Any
from urllib.parse import quote

from .service import PredictionTable

__all__ = ["DRAWN", "page_html", "static_file"]

DRAWN = 200
"""Rows whose molecule the table draws (the rest say so): pictures are most of a page's
weight."""


@cache
def static_file(name: str) -> str:
    """The text of ``serve/static/<name>`` (shipped inside the package)."""
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def _thumbnail(smiles: str) -> str:
    from ..inference.explain.drawing import draw_molecule

    try:
        return draw_molecule(smiles)
    except ValueError as exc:  # not parsed, or too large to draw
        return f"<span title='{escape(str(exc))}'>not drawn</span>"


def _number(v: Any) -> str:
    return "" if v is None else f"{v:.4g}"


def _table(table: PredictionTable) -> str:
    """The results table and its CSV download link."""
    layout = table.layout
    targets = [("prob_" + n) if layout.binary else n for n in layout.target_names]
    interval = layout.level is not None
    head = ["#", "molecule", "SMILES", *(["name"] if layout.names else [])]
    for t in targets:
        head.append(t)
        if layout.std:
            head.append(f"{t} std")
        if interval:
            head.append(f"{t} {layout.level:.0%} interval")
    head += ["domain", "nearest similarity", "error"]
    nosort = {"molecule"}
    ths = "".join(
        f"<th{' class=nosort' if h in nosort else ''} scope=col>{escape(h)}</th>" for h in head
    )
    rows = []
    for k, rec in enumerate(table.records()):
        smi = rec["smiles"]
        failed = rec["error"] is not None
        cells = [f"<td class=num data-sort='{k}'>{k + 1}</td>"]
        if failed or k >= DRAWN:
            why = "" if failed else "not drawn (only the first rows are)"
            cells.append(f"<td>{escape(why)}</td>")
        else:
            cells.append(f"<td>{_thumbnail(smi)}</td>")
        cells.append(f"<td><code>{escape(smi)}</code></td>")
        if layout.names:
            cells.append(f"<td>{escape(rec.get('name') or '')}</td>")
        for t in targets:
            v = rec[t]
            cells.append(f"<td class=num data-sort='{'' if v is None else v}'>{_number(v)}</td>")
            if layout.std:
                s = rec[f"{t}_std"]
                cells.append(
                    f"<td class=num data-sort='{'' if s is None else s}'>{_number(s)}</td>"
                )
            if interval:
                lo, hi = rec[f"{t}_low"], rec[f"{t}_high"]
                text = "" if lo is None else f"{_number(lo)} – {_number(hi)}"
                width = "" if lo is None else hi - lo
                cells.append(f"<td class=num data-sort='{width}'>{text}</td>")
        domain = rec["domain"] or ""
        if domain.startswith("out"):
            flag = f"<span class=out title='{escape(domain)}'>out of domain</span>"
            cells.append(f"<td data-sort='out'>{flag}<br><small>{escape(domain[5:])}</small></td>")
        else:
            cells.append(f"<td data-sort='{escape(domain)}' class=in>{escape(domain)}</td>")
        sim = rec["nearest_similarity"]
        cells.append(f"<td class=num data-sort='{'' if sim is None else sim}'>{_number(sim)}</td>")
        cells.append(f"<td>{escape(rec['error'] or '')}</td>")
        cls = " class=failed" if failed else ""
        rows.append(f"<tr{cls} data-smiles='{escape(smi)}'>{''.join(cells)}</tr>")
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(table.csv_rows())
    href = "data:text/csv;charset=utf-8," + quote(text.getvalue())
    failed = sum(r.values is None for r in table.predictions)
    outside = sum(r.domain is not None and not r.domain.in_domain for r in table.predictions)
    summary = (
        f"{len(table.predictions)} rows: {len(table.predictions) - failed} predicted, "
        f"{failed} could not be read, {outside} out of the training domain"
    )
    return (
        f"<p id=summary>{summary}. "
        f"<a id=download download='predictions.csv' href='{href}'>Download CSV</a> · "
        "click a column to sort, a row for its atom contributions</p>"
        "<div class=layout>"
        f"<table id=results><thead><tr>{ths}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "<div id=picture>click a row to see which atoms drive its prediction</div></div>"
    )


def page_html(
    model: dict[str, Any],
    table: PredictionTable | None = None,
    error: str | None = None,
    smiles_text: str = "",
    level: float | None = None,
) -> str:
    """The page: the form (filled with what was sent), then the results or the error.

    Args:
        model: ``GET /model``'s description.
        table: the results, or ``None``.
        error: why the request was refused, or ``None``.
        smiles_text: the SMILES the form held.
        level: the interval level the form held.
    """
    targets = ", ".join(
        t["name"] + (f" ({t['unit']})" if t.get("unit") else "") for t in model["targets"]
    )
    train = model.get("training_molecules")
    about = f"{model['task_type']} of {escape(targets)}"
    if train:
        about += f", trained on {train:,} molecules"
    if model.get("ensemble_members", 1) > 1:
        about += f", an ensemble of {model['ensemble_members']}"
    level_field = ""
    if model.get("intervals"):
        value = "" if level is None else f"{level:g}"
        level_field = (
            "<label>Interval level (empty: none) <input name=level type=number step=0.01 "
            f"min=0.01 max=0.99 value='{value}'></label>"
        )
    limit = model["limits"]["max_molecules"]
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        "<meta name=viewport content='width=device-width, initial-scale=1'>",
        "<title>graphormer-urpe</title><link rel=stylesheet href='page.css'></head><body>",
        f"<header><h1>graphormer-urpe</h1><p>{escape(model['checkpoint'])}: {about}</p></header>",
        "<form method=post action='./' enctype='multipart/form-data'>",
        f"<label for=smiles>SMILES, one a line (at most {limit:,})</label>",
        f"<textarea id=smiles name=smiles rows=6>{escape(smiles_text)}</textarea>",
        "<div class=drop><label>or drop a file here (.csv with a smiles column, .smi, .sdf) "
        "<input id=file name=file type=file accept='.csv,.smi,.txt,.sdf,.sd,.mol'></label></div>",
        level_field,
        "<button id=predict type=submit>Predict</button></form>",
    ]
    if error is not None:
        parts.append(f"<p class=error id=error>{escape(error)}</p>")
    if table is not None:
        parts.append(_table(table))
    parts.append("<script src='page.js'></script></body></html>")
    return "".join(parts)
