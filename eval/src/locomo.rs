//! LoCoMo (long multi-session conversations) as a retrieval task.
//!
//! Each turn `{speaker, dia_id, text}` becomes one message recorded with
//! `Ingestor::record_messages`: conversation id = the sample id, role `user`, `speaker` =
//! the speaker's name, `ts` = the session's date plus one second per turn (so turns keep their
//! order), turn id = the `dia_id` sanitized (`D1:3` → `D1_3`), and `{"dia_id", "session"}` as
//! metadata. A turn that shares an image carries the dataset's caption of it; the message
//! text is then `text` followed by ` [shared an image: <caption>]`, because the photo is part
//! of what was said. No QA field (question, answer, evidence, category) is ever indexed.
//!
//! Each question is retrieved within its own conversation (filter `conversation_id`) and
//! scored against its `evidence` dia ids (binary relevance): nDCG@10, Recall@5, Recall@10,
//! per category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial) and
//! overall. Malformed evidence entries are repaired where unambiguous (`D8:6; D9:17` → two
//! ids, `D:11:26` → `D11:26`) and dropped otherwise; a question left without evidence is
//! skipped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use cairn_ingest::MessageInput;
use cairn_models::{PointKind, Role, StoredPoint};
use serde::{Deserialize, Serialize};

use crate::metrics::{mean, Latency};
use crate::packs::{PackQuery, PackReport};
use crate::report::RunInfo;
use crate::retrieval::{Fusion, Mode, QueryScores, QuerySpec, Retriever};
use crate::stack::{eval_scope, EvalEnv, Event, Observer, Workspace};
use crate::{EvalError, Result};

/// One LoCoMo sample (a conversation and its questions).
#[derive(Debug, Clone, Deserialize)]
pub struct Sample {
    pub sample_id: String,
    pub conversation: serde_json::Map<String, serde_json::Value>,
    pub qa: Vec<Qa>,
}

/// One question. Only `question`, `evidence` and `category` are read.
#[derive(Debug, Clone, Deserialize)]
pub struct Qa {
    pub question: String,
    #[serde(default)]
    pub evidence: Vec<String>,
    pub category: u8,
}

/// One turn.
#[derive(Debug, Clone, Deserialize)]
pub struct Turn {
    pub speaker: String,
    pub dia_id: String,
    pub text: String,
    #[serde(default)]
    pub blip_caption: Option<String>,
}

/// One session of a conversation.
#[derive(Debug, Clone)]
pub struct Session {
    pub number: u32,
    /// Unix epoch milliseconds of the session's start.
    pub ts: i64,
    pub turns: Vec<Turn>,
}

/// Reads the samples of a LoCoMo JSON file.
pub fn read_samples(path: &Path) -> Result<Vec<Sample>> {
    let text = std::fs::read_to_string(path).map_err(|e| EvalError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| EvalError::data(path, e.to_string()))
}

/// Parses a session date such as `1:56 pm on 8 May, 2023` (read as UTC).
pub fn parse_session_date(s: &str) -> Option<i64> {
    let norm = s.split_whitespace().collect::<Vec<_>>().join(" ");
    for fmt in ["%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(&norm, fmt) {
            return Some(t.and_utc().timestamp_millis());
        }
    }
    None
}

/// The sessions of a sample, in order.
pub fn sessions(sample: &Sample, path: &Path) -> Result<Vec<Session>> {
    let mut out = Vec::new();
    for (key, value) in &sample.conversation {
        let Some(n) = key
            .strip_prefix("session_")
            .and_then(|r| r.parse::<u32>().ok())
        else {
            continue;
        };
        let turns: Vec<Turn> = serde_json::from_value(value.clone())
            .map_err(|e| EvalError::data(path, format!("{} {key}: {e}", sample.sample_id)))?;
        let date_key = format!("session_{n}_date_time");
        let date = sample
            .conversation
            .get(&date_key)
            .and_then(|v| v.as_str())
            .ok_or_else(|| {
                EvalError::data(path, format!("{}: {date_key} missing", sample.sample_id))
            })?;
        let ts = parse_session_date(date).ok_or_else(|| {
            EvalError::data(
                path,
                format!("{} {date_key}: unreadable date {date:?}", sample.sample_id),
            )
        })?;
        out.push(Session {
            number: n,
            ts,
            turns,
        });
    }
    out.sort_by_key(|s| s.number);
    Ok(out)
}

