//! The settings: one [`Key`] each. Adding a setting is one entry here, one line in
//! `Layers::parse` and one in `Config::show` (a test fails on a key either misses), and
//! `UPDATE_README=1 cargo test --workspace --lib readme_table` regenerates the README table.

pub(crate) const MIB: u64 = 1024 * 1024;
pub(crate) const DEFAULT_DATA_DIR: &str = "./cairn-data";
pub(crate) const DEFAULT_LOG: &str = "warn,qdrant_edge=error,cairn=info,cairn_api=info";

/// One setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// Its dotted name: `store.sync` is `sync` in the file's `[store]` table.
    pub name: &'static str,
    /// The environment variable that sets it.
    pub env: &'static str,
    /// The command-line flag that sets it, if any.
    pub flag: Option<&'static str>,
    /// The default as the documentation shows it (empty: unset).
    pub default: &'static str,
    /// What it does.
    pub doc: &'static str,
}

const fn key(
    name: &'static str,
    env: &'static str,
    flag: Option<&'static str>,
    default: &'static str,
    doc: &'static str,
) -> Key {
    Key {
        name,
        env,
        flag,
        default,
        doc,
    }
}

/// Every setting, in the order `cairn config` and the README list them.
pub const KEYS: &[Key] = &[
    key(
        "data_dir",
        "CAIRN_DATA_DIR",
        Some("--data-dir"),
        DEFAULT_DATA_DIR,
        "data directory: the embedded store, its journal, the embedding cache, grants",
    ),
    key(
        "store.qdrant.url",
        "CAIRN_QDRANT_URL",
        Some("--qdrant-url"),
        "",
        "a Qdrant server's gRPC URL (`https://` for TLS) instead of the embedded store",
    ),
    key(
        "store.qdrant.api_key",
        "CAIRN_QDRANT_API_KEY",
        Some("--qdrant-api-key"),
        "",
        "the server's API key (shown as `(set)`)",
    ),
    key(
        "store.qdrant.collection",
        "CAIRN_QDRANT_COLLECTION",
        Some("--qdrant-collection"),
        "cairn",
        "the collection; `{dir}` becomes a digest of the data directory",
    ),
    key(
        "store.qdrant.rest_url",
        "CAIRN_QDRANT_REST_URL",
        None,
        "",
        "the server's REST URL, for backups (snapshots); default: the gRPC URL with port 6333",
    ),
    key(
        "store.qdrant.shards",
        "CAIRN_QDRANT_SHARDS",
        None,
        "",
        "shards of a new collection (the server's default when unset)",
    ),
    key(
        "store.qdrant.replication",
        "CAIRN_QDRANT_REPLICATION",
        None,
        "",
        "replicas of each shard of a new collection",
    ),
    key(
        "store.qdrant.write_consistency",
        "CAIRN_QDRANT_WRITE_CONSISTENCY",
        None,
        "",
        "replicas that must acknowledge a write (new collection)",
    ),
    key(
        "store.qdrant.read_consistency",
        "CAIRN_QDRANT_READ_CONSISTENCY",
        None,
        "any",
        "`any`, `majority`, `quorum` or `all` replicas answer a read",
    ),
    key(
        "store.qdrant.timeout_secs",
        "CAIRN_QDRANT_TIMEOUT_SECS",
        None,
        "30",
        "per-request timeout of the server client",
    ),
    key(
        "store.sync",
        "CAIRN_SYNC",
        None,
        "always",
        "durability of an acknowledged write: `always` (`fdatasync`, group commit) or `os` (survives a killed process, not a power cut)",
    ),
    key(
        "store.disk_reserve_mb",
        "CAIRN_DISK_RESERVE_MB",
        None,
        "64",
        "MiB kept free beyond the embedded store's sparse files' holes; below it writes answer `507` (0: no check, risking SIGBUS on a full disk)",
    ),
    key(
        "embed.home",
        "CAIRN_HOME",
        None,
        ".cache",
        "where `scripts/setup.sh` put the model and runtime: default the nearest `.cache/` with `models/` above the working directory or the binary",
    ),
    key(
        "embed.model_dir",
        "CAIRN_MODEL_DIR",
        None,
        "<home>/models/bge-small-en",
        "the model directory (see [Model files](#model-files))",
    ),
    key(
        "embed.ort_library",
        "CAIRN_ORT_LIB",
        None,
        "<home>/onnxruntime/libonnxruntime.so",
        "the ONNX Runtime library",
    ),
    key(
        "embed.batch",
        "CAIRN_EMBED_BATCH",
        None,
        "8",
        "document texts per model run",
    ),
    key(
        "embed.ort_threads",
        "CAIRN_ORT_THREADS",
        None,
        "",
        "ONNX Runtime intra-op threads of the embedding worker that embeds documents (unset: all cores); query workers run one each",
    ),
    key(
        "embed.workers",
        "CAIRN_EMBED_WORKERS",
        None,
        "cores, at most 4",
        "most embedding workers, each a thread with its own model session: the first embeds documents and queries, the others queries only and start when more queries are queued than workers are free (each ~65-90 MiB of memory); 1: queries wait behind document batches",
    ),
    key(
        "embed.ort_spin",
        "CAIRN_ORT_SPIN",
        None,
        "false",
        "let ONNX Runtime's threads spin between the operators of a model run, never after it (off: they would steal the cores chunking and writes need)",
    ),
    key(
        "embed.hub_model",
        "CAIRN_HUB_MODEL",
        None,
        "",
        "download this model with fastembed instead (e.g. `BAAI/bge-small-en-v1.5`; a build with `--features cairn-api/hub` and internet)",
    ),
    key(
        "embed.query_batch",
        "CAIRN_QUERY_BATCH",
        None,
        "16",
        "queries per model run (dynamic batching; 1: off)",
    ),
    key(
        "embed.query_wait_us",
        "CAIRN_QUERY_WAIT_US",
        None,
        "2000",
        "longest a query run waits for more queries, in µs (only under load)",
    ),
    key(
        "embed.cache_max_entries",
        "CAIRN_EMBED_CACHE_MAX",
        None,
        "50000",
        "vectors the embedding cache keeps (least recently used evicted)",
    ),
    key(
        "extract.timeout_secs",
        "CAIRN_EXTRACT_TIMEOUT_SECS",
        None,
        "30",
        "wall-clock limit of a PDF extraction worker",
    ),
    key(
        "extract.cpu_secs",
        "CAIRN_EXTRACT_CPU_SECS",
        None,
        "60",
        "CPU limit of a PDF worker (default twice the wall clock; 0: none)",
    ),
    key(
        "extract.memory_mb",
        "CAIRN_EXTRACT_MEMORY_MB",
        None,
        "1024",
        "address-space limit of a PDF worker in MiB (0: none)",
    ),
    key(
        "extract.max_output_mb",
        "CAIRN_EXTRACT_MAX_OUTPUT_MB",
        None,
        "128",
        "largest reply read from a PDF worker, in MiB",
    ),
    key(
        "extract.workers",
        "CAIRN_EXTRACT_WORKERS",
        None,
        "CPUs, at most 4",
        "PDF workers running at once",
    ),
    key(
        "serve.addr",
        "CAIRN_ADDR",
        Some("--addr"),
        "127.0.0.1:7878",
        "`cairn serve`'s listen address (without API keys only loopback is allowed)",
    ),
    key(
        "serve.api_keys_file",
        "CAIRN_API_KEYS_FILE",
        Some("--api-keys"),
        "",
        "file of API key entries (`<sha256-hex>:<tenant>[:<users>[:proposer]]`, one per line)",
    ),
    key(
        "serve.api_keys",
        "CAIRN_API_KEYS",
        None,
        "",
        "API key entries inline, when no file is named (shown as `(set)`)",
    ),
    key(
        "serve.max_body_bytes",
        "CAIRN_MAX_BODY",
        Some("--max-body"),
        "16777216",
        "largest request body in bytes",
    ),
    key(
        "serve.timeout_secs",
        "CAIRN_REQUEST_TIMEOUT_SECS",
        Some("--timeout"),
        "60",
        "request timeout (also bounds reading a slow request body)",
    ),
    key(
        "serve.header_timeout_secs",
        "CAIRN_HEADER_TIMEOUT_SECS",
        Some("--header-timeout"),
        "10",
        "header-read timeout, and keep-alive idle timeout",
    ),
    key(
        "serve.max_connections",
        "CAIRN_MAX_CONNECTIONS",
        Some("--max-connections"),
        "1024",
        "open connections at once (more wait in the listen backlog; lowered to fit the open-file limit less 256, which `serve` raises to its hard limit at start)",
    ),
    key(
        "log",
        "CAIRN_LOG",
        None,
        DEFAULT_LOG,
        "log filter (`tracing` env-filter syntax); logs go to stderr",
    ),
    key(
        "failpoints",
        "CAIRN_FAILPOINTS",
        None,
        "",
        "crash points to arm, `name[@n],...` (crash-consistency tests only: the process aborts there)",
    ),
];

/// The key named `name`.
pub(crate) fn find(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// A "did you mean" for an unknown file key: a key with the same last part, or one whose
/// variable it is.
pub(crate) fn hint(name: &str) -> String {
    let last = name.rsplit('.').next().unwrap_or(name);
    KEYS.iter()
        .find(|k| k.name.rsplit('.').next() == Some(last) || k.env.eq_ignore_ascii_case(name))
        .map(|k| format!(" (did you mean `{}`?)", k.name))
        .unwrap_or_default()
}
