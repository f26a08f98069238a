#!/usr/bin/env python3
"""Replays the recall path's fusion offline over leg dumps, to choose its dense shares.

Inputs are the leg dumps of `cairn eval beir|locomo … --dump-legs <file>` (one JSON line per
query: qrels, group, and the dense and BM25 lists with their scores, texts for the first
ten). For each (dense share of short items, dense share of long items) it prints nDCG@10
per dataset and LoCoMo category, with each leg alone for reference. The item length is
approximated by the mean word count of the query's first candidates (both corpora are
homogeneous); the identifier bonus is not replayed. Standard library only.

    python3 eval/scripts/fusion_grid.py /tmp/sf.jsonl /tmp/lo.jsonl
"""
import collections
import json
import math
import statistics
import sys


def ndcg10(ranked, qrels):
    seen, r = set(), []
    for d in ranked:
        if d not in seen:
            seen.add(d)
            r.append(d)
    dcg = sum(qrels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(r[:10]) if qrels.get(d, 0) > 0)
    ideal = sorted((g for g in qrels.values() if g > 0), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def leg(entries):
    out = {}
    for doc, score, _ in entries:
        out.setdefault(doc, score)
    return out


def minmax(d):
    if not d:
        return {}
    lo, hi = min(d.values()), max(d.values())
    return {k: (v - lo) / (hi - lo) if hi > lo else 1.0 for k, v in d.items()}


def share(words, short, long, n0=32, n1=256):
    t = (math.log(max(words, 1)) - math.log(n0)) / (math.log(n1) - math.log(n0))
    return short + (long - short) * min(1.0, max(0.0, t))


def fused_scores(q, short, long):
    d, b = minmax(leg(q["dense"])), minmax(leg(q["sparse"]))
    words = statistics.mean([len((t or "").split()) for _, _, t in q["dense"][:10] + q["sparse"][:10] if t] or [1])
    a = share(words, short, long)
    return {k: a * d.get(k, 0) + (1 - a) * b.get(k, 0) for k in set(d) | set(b)}


def fused(q, short, long):
    scores = fused_scores(q, short, long)
    return sorted(scores, key=lambda k: (-scores[k], k))


def report(name, queries, rank):
    by = collections.defaultdict(list)
    for q in queries:
        n = ndcg10(rank(q), q["qrels"])
        by["all"].append(n)
        if q.get("group"):
            by[q["group"]].append(n)
    return name + " " + " ".join(f"{g}:{sum(v) / len(v):.3f}" for g, v in sorted(by.items()))


def main():
    sets = [(p, [json.loads(line) for line in open(p)]) for p in sys.argv[1:]]
    for path, qs in sets:
        print(report(f"{path} dense", qs, lambda q: [k for k, _, _ in q["dense"]]))
        print(report(f"{path} bm25 ", qs, lambda q: [k for k, _, _ in q["sparse"]]))
    for short in [0.2, 0.3, 0.4]:
        for long in [0.5, 0.6, 0.7]:
            for path, qs in sets:
                print(report(f"short {short} long {long} {path}", qs, lambda q: fused(q, short, long)))


if __name__ == "__main__":
    main()
