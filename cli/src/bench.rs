//! `cairn bench`: ingest and recall benchmarks. They report figures and ratios; nothing here
//! passes or fails on time.
//!
//! The engine is assembled by the evaluation harness's stack (`cairn_eval::stack`: the model
//! in an [`cairn_eval::EvalEnv`], store and write path in a [`Workspace`]), the one assembly path `cairn
//! eval` uses too; the store honours `store.sync` / `CAIRN_SYNC` (to measure the durability
//! cost).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use cairn_eval::stack::{Workspace, WorkspaceOptions};
use cairn_ingest::{Chunker, DocumentInput, MediaType, Progress};
use cairn_models::ids::{chunk_point_id, document_id, document_record_id};
use cairn_models::{PointKind, Scope, StoredPoint, TrustOrigin};
use cairn_recall::{RecallConfig, RecallRequest};
use cairn_store::{Filter, SearchMode, SearchRequest, UpsertPoint};
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// End-to-end ingest throughput against the raw embedder on the same chunks, and the
    /// cost of an unchanged re-ingest.
    Ingest {
        /// A BEIR `corpus.jsonl` to take documents from (default: generated documents).
        #[arg(long)]
        corpus: Option<std::path::PathBuf>,
        /// Number of documents.
        #[arg(long, default_value_t = 200)]
        docs: usize,
        #[arg(long)]
        json: bool,
    },
    /// Recall latency (retrieval alone, and the whole recall with query embedding and pack
    /// assembly) over a store of N chunks.
    Recall {
        /// Number of chunks in the store; several sizes (`10000,100000,1000000`) run one
        /// after another, each on a fresh store, with a summary table at the end.
        #[arg(long, value_delimiter = ',', default_value = "10000")]
        chunks: Vec<usize>,
        /// Number of timed queries (all distinct, so no cache helps).
        #[arg(long, default_value_t = 200)]
        queries: usize,
        /// Number of real texts embedded with the model; the store's chunks are
        /// perturbations of them (see the command's output).
        #[arg(long, default_value_t = 300)]
        base: usize,
        /// A BEIR `corpus.jsonl` whose texts become the chunks' texts (real vocabulary for
        /// BM25), with the `queries.jsonl` beside it as the timed queries; the first `base`
        /// passages are the embedded texts (default: generated memos and questions, whose
        /// vocabulary of about 60 words puts most chunks in every posting list).
        #[arg(long)]
        corpus: Option<std::path::PathBuf>,
        /// Also write the corpus (vectors, texts, scope) and the query vectors under this
        /// directory, one folder per size, for a peer store to load the same data
        /// (`scripts/peer_lancedb.py`).
        #[arg(long)]
        dump_corpus: Option<std::path::PathBuf>,
        /// Build the index (`optimize`) every this many chunks during the load, as the server
        /// does after every 1,000 written and `cairn ingest` after each large batch (0: only
        /// once, after the load). The load time then includes those builds; the output
        /// reports their share.
        #[arg(long, default_value_t = 0)]
        optimize_every: usize,
        #[arg(long)]
        json: bool,
    },
}

/// A small deterministic PRNG (SplitMix64): benchmark corpora are reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Two independent standard normal samples (Box-Muller; both halves, so a 384-d
    /// perturbation costs 192 logarithms, not 384: the generator is not what a load times).
    fn gauss_pair(&mut self) -> (f32, f32) {
        let u1 = self.unit().max(1e-7);
        let u2 = self.unit();
        let r = (-2.0 * u1.ln()).sqrt();
        let (sin, cos) = (2.0 * std::f32::consts::PI * u2).sin_cos();
        (r * cos, r * sin)
    }
}

const SUBJECTS: &[&str] = &[
    "the shipment",
    "our warehouse",
    "the billing team",
    "the new hire",
    "the quarterly report",
    "the backup server",
    "customer support",
    "the marketing plan",
    "the laptop refresh",
    "the office move",
    "the security audit",
    "the travel policy",
    "the data pipeline",
    "the design review",
    "the vendor contract",
    "the coffee machine",
    "the release train",
];
const VERBS: &[&str] = &[
    "was delayed until",
    "needs approval from",
    "is scheduled for",
    "was moved to",
    "depends on",
    "is owned by",
    "was reviewed during",
    "must be finished before",
    "is blocked by",
    "was discussed with",
];
const OBJECTS: &[&str] = &[
    "next Tuesday",
    "the finance director",
    "the Berlin office",
    "the third sprint",
    "the external auditors",
    "a signed purchase order",
    "the holiday freeze",
    "the IT desk",
    "the spring offsite",
    "the legal team",
    "the platform group",
    "the end of March",
];

