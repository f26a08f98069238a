"""Every error class, provoked on the real server (``unavailable`` is in test_retry.py: it
needs the stand-in), with its stable code, status, message, hint and request id."""

from __future__ import annotations

import re

import pytest

from cairn_memory import (
    AuthError,
    BadInputError,
    Cairn,
    CairnError,
    ConflictError,
    ForbiddenError,
    MemoryScope,
    NotFoundError,
    TurnConflictError,
    UnauthorizedError,
    errors,
)

from conftest import KEYED_TENANT, OWNER_KEY, new_scope, strict
from servers import REPO


def _raises(cls, code, status, fn, *args, **kwargs) -> CairnError:
    with pytest.raises(cls) as info:
        fn(*args, **kwargs)
    e = info.value
    assert (e.code, e.status) == (code, status), repr(e)
    assert e.message and re.fullmatch(r"[0-9a-f]{32}", e.request_id or ""), repr(e)
    assert e.body == {"error": {k: v for k, v in {"code": code, "message": e.message, "hint": e.hint}.items() if v is not None}}
    return e


# --- bad input ---------------------------------------------------------------------------------


def test_bad_input(memory: Cairn, scope, tmp_path):
    e = _raises(BadInputError, "invalid_request", 400, memory.recall, scope.replace(tenant="not ok"), "anything")
    assert "tenant" in e.message
    _raises(BadInputError, "invalid_request", 400, memory.recall, scope, "x", token_budget=-1)
    _raises(BadInputError, "invalid_request", 400, memory.prepare_agent_turn, scope, "q" * 8193)
    e = _raises(BadInputError, "too_many_items", 400, memory.recall, scope, "x", filters={"kinds": ["chunk"] * 17})
    assert e.hint == "split the request"
    e = _raises(BadInputError, "payload_too_large", 413, memory.add_document, scope, "big.txt", "hi", metadata={"k": "x" * 17_000})
    assert "16384" in e.message
    _raises(BadInputError, "empty_document", 422, memory.add_document, scope, "empty.txt", "   ")
    exe = tmp_path / "tool.exe"
    exe.write_bytes(b"MZ\x90\x00")
    _raises(BadInputError, "unsupported_media_type", 415, memory.upload_document, scope, exe)
    _raises(BadInputError, "extraction_failed", 422, memory.upload_document, scope, b"not a pdf", filename="scan.pdf")
    e = _raises(
        BadInputError, "evidence_not_found", 422,
        memory.propose_candidate, scope, "scout", "fact", "Alice likes tea", ["doc:0000"], 0.9,
    )
    assert "doc:0000" in e.message


# --- not found ---------------------------------------------------------------------------------


def test_not_found(memory: Cairn, scope):
    _raises(NotFoundError, "not_found", 404, memory.get_document, scope, "no-such-doc")
    _raises(NotFoundError, "not_found", 404, memory.forget, scope, "doc:no-such-doc")
    _raises(NotFoundError, "not_found", 404, memory.conversation_messages, scope, "no-such-conversation")
    _raises(NotFoundError, "not_found", 404, memory.get_grant, scope, "nobody")
    _raises(NotFoundError, "not_found", 404, memory.get_fact, scope, "00000000-0000-0000-0000-000000000000")


# --- conflict ----------------------------------------------------------------------------------


def test_conflict(memory: Cairn, scope):
    doc = memory.add_document(scope, "notes/tea.md", "Alice drinks green tea every morning.")
    cand = memory.propose_candidate(scope, "scout", "preference", "Alice likes green tea", [f"doc:{doc.doc_id}"], 0.8).candidate
    memory.reject_candidate(scope, cand.candidate_id, note="unsure")
    _raises(ConflictError, "conflict", 409, memory.approve_candidate, scope, cand.candidate_id)

    m = {"conversation_id": "c1", "role": "user", "content": "first", "message_id": "m1"}
    memory.add_messages(scope, [m])
    _raises(ConflictError, "conflict", 409, memory.add_messages, scope, [{**m, "content": "second"}])

    memory.issue_grant(scope, "gone", preset="proposer")
    memory.revoke_grant(scope, "gone")
    e = _raises(ConflictError, "conflict", 409, memory.restore_grant, scope, "gone")
    assert not isinstance(e, TurnConflictError)


