"""Every method of the client, once, on the real server: documents, messages and
conversations, events and candidates, knowledge, traces and tool calls, forget, stats,
grants, health. Each exchange is checked against api/openapi.json by the fixture."""

from __future__ import annotations

import io

import pytest

from cairn_memory import Cairn, NotFoundError, models

from conftest import strict


def test_health_ready_metrics_openapi(memory: Cairn):
    assert memory.health().status == "ok"
    ready = memory.ready()
    assert ready.status == "ready" and ready.backend == "embedded" and ready.model.startswith("bge-small-en")
    assert "cairn_" in memory.metrics() or "requests" in memory.metrics()
    doc = memory.openapi()
    assert doc["info"]["title"] == "Cairn" and "/v1/recall" in doc["paths"]


def test_documents(memory: Cairn, scope, tmp_path):
    md = "# Guide\n\n## Install\n\nRun the installer, then restart the service.\n\n## Use\n\nOpen the dashboard."
    r = memory.add_document(scope, "docs/guide.md", md, media_type="text/markdown", metadata={"team": "ops"})
    assert (r.status, r.version, r.media_type, r.warnings) == (models.DocStatus.CREATED, 1, "text/markdown", [])
    assert memory.add_document(scope, "docs/guide.md", md, media_type="text/markdown", metadata={"team": "ops"}).status == models.DocStatus.UNCHANGED
    r2 = memory.add_document(scope, "docs/guide.md", md + "\n\nCall support if it fails.", media_type="text/markdown")
    # A document id is the hash of its text (ARCHITECTURE "ids"): a new version, a new id.
    assert (r2.status, r2.version, r2.source) == (models.DocStatus.UPDATED, 2, "docs/guide.md")
    assert r2.doc_id != r.doc_id

    # Upload: a path, bytes and a file object.
    p = tmp_path / "notes.txt"
    p.write_text("The backup runs nightly at 02:00.")
    up1 = memory.upload_document(scope, p)
    assert (up1.source, up1.media_type, up1.status) == ("notes.txt", "text/plain", models.DocStatus.CREATED)
    up2 = memory.upload_document(scope, b"# Runbook\n\nRotate the keys monthly.", filename="runbook.md", source="ops/runbook.md")
    assert (up2.source, up2.media_type) == ("ops/runbook.md", "text/markdown")
    up3 = memory.upload_document(scope, io.BytesIO(b"Plain bytes from a stream."), filename="stream.txt")
    assert up3.chunks == 1

    listing = memory.list_documents(scope)
    assert listing.total == 4 and {d.source for d in listing.documents} == {"docs/guide.md", "notes.txt", "ops/runbook.md", "stream.txt"}
    page = memory.list_documents(scope, limit=2, offset=1)
    assert page.total == 4 and len(page.documents) == 2
    info = memory.get_document(scope, r2.doc_id)
    assert (info.source, info.version, info.media_type) == ("docs/guide.md", 2, "text/markdown")

    chunks = memory.document_chunks(scope, r2.doc_id)
    assert chunks.doc_id == r2.doc_id and chunks.total == info.chunks == len(chunks.chunks)
    assert [c.chunk_index for c in chunks.chunks] == list(range(chunks.total))
    assert all(c.ref == f"doc:{r2.doc_id}#{c.chunk_index}" and c.span and c.span[0] < c.span[1] for c in chunks.chunks)
    assert chunks.chunks[0].heading and chunks.chunks[0].heading.startswith("Guide")
    assert "restart the service" in "".join(c.text for c in chunks.chunks)

    pack = memory.recall(scope, "How often are the keys rotated?", token_budget=300, filters={"kinds": ["chunk"]})
    assert pack.citations and pack.citations[0].source == "ops/runbook.md"
    assert all(c.kind == "chunk" for c in pack.citations)

    deleted = memory.delete_document(scope, up1.doc_id)
    assert deleted.doc_id == up1.doc_id and deleted.source == "notes.txt"
    assert memory.delete_document(scope, up1.doc_id) == deleted  # a repeat answers the same
    with pytest.raises(NotFoundError):
        memory.get_document(scope, up1.doc_id)
    counts = memory.stats(scope)
    assert counts.documents == 3 and counts.chunks >= 3


