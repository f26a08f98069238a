//! The embedding workers: each OS thread owns one ONNX session.
//!
//! The first worker starts with the embedder and embeds documents and queries, its session
//! using [`EmbedConfig::session_threads`]. Query workers (up to [`EmbedConfig::workers`] in
//! all, one intra-op thread each) start only when more queries are queued than there are free
//! workers, and embed queries only: a query then no longer waits for a document batch to
//! finish, and concurrent queries run side by side. They never take documents, whose
//! batches grow a session's activation arena to tens of MB each (README Benchmarks,
//! "Embedding workers").

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;

use fastembed::{InitOptionsUserDefined, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel};
use tokio::sync::oneshot;

use crate::cache::{CacheKey, EmbeddingCache};
use crate::config::{EmbedConfig, ModelSpec, Pooling};
use crate::{EmbedError, Result};

type Reply = oneshot::Sender<Result<Vec<Vec<f32>>>>;

struct Job {
    texts: Vec<String>,
    reply: Reply,
}

/// Queued document work.
enum DocWork {
    /// A job smaller than one batch: small jobs waiting together share a run.
    Whole(Job),
    /// One batch of a larger job, split at submission so that the worker serves the queries
    /// waiting between two batches.
    Part(Part),
}

/// A batch of a split document job: the indexes of its texts, of similar length.
struct Part {
    split: Arc<Split>,
    indexes: Vec<usize>,
}

/// A document job split into parts; the part that completes it sends the reply.
struct Split {
    texts: Vec<String>,
    state: Mutex<SplitState>,
}

struct SplitState {
    out: Vec<Vec<f32>>,
    parts_left: usize,
    /// Taken by the last part, or by the first that fails.
    reply: Option<Reply>,
}

#[derive(Default)]
struct Queues {
    queries: VecDeque<Job>,
    documents: VecDeque<DocWork>,
    shutdown: bool,
    /// Workers started (the first and the query workers), including one still loading its
    /// session.
    workers: usize,
    /// Workers that have taken work and not finished its model run.
    busy: usize,
    /// Most workers: [`EmbedConfig::workers`], lowered to the started count when a session
    /// fails to load (the workers running go on).
    max_workers: usize,
}

struct Queue {
    state: Mutex<Queues>,
    ready: Condvar,
    /// Model runs made for queries, and the query texts they embedded (their ratio is the
    /// mean dynamic batch).
    query_runs: std::sync::atomic::AtomicU64,
    query_texts: std::sync::atomic::AtomicU64,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A worker's model run is over (before it hands out the vectors, so that a caller who
    /// sends the next job as soon as it has its answer finds the worker free, and no second
    /// worker is started for sequential work).
    fn run_done(&self) {
        let mut q = self.lock();
        q.busy = q.busy.saturating_sub(1);
    }
}

/// Intra-op threads of a query worker's session.
const QUERY_WORKER_THREADS: usize = 1;

/// Loads one more session of the embedder's model, for a new query worker.
type Loader = Arc<dyn Fn() -> Result<TextEmbedding> + Send + Sync>;

struct Inner {
    spec: ModelSpec,
    model_id: String,
    counter: tokenizers::Tokenizer,
    cache: Option<EmbeddingCache>,
    queue: Arc<Queue>,
    plan: Plan,
    loader: Loader,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.queue.lock().shutdown = true;
        self.queue.ready.notify_all();
        let handles = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|p| p.into_inner()));
        for handle in handles {
            let _ = handle.join();
        }
    }
}

/// Handle to the embedding model. Clones share one model and its workers.
#[derive(Clone)]
pub struct Embedder {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("model_id", &self.inner.model_id)
            .field("spec", &self.inner.spec)
            .finish()
    }
}

