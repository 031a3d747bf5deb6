"""Files the library writes and reads: atomic writes (:mod:`.files`), checkpoints
(:mod:`.checkpoint`) and checkpoints split into parts of bounded size (:mod:`.parts`).

The lowest layer: it imports nothing from the rest of the library, and everything above it
(``attention``, ``encoder``, ``graph``, ``datasets``, ``training``, ``sequence``, ``cli``) may
import it.
"""

from .files import atomic_write_with, torch_load_problem, write_atomic

__all__ = ["atomic_write_with", "write_atomic", "torch_load_problem"]
