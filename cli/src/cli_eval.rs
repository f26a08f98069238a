//! `cairn eval ...`: retrieval-quality evaluation on public benchmarks (BEIR, LoCoMo) and the
//! behaviour scenario suite. A thin layer over `cairn_eval`: arguments, progress display,
//! output files.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cairn_eval::beir::{BeirOptions, DocMode};
use cairn_eval::locomo::LocomoOptions;
use cairn_eval::retrieval::parse_modes;
use cairn_eval::{Event, Fusion, Observer};
use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// A BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv): nDCG@10, Recall@10/100,
    /// MRR@10 and latency per retrieval mode, MemoryPack quality and coverage calibration.
    /// A full SciFact document-mode ingest embeds 5,183 abstracts: about 10–15 minutes on 2
    /// cores the first time, seconds once the embedding cache holds them.
    Beir {
        /// The BEIR folder (read in place).
        #[arg(long)]
        data: PathBuf,
        /// The qrels split (qrels/<split>.tsv).
        #[arg(long, default_value = "test")]
        split: String,
        /// Retrieval modes, comma-separated: dense, bm25, hybrid, hybrid-qdrant.
        #[arg(long, default_value = "dense,bm25,hybrid,hybrid-qdrant")]
        mode: String,
        /// `document`: one vector per document (as published BEIR figures); `chunked`: the
        /// default chunking, a document scores as its best chunk.
        #[arg(long, default_value = "document")]
        doc_mode: String,
        /// Quick run: the first N judged queries, and a corpus of their judged documents plus
        /// the first --limit-corpus documents of corpus.jsonl (not comparable with published
        /// figures).
        #[arg(long)]
        limit: Option<usize>,
        /// Documents kept besides the judged ones with --limit.
        #[arg(long, default_value_t = 1000)]
        limit_corpus: usize,
        #[command(flatten)]
        fusion: FusionArgs,
        /// Also evaluate a grid of RRF k and sparse weights for the hybrid mode.
        #[arg(long)]
        sweep: bool,
        #[command(flatten)]
        packs: PackArgs,
        /// Queries whose relevant documents are deleted at the end and asked again as
        /// in-domain unanswerable probes (0: none).
        #[arg(long, default_value_t = 100)]
        holdout: usize,
        #[command(flatten)]
        out: OutArgs,
    },
    /// LoCoMo conversations: each turn recorded as a message; per question, retrieval within
    /// its conversation scored against the evidence turns, per category.
    Locomo {
        /// The LoCoMo JSON file (read in place).
        #[arg(long)]
        data: PathBuf,
        /// Retrieval modes, comma-separated: dense, bm25, hybrid, hybrid-qdrant.
        #[arg(long, default_value = "dense,bm25,hybrid,hybrid-qdrant")]
        mode: String,
        /// Only the first N conversations.
        #[arg(long)]
        conversations: Option<usize>,
        /// Only the first N questions of each conversation.
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        fusion: FusionArgs,
        #[command(flatten)]
        packs: PackArgs,
        #[command(flatten)]
        out: OutArgs,
    },
    /// Run the declarative behaviour scenarios (JSON files); exit status 1 if any fails.
    Scenarios {
        #[arg(long, default_value = "eval/scenarios")]
        dir: PathBuf,
        /// Print the results as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Fusion parameters of the hybrid modes (defaults: the recall defaults).
#[derive(Debug, Args)]
pub struct FusionArgs {
    /// The recall path's dense share for short items (`hybrid`).
    #[arg(long)]
    dense_short: Option<f32>,
    /// The recall path's dense share for long items (`hybrid`).
    #[arg(long)]
    dense_long: Option<f32>,
    /// RRF k of Qdrant's own fusion (`hybrid-qdrant`).
    #[arg(long)]
    rrf_k: Option<f32>,
    /// Dense weight of Qdrant's own fusion (`hybrid-qdrant`).
    #[arg(long)]
    dense_weight: Option<f32>,
    /// Sparse weight of Qdrant's own fusion (`hybrid-qdrant`).
    #[arg(long)]
    sparse_weight: Option<f32>,
    /// Most query identifiers probed lexically by the `hybrid` mode (0: none).
    #[arg(long)]
    max_identifiers: Option<usize>,
    /// Weight of the identifier hits in the `hybrid` fusion.
    #[arg(long)]
    identifier_weight: Option<f32>,
}

impl FusionArgs {
    fn fusion(&self) -> Fusion {
        let d = Fusion::default();
        Fusion {
            dense_short: self.dense_short.unwrap_or(d.dense_short),
            dense_long: self.dense_long.unwrap_or(d.dense_long),
            rrf_k: self.rrf_k.unwrap_or(d.rrf_k),
            dense_weight: self.dense_weight.unwrap_or(d.dense_weight),
            sparse_weight: self.sparse_weight.unwrap_or(d.sparse_weight),
            identifiers: self.max_identifiers.unwrap_or(d.identifiers),
            identifier_weight: self.identifier_weight.unwrap_or(d.identifier_weight),
        }
    }
}

/// MemoryPack evaluation.
#[derive(Debug, Args)]
pub struct PackArgs {
    /// Token budgets of the pack-quality curve, comma-separated ("" or --no-packs: none).
    #[arg(long, default_value = "250,500,1000,2000")]
    budgets: String,
    /// Skip the MemoryPack quality and calibration.
    #[arg(long)]
    no_packs: bool,
    /// Unanswerable probe questions from another dataset: a BEIR queries.jsonl or a LoCoMo
    /// JSON file.
    #[arg(long)]
    probes: Option<PathBuf>,
    /// Most probes used.
    #[arg(long, default_value_t = 200)]
    probe_limit: usize,
}

impl PackArgs {
    fn budgets(&self) -> Result<Vec<usize>> {
        if self.no_packs {
            return Ok(Vec::new());
        }
        self.budgets
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                let b: usize = s.trim().parse().with_context(|| format!("budget {s:?}"))?;
                if !(cairn_recall::MIN_BUDGET..=cairn_recall::MAX_BUDGET).contains(&b) {
                    bail!(
                        "budget {b} is outside {}..={}",
                        cairn_recall::MIN_BUDGET,
                        cairn_recall::MAX_BUDGET
                    );
                }
                Ok(b)
            })
            .collect()
    }
}