/// The ONNX Runtime library can be loaded once per process; every embedder shares it.
fn ort_environment(lib: &Path) -> Result<ort::environment::Environment> {
    static ENV: OnceLock<std::result::Result<ort::environment::Environment, String>> =
        OnceLock::new();
    ENV.get_or_init(|| {
        if !lib.is_file() {
            return Err(format!(
                "ONNX Runtime library not found at {}",
                lib.display()
            ));
        }
        ort::init_from(lib)
            .map_err(|e| format!("cannot load ONNX Runtime from {}: {e}", lib.display()))?
            .with_name("cairn")
            .build()
            .map_err(|e| format!("cannot start ONNX Runtime: {e}"))
    })
    .clone()
    .map_err(EmbedError::ModelUnavailable)
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>> {
    let path = dir.join(name);
    std::fs::read(&path)
        .map_err(|e| EmbedError::ModelUnavailable(format!("{}: {e}", path.display())))
}

type Loaded = (TextEmbedding, ModelSpec, String, tokenizers::Tokenizer);

fn session_settings(config: &EmbedConfig) -> Vec<(String, String)> {
    if config.spin {
        // Spin between the operators of a run, not after it: without this the runtime's
        // idle workers keep spinning after every run, on the cores the BM25 leg and the
        // store need.
        vec![("session.force_spinning_stop".into(), "1".into())]
    } else {
        vec![("session.intra_op.allow_spinning".into(), "0".into())]
    }
}

/// A model directory prepared by `scripts/setup.sh` (or any local ONNX export).
fn load_local(config: &EmbedConfig) -> Result<Loaded> {
    let spec = ModelSpec::load(&config.model_dir)?;
    let onnx = read(&config.model_dir, "model.onnx")?;
    let tokenizer_json = read(&config.model_dir, "tokenizer.json")?;
    let files = TokenizerFiles {
        tokenizer_file: tokenizer_json.clone(),
        config_file: read(&config.model_dir, "config.json")?,
        special_tokens_map_file: read(&config.model_dir, "special_tokens_map.json")?,
        tokenizer_config_file: read(&config.model_dir, "tokenizer_config.json")?,
    };
    let model_id = format!(
        "{}-{}",
        spec.name,
        &cairn_models::ids::sha256_hex(&onnx)[..12]
    );
    let env = ort_environment(&config.ort_library)?;
    let pooling = match spec.pooling {
        Pooling::Cls => fastembed::Pooling::Cls,
        Pooling::Mean => fastembed::Pooling::Mean,
    };
    let model = UserDefinedEmbeddingModel::new(onnx, files).with_pooling(pooling);
    let mut options = InitOptionsUserDefined::new()
        .with_environment(env)
        .with_max_length(spec.max_tokens);
    options = options.with_intra_threads(config.session_threads());
    for (k, v) in session_settings(config) {
        options = options.with_session_config(k, v);
    }
    let engine = TextEmbedding::try_new_from_user_defined(model, options)
        .map_err(|e| EmbedError::ModelUnavailable(format!("cannot load model: {e}")))?;
    let counter = tokenizers::Tokenizer::from_bytes(&tokenizer_json)
        .map_err(|e| EmbedError::InvalidConfig(format!("tokenizer.json: {e}")))?;
    Ok((engine, spec, model_id, counter))
}

/// A model fastembed downloads from the Hugging Face hub (feature `hub`, for machines
/// with internet access). `name` is the model code, e.g. `BAAI/bge-small-en-v1.5`.
#[cfg(feature = "hub")]
fn load_from_hub(config: &EmbedConfig, name: &str) -> Result<Loaded> {
    use fastembed::{EmbeddingModel, TextInitOptions};
    let info = TextEmbedding::list_supported_models()
        .into_iter()
        .find(|m| m.model_code.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            EmbedError::InvalidConfig(format!("fastembed does not know the model {name:?}"))
        })?;
    let model: EmbeddingModel = info.model.clone();
    let pooling = match TextEmbedding::get_default_pooling_method(&model) {
        Some(fastembed::Pooling::Mean) => Pooling::Mean,
        _ => Pooling::Cls,
    };
    // BGE English models before v1.5 need their query instruction; v1.5 retrieves as well
    // without it (Cairn's calibration is for bge-small-en-v1.5 without it, as setup.sh
    // writes), and it costs 9 tokens of every query's forward pass.
    let lower = name.to_ascii_lowercase();
    let bge = lower.contains("bge") && lower.contains("-en") && !lower.contains("v1.5");
    let spec = ModelSpec {
        name: name.replace('/', "_"),
        dim: info.dim,
        pooling,
        max_tokens: 512,
        query_prefix: if bge {
            "Represent this sentence for searching relevant passages: ".into()
        } else {
            String::new()
        },
        document_prefix: String::new(),
    };
    let env = ort_environment(&config.ort_library)?;
    let mut options = TextInitOptions::new(model)
        .with_environment(env)
        .with_max_length(spec.max_tokens)
        .with_cache_dir(config.model_dir.join("hub"));
    options = options.with_intra_threads(config.session_threads());
    for (k, v) in session_settings(config) {
        options = options.with_session_config(k, v);
    }
    let engine = TextEmbedding::try_new(options).map_err(|e| {
        EmbedError::ModelUnavailable(format!("cannot download or load {name}: {e}"))
    })?;
    let counter = engine.tokenizer.clone();
    let model_id = spec.name.clone();
    Ok((engine, spec, model_id, counter))
}

#[cfg(not(feature = "hub"))]
fn load_from_hub(_config: &EmbedConfig, name: &str) -> Result<Loaded> {
    Err(EmbedError::InvalidConfig(format!(
        "CAIRN_HUB_MODEL={name} needs a build with the `hub` feature (cargo build --release --features cairn-api/hub)"
    )))
}

