#!/usr/bin/env bash
# The public agent-memory conformance suite (TCK, read-only in ../shared/tck) against
# `cairn tck-bridge`: Bronze, Silver and Gold in one pytest run, then the suite's compliance
# report. Fails unless the report's tier is Gold (or higher).
#
#   ./scripts/tck.sh            # results in target/tck/ (results.json, report.json, report.html)
#
# Needs Python 3.10+ (a virtual environment from PyPI is made in .cache/tck-venv) and the
# suite at $CAIRN_TCK_DIR (default ../shared/tck). Nothing is written into the suite's
# directory: no byte-code, no pytest cache, results under target/tck.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# The suite: $CAIRN_TCK_DIR, else ../shared/tck beside the checkout, else the workplace's copy.
TCK=${CAIRN_TCK_DIR:-}
if [ -z "$TCK" ]; then
  for candidate in "$ROOT/../shared/tck" /work/shared/tck; do
    if [ -d "$candidate/tck" ]; then TCK=$candidate; break; fi
  done
fi
[ -n "$TCK" ] && [ -d "$TCK/tck" ] || { echo "tck.sh: no conformance suite found (set CAIRN_TCK_DIR to the suite's directory)" >&2; exit 1; }
TCK=$(cd "$TCK" && pwd)
./scripts/setup.sh >/dev/null
VENV=.cache/tck-venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import pytest_jsonreport, pytest_asyncio, httpx, pydantic, jinja2, yaml" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check \
    "pytest==9.2.0" "pytest-asyncio==1.5.0" "pytest-json-report==1.5.0" "pydantic==2.14.4" \
    "jinja2==3.1.6" "pyyaml==6.0.4" "httpx==0.28.1"
fi
cargo build --release --workspace --all-targets  # as run.sh: the tests' features, no second build
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
OUT=$ROOT/target/tck
rm -rf "$OUT"
mkdir -p "$OUT"
DATA=$(mktemp -d)
PORT=$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
./target/release/cairn --data-dir "$DATA" tck-bridge --addr "127.0.0.1:$PORT" 2>"$OUT/bridge.log" &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$DATA"' EXIT
for _ in $(seq 1 240); do
  if "$VENV/bin/python" -c "import urllib.request; urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:$PORT/setup', data=b'{}', method='POST'))" 2>/dev/null; then
    break
  fi
  kill -0 $PID 2>/dev/null || { cat "$OUT/bridge.log"; exit 1; }
  sleep 0.5
done
set +e
(cd "$TCK" && PYTHONDONTWRITEBYTECODE=1 "$ROOT/$VENV/bin/python" -m pytest \
  -m "bronze or silver or gold" --bridge-url "http://127.0.0.1:$PORT" -p no:cacheprovider -q \
  --json-report --json-report-file="$OUT/results.json" 2>&1 | tail -n 40)
set -e
(cd "$TCK" && PYTHONDONTWRITEBYTECODE=1 "$ROOT/$VENV/bin/python" -m tck.report.compliance_report \
  "$OUT/results.json" --name Cairn --version "$VERSION" \
  -o "$OUT/report.json" --html "$OUT/report.html" | tee "$OUT/report.txt")
TIER=$(sed -n 's/.*Compliance Tier Achieved: *\([A-Za-z]*\).*/\1/p' "$OUT/report.txt" | head -1)
echo "tck.sh: tier $TIER (report: target/tck/report.html)"
case "$TIER" in
  Gold|GOLD|Platinum|PLATINUM) exit 0 ;;
  *) echo "tck.sh: the conformance tier dropped below Gold" >&2; exit 1 ;;
esac