/// Where results go.
#[derive(Debug, Args)]
pub struct OutArgs {
    /// Print the report as JSON instead of Markdown.
    #[arg(long)]
    json: bool,
    /// Also write the report (JSON, Markdown, SVG charts) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Persistent embedding cache (default: .cache/eval-embed-cache beside the model).
    #[arg(long, env = "CAIRN_EVAL_CACHE")]
    cache_dir: Option<PathBuf>,
    /// Also write every query's dense and BM25 lists with their scores to this file (JSON
    /// lines): the input of offline fusion and answerability analysis.
    #[arg(long)]
    dump_legs: Option<PathBuf>,
}

fn cache_dir(app: &crate::App, out: &OutArgs) -> PathBuf {
    out.cache_dir
        .clone()
        .unwrap_or_else(|| cairn_eval::stack::default_cache_dir(app.embed()))
}

/// A progress bar on a terminal, progress lines every 10 s otherwise (on stderr).
fn observer() -> Observer {
    let terminal = std::io::stderr().is_terminal();
    let bar: Arc<Mutex<Option<indicatif::ProgressBar>>> = Arc::new(Mutex::new(None));
    let last = Arc::new(Mutex::new(Instant::now()));
    Arc::new(move |event| {
        let Ok(mut bar) = bar.lock() else { return };
        match event {
            Event::IngestStarted { total } => {
                eprintln!("eval: ingesting {total} items");
                if terminal {
                    let b = indicatif::ProgressBar::new(total);
                    b.set_style(
                        indicatif::ProgressStyle::with_template(
                            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} · {per_sec} · ETA {eta}",
                        )
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                    );
                    *bar = Some(b);
                }
            }
            Event::Ingested { done, total } => match bar.as_ref() {
                Some(b) => b.set_position(done),
                None => {
                    if let Ok(mut l) = last.lock() {
                        if l.elapsed() >= Duration::from_secs(10) || done == total {
                            *l = Instant::now();
                            eprintln!("eval: ingested {done}/{total}");
                        }
                    }
                }
            },
            Event::IngestFinished => {
                if let Some(b) = bar.take() {
                    b.finish_and_clear();
                }
            }
            Event::Phase(p) => eprintln!("eval: {p}"),
        }
    })
}

