#!/usr/bin/env python3
"""Loads the corpus `cairn bench recall --dump-corpus DIR` wrote into LanceDB (embedded, from
PyPI) and times it the way the bench times Cairn: bulk load in batches of 1,000 points, index
build (IVF_HNSW_SQ on the vectors, full-text index on the texts), filtered queries (the same
query vectors, a scope filter, top 100), peak RSS and the data directory's size.

    ./target/release/cairn bench recall --chunks 10000,100000 --dump-corpus /tmp/corpus
    python3 -m venv .cache/peer && .cache/peer/bin/pip install lancedb==0.40.0 numpy
    .cache/peer/bin/python scripts/peer_lancedb.py /tmp/corpus/chunks-100000

Prints one JSON object. Traffic: none (a local directory). It reports figures; it passes or
fails on nothing.
"""

import json
import os
import resource
import shutil
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import lancedb
from lancedb.index import FTS, BTree, HnswSq


def rss_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return None


def dir_mib(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total / (1024.0 * 1024.0)


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, round((len(values) - 1) * p))]


def main():
    corpus = sys.argv[1]
    meta = json.load(open(os.path.join(corpus, "meta.json")))
    dim = meta["dim"]
    batch = meta.get("batch", 1000)
    vectors = np.fromfile(os.path.join(corpus, "vectors.f32"), dtype="<f4").reshape(-1, dim)
    chunks = [json.loads(line) for line in open(os.path.join(corpus, "chunks.jsonl"))]
    assert len(chunks) == len(vectors), (len(chunks), len(vectors))
    queries = np.fromfile(os.path.join(corpus, "queries.f32"), dtype="<f4").reshape(-1, dim)
    work = tempfile.mkdtemp(prefix="peer-lancedb-")
    try:
        db = lancedb.connect(work)
        schema = pa.schema(
            [
                pa.field("id", pa.string()),
                pa.field("vector", pa.list_(pa.float32(), dim)),
                pa.field("text", pa.string()),
                pa.field("tenant", pa.string()),
                pa.field("user", pa.string()),
                pa.field("namespace", pa.string()),
                pa.field("kind", pa.string()),
            ]
        )
        table = db.create_table("chunks", schema=schema)
        started = time.perf_counter()
        for at in range(0, len(chunks), batch):
            part = chunks[at : at + batch]
            table.add(
                pa.table(
                    {
                        "id": [c["id"] for c in part],
                        "vector": pa.FixedSizeListArray.from_arrays(
                            pa.array(vectors[at : at + batch].reshape(-1)), dim
                        ),
                        "text": [c["text"] for c in part],
                        "tenant": [c["tenant"] for c in part],
                        "user": [c["user"] for c in part],
                        "namespace": [c["namespace"] for c in part],
                        "kind": [c["kind"] for c in part],
                    },
                    schema=schema,
                )
            )
        load = time.perf_counter() - started
        started = time.perf_counter()
        table.create_index("vector", config=HnswSq(distance_type="cosine"))
        table.create_index("text", config=FTS())
        table.create_index("tenant", config=BTree())
        index = time.perf_counter() - started
        where = "tenant = 'default' AND user = 'default' AND namespace = 'default' AND kind = 'chunk'"
        texts = [json.loads(line)["query"] for line in open(os.path.join(corpus, "queries.jsonl"))]
        for q in queries[:5]:
            table.search(q).where(where, prefilter=True).limit(100).to_list()
        dense, sparse = [], []
        for q, text in zip(queries, texts):
            t = time.perf_counter()
            table.search(q).where(where, prefilter=True).limit(100).to_list()
            dense.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            table.search(text, query_type="fts").where(where, prefilter=True).limit(100).to_list()
            sparse.append((time.perf_counter() - t) * 1e3)
        both = [d + s for d, s in zip(dense, sparse)]
        print(
            json.dumps(
                {
                    "peer": "lancedb " + lancedb.__version__,
                    "chunks": len(chunks),
                    "load_seconds": load,
                    "load_points_per_s": len(chunks) / load,
                    "index_seconds": index,
                    "dense_query_ms": {"p50": percentile(dense, 0.5), "p99": percentile(dense, 0.99)},
                    "fts_query_ms": {"p50": percentile(sparse, 0.5), "p99": percentile(sparse, 0.99)},
                    "two_legs_ms": {"p50": percentile(both, 0.5), "p99": percentile(both, 0.99)},
                    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
                    "anon_rss_mib": rss_mib("RssAnon"),
                    "data_dir_mib": dir_mib(work),
                },
                indent=2,
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
