"""The ``graphormer-urpe`` command: a thin layer over the library.

Every sub-command parses its flags into the library's config objects and calls library
functions; errors reach the user as one line (``graphormer-urpe: error: ...``) and exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import NoReturn

from ..utils.clock import IMPORTED_AT  # the command's start: --time-limit counts from it
from .calibrate import add_calibrate_command, run_calibrate
from .explain import add_explain_command, run_explain
from .predict import (
    add_evaluate_command,
    add_predict_command,
    add_submit_command,
    run_evaluate,
    run_predict,
    run_submit,
)
from .serve import add_serve_command, run_serve
from .tools import (
    add_convert_command,
    add_demo_command,
    add_export_command,
    add_lm_command,
    add_plot_command,
    add_preprocess_command,
    add_synthetic_command,
    run_convert,
    run_demo,
    run_export,
    run_plot,
    run_preprocess,
)
from .train import add_pretrain_command, add_train_command, run_pretrain, run_train, train_config
from .tune import add_tune_command, run_tune

__all__ = [  # the sub-commands are in train, tune, predict and tools; their flags in flags
    "IMPORTED_AT",
    "build_parser",
    "main",
    "run_calibrate",
    "run_convert",
    "run_demo",
    "run_evaluate",
    "run_explain",
    "run_export",
    "run_plot",
    "run_predict",
    "run_preprocess",
    "run_pretrain",
    "run_serve",
    "run_submit",
    "run_train",
    "run_tune",
    "train_config",
]


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (one sub-parser per command)."""
    parser = argparse.ArgumentParser(
        prog="graphormer-urpe",
        description="Graphormer and Universal RPE attention for molecular property prediction.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return parser


_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_train_command,
    add_pretrain_command,
    add_tune_command,
    add_evaluate_command,
    add_predict_command,
    add_explain_command,
    add_calibrate_command,
    add_serve_command,
    add_plot_command,
    add_synthetic_command,
    add_lm_command,
    add_demo_command,
    add_preprocess_command,
    add_submit_command,
    add_convert_command,
    add_export_command,
]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``graphormer-urpe`` console script (``argv`` None: this process is
    the command, and a command that holds nothing open ends it at once, see
    :func:`_exit_now`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # this process is the command (argv None): its start is the package's import, else now
    args.started = IMPORTED_AT if argv is None else time.perf_counter()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
    )
    with warnings.catch_warnings():  # the command's own filters; the library sets none
        hide_dependency_warnings()
        code = _run(args)
    if argv is None and getattr(args, "exit_at_once", False):
        _exit_now(code)
    return code


DEPENDENCY_WARNINGS = (r".*`?torch\.jit\.script`? is deprecated",)
"""Messages of dependencies' warnings that the command hides: PyTorch Geometric scripts a few
functions with ``torch.jit.script`` when imported, which newer torch versions deprecate
(a ``FutureWarning`` / ``DeprecationWarning`` a user can do nothing about)."""


def hide_dependency_warnings() -> None:
    """Ignore :data:`DEPENDENCY_WARNINGS` (the command line only: a program that imports the
    library keeps every warning)."""
    for message in DEPENDENCY_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; its exit status, with one line on standard error for a
    failure (``--verbose``: the traceback) or an interruption."""
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGINT during training (saved)
        print(f"graphormer-urpe: {str(exc) or 'interrupted'}", file=sys.stderr)
        return 128 + int(getattr(exc, "signum", signal.SIGINT))
    except Exception as exc:  # one line for the user; --verbose shows the traceback
        if args.verbose:
            raise
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        text = str(msg).strip().splitlines()[0] if str(msg).strip() else type(exc).__name__
        if not isinstance(exc, (ValueError, KeyError, OSError, RuntimeError)):
            text = f"{type(exc).__name__}: {text} (run with --verbose for the traceback)"
        print(f"graphormer-urpe: error: {text}", file=sys.stderr)
        return 2


def _exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once its output is flushed, without Python's teardown.

    A process that imported torch spends about a second ending on a 2-core machine
    (finalisers of torch's operator libraries, the collection of every object): a third of
    a one-molecule ``predict``. Commands that leave nothing open (``predict``: its file is
    closed and its featurising processes stopped when it returns) skip it.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (| head) or stream: nothing to add
            pass
    os._exit(code)
