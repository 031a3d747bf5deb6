"""The HTTP application (FastAPI): the JSON API, its OpenAPI schema and the web page.

Routes:

* ``POST /predict``: ``{"smiles": [...], "level": 0.9}`` → ``predict``'s rows and columns
  (``?format=csv``: its CSV);
* ``POST /predict/upload``: a file (multipart ``file``; ``level``, ``smiles_column``) →
  the same;
* ``POST /explain``: ``{"smiles": [...]}`` → atom contributions and the picture (SVG);
* ``GET /model``: what the model predicts, its training data, metrics and calibration;
* ``GET /openapi.json``: the schema, with examples; ``GET /`` and ``POST /``: the page.

:class:`Guard` wraps every route: a token where one is set (``Authorization: Bearer``, or
the cookie ``/?token=...`` sets for a browser) and the body limit, before any parsing.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import secrets
from http.cookies import SimpleCookie
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, urlencode

from fastapi import FastAPI, File, Form, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from .limits import LimitExceeded
from .page import page_html, static_file
from .service import ModelService, PredictionTable
from .uploads import read_upload

__all__ = ["COOKIE", "Guard", "create_app"]

COOKIE = "graphormer_urpe_token"
"""The cookie that carries the token for a browser (set by ``GET /?token=...``)."""

EXAMPLE_SMILES = ["CCO", "c1ccccc1O", "not_a_smiles(("]


class PredictRequest(BaseModel):
    """Molecules to predict."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"smiles": EXAMPLE_SMILES, "level": 0.9}]}
    )
    smiles: list[str] = Field(description="SMILES, one per row of the answer, in order")
    level: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="regression: add <target>_low and <target>_high, a split-conformal "
        "interval holding the true value with this probability (the model's calibrator)",
    )


class PredictResponse(BaseModel):
    """``predict``'s rows: one per input SMILES, in order."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "columns": ["smiles", "y", "y_low", "y_high", "domain"]
                    + ["nearest_similarity", "error"],
                    "rows": [
                        {
                            "smiles": "CCO",
                            "y": -0.31,
                            "y_low": -1.12,
                            "y_high": 0.5,
                            "domain": "in",
                            "nearest_similarity": 0.42,
                            "error": None,
                        },
                        {
                            "smiles": "not_a_smiles((",
                            "y": None,
                            "y_low": None,
                            "y_high": None,
                            "domain": None,
                            "nearest_similarity": None,
                            "error": "RDKit cannot parse SMILES 'not_a_smiles(('",
                        },
                    ],
                    "level": 0.9,
                    "molecules": 2,
                    "failed": 1,
                    "out_of_domain": 0,
                }
            ]
        }
    )
    columns: list[str] = Field(description="predict's CSV header, in order")
    rows: list[dict[str, Any]] = Field(
        description="one object per input row, keyed by column: numbers (null where empty), "
        "domain ('in', 'out: <reasons>', 'unknown'), error (null, or why the row could not "
        "be read)"
    )
    level: float | None = Field(description="the interval level, or null")
    molecules: int
    failed: int = Field(description="rows that could not be read")
    out_of_domain: int


class ExplainRequest(BaseModel):
    """Molecules to explain atom by atom."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"smiles": ["c1ccccc1O"]}]})
    smiles: list[str]
    target: str | None = Field(
        default=None, description="the target whose contributions colour the picture"
    )


class AtomContribution(BaseModel):
    """One atom's contribution to each target."""

    index: int
    element: str
    contributions: dict[str, float]


class MoleculeExplanation(BaseModel):
    """One molecule's explanation (Shapley values of its atoms)."""

    smiles: str
    target: str
    atoms: list[AtomContribution]
    prediction: dict[str, float] | None
    baseline: dict[str, float] | None
    svg: str | None = Field(description="the atoms coloured by contribution (SVG)")
    error: str | None
    picture_error: str | None = None


class ExplainResponse(BaseModel):
    """Each molecule's atom contributions and picture."""

    molecules: list[MoleculeExplanation]


