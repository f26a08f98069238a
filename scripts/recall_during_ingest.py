#!/usr/bin/env python3
"""Recall latency while documents are being ingested, against a live `cairn serve`.

Starts the given `cairn` binary (`serve` on 127.0.0.1, a fresh data directory under /tmp),
seeds 20 SciFact abstracts, then times sequential recalls twice: on the idle server, and
while WRITERS threads post SciFact abstracts as documents (one request each, as fast as the
server takes them). Prints the recall latency percentiles of both phases, the first two
recalls of the ingest apart (they may start a query worker and wait for its session to load,
once per process), the ingest rate during the second phase, and the server's embedding
worker threads before and after it (from /proc, on Linux). Recall and ingest share the
embedding workers, so this is the figure that shows a query waiting behind document batches.

    python3 scripts/recall_during_ingest.py ./target/release/cairn [corpus.jsonl] [queries.jsonl]

Defaults: ../shared/data/scifact/{corpus,queries}.jsonl. Standard library only. Sends
traffic only to 127.0.0.1 and stops after a fixed number of requests (60 idle recalls, 120
recalls during the ingest, at most 600 documents); a benchmark that reports figures, with no
pass or fail.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

WRITERS = 4
PORT = 7981


def main():
    binary = sys.argv[1]
    corpus = sys.argv[2] if len(sys.argv) > 2 else "../shared/data/scifact/corpus.jsonl"
    queries = sys.argv[3] if len(sys.argv) > 3 else "../shared/data/scifact/queries.jsonl"
    docs = [json.loads(line) for line in open(corpus)][:600]
    asked = [json.loads(line)["text"] for line in open(queries)]
    data = tempfile.mkdtemp(prefix="cairn-rdi-")
    server = subprocess.Popen(
        [binary, "--data-dir", data, "serve", "--addr", f"127.0.0.1:{PORT}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        run(docs, asked, os.path.basename(binary), server.pid)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(data, ignore_errors=True)


def post(path, body):
    request = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as reply:
        return json.load(reply)


def embedding_threads(pid):
    """The server's embedding worker threads by name (Linux; empty elsewhere)."""
    names = set()
    for comm in glob.glob(f"/proc/{pid}/task/*/comm"):
        try:
            with open(comm) as f:
                name = f.read().strip()
        except OSError:
            continue
        if name.startswith("cairn-embed-"):
            names.add(name)
    return sorted(names)


def run(docs, asked, label, pid):
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.2)
    scope = {"tenant": "t", "user": "u", "namespace": "n"}

    def document(i, prefix):
        d = docs[i]
        post(
            "/v1/documents",
            {
                "scope": scope,
                "source": f"{prefix}{i}.txt",
                "text": d.get("title", "") + "\n\n" + d["text"],
                "media_type": "text/plain",
            },
        )

    for i in range(20):
        document(i, "seed")

    def recalls(n, offset):
        out = []
        for q in asked[offset : offset + n]:
            t = time.perf_counter()
            post("/v1/recall", {"scope": scope, "query": q})
            out.append((time.perf_counter() - t) * 1000)
        return out

    idle = recalls(60, 0)
    before = embedding_threads(pid)
    stop = threading.Event()
    written = [0] * WRITERS

    def writer(k):
        for i in range(k, len(docs), WRITERS):
            if stop.is_set():
                return
            document(i, "doc")
            written[k] += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(WRITERS)]
    started = time.time()
    for t in threads:
        t.start()
    time.sleep(1)
    busy = recalls(120, 100)
    stop.set()
    for t in threads:
        t.join()
    took = time.time() - started
    after = embedding_threads(pid)
    # The first recalls of the ingest may start a query worker and wait for its session to
    # load (once per process): reported apart from the steady state.
    first, rest = busy[:2], sorted(busy[2:])
    idle.sort()
    busy.sort()

    def pct(v, q):
        return v[min(len(v) - 1, int(len(v) * q))]

    print(
        f"{label}: recall idle p50 {pct(idle, .5):.1f} p99 {pct(idle, .99):.1f} ms | "
        f"during ingest ({WRITERS} writers) p50 {pct(busy, .5):.1f} p90 {pct(busy, .9):.1f} "
        f"p99 {pct(busy, .99):.1f} max {busy[-1]:.1f} ms (first two {first[0]:.1f}, {first[1]:.1f}; "
        f"the other 118 p99 {pct(rest, .99):.1f}) | ingest {sum(written) / took:.1f} docs/s | "
        f"embedding workers before the ingest {before or '?'}, after {after or '?'}"
    )


if __name__ == "__main__":
    main()
