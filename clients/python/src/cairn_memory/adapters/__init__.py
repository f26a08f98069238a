"""Optional adapters, each behind its extra:

* :mod:`cairn_memory.adapters.langchain` (``pip install "cairn-memory[langchain]"``):
  ``CairnRetriever`` (a LangChain ``BaseRetriever``) and ``CairnChatMessageHistory``;
* :mod:`cairn_memory.adapters.llamaindex` (``[llamaindex]``): ``CairnLlamaRetriever``;
* :mod:`cairn_memory.adapters.pydantic_ai` (``[pydantic-ai]``): memory tools and the agent
  loop for Pydantic AI.

Importing an adapter without its extra raises ``ImportError`` naming the extra.
"""
