"""What the adapters share: a MemoryPack as a list of cited items."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Dict, List, Optional

from ..models import MemoryPack


def require(module: str, extra: str):
    try:
        return __import__(module)
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            f"this adapter needs {module!r}: pip install \"cairn-memory[{extra}]\"") from e


def pack_items(pack: MemoryPack) -> List[Dict[str, Any]]:
    """One item per citation, in marker order: the quoted ``text`` (the selected passage)
    and its ``metadata``: ``ref`` (what to cite or forget), ``citation`` (the ``[n]``
    marker), ``kind`` (``chunk`` for document passages, ``message``, ``fact``, ...),
    ``source``, ``trust_origin``, ``score``, the document or conversation coordinates when
    there are any, and the pack's ``coverage``."""
    nodes = {n.citation: n for n in pack.selected_nodes}
    items = []
    for c in pack.citations:
        node = nodes.get(c.n)
        meta: Dict[str, Any] = {
            "ref": c.ref,
            "citation": c.n,
            "kind": c.kind,
            "source": c.source,
            "trust_origin": c.trust_origin.value,
            "score": c.score,
            "timestamp": c.timestamp,
            "coverage": pack.coverage.value,
            "truncated": bool(node and node.truncated),
        }
        if c.kind == "chunk":  # doc_id is also set on knowledge citations (their record id)
            meta.update(doc_id=c.doc_id, chunk_index=c.chunk_index)
            if c.page is not None:
                meta["page"] = c.page
            if c.span is not None:
                meta["span"] = list(c.span)
        if c.conversation_id is not None:
            meta["conversation_id"] = c.conversation_id
        if c.turn_id is not None:
            meta["turn_id"] = c.turn_id
        if c.role is not None:
            meta["role"] = c.role.value
        items.append({"text": node.text if node else "", "metadata": meta, "score": c.score})
    return items


async def maybe_await(client: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Calls ``client.method``: awaited on an AsyncCairn, in a worker thread on a Cairn."""
    fn = getattr(client, method)
    if inspect.iscoroutinefunction(getattr(type(client), "_call", None)):
        return await fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


def recall_kwargs(token_budget: Optional[int], filters: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if token_budget is not None:
        out["token_budget"] = token_budget
    if filters is not None:
        out["filters"] = filters
    return out
