"""The ``serve`` sub-command: a trained model behind a local HTTP server (the ``serve``
extra: FastAPI and uvicorn, imported only when the command runs)."""

from __future__ import annotations

import argparse

from .flags import add_command, add_shared_flags, positive_float, positive_int


def run_serve(args: argparse.Namespace) -> int:
    """serve a trained model over HTTP: a JSON API and a web page

    Start one local server for a checkpoint or an ensemble's folder: POST /predict (SMILES,
    or a .csv / .smi / .sdf upload at /predict/upload) gives predict's rows (prediction,
    interval at a level asked for, std, domain, nearest_similarity, error); POST /explain the
    atom contributions and the picture (SVG); GET /model describes the model; /openapi.json
    is the schema; / is a web page for people. Requests that arrive together share one
    forward pass. Listens on 127.0.0.1 unless --host says otherwise; any other host needs a
    token (--token or GRAPHORMER_URPE_TOKEN), checked on every request. Needs pip install
    'graphormer-urpe[serve]'."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            f"serve needs the serve extra ({exc.name} is missing): "
            "pip install 'graphormer-urpe[serve]'"
        ) from None
    from ..serve.limits import ServeLimits
    from ..serve.server import check_host, run_server
    from ..serve.service import ModelService

    token = check_host(args.host, args.token)  # refused before the model loads
    limits = ServeLimits(
        max_molecules=args.max_molecules,
        max_explain=args.max_explain,
        max_upload_bytes=int(args.max_upload_mb * 2**20),
        max_atoms=args.max_atoms,
        request_seconds=args.request_seconds,
    )
    units = dict(_unit(u) for u in args.unit or [])
    service = ModelService.load(
        args.checkpoint,
        limits=limits,
        device=args.device or "auto",
        workers=args.workers,
        threads=args.threads,
        batch_size=args.batch_size,
        units=units,
    )
    run_server(service, args.host, args.port, token)
    return 0


def _unit(text: str) -> tuple[str, str]:
    name, sep, unit = text.partition("=")
    if not sep or not name or not unit:
        raise ValueError(f"--unit takes TARGET=UNIT (e.g. logS=log(mol/L)), got {text!r}")
    return name, unit


def add_serve_command(sub: argparse._SubParsersAction) -> None:
    """Add ``graphormer-urpe serve`` and its flags to the sub-commands ``sub``."""
    p = add_command(sub, "serve", run_serve)
    help = "a best.pt or last.pt file, or the folder of a train --ensemble run"
    add_shared_flags(p, "--checkpoint", checkpoint={"help": help})
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; any other needs a token)",
    )
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument(
        "--token",
        help="a secret of at least 16 characters every request must carry (Authorization: "
        "Bearer TOKEN; a browser opens /?token=TOKEN once); default: GRAPHORMER_URPE_TOKEN",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="featurisation processes (default 1; 0: in the server's threads)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        help="CPU threads for the model (default: the cores left after --workers, at least 1)",
    )
    p.add_argument(
        "--batch-size", type=positive_int, default=256, help="molecules per forward pass"
    )
    p.add_argument(
        "--max-molecules",
        type=positive_int,
        default=1000,
        help="molecules per request (default 1000; more: 413)",
    )
    p.add_argument(
        "--max-explain",
        type=positive_int,
        default=10,
        help="molecules per /explain request (default 10; more: 413)",
    )
    p.add_argument(
        "--max-upload-mb",
        type=positive_float,
        default=10.0,
        help="MiB per request body or upload (default 10; more: 413)",
    )
    p.add_argument(
        "--max-atoms",
        type=positive_int,
        default=200,
        help="heavy atoms per molecule (default 200; more: 422)",
    )
    p.add_argument(
        "--request-seconds",
        type=positive_float,
        default=30.0,
        help="the longest a request may take (default 30; longer: 408)",
    )
    p.add_argument(
        "--unit",
        action="append",
        metavar="TARGET=UNIT",
        help="the unit of a target, shown by GET /model and the page (repeat per target)",
    )
    add_shared_flags(p, "--device")
