"""Two scopes never see each other's memories: another user, or another namespace of the
same user, is another partition."""

from __future__ import annotations

import pytest

from cairn_memory import Cairn, NotFoundError

from conftest import new_scope


@pytest.mark.parametrize("other", ["user", "namespace"])
def test_two_scopes_are_isolated(memory: Cairn, other):
    a = new_scope()
    b = a.replace(user=a.user + "-b") if other == "user" else a.replace(namespace="other-ns")
    doc = memory.add_document(a, "notes/secret.md", "The vault code for Alice is quokka-seven.")
    memory.add_messages(a, [{"conversation_id": "chat", "role": "user", "content": "My locker is the walrus locker.", "message_id": "m1"}])
    memory.add_fact(a, "Alice", "locker", "walrus locker")
    turn = memory.prepare_agent_turn(a, "What is the vault code?", token_budget=400)
    memory.complete_agent_turn(turn, "The vault code is quokka-seven [1].")

    # A sees its own memories.
    pack_a = memory.recall(a, "What is the vault code?", token_budget=400)
    assert any(c.doc_id == doc.doc_id for c in pack_a.citations)
    assert memory.stats(a).documents == 1

    # B sees none of them: recall, lists, counts, reads, forgets.
    pack_b = memory.recall(b, "What is the vault code?", token_budget=400)
    assert pack_b.citations == [] and "quokka" not in pack_b.markdown
    assert pack_b.coverage.value == "none"
    turn_b = memory.prepare_agent_turn(b, "Which locker do I have?", token_budget=400)
    assert turn_b.memory_pack.citations == [] and "walrus" not in turn_b.memory_pack.markdown
    counts = memory.stats(b)
    assert (counts.documents, counts.chunks, counts.messages, counts.turns, counts.facts) == (0, 0, 0, 0, 0)
    assert memory.list_documents(b).total == 0
    assert memory.list_conversations(b).total == 0
    assert memory.list_facts(b).total == 0
    assert memory.search_messages(b, "walrus locker").results == []
    with pytest.raises(NotFoundError):
        memory.get_document(b, doc.doc_id)
    with pytest.raises(NotFoundError):
        memory.forget(b, f"doc:{doc.doc_id}")
    with pytest.raises(NotFoundError):
        memory.conversation_messages(b, "chat")

    # B's failed forget left A untouched.
    assert memory.get_document(a, doc.doc_id).doc_id == doc.doc_id
    assert memory.conversation_messages(a, "chat").total == 1
