"""Who a memory belongs to, and where it came from."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Union

__all__ = ["MemoryScope", "ScopeLike"]


@dataclasses.dataclass(frozen=True)
class MemoryScope:
    """A Cairn scope: ``tenant``, ``user`` and ``namespace`` are the storage boundary (one
    scope never sees another's memories); ``agent`` and ``session`` are provenance recorded on
    every memory, and ``session`` is also the conversation an agent turn is recorded in.

    Each part is ``[A-Za-z0-9_.-]+``, at most 128 characters; the server checks them (a bad
    one is ``BadInputError`` with code ``invalid_request``). The defaults are the server's.

    >>> scope = MemoryScope("acme", "alice", session="chat-42")
    >>> scope.replace(session="chat-43").session
    'chat-43'
    """

    tenant: str
    user: str
    namespace: str = "default"
    agent: str = "default"
    session: str = "default"

    def to_dict(self) -> Dict[str, str]:
        """The JSON ``scope`` object of a request body."""
        return dataclasses.asdict(self)

    def partition(self) -> Dict[str, str]:
        """The query-string parameters of a GET or DELETE (``tenant``, ``user``, ``namespace``)."""
        return {"tenant": self.tenant, "user": self.user, "namespace": self.namespace}

    def replace(self, **changes: str) -> "MemoryScope":
        """A copy with some parts changed."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "MemoryScope":
        """From a scope object as the server answers it (or any mapping with those keys)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names and v is not None})


ScopeLike = Union[MemoryScope, Mapping[str, Any]]
"""A :class:`MemoryScope`, or a mapping with its keys."""


def as_scope(scope: Any) -> MemoryScope:
    if isinstance(scope, MemoryScope):
        return scope
    if hasattr(scope, "model_dump"):  # the generated models.Scope
        return MemoryScope.from_dict(scope.model_dump())
    if isinstance(scope, Mapping):
        return MemoryScope.from_dict(scope)
    raise TypeError(f"expected a MemoryScope, got {type(scope).__name__}")