fn sentence(rng: &mut Rng) -> String {
    format!(
        "{} {} {}.",
        SUBJECTS[rng.below(SUBJECTS.len())],
        VERBS[rng.below(VERBS.len())],
        OBJECTS[rng.below(OBJECTS.len())]
    )
}

fn generated_doc(rng: &mut Rng, i: usize) -> String {
    let mut text = format!("Memo {i}. ");
    for _ in 0..(20 + rng.below(40)) {
        let mut s = sentence(rng);
        if let Some(first) = s.get(..1) {
            s = first.to_uppercase() + &s[1..];
        }
        text.push_str(&s);
        text.push(' ');
    }
    text
}

/// The texts `bench recall` loads and asks: passages for the chunks (the first `n_base` are
/// the ones embedded), words swapped into copies of a passage, and the timed queries.
struct BenchTexts {
    passages: Vec<String>,
    n_base: usize,
    swaps: Vec<String>,
    queries: Vec<String>,
    /// The generator's state after the texts were made (the load's perturbations go on
    /// from it, so a run is reproducible).
    seed: u64,
    label: String,
}

impl BenchTexts {
    fn load(corpus: Option<&Path>, n_base: usize, n_queries: usize) -> Result<Self> {
        let Some(path) = corpus else {
            let mut rng = Rng(7);
            let passages: Vec<String> = (0..n_base.max(1))
                .map(|i| generated_doc(&mut rng, i).chars().take(600).collect())
                .collect();
            let queries = (0..n_queries)
                .map(|i| {
                    format!(
                        "What about {} {} (case {i})?",
                        SUBJECTS[i % SUBJECTS.len()],
                        VERBS[(i / 3) % VERBS.len()]
                    )
                })
                .collect();
            let swaps = OBJECTS
                .iter()
                .map(|o| o.split(' ').next_back().unwrap_or("x").to_string())
                .collect();
            return Ok(BenchTexts {
                n_base: passages.len(),
                passages,
                swaps,
                queries,
                seed: rng.0,
                label: "generated memos (a vocabulary of about 60 words)".into(),
            });
        };
        let docs = cairn_ingest::beir::read_corpus(path)?;
        let passages: Vec<String> = docs
            .iter()
            .flat_map(|d| passages_of(&d.full_text(), 600))
            .collect();
        anyhow::ensure!(!passages.is_empty(), "{}: no text", path.display());
        let mut seen = std::collections::HashSet::new();
        let swaps: Vec<String> = passages
            .iter()
            .flat_map(|p| p.split_whitespace())
            .filter(|w| seen.insert(*w))
            .map(str::to_string)
            .collect();
        let qpath = path.with_file_name("queries.jsonl");
        let asked: Vec<String> = cairn_eval::data::beir::read_queries(&qpath)?
            .into_iter()
            .map(|q| q.text)
            .collect();
        anyhow::ensure!(!asked.is_empty(), "{}: no queries", qpath.display());
        // Past the file's end the queries come round again, marked, so each text is new.
        let queries = (0..n_queries)
            .map(|i| match i / asked.len() {
                0 => asked[i].clone(),
                round => format!("{} ({round})", asked[i % asked.len()]),
            })
            .collect();
        Ok(BenchTexts {
            n_base: n_base.clamp(1, passages.len()),
            label: format!(
                "{} passages of {} documents in {}, {} words",
                passages.len(),
                docs.len(),
                path.display(),
                swaps.len()
            ),
            passages,
            swaps,
            queries,
            seed: 7,
        })
    }
}

/// `text` cut at sentence ends into passages of about `target` characters (a sentence longer
/// than that is one passage).
fn passages_of(text: &str, target: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for sentence in text.split_inclusive(". ") {
        if !current.trim().is_empty() && current.len() + sentence.len() > target {
            out.push(std::mem::take(&mut current).trim().to_string());
        }
        current.push_str(sentence);
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_string());
    }
    out
}

