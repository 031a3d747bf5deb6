"""Starting the server: where it listens, the token off localhost, uvicorn.

A server listens on 127.0.0.1 unless told otherwise; any other address needs a token
(``token``, or the environment variable :data:`TOKEN_ENV`), which every request must then
carry. ``uvicorn`` runs the application in this process, one event loop; the model's work
runs in the batcher's threads and featurising processes (:mod:`.batcher`).
"""

from __future__ import annotations

import gc
import ipaddress
import logging
import os

from .app import create_app
from .service import ModelService

__all__ = ["LOOPBACK", "TOKEN_ENV", "check_host", "freeze_start_up", "run_server"]

log = logging.getLogger(__name__)

TOKEN_ENV = "GRAPHORMER_URPE_TOKEN"
"""The environment variable that holds the token when ``--token`` is not given."""

LOOPBACK = ("localhost",)
"""Host names (besides loopback addresses) that need no token."""


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name other than localhost
        return False


def check_host(host: str, token: str | None) -> str | None:
    """The token the server checks (``token``, else :data:`TOKEN_ENV`'s value; ``None``:
    none), after refusing to listen off localhost without one.

    Raises:
        ValueError: ``host`` is not a loopback address and there is no token.
    """
    token = token or os.environ.get(TOKEN_ENV) or None
    if token is None and not _is_loopback(host):
        raise ValueError(
            f"--host {host} makes the server reachable from other machines: give a token "
            f"(--token, or the environment variable {TOKEN_ENV}) that every request must carry"
        )
    if token is not None and len(token) < 16:
        raise ValueError("the token must be at least 16 characters long")
    return token


def run_server(
    service: ModelService, host: str = "127.0.0.1", port: int = 8000, token: str | None = None
) -> None:
    """Serve ``service`` on ``host:port`` until interrupted (then stop its batcher).

    Raises:
        ValueError: see :func:`check_host`.
    """
    import uvicorn

    token = check_host(host, token)
    app = create_app(service, token)
    freeze_start_up()
    where = f"http://{host}:{port}/"
    log.info("serving %s on %s%s", service.checkpoint, where, " (token needed)" if token else "")
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        service.close()


def freeze_start_up() -> None:
    """Keep the objects made at start-up (the model, the libraries' modules, the application)
    out of Python's garbage collection from now on.

    They are never freed, but a full collection walks them all, holding the interpreter
    (every thread of the server) meanwhile; after the freeze it walks only what requests made
    (measured: docs/results/serve.md).
    """
    gc.collect()
    gc.freeze()
