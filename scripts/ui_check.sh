#!/usr/bin/env bash
# The inspector's browser tests (api/tests/ui/test_inspector.py): headless Chromium (Debian's
# `chromium` package) driven by Playwright for Python (PyPI; its own browser download is not
# used) against a real `cairn serve` with the real model, on a free port and a temporary data
# directory. Installs what it needs, builds the binary, starts and stops the server.
# Screenshots: target/ui-screenshots/*.png (or $UI_SCREENSHOTS).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null

CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  echo "ui_check: installing Debian's chromium" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
export CHROMIUM

PLAYWRIGHT_VERSION=1.65.2
VENV=.cache/ui-venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import playwright" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "playwright==$PLAYWRIGHT_VERSION"
fi

cargo build --release --workspace --all-targets  # as run.sh: the tests' features, no second build

DATA=$(mktemp -d)
LOG="$DATA.log"
PORT=$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
./target/release/cairn --data-dir "$DATA" serve --addr "127.0.0.1:$PORT" 2>"$LOG" &
PID=$!
cleanup() {
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  rm -rf "$DATA" "$LOG"
}
trap cleanup EXIT

# Waits for /healthz (the model loads first), up to 120 s.
UP=0
for _ in $(seq 1 240); do
  if "$VENV/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/healthz', timeout=2)" 2>/dev/null; then
    UP=1
    break
  fi
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "ui_check: cairn serve exited:" >&2
    cat "$LOG" >&2
    exit 1
  fi
  sleep 0.5
done
if [ "$UP" != 1 ]; then
  echo "ui_check: cairn serve did not answer /healthz within 120 s" >&2
  cat "$LOG" >&2
  exit 1
fi

if ! "$VENV/bin/python" api/tests/ui/test_inspector.py "http://127.0.0.1:$PORT" "${UI_SCREENSHOTS:-target/ui-screenshots}"; then
  echo "ui_check: failed; server log (last 40 lines):" >&2
  tail -n 40 "$LOG" >&2
  exit 1
fi
