#![allow(clippy::unwrap_used)]
//! The BEIR and LoCoMo harnesses end to end on tiny data sets the tests write themselves
//! (never the real benchmarks: they take minutes).

use std::path::Path;

use cairn_eval::beir::{BeirOptions, DocMode};
use cairn_eval::locomo::LocomoOptions;
use cairn_eval::Mode;

const DOCS: &[(&str, &str, &str)] = &[
    ("d1", "Vitamin D and bone density", "Vitamin D supplementation increases bone mineral density in elderly women with osteoporosis."),
    ("d2", "Statins and cholesterol", "Statin therapy lowers LDL cholesterol and reduces the risk of myocardial infarction."),
    ("d3", "Sleep and memory", "Sleep deprivation impairs the consolidation of declarative memory in young adults."),
    ("d4", "Antibiotic resistance", "Overuse of antibiotics in livestock drives the spread of resistant bacteria to humans."),
    ("d5", "Exercise and depression", "Aerobic exercise reduces symptoms of major depressive disorder in randomized trials."),
    ("d6", "Coffee and liver", "Coffee consumption is associated with a lower risk of liver cirrhosis."),
    ("d7", "Malaria vaccine", "The RTS,S vaccine partially protects young children against clinical malaria."),
    ("d8", "Gut microbiome", "The gut microbiome of infants delivered by caesarean section differs from vaginally delivered infants."),
];

/// (query id, text, judgements).
type Query = (&'static str, &'static str, &'static [(&'static str, u32)]);

const QUERIES: &[Query] = &[
    (
        "q1",
        "Vitamin D improves bone density in older women.",
        &[("d1", 1)],
    ),
    (
        "q2",
        "Statins reduce heart attack risk.",
        &[("d2", 2), ("d6", 0)],
    ),
    ("q3", "Lack of sleep harms memory.", &[("d3", 1)]),
    ("q4", "Exercise helps against depression.", &[("d5", 1)]),
    ("q5", "A query without judgements.", &[]),
];

fn write_beir(dir: &Path) {
    let corpus: String = DOCS
        .iter()
        .map(|(id, title, text)| {
            serde_json::json!({"_id": id, "title": title, "text": text}).to_string() + "\n"
        })
        .collect();
    std::fs::write(dir.join("corpus.jsonl"), corpus).unwrap();
    let queries: String = QUERIES
        .iter()
        .map(|(id, text, _)| serde_json::json!({"_id": id, "text": text}).to_string() + "\n")
        .collect();
    std::fs::write(dir.join("queries.jsonl"), queries).unwrap();
    std::fs::create_dir_all(dir.join("qrels")).unwrap();
    let mut qrels = String::from("query-id\tcorpus-id\tscore\n");
    for (q, _, rel) in QUERIES {
        for (d, s) in *rel {
            qrels.push_str(&format!("{q}\t{d}\t{s}\n"));
        }
    }
    std::fs::write(dir.join("qrels").join("test.tsv"), qrels).unwrap();
}

fn write_locomo(path: &Path) {
    let sample = serde_json::json!([{
        "sample_id": "conv-a",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a grey cat named Pixel last week."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Congrats! I started training for a marathon in Boston."},
                {"speaker": "Ann", "dia_id": "D1:3", "text": "I painted a sunset over the lake yesterday.", "blip_caption": "a painting of a sunset"}
            ],
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "The marathon went well, I finished in four hours."},
                {"speaker": "Ann", "dia_id": "D2:2", "text": "Pixel learned to open the kitchen door."}
            ]
        },
        "qa": [
            {"question": "What is the name of Ann's cat?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
            {"question": "Which city is Ben's marathon in?", "answer": "Boston", "evidence": ["D1:2"], "category": 4},
            {"question": "When did Ben run the marathon?", "answer": "June 2023", "evidence": ["D2:1; D1:2"], "category": 2},
            {"question": "What did Ben paint?", "adversarial_answer": "a sunset", "evidence": ["D1:3"], "category": 5},
            {"question": "What has the cat learned?", "answer": "to open doors", "evidence": ["D"], "category": 1}
        ]
    }, {
        "sample_id": "conv-b",
        "conversation": {
            "speaker_a": "Cy", "speaker_b": "Di",
            "session_1_date_time": "9:00 am on 1 March, 2023",
            "session_1": [
                {"speaker": "Cy", "dia_id": "D1:1", "text": "My new job at the bakery starts on Monday."},
                {"speaker": "Di", "dia_id": "D1:2", "text": "I am learning to play the cello."}
            ]
        },
        "qa": [
            {"question": "Where does Cy work?", "answer": "a bakery", "evidence": ["D1:1"], "category": 4}
        ]
    }]);
    std::fs::write(path, serde_json::to_string(&sample).unwrap()).unwrap();
}

