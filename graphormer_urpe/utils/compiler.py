"""``torch.compiler.disable`` without importing ``torch._dynamo`` until something compiles.

``@torch.compiler.disable`` imports ``torch._dynamo`` (seconds; measured:
docs/results/code-notes.md) when the decorated module is imported, so every program that only runs
the model eagerly (``graphormer-urpe predict``) paid for the compiler. :func:`compiler_disable`
marks the function at import time and wraps it in ``torch.compiler.disable`` on the first call made
after ``torch._dynamo`` was imported (``torch.compile`` imports it before it traces anything):
before that no frame can be compiled, so the function simply runs.

This module imports nothing heavy; it sits below every other module of the package.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["compiler_disable"]

_F = TypeVar("_F", bound=Callable[..., Any])


def compiler_disable(fn: _F) -> _F:
    """Decorator: ``fn`` runs eagerly, never traced by ``torch.compile`` (as with
    ``@torch.compiler.disable``), without importing ``torch._dynamo`` when it is applied.

    A compiled caller graph-breaks on the call (the wrapper carries the attribute by which
    Dynamo recognises a disabled function) and the wrapper then calls
    ``torch.compiler.disable(fn)``, built once; while ``torch._dynamo`` has not been imported,
    nothing is being compiled and ``fn`` is called directly.
    """
    disabled: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" not in sys.modules:  # no compiler loaded: nothing is compiling
            return fn(*args, **kwargs)
        if not disabled:
            import torch

            disabled.append(torch.compiler.disable(fn))
        return disabled[0](*args, **kwargs)

    # Dynamo reads this attribute to call a function instead of tracing into it
    call._torchdynamo_disable = True  # type: ignore[attr-defined]
    return cast(_F, call)
