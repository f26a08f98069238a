//! A bounded load test of the HTTP API on loopback.
//!
//! Starts the real server (real model, embedded Qdrant in a temporary directory) on
//! 127.0.0.1 port 0, seeds a few documents and conversation turns, then sends a fixed number
//! of requests from a blocking HTTP client with bounded concurrency, and prints throughput,
//! p50/p99 latency and the error count per phase:
//!
//! ```sh
//! cargo run --release -p cairn-api --example load                  # 500 recall, 200 complete, at 8, 16, 32
//! cargo run --release -p cairn-api --example load -- 1000 400 16     # recalls completes concurrency
//! cargo run --release -p cairn-api --example load -- 500 200 1,8,32  # several levels, one after another
//! ```
//!
//! Every query and turn is distinct, so each request pays for its own embedding (no cache
//! hits). Each client thread opens its keep-alive connection before the clock starts, and one
//! warm-up recall runs before the recall phase. Traffic goes only to 127.0.0.1; the run stops
//! after the fixed request counts.
//!
//! The embedder takes its settings from the environment as `cairn serve` does (no
//! configuration file): `CAIRN_EMBED_WORKERS`, `CAIRN_ORT_THREADS` and `CAIRN_MODEL_DIR`, for
//! instance, set its workers, the first worker's threads and the model directory, to compare
//! them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_api::{app, AppState, Auth, Engine, Metrics, ServerConfig};
use serde_json::{json, Value};

/// The allocator `cairn serve` runs with (see `cli/src/main.rs`).
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const TOPICS: &[(&str, &str)] = &[
    ("vpn", "Install the VPN client, sign in with the company account and choose the Frankfurt gateway; the Lisbon gateway is for the Portugal office."),
    ("expenses", "Submit expenses within 30 days with a receipt; meals are reimbursed up to 40 euros per day and taxis only after 22:00."),
    ("travel", "Book trains for trips under 500 km; flights need approval from a director; hotel stays are limited to 150 euros per night."),
    ("laptops", "Laptops are replaced every three years; request a replacement in the IT portal and return the old device within two weeks."),
    ("holidays", "Employees have 25 days of paid leave; unused days expire on 31 March of the following year unless a manager approves carry-over."),
    ("security", "Report phishing to security@example.com, never share one-time codes, and lock the screen when leaving the desk."),
    ("onboarding", "New hires get a buddy for the first month, a laptop on day one and access to the wiki after signing the confidentiality agreement."),
    ("parking", "Parking spaces in the garage are assigned monthly by lottery; electric cars may charge for up to four hours."),
];

const QUESTIONS: &[&str] = &[
    "Which VPN gateway should I choose",
    "How long do I have to submit expenses",
    "What is the hotel limit per night",
    "When is my laptop replaced",
    "When do unused holidays expire",
    "Where do I report phishing",
    "What do new hires get on day one",
    "How are parking spaces assigned",
];