fn in_unit(x: f64) -> bool {
    (0.0..=1.0 + 1e-9).contains(&x)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beir_harness_on_a_tiny_corpus() {
    let data = tempfile::tempdir().unwrap();
    write_beir(data.path());
    let out = tempfile::tempdir().unwrap();
    let env = crate::eval_env().await;
    let mut opts = BeirOptions::new(data.path().to_path_buf(), "test");
    opts.budgets = vec![250, 1000];
    opts.holdout = 1;
    opts.sweep = true;
    opts.probes = None;
    let report = cairn_eval::beir::run(&env, &opts, &cairn_eval::stack::quiet())
        .await
        .unwrap();
    assert_eq!(report.queries, 4, "q5 has no judgement");
    assert_eq!(report.ingest.documents, 8);
    assert_eq!(report.ingest.failed, 0);
    assert_eq!(report.modes.len(), 4);
    for m in &report.modes {
        for x in [m.ndcg10, m.recall10, m.recall100, m.mrr10] {
            assert!(in_unit(x), "{:?}", m);
        }
        // Eight documents, paraphrased queries: every mode but BM25 ranks them all.
        assert!((m.recall100 - 1.0).abs() < 1e-9, "{:?}", m);
        if m.mode != Mode::Bm25 {
            assert!(m.ndcg10 > 0.8, "{:?}", m);
        }
    }
    assert_eq!(report.sweep.len(), cairn_eval::beir::sweep_grid().len());
    let packs = report.packs.as_ref().unwrap();
    assert_eq!(packs.curve.len(), 2);
    assert!(packs.curve[0].mean_tokens <= 250.0);
    assert!(packs.curve[1].evidence_recall >= packs.curve[0].evidence_recall);
    let names: Vec<&str> = packs
        .calibration
        .sets
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, vec!["answerable", "held-out"]);

    let written = cairn_eval::write_beir(&report, out.path()).unwrap();
    // JSON, Markdown, modes chart, packs chart, reliability diagram.
    assert_eq!(written.len(), 5);
    let md = std::fs::read_to_string(out.path().join(format!("{}.md", report.stem()))).unwrap();
    assert!(md.contains("nDCG@10") && md.contains("git commit") && md.contains("nproc"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&written[0]).unwrap()).unwrap();
    assert_eq!(json["modes"][0]["mode"], "dense");

    // --limit keeps the judged documents of the first queries.
    opts.limit = Some(1);
    opts.limit_corpus = 2;
    opts.modes = vec![Mode::Dense];
    opts.budgets = vec![];
    opts.sweep = false;
    opts.doc_mode = DocMode::Chunked;
    let small = cairn_eval::beir::run(&env, &opts, &cairn_eval::stack::quiet())
        .await
        .unwrap();
    assert_eq!(small.queries, 1);
    assert_eq!(
        small.corpus_documents, 2,
        "d1 is both judged and among the first two"
    );
    assert!((small.modes[0].ndcg10 - 1.0).abs() < 1e-9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locomo_harness_on_a_tiny_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locomo.json");
    write_locomo(&path);
    let env = crate::eval_env().await;
    let mut opts = LocomoOptions::new(path);
    opts.budgets = vec![250];
    opts.probe_limit = 10;
    let report = cairn_eval::locomo::run(&env, &opts, &cairn_eval::stack::quiet())
        .await
        .unwrap();
    assert_eq!(report.messages, 7);
    assert_eq!(
        report.questions, 5,
        "the question with evidence \"D\" is skipped"
    );
    assert_eq!(report.skipped_questions, 1);
    let hybrid = report
        .modes
        .iter()
        .find(|m| m.mode == Mode::Hybrid)
        .unwrap();
    let cats: Vec<&str> = hybrid
        .categories
        .iter()
        .map(|c| c.category.as_str())
        .collect();
    assert_eq!(cats, vec!["2 temporal", "4 single-hop", "5 adversarial"]);
    assert!(
        in_unit(hybrid.overall.ndcg10) && hybrid.overall.ndcg10 > 0.5,
        "{:?}",
        hybrid.overall
    );
    let single = &hybrid.categories[1];
    assert_eq!(single.published_dense, Some(0.462));
    assert!(single.recall10 > 0.99, "{single:?}");
    let packs = report.packs.as_ref().unwrap();
    let names: Vec<&str> = packs
        .calibration
        .sets
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        names,
        vec![
            "answerable (categories 1-4)",
            "cross-conversation",
            "adversarial (category 5, not pooled)"
        ]
    );
    let out = tempfile::tempdir().unwrap();
    let written = cairn_eval::write_locomo(&report, out.path()).unwrap();
    assert_eq!(written.len(), 5);
    let md = std::fs::read_to_string(out.path().join("locomo.md")).unwrap();
    assert!(md.contains("single-hop") && md.contains("0.462"));
}
