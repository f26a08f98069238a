"""The Cairn clients: :class:`Cairn` (blocking) and :class:`AsyncCairn` (asyncio).

Both have the same methods with the same arguments; on :class:`AsyncCairn` each is a
coroutine (``await memory.recall(...)``). Every method is one route of the HTTP API (its
OpenAPI ``operationId`` is named in the docstring) and returns the generated model of the
route's answer (:mod:`cairn_memory.models`), or raises a :class:`~cairn_memory.CairnError`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import time
from typing import (
    IO,
    Any,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Union,
)

import httpx

from . import models
from ._transport import (
    Call,
    RetryPolicy,
    build_request,
    drop_none,
    dump,
    error_from_response,
    parse,
    retry_after,
    transport_error,
)
from ._version import __version__
from .errors import CairnError
from .scope import MemoryScope, ScopeLike, as_scope

__all__ = ["AsyncCairn", "Cairn", "RetryPolicy", "TurnContext"]

DEFAULT_TIMEOUT = 65.0
"""Seconds; a little over the server's default ``--timeout`` (60 s), so that a slow write
answers with the server's ``504 timeout`` rather than a client-side timeout."""

_MARKER = re.compile(r"\[(\d+)\]")


@dataclasses.dataclass(frozen=True)
class TurnContext:
    """A prepared agent turn (agent-turn-v1): the envelope the server answered, holding the
    turn id, the resolved scope, the user message and the MemoryPack for the model's prompt.

    Pass it back to :meth:`Cairn.complete_agent_turn` with the model's answer.
    """

    envelope: models.TurnEnvelope

    @property
    def turn_id(self) -> str:
        return self.envelope.turn_id

    @property
    def scope(self) -> MemoryScope:
        """The scope as the server resolved it (defaults filled in; for an agent key, the
        agent)."""
        return MemoryScope.from_dict(self.envelope.scope.model_dump())

    @property
    def user_message(self) -> str:
        return self.envelope.user_message

    @property
    def mode(self) -> models.TurnMode:
        return self.envelope.mode

    @property
    def contract_version(self) -> str:
        return self.envelope.contract_version

    @property
    def memory_pack(self) -> models.MemoryPack:
        """The MemoryPack: ``.markdown`` for the prompt, ``.citations``, ``.conflicts``,
        ``.coverage``, ``.unknowns``."""
        return self.envelope.memory_pack

    def cited_refs(self, text: str) -> List[str]:
        """The refs of the ``[n]`` markers that appear in ``text`` (e.g. the assistant's
        answer), in order of first appearance; markers the pack does not have are ignored.
        Useful as ``refers_to`` of the completion."""
        by_n = {c.n: c.ref for c in self.memory_pack.citations}
        out: List[str] = []
        for m in _MARKER.finditer(text):
            ref = by_n.get(int(m.group(1)))
            if ref and ref not in out:
                out.append(ref)
        return out


def _turn_context(envelope: models.TurnEnvelope) -> TurnContext:
    return TurnContext(envelope)


def _has_key(message: Any) -> bool:
    m = dump(message)
    return any(m.get(k) is not None for k in ("message_id", "turn_id", "ts"))


def _read_file(file: Union[str, "os.PathLike[str]", bytes, IO[bytes]], filename: Optional[str]):
    if isinstance(file, (bytes, bytearray)):
        return bytes(file), filename or "upload"
    if isinstance(file, (str, os.PathLike)):
        path = os.fspath(file)
        with open(path, "rb") as f:
            return f.read(), filename or os.path.basename(path)
    data = file.read()
    name = filename or os.path.basename(getattr(file, "name", "") or "upload")
    return data, name


_MEDIA_TYPES = {".md": "text/markdown", ".markdown": "text/markdown", ".txt": "text/plain", ".pdf": "application/pdf"}


class _Api:
    """Every operation, as a :class:`Call`; ``_call`` sends it (blocking or async)."""

    def _call(self, call: Call) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    # --- health ----------------------------------------------------------------------------

    def health(self) -> models.Health:
        """``GET /healthz`` (``healthz``): liveness."""
        return self._call(Call("healthz", idempotent=True))

    def ready(self) -> models.Ready:
        """``GET /readyz`` (``readyz``): readiness (store and model loaded); ``UnavailableError``
        when not."""
        return self._call(Call("readyz", idempotent=True))

    def backup(self, to: str) -> models.BackupManifest:
        """``POST /v1/admin/backup`` (``backup``): back the whole embedded store up into the
        directory ``to`` (absolute, on the server's machine, new or empty) while it keeps
        serving; answers the backup's manifest. The operator's only: a key-less server on
        loopback (``ForbiddenError`` with a key). Not retried (a second call into the same
        directory is refused: it is not empty)."""
        return self._call(Call("backup", json={"to": to}))

    def metrics(self) -> str:
        """``GET /metrics`` (``metrics``): the Prometheus text."""
        return self._call(Call("metrics", idempotent=True))

    def openapi(self) -> Dict[str, Any]:
        """``GET /v1/openapi.json`` (``openapi_doc``): the server's OpenAPI document."""
        return self._call(Call("openapi_doc", idempotent=True))

    # --- recall and agent turns -------------------------------------------------------------

    def recall(
        self,
        scope: ScopeLike,
        query: str,
        *,
        token_budget: Optional[int] = None,
        filters: Union[models.RecallFilters, Mapping[str, Any], None] = None,
    ) -> models.MemoryPack:
        """``POST /v1/recall`` (``recall_handler``): a token-budgeted, cited MemoryPack for
        ``query`` (1 to 8192 bytes). ``token_budget`` defaults to the server's 1000."""
        s = as_scope(scope)
        body = drop_none(scope=s.to_dict(), query=query, token_budget=token_budget, filters=filters)
        return self._call(Call("recall_handler", json=body, idempotent=True))

    def prepare_agent_turn(
        self,
        scope: ScopeLike,
        user_message: str,
        turn_id: Optional[str] = None,
        *,
        token_budget: Optional[int] = None,
        mode: Union[models.TurnMode, str, None] = None,
        filters: Union[models.RecallFilters, Mapping[str, Any], None] = None,
    ) -> TurnContext:
        """``POST /v1/turns/prepare`` (``prepare_handler``): agent-turn-v1 prepare. Recalls
        for the user's message and answers the envelope (turn id, scope, MemoryPack) as a
        :class:`TurnContext`. Stores nothing. Without ``turn_id`` the server picks a new one
        (``turn-<uuid>``); pass your own to tie the turn to an id you already keep.

        ``mode`` is ``"text"`` (default) or ``"voice"``."""
        s = as_scope(scope)
        body = drop_none(
            scope=s.to_dict(),
            user_message=user_message,
            turn_id=turn_id,
            token_budget=token_budget,
            mode=mode,
            filters=filters,
        )
        return self._call(Call("prepare_handler", json=body, idempotent=True, then=_turn_context))

    def complete_agent_turn(
        self,
        turn: Union[TurnContext, models.TurnEnvelope],
        assistant_message: str,
        *,
        source: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        refers_to: Optional[Sequence[str]] = None,
    ) -> models.TurnReceipt:
        """``POST /v1/turns/{turn_id}/complete`` (``complete_handler``): agent-turn-v1
        complete. Records the turn's exact user message and ``assistant_message`` in the
        conversation ``turn.scope.session`` and answers the receipt (both message refs, the
        time, a digest of the content).

        **Safe to retry.** The completion is keyed by the turn id the prepared ``turn``
        carries: sending it again with the same content records nothing new and answers the
        same receipt. So after a timeout or a connection reset — when you cannot know whether
        the server stored the turn — call this again with the same ``turn`` and the same
        arguments: the turn is recorded exactly once. The client does this by itself for a
        lost connection or ``503 unavailable`` (see :class:`RetryPolicy`); it does not for a
        timeout, so that the caller decides. Other content under the same turn id is
        :class:`~cairn_memory.TurnConflictError` (``409 turn_conflict``).

        ``source`` (at most 1 KiB) names who completed the turn (e.g. ``"agent_loop"``);
        ``metadata`` (at most 16 KiB as JSON) is stored on both messages; ``refers_to`` lists
        the refs the answer cites (:meth:`TurnContext.cited_refs` finds them from the
        ``[n]`` markers)."""
        if isinstance(turn, models.TurnEnvelope):
            turn = TurnContext(turn)
        return self.complete_turn(
            turn.scope,
            turn.turn_id,
            turn.user_message,
            assistant_message,
            mode=turn.mode,
            source=source,
            metadata=metadata,
            refers_to=refers_to,
        )

    def complete_turn(
        self,
        scope: ScopeLike,
        turn_id: str,
        user_message: str,
        assistant_message: str,
        *,
        mode: Union[models.TurnMode, str, None] = None,
        source: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        refers_to: Optional[Sequence[str]] = None,
    ) -> models.TurnReceipt:
        """``POST /v1/turns/{turn_id}/complete`` without a prepared :class:`TurnContext` (e.g.
        when only the turn id survived a restart). Idempotent like
        :meth:`complete_agent_turn`: the same turn id with the same content is a replay."""
        s = as_scope(scope)
        body = drop_none(
            scope=s.to_dict(),
            user_message=user_message,
            assistant_message=assistant_message,
            source=source,
            mode=mode,
            metadata=dict(metadata) if metadata is not None else None,
            refers_to=list(refers_to) if refers_to is not None else None,
        )
        return self._call(Call("complete_handler", path={"turn_id": turn_id}, json=body, idempotent=True))

    # --- documents --------------------------------------------------------------------------

    def add_document(
        self,
        scope: ScopeLike,
        source: str,
        text: str,
        *,
        media_type: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> models.DocumentReport:
        """``POST /v1/documents`` (``post_document``): store a text or Markdown document
        (``media_type`` ``text/plain``, the default, or ``text/markdown``). ``source`` is its
        stable key: the same source with new text is a new version, the same text again is
        ``status: unchanged`` (so a retry is safe)."""
        s = as_scope(scope)
        body = drop_none(
            scope=s.to_dict(),
            source=source,
            text=text,
            media_type=media_type,
            metadata=dict(metadata) if metadata is not None else None,
        )
        return self._call(Call("post_document", json=body, idempotent=True))

    def upload_document(
        self,
        scope: ScopeLike,
        file: Union[str, "os.PathLike[str]", bytes, IO[bytes]],
        *,
        filename: Optional[str] = None,
        source: Optional[str] = None,
        content_type: Optional[str] = None,
    ) -> models.DocumentReport:
        """``POST /v1/documents/upload`` (``upload_document``): store a file (txt, md, pdf)
        given as a path, bytes or a binary file object. The type comes from ``content_type``,
        else the file name's extension; ``source`` defaults (on the server) to the file
        name. The file is read into memory once, so a retry sends the same bytes."""
        s = as_scope(scope)
        data, name = _read_file(file, filename)
        ctype = content_type or _MEDIA_TYPES.get(os.path.splitext(name)[1].lower(), "application/octet-stream")
        form = {k: v for k, v in s.to_dict().items()}
        if source is not None:
            form["source"] = source
        return self._call(
            Call("upload_document", data=form, files={"file": (name, data, ctype)}, idempotent=True)
        )

    def list_documents(
        self, scope: ScopeLike, *, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> models.DocumentList:
        """``GET /v1/documents`` (``list_documents``): one page of the scope's documents
        (``limit`` default 100, at most 1000) and the total."""
        s = as_scope(scope)
        return self._call(Call("list_documents", params={**s.partition(), "limit": limit, "offset": offset}, idempotent=True))

    def get_document(self, scope: ScopeLike, doc_id: str) -> models.DocumentInfo:
        """``GET /v1/documents/{id}`` (``get_document``): a document's current version."""
        s = as_scope(scope)
        return self._call(Call("get_document", path={"id": doc_id}, params=s.partition(), idempotent=True))

    def document_chunks(
        self, scope: ScopeLike, doc_id: str, *, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> models.ChunkList:
        """``GET /v1/documents/{id}/chunks`` (``document_chunks``): the current version's
        chunks in order, with page, span and heading."""
        s = as_scope(scope)
        return self._call(
            Call("document_chunks", path={"id": doc_id}, params={**s.partition(), "limit": limit, "offset": offset}, idempotent=True)
        )

    def delete_document(self, scope: ScopeLike, doc_id: str, *, hard: bool = False) -> models.DocumentInfo:
        """``DELETE /v1/documents/{id}`` (``delete_document``): forget a document and what
        derives from it; answers the deleted document. Idempotent (a repeat answers the same)."""
        s = as_scope(scope)
        return self._call(
            Call("delete_document", path={"id": doc_id}, params={**s.partition(), "hard": hard or None}, idempotent=True)
        )

    def stats(self, scope: ScopeLike) -> models.Counts:
        """``GET /v1/stats`` (``stats``): what the scope's partition holds, per kind."""
        s = as_scope(scope)
        return self._call(Call("stats", params=s.partition(), idempotent=True))

    # --- messages and conversations ----------------------------------------------------------

    def add_messages(
        self, scope: ScopeLike, messages: Iterable[Union[models.MessageInput, Mapping[str, Any]]]
    ) -> models.MessagesResponse:
        """``POST /v1/messages`` (``post_messages``): record 1 to 1000 conversation messages
        (``{conversation_id, role, content, message_id?, turn_id?, ts?, speaker?,
        metadata?}``); one receipt each.

        A message with a key (``message_id``, else ``turn_id``, else ``ts``) is idempotent; one
        without is recorded anew every time. So the call is retried after ``unavailable`` or
        a lost connection only when every message has a key."""
        s = as_scope(scope)
        items = [dump(dict(m)) if isinstance(m, Mapping) else dump(m) for m in messages]
        return self._call(
            Call("post_messages", json={"scope": s.to_dict(), "messages": items}, idempotent=bool(items) and all(_has_key(m) for m in items))
        )

    def get_message(self, scope: ScopeLike, message_id: str) -> models.MessageView:
        """``GET /v1/messages/{id}`` (``get_message``): one message by its id (the receipt's
        ``id``, a UUID)."""
        s = as_scope(scope)
        return self._call(Call("get_message", path={"ref": message_id}, params=s.partition(), idempotent=True))

    def delete_message(self, scope: ScopeLike, ref: str, *, hard: bool = False) -> models.ForgetReport:
        """``DELETE /v1/messages/{ref}`` (``delete_message``): forget one message by its ref
        (``msg:<conversation>/<seq>``; the client URL-encodes it)."""
        s = as_scope(scope)
        return self._call(
            Call("delete_message", path={"ref": ref}, params={**s.partition(), "hard": hard or None}, idempotent=True)
        )

    def search_messages(
        self,
        scope: ScopeLike,
        q: str,
        *,
        conversation_id: Optional[str] = None,
        limit: Optional[int] = None,
        min_score: Optional[float] = None,
    ) -> models.MessageSearch:
        """``GET /v1/messages/search`` (``search_messages``): messages by meaning (cosine
        similarity, best first)."""
        s = as_scope(scope)
        params = {**s.partition(), "q": q, "conversation_id": conversation_id, "limit": limit, "min_score": min_score}
        return self._call(Call("search_messages", params=params, idempotent=True))

    def list_conversations(
        self, scope: ScopeLike, *, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> models.ConversationList:
        """``GET /v1/conversations`` (``list_conversations``): the partition's conversations,
        most recent first."""
        s = as_scope(scope)
        return self._call(Call("list_conversations", params={**s.partition(), "limit": limit, "offset": offset}, idempotent=True))

    def conversation_messages(
        self, scope: ScopeLike, conversation_id: str, *, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> models.ConversationPage:
        """``GET /v1/conversations/{id}/messages`` (``list_conversation``): a conversation's
        messages in order."""
        s = as_scope(scope)
        return self._call(
            Call(
                "list_conversation",
                path={"id": conversation_id},
                params={**s.partition(), "limit": limit, "offset": offset},
                idempotent=True,
            )
        )

    def delete_conversation(self, scope: ScopeLike, conversation_id: str, *, hard: bool = False) -> models.ForgetReport:
        """``DELETE /v1/conversations/{id}`` (``delete_conversation``): forget a whole
        conversation."""
        s = as_scope(scope)
        return self._call(
            Call("delete_conversation", path={"id": conversation_id}, params={**s.partition(), "hard": hard or None}, idempotent=True)
        )

    # --- events and candidates --------------------------------------------------------------

    def post_event(
        self,
        scope: ScopeLike,
        source_agent: str,
        content: str,
        *,
        ts: Union[int, str, None] = None,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> models.EventReceipt:
        """``POST /v1/events`` (``post_event``): a third-party agent's event, stored verbatim
        as evidence (``evt:<id>``) and never recalled by itself. ``ts`` (RFC 3339 or epoch ms)
        is part of the id; without it the server uses the time of recording, so only a call
        with ``ts`` is retried automatically."""
        s = as_scope(scope)
        body = drop_none(scope=s.to_dict(), source_agent=source_agent, content=content, ts=ts, metadata=dict(metadata) if metadata is not None else None)
        return self._call(Call("post_event", json=body, idempotent=ts is not None))

    def get_event(self, scope: ScopeLike, event_id: str) -> models.EventView:
        """``GET /v1/events/{id}`` (``get_event``)."""
        s = as_scope(scope)
        return self._call(Call("get_event", path={"id": event_id}, params=s.partition(), idempotent=True))

    def propose_candidate(
        self,
        scope: ScopeLike,
        source_agent: str,
        memory_type: str,
        content: str,
        evidence_refs: Sequence[str],
        confidence: float,
        *,
        knowledge: Union[models.ProposedKnowledgeFact, models.ProposedKnowledgePreference, models.ProposedKnowledgeEntity, Mapping[str, Any], None] = None,
        metadata: Optional[Mapping[str, Any]] = None,
    ) -> models.ProposeResponse:
        """``POST /v1/candidates`` (``propose``): propose a memory citing 1 to 32 evidence refs
        (``doc:``, ``msg:``, ``evt:``) that exist in the scope; it starts ``pending`` and is
        recalled only once approved. Content-addressed: a repeat answers the stored candidate
        with ``created: False``."""
        s = as_scope(scope)
        body = drop_none(
            scope=s.to_dict(),
            source_agent=source_agent,
            memory_type=memory_type,
            content=content,
            evidence_refs=list(evidence_refs),
            confidence=confidence,
            knowledge=dict(knowledge) if isinstance(knowledge, Mapping) else knowledge,
            metadata=dict(metadata) if metadata is not None else None,
        )
        return self._call(Call("propose", json=body, idempotent=True))

    def list_candidates(
        self,
        scope: ScopeLike,
        *,
        status: Union[models.CandidateStatus, str, None] = None,
        limit: Optional[int] = None,
        offset: Optional[int] = None,
    ) -> models.CandidateList:
        """``GET /v1/candidates`` (``list_candidates``): candidates, oldest first; ``status``:
        ``pending``, ``approved``, ``rejected``, ``invalidated``."""
        s = as_scope(scope)
        return self._call(
            Call("list_candidates", params={**s.partition(), "status": status, "limit": limit, "offset": offset}, idempotent=True)
        )

    def get_candidate(self, scope: ScopeLike, candidate_id: str) -> models.CandidateView:
        """``GET /v1/candidates/{id}`` (``get_candidate``)."""
        s = as_scope(scope)
        return self._call(Call("get_candidate", path={"id": candidate_id}, params=s.partition(), idempotent=True))

    def approve_candidate(self, scope: ScopeLike, candidate_id: str, *, note: Optional[str] = None) -> models.CandidateView:
        """``POST /v1/candidates/{id}/approve`` (``approve``): the candidate becomes a
        searchable memory. Idempotent; approving a rejected one is ``ConflictError``."""
        s = as_scope(scope)
        return self._call(Call("approve", path={"id": candidate_id}, json=drop_none(scope=s.to_dict(), note=note), idempotent=True))

    def reject_candidate(self, scope: ScopeLike, candidate_id: str, *, note: Optional[str] = None) -> models.CandidateView:
        """``POST /v1/candidates/{id}/reject`` (``reject``). Idempotent; rejecting an approved
        one is ``ConflictError``."""
        s = as_scope(scope)
        return self._call(Call("reject", path={"id": candidate_id}, json=drop_none(scope=s.to_dict(), note=note), idempotent=True))

    # --- forget -----------------------------------------------------------------------------

    def forget(self, scope: ScopeLike, ref: str, *, hard: bool = False) -> models.ForgetReport:
        """``POST /v1/forget`` (``forget_handler``): forget what ``ref`` names (``doc:``,
        ``msg:``, ``conv:``, ``turn:``, ``evt:``, ``cand:``, ``mem:``, ``ent:``, ``pref:``,
        ``fact:``, ``rel:``, ``trace:``) and what derives from it. Idempotent: a repeat answers
        the same report."""
        s = as_scope(scope)
        return self._call(Call("forget_handler", json=drop_none(scope=s.to_dict(), ref=ref, hard=hard or None), idempotent=True))

    # --- grants -----------------------------------------------------------------------------

    def issue_grant(
        self,
        scope: ScopeLike,
        agent: str,
        *,
        operations: Optional[Sequence[Union[models.Operation, str]]] = None,
        preset: Union[models.GrantPreset, str, None] = None,
        note: Optional[str] = None,
        public_key: Union[models.PublicJwk, Mapping[str, Any], None] = None,
    ) -> models.IssuedGrant:
        """``POST /v1/grants`` (``issue``): give ``agent`` a grant on the scope's tenant and
        user — ``operations`` and/or a ``preset`` (``proposer``, ``assistant``, ``trusted``) —
        and its own key, answered only here (``.key``; use it as another client's
        ``api_key``). The owner's call (a full key, or the local operator). Not retried: a
        second issue makes a new key."""
        s = as_scope(scope)
        body = drop_none(
            tenant=s.tenant,
            user=s.user,
            agent=agent,
            operations=list(operations) if operations is not None else None,
            preset=preset,
            note=note,
            public_key=dict(public_key) if isinstance(public_key, Mapping) else public_key,
        )
        return self._call(Call("issue", json=body, idempotent=False))

    def list_grants(self, scope: ScopeLike) -> models.GrantList:
        """``GET /v1/grants`` (``list``): the grants of the scope's tenant and user, with their
        history."""
        s = as_scope(scope)
        return self._call(Call("list", params={"tenant": s.tenant, "user": s.user}, idempotent=True))

    def get_grant(self, scope: ScopeLike, agent: str) -> models.GrantView:
        """``GET /v1/grants/{agent}`` (``get_grant``)."""
        s = as_scope(scope)
        return self._call(Call("get_grant", path={"agent": agent}, params={"tenant": s.tenant, "user": s.user}, idempotent=True))

    def _grant_change(self, op: str, scope: ScopeLike, agent: str, note: Optional[str]) -> Any:
        s = as_scope(scope)
        body = drop_none(tenant=s.tenant, user=s.user, note=note)
        return self._call(Call(op, path={"agent": agent}, json=body, idempotent=True))

    def suspend_grant(self, scope: ScopeLike, agent: str, *, note: Optional[str] = None) -> models.GrantView:
        """``POST /v1/grants/{agent}/suspend`` (``suspend``): applies to the agent's very next
        request."""
        return self._grant_change("suspend", scope, agent, note)

    def revoke_grant(self, scope: ScopeLike, agent: str, *, note: Optional[str] = None) -> models.GrantView:
        """``POST /v1/grants/{agent}/revoke`` (``revoke``): final; issue a new grant (a new key)
        instead."""
        return self._grant_change("revoke", scope, agent, note)

    def restore_grant(self, scope: ScopeLike, agent: str, *, note: Optional[str] = None) -> models.GrantView:
        """``POST /v1/grants/{agent}/restore`` (``restore``): a suspended grant becomes active
        again; a revoked one is ``ConflictError``."""
        return self._grant_change("restore", scope, agent, note)

    # --- knowledge: entities and relationships -----------------------------------------------

    def add_entity(
        self,
        scope: ScopeLike,
        name: str,
        type: Union[models.EntityType, str],
        *,
        subtype: Optional[str] = None,
        description: Optional[str] = None,
        aliases: Optional[Sequence[str]] = None,
        trust_origin: Union[models.TrustOrigin, str, None] = None,
    ) -> models.Entity:
        """``POST /v1/entities`` (``add_entity``): store an entity (``person``,
        ``organization``, ``location``, ``event``, ``object``, ``other``); idempotent by name
        and type."""
        s = as_scope(scope)
        body = drop_none(
            scope=s.to_dict(),
            name=name,
            type=type,
            subtype=subtype,
            description=description,
            aliases=list(aliases) if aliases is not None else None,
            trust_origin=trust_origin,
        )
        return self._call(Call("add_entity", json=body, idempotent=True))

    def list_entities(
        self,
        scope: ScopeLike,
        *,
        type: Union[models.EntityType, str, None] = None,
        limit: Optional[int] = None,
        offset: Optional[int] = None,
    ) -> models.EntityList:
        """``GET /v1/entities`` (``list_entities``)."""
        s = as_scope(scope)
        return self._call(Call("list_entities", params={**s.partition(), "type": type, "limit": limit, "offset": offset}, idempotent=True))

    def get_entity(self, scope: ScopeLike, entity_id: str) -> models.Entity:
        """``GET /v1/entities/{id}`` (``get_entity``); a merged entity answers with
        ``merged_into``."""
        s = as_scope(scope)
        return self._call(Call("get_entity", path={"id": entity_id}, params=s.partition(), idempotent=True))

    def entities_by_name(self, scope: ScopeLike, name: str) -> models.EntityList:
        """``GET /v1/entities/by-name`` (``entities_by_name``): by exact name or alias
        (case-insensitive)."""
        s = as_scope(scope)
        return self._call(Call("entities_by_name", params={**s.partition(), "name": name}, idempotent=True))

    def search_entities(
        self, scope: ScopeLike, q: str, *, type: Union[models.EntityType, str, None] = None, limit: Optional[int] = None
    ) -> models.EntitySearch:
        """``GET /v1/entities/search`` (``search_entities``): by meaning."""
        s = as_scope(scope)
        return self._call(Call("search_entities", params={**s.partition(), "q": q, "type": type, "limit": limit}, idempotent=True))

    def merge_entities(
        self, scope: ScopeLike, source_id: str, target_id: str, *, canonical_name: Optional[str] = None
    ) -> models.Entity:
        """``POST /v1/entities/merge`` (``merge_entities``): merge ``source_id`` into
        ``target_id``; answers the survivor. Not retried automatically."""
        s = as_scope(scope)
        body = drop_none(scope=s.to_dict(), source_id=source_id, target_id=target_id, canonical_name=canonical_name)
        return self._call(Call("merge_entities", json=body, idempotent=False))

    def suggest_entities(
        self,
        scope: ScopeLike,
        *,
        conversation_id: Optional[str] = None,
        min_mentions: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> models.SuggestionList:
        """``POST /v1/entities/suggest`` (``suggest_entities``): entity candidates (pending
        review) proposed from the stored messages. Content-addressed, so a repeat proposes
        nothing new."""
        s = as_scope(scope)
        body = drop_none(scope=s.to_dict(), conversation_id=conversation_id, min_mentions=min_mentions, limit=limit)
        return self._call(Call("suggest_entities", json=body, idempotent=True))

    def related_entities(
        self, scope: ScopeLike, entity_id: str, *, depth: Optional[int] = None, relationship_type: Optional[str] = None
    ) -> models.RelatedList:
        """``GET /v1/entities/{id}/related`` (``related_entities``): traversal, 1 to 3 hops,
        both directions."""
        s = as_scope(scope)
        params = {**s.partition(), "depth": depth, "relationship_type": relationship_type}
        return self._call(Call("related_entities", path={"id": entity_id}, params=params, idempotent=True))

    def entity_relationships(
        self, scope: ScopeLike, entity_id: str, *, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> models.RelationshipList:
        """``GET /v1/entities/{id}/relationships`` (``entity_relationships``): its edges."""
        s = as_scope(scope)
        params = {**s.partition(), "limit": limit, "offset": offset}
        return self._call(Call("entity_relationships", path={"id": entity_id}, params=params, idempotent=True))

    def add_relationship(
        self,
        scope: ScopeLike,
        source_id: str,
        target_id: str,
        relationship_type: str,
        *,
        properties: Optional[Mapping[str, Any]] = None,
        trust_origin: Union[models.TrustOrigin, str, None] = None,
    ) -> models.Relationship:
        """``POST /v1/relationships`` (``add_relationship``): a typed, directed edge;
        idempotent by source, type and target."""
        s = as_scope(scope)
        body = drop_none(
            scope=s.to_dict(),
            source_id=source_id,
            target_id=target_id,
            relationship_type=relationship_type,
            properties=dict(properties) if properties is not None else None,
            trust_origin=trust_origin,
        )
        return self._call(Call("add_relationship", json=body, idempotent=True))

    def list_relationships(
        self, scope: ScopeLike, *, entity_id: Optional[str] = None, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> models.RelationshipList:
        """``GET /v1/relationships`` (``list_relationships``)."""
        s = as_scope(scope)
        params = {**s.partition(), "entity_id": entity_id, "limit": limit, "offset": offset}
        return self._call(Call("list_relationships", params=params, idempotent=True))

    # --- knowledge: preferences --------------------------------------------------------------

    def add_preference(
        self,
        scope: ScopeLike,
        category: str,
        preference: str,
        *,
        context: Optional[str] = None,
        trust_origin: Union[models.TrustOrigin, str, None] = None,
    ) -> models.Preference:
        """``POST /v1/preferences`` (``add_preference``); idempotent by category and text."""
        s = as_scope(scope)
        body = drop_none(scope=s.to_dict(), category=category, preference=preference, context=context, trust_origin=trust_origin)
        return self._call(Call("add_preference", json=body, idempotent=True))

    def list_preferences(
        self, scope: ScopeLike, *, category: Optional[str] = None, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> models.PreferenceList:
        """``GET /v1/preferences`` (``list_preferences``): oldest first."""
        s = as_scope(scope)
        params = {**s.partition(), "category": category, "limit": limit, "offset": offset}
        return self._call(Call("list_preferences", params=params, idempotent=True))

    def search_preferences(
        self, scope: ScopeLike, q: str, *, category: Optional[str] = None, limit: Optional[int] = None
    ) -> models.PreferenceSearch:
        """``GET /v1/preferences/search`` (``search_preferences``): by meaning."""
        s = as_scope(scope)
        params = {**s.partition(), "q": q, "category": category, "limit": limit}
        return self._call(Call("search_preferences", params=params, idempotent=True))

    # --- knowledge: facts and predicates ----------------------------------------------------

    def add_fact(
        self,
        scope: ScopeLike,
        subject: str,
        predicate: str,
        object: str,
        *,
        valid_from: Optional[int] = None,
        valid_until: Optional[int] = None,
        confidence: Optional[float] = None,
        evidence_refs: Optional[Sequence[str]] = None,
        supersede: Optional[bool] = None,
        trust_origin: Union[models.TrustOrigin, str, None] = None,
    ) -> models.FactOutcome:
        """``POST /v1/facts`` (``add_fact``): a subject–predicate–object fact (validity in
        epoch ms). Answers the fact, what it superseded and what it conflicts with
        (supersession or conflict, never a silent overwrite). Content-addressed: a repeat is
        the same record."""
        s = as_scope(scope)
        body = drop_none(
            scope=s.to_dict(),
            subject=subject,
            predicate=predicate,
            object=object,
            valid_from=valid_from,
            valid_until=valid_until,
            confidence=confidence,
            evidence_refs=list(evidence_refs) if evidence_refs is not None else None,
            supersede=supersede,
            trust_origin=trust_origin,
        )
        return self._call(Call("add_fact", json=body, idempotent=True))

    def list_facts(
        self,
        scope: ScopeLike,
        *,
        subject: Optional[str] = None,
        predicate: Optional[str] = None,
        history: Optional[bool] = None,
        at: Optional[int] = None,
        limit: Optional[int] = None,
        offset: Optional[int] = None,
    ) -> models.FactList:
        """``GET /v1/facts`` (``list_facts``): the facts that hold now (``at``: then), or with
        ``history`` all of them with their status; oldest first."""
        s = as_scope(scope)
        params = {**s.partition(), "subject": subject, "predicate": predicate, "history": history, "at": at, "limit": limit, "offset": offset}
        return self._call(Call("list_facts", params=params, idempotent=True))

    def get_fact(self, scope: ScopeLike, fact_id: str) -> models.Fact:
        """``GET /v1/facts/{id}`` (``get_fact``)."""
        s = as_scope(scope)
        return self._call(Call("get_fact", path={"id": fact_id}, params=s.partition(), idempotent=True))

    def fact_conflicts(
        self, scope: ScopeLike, *, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> models.FactConflictList:
        """``GET /v1/facts/conflicts`` (``fact_conflicts``): open conflicts between current
        facts."""
        s = as_scope(scope)
        return self._call(Call("fact_conflicts", params={**s.partition(), "limit": limit, "offset": offset}, idempotent=True))

    def declare_predicate(
        self, scope: ScopeLike, predicate: str, cardinality: Union[models.Cardinality, str]
    ) -> models.Predicate:
        """``PUT /v1/predicates`` (``declare_predicate``): ``single`` (a new object supersedes)
        or ``multi`` (objects stand side by side)."""
        s = as_scope(scope)
        body = drop_none(scope=s.to_dict(), predicate=predicate, cardinality=cardinality)
        return self._call(Call("declare_predicate", json=body, idempotent=True))

    def list_predicates(
        self, scope: ScopeLike, *, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> models.PredicateList:
        """``GET /v1/predicates`` (``list_predicates``): the declared predicates, by name."""
        s = as_scope(scope)
        return self._call(Call("list_predicates", params={**s.partition(), "limit": limit, "offset": offset}, idempotent=True))

    # --- reasoning: traces and tool calls ----------------------------------------------------

    def start_trace(self, scope: ScopeLike, task: str, *, trace_key: Optional[str] = None) -> models.Trace:
        """``POST /v1/traces`` (``start_trace``): a reasoning trace of ``task`` in
        ``scope.session``. With ``trace_key`` starting it again answers the same trace (and
        only then is the call retried automatically)."""
        s = as_scope(scope)
        body = drop_none(scope=s.to_dict(), task=task, trace_key=trace_key)
        return self._call(Call("start_trace", json=body, idempotent=trace_key is not None))

    def add_step(
        self,
        scope: ScopeLike,
        trace_id: str,
        *,
        thought: Optional[str] = None,
        action: Optional[str] = None,
        observation: Optional[str] = None,
        step_number: Optional[int] = None,
    ) -> models.Step:
        """``POST /v1/traces/{id}/steps`` (``add_step``): the next step (numbered 1, 2, ...).
        With ``step_number`` a retry is idempotent (and retried automatically); other content
        or a number that is not next is ``ConflictError``."""
        s = as_scope(scope)
        body = drop_none(scope=s.to_dict(), thought=thought, action=action, observation=observation, step_number=step_number)
        return self._call(Call("add_step", path={"id": trace_id}, json=body, idempotent=step_number is not None))

    def record_tool_call(
        self,
        scope: ScopeLike,
        step_id: str,
        tool_name: str,
        *,
        arguments: Any = None,
        result: Any = None,
        status: Union[models.ToolStatus, str, None] = None,
        duration_ms: Optional[int] = None,
        error: Optional[str] = None,
        call_number: Optional[int] = None,
    ) -> models.ToolCall:
        """``POST /v1/steps/{id}/tool-calls`` (``record_tool_call``): a tool call of a step
        (``status`` defaults to ``success``). With ``call_number`` a retry is idempotent."""
        s = as_scope(scope)
        body = drop_none(
            scope=s.to_dict(),
            tool_name=tool_name,
            arguments=arguments,
            result=result,
            status=status,
            duration_ms=duration_ms,
            error=error,
            call_number=call_number,
        )
        return self._call(Call("record_tool_call", path={"id": step_id}, json=body, idempotent=call_number is not None))

    def complete_trace(
        self, scope: ScopeLike, trace_id: str, *, outcome: Optional[str] = None, success: Optional[bool] = None
    ) -> models.Trace:
        """``POST /v1/traces/{id}/complete`` (``complete_trace``): the same outcome again is a
        replay; another is ``ConflictError``."""
        s = as_scope(scope)
        body = drop_none(scope=s.to_dict(), outcome=outcome, success=success)
        return self._call(Call("complete_trace", path={"id": trace_id}, json=body, idempotent=True))

    def get_trace(self, scope: ScopeLike, trace_id: str) -> models.TraceView:
        """``GET /v1/traces/{id}`` (``get_trace``): the trace with its steps and their tool
        calls."""
        s = as_scope(scope)
        return self._call(Call("get_trace", path={"id": trace_id}, params=s.partition(), idempotent=True))

    def list_traces(
        self, scope: ScopeLike, *, session: Optional[str] = None, limit: Optional[int] = None, offset: Optional[int] = None
    ) -> models.TraceList:
        """``GET /v1/traces`` (``list_traces``): most recently started first; every session's
        unless ``session`` is given (the scope's session is not applied)."""
        s = as_scope(scope)
        params = {**s.partition(), "session": session, "limit": limit, "offset": offset}
        return self._call(Call("list_traces", params=params, idempotent=True))

    def similar_traces(
        self, scope: ScopeLike, task: str, *, success_only: Optional[bool] = None, limit: Optional[int] = None
    ) -> models.SimilarTraces:
        """``GET /v1/traces/similar`` (``similar_traces``): past traces by meaning of the task."""
        s = as_scope(scope)
        params = {**s.partition(), "task": task, "success_only": success_only, "limit": limit}
        return self._call(Call("similar_traces", params=params, idempotent=True))

    def tool_stats(self, scope: ScopeLike, *, tool: Optional[str] = None) -> models.ToolStatsList:
        """``GET /v1/tools/stats`` (``tool_stats``): per tool: calls, successes, failures,
        success rate, mean and p95 duration."""
        s = as_scope(scope)
        return self._call(Call("tool_stats", params={**s.partition(), "tool": tool}, idempotent=True))


def _headers(api_key: Optional[str], headers: Optional[Mapping[str, str]]) -> Dict[str, str]:
    out = {"user-agent": f"cairn-memory-python/{__version__}", "accept": "application/json"}
    if api_key:
        out["authorization"] = f"Bearer {api_key}"
    if headers:
        out.update(headers)
    return out


class Cairn(_Api):
    """A blocking client of a Cairn server.

    Args:
        base_url: e.g. ``"http://127.0.0.1:7878"``.
        api_key: sent as ``Authorization: Bearer <key>``: an API key of the server, or an
            agent's grant key (``cak:...``). Without keys a server answers loopback only.
        timeout: seconds per request (or an ``httpx.Timeout``).
        retry: the :class:`RetryPolicy` (default: 3 retries, backoff from 0.25 s); only
            ``unavailable`` and lost connections of idempotent calls are retried.
        headers: extra headers on every request.
        transport: an ``httpx`` transport (e.g. for a proxy or a test).

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        timeout: Union[float, httpx.Timeout] = DEFAULT_TIMEOUT,
        *,
        retry: Optional[RetryPolicy] = None,
        headers: Optional[Mapping[str, str]] = None,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._http = httpx.Client(
            base_url=self.base_url, timeout=timeout, headers=_headers(api_key, headers), transport=transport
        )
        self._inspector = None  # tests: called with (call, request, response) for every answer

    def _call(self, call: Call) -> Any:
        attempt = 0
        while True:
            request = build_request(self._http, call)
            response = None
            try:
                response = self._http.send(request)
            except httpx.TransportError as exc:
                error: CairnError = transport_error(exc, request)
            else:
                if self._inspector is not None:
                    self._inspector(call, request, response)
                if response.status_code < 400:
                    return parse(call, response)
                error = error_from_response(response)
            if not self.retry.should_retry(call, error, attempt):
                raise error
            time.sleep(self.retry.delay(attempt, retry_after(response)))
            attempt += 1

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Cairn":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncCairn(_Api):
    """The asyncio client: the same constructor and methods as :class:`Cairn`, each method a
    coroutine. Use it as an async context manager, or call :meth:`aclose`."""

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        timeout: Union[float, httpx.Timeout] = DEFAULT_TIMEOUT,
        *,
        retry: Optional[RetryPolicy] = None,
        headers: Optional[Mapping[str, str]] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, headers=_headers(api_key, headers), transport=transport
        )
        self._inspector = None

    async def _call(self, call: Call) -> Any:  # type: ignore[override]
        attempt = 0
        while True:
            request = build_request(self._http, call)
            response = None
            try:
                response = await self._http.send(request)
            except httpx.TransportError as exc:
                error: CairnError = transport_error(exc, request)
            else:
                if self._inspector is not None:
                    self._inspector(call, request, response)
                if response.status_code < 400:
                    return parse(call, response)
                error = error_from_response(response)
            if not self.retry.should_retry(call, error, attempt):
                raise error
            await asyncio.sleep(self.retry.delay(attempt, retry_after(response)))
            attempt += 1

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncCairn":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
