"""Old attribute names that still resolve, with a ``DeprecationWarning``, for one release."""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["renamed_attribute"]


def renamed_attribute(owner: str, old: str, new: str) -> property:
    """A read-only property for the old name ``old`` of attribute ``new`` of class ``owner``.

    Reading it warns (``DeprecationWarning``, pointing at the caller) and returns ``new``'s
    value; the name goes in the next minor release.

    Example::

        class Store:
            cache_dir = renamed_attribute("Store", "cache_dir", "folder")
    """

    def read(self: Any) -> Any:
        warnings.warn(
            f"{owner}.{old} is deprecated: use {owner}.{new}", DeprecationWarning, stacklevel=2
        )
        return getattr(self, new)

    read.__name__ = old
    read.__doc__ = f"Deprecated: :attr:`{new}` (the name goes in the next minor release)."
    return property(read)
