#!/usr/bin/env python3
"""Query embeddings per second: one ONNX session with two intra-op threads against two
single-threaded sessions side by side, the choice behind `embed.workers` (README
Benchmarks, "Embedding workers").

Runs the model `scripts/setup.sh` puts in `.cache/models/bge-small-en` on batches of 1, 8
and 16 distinct queries of the load example's shape (the query prefix included), with
ONNX Runtime's idle spinning off as Cairn sets it, from threads that take the next batch
when they finish one. Twice over, to show the spread.

    python3 -m venv /tmp/ortv
    /tmp/ortv/bin/pip install .cache/wheels/onnxruntime-*.whl numpy tokenizers
    /tmp/ortv/bin/python scripts/ort_sessions_probe.py
"""
import threading
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

MODEL = ".cache/models/bge-small-en"
PREFIX = "Represent this sentence for searching relevant passages: "
QUERIES = [f"which policy covers remote work and travel expenses? (request {i})" for i in range(2000)]
tokenizer = Tokenizer.from_file(f"{MODEL}/tokenizer.json")


def session(threads):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(f"{MODEL}/model.onnx", options, providers=["CPUExecutionProvider"])


def run(s, texts):
    encoded = tokenizer.encode_batch([PREFIX + t for t in texts])
    width = max(len(e.ids) for e in encoded)
    ids = np.zeros((len(texts), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, e in enumerate(encoded):
        ids[i, : len(e.ids)] = e.ids
        mask[i, : len(e.ids)] = 1
    s.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})


def per_second(sessions, batch, n=960):
    position = [0]
    lock = threading.Lock()

    def worker(s):
        while True:
            with lock:
                i = position[0]
                position[0] += batch
            if i >= n:
                return
            run(s, QUERIES[i : i + batch])

    for s in sessions:
        run(s, QUERIES[:batch])
    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return n / (time.perf_counter() - started)


def main():
    one = [session(2)]
    two = [session(1), session(1)]
    for _ in range(2):
        for batch in (1, 8, 16):
            print(
                f"batch {batch:2}: one session x 2 threads {per_second(one, batch):4.0f} queries/s; "
                f"two sessions x 1 thread {per_second(two, batch):4.0f} queries/s"
            )


if __name__ == "__main__":
    main()