impl Embedder {
    /// Loads the model (blocking: call it off the async runtime) and starts the worker.
    /// With `cache_path`, vectors are cached on disk there.
    pub fn open(config: &EmbedConfig, cache_path: Option<&Path>) -> Result<Self> {
        let (engine, spec, model_id, mut counter) = match &config.hub_model {
            Some(name) => load_from_hub(config, name)?,
            None => load_local(config)?,
        };
        // A second tokenizer without truncation or padding, for counting tokens (chunk
        // sizing, pack budgets): it must see the whole text.
        counter
            .with_truncation(None)
            .map_err(|e| EmbedError::InvalidConfig(e.to_string()))?;
        counter.with_padding(None);

        let cache = match cache_path {
            Some(dir) => Some(EmbeddingCache::open(
                &dir.join(format!("{model_id}.bin")),
                spec.dim,
                config.cache_max_entries,
            )?),
            None => None,
        };

        let workers = config.workers.max(1);
        let queue = Arc::new(Queue {
            state: Mutex::new(Queues {
                workers: 1,
                max_workers: workers,
                ..Queues::default()
            }),
            ready: Condvar::new(),
            query_runs: Default::default(),
            query_texts: Default::default(),
        });
        let plan = Plan {
            batch_size: config.batch_size.max(1),
            query_batch: config.query_batch.max(1),
            query_wait: config.query_wait,
            dim: spec.dim,
        };
        // Query workers load their own session the same way, on one intra-op thread (a lone
        // query takes no longer on one than on two, and the cores are shared among the
        // workers); the weights must be the ones the cache is keyed by.
        let loader: Loader = {
            let config = EmbedConfig {
                intra_threads: Some(QUERY_WORKER_THREADS),
                ..config.clone()
            };
            let first_id = model_id.clone();
            Arc::new(move || {
                let (engine, _, id, _) = match &config.hub_model {
                    Some(name) => load_from_hub(&config, name)?,
                    None => load_local(&config)?,
                };
                if id != first_id {
                    return Err(EmbedError::ModelUnavailable(format!(
                        "the model files changed since the embedder opened ({first_id}, now {id})"
                    )));
                }
                Ok(engine)
            })
        };
        let worker_queue = Arc::clone(&queue);
        let handle = std::thread::Builder::new()
            .name("cairn-embed-0".into())
            .spawn(move || run_worker(engine, worker_queue, plan, true))
            .map_err(|e| EmbedError::ModelUnavailable(format!("cannot start worker: {e}")))?;

        Ok(Embedder {
            inner: Arc::new(Inner {
                spec,
                model_id,
                counter,
                cache,
                queue,
                plan,
                loader,
                workers: Mutex::new(vec![handle]),
            }),
        })
    }

    /// Embedding workers started so far (one at first; more start under load, up to
    /// [`EmbedConfig::workers`]).
    pub fn workers(&self) -> usize {
        self.inner.queue.lock().workers
    }

    pub fn spec(&self) -> &ModelSpec {
        &self.inner.spec
    }

    /// Model name plus a hash of its weights: the key space of the cache.
    pub fn model_id(&self) -> &str {
        &self.inner.model_id
    }

    /// The model's tokenizer, without truncation or padding.
    pub fn tokenizer(&self) -> &tokenizers::Tokenizer {
        &self.inner.counter
    }

    /// Number of model tokens in `text` (without special tokens).
    pub fn count_tokens(&self, text: &str) -> usize {
        self.inner
            .counter
            .encode_fast(text, false)
            .map(|e| e.len())
            .unwrap_or_else(|_| text.split_whitespace().count())
    }

    /// Embeds document texts (with the model's document prefix). Order is preserved.
    pub async fn embed_documents(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        let prefixed = prefix_all(&self.inner.spec.document_prefix, texts);
        self.embed_cached(prefixed, false).await
    }

    /// Embeds one query (with the model's query prefix).
    pub async fn embed_query(&self, query: &str) -> Result<Vec<f32>> {
        let text = format!("{}{query}", self.inner.spec.query_prefix);
        let mut v = self.embed_cached(vec![text], true).await?;
        v.pop().ok_or(EmbedError::WorkerStopped)
    }

    /// Removes the cached vectors of these document texts (as given to
    /// [`Embedder::embed_documents`]) from memory and disk: called when their text is
    /// hard-forgotten. Returns how many were cached.
    pub fn purge_documents(&self, texts: &[String]) -> Result<usize> {
        let Some(cache) = &self.inner.cache else {
            return Ok(0);
        };
        let prefix = &self.inner.spec.document_prefix;
        let keys: Vec<CacheKey> = texts
            .iter()
            .map(|t| EmbeddingCache::key(&self.inner.model_id, &format!("{prefix}{t}")))
            .collect();
        cache.purge(&keys)
    }

    /// Model runs made for queries so far and the query texts they embedded: with dynamic
    /// batching, concurrent queries share runs, so texts / runs is the mean batch.
    pub fn query_runs(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let q = &self.inner.queue;
        (q.query_runs.load(Relaxed), q.query_texts.load(Relaxed))
    }