class Problem(BaseModel):
    """Why a request was refused."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"detail": "1500 molecules in one request; this server takes at most 1000"}
            ]
        }
    )
    detail: str


_REFUSALS: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem, "description": text}
    for status, text in (
        (401, "no token, or a wrong one (servers off localhost)"),
        (408, "the request took longer than the server's limit"),
        (413, "too many molecules, or a body over the upload limit"),
        (415, "an upload of a kind that is not read"),
        (422, "a request that cannot be answered (the detail says why)"),
    )
}


def _json(data: Any, status: int = 200) -> Response:
    return Response(json.dumps(data), status, media_type="application/json")


def _answer(table: PredictionTable, fmt: str) -> Response:
    if fmt == "csv":
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(table.csv_rows())
        headers = {"Content-Disposition": "attachment; filename=predictions.csv"}
        return Response(text.getvalue(), media_type="text/csv", headers=headers)
    rows = table.records()
    return _json(
        {
            "columns": table.columns,
            "rows": rows,
            "level": table.layout.level,
            "molecules": len(rows),
            "failed": sum(r["error"] is not None for r in rows),
            "out_of_domain": sum(str(r["domain"] or "").startswith("out") for r in rows),
        }
    )


def create_app(service: ModelService, token: str | None = None) -> Guard:
    """The application serving ``service`` (wrapped in its :class:`Guard`: ``token``, where
    given, is checked on every request)."""
    app = FastAPI(
        title="graphormer-urpe",
        summary="Predictions, intervals, applicability domain and atom contributions of a "
        "trained Graphormer / URPE model",
        version="1",
        docs_url=None,  # the interactive pages load scripts from the internet
        redoc_url=None,
    )

    @app.exception_handler(LimitExceeded)
    async def refused(request: Request, exc: LimitExceeded) -> Response:
        return _json({"detail": exc.detail}, exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else "body"
        text = errors[0]["msg"] if errors else "invalid request"
        return _json({"detail": f"{where}: {text}", "errors": json.loads(_dump(errors))}, 422)

    @app.post("/predict", response_model=PredictResponse, responses=_REFUSALS)
    async def predict(
        body: PredictRequest, format: Annotated[Literal["json", "csv"], Query()] = "json"
    ) -> Response:
        """Predict molecules: ``predict``'s rows and columns (the prediction, the interval
        at ``level``, an ensemble's std, ``domain``, ``nearest_similarity``, ``error``).
        SMILES that cannot be read come back as rows with their reason."""
        table = await service.predict_async(body.smiles, level=body.level)
        return _answer(table, format)

    @app.post("/predict/upload", response_model=PredictResponse, responses=_REFUSALS)
    async def predict_upload(
        file: Annotated[UploadFile, File(description=".csv (a SMILES column), .smi, .sdf")],
        level: Annotated[float | None, Form(gt=0, lt=1)] = None,
        smiles_column: Annotated[str, Form()] = "smiles",
        format: Annotated[Literal["json", "csv"], Query()] = "json",
    ) -> Response:
        """Predict the molecules of an uploaded file (rows as ``POST /predict``; a ``name``
        column for .smi lines and SD titles)."""
        table = await _predict_file(file, level, smiles_column)
        return _answer(table, format)

    async def _predict_file(
        file: UploadFile, level: float | None, smiles_column: str
    ) -> PredictionTable:
        data = await file.read()
        limit = service.limits.max_molecules
        rows = await run_in_threadpool(read_upload, file.filename, data, smiles_column, limit)
        return await service.predict_async(
            rows.smiles, level=level, names=rows.names, errors=rows.errors
        )

    @app.post("/explain", response_model=ExplainResponse, responses=_REFUSALS)
    async def explain(body: ExplainRequest) -> Response:
        """Which atoms drive each prediction: sampled Shapley values of the atoms (they add
        up to prediction minus baseline), and the molecule with its atoms coloured (SVG)."""
        work = run_in_threadpool(service.explain, body.smiles, body.target)
        try:
            molecules = await asyncio.wait_for(work, service.limits.request_seconds)
        except asyncio.TimeoutError:
            raise LimitExceeded(408, service.timeout_message("explanations")) from None
        return _json({"molecules": molecules})

    @app.get("/model")
    async def model() -> dict[str, Any]:
        """What the model predicts (targets, units where known), what it was trained on,
        its metrics, its calibration and this server's limits."""
        return description

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> Response:
        return HTMLResponse(page_html(description, level=_default_level()))

    @app.post("/", response_class=HTMLResponse, include_in_schema=False)
    async def page_results(request: Request) -> Response:
        form = await request.form()
        text = str(form.get("smiles") or "")
        raw_level = str(form.get("level") or "").strip()
        level = None
        try:
            if raw_level:
                level = float(raw_level)
            upload = form.get("file")
            if upload is not None and not isinstance(upload, str) and upload.filename:
                table = await _predict_file(upload, level, "smiles")
            else:
                lines = [line.split(maxsplit=1) for line in text.splitlines() if line.strip()]
                smiles = [f[0] for f in lines]
                names = [f[1].strip() if len(f) > 1 else "" for f in lines]
                named = names if any(names) else None
                table = await service.predict_async(smiles, level=level, names=named)
        except LimitExceeded as exc:
            html = page_html(description, error=exc.detail, smiles_text=text, level=level)
            return HTMLResponse(html, exc.status)
        except ValueError:
            html = page_html(description, error=f"not a level: {raw_level!r}", smiles_text=text)
            return HTMLResponse(html, 422)
        return HTMLResponse(page_html(description, table, smiles_text=text, level=level))

    @app.get("/page.js", include_in_schema=False)
    async def script() -> Response:
        return PlainTextResponse(static_file("page.js"), media_type="text/javascript")

    @app.get("/page.css", include_in_schema=False)
    async def style() -> Response:
        return PlainTextResponse(static_file("page.css"), media_type="text/css")

    def _default_level() -> float | None:
        return 0.9 if description["intervals"] else None

    description = service.describe()
    return Guard(app, token, service.limits.max_upload_bytes)


