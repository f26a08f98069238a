#!/usr/bin/env bash
# The Python SDK (clients/python, package `cairn-memory`) against a real `cairn serve` with
# the real model: pytest starts the server itself (free loopback port, temporary data
# directory; a second one with an API key for the auth tests) from $CAIRN_BIN, default
# ./target/release/cairn, which this script builds unless CAIRN_BIN is set.
# The venv is .cache/pyclient-venv; the package is installed with every extra at the
# versions of clients/python/constraints.txt (PyPI). Extra pytest arguments pass through:
#   ./scripts/python_client_check.sh -k retry -x
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh >/dev/null

VENV=.cache/pyclient-venv
PY="$VENV/bin/python"
STAMP="$VENV/.cairn-client-stamp"
# Reinstall when the venv is new or the package's metadata or pins changed.
WANT=$(cat clients/python/pyproject.toml clients/python/constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ] || ! "$PY" -c "import cairn_memory, langchain_core, llama_index.core, pydantic_ai, pytest" 2>/dev/null; then
  "$PY" -m pip install -q --disable-pip-version-check --upgrade pip
  "$PY" -m pip install -q --disable-pip-version-check \
    -c clients/python/constraints.txt "./clients/python[test,langchain,llamaindex,pydantic-ai]"
  echo "$WANT" > "$STAMP"
else
  # The package itself is reinstalled every run (cheap, no dependencies), so its code is current.
  "$PY" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall ./clients/python
fi

if [ -z "${CAIRN_BIN:-}" ]; then
  cargo build --release --workspace --all-targets  # as run.sh: the tests' features, no second build
  CAIRN_BIN=./target/release/cairn
fi
case "$CAIRN_BIN" in /*) ;; *) CAIRN_BIN="$PWD/$CAIRN_BIN" ;; esac
export CAIRN_BIN
[ -x "$CAIRN_BIN" ] || { echo "python_client_check: no executable cairn at $CAIRN_BIN" >&2; exit 1; }

# The generated models must match api/openapi.json (also a test; this names the fix).
"$PY" clients/python/tools/gen_models.py --check

cd clients/python
# -p no:cacheprovider: no .pytest_cache in the tree.
exec "../../$PY" -m pytest -p no:cacheprovider -q -ra "$@" tests