    /// Number of vectors in the embedding cache (0 without a cache).
    pub fn cached_len(&self) -> usize {
        self.inner.cache.as_ref().map_or(0, |c| c.len())
    }

    /// Blocking variant of [`Embedder::embed_documents`], for code already off the runtime.
    pub fn embed_documents_blocking(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>> {
        let prefixed = prefix_all(&self.inner.spec.document_prefix, texts);
        let rx = self.submit_misses(prefixed, false)?;
        rx.wait_blocking()
    }

    async fn embed_cached(&self, texts: Vec<String>, query: bool) -> Result<Vec<Vec<f32>>> {
        self.submit_misses(texts, query)?.wait().await
    }

    /// Looks every text up in the cache and sends only the misses to the worker. Queries
    /// bypass the cache: their vectors are never persisted.
    fn submit_misses(&self, texts: Vec<String>, query: bool) -> Result<Pending<'_>> {
        let cache = if query {
            None
        } else {
            self.inner.cache.as_ref()
        };
        let n = texts.len();
        let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
        let mut keys: Vec<CacheKey> = Vec::new();
        let mut miss_idx = Vec::new();
        let mut miss_texts = Vec::new();
        for (i, text) in texts.into_iter().enumerate() {
            if let Some(cache) = cache {
                let key = EmbeddingCache::key(&self.inner.model_id, &text);
                if let Some(v) = cache.get(&key) {
                    out[i] = Some(v);
                    continue;
                }
                keys.push(key);
            }
            miss_idx.push(i);
            miss_texts.push(text);
        }
        let rx = if miss_texts.is_empty() {
            None
        } else {
            let (tx, rx) = oneshot::channel();
            let job = Job {
                texts: miss_texts,
                reply: tx,
            };
            let batch = self.inner.plan.batch_size;
            // A document job of a batch or more is split (outside the lock) into batches of
            // texts of similar length, with the waiting queries served between two.
            let (query_job, documents) = if query {
                (Some(job), Vec::new())
            } else if job.texts.len() < batch {
                (None, vec![DocWork::Whole(job)])
            } else {
                (None, split(job, batch))
            };
            let more = {
                let mut q = self.inner.queue.lock();
                if q.shutdown {
                    return Err(EmbedError::WorkerStopped);
                }
                q.queries.extend(query_job);
                q.documents.extend(documents);
                // More queries wait than there are free workers (a worker still loading its
                // session counts as free): query workers start, each loading its session on
                // its own thread. Sequential use never finds a query waiting beyond a free
                // worker, and documents alone never start one.
                let free = q.workers.saturating_sub(q.busy);
                let waiting = q.queries.len();
                let more = waiting
                    .saturating_sub(free)
                    .min(q.max_workers.saturating_sub(q.workers));
                q.workers += more;
                more
            };
            self.inner.queue.ready.notify_all();
            for _ in 0..more {
                self.start_worker();
            }
            Some(rx)
        };
        Ok(Pending {
            embedder: self,
            out,
            keys,
            miss_idx,
            rx,
        })
    }
}

/// A submitted request: cache hits already filled in, misses on their way.
struct Pending<'a> {
    embedder: &'a Embedder,
    out: Vec<Option<Vec<f32>>>,
    keys: Vec<CacheKey>,
    miss_idx: Vec<usize>,
    rx: Option<oneshot::Receiver<Result<Vec<Vec<f32>>>>>,
}

impl Pending<'_> {
    async fn wait(mut self) -> Result<Vec<Vec<f32>>> {
        let computed = match self.rx.take() {
            Some(rx) => rx.await.map_err(|_| EmbedError::WorkerStopped)??,
            None => Vec::new(),
        };
        self.finish(computed)
    }

    fn wait_blocking(mut self) -> Result<Vec<Vec<f32>>> {
        let computed = match self.rx.take() {
            Some(rx) => rx
                .blocking_recv()
                .map_err(|_| EmbedError::WorkerStopped)??,
            None => Vec::new(),
        };
        self.finish(computed)
    }

    fn finish(mut self, computed: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        if computed.len() != self.miss_idx.len() {
            return Err(EmbedError::Inference(format!(
                "model returned {} vectors for {} texts",
                computed.len(),
                self.miss_idx.len()
            )));
        }
        if let Some(cache) = &self.embedder.inner.cache {
            let entries: Vec<(CacheKey, Vec<f32>)> = self
                .keys
                .iter()
                .copied()
                .zip(computed.iter().cloned())
                .collect();
            // The cache only saves work: failing to persist it (a full disk) does not fail
            // the embedding, which is computed and returned all the same.
            if let Err(e) = cache.put_many(&entries) {
                tracing::warn!(error = %e, "embedding cache not written");
            }
        }
        for (i, v) in self.miss_idx.iter().zip(computed) {
            self.out[*i] = Some(v);
        }
        self.out
            .into_iter()
            .map(|v| v.ok_or(EmbedError::WorkerStopped))
            .collect()
    }
}

