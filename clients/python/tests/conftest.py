"""Fixtures: one real ``cairn serve`` (real model, temp data dir, free loopback port) for the
session, a second one with an API key for the auth tests (started on first use), clients that
check every request and answer against ``api/openapi.json``, and a fresh scope per test."""

from __future__ import annotations

import hashlib
import json
import secrets
import uuid
from typing import Any, Dict

import httpx
import pydantic
import pytest

from cairn_memory import AsyncCairn, Cairn, MemoryScope, models
from cairn_memory._transport import Call

from servers import REPO, CairnServer

OPENAPI_PATH = REPO / "api" / "openapi.json"
OPENAPI = json.loads(OPENAPI_PATH.read_text())
SCHEMAS = OPENAPI["components"]["schemas"]


def _finish(request, srv: CairnServer) -> None:
    """Stops the server; after a failed test, shows the end of its log first."""
    if request.session.testsfailed:
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            print(f"\n--- {srv.name} log (last 40 lines) ---\n{srv.log_tail()}\n---")
    srv.cleanup()


@pytest.fixture(scope="session")
def server(request):
    srv = CairnServer(name="cairn").start()
    yield srv
    _finish(request, srv)


OWNER_KEY = "owner-" + secrets.token_hex(16)
KEYED_TENANT = "keyed"


@pytest.fixture(scope="session")
def keyed_server(request):
    """A server with one API key (``OWNER_KEY``, tenant ``keyed``, every user)."""
    digest = hashlib.sha256(OWNER_KEY.encode()).hexdigest()
    srv = CairnServer(env={"CAIRN_API_KEYS": f"{digest}:{KEYED_TENANT}"}, name="cairn-keyed").start()
    yield srv
    _finish(request, srv)


# --- checking every exchange against the OpenAPI document -----------------------------------------


def _no_extras(value: Any, path: str) -> None:
    """Fails when the server sent a field the generated model does not have (drift)."""
    if isinstance(value, pydantic.BaseModel):
        extra = value.model_extra or {}
        assert not extra, f"{path}: fields not in api/openapi.json: {sorted(extra)}"
        for name in type(value).model_fields:
            _no_extras(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _no_extras(v, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            _no_extras(v, f"{path}.{k}")


def _model(schema_name: str):
    return getattr(models, models.SCHEMA_NAMES[schema_name])


def check_exchange(call: Call, request: httpx.Request, response: httpx.Response) -> None:
    """What the client sent matches the operation in the document (body keys, required ones,
    query parameters), and what the server answered parses strictly as the documented model
    with no unknown field (or as ``ErrorBody`` for an error)."""
    route = call.route
    op = f"{route.method} {route.path} ({call.op})"
    names = set(request.url.params.keys())
    assert names <= set(route.query), f"{op}: query parameters not in the document: {names - set(route.query)}"
    assert set(route.required_query) <= names, f"{op}: required query parameters missing"
    if route.request and route.content_type == "application/json":
        schema = SCHEMAS[route.request]
        body = json.loads(request.content)
        assert set(body) <= set(schema["properties"]), f"{op}: body fields not in {route.request}: {set(body) - set(schema['properties'])}"
        assert set(schema.get("required", [])) <= set(body), f"{op}: required {route.request} fields missing"
    elif route.request:
        assert request.headers["content-type"].startswith("multipart/form-data")
        request.read()
        fields = set()
        for part in request.content.split(b"Content-Disposition: form-data; name=\"")[1:]:
            fields.add(part.split(b'"', 1)[0].decode())
        props = set(SCHEMAS[route.request]["properties"])
        assert fields <= props, f"{op}: form fields not in {route.request}: {fields - props}"
    else:
        assert not request.content, f"{op}: a body on a route without one"
    if response.status_code >= 400:
        parsed = models.ErrorBody.model_validate_json(response.content, strict=True)
        _no_extras(parsed, f"{op} error")
        return
    documented = OPENAPI["paths"][route.path][route.method.lower()]["responses"]
    assert str(response.status_code) in documented, f"{op}: status {response.status_code} not documented"
    if route.response:
        parsed = _model(route.response).model_validate_json(response.content, strict=True)
        _no_extras(parsed, f"{op} answer")


def strict(client):
    client._inspector = check_exchange
    return client


@pytest.fixture()
def memory(server):
    """A blocking client of the session server; every exchange is checked (``check_exchange``)."""
    with strict(Cairn(server.url)) as c:
        yield c


@pytest.fixture()
async def amemory(server):
    async with strict(AsyncCairn(server.url)) as c:
        yield c


def new_scope(**kw: str) -> MemoryScope:
    """A scope nobody else uses (a fresh user), so tests do not see each other's memories."""
    base: Dict[str, str] = {"tenant": "pytest", "user": "u-" + uuid.uuid4().hex[:10], "session": "s-" + uuid.uuid4().hex[:6]}
    base.update(kw)
    return MemoryScope(**base)


@pytest.fixture()
def scope() -> MemoryScope:
    return new_scope()
