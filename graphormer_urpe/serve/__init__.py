"""A trained model over HTTP: a JSON API, its OpenAPI schema and a web page
(``graphormer-urpe serve``; ``pip install 'graphormer-urpe[serve]'``).

It sits above every other layer but the command line, and nothing else in the package
imports it, so the rest needs none of its dependencies (FastAPI, uvicorn). Prediction,
intervals, domain checks and explanations are those of :mod:`graphormer_urpe.inference`;
this package adds the batching of concurrent requests (:mod:`.batcher`) with its featurising
processes (:mod:`.worker`), the limits of a
request (:mod:`.limits`), uploads (:mod:`.uploads`), the routes (:mod:`.app`), the page
(:mod:`.page`) and the server (:mod:`.server`).

Example::

    from graphormer_urpe.serve import ModelService, create_app

    service = ModelService.load("runs/esol/best.pt")
    app = create_app(service)          # an ASGI application: uvicorn, or a test client
"""

from ..utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".app": ["create_app"],
        ".limits": ["LimitExceeded", "ServeLimits"],
        ".service": ["ModelService", "PredictionTable"],
        ".server": ["run_server", "check_host"],
    },
)
