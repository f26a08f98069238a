"""The seed loop, end to end, on the real server and model:

    turn = memory.prepare_agent_turn(scope, user_message, token_budget=1_200)
    assistant_message = model(user_message, turn.memory_pack.markdown)
    memory.complete_agent_turn(turn, assistant_message, source="agent_loop")
"""

from __future__ import annotations

import re

import pytest

from cairn_memory import Cairn, TurnConflictError, TurnContext, models

DENTIST = "# Appointments\n\nThe dentist appointment with Dr. Rivera is on Tuesday at 3 pm."


def model(user_message: str, context_markdown: str) -> str:
    """A stand-in for the LLM: answers with the first quoted memory line and its marker."""
    marker = re.search(r"^\[(\d+)\] ", context_markdown, re.M)
    quoted = [l[2:] for l in context_markdown.splitlines() if l.startswith("> ") and "dentist" in l.lower()]
    if not marker or not quoted:
        return "I don't know."
    return f"{quoted[0].strip()} [{marker.group(1)}]"


def test_seed_loop_end_to_end(memory: Cairn, scope):
    doc = memory.add_document(scope, "notes/appointments.md", DENTIST, media_type="text/markdown")
    assert doc.status == models.DocStatus.CREATED and doc.chunks == 1

    user_message = "When is the dentist appointment?"
    turn = memory.prepare_agent_turn(scope, user_message, token_budget=1_200)
    assert isinstance(turn, TurnContext)
    assert turn.contract_version == "agent-turn-v1"
    assert turn.turn_id.startswith("turn-")
    assert turn.user_message == user_message
    assert turn.scope.session == scope.session and turn.scope.tenant == scope.tenant
    pack = turn.memory_pack
    assert pack.token_budget == 1_200 and 0 < pack.token_count <= 1_200
    assert pack.coverage in (models.Coverage.PARTIAL, models.Coverage.FULL)
    assert pack.conflicts == [] and isinstance(pack.unknowns, list)
    assert pack.markdown == pack.context_markdown
    assert "Dr. Rivera" in pack.markdown
    cited = [c for c in pack.citations if c.doc_id == doc.doc_id]
    assert cited and cited[0].ref == f"doc:{doc.doc_id}#0" and cited[0].source == "notes/appointments.md"
    assert f"`{cited[0].ref}`" in pack.markdown  # the Markdown names the ref of each marker

    assistant_message = model(user_message, pack.markdown)
    assert "Tuesday at 3 pm" in assistant_message and f"[{cited[0].n}]" in assistant_message
    receipt = memory.complete_agent_turn(turn, assistant_message, source="agent_loop")
    assert receipt.turn_id == turn.turn_id
    assert receipt.user_message_ref == f"msg:{scope.session}/0"
    assert receipt.assistant_message_ref == f"msg:{scope.session}/1"
    assert re.fullmatch(r"[0-9a-f]{64}", receipt.digest)

    # The pair is recorded verbatim in the session's conversation, once.
    page = memory.conversation_messages(scope, scope.session)
    assert [(m.role, m.content, m.turn_id) for m in page.messages] == [
        (models.Role.USER, user_message, turn.turn_id),
        (models.Role.ASSISTANT, assistant_message, turn.turn_id),
    ]
    assert memory.stats(scope).turns == 1

    # The next turn remembers the last one: the assistant's answer is recalled, cited.
    nxt = memory.prepare_agent_turn(scope, "What did you tell me about Tuesday at 3 pm?", token_budget=1_200)
    assert nxt.turn_id != turn.turn_id
    kinds = {c.ref: c.kind for c in nxt.memory_pack.citations}
    assert any(ref.startswith(f"msg:{scope.session}/") for ref in kinds), kinds

    # Completing again with the same content is a replay: same receipt, nothing new.
    assert memory.complete_agent_turn(turn, assistant_message, source="agent_loop") == receipt
    assert memory.conversation_messages(scope, scope.session).total == 2
    # Other content under the same turn id is a turn conflict.
    with pytest.raises(TurnConflictError) as err:
        memory.complete_agent_turn(turn, "Something else entirely.", source="agent_loop")
    assert err.value.code == "turn_conflict" and err.value.status == 409


def test_own_turn_id_mode_refers_to_and_metadata(memory: Cairn, scope):
    memory.add_document(scope, "notes/appointments.md", DENTIST, media_type="text/markdown")
    turn = memory.prepare_agent_turn(
        scope, "When is the dentist appointment?", turn_id="my-turn-1", token_budget=400, mode="voice"
    )
    assert turn.turn_id == "my-turn-1" and turn.mode == models.TurnMode.VOICE
    answer = model(turn.user_message, turn.memory_pack.markdown)
    refs = turn.cited_refs(answer)
    assert refs and refs[0].startswith("doc:")
    receipt = memory.complete_agent_turn(turn, answer, source="agent_loop", metadata={"latency_ms": 12}, refers_to=refs)
    assert receipt.turn_id == "my-turn-1"
    msgs = memory.conversation_messages(scope, scope.session).messages
    assert [m.metadata.get("latency_ms") for m in msgs] == [12, 12]
    # The low-level form with the same content is the same completion.
    again = memory.complete_turn(
        turn.scope, "my-turn-1", turn.user_message, answer, mode="voice", source="agent_loop",
        metadata={"latency_ms": 12}, refers_to=refs,
    )
    assert again == receipt


async def test_async_client_runs_the_same_loop(amemory, scope):
    await amemory.add_document(scope, "notes/appointments.md", DENTIST, media_type="text/markdown")
    turn = await amemory.prepare_agent_turn(scope, "When is the dentist appointment?", token_budget=1_200)
    assert "Dr. Rivera" in turn.memory_pack.markdown
    answer = model(turn.user_message, turn.memory_pack.markdown)
    receipt = await amemory.complete_agent_turn(turn, answer, source="agent_loop")
    assert receipt.turn_id == turn.turn_id
    page = await amemory.conversation_messages(scope, scope.session)
    assert [m.content for m in page.messages] == [turn.user_message, answer]