/// A field of `/proc/self/status` in MiB (`VmHWM`: peak resident set; `RssAnon`: resident
/// anonymous memory, what the process holds that the OS cannot page out to a file;
/// `RssFile`: resident pages of mapped files, which the page cache can drop).
fn status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find(|l| l.split(':').next() == Some(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn peak_rss_mib() -> Option<f64> {
    status_mib("VmHWM")
}

/// Resets the peak resident set (`VmHWM`) to the current one, so each size of a scale run
/// reports its own peak (Linux: writing 5 to `clear_refs`).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Bytes allocated on disk under `dir` (blocks, not apparent sizes: mapped files are sparse).
fn dir_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.blocks() * 512)
        .sum()
}

/// Samples `RssAnon` every 50 ms on a thread of its own and keeps the largest value: Linux
/// keeps a peak only for the whole resident set (`VmHWM`), which also counts mapped file
/// pages the page cache can drop.
struct AnonPeak {
    stop: Arc<std::sync::atomic::AtomicBool>,
    peak_kib: Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AnonPeak {
    fn start() -> Self {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let stop = Arc::new(AtomicBool::new(false));
        let peak_kib = Arc::new(AtomicU64::new(0));
        let (s, p) = (Arc::clone(&stop), Arc::clone(&peak_kib));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some(mib) = status_mib("RssAnon") {
                    p.fetch_max((mib * 1024.0) as u64, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        AnonPeak {
            stop,
            peak_kib,
            thread: Some(thread),
        }
    }

    /// Stops sampling; the peak in MiB.
    fn finish(mut self) -> f64 {
        use std::sync::atomic::Ordering;
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak_kib.load(Ordering::Relaxed) as f64 / 1024.0
    }
}

fn print_scale_table(reports: &[serde_json::Value]) {
    println!();
    println!(
        "| chunks | load points/s | index build | whole recall p50 / p99 | peak RSS | peak anon | anon serving | data dir | re-open |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in reports {
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        let p = |k: &str, q: &str| r[k][q].as_f64().unwrap_or(f64::NAN);
        println!(
            "| {} | {:.0} | {:.1} s | {:.2} / {:.2} ms | {:.0} MiB | {:.0} MiB | {:.0} MiB | {:.0} MiB | {:.2} s |",
            r["chunks"],
            f("load_points_per_s"),
            f("optimize_seconds"),
            p("whole_recall_ms", "p50"),
            p("whole_recall_ms", "p99"),
            f("peak_rss_mib"),
            f("peak_anon_rss_mib"),
            f("anon_rss_mib"),
            f("data_dir_mib"),
            f("reopen_seconds"),
        );
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)].as_secs_f64() * 1e3
}

/// The store's options: the default chunking, and the configured durability (`store.sync`,
/// `CAIRN_SYNC`).
fn workspace_options(app: &crate::App) -> WorkspaceOptions {
    WorkspaceOptions {
        whole_document: false,
        sync: app.config.store.sync,
    }
}

pub async fn run(app: &crate::App, which: BenchCommand) -> Result<std::process::ExitCode> {
    match which {
        BenchCommand::Ingest { corpus, docs, json } => {
            bench_ingest(app, corpus.as_deref(), docs, json).await?
        }
        BenchCommand::Recall {
            chunks,
            queries,
            base,
            corpus,
            dump_corpus,
            optimize_every,
            json,
        } => {
            let texts = BenchTexts::load(corpus.as_deref(), base, queries)?;
            let mut reports = Vec::new();
            for n in chunks {
                let dump = dump_corpus.as_ref().map(|d| d.join(format!("chunks-{n}")));
                reports.push(
                    bench_recall(app, &texts, n, dump.as_deref(), optimize_every, json).await?,
                );
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&reports)?);
            } else if reports.len() > 1 {
                print_scale_table(&reports);
            }
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

async fn bench_ingest(
    app: &crate::App,
    corpus: Option<&Path>,
    n_docs: usize,
    json: bool,
) -> Result<()> {
    let texts: Vec<(String, String)> = match corpus {
        Some(path) => cairn_ingest::beir::read_corpus(path)?
            .into_iter()
            .take(n_docs)
            .map(|d| (format!("beir:{}", d.id), d.full_text()))
            .collect(),
        None => {
            let mut rng = Rng(42);
            (0..n_docs)
                .map(|i| (format!("memo-{i}.txt"), generated_doc(&mut rng, i)))
                .collect()
        }
    };
    let options = workspace_options(app);
    let work = tempfile::tempdir()?;
    let raw_env = app.eval_env(None).await?;
    let raw_embedder = &raw_env.embedder;
    // Both sessions are warmed up outside the timings (the first inference of an ONNX
    // session pays for graph optimisation and allocation).
    raw_embedder
        .embed_documents(vec!["warm-up text".into()])
        .await?;
    let config = options.ingest_config(raw_embedder);

    // The chunks the pipeline will embed, embedded directly: the ceiling for the pipeline.
    let chunker = Chunker::new(raw_embedder.tokenizer().clone(), config.chunk);
    let mut chunk_texts = Vec::new();
    let t_chunk = Instant::now();
    for (_, text) in &texts {
        let extracted = cairn_ingest::extract::extract("bench", text.as_bytes(), MediaType::Text)?;
        chunk_texts.extend(
            chunker
                .chunk(&extracted)?
                .iter()
                .map(|c| c.embedding_text()),
        );
    }
    let chunking = t_chunk.elapsed();
    let n_chunks = chunk_texts.len();
    let tokens: usize = chunk_texts
        .iter()
        .map(|t| raw_embedder.count_tokens(t))
        .sum();
    eprintln!(
        "bench ingest: {} documents, {n_chunks} chunks, {tokens} tokens; embedding raw…",
        texts.len()
    );
    let t = Instant::now();
    raw_embedder.embed_documents(chunk_texts).await?;
    let raw = t.elapsed();
    drop(raw_env);

    // The whole pipeline on a fresh store and an empty embedding cache.
    let env = app.eval_env(Some(work.path().join("embed-cache"))).await?;
    env.embedder.embed_query("warm-up query").await?;
    let ws = Workspace::open(&env, options).await?;
    let (store, ingestor) = (&ws.store, &ws.ingestor);
    let scope = Scope::default();
    let inputs = || {
        texts
            .iter()
            .map(|(s, t)| DocumentInput::text(s.clone(), t.clone(), MediaType::Text))
            .collect::<Vec<_>>()
    };
    let noop: Arc<dyn Fn(Progress) + Send + Sync> = Arc::new(|_| {});
    eprintln!("bench ingest: end-to-end ingest…");
    let t = Instant::now();
    let out = ingestor
        .ingest_documents(&scope, inputs(), Arc::clone(&noop))
        .await;
    let first = t.elapsed();
    let failed = out.iter().filter(|o| o.result.is_err()).count();
    let t = Instant::now();
    let again = ingestor.ingest_documents(&scope, inputs(), noop).await;
    let second = t.elapsed();
    let unchanged = again
        .iter()
        .filter(|o| matches!(&o.result, Ok(r) if r.status == cairn_ingest::DocStatus::Unchanged))
        .count();
    let stored = store
        .count(&scope.partition(), Filter::new().eq("kind", "chunk"))
        .await?;

    let raw_rate = n_chunks as f64 / raw.as_secs_f64();
    let e2e_rate = n_chunks as f64 / first.as_secs_f64();
    let report = serde_json::json!({
        "documents": texts.len(),
        "chunks": n_chunks,
        "tokens": tokens,
        "stored_chunks": stored,
        "failed": failed,
        "chunking_seconds": chunking.as_secs_f64(),
        "raw_embed_seconds": raw.as_secs_f64(),
        "raw_chunks_per_s": raw_rate,
        "ingest_seconds": first.as_secs_f64(),
        "ingest_chunks_per_s": e2e_rate,
        "ingest_vs_raw_ratio": e2e_rate / raw_rate,
        "unchanged_reingest_seconds": second.as_secs_f64(),
        "unchanged_documents": unchanged,
        "first_vs_unchanged_speedup": first.as_secs_f64() / second.as_secs_f64().max(1e-9),
        "peak_rss_mib": peak_rss_mib(),
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("documents            {}", texts.len());
        println!(
            "chunks               {n_chunks} ({tokens} tokens), stored {stored}, failed {failed}"
        );
        println!("chunking alone       {:.2} s", chunking.as_secs_f64());
        println!(
            "raw embedder         {:.2} s  {raw_rate:.1} chunks/s",
            raw.as_secs_f64()
        );
        println!(
            "end-to-end ingest    {:.2} s  {e2e_rate:.1} chunks/s  (ratio {:.3})",
            first.as_secs_f64(),
            e2e_rate / raw_rate
        );
        println!(
            "unchanged re-ingest  {:.3} s  ({unchanged} unchanged; {:.0}x faster than the first ingest)",
            second.as_secs_f64(),
            first.as_secs_f64() / second.as_secs_f64().max(1e-9)
        );
        if let Some(rss) = peak_rss_mib() {
            println!("peak RSS             {rss:.0} MiB");
        }
    }
    Ok(())
}

fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
}

/// Where `bench recall --dump-corpus` writes one size's corpus: `vectors.f32` (the chunks'
/// dense vectors, little-endian f32, `dim` per chunk, in load order), `chunks.jsonl` (per
/// chunk: id, text, tenant, user, namespace, kind, source), `queries.f32` and
/// `queries.jsonl` (the timed queries' vectors and texts) and `meta.json`.
struct CorpusDump {
    dir: std::path::PathBuf,
    vectors: std::io::BufWriter<std::fs::File>,
    chunks: std::io::BufWriter<std::fs::File>,
}

impl CorpusDump {
    fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let file = |name: &str| -> Result<std::io::BufWriter<std::fs::File>> {
            Ok(std::io::BufWriter::new(std::fs::File::create(
                dir.join(name),
            )?))
        };
        Ok(CorpusDump {
            dir: dir.to_path_buf(),
            vectors: file("vectors.f32")?,
            chunks: file("chunks.jsonl")?,
        })
    }

    fn chunk(&mut self, p: &UpsertPoint) -> Result<()> {
        use std::io::Write;
        let Some(dense) = &p.dense else {
            return Ok(());
        };
        for x in dense {
            self.vectors.write_all(&x.to_le_bytes())?;
        }
        let line = serde_json::json!({
            "id": p.id, "text": p.payload.text, "tenant": p.payload.tenant,
            "user": p.payload.user, "namespace": p.payload.namespace,
            "kind": p.payload.kind.as_str(), "source": p.payload.source,
        });
        writeln!(self.chunks, "{line}")?;
        Ok(())
    }

    fn finish(mut self, queries: &[(String, Vec<f32>)], dim: usize) -> Result<()> {
        use std::io::Write;
        self.vectors.flush()?;
        self.chunks.flush()?;
        let mut qv = Vec::with_capacity(queries.len() * dim * 4);
        let mut qt = String::new();
        for (q, v) in queries {
            v.iter()
                .for_each(|x| qv.extend_from_slice(&x.to_le_bytes()));
            qt.push_str(&serde_json::json!({ "query": q }).to_string());
            qt.push('\n');
        }
        std::fs::write(self.dir.join("queries.f32"), qv)?;
        std::fs::write(self.dir.join("queries.jsonl"), qt)?;
        std::fs::write(
            self.dir.join("meta.json"),
            serde_json::json!({"dim": dim, "queries": queries.len(), "batch": 1000}).to_string(),
        )?;
        Ok(())
    }
}

async fn bench_recall(
    app: &crate::App,
    texts: &BenchTexts,
    n_chunks: usize,
    dump: Option<&Path>,
    optimize_every: usize,
    json: bool,
) -> Result<serde_json::Value> {
    let mut dump = dump.map(CorpusDump::create).transpose()?;
    reset_peak_rss();
    let anon_peak = AnonPeak::start();
    let options = workspace_options(app);
    let env = app.eval_env(None).await?;
    let embedder = &env.embedder;
    let ws = Workspace::open(&env, options).await?;
    let store = &ws.store;
    let scope = Scope::default();
    let partition = scope.partition();
    let mut rng = Rng(texts.seed);
    let n_queries = texts.queries.len();
    let n_base = texts.n_base;

    // Real embeddings of `n_base` texts; the store's chunks' vectors are noisy copies of them
    // (cosine ≈ 0.95 to their base) and their texts passages with word-level edits, so
    // vectors and BM25 terms have a realistic distribution without embedding every chunk
    // (a million chunks would take days here).
    eprintln!("bench recall: embedding {n_base} base texts…");
    let base_vecs = embedder
        .embed_documents(texts.passages[..n_base].to_vec())
        .await?;
    let t = Instant::now();
    let now = chrono::Utc::now().timestamp_millis();
    let docs_per_source = 10;
    let mut batch = Vec::with_capacity(1000);
    let mut interleaved = Duration::ZERO;
    let mut next_optimize = optimize_every;
    let mut in_flight: std::collections::VecDeque<
        tokio::task::JoinHandle<cairn_store::Result<()>>,
    > = std::collections::VecDeque::new();
    for i in 0..n_chunks {
        let b = i % n_base;
        let mut v = base_vecs[b].clone();
        for pair in v.chunks_mut(2) {
            let (a, b) = rng.gauss_pair();
            pair[0] += 0.016 * a;
            if let Some(x) = pair.get_mut(1) {
                *x += 0.016 * b;
            }
        }
        normalize(&mut v);
        let passage = &texts.passages[i % texts.passages.len()];
        let mut text: Vec<&str> = passage.split_whitespace().collect();
        for _ in 0..3 {
            let at = rng.below(text.len());
            text[at] = &texts.swaps[rng.below(texts.swaps.len())];
        }
        let text = format!("{} ref{i}", text.join(" "));
        let source = format!("bench/doc-{}", i / docs_per_source);
        let doc_id = document_id(&source);
        let index = (i % docs_per_source) as u32;
        let mut p = StoredPoint::new(PointKind::Chunk, &scope, TrustOrigin::Document, now);
        p.text = Some(text.clone());
        p.source = Some(source.clone());
        p.doc_id = Some(doc_id.clone());
        p.chunk_index = Some(index);
        p.span = Some((0, text.chars().count() as u64));
        batch.push(UpsertPoint {
            id: chunk_point_id(&partition, &source, &doc_id, index),
            dense: Some(v),
            bm25_text: Some(text),
            sparse: None,
            payload: p,
        });
        if let (Some(d), Some(p)) = (dump.as_mut(), batch.last()) {
            d.chunk(p)?;
        }
        if index == 0 {
            let mut rec = StoredPoint::new(PointKind::Document, &scope, TrustOrigin::Document, now);
            rec.source = Some(source.clone());
            rec.doc_id = Some(doc_id);
            rec.version = Some(1);
            rec.chunk_count = Some(docs_per_source as u32);
            batch.push(UpsertPoint::record(
                document_record_id(&partition, &source),
                rec,
            ));
        }
        if batch.len() >= 1000 {
            // Two batches in the store while the next is generated, as a bulk writer that
            // keeps the store fed does (the vectors stand for precomputed ones): one is
            // applied under the store's write lock while the other is prepared (BM25,
            // payloads, journal record) beside it.
            let full = std::mem::take(&mut batch);
            if in_flight.len() >= 2 {
                if let Some(oldest) = in_flight.pop_front() {
                    oldest.await??;
                }
            }
            let writer = Arc::clone(store);
            in_flight.push_back(tokio::spawn(async move { writer.upsert(full).await }));
            if optimize_every > 0 && i + 1 >= next_optimize && i + 1 < n_chunks {
                next_optimize += optimize_every;
                for write in in_flight.drain(..) {
                    write.await??;
                }
                let t = Instant::now();
                store.optimize().await?;
                interleaved += t.elapsed();
            }
        }
    }
    for write in in_flight {
        write.await??;
    }
    store.upsert(batch).await?;
    let load = t.elapsed();
    let anon_after_load = status_mib("RssAnon");
    let t = Instant::now();
    store.optimize().await?;
    let optimize = t.elapsed();
    let anon_after_index = status_mib("RssAnon");
    eprintln!(
        "bench recall: {n_chunks} chunks loaded in {:.1}s, index built in {:.1}s; {n_queries} queries…",
        load.as_secs_f64(),
        optimize.as_secs_f64()
    );

    let recaller = ws.recaller(RecallConfig::default());
    let queries = &texts.queries;
    if let Some(d) = dump.take() {
        // The peer gets the queries' vectors from the same model (embedded apart from the
        // timed loop, which embeds `timed …` variants itself).
        let mut qs = Vec::with_capacity(queries.len());
        for q in queries {
            qs.push((q.clone(), embedder.embed_query(q).await?));
        }
        d.finish(&qs, embedder.spec().dim)?;
    }
    // Warm-up (first-touch page faults, lazy initialisation).
    for q in queries.iter().take(5) {
        recaller
            .recall(&RecallRequest {
                scope: scope.clone(),
                query: format!("warm-up {q}"),
                budget: None,
                filters: Default::default(),
            })
            .await?;
    }
    let mut retrieval = Vec::with_capacity(n_queries);
    let mut embed = Vec::with_capacity(n_queries);
    let mut whole = Vec::with_capacity(n_queries);
    let mut fused = Vec::with_capacity(n_queries);
    let mut selection = Vec::with_capacity(n_queries);
    let mut packing = Vec::with_capacity(n_queries);
    let mut reply = Vec::with_capacity(n_queries);
    let filter = Filter::new().any_of("kind", vec!["chunk".into(), "message".into()]);
    for q in queries {
        let t = Instant::now();
        let qv = embedder.embed_query(&format!("timed {q}")).await?;
        embed.push(t.elapsed());
        let t = Instant::now();
        let dense = store.search(
            &partition,
            SearchRequest {
                mode: SearchMode::Dense(qv),
                filter: filter.clone(),
                limit: 50,
                with_vectors: true,
            },
        );
        let sparse = store.search(
            &partition,
            SearchRequest {
                mode: SearchMode::Sparse(q.clone()),
                filter: filter.clone(),
                limit: 50,
                with_vectors: true,
            },
        );
        tokio::try_join!(dense, sparse)?;
        retrieval.push(t.elapsed());
        let req = RecallRequest {
            scope: scope.clone(),
            query: q.clone(),
            budget: None,
            filters: Default::default(),
        };
        // The recall path without selection and pack: query embedding (no cache here),
        // both legs, identifier probes, fusion and the version check.
        let t = Instant::now();
        let ranked = recaller.retrieve(&req).await?;
        fused.push(t.elapsed());
        let budget = recaller.config().default_budget;
        let t = Instant::now();
        let _ = recaller.select(ranked.clone(), recaller.item_cap(budget));
        selection.push(t.elapsed());
        // Selection, the lexical signals and the pack: the CPU work after retrieval.
        let t = Instant::now();
        let _ = recaller.assemble(q, &partition, budget, ranked, Default::default());
        packing.push(t.elapsed());
        // What a reply to a questioning chat message costs: one filtered scroll (the
        // filter recall uses; this store holds chunks, so it finds nothing, through the
        // same indexes).
        let t = Instant::now();
        let _ = store
            .scroll(
                &partition,
                Filter::new()
                    .eq("kind", "message")
                    .eq("conversation_id", format!("c{}", queries.len()))
                    .range("seq", Some(3.0), Some(3.0)),
                1,
                None,
            )
            .await?;
        reply.push(t.elapsed());
        let t = Instant::now();
        recaller
            .recall(&RecallRequest {
                query: format!("{q} (whole)"),
                ..req
            })
            .await?;
        whole.push(t.elapsed());
    }
    // A clean restart: checkpoint, close everything, re-open the store and count its points.
    store.flush().await?;
    let data_dir_bytes = dir_bytes(ws.path());
    let segments = store.segments();
    let anon_serving = status_mib("RssAnon");
    let file_serving = status_mib("RssFile");
    let peak_anon = anon_peak.finish();
    // A server store has no directory to re-open.
    let embedded = store.backend().kind == "embedded";
    drop(recaller);
    let dir = ws.into_dir();
    let (reopen, reopened_points) = if embedded {
        use cairn_store::MemoryStore;
        let (path, dim) = (dir.path().to_path_buf(), embedder.spec().dim);
        let t = Instant::now();
        let store = tokio::task::spawn_blocking(move || {
            cairn_store::EdgeStore::open(&cairn_store::StoreConfig::new(path, dim))
        })
        .await??;
        let reopen = t.elapsed();
        (Some(reopen), Some(store.count_all().await?))
    } else {
        (None, None)
    };
    for v in [
        &mut retrieval,
        &mut embed,
        &mut whole,
        &mut fused,
        &mut selection,
        &mut packing,
        &mut reply,
    ] {
        v.sort();
    }
    let report = serde_json::json!({
        "chunks": n_chunks,
        "queries": n_queries,
        "base_texts": n_base,
        "texts": texts.label,
        "load_seconds": load.as_secs_f64(),
        "optimize_during_load_seconds": interleaved.as_secs_f64(),
        "optimize_seconds": optimize.as_secs_f64(),
        "retrieval_ms": {"p50": percentile(&retrieval, 0.5), "p99": percentile(&retrieval, 0.99)},
        "query_embedding_ms": {"p50": percentile(&embed, 0.5), "p99": percentile(&embed, 0.99)},
        "recall_retrieve_ms": {"p50": percentile(&fused, 0.5), "p99": percentile(&fused, 0.99)},
        "recall_select_ms": {"p50": percentile(&selection, 0.5), "p99": percentile(&selection, 0.99)},
        "recall_assemble_ms": {"p50": percentile(&packing, 0.5), "p99": percentile(&packing, 0.99)},
        "reply_lookup_ms": {"p50": percentile(&reply, 0.5), "p99": percentile(&reply, 0.99)},
        "whole_recall_ms": {"p50": percentile(&whole, 0.5), "p99": percentile(&whole, 0.99)},
        "load_points_per_s": n_chunks as f64 / load.as_secs_f64().max(1e-9),
        "peak_rss_mib": peak_rss_mib(),
        "anon_rss_mib": anon_serving,
        "peak_anon_rss_mib": peak_anon,
        "anon_rss_after_load_mib": anon_after_load,
        "anon_rss_after_index_mib": anon_after_index,
        "file_rss_mib": file_serving,
        "data_dir_mib": data_dir_bytes as f64 / (1024.0 * 1024.0),
        "segments": segments,
        "reopen_seconds": reopen.map(|d| d.as_secs_f64()),
        "reopened_points": reopened_points,
    });
    if !json {
        println!(
            "chunks            {n_chunks} (vectors: noisy copies of {n_base} embedded texts; texts: {})",
            texts.label
        );
        println!(
            "load / index      {:.1} s / {:.1} s",
            load.as_secs_f64(),
            optimize.as_secs_f64()
        );
        if optimize_every > 0 {
            println!(
                "                  (index builds every {optimize_every} chunks during the load: {:.1} s of it)",
                interleaved.as_secs_f64()
            );
        }
        // One line per timed step: label, p50, p99, what it covers.
        let rows: [(&str, &[Duration], &str); 7] = [
            ("retrieval", &retrieval, "dense + BM25 legs"),
            ("query embedding", &embed, ""),
            (
                "recall retrieve",
                &fused,
                "query embedding, legs, identifiers, fusion, version check",
            ),
            ("recall select", &selection, "relevance gate, dedup, MMR"),
            (
                "recall assemble",
                &packing,
                "selection, answerability, passages, pack",
            ),
            (
                "reply lookup",
                &reply,
                "one scroll; per questioning chat hit, at most 6",
            ),
            (
                "whole recall",
                &whole,
                "embedding + retrieval + identifiers + pack",
            ),
        ];
        for (label, v, what) in rows {
            let what = if what.is_empty() {
                String::new()
            } else {
                format!("  ({what})")
            };
            println!(
                "{label:<17} p50 {:.2} ms  p99 {:.2} ms{what}",
                percentile(v, 0.5),
                percentile(v, 0.99)
            );
        }
        let mib = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0} MiB"));
        println!(
            "memory            peak RSS {} (anonymous {}); anonymous {} after load, {} after index, {} serving (+ {} of mapped files)",
            mib(peak_rss_mib()),
            mib(Some(peak_anon)),
            mib(anon_after_load),
            mib(anon_after_index),
            mib(anon_serving),
            mib(file_serving)
        );
        println!(
            "data directory    {:.0} MiB in {} segments; re-open {} ({} points)",
            data_dir_bytes as f64 / (1024.0 * 1024.0),
            segments.map_or("-".to_string(), |n| n.to_string()),
            reopen.map_or("-".to_string(), |d| format!("{:.2} s", d.as_secs_f64())),
            reopened_points.map_or("-".to_string(), |n| n.to_string())
        );
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::passages_of;

    #[test]
    fn passages_cut_at_sentence_ends_and_keep_every_word() {
        let text = "One two three. Four five six seven. Eight. Nine ten eleven twelve thirteen.";
        let passages = passages_of(text, 20);
        assert_eq!(
            passages,
            [
                "One two three.",
                "Four five six seven.",
                "Eight.",
                "Nine ten eleven twelve thirteen."
            ]
        );
        let joined = passages.join(" ");
        assert_eq!(
            joined.split_whitespace().collect::<Vec<_>>(),
            text.split_whitespace().collect::<Vec<_>>()
        );
        assert_eq!(passages_of(text, 1000), [text]);
        assert!(passages_of("  ", 10).is_empty());
    }
}
