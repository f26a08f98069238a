//! LoCoMo (long multi-session conversations) as a retrieval task: the runner.
//!
//! The conversations are read by [`crate::data::locomo`] and recorded with
//! `Ingestor::record_messages`, one batch per session (see that module for the mapping from
//! turns to messages; no QA field is ever indexed).
//!
//! Each question is retrieved within its own conversation (filter `conversation_id`) and
//! scored against its `evidence` dia ids (binary relevance): nDCG@10, Recall@5, Recall@10,
//! per category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial) and
//! overall; a question left without a usable evidence id is skipped. The report and its
//! files are in [`report`].

pub mod report;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use cairn_models::{PointKind, StoredPoint};

use crate::data::locomo::{evidence_ids, messages, read_samples, sessions, Sample};
use crate::data::read_probe_texts;
use crate::packs::{PackQuery, PackReport};
use crate::report::RunInfo;
use crate::retrieval::{Fusion, Mode, QuerySpec, Retriever};
use crate::stack::{eval_scope, EvalEnv, Event, Observer, Workspace};
use crate::Result;

pub use report::{write_locomo, CategoryScores, LocomoMode, LocomoReport};

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
    /// Write every query's leg lists here (JSON lines, see `Retriever::dump_legs`).
    pub dump_legs: Option<PathBuf>,
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
            dump_legs: None,
        }
    }
}

fn dia_of(p: &StoredPoint) -> Option<String> {
    p.metadata
        .as_ref()
        .and_then(|m| m.get("dia_id"))
        .and_then(|v| v.as_str())
        .map(str::to_string)
}

/// Runs the LoCoMo evaluation.
pub async fn run(env: &EvalEnv, opts: &LocomoOptions, observer: &Observer) -> Result<LocomoReport> {
    let run_info = RunInfo::collect(env.embedder.model_id());
    let mut samples = read_samples(&opts.data)?;
    if let Some(n) = opts.conversations {
        samples.truncate(n);
    }
    let ws = Workspace::new(env, false).await?;
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
    let vectors_computed = env.vectors_computed_since(cache_before);

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
    if let Some(path) = &opts.dump_legs {
        retriever.dump_legs(&queries, &dia_of, path).await?;
    }
    let mut modes = Vec::new();
    for mode in &opts.modes {
        let scores = retriever
            .evaluate(*mode, &queries, &dia_of, observer)
            .await?;
        modes.push(LocomoMode::of(*mode, &queries, &scores));
    }

    let packs = if opts.budgets.is_empty() {
        None
    } else {
        let packs = pack_eval(&ws, &scope, &samples, &queries, opts, observer).await?;
        if let Some(path) = &opts.dump_legs {
            crate::packs::dump_packs(&packs.calibration.sets, &path.with_extension("packs.jsonl"))?;
        }
        Some(packs)
    };

    let mut report = LocomoReport {
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
        pack_recall_ratio: None,
    };
    report.pack_recall_ratio = report.measure_pack_recall_ratio();
    Ok(report)
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
        let texts = read_probe_texts(path, opts.probe_limit)?;
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
