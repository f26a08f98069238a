"""The client and api/openapi.json cannot drift apart unnoticed (as the server's
``openapi_document_is_committed`` keeps the document in step with its handlers):

* the committed models and operation table are exactly what the generator makes of the
  document;
* every operation of the document is some client method, and every method sends only
  documented body fields and query parameters (all of its arguments set), with the
  required ones;
* each method's return annotation is the documented answer;
* the running server serves the committed document;
* the README's method table names every public method.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re

import pytest

from cairn_memory import AsyncCairn, Cairn, MemoryScope, TurnContext, models
from cairn_memory._operations import OPERATIONS
from cairn_memory._transport import Call
from cairn_memory.client import _Api

from conftest import OPENAPI, OPENAPI_PATH, SCHEMAS
from servers import REPO

CLIENT_DIR = REPO / "clients" / "python"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_models", CLIENT_DIR / "tools" / "gen_models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_models_are_generated_from_the_committed_document():
    generated = _generator().generate(json.loads(OPENAPI_PATH.read_text()))
    for name, text in generated.items():
        committed = (CLIENT_DIR / "src" / "cairn_memory" / name).read_text()
        assert committed == text, (
            f"cairn_memory/{name} is out of date with api/openapi.json; "
            "regenerate it with: python clients/python/tools/gen_models.py"
        )


def test_every_schema_has_a_model():
    assert set(models.SCHEMA_NAMES) == set(SCHEMAS)
    for cls in models.SCHEMA_NAMES.values():
        assert hasattr(models, cls)


def test_memory_scope_is_the_documented_scope():
    import dataclasses

    fields = [f.name for f in dataclasses.fields(MemoryScope)]
    assert set(fields) == set(SCHEMAS["Scope"]["properties"])
    assert set(SCHEMAS["Scope"]["required"]) == {f.name for f in dataclasses.fields(MemoryScope) if f.default is dataclasses.MISSING}


# --- every method, with every argument set ------------------------------------------------------


class Recorder(_Api):
    def __init__(self):
        self.calls = []

    def _call(self, call: Call):
        self.calls.append(call)
        return None


def _envelope() -> TurnContext:
    env = models.TurnEnvelope.model_construct(
        contract_version="agent-turn-v1",
        turn_id="turn-1",
        scope=models.Scope(tenant="t", user="u", namespace="n", agent="a", session="s"),
        user_message="hello",
        mode=models.TurnMode.TEXT,
        memory_pack=None,
    )
    return TurnContext(env)


PLACEHOLDERS = {
    "scope": MemoryScope("t", "u"),
    "turn": _envelope(),
    "messages": [{"conversation_id": "c", "role": "user", "content": "x", "message_id": "m"}],
    "file": b"x",
    "filters": {"kinds": ["chunk"]},
    "knowledge": {"kind": "fact", "subject": "a", "predicate": "b", "object": "c"},
    "public_key": {"kty": "OKP", "crv": "Ed25519", "x": "AAAA"},
    "operations": ["recall"],
    "preset": "assistant",
    "mode": "text",
    "status": "pending",
    "cardinality": "single",
    "type": "person",
    "trust_origin": "user_reported",
    "filename": "x.txt",
    "content_type": "text/plain",
}


def _placeholder(name: str, param: inspect.Parameter):
    if name in PLACEHOLDERS:
        return PLACEHOLDERS[name]
    ann = str(param.annotation)
    if "Mapping" in ann or name in ("arguments", "result"):
        return {"k": 1}
    if "Sequence" in ann:
        return ["x"]
    if "bool" in ann:
        return True
    if "float" in ann:
        return 0.5
    if "int" in ann:
        return 1
    return "x"


def _public_methods():
    return sorted(n for n, v in vars(_Api).items() if callable(v) and not n.startswith("_"))


def _record_all():
    rec = Recorder()
    for name in _public_methods():
        method = getattr(rec, name)
        args, kwargs = [], {}
        for pname, p in inspect.signature(method).parameters.items():
            value = _placeholder(pname, p)
            if p.kind is p.KEYWORD_ONLY:
                kwargs[pname] = value
            else:
                args.append(value)
        before = len(rec.calls)
        method(*args, **kwargs)
        assert len(rec.calls) == before + 1, f"{name} made {len(rec.calls) - before} calls"
        yield name, rec.calls[-1]


def test_every_operation_is_a_method():
    used = {call.op for _, call in _record_all()}
    assert used == set(OPERATIONS), {"not in the client": set(OPERATIONS) - used, "not in the document": used - set(OPERATIONS)}


@pytest.mark.parametrize("name,call", list(_record_all()), ids=lambda x: x if isinstance(x, str) else "")
def test_method_sends_only_documented_fields(name, call):
    route = OPERATIONS[call.op]
    assert set(call.path) == set(route.path_params), name
    assert set(call.params) <= set(route.query), (name, set(call.params) - set(route.query))
    assert set(route.required_query) <= set(call.params), name
    if route.request is None:
        assert call.json is None and call.files is None, name
        return
    props = set(SCHEMAS[route.request]["properties"])
    required = set(SCHEMAS[route.request].get("required", []))
    sent = set(call.json) if call.json is not None else set(call.data or {}) | set(call.files or {})
    assert sent <= props, (name, sent - props)
    assert required <= sent, (name, required - sent)


OWN_RESULTS = {"prepare_agent_turn": "TurnContext", "metrics": "str", "openapi": "Dict[str, Any]"}


@pytest.mark.parametrize("name,call", list(_record_all()), ids=lambda x: x if isinstance(x, str) else "")
def test_method_returns_the_documented_answer(name, call):
    route = OPERATIONS[call.op]
    annotation = inspect.signature(getattr(_Api, name)).return_annotation
    if name in OWN_RESULTS:
        assert annotation == OWN_RESULTS[name]
        return
    assert route.response is not None, name
    assert annotation == f"models.{models.SCHEMA_NAMES[route.response]}", (name, annotation, route.response)


def test_async_client_takes_the_same_arguments():
    sync = inspect.signature(Cairn.__init__).parameters
    asyn = inspect.signature(AsyncCairn.__init__).parameters
    assert list(sync) == list(asyn)
    assert [p.default for p in sync.values()] == [p.default for p in asyn.values()]


def test_the_server_serves_the_committed_document(memory):
    assert memory.openapi() == OPENAPI, (
        "the running cairn's /v1/openapi.json differs from api/openapi.json: "
        "the binary is older or newer than the committed document (rebuild it)"
    )


def test_readme_lists_every_method():
    readme = (CLIENT_DIR / "README.md").read_text()
    listed = set(re.findall(r"^\| `([a-z_]+)\(", readme, re.M))
    assert listed == set(_public_methods()), {
        "missing from README": set(_public_methods()) - listed,
        "not a method": listed - set(_public_methods()),
    }
