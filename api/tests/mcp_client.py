"""Cairn's MCP tools from the official Python SDK (PyPI `mcp`), against a running `cairn serve`.

usage: python api/tests/mcp_client.py http://127.0.0.1:7878/mcp [API_KEY]

Lists the tools, stores a document, then runs recall -> complete_turn -> recall and checks
that each recall cites what was stored. Exits non-zero on the first failed check. Works with
mcp 2.x (streamable_http_client + httpx2) and 1.x (streamablehttp_client + httpx).
Not part of `cargo test`: it needs Python, the SDK and a server.
"""

import asyncio
import logging
import sys
import uuid

from mcp import ClientSession

try:  # mcp >= 2.0: (read, write); headers go on a caller-made httpx2 client
    from mcp.client.streamable_http import streamable_http_client as _connect
    import httpx2 as httpx

    V2 = True
except ImportError:  # mcp 1.x: streamablehttp_client(url, headers=...) -> (read, write, id)
    from mcp.client.streamable_http import streamablehttp_client as _connect
    import httpx

    V2 = False


class _Warnings(logging.Handler):
    """Collects what the SDK logs at WARNING and above: a clean session logs nothing there
    (the SDK logs "Session termination failed: 202" when the session DELETE is not 200/204)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


WARNINGS = _Warnings()
logging.getLogger("mcp").addHandler(WARNINGS)

TOOLS = [
    "add_entity",
    "add_fact",
    "add_preference",
    "complete_turn",
    "forget",
    "list_documents",
    "list_facts",
    "prepare_turn",
    "propose_memory",
    "recall",
    "record_trace",
    "remember",
    "similar_traces",
]


def structured(res):
    return res.structured_content if V2 else res.structuredContent


def is_error(res):
    return res.is_error if V2 else res.isError


def text(res):
    return res.content[0].text


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}")


async def call(session, tool, args):
    res = await session.call_tool(tool, args)
    check(not is_error(res), f"{tool} succeeded ({text(res)[:120]!r})")
    return res


def cited(pack):
    return [c["ref"] for c in pack["citations"]]


async def run(session):
    init = await session.initialize()
    info = init.server_info if V2 else init.serverInfo
    print("server:", info.name, info.version)
    check(info.name == "cairn", "server is cairn")

    tools = sorted(t.name for t in (await session.list_tools()).tools)
    print("tools:", tools)
    check(tools == TOOLS, "the thirteen Cairn tools are listed")

    run_id = uuid.uuid4().hex[:12]
    scope = {"tenant": "pyclient", "user": f"u{run_id}", "session": f"s{run_id}"}

    res = await call(
        session,
        "remember",
        {
            "scope": scope,
            "document": {
                "source": "office-guide.md",
                "media_type": "text/markdown",
                "text": "# Office guide\n\n## Kitchen\n\n"
                "The kitchen on floor 3 has two espresso machines. "
                "Clean the milk frother after use.\n",
            },
        },
    )
    doc_id = structured(res)["document"]["doc_id"]
    print("remember:", text(res))

    res = await call(
        session,
        "recall",
        {"scope": scope, "query": "How many espresso machines are in the kitchen?"},
    )
    pack = structured(res)
    print("recall 1: coverage", pack["coverage"], "citations", cited(pack))
    check(
        any(r.startswith(f"doc:{doc_id}#") for r in cited(pack)),
        "recall cites the stored document",
    )
    check("espresso" in text(res), "recall's Markdown holds the document's text")

    turn_id = f"turn-{run_id}"
    res = await call(
        session,
        "complete_turn",
        {
            "turn_id": turn_id,
            "scope": scope,
            "user_message": "Where do I park my bike? Facilities said the bike cage code is 4417.",
            "assistant_message": "Use the bike cage behind building D; its code is 4417.",
            "refers_to": cited(pack)[:1],
        },
    )
    receipt = structured(res)
    print("complete_turn:", text(res))
    check(receipt["turn_id"] == turn_id, "complete_turn returns the receipt of the turn")

    res = await call(session, "recall", {"scope": scope, "query": "What is the bike cage code?"})
    pack = structured(res)
    print("recall 2: coverage", pack["coverage"], "citations", cited(pack))
    turn_refs = {receipt["user_message_ref"], receipt["assistant_message_ref"]}
    check(bool(turn_refs & set(cited(pack))), "recall cites the completed turn's messages")
    check("4417" in text(res), "recall's Markdown holds the turn's content")

    res = await session.call_tool("forget", {"scope": scope, "ref": "doc:" + "0" * 32})
    print("forget unknown:", text(res))
    check(is_error(res) and text(res).startswith("not_found: "), "errors carry stable codes")


async def main(url, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if V2:
        http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=300))
        cm = _connect(url, http_client=http)
    else:
        http = None
        cm = _connect(url, headers=headers)
    try:
        async with cm as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await run(session)
    finally:
        if http is not None:
            await http.aclose()
    check(not WARNINGS.messages, f"the SDK logged no warnings: {WARNINGS.messages}")
    print("all checks passed")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