def test_messages_and_conversations(memory: Cairn, scope):
    res = memory.add_messages(
        scope,
        [
            {"conversation_id": "trip", "role": "user", "content": "I land in Lisbon at 9 am on Friday.", "message_id": "a1", "speaker": "Ana"},
            models.MessageInput(conversation_id="trip", role=models.Role.ASSISTANT, content="Noted, Friday 9 am in Lisbon.", message_id="a2"),
            {"conversation_id": "other", "role": "user", "content": "Buy oat milk.", "ts": 1_700_000_000_000},
        ],
    )
    assert [(r.ref, r.created, r.role) for r in res.receipts] == [
        ("msg:trip/0", True, models.Role.USER),
        ("msg:trip/1", True, models.Role.ASSISTANT),
        ("msg:other/0", True, models.Role.USER),
    ]
    replay = memory.add_messages(scope, [{"conversation_id": "trip", "role": "user", "content": "I land in Lisbon at 9 am on Friday.", "message_id": "a1", "speaker": "Ana"}])
    assert (replay.receipts[0].ref, replay.receipts[0].created) == ("msg:trip/0", False)

    one = memory.get_message(scope, res.receipts[0].id)
    assert (one.content, one.speaker, one.ref) == ("I land in Lisbon at 9 am on Friday.", "Ana", "msg:trip/0")
    convs = memory.list_conversations(scope)
    assert convs.total == 2 and {c.conversation_id: c.messages for c in convs.conversations} == {"trip": 2, "other": 1}
    page = memory.conversation_messages(scope, "trip")
    assert [m.seq for m in page.messages] == [0, 1] and page.total == 2
    assert memory.conversation_messages(scope, "trip", limit=1, offset=1).messages[0].seq == 1

    hits = memory.search_messages(scope, "When does the flight to Lisbon arrive?", limit=2)
    assert hits.results and hits.results[0].message.ref.startswith("msg:trip/")
    only_other = memory.search_messages(scope, "milk", conversation_id="other")
    assert [h.message.ref for h in only_other.results] == ["msg:other/0"]

    rep = memory.delete_message(scope, "msg:trip/1")
    assert rep.removed == ["msg:trip/1"]
    assert memory.conversation_messages(scope, "trip").total == 1
    rep = memory.delete_conversation(scope, "other", hard=True)
    assert rep.hard and rep.removed == ["msg:other/0"]
    assert memory.list_conversations(scope).total == 1


def test_events_and_candidates(memory: Cairn, scope):
    ev = memory.post_event(scope, "scout", "Ana said she prefers aisle seats.", ts="2026-01-05T10:00:00Z", metadata={"channel": "sms"})
    assert ev.created and ev.ref == f"evt:{ev.event_id}"
    assert not memory.post_event(scope, "scout", "Ana said she prefers aisle seats.", ts="2026-01-05T10:00:00Z", metadata={"channel": "sms"}).created
    view = memory.get_event(scope, ev.event_id)
    assert (view.content, view.source_agent, view.metadata) == ("Ana said she prefers aisle seats.", "scout", {"channel": "sms"})
    # Events are evidence, never recalled by themselves.
    assert all(not c.ref.startswith("evt:") for c in memory.recall(scope, "Which seats does Ana prefer?").citations)

    proposed = memory.propose_candidate(
        scope, "scout", "preference", "Ana prefers aisle seats", [ev.ref], 0.9,
        knowledge={"kind": "preference", "category": "travel", "preference": "aisle seats"},
    )
    cand = proposed.candidate
    assert proposed.created and cand.status == models.CandidateStatus.PENDING
    assert isinstance(cand.knowledge, models.ProposedKnowledgePreference)
    again = memory.propose_candidate(
        scope, "scout", "preference", "Ana prefers aisle seats", [ev.ref], 0.9,
        knowledge=models.ProposedKnowledgePreference(category="travel", preference="aisle seats"),
    )
    assert not again.created and again.candidate.candidate_id == cand.candidate_id
    other = memory.propose_candidate(scope, "scout", "note", "Ana dislikes red-eye flights", [ev.ref], 0.4).candidate

    assert [c.candidate_id for c in memory.list_candidates(scope, status="pending").candidates] == [cand.candidate_id, other.candidate_id]
    assert memory.get_candidate(scope, cand.candidate_id).content == "Ana prefers aisle seats"
    approved = memory.approve_candidate(scope, cand.candidate_id, note="confirmed by phone")
    assert approved.status == models.CandidateStatus.APPROVED and approved.knowledge_ref.startswith("pref:")
    assert memory.approve_candidate(scope, cand.candidate_id, note="confirmed by phone").status == models.CandidateStatus.APPROVED
    rejected = memory.reject_candidate(scope, other.candidate_id, note="hearsay")
    assert rejected.status == models.CandidateStatus.REJECTED and rejected.note == "hearsay"
    assert memory.list_candidates(scope, status=models.CandidateStatus.REJECTED).total == 1

    pack = memory.recall(scope, "Which seats does Ana prefer?")
    cited = {c.ref: c for c in pack.citations}
    assert approved.memory_ref in cited and cited[approved.memory_ref].trust_origin == models.TrustOrigin.THIRD_PARTY_AGENT
    assert "red-eye" not in pack.markdown  # rejected candidates are never recalled

    # Forgetting the evidence invalidates what rests on it.
    report = memory.forget(scope, ev.ref)
    assert ev.ref in report.removed and cand.ref in report.invalidated
    assert memory.forget(scope, ev.ref) == report  # idempotent: the same report again
    assert memory.get_candidate(scope, cand.candidate_id).status == models.CandidateStatus.INVALIDATED


