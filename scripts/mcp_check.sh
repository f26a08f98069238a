#!/usr/bin/env bash
# The MCP round trip with the official Python SDK (PyPI `mcp`) against a real `cairn serve`:
# lists the tools, stores a document, recall -> complete_turn -> recall (api/tests/mcp_client.py).
# The Rust client's round trips run in `cargo test` (api/tests/api/mcp.rs, cli/tests/cli/mcp_stdio.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null
VENV=.cache/mcp-venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import mcp" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "mcp==2.3.0"
fi
cargo build --release --workspace --all-targets  # as run.sh: the tests' features, no second build
DATA=$(mktemp -d)
PORT=$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
./target/release/cairn --data-dir "$DATA" serve --addr "127.0.0.1:$PORT" 2>"$DATA.log" &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$DATA" "$DATA.log"' EXIT
for _ in $(seq 1 120); do
  if "$VENV/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/healthz')" 2>/dev/null; then
    break
  fi
  kill -0 $PID 2>/dev/null || { cat "$DATA.log"; exit 1; }
  sleep 0.5
done
"$VENV/bin/python" api/tests/mcp_client.py "http://127.0.0.1:$PORT/mcp"
