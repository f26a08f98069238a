"""What a call is, how it becomes an HTTP request, how an answer becomes a result or an
exception, and the retry policy. Shared by :class:`~cairn_memory.Cairn` and
:class:`~cairn_memory.AsyncCairn`; only the sending differs."""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable, Dict, Optional, Tuple
from urllib.parse import quote

import httpx

from . import models
from ._operations import OPERATIONS, Route
from .errors import (
    CairnConnectionError,
    CairnError,
    CairnTimeoutError,
    UnavailableError,
    error_class,
)

__all__ = ["Call", "RetryPolicy"]


@dataclasses.dataclass
class Call:
    """One operation call: the OpenAPI ``operationId`` and what fills its request."""

    op: str
    path: Dict[str, Any] = dataclasses.field(default_factory=dict)
    params: Dict[str, Any] = dataclasses.field(default_factory=dict)
    json: Any = None
    data: Optional[Dict[str, str]] = None
    files: Optional[Dict[str, Tuple[str, bytes, str]]] = None
    idempotent: bool = False
    """Safe to send again (the server answers a repeat with the same outcome): only such
    calls are retried after ``unavailable`` or a lost connection."""
    then: Optional[Callable[[Any], Any]] = None
    """Turns the parsed answer into the method's result."""

    @property
    def route(self) -> Route:
        return OPERATIONS[self.op]


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Retries with exponential backoff, only for ``unavailable`` (``503`` or no answer at all:
    :class:`~cairn_memory.UnavailableError`, :class:`~cairn_memory.CairnConnectionError`) and
    only for calls that are idempotent.

    The n-th retry (n = 0, 1, ...) waits ``min(backoff_max, backoff * 2**n)`` seconds, times a
    random factor in [0.5, 1] when ``jitter`` is on, or the server's ``Retry-After`` when it
    sends one (capped at ``backoff_max``). ``max_retries=0`` turns retries off.
    """

    max_retries: int = 3
    backoff: float = 0.25
    backoff_max: float = 4.0
    jitter: bool = True

    def delay(self, attempt: int, retry_after: Optional[float] = None) -> float:
        if retry_after is not None:
            return max(0.0, min(self.backoff_max, retry_after))
        base = min(self.backoff_max, self.backoff * (2**attempt))
        return base * random.uniform(0.5, 1.0) if self.jitter else base

    def should_retry(self, call: Call, error: CairnError, attempt: int) -> bool:
        return call.idempotent and isinstance(error, UnavailableError) and attempt < self.max_retries


def query_value(v: Any) -> Any:
    if isinstance(v, bool):
        return "true" if v else "false"
    if hasattr(v, "value") and isinstance(v.value, str):  # enums
        return v.value
    return v


def build_request(client: httpx.Client | httpx.AsyncClient, call: Call) -> httpx.Request:
    route = call.route
    missing = set(route.path_params) - set(call.path)
    if missing:  # a bug of this client, never of the caller
        raise AssertionError(f"{call.op}: path parameters {sorted(missing)} not filled")
    path = route.path.format(**{k: quote(str(v), safe="") for k, v in call.path.items()})
    params = {k: query_value(v) for k, v in call.params.items() if v is not None}
    kwargs: Dict[str, Any] = {"params": params}
    if call.files is not None:
        kwargs["data"] = call.data or {}
        kwargs["files"] = call.files
    elif call.json is not None:
        kwargs["json"] = call.json
    return client.build_request(route.method, path, **kwargs)


def transport_error(exc: httpx.TransportError, request: httpx.Request) -> CairnError:
    where = f"{request.method} {request.url}"
    if isinstance(exc, httpx.ConnectTimeout):
        return CairnConnectionError("connection_error", f"{where}: could not connect in time ({exc})")
    if isinstance(exc, httpx.TimeoutException):
        return CairnTimeoutError("timeout", f"{where}: no answer within the client's timeout ({exc})")
    return CairnConnectionError("connection_error", f"{where}: {type(exc).__name__}: {exc}")


def error_from_response(response: httpx.Response) -> CairnError:
    body: Optional[Dict[str, Any]] = None
    code = message = hint = None
    try:
        decoded = response.json()
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), dict):
            body = decoded
            err = decoded["error"]
            code, message, hint = err.get("code"), err.get("message"), err.get("hint")
    except ValueError:
        pass
    status = response.status_code
    if not code:
        code = f"http_{status}"
        message = response.text[:500] or response.reason_phrase
    cls = error_class(code, status)
    return cls(
        code,
        message or "",
        status=status,
        hint=hint,
        request_id=response.headers.get("x-request-id"),
        body=body,
    )


def retry_after(response: Optional[httpx.Response]) -> Optional[float]:
    if response is None:
        return None
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def parse(call: Call, response: httpx.Response) -> Any:
    route = call.route
    if route.response is None:
        ctype = response.headers.get("content-type", "")
        result: Any = response.json() if "json" in ctype else response.text
    else:
        model = getattr(models, models.SCHEMA_NAMES[route.response])
        result = model.model_validate(response.json())
    return call.then(result) if call.then else result


def drop_none(**fields: Any) -> Dict[str, Any]:
    """A JSON object of the fields that are set (pydantic models are dumped as JSON)."""
    return {k: dump(v) for k, v in fields.items() if v is not None}


def dump(v: Any) -> Any:
    if hasattr(v, "model_dump"):
        return v.model_dump(mode="json", exclude_none=True)
    if isinstance(v, (list, tuple)):
        return [dump(x) for x in v]
    if isinstance(v, dict):
        return {k: dump(x) for k, x in v.items()}
    if hasattr(v, "value") and isinstance(v.value, str):
        return v.value
    return v
