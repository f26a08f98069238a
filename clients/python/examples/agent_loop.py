"""An agent loop with Cairn memory, runnable without an LLM.

usage:
    cairn serve &                                   # or any running Cairn
    pip install "./clients/python[pydantic-ai]"
    python clients/python/examples/agent_loop.py [--base-url http://127.0.0.1:7878]

1. Stores a small document and a preference in a fresh scope.
2. Turn 1 is the seed loop, with a plain function standing in for the model:

       turn = memory.prepare_agent_turn(scope, user_message, token_budget=1_200)
       assistant_message = model(user_message, turn.memory_pack.markdown)
       memory.complete_agent_turn(turn, assistant_message, source="agent_loop")

3. Turns 2 and 3 run a Pydantic AI agent with memory tools (``recall_memory``,
   ``remember_fact``) around a ``FunctionModel``: a deterministic stand-in that calls a tool,
   then answers from what the tool returned, citing its ref. Swap in any real model
   (``memory_agent("openai:gpt-4o")``) and nothing else changes.

Every turn is recorded in Cairn (prepare -> model -> complete); the script prints each answer
with its citations and receipt and exits non-zero if memory did not do its part.
"""

from __future__ import annotations

import argparse
import re
import sys
import uuid

from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from cairn_memory import Cairn, MemoryScope
from cairn_memory.adapters.pydantic_ai import memory_agent, run_turn


ITEM = re.compile(r"^\[(\d+)\] ([^·\n]+?) · .*\n((?:> .*\n?)+)", re.M)
REF = re.compile(r"^\[(\d+)\] `([^`]+)`", re.M)


def memories(context_markdown: str) -> list[tuple[int, str, str, str]]:
    """(n, label, quote, ref) of each memory in a MemoryPack's Markdown, documents first
    (a stand-in's taste: primary sources over what was said about them)."""
    refs = {int(n): ref for n, ref in REF.findall(context_markdown)}
    out = []
    for n, label, quoted in ITEM.findall(context_markdown):
        lines = [l[2:].strip() for l in quoted.splitlines()]
        quote = " ".join(l for l in lines if l and not l.startswith("#"))
        out.append((int(n), label.strip(), quote, refs.get(int(n), "")))
    return sorted(out, key=lambda m: m[1] != "document")


def model(user_message: str, context_markdown: str) -> str:
    """Stand-in for an LLM call: answers with the best memory quoted in the context, cited
    by its [n] marker (a real model would read the whole context)."""
    found = memories(context_markdown)
    if not found:
        return "I have nothing in memory about that."
    n, _, quote, _ = found[0]
    return f"From memory: {quote} [{n}]"


FACT = re.compile(r"^(?:remember that )?(?P<s>[A-Z][a-z]+) (?P<p>works at|lives in) (?P<o>.+?)\.?$", re.I)


def stand_in(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stand-in for an LLM behind Pydantic AI: a statement of fact becomes a remember_fact
    call, a question a recall_memory call; once the tool answered, the reply quotes the best
    memory it returned and cites it by its ref (the tool's markers are numbered apart from
    the prepared pack's)."""
    last = messages[-1]
    returned = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    if returned:
        content = str(returned[-1].content)
        if content.startswith("stored "):
            return ModelResponse(parts=[TextPart(f"Noted ({content.split()[1]}).")])
        found = memories(content)
        if not found:
            return ModelResponse(parts=[TextPart("Memory has nothing on that.")])
        _, _, quote, ref = found[0]
        return ModelResponse(parts=[TextPart(f"{quote} (`{ref}`)")])
    prompt = next(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
    fact = FACT.match(prompt.strip())
    if fact:
        args = {"subject": fact["s"], "predicate": fact["p"].replace(" ", "_"), "object": fact["o"]}
        return ModelResponse(parts=[ToolCallPart("remember_fact", args)])
    return ModelResponse(parts=[ToolCallPart("recall_memory", {"query": prompt})])


def check(cond: bool, what: str) -> None:
    if not cond:
        raise SystemExit(f"FAILED: {what}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:7878")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--tenant", default="demo")
    ap.add_argument("--user", default="user-" + uuid.uuid4().hex[:8])
    args = ap.parse_args(argv)

    memory = Cairn(args.base_url, api_key=args.api_key)
    scope = MemoryScope(args.tenant, args.user, session="chat-" + uuid.uuid4().hex[:6])
    memory.add_document(
        scope, "notes/household.md",
        "# Household\n\nThe boiler service is booked for March 14 with Northside Heating.",
        media_type="text/markdown",
    )
    memory.add_preference(scope, "communication", "Prefers short answers")

    # Turn 1: the seed loop, three lines.
    user_message = "When is the boiler service?"
    turn = memory.prepare_agent_turn(scope, user_message, token_budget=1_200)
    assistant_message = model(user_message, turn.memory_pack.markdown)
    receipt = memory.complete_agent_turn(turn, assistant_message, source="agent_loop")
    print(f"user: {user_message}\nassistant: {assistant_message}\n  cited: {turn.cited_refs(assistant_message)}\n  receipt: {receipt.turn_id} {receipt.user_message_ref} {receipt.assistant_message_ref}\n")
    check("March 14" in assistant_message and turn.cited_refs(assistant_message), "turn 1 answers from the document, cited")

    # Turns 2 and 3: a Pydantic AI agent with memory tools and a stand-in model.
    agent = memory_agent(FunctionModel(stand_in))
    results = []
    for question in ["Remember that Dana works at Northside Heating.", "Who is booked for the boiler service?"]:
        r = run_turn(agent, memory, scope, question, source="agent_loop")
        results.append(r)
        print(f"user: {question}\nassistant: {r.answer}\n  cited: {r.refers_to}\n  receipt: {r.receipt.turn_id} {r.receipt.user_message_ref} {r.receipt.assistant_message_ref}\n")
    check(results[0].answer.startswith("Noted (fact:"), "turn 2 stored the fact with the tool")
    check(any(ref.startswith("doc:") for ref in results[1].refers_to), "turn 3 cites the document it recalled")

    page = memory.conversation_messages(scope, scope.session)
    check(page.total == 6, f"three turns, six messages recorded (got {page.total})")
    facts = memory.list_facts(scope, subject="Dana").facts
    check([f.object for f in facts] == ["Northside Heating"], "the fact is in memory")
    print(f"ok: {page.total} messages in conversation {scope.session}; facts: {[(f.subject, f.predicate, f.object) for f in facts]}")
    memory.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
