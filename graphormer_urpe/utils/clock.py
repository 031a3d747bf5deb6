"""The moment this package began importing (``time.perf_counter()``).

Imported first by the package, before torch and RDKit, so that a command's ``--time-limit``
counts from the command's start, import time included (:func:`graphormer_urpe.cli.main`).
"""

import time

IMPORTED_AT: float = time.perf_counter()