fn prefix_all(prefix: &str, texts: Vec<String>) -> Vec<String> {
    if prefix.is_empty() {
        texts
    } else {
        texts.into_iter().map(|t| format!("{prefix}{t}")).collect()
    }
}

/// How the workers batch: documents in groups of `batch_size` texts of similar length,
/// queries that wait at the same moment in one run of up to `query_batch` texts.
#[derive(Debug, Clone, Copy)]
struct Plan {
    batch_size: usize,
    query_batch: usize,
    query_wait: std::time::Duration,
    dim: usize,
}

impl Embedder {
    /// Starts one more query worker (already counted in `Queues::workers`): a thread that
    /// loads its own session, then serves queries. A session that fails to load stops further
    /// starts; the workers already running go on.
    fn start_worker(&self) {
        let queue = Arc::clone(&self.inner.queue);
        let loader = Arc::clone(&self.inner.loader);
        let plan = self.inner.plan;
        let mut handles = self.inner.workers.lock().unwrap_or_else(|p| p.into_inner());
        let n = handles.len();
        let spawned = std::thread::Builder::new()
            .name(format!("cairn-embed-{n}"))
            .spawn({
                let queue = Arc::clone(&queue);
                move || match loader() {
                    Ok(engine) => run_worker(engine, queue, plan, false),
                    Err(e) => {
                        tracing::warn!(error = %e, "embedding worker not started");
                        let mut q = queue.lock();
                        q.workers -= 1;
                        q.max_workers = q.workers;
                    }
                }
            });
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(e) => {
                tracing::warn!(error = %e, "embedding worker thread not started");
                let mut q = queue.lock();
                q.workers -= 1;
                q.max_workers = q.workers;
            }
        }
    }
}

/// Splits a document job into parts of `batch` texts of similar length (a run is padded to
/// its longest text).
fn split(job: Job, batch: usize) -> Vec<DocWork> {
    let mut order: Vec<usize> = (0..job.texts.len()).collect();
    order.sort_by_key(|&i| job.texts[i].len());
    let parts: Vec<Vec<usize>> = order.chunks(batch.max(1)).map(<[usize]>::to_vec).collect();
    let split = Arc::new(Split {
        state: Mutex::new(SplitState {
            out: vec![Vec::new(); job.texts.len()],
            parts_left: parts.len(),
            reply: Some(job.reply),
        }),
        texts: job.texts,
    });
    parts
        .into_iter()
        .map(|indexes| {
            DocWork::Part(Part {
                split: Arc::clone(&split),
                indexes,
            })
        })
        .collect()
}

/// What a worker takes next.
enum Next {
    Queries(Vec<Job>, usize),
    Documents(Vec<Job>),
    Part(Part),
    Stop,
}

/// Serves the queue: queries, and with `documents` (the first worker) document work too.
fn run_worker(mut engine: TextEmbedding, queue: Arc<Queue>, plan: Plan, documents: bool) {
    // Size of the last query run: a run of several means queries are arriving together, so
    // the next one may wait `query_wait` for company; after a lone query it never waits.
    let mut last_run = 0usize;
    // Query runs this worker may still make before its next document batch, once it has
    // started on documents: the queries that were waiting when its last batch ended. So
    // queries jump ahead of documents, and a steady stream of queries still never holds a
    // document job back for good. `None`: no document work in hand.
    let mut owed: Option<usize> = None;
    loop {
        let next = {
            let mut q = queue.lock();
            while q.queries.is_empty() && (!documents || q.documents.is_empty()) && !q.shutdown {
                q = queue.ready.wait(q).unwrap_or_else(|p| p.into_inner());
            }
            if q.documents.is_empty() {
                owed = None;
            }
            let queries_first = !q.queries.is_empty()
                && (!documents || owed.is_none_or(|n| n > 0) || q.documents.is_empty());
            if !queries_first && !documents {
                // A query worker woken by the shutdown with no query left.
                Next::Stop
            } else if queries_first {
                let mut jobs = Vec::new();
                let mut texts = 0;
                take_jobs(&mut q.queries, &mut jobs, &mut texts, plan.query_batch);
                if last_run > 1 && texts < plan.query_batch && !plan.query_wait.is_zero() {
                    let deadline = std::time::Instant::now() + plan.query_wait;
                    while texts < plan.query_batch {
                        let now = std::time::Instant::now();
                        if now >= deadline || q.shutdown {
                            break;
                        }
                        q = queue
                            .ready
                            .wait_timeout(q, deadline - now)
                            .map(|(g, _)| g)
                            .unwrap_or_else(|p| p.into_inner().0);
                        take_jobs(&mut q.queries, &mut jobs, &mut texts, plan.query_batch);
                    }
                }
                q.busy += 1;
                Next::Queries(jobs, texts)
            } else {
                match q.documents.pop_front() {
                    None => Next::Stop,
                    Some(DocWork::Part(part)) => {
                        q.busy += 1;
                        Next::Part(part)
                    }
                    Some(DocWork::Whole(job)) => {
                        // Small document jobs waiting together (concurrent message writes, a
                        // turn's two messages each) share one model run, up to one batch.
                        let mut texts = job.texts.len();
                        let mut jobs = vec![job];
                        while let Some(DocWork::Whole(job)) = q.documents.front() {
                            if texts + job.texts.len() > plan.batch_size {
                                break;
                            }
                            texts += job.texts.len();
                            if let Some(DocWork::Whole(job)) = q.documents.pop_front() {
                                jobs.push(job);
                            }
                        }
                        q.busy += 1;
                        Next::Documents(jobs)
                    }
                }
            }
        };
        match next {
            Next::Stop => return,
            Next::Queries(jobs, texts) => {
                last_run = texts;
                owed = owed.map(|n| n.saturating_sub(1));
                embed_queries(&mut engine, &queue, jobs, plan.dim);
            }
            Next::Documents(jobs) => {
                embed_together(&mut engine, &queue, jobs, plan.dim);
                owed = Some(queries_waiting(&queue, plan.query_batch));
            }
            Next::Part(part) => {
                embed_part(&mut engine, &queue, part, plan.dim);
                owed = Some(queries_waiting(&queue, plan.query_batch));
            }
        }
    }
}