fn emit(json: String, markdown: String, as_json: bool, written: &[PathBuf]) {
    if as_json {
        println!("{json}");
    } else {
        print!("{markdown}");
    }
    for p in written {
        eprintln!("eval: wrote {}", p.display());
    }
}

fn check_dir(p: &Path, what: &str) -> Result<()> {
    if !p.exists() {
        bail!("{what} {} does not exist", p.display());
    }
    Ok(())
}

/// Runs an `eval` subcommand.
pub async fn run(app: &crate::App, which: EvalCommand) -> Result<ExitCode> {
    match which {
        EvalCommand::Beir {
            data,
            split,
            mode,
            doc_mode,
            limit,
            limit_corpus,
            fusion,
            sweep,
            packs,
            holdout,
            out,
        } => {
            check_dir(&data, "BEIR folder")?;
            let mut opts = BeirOptions::new(data, &split);
            opts.modes = parse_modes(&mode)?;
            opts.doc_mode = DocMode::parse(&doc_mode).with_context(|| {
                format!("--doc-mode {doc_mode:?}: expected document or chunked")
            })?;
            opts.limit = limit;
            opts.limit_corpus = limit_corpus;
            opts.fusion = fusion.fusion();
            opts.sweep = sweep;
            opts.budgets = packs.budgets()?;
            opts.probes = packs.probes.clone();
            opts.probe_limit = packs.probe_limit;
            opts.holdout = holdout;
            opts.dump_legs = out.dump_legs.clone();
            let env = app.eval_env(Some(cache_dir(app, &out))).await?;
            let report = cairn_eval::beir::run(&env, &opts, &observer()).await?;
            let written = match &out.out {
                Some(dir) => cairn_eval::write_beir(&report, dir)?,
                None => Vec::new(),
            };
            emit(
                cairn_eval::report::to_json(&report)?,
                report.markdown(),
                out.json,
                &written,
            );
            Ok(ExitCode::SUCCESS)
        }
        EvalCommand::Locomo {
            data,
            mode,
            conversations,
            limit,
            fusion,
            packs,
            out,
        } => {
            check_dir(&data, "LoCoMo file")?;
            let mut opts = LocomoOptions::new(data);
            opts.modes = parse_modes(&mode)?;
            opts.conversations = conversations;
            opts.questions = limit;
            opts.fusion = fusion.fusion();
            opts.budgets = packs.budgets()?;
            opts.probes = packs.probes.clone();
            opts.probe_limit = packs.probe_limit;
            opts.dump_legs = out.dump_legs.clone();
            let env = app.eval_env(Some(cache_dir(app, &out))).await?;
            let report = cairn_eval::locomo::run(&env, &opts, &observer()).await?;
            let written = match &out.out {
                Some(dir) => cairn_eval::write_locomo(&report, dir)?,
                None => Vec::new(),
            };
            emit(
                cairn_eval::report::to_json(&report)?,
                report.markdown(),
                out.json,
                &written,
            );
            Ok(ExitCode::SUCCESS)
        }
        EvalCommand::Scenarios { dir, json } => {
            check_dir(&dir, "scenario directory")?;
            let env = app.eval_env(None).await?;
            let results = cairn_eval::scenario::run_dir(&env, &dir).await?;
            if json {
                println!("{}", cairn_eval::report::to_json(&results)?);
            } else {
                print!("{}", cairn_eval::scenario::summary(&results));
            }
            Ok(if results.iter().all(|r| r.passed) && !results.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}
