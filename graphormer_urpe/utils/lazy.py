"""Lazy re-exports for the package's ``__init__`` modules (PEP 562).

A package lists its public names and the submodule defining each; :func:`lazy_exports` gives
the package a module ``__getattr__`` that imports a name's submodule on first use (and keeps
the value, so later look-ups are plain attribute reads), a ``__dir__`` that lists them, and the
``__all__`` of the names, in the order given.
``import graphormer_urpe`` then costs nothing, and the command line imports torch only when
a command needs it. A name that is not exported but is a submodule (``graphormer_urpe.graph``,
``graphormer_urpe.training.run``) is imported as such, as attribute access did when the
package imported its submodules eagerly.

A module that was renamed keeps its old path for one release (:func:`moved_modules`): the
old path imports as a stand-in module whose names resolve to the new module's, with a
``DeprecationWarning``, and no file of the old name stays in the tree.

This module imports nothing heavy; it sits below every other module of the package.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

__all__ = ["lazy_exports", "moved_modules"]


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


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The import hook behind :func:`moved_modules`: it answers only for the old paths it was
    given, and only once the ordinary finders found no module there (it is last on
    ``sys.meta_path``)."""

    def __init__(self) -> None:
        self.new: dict[str, str] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.new:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a plain module

    def exec_module(self, module: ModuleType) -> None:
        old, new = module.__name__, self.new[module.__name__]
        module.__doc__ = (
            f"Deprecated: {old} is now {new} (the old path goes in the next minor release)."
        )

        def __getattr__(name: str) -> Any:
            if name == "__all__":  # `from old import *` then warns for each name it takes
                target = importlib.import_module(new)
                return getattr(target, "__all__", [n for n in vars(target) if n[0] != "_"])
            if name.startswith("__"):
                raise AttributeError(f"module {old!r} has no attribute {name!r}")
            warnings.warn(
                f"{old} is deprecated: import {name} from {new} (the old path goes in the next "
                "minor release)",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(new), name)

        def __dir__() -> list[str]:
            return dir(importlib.import_module(new))

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        module.__dir__ = __dir__  # type: ignore[method-assign]


_MOVED = _MovedModules()


def moved_modules(package: str, renamed: Mapping[str, str]) -> None:
    """Keep the old paths of a package's renamed submodules importable for one release.

    ``import package.old`` (and ``from package.old import name``) then gives a stand-in module
    whose every name is looked up in ``package.new`` on use, with a ``DeprecationWarning``
    that names the new path. The new module is imported only when a name is used.

    Args:
        package: the package's ``__name__``; call this from its ``__init__``.
        renamed: old submodule name → new submodule name, both relative to ``package``
            (``{"config": "train_config"}``).

    Example::

        moved_modules(__name__, {"config": "train_config"})
    """
    _MOVED.new.update({f"{package}.{old}": f"{package}.{new}" for old, new in renamed.items()})
    if _MOVED not in sys.meta_path:
        sys.meta_path.append(_MOVED)
