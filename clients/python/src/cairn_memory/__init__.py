"""cairn-memory: the Python client of Cairn, a memory service for AI agents with citations.

The agent loop (agent-turn-v1)::

    from cairn_memory import Cairn, MemoryScope

    memory = Cairn("http://127.0.0.1:7878")
    scope = MemoryScope("acme", "alice", session="chat-1")
    turn = memory.prepare_agent_turn(scope, user_message, token_budget=1_200)
    assistant_message = model(user_message, turn.memory_pack.markdown)
    memory.complete_agent_turn(turn, assistant_message, source="agent_loop")

See the README (clients/python/README.md) for every method, the errors and the retry policy.
"""

from . import models
from ._transport import RetryPolicy
from ._version import __version__
from .client import AsyncCairn, Cairn, TurnContext
from .errors import (
    AuthError,
    BadInputError,
    CairnConnectionError,
    CairnError,
    CairnTimeoutError,
    ConflictError,
    ForbiddenError,
    InternalError,
    NotFoundError,
    TurnConflictError,
    UnauthorizedError,
    UnavailableError,
    InsufficientStorageError,
)
from .models import MemoryPack, TurnReceipt
from .scope import MemoryScope

__all__ = [
    "AsyncCairn",
    "AuthError",
    "BadInputError",
    "Cairn",
    "CairnConnectionError",
    "CairnError",
    "CairnTimeoutError",
    "ConflictError",
    "ForbiddenError",
    "InternalError",
    "MemoryPack",
    "MemoryScope",
    "NotFoundError",
    "RetryPolicy",
    "TurnConflictError",
    "TurnContext",
    "TurnReceipt",
    "UnauthorizedError",
    "UnavailableError",
    "InsufficientStorageError",
    "__version__",
    "models",
]
