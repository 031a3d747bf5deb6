"""``python -m graphormer_urpe.cli``: the ``graphormer-urpe`` command."""

import sys

from . import main

sys.exit(main())
