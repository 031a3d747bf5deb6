"""Small helpers every layer of the package may use, importing nothing heavy.

* :mod:`.clock`: the moment the package was imported (``--time-limit`` counts from it);
* :mod:`.lazy`: the lazy public names of the packages' ``__init__`` modules (PEP 562);
* :mod:`.deprecation`: old attribute names that still resolve, with a warning;
* :mod:`.compiler`: running a function eagerly inside compiled code, without importing the
  compiler until it is needed.
"""
