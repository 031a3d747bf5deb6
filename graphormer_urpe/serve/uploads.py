"""An uploaded file's molecules: read with ``predict``'s own readers from a private temporary
copy, never from a path the request names.

The upload's name gives only its kind (its suffix: ``.csv``, ``.smi``, ``.txt``, ``.sdf``,
``.sd``, ``.mol``); compressed files are refused (their size on arrival says nothing of
their size unpacked). The bytes are written to a file of the server's choosing in a fresh
temporary folder, read by :func:`~graphormer_urpe.inference.engines.predict_io.read_input_rows`
(rows past the limit are not read), and deleted.
"""

from __future__ import annotations

import tempfile
from pathlib import Path, PurePath
from typing import NamedTuple

from ..inference.engines.predict_io import read_input_rows
from .limits import LimitExceeded

__all__ = ["UPLOAD_SUFFIXES", "UploadRows", "read_upload"]

UPLOAD_SUFFIXES = (".csv", ".smi", ".txt", ".sdf", ".sd", ".mol")
"""The kinds of file an upload may be (by its name's suffix)."""


class UploadRows(NamedTuple):
    """An upload's rows: ``smiles``, their ``names`` (``None``: a CSV, which has none) and
    each row's own ``errors`` (an SD record RDKit cannot read)."""

    smiles: list[str]
    names: list[str | None] | None
    errors: list[str | None]


def read_upload(
    filename: str | None, data: bytes, smiles_column: str, max_molecules: int
) -> UploadRows:
    """The rows of an uploaded file (see the module's text).

    Raises:
        LimitExceeded: 415 a kind of file that is not read; 422 a file that cannot be read
            (no such column, not UTF-8 text); 413 more rows than ``max_molecules``.
    """
    shown = PurePath(filename or "upload").name or "upload"
    suffix = PurePath(shown).suffix.lower()
    if suffix not in UPLOAD_SUFFIXES:
        raise LimitExceeded(
            415,
            f"{shown}: cannot read this kind of file; upload one of "
            f"{', '.join(UPLOAD_SUFFIXES)} (uncompressed)",
        )
    smiles: list[str] = []
    names: list[str | None] = []
    errors: list[str | None] = []
    with tempfile.TemporaryDirectory(prefix="graphormer-urpe-upload-") as folder:
        path = Path(folder) / f"upload{suffix}"
        path.write_bytes(data)
        try:
            for smi, name, error in read_input_rows(path, smiles_column):
                if len(smiles) == max_molecules:
                    raise LimitExceeded(
                        413,
                        f"{shown} holds more than {max_molecules} molecules, this server's "
                        "limit per request (split it into several files)",
                    )
                smiles.append(smi)
                names.append(name)
                errors.append(error)
        except UnicodeDecodeError:
            raise LimitExceeded(422, f"{shown} is not UTF-8 text") from None
        except ValueError as exc:  # the reader's message, naming the upload, not the copy
            raise LimitExceeded(422, str(exc).replace(str(path), shown)) from None
    if not smiles:
        raise LimitExceeded(422, f"{shown} holds no molecules")
    has_names = names[0] is not None
    return UploadRows(smiles, names if has_names else None, errors)