/// `D1:3` → `D1_3` (turn ids are `[A-Za-z0-9_.-]+`).
pub fn turn_id(dia_id: &str) -> String {
    dia_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Normalized evidence ids of a question (see the module docs).
pub fn evidence_ids(raw: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for entry in raw {
        for part in entry.split([';', ',', ' ']).filter(|p| !p.is_empty()) {
            let digits: Vec<&str> = part
                .trim_start_matches('D')
                .split(':')
                .filter(|p| !p.is_empty())
                .collect();
            if part.starts_with('D')
                && digits.len() == 2
                && digits.iter().all(|d| d.chars().all(|c| c.is_ascii_digit()))
            {
                let id = format!("D{}:{}", digits[0], digits[1]);
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
    }
    out
}

/// The messages of one sample.
pub fn messages(sample: &Sample, sessions: &[Session]) -> Vec<Vec<MessageInput>> {
    sessions
        .iter()
        .map(|s| {
            s.turns
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let content = match &t.blip_caption {
                        Some(c) if !c.trim().is_empty() => {
                            format!("{} [shared an image: {}]", t.text, c.trim())
                        }
                        _ => t.text.clone(),
                    };
                    MessageInput {
                        conversation_id: sample.sample_id.clone(),
                        role: Role::User,
                        content,
                        ts: Some(cairn_ingest::Timestamp::Millis(s.ts + i as i64 * 1000)),
                        turn_id: Some(turn_id(&t.dia_id)),
                        speaker: Some(t.speaker.clone()),
                        metadata: Some(
                            serde_json::json!({"dia_id": t.dia_id, "session": s.number}),
                        ),
                    }
                })
                .filter(|m| !m.content.trim().is_empty())
                .collect()
        })
        .collect()
}

/// Category names.
pub fn category_name(c: u8) -> &'static str {
    match c {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        5 => "adversarial",
        _ => "other",
    }
}

/// Published per-category nDCG@10 on all 10 conversations (bge-small-en-v1.5, BM25).
pub fn published(c: u8) -> Option<(f64, f64)> {
    match c {
        4 => Some((0.462, 0.542)),
        1 => Some((0.299, 0.267)),
        2 => Some((0.537, 0.564)),
        3 => Some((0.265, 0.245)),
        5 => Some((0.255, 0.490)),
        _ => None,
    }
}

/// Options of a LoCoMo run.
#[derive(Debug, Clone)]
pub struct LocomoOptions {
    pub data: PathBuf,
    pub modes: Vec<Mode>,
    /// First N conversations only.
    pub conversations: Option<usize>,
    /// First N questions of each conversation only.
    pub questions: Option<usize>,
    pub fusion: Fusion,
    pub budgets: Vec<usize>,
    /// Foreign unanswerable probes (a BEIR `queries.jsonl`).
    pub probes: Option<PathBuf>,
    pub probe_limit: usize,
}

impl LocomoOptions {
    pub fn new(data: PathBuf) -> Self {
        LocomoOptions {
            data,
            modes: Mode::ALL.to_vec(),
            conversations: None,
            questions: None,
            fusion: Fusion::default(),
            budgets: crate::packs::DEFAULT_BUDGETS.to_vec(),
            probes: None,
            probe_limit: 200,
        }
    }
}

/// Figures of one category (or all) under one mode.
#[derive(Debug, Clone, Serialize)]
pub struct CategoryScores {
    pub category: String,
    pub questions: usize,
    pub ndcg10: f64,
    pub recall5: f64,
    pub recall10: f64,
    pub mrr10: f64,
    /// Published nDCG@10 (bge-small-en-v1.5, BM25) on all 10 conversations.
    pub published_dense: Option<f64>,
    pub published_bm25: Option<f64>,
}

/// One mode's results.
#[derive(Debug, Clone, Serialize)]
pub struct LocomoMode {
    pub mode: Mode,
    pub categories: Vec<CategoryScores>,
    pub overall: CategoryScores,
    pub latency: Latency,
}

/// The report of a LoCoMo run.
#[derive(Debug, Clone, Serialize)]
pub struct LocomoReport {
    pub run: RunInfo,
    pub data: String,
    pub conversations: Vec<String>,
    pub messages: usize,
    pub questions: usize,
    pub skipped_questions: usize,
    pub ingest_seconds: f64,
    pub vectors_computed: u64,
    pub fusion: Fusion,
    pub modes: Vec<LocomoMode>,
    pub packs: Option<PackReport>,
}

fn dia_of(p: &StoredPoint) -> Option<String> {
    p.metadata
        .as_ref()
        .and_then(|m| m.get("dia_id"))
        .and_then(|v| v.as_str())
        .map(str::to_string)
}

