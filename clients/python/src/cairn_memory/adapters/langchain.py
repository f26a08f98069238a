"""LangChain adapters (``pip install "cairn-memory[langchain]"``, langchain-core 1.x).

* :class:`CairnRetriever`: a ``BaseRetriever`` whose documents are the cited items of a
  MemoryPack (``metadata["ref"]`` is the citation, ``metadata["kind"]`` is ``chunk`` for
  document passages).
* :class:`CairnChatMessageHistory`: a ``BaseChatMessageHistory`` backed by one Cairn
  conversation (the scope's session unless another ``conversation_id`` is given).
"""

from __future__ import annotations

import re
from typing import Any, List, Optional, Sequence

from ._common import maybe_await, pack_items, recall_kwargs, require

require("langchain_core", "langchain")

from langchain_core.callbacks import (  # noqa: E402
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.chat_history import BaseChatMessageHistory  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from pydantic import ConfigDict  # noqa: E402

from ..errors import NotFoundError  # noqa: E402
from ..client import AsyncCairn  # noqa: E402
from ..models import MemoryPack  # noqa: E402
from ..scope import MemoryScope, as_scope  # noqa: E402

__all__ = ["CairnChatMessageHistory", "CairnRetriever", "pack_to_documents"]


def pack_to_documents(pack: MemoryPack) -> List[Document]:
    """The pack's cited items as LangChain documents, in citation order."""
    return [Document(page_content=i["text"], metadata=i["metadata"], id=i["metadata"]["ref"]) for i in pack_items(pack)]


class CairnRetriever(BaseRetriever):
    """Recall from Cairn as a LangChain retriever.

    >>> retriever = CairnRetriever(client=memory, scope=scope, token_budget=800)
    >>> docs = retriever.invoke("When is the dentist appointment?")
    >>> docs[0].metadata["ref"]      # 'doc:…#0'

    ``client`` is a :class:`~cairn_memory.Cairn` (``invoke``) or an
    :class:`~cairn_memory.AsyncCairn` (``ainvoke``; a ``Cairn`` works there too, in a worker
    thread). ``filters`` is a recall filter object (e.g. ``{"kinds": ["chunk"]}`` for
    documents only).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: Any
    scope: Any
    token_budget: Optional[int] = None
    filters: Optional[Any] = None

    def _recall_args(self, query: str):
        return (as_scope(self.scope), query), recall_kwargs(self.token_budget, self.filters)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> List[Document]:
        if isinstance(self.client, AsyncCairn):
            raise TypeError("CairnRetriever.invoke needs a blocking Cairn client; use ainvoke with AsyncCairn")
        args, kwargs = self._recall_args(query)
        return pack_to_documents(self.client.recall(*args, **kwargs))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> List[Document]:
        args, kwargs = self._recall_args(query)
        return pack_to_documents(await maybe_await(self.client, "recall", *args, **kwargs))


_ROLE_OF = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


class CairnChatMessageHistory(BaseChatMessageHistory):
    """A chat history stored as a Cairn conversation (recallable like every message).

    Messages are appended as they come; one with an ``id`` (``[A-Za-z0-9_.-]``) is stored
    with it as its ``message_id``, so adding it again is a replay, not a duplicate. A
    ``ToolMessage``'s ``tool_call_id`` travels in the message's metadata. ``clear()`` forgets
    the conversation. Needs a blocking :class:`~cairn_memory.Cairn`.
    """

    def __init__(self, client: Any, scope: Any, conversation_id: Optional[str] = None, *, hard_clear: bool = False):
        self.client = client
        self.scope: MemoryScope = as_scope(scope)
        self.conversation_id = conversation_id or self.scope.session
        self.hard_clear = hard_clear

    @property
    def messages(self) -> List[BaseMessage]:  # type: ignore[override]
        out: List[BaseMessage] = []
        offset = 0
        while True:
            try:
                page = self.client.conversation_messages(self.scope, self.conversation_id, limit=1000, offset=offset)
            except NotFoundError:
                return out
            for m in page.messages:
                out.append(_to_langchain(m))
            offset += len(page.messages)
            if not page.messages or offset >= page.total:
                return out

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        items = []
        for msg in messages:
            role = _ROLE_OF.get(msg.type)
            if role is None:
                raise ValueError(f"cannot store a {msg.type!r} message in a Cairn conversation")
            item: dict = {"conversation_id": self.conversation_id, "role": role, "content": _text(msg.content)}
            if msg.id and _ID.match(msg.id):
                item["message_id"] = msg.id
            if getattr(msg, "name", None):
                item["speaker"] = msg.name
            if isinstance(msg, ToolMessage):
                item["metadata"] = {"tool_call_id": msg.tool_call_id}
            items.append(item)
        if items:
            self.client.add_messages(self.scope, items)

    def clear(self) -> None:
        try:
            self.client.delete_conversation(self.scope, self.conversation_id, hard=self.hard_clear)
        except NotFoundError:
            pass


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [p if isinstance(p, str) else p.get("text", "") for p in content]
    return "".join(parts)


def _to_langchain(m: Any) -> BaseMessage:
    role = m.role.value if m.role is not None else "user"
    kwargs: dict = {"content": m.content, "id": m.id}
    if m.speaker:
        kwargs["name"] = m.speaker
    if role == "assistant":
        return AIMessage(**kwargs)
    if role == "system":
        return SystemMessage(**kwargs)
    if role == "tool":
        return ToolMessage(tool_call_id=(m.metadata or {}).get("tool_call_id", ""), **kwargs)
    return HumanMessage(**kwargs)
