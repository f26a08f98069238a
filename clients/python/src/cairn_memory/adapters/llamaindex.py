"""LlamaIndex adapter (``pip install "cairn-memory[llamaindex]"``, llama-index-core).

:class:`CairnLlamaRetriever` is a LlamaIndex ``BaseRetriever``: each cited item of the
MemoryPack becomes a ``NodeWithScore`` whose node id is the citation's ref.
"""

from __future__ import annotations

from typing import Any, List, Optional

from ._common import maybe_await, pack_items, recall_kwargs, require

require("llama_index.core", "llamaindex")

from llama_index.core.callbacks import CallbackManager  # noqa: E402
from llama_index.core.retrievers import BaseRetriever  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402

from ..client import AsyncCairn  # noqa: E402
from ..models import MemoryPack  # noqa: E402
from ..scope import as_scope  # noqa: E402

__all__ = ["CairnLlamaRetriever", "pack_to_nodes"]


def pack_to_nodes(pack: MemoryPack) -> List[NodeWithScore]:
    """The pack's cited items as LlamaIndex nodes, in citation order."""
    out = []
    for item in pack_items(pack):
        meta = item["metadata"]
        node = TextNode(
            id_=meta["ref"],
            text=item["text"],
            metadata=meta,
            # The citation fields are for the application, not for the embedding or the LLM.
            excluded_embed_metadata_keys=list(meta),
            excluded_llm_metadata_keys=[k for k in meta if k not in ("ref", "source")],
        )
        out.append(NodeWithScore(node=node, score=item["score"]))
    return out


class CairnLlamaRetriever(BaseRetriever):
    """Recall from Cairn as a LlamaIndex retriever.

    >>> retriever = CairnLlamaRetriever(memory, scope, token_budget=800)
    >>> nodes = retriever.retrieve("When is the dentist appointment?")
    >>> nodes[0].node.id_            # 'doc:…#0'

    ``client`` is a :class:`~cairn_memory.Cairn` (``retrieve``) or an
    :class:`~cairn_memory.AsyncCairn` (``aretrieve``; a ``Cairn`` works there too).
    """

    def __init__(
        self,
        client: Any,
        scope: Any,
        *,
        token_budget: Optional[int] = None,
        filters: Any = None,
        callback_manager: Optional[CallbackManager] = None,
    ) -> None:
        self.client = client
        self.scope = as_scope(scope)
        self.token_budget = token_budget
        self.filters = filters
        super().__init__(callback_manager=callback_manager)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        if isinstance(self.client, AsyncCairn):
            raise TypeError("CairnLlamaRetriever.retrieve needs a blocking Cairn client; use aretrieve with AsyncCairn")
        return pack_to_nodes(self.client.recall(self.scope, query_bundle.query_str, **recall_kwargs(self.token_budget, self.filters)))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        pack = await maybe_await(
            self.client, "recall", self.scope, query_bundle.query_str, **recall_kwargs(self.token_budget, self.filters)
        )
        return pack_to_nodes(pack)