/// Query runs needed for the queries waiting now.
fn queries_waiting(queue: &Queue, query_batch: usize) -> usize {
    let texts: usize = queue.lock().queries.iter().map(|j| j.texts.len()).sum();
    texts.div_ceil(query_batch.max(1))
}

/// Moves jobs from the front of `queue` into `jobs` while they fit in `max` texts (a first
/// job always goes, whatever its size).
fn take_jobs(queue: &mut VecDeque<Job>, jobs: &mut Vec<Job>, texts: &mut usize, max: usize) {
    while let Some(job) = queue.front() {
        if *texts > 0 && *texts + job.texts.len() > max {
            break;
        }
        *texts += job.texts.len();
        jobs.extend(queue.pop_front());
    }
}

/// One model run over `texts`: one vector per text, each of the model's dimension.
fn run_model(engine: &mut TextEmbedding, texts: &[&str], dim: usize) -> Result<Vec<Vec<f32>>> {
    let vectors = engine
        .embed(texts, Some(texts.len().max(1)))
        .map_err(|e| EmbedError::Inference(e.to_string()))?;
    if vectors.len() != texts.len() {
        return Err(EmbedError::Inference(format!(
            "model returned {} vectors for {} texts",
            vectors.len(),
            texts.len()
        )));
    }
    match vectors.iter().find(|v| v.len() != dim) {
        Some(v) => Err(EmbedError::InvalidConfig(format!(
            "model produced {}-d vectors, cairn-model.json says {dim}",
            v.len()
        ))),
        None => Ok(vectors),
    }
}

/// The same error for each of several jobs a failed run served.
fn copy_error(e: &EmbedError) -> EmbedError {
    match e {
        EmbedError::InvalidConfig(m) => EmbedError::InvalidConfig(m.clone()),
        other => EmbedError::Inference(other.to_string()),
    }
}

/// One model run for the query jobs in `jobs` (dynamic batching), counted.
fn embed_queries(engine: &mut TextEmbedding, queue: &Queue, jobs: Vec<Job>, dim: usize) {
    use std::sync::atomic::Ordering::Relaxed;
    let texts: usize = jobs.iter().map(|j| j.texts.len()).sum();
    queue.query_runs.fetch_add(1, Relaxed);
    queue.query_texts.fetch_add(texts as u64, Relaxed);
    embed_together(engine, queue, jobs, dim);
}

/// One model run for the texts of every job in `jobs`; each job gets its own vectors back,
/// in order. A failed run fails every job in it.
fn embed_together(engine: &mut TextEmbedding, queue: &Queue, jobs: Vec<Job>, dim: usize) {
    let all: Vec<&str> = jobs
        .iter()
        .flat_map(|j| j.texts.iter().map(String::as_str))
        .collect();
    let result = run_model(engine, &all, dim);
    queue.run_done();
    match result {
        Ok(vectors) => {
            let mut vectors = vectors.into_iter();
            for job in jobs {
                let mine: Vec<Vec<f32>> = vectors.by_ref().take(job.texts.len()).collect();
                let _ = job.reply.send(Ok(mine));
            }
        }
        Err(e) => {
            for job in jobs {
                let _ = job.reply.send(Err(copy_error(&e)));
            }
        }
    }
}

