"""Lazy re-exports for the package's ``__init__`` modules (PEP 562).

A package lists its public names and the submodule defining each; :func:`lazy_exports` gives
the package a module ``__getattr__`` that imports a name's submodule on first use (and keeps
the value, so later look-ups are plain attribute reads), a ``__dir__`` that lists them, and the
``__all__`` of the names, in the order given.
``import graphormer_urpe`` then costs nothing, and the command line imports torch only when
a command needs it. A name that is not exported but is a submodule (``graphormer_urpe.graph``,
``graphormer_urpe.training.loop``) is imported as such, as attribute access did when the
package imported its submodules eagerly.

This module imports nothing heavy; it sits below every other module of the package.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str,
    exports: Mapping[str, Iterable[str]],
    renamed: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """The module ``__getattr__``, ``__dir__`` and ``__all__`` of a package with lazy public
    names.

    Args:
        package: the package's ``__name__``.
        exports: submodule (relative, e.g. ``".graph.model"``) → the names it defines that the
            package re-exports.
        renamed: old public name → its new name (one of ``exports``): the old one still
            resolves, with a ``DeprecationWarning``, until the next minor release; it is not
            listed in ``__all__``.

    Returns:
        ``(__getattr__, __dir__, __all__)``, to bind at the package's module level.

    Example::

        __getattr__, __dir__, __all__ = lazy_exports(__name__, {".model": ["Graphormer"]})
    """
    where = {name: module for module, names in exports.items() for name in names}
    previous = dict(renamed or {})

    def __getattr__(name: str) -> Any:
        if name in previous:
            new = previous[name]
            warnings.warn(
                f"{package}.{name} is deprecated: use {package}.{new} (the old name goes in the "
                "next minor release)",
                DeprecationWarning,
                stacklevel=2,
            )
            return __getattr__(new)
        namespace = sys.modules[package].__dict__
        module = where.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module, package), name)
            namespace[name] = value
            return value
        if not name.startswith("__"):
            full = f"{package}.{name}"
            try:
                return importlib.import_module(full)  # binds the package's attribute too
            except ModuleNotFoundError as exc:
                if exc.name != full:  # the submodule exists but something it imports does not
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(sys.modules[package].__dict__) | set(where))

    return __getattr__, __dir__, list(where)