fn aggregate(
    name: String,
    scores: &[&QueryScores],
    published: Option<(f64, f64)>,
) -> CategoryScores {
    let col = |f: fn(&QueryScores) -> f64| mean(&scores.iter().map(|s| f(s)).collect::<Vec<_>>());
    CategoryScores {
        category: name,
        questions: scores.len(),
        ndcg10: col(|s| s.ndcg10),
        recall5: col(|s| s.recall5),
        recall10: col(|s| s.recall10),
        mrr10: col(|s| s.mrr10),
        published_dense: published.map(|p| p.0),
        published_bm25: published.map(|p| p.1),
    }
}

/// Runs the LoCoMo evaluation.
pub async fn run(env: &EvalEnv, opts: &LocomoOptions, observer: &Observer) -> Result<LocomoReport> {
    let run_info = RunInfo::collect(env.embedder.model_id());
    let mut samples = read_samples(&opts.data)?;
    if let Some(n) = opts.conversations {
        samples.truncate(n);
    }
    let ws = Workspace::new(&env.embedder, false).await?;
    let scope = eval_scope("locomo")?;

    // Ingest: one batch per session.
    let mut batches = Vec::new();
    for s in &samples {
        let sess = sessions(s, &opts.data)?;
        batches.extend(messages(s, &sess));
    }
    let total: usize = batches.iter().map(Vec::len).sum();
    observer(Event::IngestStarted {
        total: total as u64,
    });
    let cache_before = env.cache_bytes();
    let started = Instant::now();
    let mut done = 0u64;
    for batch in batches {
        let n = batch.len() as u64;
        ws.ingestor.record_messages(&scope, batch).await?;
        done += n;
        observer(Event::Ingested {
            done,
            total: total as u64,
        });
    }
    ws.store.flush().await?;
    let ingest_seconds = started.elapsed().as_secs_f64();
    observer(Event::IngestFinished);
    let vectors_computed =
        env.cache_bytes().saturating_sub(cache_before) / env.cache_record_bytes();

    // Questions.
    let mut queries = Vec::new();
    let mut skipped = 0usize;
    for s in &samples {
        let qa = match opts.questions {
            Some(n) => &s.qa[..n.min(s.qa.len())],
            None => &s.qa[..],
        };
        for (i, q) in qa.iter().enumerate() {
            let ev = evidence_ids(&q.evidence);
            if ev.is_empty() || q.question.trim().is_empty() {
                skipped += 1;
                continue;
            }
            queries.push(QuerySpec {
                id: format!("{}#{i}", s.sample_id),
                text: q.question.clone(),
                qrels: ev.into_iter().map(|e| (e, 1.0)).collect(),
                group: Some(q.category.to_string()),
                conversation: Some(s.sample_id.clone()),
            });
        }
    }
    for q in &queries {
        env.embedder.embed_query(&q.text).await?;
    }

    let retriever = Retriever::new(&ws, scope.clone(), PointKind::Message, 100, opts.fusion);
    let mut modes = Vec::new();
    for mode in &opts.modes {
        let scores = retriever
            .evaluate(*mode, &queries, &dia_of, observer)
            .await?;
        let mut by_cat: BTreeMap<u8, Vec<&QueryScores>> = BTreeMap::new();
        for (q, s) in queries.iter().zip(&scores) {
            let c: u8 = q.group.as_deref().and_then(|g| g.parse().ok()).unwrap_or(0);
            by_cat.entry(c).or_default().push(s);
        }
        let categories = by_cat
            .iter()
            .map(|(c, s)| aggregate(format!("{c} {}", category_name(*c)), s, published(*c)))
            .collect();
        let all: Vec<&QueryScores> = scores.iter().collect();
        modes.push(LocomoMode {
            mode: *mode,
            categories,
            overall: aggregate("overall".into(), &all, None),
            latency: Latency::of(&scores.iter().map(|s| s.latency_ms).collect::<Vec<_>>()),
        });
    }

    let packs = if opts.budgets.is_empty() {
        None
    } else {
        Some(pack_eval(&ws, &scope, &samples, &queries, opts, observer).await?)
    };

    Ok(LocomoReport {
        run: run_info,
        data: opts.data.display().to_string(),
        conversations: samples.iter().map(|s| s.sample_id.clone()).collect(),
        messages: total,
        questions: queries.len(),
        skipped_questions: skipped,
        ingest_seconds,
        vectors_computed,
        fusion: opts.fusion,
        modes,
        packs,
    })
}