/// One batch of a split document job. The part that completes the job replies; the first
/// that fails replies with its error, and the parts after it skip the model.
fn embed_part(engine: &mut TextEmbedding, queue: &Queue, part: Part, dim: usize) {
    let split = &part.split;
    let failed = split
        .state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .reply
        .is_none();
    let result = if failed {
        Ok(Vec::new())
    } else {
        let batch: Vec<&str> = part
            .indexes
            .iter()
            .map(|&i| split.texts[i].as_str())
            .collect();
        run_model(engine, &batch, dim)
    };
    queue.run_done();
    if failed {
        return;
    }
    let mut state = split.state.lock().unwrap_or_else(|p| p.into_inner());
    match result {
        Ok(vectors) => {
            for (&i, v) in part.indexes.iter().zip(vectors) {
                state.out[i] = v;
            }
            state.parts_left -= 1;
            if state.parts_left == 0 {
                let out = std::mem::take(&mut state.out);
                if let Some(reply) = state.reply.take() {
                    let _ = reply.send(Ok(out));
                }
            }
        }
        Err(e) => {
            if let Some(reply) = state.reply.take() {
                let _ = reply.send(Err(e));
            }
        }
    }
}

#[cfg(all(test, not(feature = "hub")))]
mod tests {
    use super::*;

    #[test]
    fn hub_models_need_the_hub_feature() {
        let config = EmbedConfig {
            hub_model: Some("BAAI/bge-small-en-v1.5".into()),
            ..EmbedConfig::default()
        };
        let err = Embedder::open(&config, None).unwrap_err();
        assert!(matches!(err, EmbedError::InvalidConfig(_)), "{err}");
        assert!(err.to_string().contains("hub"));
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    }

    /// The default model with at most `workers` workers.
    fn with_workers(workers: usize) -> Embedder {
        let config = EmbedConfig {
            workers,
            ..EmbedConfig::default()
        };
        Embedder::open(&config, None).expect("the model")
    }

    fn travel_questions() -> Vec<String> {
        (0..12)
            .map(|i| format!("question number {i} about the travel policy"))
            .collect()
    }

    /// Each query embedded alone, one after another.
    fn one_by_one(
        rt: &tokio::runtime::Runtime,
        embedder: &Embedder,
        queries: &[String],
    ) -> Vec<Vec<f32>> {
        rt.block_on(async {
            let mut out = Vec::new();
            for q in queries {
                out.push(embedder.embed_query(q).await.expect("query vector"));
            }
            out
        })
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (n(a) * n(b))
    }

    /// Queries that wait while a document job runs are embedded together (fewer model runs
    /// than queries), and each gets the vector it gets alone. One worker, so that they wait
    /// for the next batch boundary of the document job.
    #[test]
    fn concurrent_queries_share_model_runs_and_keep_their_vectors() {
        let rt = runtime();
        let embedder = with_workers(1);
        let queries = travel_questions();
        let alone = one_by_one(&rt, &embedder, &queries);
        let (runs_before, texts_before) = embedder.query_runs();
        assert_eq!(texts_before, 12);
        assert_eq!(runs_before, 12, "sequential queries run alone");
        let together = queries_during_a_document_job(&rt, &embedder, &queries);
        let (runs, texts) = embedder.query_runs();
        assert_eq!(texts - texts_before, 12);
        assert!(
            runs - runs_before < 12,
            "12 concurrent queries took {} model runs",
            runs - runs_before
        );
        assert_eq!(embedder.workers(), 1);
        // Not bit for bit: the int8 model quantizes activations with one scale per tensor,
        // so a text's vector depends slightly on its batch (documents have always been
        // batched; `CAIRN_QUERY_BATCH=1` keeps every query alone).
        for (a, b) in alone.iter().zip(&together) {
            assert!(
                cosine(a, b) > 0.99,
                "batched vector differs: {}",
                cosine(a, b)
            );
        }
    }

    /// Distinct texts of different lengths, of several batches.
    fn documents(n: usize) -> Vec<String> {
        let topics = [
            "travel policy",
            "quarterly budget",
            "badge security",
            "hiring plan",
        ];
        (0..n)
            .map(|i| format!("memo {i} on the {} ", topics[i % 4]).repeat(1 + i % 7))
            .collect()
    }

    /// For each text, the index of the nearest of `reference` (cosine).
    fn nearest(vectors: &[Vec<f32>], reference: &[Vec<f32>]) -> Vec<usize> {
        vectors
            .iter()
            .map(|v| {
                (0..reference.len())
                    .max_by(|&a, &b| cosine(v, &reference[a]).total_cmp(&cosine(v, &reference[b])))
                    .expect("a reference vector")
            })
            .collect()
    }

    /// Long document texts that keep the first worker busy for several batches.
    fn long_documents() -> Vec<String> {
        (0..48)
            .map(|i| format!("document {i} ").repeat(40))
            .collect()
    }