def test_knowledge(memory: Cairn, scope):
    alice = memory.add_entity(scope, "Alice Johnson", "person", aliases=["AJ"], description="Runs the Lyon office")
    acme = memory.add_entity(scope, "Acme", models.EntityType.ORGANIZATION)
    dup = memory.add_entity(scope, "Acme Corp", "organization", subtype="company")
    assert memory.add_entity(scope, "Alice Johnson", "person", aliases=["AJ"], description="Runs the Lyon office").id == alice.id
    assert memory.get_entity(scope, alice.id).aliases == ["AJ"]
    assert {e.name for e in memory.list_entities(scope).entities} == {"Alice Johnson", "Acme", "Acme Corp"}
    assert [e.name for e in memory.list_entities(scope, type="person").entities] == ["Alice Johnson"]
    assert [e.id for e in memory.entities_by_name(scope, "aj").entities] == [alice.id]
    assert memory.search_entities(scope, "who runs the Lyon office", type="person").results[0].item.id == alice.id

    rel = memory.add_relationship(scope, alice.id, dup.id, "works_at", properties={"since": 2020})
    assert rel.relationship_type == "works_at" and rel.properties == {"since": 2020}
    survivor = memory.merge_entities(scope, dup.id, acme.id, canonical_name="Acme")
    assert survivor.id == acme.id and "Acme Corp" in survivor.aliases
    assert memory.get_entity(scope, dup.id).merged_into == acme.id
    related = memory.related_entities(scope, alice.id, depth=1)
    assert [(r.entity.id, r.depth, r.via.relationship_type) for r in related.related] == [(acme.id, 1, "works_at")]
    assert memory.entity_relationships(scope, acme.id).total == 1
    assert memory.list_relationships(scope, entity_id=alice.id).relationships[0].target_id == acme.id

    pref = memory.add_preference(scope, "food", "Vegetarian", context="when booking restaurants")
    assert memory.add_preference(scope, "food", "Vegetarian", context="when booking restaurants").id == pref.id
    assert [p.id for p in memory.list_preferences(scope, category="food").preferences] == [pref.id]
    assert memory.search_preferences(scope, "what does she eat", limit=1).results[0].item.id == pref.id

    f1 = memory.add_fact(scope, "Alice", "works_at", "Acme", confidence=0.9)
    f2 = memory.add_fact(scope, "Alice", "works_at", "Globex")
    assert f2.conflicts_with == [f1.fact.id]
    conflicts = memory.fact_conflicts(scope)
    assert conflicts.total == 1 and {f.id for f in conflicts.conflicts[0].facts} == {f1.fact.id, f2.fact.id}
    pack = memory.recall(scope, "Where does Alice work?")
    assert pack.conflicts, "recall surfaces the open conflict"
    decl = memory.declare_predicate(scope, "works_at", "single")
    assert decl.cardinality == models.Cardinality.SINGLE
    assert [p.name for p in memory.list_predicates(scope).predicates] == ["works_at"]
    f3 = memory.add_fact(scope, "Alice", "works_at", "Initech", valid_from=1_700_000_000_000, supersede=True)
    assert set(f3.superseded) >= {f1.fact.id}
    assert memory.get_fact(scope, f1.fact.id).status == models.FactStatus.SUPERSEDED
    assert [f.object for f in memory.list_facts(scope, subject="Alice").facts] == ["Initech"]
    history = memory.list_facts(scope, subject="Alice", predicate="works_at", history=True)
    assert {f.object for f in history.facts} == {"Acme", "Globex", "Initech"}
    assert memory.list_facts(scope, at=1_600_000_000_000).total >= 0

    report = memory.forget(scope, f"ent:{alice.id}")
    assert f"ent:{alice.id}" in report.removed
    with pytest.raises(NotFoundError):
        memory.get_entity(scope, alice.id)
    assert memory.forget(scope, f"pref:{pref.id}").removed == [f"pref:{pref.id}"]
    counts = memory.stats(scope)
    assert counts.preferences == 0 and counts.relationships == 0


