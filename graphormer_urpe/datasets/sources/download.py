"""Dataset downloads: one HTTP GET streamed into a file, with a progress bar, and the error
of a dataset whose files are neither there nor downloadable.

The callers (:mod:`.zinc`, :mod:`.pcqm_files`, :mod:`.ogbg_mol`) unpack what arrives and turn
network errors into a :class:`DatasetUnavailableError` that says where to put the files by hand.
"""

from __future__ import annotations

import os
import urllib.request

from tqdm.auto import tqdm

__all__ = ["DatasetUnavailableError", "download_file"]

_BLOCK = 1 << 20  # bytes read and written at a time


class DatasetUnavailableError(FileNotFoundError):
    """A dataset's files are missing and could not be downloaded."""


def download_file(
    url: str,
    dest: str | os.PathLike[str] | int,
    *,
    timeout: float,
    desc: str,
    progress: bool = True,
) -> None:
    """Stream ``url`` into ``dest`` (a path, or a descriptor open for writing, which is closed).

    Args:
        url: what to fetch.
        dest: the file written (created or truncated).
        timeout: socket timeout in seconds.
        desc: the progress bar's label.
        progress: show the progress bar (sized by ``Content-Length`` when the server sends it).

    Raises:
        OSError, http.client.HTTPException: the network or the file failed.
    """
    with open(dest, "wb") as fh, urllib.request.urlopen(url, timeout=timeout) as resp:
        total = int(resp.headers.get("Content-Length") or 0) or None
        with tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=not progress) as bar:
            for block in iter(lambda: resp.read(_BLOCK), b""):
                fh.write(block)
                bar.update(len(block))