struct Phase {
    name: &'static str,
    latencies: Mutex<Vec<Duration>>,
    errors: AtomicUsize,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs `count` requests (request `i` built by `make(i)`) with `concurrency` client threads.
fn run_phase(
    name: &'static str,
    base: &str,
    count: usize,
    concurrency: usize,
    make: Arc<dyn Fn(usize) -> (String, Value) + Send + Sync>,
) -> Phase {
    let phase = Arc::new(Phase {
        name,
        latencies: Mutex::new(Vec::with_capacity(count)),
        errors: AtomicUsize::new(0),
    });
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..concurrency)
        .map(|_| {
            let (phase, next, make, base) = (
                Arc::clone(&phase),
                Arc::clone(&next),
                Arc::clone(&make),
                base.to_string(),
            );
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(120)))
                    .build()
                    .into();
                // Open the keep-alive connection before the clock starts.
                let _ = agent
                    .get(&format!("{base}/healthz"))
                    .call()
                    .map(|mut r| r.body_mut().read_to_string());
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    let (path, body) = make(i);
                    let t = Instant::now();
                    let ok = agent
                        .post(&format!("{base}{path}"))
                        .header("content-type", "application/json")
                        .send(body.to_string())
                        .map(|mut r| {
                            let ok = r.status().is_success();
                            let _ = r.body_mut().read_to_string();
                            ok
                        })
                        .unwrap_or(false);
                    let elapsed = t.elapsed();
                    if !ok {
                        phase.errors.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Ok(mut l) = phase.latencies.lock() {
                        l.push(elapsed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    let wall = started.elapsed();
    let mut lat = phase
        .latencies
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    lat.sort();
    println!(
        "{:<9} {:>5} requests  {:>3} at once  {:>7.1} req/s  p50 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms  errors {}",
        phase.name,
        lat.len(),
        concurrency,
        lat.len() as f64 / wall.as_secs_f64(),
        percentile(&lat, 50.0).as_secs_f64() * 1e3,
        percentile(&lat, 99.0).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        phase.errors.load(Ordering::Relaxed),
    );
    Arc::try_unwrap(phase).unwrap_or_else(|p| Phase {
        name: p.name,
        latencies: Mutex::new(Vec::new()),
        errors: AtomicUsize::new(p.errors.load(Ordering::Relaxed)),
    })
}

fn scope() -> Value {
    json!({"tenant": "load", "user": "alice", "namespace": "kb", "agent": "bench", "session": "s1"})
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let recalls: usize = args.first().map_or(Ok(500), |a| a.parse())?;
    let completes: usize = args.get(1).map_or(Ok(200), |a| a.parse())?;
    let levels: Vec<usize> = args
        .get(2)
        .map_or("8,16,32", String::as_str)
        .split(',')
        .map(|c| c.trim().parse::<usize>().map(|c| c.max(1)))
        .collect::<Result<_, _>>()?;

    let dir = tempfile::tempdir()?;
    let opened = Instant::now();
    // The embedding settings from the environment, parsed and checked by the configuration
    // crate as `cairn serve` parses them (no file, no flags).
    let env = |key: &str| std::env::var(key).ok();
    let embed = cairn_config::Config::load(&cairn_config::Sources::env(&env))
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .embed;
    let engine = Engine::open_with(dir.path(), &embed, Default::default())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "engine: model {} loaded in {:.1}s (embedding workers: up to {}; the first on {} threads)",
        engine.embedder().model_id(),
        opened.elapsed().as_secs_f64(),
        embed.workers,
        embed.session_threads()
    );
    let state = Arc::new(AppState {
        engine: Arc::new(engine),
        auth: Auth::default(),
        metrics: Metrics::default(),
        config: ServerConfig::default(),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let base = format!("http://{}", listener.local_addr()?);
    let router = app(Arc::clone(&state));
    runtime.spawn(async move { axum::serve(listener, router).await });
    println!("server: {base}");

    // Seed: one document per topic and a few conversation turns.
    let seed = Arc::new(|i: usize| {
        let (name, text) = TOPICS[i % TOPICS.len()];
        (
            "/v1/documents".to_string(),
            json!({"scope": scope(), "source": format!("policies/{name}.md"), "media_type": "text/markdown",
                "text": format!("# {name}\n\n{text}")}),
        )
    });
    run_phase("seed", &base, TOPICS.len(), 1, seed);

    // The first query embedding pays for the ONNX session's set-up: measured apart.
    let warm = Arc::new(|_: usize| {
        (
            "/v1/recall".to_string(),
            json!({"scope": scope(), "query": "warm-up: which policies exist?"}),
        )
    });
    run_phase("warm-up", &base, 1, 1, warm);

    let mut errors = 0;
    for (level, &concurrency) in levels.iter().enumerate() {
        println!("== {concurrency} at once");
        // Distinct queries and turn ids per level: no cache hit, no replayed turn.
        let offset = level * (recalls + completes);
        let recall = Arc::new(move |i: usize| {
            let q = QUESTIONS[i % QUESTIONS.len()];
            (
                "/v1/recall".to_string(),
                json!({"scope": scope(), "query": format!("{q}? (request {})", offset + i)}),
            )
        });
        let r = run_phase("recall", &base, recalls, concurrency, recall);

        let complete = Arc::new(move |i: usize| {
            let i = offset + i;
            (
                format!("/v1/turns/load-{i}/complete"),
                json!({"scope": scope(),
                    "user_message": format!("Note {i}: my locker number is {} and my desk is on floor {}.", 100 + i, i % 7),
                    "assistant_message": format!("Noted: locker {} on floor {} (turn {i}).", 100 + i, i % 7)}),
            )
        });
        let c = run_phase("complete", &base, completes, concurrency, complete);
        errors += r.errors.load(Ordering::Relaxed) + c.errors.load(Ordering::Relaxed);
    }
    let embedder = state.engine.embedder();
    let (runs, texts) = embedder.query_runs();
    println!(
        "embedder: {texts} query texts in {runs} model runs (mean batch {:.2}); {} workers",
        texts as f64 / runs.max(1) as f64,
        embedder.workers()
    );

    let points = runtime.block_on(state.engine.store().count_all())?;
    println!("store: {points} points after the run");
    runtime.shutdown_timeout(Duration::from_secs(5));
    if errors > 0 {
        anyhow::bail!("{errors} requests failed");
    }
    Ok(())
}
