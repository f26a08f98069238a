"""Cairn's errors as exceptions.

Every error the server answers is ``{"error": {"code", "message", "hint"?}}`` with a stable
``code`` (README "Error codes"). The client raises the subclass of :class:`CairnError` for
that code's class; the exception carries the code, the HTTP status, the message, the hint and
the request id, so callers branch on ``err.code`` or on the class:

=======================  =========================================================  ======
class                    codes                                                      status
=======================  =========================================================  ======
``BadInputError``        ``invalid_request``, ``too_many_items``,                   400,
                         ``payload_too_large``, ``unsupported_media_type``,         413,
                         ``extraction_failed``, ``empty_document``,                 415,
                         ``evidence_not_found``, ``method_not_allowed``             422, 405
``UnauthorizedError``    ``unauthorized``                                           401
``ForbiddenError``       ``scope_forbidden``, ``forbidden``, ``capability_denied``,  403
                         ``forbidden_origin``
``NotFoundError``        ``not_found``                                              404
``ConflictError``        ``conflict``                                               409
``TurnConflictError``    ``turn_conflict`` (a ``ConflictError``)                    409
``UnavailableError``     ``unavailable``                                            503
``CairnConnectionError`` ``connection_error``: no answer (refused, reset, closed)   --
                         (an ``UnavailableError``)
``CairnTimeoutError``    ``timeout`` (the server's 504, or the client's own limit)  504
``InternalError``        ``internal`` and any other 5xx                             500
=======================  =========================================================  ======

``UnauthorizedError`` and ``ForbiddenError`` share the base ``AuthError``.
``InsufficientStorageError`` is ``insufficient_storage`` (507): the server's disk is full.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

__all__ = [
    "AuthError",
    "BadInputError",
    "CairnConnectionError",
    "CairnError",
    "CairnTimeoutError",
    "ConflictError",
    "ForbiddenError",
    "InsufficientStorageError",
    "InternalError",
    "NotFoundError",
    "TurnConflictError",
    "UnauthorizedError",
    "UnavailableError",
    "error_class",
]


class CairnError(Exception):
    """An error answered by Cairn (or the failure to get an answer at all).

    Attributes:
        code: the stable code (``not_found``, ``turn_conflict``, ...; client-side failures:
            ``connection_error``, ``timeout``).
        message: the server's message, for people.
        status: the HTTP status, ``None`` when no answer came.
        hint: the server's hint, if any.
        request_id: the server's ``x-request-id`` for this request (to find it in the log).
        body: the decoded JSON error body, if there was one.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: Optional[int] = None,
        hint: Optional[str] = None,
        request_id: Optional[str] = None,
        body: Optional[Dict[str, Any]] = None,
    ) -> None:
        self.code = code
        self.message = message
        self.status = status
        self.hint = hint
        self.request_id = request_id
        self.body = body
        super().__init__(f"{code}: {message}" + (f" (hint: {hint})" if hint else ""))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, message={self.message!r})"


class BadInputError(CairnError):
    """The request is wrong: malformed, over a limit, an unsupported file, missing evidence."""


class AuthError(CairnError):
    """Who is calling may not do this (base of 401 and 403)."""


class UnauthorizedError(AuthError):
    """``401 unauthorized``: no key, or one the server does not know."""


class ForbiddenError(AuthError):
    """``403``: the key or the agent's grant does not allow this (``scope_forbidden``,
    ``forbidden``, ``capability_denied``, ``forbidden_origin``)."""


class NotFoundError(CairnError):
    """``404 not_found``: no such route, or nothing with that id or ref in the scope."""


class ConflictError(CairnError):
    """``409 conflict``: a write that contradicts what is stored."""


class TurnConflictError(ConflictError):
    """``409 turn_conflict``: the turn id was completed with other content (or its messages
    were deleted). A turn id is completed once."""


class UnavailableError(CairnError):
    """``503 unavailable``: the model or the store is unavailable. Retried (with backoff) by
    the client for idempotent operations."""


class InsufficientStorageError(CairnError):
    """``507 insufficient_storage``: the server's disk (or quota) is full. Nothing was stored;
    reads keep working, and the same request succeeds once the operator frees space (no
    restart). Not retried automatically: a full disk does not clear up in seconds."""


class CairnConnectionError(UnavailableError):
    """No answer at all: the connection was refused, reset or closed before the answer.

    The request may or may not have been carried out. Retried like ``unavailable`` for
    idempotent operations only; for the others the caller decides (e.g. list what is stored)."""


class CairnTimeoutError(CairnError):
    """``504 timeout`` from the server, or the client's own timeout. A write carries on to its
    end on the server: retrying it with the same key (turn id, ``message_id``, ``ts``) returns
    its outcome. Not retried automatically."""


class InternalError(CairnError):
    """``500 internal`` (a server bug; details are in the server's log) or another 5xx."""


_BY_CODE: Dict[str, Type[CairnError]] = {
    "invalid_request": BadInputError,
    "too_many_items": BadInputError,
    "payload_too_large": BadInputError,
    "unsupported_media_type": BadInputError,
    "extraction_failed": BadInputError,
    "empty_document": BadInputError,
    "evidence_not_found": BadInputError,
    "method_not_allowed": BadInputError,
    "unauthorized": UnauthorizedError,
    "scope_forbidden": ForbiddenError,
    "forbidden": ForbiddenError,
    "capability_denied": ForbiddenError,
    "forbidden_origin": ForbiddenError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "turn_conflict": TurnConflictError,
    "unavailable": UnavailableError,
    "insufficient_storage": InsufficientStorageError,
    "timeout": CairnTimeoutError,
    "internal": InternalError,
}
"""Every stable code of the server (README "Error codes") and its class."""

_BY_STATUS: Dict[int, Type[CairnError]] = {
    400: BadInputError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    405: BadInputError,
    409: ConflictError,
    413: BadInputError,
    415: BadInputError,
    422: BadInputError,
    503: UnavailableError,
    504: CairnTimeoutError,
    507: InsufficientStorageError,
}


def error_class(code: Optional[str], status: Optional[int] = None) -> Type[CairnError]:
    """The exception class of a code (or, for an unknown code, of the HTTP status)."""
    if code in _BY_CODE:
        return _BY_CODE[code]  # type: ignore[index]
    if status is not None:
        if status in _BY_STATUS:
            return _BY_STATUS[status]
        if status >= 500:
            return InternalError
        if 400 <= status < 500:
            return BadInputError
    return CairnError