async fn pack_eval(
    ws: &Workspace,
    scope: &cairn_models::Scope,
    samples: &[Sample],
    queries: &[QuerySpec],
    opts: &LocomoOptions,
    observer: &Observer,
) -> Result<PackReport> {
    let is_answerable = |q: &QuerySpec| q.group.as_deref() != Some("5");
    let pq = |q: &QuerySpec, conversation: Option<String>, evidence: bool| PackQuery {
        text: q.text.clone(),
        evidence: if evidence {
            q.qrels.keys().cloned().collect()
        } else {
            HashSet::new()
        },
        conversation,
    };
    let answerable: Vec<PackQuery> = queries
        .iter()
        .filter(|q| is_answerable(q))
        .map(|q| pq(q, q.conversation.clone(), true))
        .collect();
    let ids: Vec<String> = samples.iter().map(|s| s.sample_id.clone()).collect();
    let mut sets: Vec<(String, String, Vec<PackQuery>)> = Vec::new();
    if ids.len() > 1 {
        // Cross-conversation probes: the answerable questions of conversation i, asked
        // inside conversation i+1 (other people, similar topics).
        let next: HashMap<&String, &String> = ids.iter().zip(ids.iter().cycle().skip(1)).collect();
        let probes: Vec<PackQuery> = queries
            .iter()
            .filter(|q| is_answerable(q))
            .filter_map(|q| {
                let c = q.conversation.as_ref()?;
                Some(pq(q, next.get(c).map(|n| (*n).clone()), false))
            })
            .step_by(((answerable.len() / opts.probe_limit.max(1)).max(1)).max(1))
            .take(opts.probe_limit)
            .collect();
        sets.push((
            "cross-conversation".into(),
            format!(
                "near-domain: {} answerable questions (every n-th) asked in the next conversation, where other people talk",
                probes.len()
            ),
            probes,
        ));
    }
    if let Some(path) = &opts.probes {
        let texts = crate::beir::read_probe_texts(path, opts.probe_limit)?;
        let probes: Vec<PackQuery> = texts
            .into_iter()
            .enumerate()
            .map(|(i, text)| PackQuery {
                text,
                evidence: HashSet::new(),
                conversation: Some(ids[i % ids.len().max(1)].clone()),
            })
            .collect();
        sets.push((
            "foreign".into(),
            format!(
                "the first {} queries of {} (another dataset) asked in the conversations, round-robin",
                probes.len(),
                path.display()
            ),
            probes,
        ));
    }
    let cited = |c: &cairn_models::Citation| c.turn_id.as_deref().map(|t| t.replacen('_', ":", 1));
    let mut report = crate::packs::evaluate(
        ws,
        scope,
        &answerable,
        &sets,
        &opts.budgets,
        &cited,
        "answerable (categories 1-4)",
        observer,
    )
    .await?;
    // Adversarial questions are reported as their own set: their evidence is in the
    // conversation, but the question mis-attributes it.
    let adversarial: Vec<PackQuery> = queries
        .iter()
        .filter(|q| !is_answerable(q))
        .map(|q| pq(q, q.conversation.clone(), true))
        .collect();
    if !adversarial.is_empty() {
        let extra = crate::packs::evaluate(
            ws,
            scope,
            &adversarial,
            &[],
            &[crate::packs::CALIBRATION_BUDGET],
            &cited,
            "adversarial (category 5, not pooled)",
            observer,
        )
        .await?;
        let mut sets = report.calibration.sets.clone();
        // Shown, but not counted as answerable in the threshold table.
        sets.extend(extra.calibration.sets.into_iter().map(|mut s| {
            s.answerable = false;
            s.description = "category 5: questions that attribute what one speaker said to the other; their evidence turns are in the conversation, so they are shown apart and not pooled".into();
            s
        }));
        let current = report.calibration.current_min_relevance;
        let mut cal = crate::packs::calibrate(
            sets.iter()
                .filter(|s| !s.name.starts_with("adversarial"))
                .cloned()
                .collect(),
            current,
        );
        cal.sets = sets;
        report.calibration = cal;
    }
    Ok(report)
}

impl LocomoReport {
    pub fn stem(&self) -> String {
        "locomo".into()
    }

