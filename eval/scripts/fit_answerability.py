#!/usr/bin/env python3
"""Fits the answerability model of `recall/src/answer.rs` from pack dumps.

Inputs are the `<file>.packs.jsonl` dumps that `cairn eval … --dump-legs <file>` writes next
to the leg dump: one line per pack at the calibration budget, with the set it belongs to
(answerable, foreign, held-out, cross-conversation, adversarial…), whether judged evidence is
cited, and the signals of `answerability`. Training data only:

    cairn eval beir --data ../shared/data/scifact --split train --doc-mode document \
        --mode hybrid --budgets 1000 --probes ../shared/data/locomo/locomo10-conv1-5.json \
        --dump-legs /tmp/sf.jsonl
    cairn eval locomo --data ../shared/data/locomo/locomo10-conv1-5.json --mode hybrid \
        --budgets 1000 --probes ../shared/data/scifact/queries.jsonl --dump-legs /tmp/lo.jsonl
    python3 eval/scripts/fit_answerability.py /tmp/sf.packs.jsonl /tmp/lo.packs.jsonl

Positive class: an answerable query whose judged evidence is cited. Each corpus weighs the
same; within a corpus the positives and each probe set weigh equally (so the hard in-domain
probes are not drowned by the easy foreign ones). Adversarial questions are left out. Prints
the coefficients (intercept first, in the order of `FEATS`, which is `features()` in
answer.rs), the in-sample AUROC per probe set, and the rates behind the thresholds: the
long end of `full_at` from the fitted scores, the short end from the scores and thresholds
the dumped packs carry.
Needs numpy and scikit-learn (`pip install numpy scikit-learn`).
"""
import collections
import json
import sys

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

FEATS = ["top_dense", "dense_margin", "dense_gap", "sparse_margin", "leg_agreement",
         "aspect_support", "best_item_support", "identifier_support", "top_item_dense"]


# `full_at` of answer.rs: FULL_AT_SHORT up to SHORT_EVIDENCE_WORDS, FULL_AT_LONG from
# LONG_EVIDENCE_WORDS, and FULL_AT_LONG below SHORT_MIN_SUPPORT of the aspects supported.
FULL_AT_SHORT, FULL_AT_LONG, SHORT_MIN_SUPPORT = 0.6, 0.85, 0.75


def load(path, corpus, adversarial=False):
    out = []
    for line in open(path):
        r = json.loads(line)
        pk = r["pack"]
        if r["set"].startswith("adversarial") and not adversarial:
            continue
        a = pk["answerability"]
        # Where the pack sits between the short and the long end of `full_at` (0 short,
        # 1 long), recovered from the threshold the pack reports; None when the long end
        # applies because too little of the query is supported.
        supported = a["signals"]["aspect_support"] >= SHORT_MIN_SUPPORT
        t = (a["full_at"] - FULL_AT_SHORT) / (FULL_AT_LONG - FULL_AT_SHORT) if supported else None
        out.append(dict(corpus=corpus, set=r["set"], answerable=r["answerable"],
                        cited=pk["evidence_cited"], query=pk["query"],
                        passages=pk.get("passages") or [], score=a["score"], t=t,
                        x=[a["signals"][f] for f in FEATS]))
    return out


def weights(packs, y):
    """Sample weights: each corpus weighs the same; within it the positives and each probe
    set weigh equally (scaled so the weights sum to the number of packs)."""
    w = np.zeros(len(packs))
    for c in sorted({r["corpus"] for r in packs}):
        pos = [i for i, r in enumerate(packs) if r["corpus"] == c and y[i] == 1]
        for i in pos:
            w[i] = 1.0 / len(pos)
        negsets = sorted({r["set"] for i, r in enumerate(packs) if r["corpus"] == c and y[i] == 0})
        for s in negsets:
            idx = [i for i, r in enumerate(packs) if r["corpus"] == c and y[i] == 0 and r["set"] == s]
            for i in idx:
                w[i] = 1.0 / len(idx) / len(negsets)
    return w * len(packs)


def main():
    packs = []
    for i, path in enumerate(sys.argv[1:]):
        packs += load(path, f"corpus{i}:{path}")
    X = np.array([r["x"] for r in packs])
    y = np.array([1 if (r["answerable"] and r["cited"]) else 0 for r in packs])
    w = weights(packs, y)
    model = LogisticRegression(C=1.0, max_iter=5000)
    model.fit(X, y, sample_weight=w)
    coef = [float(model.intercept_[0])] + [float(v) for v in model.coef_[0]]
    print("COEF", ", ".join(f"{c:.3f}" for c in coef))
    p = model.predict_proba(X)[:, 1]
    for i, r in enumerate(packs):
        r["p"] = p[i]
    sets = collections.defaultdict(list)
    for r in packs:
        sets[(r["corpus"], r["set"], r["answerable"])].append(r)
    for (c, s, a), rs in sorted(sets.items()):
        if a:
            continue
        ans = sets[next(k for k in sets if k[0] == c and k[2])]
        auc = roc_auc_score([1] * len(ans) + [0] * len(rs), [r["p"] for r in ans] + [r["p"] for r in rs])
        print(f"{c} AUROC answerable vs {s}: {auc:.3f}")

    def rate(rs, pred):
        return sum(1 for r in rs if pred(r)) / max(len(rs), 1)

    print("full_at: full rate per set (answerable: among packs citing evidence)")
    for t in [0.8, 0.825, 0.85, 0.875, 0.9]:
        cells = []
        for (c, s, a), rs in sorted(sets.items()):
            base = [r for r in rs if r["cited"]] if a else rs
            cells.append(f"{s}@{c.split(':')[0]} {rate(base, lambda r: r['p'] >= t):.3f}")
        print(t, " | ".join(cells))
    print("none_below: none rate per set")
    for t in [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]:
        cells = [f"{s}@{c.split(':')[0]} {rate(rs, lambda r: r['p'] < t):.2f}"
                 for (c, s, a), rs in sorted(sets.items())]
        print(t, " | ".join(cells))


def short_end(paths):
    """The sweep behind FULL_AT_SHORT: per candidate short end, the `full` rate of every set
    with the shipped scores and each pack's position between the ends (the long end fixed)."""
    packs = []
    for i, path in enumerate(paths):
        packs += load(path, f"corpus{i}", adversarial=True)
    sets = collections.defaultdict(list)
    for r in packs:
        if r["answerable"] and not r["cited"] and not r["set"].startswith("adversarial"):
            continue
        sets[(r["corpus"], r["set"])].append(r)
    print("full_at short end: full rate per set (answerable: among packs citing evidence)")
    for short in [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.85]:
        def full(r):
            th = FULL_AT_LONG if r["t"] is None else short + (FULL_AT_LONG - short) * r["t"]
            return r["score"] >= th
        cells = [f"{s}@{c} {sum(map(full, rs)) / len(rs):.3f}" for (c, s), rs in sorted(sets.items())]
        print(short, " | ".join(cells))


if __name__ == "__main__":
    main()
    short_end(sys.argv[1:])
