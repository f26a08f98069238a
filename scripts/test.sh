#!/usr/bin/env bash
# The test command: fetch the model and runtime if needed, then run every test (unit,
# integration, property and snapshot tests) on the real engine and model.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo test --release --workspace "$@"
