"""The optional adapters on the real server: LangChain (retriever, chat message history),
LlamaIndex (retriever), Pydantic AI (memory tools and the agent turn, with stand-in models),
and the example agent loop."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cairn_memory import AsyncCairn, Cairn

from conftest import new_scope, strict
from servers import REPO

pytestmark = pytest.mark.adapters

BOILER = "# Household\n\nThe boiler service is booked for March 14 with Northside Heating."
QUESTION = "When is the boiler service booked?"


@pytest.fixture()
def stored(memory: Cairn, scope):
    doc = memory.add_document(scope, "notes/household.md", BOILER, media_type="text/markdown")
    return scope, f"doc:{doc.doc_id}#0"


# --- LangChain ---------------------------------------------------------------------------------


def test_langchain_retriever_returns_cited_documents(memory, stored, server):
    from langchain_core.documents import Document

    from cairn_memory.adapters.langchain import CairnRetriever

    scope, ref = stored
    retriever = CairnRetriever(client=memory, scope=scope, token_budget=600)
    docs = retriever.invoke(QUESTION)
    assert docs and all(isinstance(d, Document) for d in docs)
    top = docs[0]
    assert top.id == ref and top.metadata["ref"] == ref and top.metadata["kind"] == "chunk"
    assert top.metadata["source"] == "notes/household.md" and top.metadata["citation"] == 1
    assert top.metadata["trust_origin"] == "document" and top.metadata["coverage"] in ("partial", "full")
    assert "March 14" in top.page_content
    # Only documents, through the recall filters.
    only_docs = CairnRetriever(client=memory, scope=scope, filters={"kinds": ["chunk"]}).invoke("boiler")
    assert [d.metadata["kind"] for d in only_docs] == ["chunk"]
    # Another scope retrieves nothing.
    assert CairnRetriever(client=memory, scope=new_scope()).invoke(QUESTION) == []


async def test_langchain_retriever_async(stored, server):
    from cairn_memory.adapters.langchain import CairnRetriever

    scope, ref = stored
    async with strict(AsyncCairn(server.url)) as amemory:
        retriever = CairnRetriever(client=amemory, scope=scope)
        docs = await retriever.ainvoke(QUESTION)
        assert docs[0].metadata["ref"] == ref
        with pytest.raises(TypeError):
            retriever.invoke(QUESTION)
    with strict(Cairn(server.url)) as memory:  # a blocking client works in ainvoke too
        assert (await CairnRetriever(client=memory, scope=scope).ainvoke(QUESTION))[0].metadata["ref"] == ref


def test_langchain_chat_message_history(memory, scope):
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

    from cairn_memory.adapters.langchain import CairnChatMessageHistory

    history = CairnChatMessageHistory(memory, scope)
    assert history.messages == []
    history.add_messages([SystemMessage("Be brief."), HumanMessage("My bike is a green Brompton.", name="Ana", id="h-1")])
    history.add_ai_message("Noted: a green Brompton.")
    history.add_message(ToolMessage("42 km", tool_call_id="call-7"))
    history.add_messages([HumanMessage("My bike is a green Brompton.", name="Ana", id="h-1")])  # a replay
    msgs = history.messages
    assert [(type(m).__name__, m.content) for m in msgs] == [
        ("SystemMessage", "Be brief."),
        ("HumanMessage", "My bike is a green Brompton."),
        ("AIMessage", "Noted: a green Brompton."),
        ("ToolMessage", "42 km"),
    ]
    assert msgs[1].name == "Ana" and msgs[3].tool_call_id == "call-7"
    # The history is Cairn memory: recall cites it.
    pack = memory.recall(scope, "What colour is my bike?")
    assert any(c.conversation_id == scope.session for c in pack.citations)
    # A second history on another conversation of the same scope is separate.
    other = CairnChatMessageHistory(memory, scope, conversation_id="side-chat")
    other.add_user_message("Unrelated.")
    assert len(other.messages) == 1 and len(history.messages) == 4
    history.clear()
    assert history.messages == []
    assert len(other.messages) == 1


# --- LlamaIndex --------------------------------------------------------------------------------


def test_llamaindex_retriever_returns_cited_nodes(memory, stored):
    from llama_index.core.schema import NodeWithScore

    from cairn_memory.adapters.llamaindex import CairnLlamaRetriever

    scope, ref = stored
    nodes = CairnLlamaRetriever(memory, scope, token_budget=600).retrieve(QUESTION)
    assert nodes and all(isinstance(n, NodeWithScore) for n in nodes)
    top = nodes[0]
    assert top.node.id_ == ref and top.node.metadata["ref"] == ref and top.node.metadata["kind"] == "chunk"
    assert "March 14" in top.node.get_content() and top.score is not None and top.score > 0
    assert CairnLlamaRetriever(memory, new_scope()).retrieve(QUESTION) == []


async def test_llamaindex_retriever_async(stored, server):
    from cairn_memory.adapters.llamaindex import CairnLlamaRetriever

    scope, ref = stored
    async with strict(AsyncCairn(server.url)) as amemory:
        nodes = await CairnLlamaRetriever(amemory, scope).aretrieve(QUESTION)
    assert nodes[0].node.id_ == ref


# --- Pydantic AI -------------------------------------------------------------------------------


def _function_model(seen):
    """A stand-in LLM: records what it was given; calls recall_memory once, then answers
    with the first ref the tool returned."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
    from pydantic_ai.models.function import FunctionModel

    def fn(messages, info):
        last = messages[-1]
        seen.append(last)
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            md = str(returns[0].content)
            ref = next(line.split("`")[1] for line in md.splitlines() if line.startswith("[1] `"))
            return ModelResponse(parts=[TextPart(f"March 14, with Northside Heating (`{ref}`).")])
        prompt = next(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
        return ModelResponse(parts=[ToolCallPart("recall_memory", {"query": prompt})])

    return FunctionModel(fn)


def test_pydantic_ai_agent_turn(memory, stored):
    from cairn_memory.adapters.pydantic_ai import memory_agent, run_turn

    scope, ref = stored
    seen = []
    agent = memory_agent(_function_model(seen))
    result = run_turn(agent, memory, scope, QUESTION, token_budget=800, source="pydantic_ai_test")
    # The prepared pack was the model's instructions.
    assert seen[0].instructions and result.turn.memory_pack.markdown.strip() in seen[0].instructions
    assert result.answer == f"March 14, with Northside Heating (`{ref}`)."
    assert result.refers_to == [ref]
    assert result.receipt.turn_id == result.turn.turn_id
    msgs = memory.conversation_messages(scope, scope.session).messages
    assert [(m.role.value, m.content) for m in msgs] == [("user", QUESTION), ("assistant", result.answer)]


def test_pydantic_ai_tools_with_test_model(memory, stored):
    """Pydantic AI's TestModel calls every tool with arguments made from its JSON schema, so
    the tools' schemas are valid; the recall tool answers a MemoryPack."""
    from pydantic_ai.messages import ToolReturnPart
    from pydantic_ai.models.test import TestModel

    from cairn_memory.adapters.pydantic_ai import memory_agent, run_turn

    scope, _ = stored
    result = run_turn(memory_agent(TestModel(call_tools=["recall_memory", "remember_fact"])), memory, scope, QUESTION)
    returns = {p.tool_name: str(p.content) for m in result.result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)}
    assert returns["recall_memory"].startswith("# Memory context")
    assert returns["remember_fact"].startswith("stored fact:")
    assert memory.stats(scope).facts == 1 and memory.stats(scope).turns == 1


async def test_pydantic_ai_agent_turn_async(stored, server):
    from cairn_memory.adapters.pydantic_ai import arun_turn, memory_agent

    scope, ref = stored
    async with strict(AsyncCairn(server.url)) as amemory:
        result = await arun_turn(memory_agent(_function_model([])), amemory, scope, QUESTION)
        assert result.refers_to == [ref]
        page = await amemory.conversation_messages(scope, scope.session)
    assert page.total == 2


def test_example_agent_loop_runs(server):
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, str(REPO / "clients" / "python" / "examples" / "agent_loop.py"), "--base-url", server.url],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok: 6 messages" in out.stdout and "March 14" in out.stdout