def test_suggest_entities(memory: Cairn, scope):
    memory.add_messages(scope, [
        {"conversation_id": "c", "role": "user", "content": "I met Bob Stone at the Berlin office.", "message_id": "1"},
        {"conversation_id": "c", "role": "user", "content": "Bob Stone will visit us again in May.", "message_id": "2"},
    ])
    out = memory.suggest_entities(scope, conversation_id="c", min_mentions=2)
    names = {s.name: s for s in out.suggestions}
    assert "Bob Stone" in names and names["Bob Stone"].mentions == 2
    assert names["Bob Stone"].candidate.status == models.CandidateStatus.PENDING
    assert not any(s.created for s in memory.suggest_entities(scope, conversation_id="c", min_mentions=2).suggestions)


def test_traces_and_tool_calls(memory: Cairn, scope):
    trace = memory.start_trace(scope, "Book a train to Lyon", trace_key="lyon-1")
    assert trace.session_id == scope.session
    assert memory.start_trace(scope, "Book a train to Lyon", trace_key="lyon-1").id == trace.id
    step = memory.add_step(scope, trace.id, thought="find trains", action="search", step_number=1)
    assert step.step_number == 1
    assert memory.add_step(scope, trace.id, thought="find trains", action="search", step_number=1).id == step.id
    call = memory.record_tool_call(
        scope, step.id, "train_search", arguments={"to": "Lyon"}, result={"found": 3}, duration_ms=140, call_number=1
    )
    assert (call.call_number, call.status) == (1, models.ToolStatus.SUCCESS)
    memory.record_tool_call(scope, step.id, "train_search", arguments={"to": "Paris"}, status="failure", error="timeout upstream", duration_ms=900)
    step2 = memory.add_step(scope, trace.id, observation="3 trains found")
    assert step2.step_number == 2
    done = memory.complete_trace(scope, trace.id, outcome="booked the 08:15", success=True)
    assert done.success and done.completed_at
    assert memory.complete_trace(scope, trace.id, outcome="booked the 08:15", success=True).completed_at == done.completed_at

    view = memory.get_trace(scope, trace.id)
    assert [s.step_number for s in view.steps] == [1, 2]
    assert [c.tool_name for c in view.steps[0].tool_calls] == ["train_search", "train_search"]
    assert memory.list_traces(scope).traces[0].id == trace.id
    assert memory.list_traces(scope, session="another-session").total == 0
    assert memory.similar_traces(scope, "train booking", success_only=True).results[0].item.id == trace.id
    stats = memory.tool_stats(scope, tool="train_search").tools
    assert [(t.name, t.total_calls, t.successful_calls, t.failed_calls) for t in stats] == [("train_search", 2, 1, 1)]
    assert memory.forget(scope, f"trace:{trace.id}").removed[0] == f"trace:{trace.id}"
    assert memory.stats(scope).traces == 0


def test_grants(server, memory: Cairn, scope):
    issued = memory.issue_grant(scope, "scout", preset="assistant", note="support bot")
    g = issued.grant
    assert (g.agent, g.status, g.tenant, g.user) == ("scout", models.GrantStatus.ACTIVE, scope.tenant, scope.user)
    assert models.Operation.COMPLETE_TURN in g.operations and models.Operation.FORGET not in g.operations
    assert [x.agent for x in memory.list_grants(scope).grants] == ["scout"]
    assert memory.get_grant(scope, "scout").history[0].note == "support bot"

    # The agent runs the loop with its own key; its writes are recorded as itself.
    agent = strict(Cairn(server.url, api_key=issued.key))
    turn = agent.prepare_agent_turn(scope, "Hello, what do you know?", token_budget=200)
    agent.complete_agent_turn(turn, "Nothing yet.", source="scout")
    assert {m.agent for m in memory.conversation_messages(scope, scope.session).messages} == {"scout"}

    assert memory.suspend_grant(scope, "scout", note="pause").status == models.GrantStatus.SUSPENDED
    assert memory.restore_grant(scope, "scout").status == models.GrantStatus.ACTIVE
    revoked = memory.revoke_grant(scope, "scout", note="done")
    assert revoked.status == models.GrantStatus.REVOKED
    assert [h.change for h in revoked.history] == ["issued", "suspended", "restored", "revoked"]
    agent.close()
