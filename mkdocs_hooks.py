"""MkDocs hook: the command-line reference, generated from the parsers.

``docs/reference/cli.md`` holds the marker ``<!-- cli-help -->``; at build time it is replaced
by the ``--help`` of ``graphormer-urpe`` and of every sub-command (nested ones included), as
``graphormer_urpe.cli.build_parser`` prints them, so the page cannot drift from the code. The
width is fixed (``COLUMNS``) so the output does not depend on the terminal that builds it.
"""

from __future__ import annotations

import argparse
import os

MARKER = "<!-- cli-help -->"
WIDTH = "100"


def _commands(
    parser: argparse.ArgumentParser, words: list[str]
) -> list[tuple[list[str], argparse.ArgumentParser]]:
    """The parser and every sub-parser below it, depth first, with the words that reach it."""
    found = [(words, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, [*words, name])
    return found


def cli_reference() -> str:
    """The Markdown of every command's ``--help``."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse wraps help text to this width
    try:
        from graphormer_urpe.cli import build_parser

        parts = []
        for words, parser in _commands(build_parser(), ["graphormer-urpe"]):
            command = " ".join(words)
            parts.append(f"## `{command}`\n\n```text\n{parser.format_help().rstrip()}\n```\n")
        return "\n".join(parts)
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001
    """Put the generated reference where the page asks for it."""
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown
