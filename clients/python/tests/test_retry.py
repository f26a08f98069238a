"""Retries: a completion whose connection dies is safe to send again (the turn id makes it
idempotent), and the client retries only ``unavailable`` and only idempotent calls."""

from __future__ import annotations

import pytest

from cairn_memory import (
    AsyncCairn,
    Cairn,
    CairnConnectionError,
    RetryPolicy,
    UnavailableError,
)

from conftest import strict
from servers import DroppingProxy, Unavailable503Server

NO_RETRY = RetryPolicy(max_retries=0)
FAST = RetryPolicy(max_retries=3, backoff=0.05, backoff_max=1.0, jitter=False)


@pytest.fixture()
def proxy(server):
    p = DroppingProxy(server.port)
    yield p
    p.close()


@pytest.fixture()
def unavailable(server):
    s = Unavailable503Server(server.port)
    yield s
    s.close()


def _pairs(memory: Cairn, scope, turn_id: str):
    msgs = memory.conversation_messages(scope, scope.session).messages
    return [(m.role.value, m.content) for m in msgs if m.turn_id == turn_id], len(msgs)


@pytest.mark.parametrize("when", ["after_response", "before_response"])
def test_completion_retried_by_hand_after_the_connection_is_killed(memory, scope, proxy, when):
    """The proxy forwards the completion, then resets the client's connection — after the
    server answered (the answer is lost) or before it could. The caller cannot know whether
    the turn was stored; sending it again with the same turn is safe: one pair is recorded."""
    via_proxy = strict(Cairn(proxy.url, retry=NO_RETRY))
    memory.add_document(scope, "notes/trip.md", "The train to Lyon leaves at 08:15 from platform 4.")
    turn = via_proxy.prepare_agent_turn(scope, "When does the train to Lyon leave?", token_budget=300)
    answer = "It leaves at 08:15 [1]."

    proxy.drop("/complete", when)
    with pytest.raises(CairnConnectionError) as err:
        via_proxy.complete_agent_turn(turn, answer, source="agent_loop")
    assert err.value.code == "connection_error" and isinstance(err.value, UnavailableError)
    assert proxy.dropped and "/complete" in proxy.dropped[0]

    receipt = via_proxy.complete_agent_turn(turn, answer, source="agent_loop")
    assert receipt.turn_id == turn.turn_id
    assert proxy.count("/complete") == 2
    pairs, total = _pairs(memory, scope, turn.turn_id)
    assert pairs == [("user", turn.user_message), ("assistant", answer)]
    assert total == 2
    assert memory.stats(scope).turns == 1
    # A third send answers the very same receipt.
    assert memory.complete_agent_turn(turn, answer, source="agent_loop") == receipt
    via_proxy.close()


def test_completion_retried_by_the_client_after_a_reset(memory, scope, proxy):
    """With the default policy the client itself sends the completion again after the reset
    (it is idempotent): the call succeeds and the turn is recorded once."""
    via_proxy = strict(Cairn(proxy.url, retry=FAST))
    turn = via_proxy.prepare_agent_turn(scope, "Remind me to water the ferns.", token_budget=200)
    proxy.drop("/complete", "after_response")
    receipt = via_proxy.complete_agent_turn(turn, "Noted: water the ferns.", source="agent_loop")
    assert proxy.count("/complete") == 2 and len(proxy.dropped) == 1
    assert receipt == memory.complete_agent_turn(turn, "Noted: water the ferns.", source="agent_loop")
    pairs, total = _pairs(memory, scope, turn.turn_id)
    assert pairs == [("user", turn.user_message), ("assistant", "Noted: water the ferns.")] and total == 2
    via_proxy.close()


def test_a_non_idempotent_call_is_not_retried_after_a_reset(memory, scope, proxy):
    """Messages without a key are recorded anew each time, so the client does not resend
    them: the error reaches the caller, and the server holds the message once."""
    via_proxy = strict(Cairn(proxy.url, retry=FAST))
    proxy.drop("/v1/messages", "after_response")
    with pytest.raises(CairnConnectionError):
        via_proxy.add_messages(scope, [{"conversation_id": "c1", "role": "user", "content": "unkeyed hello"}])
    assert proxy.count("/v1/messages") == 1
    assert memory.conversation_messages(scope, "c1").total == 1
    # With a key the same failure is retried, and the message is still stored once.
    proxy.drop("/v1/messages", "after_response")
    receipts = via_proxy.add_messages(
        scope, [{"conversation_id": "c1", "role": "user", "content": "keyed hello", "message_id": "m-1"}]
    ).receipts
    assert proxy.count("/v1/messages") == 3
    assert receipts[0].ref == "msg:c1/1"
    assert memory.conversation_messages(scope, "c1").total == 2
    via_proxy.close()


async def test_async_client_retries_a_reset_completion(memory, scope, proxy):
    async with strict(AsyncCairn(proxy.url, retry=FAST)) as via_proxy:
        turn = await via_proxy.prepare_agent_turn(scope, "Book the dentist.", token_budget=200)
        proxy.drop("/complete", "before_response")
        receipt = await via_proxy.complete_agent_turn(turn, "Booked.", source="agent_loop")
    assert receipt.turn_id == turn.turn_id and proxy.count("/complete") == 2
    pairs, total = _pairs(memory, scope, turn.turn_id)
    assert pairs == [("user", "Book the dentist."), ("assistant", "Booked.")] and total == 2


# --- unavailable: the stand-in 503 server -----------------------------------------------------------


def test_unavailable_is_retried_with_backoff_for_idempotent_calls(memory, scope, unavailable):
    """Stand-in (see ``Unavailable503Server``): two ``503 unavailable`` answers, then the real
    server's. The recall succeeds on the third attempt, after waits of 0.05 s and 0.1 s."""
    memory.add_document(scope, "notes/plants.md", "The ferns need water every Thursday.")
    via = strict(Cairn(unavailable.url, retry=FAST))
    unavailable.fail = 2
    pack = via.recall(scope, "When do the ferns need water?", token_budget=300)
    assert any(c.source == "notes/plants.md" for c in pack.citations)
    statuses = [s for (_, _, p, s) in unavailable.log if p == "/v1/recall"]
    assert statuses == [503, 503, 200]
    times = [t for (t, _, p, _) in unavailable.log if p == "/v1/recall"]
    assert times[1] - times[0] >= 0.05 and times[2] - times[1] >= 0.1
    via.close()


def test_unavailable_gives_up_after_max_retries(scope, unavailable):
    via = strict(Cairn(unavailable.url, retry=RetryPolicy(max_retries=2, backoff=0.01, jitter=False)))
    unavailable.fail = 10
    with pytest.raises(UnavailableError) as err:
        via.stats(scope)
    e = err.value
    assert (e.code, e.status, e.hint) == ("unavailable", 503, "retry later")
    assert len(unavailable.log) == 3  # the first attempt and two retries
    via.close()


def test_unavailable_is_not_retried_for_non_idempotent_calls(memory, scope, unavailable):
    via = strict(Cairn(unavailable.url, retry=FAST))
    unavailable.fail = 1
    with pytest.raises(UnavailableError):
        via.add_messages(scope, [{"conversation_id": "c2", "role": "user", "content": "no key"}])
    unavailable.fail = 1
    with pytest.raises(UnavailableError):
        via.post_event(scope, "scout", "an event without ts")  # its id takes the time of recording
    assert [p for (_, _, p, _) in unavailable.log] == ["/v1/messages", "/v1/events"]
    assert memory.stats(scope).messages == 0
    via.close()


def test_retry_after_is_honoured(scope, unavailable):
    via = strict(Cairn(unavailable.url, retry=RetryPolicy(max_retries=1, backoff=0.01, jitter=False)))
    unavailable.fail = 1
    unavailable.retry_after = "0.3"
    via.stats(scope)
    (t0, *_), (t1, *_) = unavailable.log
    assert t1 - t0 >= 0.3
    via.close()


def test_retry_policy_delays():
    p = RetryPolicy(backoff=0.25, backoff_max=1.0, jitter=False)
    assert [p.delay(n) for n in range(4)] == [0.25, 0.5, 1.0, 1.0]
    assert p.delay(0, retry_after=5) == 1.0
    j = RetryPolicy(backoff=0.2, jitter=True)
    assert all(0.1 <= j.delay(0) <= 0.2 for _ in range(50))