def _dump(errors: list[dict[str, Any]]) -> str:
    """Pydantic's errors as JSON (their ``ctx`` may hold exceptions: shown as text)."""
    return json.dumps(errors, default=str)


class _TooLarge(BaseException):
    """A body over the limit: a ``BaseException``, so that it passes the framework's handler
    of errors (which would answer 500) on its way to :class:`Guard`."""


class Guard:
    """An ASGI wrapper that checks every HTTP request before the application sees it: the
    token (where ``token`` is set; a wrong one is 401) and the body's size (over
    ``max_body`` bytes: 413, whether ``Content-Length`` says so or the body turns out so).

    ``GET /?token=...`` with the right token sets it as an HTTP-only cookie and sends the
    browser back to the page without it.
    """

    def __init__(self, app: FastAPI, token: str | None, max_body: int) -> None:
        self.app = app
        self.token = token
        self.max_body = max_body

    def _authorised(self, scope: dict) -> bool:
        assert self.token is not None
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"authorization", b"").decode("latin-1")
        if given.lower().startswith("bearer "):
            return secrets.compare_digest(given[7:].strip(), self.token)
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get(b"cookie", b"").decode("latin-1"))
        except Exception:  # a malformed cookie header: no token
            return False
        held = cookie.get(COOKIE)
        return held is not None and secrets.compare_digest(held.value, self.token)

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.token is not None and not self._authorised(scope):
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = (query.get("token") or [""])[0]
            if scope["method"] == "GET" and given and secrets.compare_digest(given, self.token):
                rest = {k: v for k, v in query.items() if k != "token"}
                where = scope.get("path", "/") + (f"?{urlencode(rest, doseq=True)}" if rest else "")
                await _send(
                    send,
                    303,
                    b"",
                    [
                        (b"location", where.encode()),
                        (
                            b"set-cookie",
                            f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode(),
                        ),
                    ],
                )
                return
            detail = "a token is needed: Authorization: Bearer <token> (a browser: /?token=...)"
            await _send_json(send, 401, detail, [(b"www-authenticate", b"Bearer")])
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            await _send_json(send, 413, self._too_large(int(length)))
            return
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise _TooLarge
            return message

        started = False

        async def watched(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await _send_json(send, 413, self._too_large(seen))

    def _too_large(self, size: int) -> str:
        return (
            f"a body of {size} bytes or more; this server takes at most {self.max_body} bytes "
            "per request"
        )


async def _send(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_json(send, status: int, detail: str, headers: list | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await _send(send, status, body, head + (headers or []))