    pub fn markdown(&self) -> String {
        let mut md = format!("# LoCoMo retrieval\n\n{}\n", self.run.markdown());
        md.push_str(&format!(
            "\n## Data\n\n- `{}`: conversations {} — {} messages recorded with `Ingestor::record_messages` in {:.1} s ({} vectors computed, the rest from the embedding cache).\n- {} questions evaluated ({} skipped: no usable evidence id); each question is retrieved within its own conversation and scored against its evidence turns.\n- Fusion of the hybrid modes: RRF k = {}, dense weight {}, sparse weight {}, identifiers {}. Ranking depth 100.\n- Published figures are MTEB/LMEB LoCoMo nDCG@10 on all 10 conversations; ours are on the conversations above.\n",
            self.data,
            self.conversations.join(", "),
            self.messages,
            self.ingest_seconds,
            self.vectors_computed,
            self.questions,
            self.skipped_questions,
            self.fusion.rrf_k,
            self.fusion.dense_weight,
            self.fusion.sparse_weight,
            self.fusion.identifiers
        ));
        md.push_str("\n## nDCG@10 per category\n\n| category | questions |");
        for m in &self.modes {
            md.push_str(&format!(" Cairn `{}` |", m.mode));
        }
        md.push_str(" bge-small-en-v1.5 (published) | BM25 (published) |\n|---|---:|");
        md.push_str(&"---:|".repeat(self.modes.len() + 2));
        md.push('\n');
        if let Some(first) = self.modes.first() {
            for (i, c) in first.categories.iter().enumerate() {
                md.push_str(&format!("| {} | {} |", c.category, c.questions));
                for m in &self.modes {
                    md.push_str(&format!(" {:.3} |", m.categories[i].ndcg10));
                }
                md.push_str(&format!(
                    " {} | {} |\n",
                    crate::report::f3(c.published_dense),
                    crate::report::f3(c.published_bm25)
                ));
            }
            md.push_str(&format!("| overall | {} |", first.overall.questions));
            for m in &self.modes {
                md.push_str(&format!(" {:.3} |", m.overall.ndcg10));
            }
            md.push_str(" – | – |\n");
        }
        md.push_str("\n## All metrics per mode\n\n| mode | category | nDCG@10 | Recall@5 | Recall@10 | MRR@10 |\n|---|---|---:|---:|---:|---:|\n");
        for m in &self.modes {
            for c in m.categories.iter().chain(std::iter::once(&m.overall)) {
                md.push_str(&format!(
                    "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |\n",
                    m.mode, c.category, c.ndcg10, c.recall5, c.recall10, c.mrr10
                ));
            }
        }
        md.push_str("\n## Latency per question\n\n| mode | p50 ms | p95 ms |\n|---|---:|---:|\n");
        for m in &self.modes {
            md.push_str(&format!(
                "| {} | {:.1} | {:.1} |\n",
                m.mode, m.latency.p50_ms, m.latency.p95_ms
            ));
        }
        md.push_str("\nQuery vectors come from the embedding cache (see the BEIR report for the model's query embedding latency).\n");
        if let Some(p) = &self.packs {
            md.push_str("\n## MemoryPacks\n\n");
            md.push_str(&p.markdown());
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_parse() {
        let t = parse_session_date("1:56 pm on 8 May, 2023").unwrap();
        assert_eq!(
            chrono::DateTime::from_timestamp_millis(t)
                .unwrap()
                .to_rfc3339(),
            "2023-05-08T13:56:00+00:00"
        );
        assert!(parse_session_date("10:37 am on 27 June, 2023").is_some());
        assert!(parse_session_date("yesterday").is_none());
    }

    #[test]
    fn evidence_is_repaired() {
        let raw = vec![
            "D8:6; D9:17".to_string(),
            "D".to_string(),
            "D:11:26".to_string(),
            "D1:3".to_string(),
            "D1:3".to_string(),
        ];
        assert_eq!(evidence_ids(&raw), vec!["D8:6", "D9:17", "D11:26", "D1:3"]);
        assert_eq!(turn_id("D1:3"), "D1_3");
    }

    #[test]
    fn sessions_and_messages() {
        let sample: Sample = serde_json::from_value(serde_json::json!({
            "sample_id": "conv-1",
            "conversation": {
                "speaker_a": "A", "speaker_b": "B",
                "session_2_date_time": "9:00 am on 2 May, 2023",
                "session_2": [{"speaker": "B", "dia_id": "D2:1", "text": "Later."}],
                "session_1_date_time": "8:00 pm on 1 May, 2023",
                "session_1": [
                    {"speaker": "A", "dia_id": "D1:1", "text": "Hi!"},
                    {"speaker": "B", "dia_id": "D1:2", "text": "Look", "blip_caption": "a dog"}
                ]
            },
            "qa": [{"question": "q?", "answer": "secret", "evidence": ["D1:1"], "category": 4}]
        }))
        .unwrap();
        let s = sessions(&sample, Path::new("x")).unwrap();
        assert_eq!(s.iter().map(|s| s.number).collect::<Vec<_>>(), vec![1, 2]);
        let m = messages(&sample, &s);
        assert_eq!(m[0][1].content, "Look [shared an image: a dog]");
        assert_eq!(m[0][1].turn_id.as_deref(), Some("D1_2"));
        assert!(m.iter().flatten().all(|m| !m.content.contains("secret")));
    }
}