def test_turn_conflict(memory: Cairn, scope):
    turn = memory.prepare_agent_turn(scope, "What is on today?", turn_id="t-conflict")
    memory.complete_agent_turn(turn, "Nothing yet.")
    e = _raises(TurnConflictError, "turn_conflict", 409, memory.complete_agent_turn, turn, "Something else.")
    assert isinstance(e, ConflictError) and e.hint and "turn id" in e.hint
    # Deleting a completed turn's messages leaves a tombstone: the id cannot be reused.
    report = memory.delete_conversation(scope, scope.session)
    assert report.tombstoned_turns == ["turn:t-conflict"]
    _raises(TurnConflictError, "turn_conflict", 409, memory.complete_agent_turn, turn, "Nothing yet.")


# --- unauthorized and forbidden ------------------------------------------------------------------


def test_unauthorized_with_an_unknown_agent_key(server, scope):
    bogus = strict(Cairn(server.url, api_key=f"cak:{scope.tenant}:{scope.user}:scout:{'0' * 64}"))
    e = _raises(UnauthorizedError, "unauthorized", 401, bogus.stats, scope)
    assert isinstance(e, AuthError) and "Bearer" in (e.hint or "")
    bogus.close()


def test_forbidden_via_a_grant_without_the_right(server, memory: Cairn, scope):
    issued = memory.issue_grant(scope, "reader", operations=["recall", "read"], note="read only")
    assert issued.key.startswith(f"cak:{scope.tenant}:{scope.user}:reader:")
    agent = strict(Cairn(server.url, api_key=issued.key))
    agent.recall(scope, "anything")  # granted
    e = _raises(ForbiddenError, "capability_denied", 403, agent.add_document, scope, "x.txt", "hello")
    assert "write_documents" in e.message
    _raises(ForbiddenError, "capability_denied", 403, agent.issue_grant, scope, "other", preset="trusted")
    # Another user of the same tenant is out of the grant's reach.
    _raises(ForbiddenError, "scope_forbidden", 403, agent.recall, scope.replace(user=scope.user + "-b"), "anything")
    # Suspension applies to the very next request; restoring brings it back.
    memory.suspend_grant(scope, "reader")
    _raises(ForbiddenError, "capability_denied", 403, agent.recall, scope, "anything")
    memory.restore_grant(scope, "reader")
    agent.recall(scope, "anything")
    agent.close()


def test_forbidden_agent_writing_as_another_agent(server, memory: Cairn, scope):
    key = memory.issue_grant(scope, "writer", operations=["write_documents"]).key
    agent = strict(Cairn(server.url, api_key=key))
    report = agent.add_document(scope, "mine.txt", "written by the writer agent")
    assert report.status.value == "created"
    _raises(ForbiddenError, "forbidden", 403, agent.add_document, scope.replace(agent="someone-else"), "theirs.txt", "not mine")
    agent.close()


def test_forbidden_origin_without_keys(server, scope):
    c = strict(Cairn(server.url, headers={"Origin": "http://evil.example"}))
    _raises(ForbiddenError, "forbidden_origin", 403, c.stats, scope)
    c.close()


def test_api_keys_on_a_keyed_server(keyed_server):
    scope = new_scope(tenant=KEYED_TENANT)
    anonymous = strict(Cairn(keyed_server.url))
    _raises(UnauthorizedError, "unauthorized", 401, anonymous.stats, scope)
    wrong = strict(Cairn(keyed_server.url, api_key="not-a-key"))
    _raises(UnauthorizedError, "unauthorized", 401, wrong.stats, scope)
    owner = strict(Cairn(keyed_server.url, api_key=OWNER_KEY))
    assert owner.stats(scope).documents == 0
    _raises(ForbiddenError, "scope_forbidden", 403, owner.stats, MemoryScope("another-tenant", "alice"))
    # The owner's key issues grants; the agent's key works on that server too.
    key = owner.issue_grant(scope, "helper", preset="assistant").key
    helper = strict(Cairn(keyed_server.url, api_key=key))
    helper.add_messages(scope, [{"conversation_id": "c", "role": "user", "content": "hi", "message_id": "1"}])
    _raises(ForbiddenError, "capability_denied", 403, helper.forget, scope, "msg:c/0")
    for c in (anonymous, wrong, owner, helper):
        c.close()


# --- the code table ----------------------------------------------------------------------------


def test_every_documented_code_has_its_class():
    """The README's "Error codes" table and the client's mapping name the same codes."""
    readme = (REPO / "README.md").read_text()
    table = readme.split("### Error codes", 1)[1].split("\n## ", 1)[0]
    codes = dict(re.findall(r"^\| `([a-z_]+)` \| (\d{3}) \|", table, re.M))
    assert codes and set(codes) == set(errors._BY_CODE)
    for code, status in codes.items():
        assert errors.error_class(code) is errors._BY_CODE[code]
        # The status alone leads to the same class or its base (for a body without a code).
        assert issubclass(errors._BY_CODE[code], errors.error_class(None, int(status))), code