    /// Sends `queries` all at once while a long document job holds the first worker, and
    /// returns their vectors (in order) once the document job is done too.
    fn queries_during_a_document_job(
        rt: &tokio::runtime::Runtime,
        embedder: &Embedder,
        queries: &[String],
    ) -> Vec<Vec<f32>> {
        rt.block_on(async {
            let e = embedder.clone();
            let doc_job = tokio::spawn(async move { e.embed_documents(long_documents()).await });
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            let tasks: Vec<_> = queries
                .iter()
                .map(|q| {
                    let (e, q) = (embedder.clone(), q.clone());
                    tokio::spawn(async move { e.embed_query(&q).await })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.expect("query task").expect("query vector"));
            }
            let docs = doc_job.await.expect("document task");
            assert_eq!(docs.expect("document vectors").len(), 48);
            out
        })
    }

    /// A document job, however large, stays on the first worker and gets every vector back
    /// in its place; queries that queue while it runs start a query worker.
    #[test]
    fn documents_stay_on_the_first_worker_and_queued_queries_start_a_query_worker() {
        let rt = runtime();
        let embedder = with_workers(2);
        let texts = documents(40);
        let alone: Vec<Vec<f32>> = rt.block_on(async {
            let mut out = Vec::new();
            for t in &texts {
                out.extend(embedder.embed_documents(vec![t.clone()]).await.unwrap());
            }
            out
        });
        let queries = travel_questions();
        let lone = one_by_one(&rt, &embedder, &queries);
        assert_eq!(
            embedder.workers(),
            1,
            "sequential jobs started a query worker"
        );
        let together = rt
            .block_on(embedder.embed_documents(texts.clone()))
            .unwrap();
        assert_eq!(together.len(), texts.len());
        assert_eq!(
            embedder.workers(),
            1,
            "a document job started a query worker"
        );
        let order: Vec<usize> = (0..texts.len()).collect();
        assert_eq!(nearest(&together, &alone), order, "vectors out of place");
        for (a, b) in alone.iter().zip(&together) {
            assert!(
                cosine(a, b) > 0.99,
                "batched vector differs: {}",
                cosine(a, b)
            );
        }
        let during = queries_during_a_document_job(&rt, &embedder, &queries);
        assert_eq!(
            embedder.workers(),
            2,
            "queued queries started no query worker"
        );
        assert_eq!(nearest(&during, &lone), (0..12).collect::<Vec<_>>());
        for (a, b) in lone.iter().zip(&during) {
            assert!(
                cosine(a, b) > 0.99,
                "query vector differs: {}",
                cosine(a, b)
            );
        }
    }

    /// A query worker whose session cannot load (here: the model file is gone) starts no
    /// more; the first worker serves every query.
    #[test]
    fn a_query_worker_that_cannot_load_leaves_the_first_one_serving() {
        let rt = runtime();
        let model = tempfile::tempdir().unwrap();
        let source = EmbedConfig::default().model_dir;
        for entry in std::fs::read_dir(&source).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_file() {
                std::fs::copy(entry.path(), model.path().join(entry.file_name())).unwrap();
            }
        }
        let config = EmbedConfig {
            model_dir: model.path().to_path_buf(),
            workers: 2,
            ..EmbedConfig::default()
        };
        let embedder = Embedder::open(&config, None).unwrap();
        std::fs::remove_file(model.path().join("model.onnx")).unwrap();
        let queries: Vec<String> = (0..12).map(|i| format!("question {i}")).collect();
        for round in 0..2 {
            let vectors = queries_during_a_document_job(&rt, &embedder, &queries);
            assert_eq!(vectors.len(), queries.len(), "round {round}");
            // The failed start gives its count back from its own thread.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            while embedder.workers() != 1 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert_eq!(embedder.workers(), 1, "round {round}");
            assert_eq!(embedder.inner.queue.lock().max_workers, 1, "round {round}");
        }
    }

    #[test]
    fn take_jobs_respects_the_batch_bound() {
        let mut q = VecDeque::new();
        for n in [1, 1, 3, 1] {
            let (tx, _rx) = oneshot::channel();
            q.push_back(Job {
                texts: vec![String::new(); n],
                reply: tx,
            });
        }
        let (mut jobs, mut texts) = (Vec::new(), 0);
        take_jobs(&mut q, &mut jobs, &mut texts, 4);
        assert_eq!((jobs.len(), texts), (2, 2), "the 3-text job would pass 4");
        let (mut jobs, mut texts) = (Vec::new(), 0);
        take_jobs(&mut q, &mut jobs, &mut texts, 2);
        assert_eq!((jobs.len(), texts), (1, 3), "a first job always goes");
    }

    #[test]
    fn a_missing_model_is_a_clear_error() {
        let config = EmbedConfig {
            model_dir: std::path::PathBuf::from("/nonexistent/model"),
            ..EmbedConfig::default()
        };
        let err = Embedder::open(&config, None).unwrap_err();
        assert_eq!(err.kind(), cairn_models::ErrorKind::Unavailable);
        assert!(err.to_string().contains("scripts/setup.sh"), "{err}");
    }
}
