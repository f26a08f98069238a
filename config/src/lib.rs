//! The one configuration of Cairn.
//!
//! Every setting is a [`Key`] of [`KEYS`]: a dotted name (its place in `cairn.toml`), an
//! environment variable, for some a command-line flag, a default and a description. The
//! README's Configuration table is generated from [`KEYS`] ([`markdown_table`]; a test
//! keeps the two equal), so the documentation cannot drift from what is read.
//!
//! [`Config::load`] layers the sources — the defaults, then the file, then the environment,
//! then the flags — parses every value once into typed settings, and remembers where each
//! came from ([`Origin`]) for `cairn config`. A value that does not parse is an error naming
//! the key, the value and its origin ([`ConfigError`]), never a silent fallback; a key the
//! file does not know is an error too (a typo would otherwise be ignored).
//!
//! This crate reads no environment and no file: the binary passes the file's text and a
//! lookup of variables in ([`Sources`]), and the libraries below take the typed values
//! ([`EmbedConfig`], [`EngineOptions`], [`WorkerLimits`]). Tests build a [`Config`] from the
//! process environment the same way, so the suites run on a Qdrant server when
//! `CAIRN_QDRANT_URL` says so.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_embed::EmbedConfig;
use cairn_ingest::extract::WorkerLimits;
use cairn_service::{Backend, EngineOptions};
use cairn_store::{ReadConsistency, ServerConfig, SyncPolicy};
use serde::Serialize;

mod keys;

pub use keys::{Key, KEYS};

/// The default name of the configuration file, looked for in the current directory when
/// neither `--config` nor `CAIRN_CONFIG` names one.
pub const DEFAULT_FILE: &str = "cairn.toml";

/// The variable that names the configuration file (`--config` overrides it).
pub const FILE_ENV: &str = "CAIRN_CONFIG";

/// Errors of loading the configuration. Every one is the operator's to fix, and names what
/// to fix: the key (or the file) and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A value that does not parse.
    #[error("configuration: {key} = {value:?} (from {origin}): expected {expected}")]
    Invalid {
        key: &'static str,
        value: String,
        origin: Origin,
        expected: String,
    },
    /// A key in the file that is not a setting.
    #[error("configuration file {}: unknown setting `{key}`{hint}", path.display())]
    UnknownKey {
        path: PathBuf,
        key: String,
        hint: String,
    },
    /// The file is not TOML, or a value is not a single string, number or boolean.
    #[error("configuration file {}: {message}", path.display())]
    File { path: PathBuf, message: String },
    /// A flag passed for a key that does not exist (a bug of the binary, reported rather
    /// than ignored).
    #[error("configuration: no setting named `{0}`")]
    NoSuchKey(String),
}

impl ConfigError {
    /// The setting the error is about, when it is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            ConfigError::UnknownKey { key, .. } | ConfigError::NoSuchKey(key) => Some(key),
            ConfigError::File { .. } => None,
        }
    }
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", content = "name", rename_all = "snake_case")]
pub enum Origin {
    Default,
    File(PathBuf),
    Env(&'static str),
    Flag(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File(p) => write!(f, "file {}", p.display()),
            Origin::Env(v) => write!(f, "env {v}"),
            Origin::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

/// What [`Config::load`] reads from.
pub struct Sources<'a> {
    /// The configuration file: its path (for messages and origins) and its text.
    pub file: Option<(&'a Path, &'a str)>,
    /// Looks an environment variable up (`|k| std::env::var(k).ok()` in the binary).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Values given as flags, by key name (`("data_dir", "/srv/cairn")`).
    pub flags: &'a [(&'static str, String)],
}

impl fmt::Debug for Sources<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the environment: it may hold secrets.
        f.debug_struct("Sources")
            .field("file", &self.file.map(|(p, _)| p))
            .field(
                "flags",
                &self.flags.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl<'a> Sources<'a> {
    /// The environment alone: no file, no flags.
    pub fn env(env: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Sources {
            file: None,
            env,
            flags: &[],
        }
    }
}

/// The Qdrant server settings. They apply when `url` is set (the store is then the server)
/// and to the server side of `cairn migrate` whatever `url` says.
#[derive(Debug, Clone)]
pub struct QdrantSettings {
    /// gRPC URL; `None`: the embedded store.
    pub url: Option<String>,
    pub api_key: Option<String>,
    /// Collection name, `{dir}` standing for a digest of the data directory.
    pub collection: String,
    pub rest_url: Option<String>,
    pub shards: Option<u32>,
    pub replication: Option<u32>,
    pub write_consistency: Option<u32>,
    pub read_consistency: ReadConsistency,
    pub timeout: Duration,
}

impl QdrantSettings {
    /// The client configuration for the server at `url` with these settings; `{dir}` in
    /// the collection becomes a digest of `data_dir`. `dim` is the model's dimension.
    pub fn server_config(
        &self,
        url: &str,
        dim: usize,
        data_dir: &Path,
    ) -> Result<ServerConfig, cairn_store::StoreError> {
        let mut config = ServerConfig::new(url.trim(), dim);
        config.api_key = self.api_key.clone();
        config.rest_url = self.rest_url.clone();
        config.shard_number = self.shards;
        config.replication_factor = self.replication;
        config.write_consistency_factor = self.write_consistency;
        config.read_consistency = self.read_consistency;
        config.timeout = self.timeout;
        config.set_collection(&self.collection, data_dir)?;
        Ok(config)
    }
}

/// The store settings.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub qdrant: QdrantSettings,
    /// When an acknowledged write is on stable storage (embedded store).
    pub sync: SyncPolicy,
    /// Room the embedded store keeps free on the disk (0: no check).
    pub disk_reserve_bytes: u64,
}

/// `cairn serve`'s settings.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub addr: SocketAddr,
    /// File of API key entries.
    pub api_keys_file: Option<PathBuf>,
    /// API key entries inline (when no file is named).
    pub api_keys: Option<String>,
    pub max_body_bytes: usize,
    pub request_timeout: Duration,
    pub header_timeout: Duration,
    pub max_connections: usize,
}

/// One row of `cairn config`: a setting, its effective value and where it came from.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub key: &'static str,
    /// The value as the configuration uses it; secrets show as `(set)`.
    pub value: String,
    pub origin: Origin,
    pub env: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flag: Option<&'static str>,
}

/// The effective configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The data directory.
    pub data_dir: PathBuf,
    pub store: StoreSettings,
    pub embed: EmbedConfig,
    /// Where the model files are looked for when `embed.model_dir` / `embed.ort_library`
    /// are not set.
    pub embed_home: PathBuf,
    /// Limits of the PDF extraction workers.
    pub extract: WorkerLimits,
    pub serve: ServeSettings,
    /// The log filter (`tracing_subscriber::EnvFilter` syntax).
    pub log: String,
    /// Crash points to arm (crash-consistency tests only).
    pub failpoints: Option<String>,
    /// The file read, if any.
    pub file: Option<PathBuf>,
    entries: Vec<Entry>,
}

impl Config {
    /// Layers `sources` over the defaults and parses every setting.
    pub fn load(sources: &Sources<'_>) -> Result<Config, ConfigError> {
        let layers = Layers::collect(sources)?;
        let mut config = layers.parse()?;
        config.file = sources.file.map(|(p, _)| p.to_path_buf());
        config.entries = KEYS
            .iter()
            .map(|k| Entry {
                key: k.name,
                value: config.show(k),
                origin: layers.origin(k.name),
                env: k.env,
                flag: k.flag,
            })
            .collect();
        Ok(config)
    }

    /// Every setting with its effective value and origin, in [`KEYS`] order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Where the value of `key` came from.
    pub fn origin(&self, key: &str) -> Origin {
        self.entries
            .iter()
            .find(|e| e.key == key)
            .map_or(Origin::Default, |e| e.origin.clone())
    }

    /// The Qdrant server the store is on, `None` for the embedded store. `dim` is the
    /// model's dimension.
    pub fn server(&self, dim: usize) -> Result<Option<ServerConfig>, ConfigError> {
        let q = &self.store.qdrant;
        q.url
            .as_deref()
            .map(|url| {
                q.server_config(url, dim, &self.data_dir)
                    .map_err(|e| ConfigError::Invalid {
                        key: "store.qdrant.collection",
                        value: q.collection.clone(),
                        origin: self.origin("store.qdrant.collection"),
                        expected: e.to_string(),
                    })
            })
            .transpose()
    }

    /// How the service opens the data directory: the store, its durability and disk
    /// reserve. The extractor is the caller's (only a binary that implements the worker
    /// protocol can isolate extraction).
    pub fn engine_options(&self) -> Result<EngineOptions, ConfigError> {
        // The dimension is replaced by the model's when the engine opens the store.
        Ok(EngineOptions {
            backend: match self.server(0)? {
                Some(server) => Backend::Server(server),
                None => Backend::Embedded,
            },
            sync: self.store.sync,
            disk_reserve_bytes: Some(self.store.disk_reserve_bytes),
            ..EngineOptions::default()
        })
    }

    /// `cairn config`'s text: one line per setting, `key = value  # origin`, in TOML so it
    /// can start a `cairn.toml`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        match &self.file {
            Some(p) => out.push_str(&format!("# configuration file: {}\n", p.display())),
            None => out.push_str("# configuration file: none\n"),
        }
        let width = self
            .entries
            .iter()
            .map(|e| e.key.len() + e.value.len() + 5)
            .max()
            .unwrap_or(0);
        for e in &self.entries {
            // Unset: a commented line, so the output loads back as a file.
            let (line, note) = if e.value.is_empty() {
                (format!("# {} =", e.key), " (unset)")
            } else {
                (format!("{} = {}", e.key, toml_value(&e.value)), "")
            };
            out.push_str(&format!("{line:width$}  # {}{note}\n", e.origin));
        }
        out
    }

    /// The effective value of `key` as [`Config::entries`] shows it.
    fn show(&self, key: &Key) -> String {
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        let secret = |v: &Option<String>| {
            if v.is_some() {
                "(set)".to_string()
            } else {
                String::new()
            }
        };
        let path = |p: &Path| p.display().to_string();
        let opt_num = |v: Option<u32>| v.map(|n| n.to_string()).unwrap_or_default();
        let q = &self.store.qdrant;
        let e = &self.embed;
        let x = &self.extract;
        let s = &self.serve;
        let mib = |b: u64| (b / keys::MIB).to_string();
        match key.name {
            "data_dir" => path(&self.data_dir),
            "store.qdrant.url" => opt(&q.url),
            "store.qdrant.api_key" => secret(&q.api_key),
            "store.qdrant.collection" => q.collection.clone(),
            "store.qdrant.rest_url" => opt(&q.rest_url),
            "store.qdrant.shards" => opt_num(q.shards),
            "store.qdrant.replication" => opt_num(q.replication),
            "store.qdrant.write_consistency" => opt_num(q.write_consistency),
            "store.qdrant.read_consistency" => q.read_consistency.as_str().to_string(),
            "store.qdrant.timeout_secs" => q.timeout.as_secs().to_string(),
            "store.sync" => self.store.sync.as_str().to_string(),
            "store.disk_reserve_mb" => mib(self.store.disk_reserve_bytes),
            "embed.home" => path(&self.embed_home),
            "embed.model_dir" => path(&e.model_dir),
            "embed.ort_library" => path(&e.ort_library),
            "embed.batch" => e.batch_size.to_string(),
            "embed.ort_threads" => e.intra_threads.map(|n| n.to_string()).unwrap_or_default(),
            "embed.workers" => e.workers.to_string(),
            "embed.ort_spin" => e.spin.to_string(),
            "embed.hub_model" => opt(&e.hub_model),
            "embed.query_batch" => e.query_batch.to_string(),
            "embed.query_wait_us" => e.query_wait.as_micros().to_string(),
            "embed.cache_max_entries" => e.cache_max_entries.to_string(),
            "extract.timeout_secs" => x.timeout.as_secs_f64().to_string(),
            "extract.cpu_secs" => x.cpu_seconds.unwrap_or(0).to_string(),
            "extract.memory_mb" => mib(x.memory_bytes.unwrap_or(0)),
            "extract.max_output_mb" => mib(x.max_output_bytes),
            "extract.workers" => x.max_workers.to_string(),
            "serve.addr" => s.addr.to_string(),
            "serve.api_keys_file" => s.api_keys_file.as_deref().map(path).unwrap_or_default(),
            "serve.api_keys" => secret(&s.api_keys),
            "serve.max_body_bytes" => s.max_body_bytes.to_string(),
            "serve.timeout_secs" => s.request_timeout.as_secs().to_string(),
            "serve.header_timeout_secs" => s.header_timeout.as_secs().to_string(),
            "serve.max_connections" => s.max_connections.to_string(),
            "log" => self.log.clone(),
            "failpoints" => opt(&self.failpoints),
            // `every_key_is_shown` fails on a key added to `KEYS` without a line here.
            _ => "?".to_string(),
        }
    }
}

/// A value as TOML: numbers and booleans bare, everything else quoted. Only digit-led text
/// counts as a number (`"inf"` and `"nan"` parse as floats but are names here).
fn toml_value(v: &str) -> String {
    let numeric = v
        .trim_start_matches('-')
        .starts_with(|c: char| c.is_ascii_digit())
        && v.parse::<f64>().is_ok_and(f64::is_finite);
    if v == "true" || v == "false" || numeric {
        v.to_string()
    } else {
        format!("{v:?}")
    }
}

/// The README's Configuration table: one row per setting.
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| key (`cairn.toml`) | variable | flag | default | what |\n|---|---|---|---|---|\n",
    );
    for k in KEYS {
        let flag = k.flag.map(|f| format!("`{f}`")).unwrap_or_default();
        let default = if k.default.is_empty() {
            "none".to_string()
        } else {
            format!("`{}`", k.default)
        };
        out.push_str(&format!(
            "| `{}` | `{}` | {flag} | {default} | {} |\n",
            k.name,
            k.env,
            k.doc.replace('|', "\\|")
        ));
    }
    out
}

/// The options `cairn --data-dir <data_dir>` would open its engine with under the
/// environment `env` (no file, no other flags): what the test suites use, so that
/// `CAIRN_QDRANT_URL` runs them on a server exactly as it runs the binary there.
pub fn engine_options_from(
    env: &dyn Fn(&str) -> Option<String>,
    data_dir: &Path,
) -> Result<EngineOptions, ConfigError> {
    let flags = [("data_dir", data_dir.display().to_string())];
    Config::load(&Sources {
        file: None,
        env,
        flags: &flags,
    })?
    .engine_options()
}

/// The raw values by key, each with its origin: defaults < file < environment < flags.
struct Layers {
    values: BTreeMap<&'static str, (String, Origin)>,
    /// The keys `parse` asked for (a test checks it asks for every one).
    read: std::cell::RefCell<std::collections::BTreeSet<&'static str>>,
}

impl Layers {
    fn collect(sources: &Sources<'_>) -> Result<Layers, ConfigError> {
        let mut values = BTreeMap::new();
        // Each later source overrides; an empty value is unset in every source.
        let mut set = |key: &'static Key, value: String, origin: Origin| {
            if !value.trim().is_empty() {
                values.insert(key.name, (value, origin));
            }
        };
        if let Some((path, text)) = sources.file {
            for (name, value) in flatten_file(path, text)? {
                let key = keys::find(&name).ok_or_else(|| ConfigError::UnknownKey {
                    hint: keys::hint(&name),
                    path: path.to_path_buf(),
                    key: name.clone(),
                })?;
                set(key, value, Origin::File(path.to_path_buf()));
            }
        }
        for key in KEYS {
            if let Some(v) = (sources.env)(key.env) {
                set(key, v, Origin::Env(key.env));
            }
        }
        for (name, value) in sources.flags {
            let key = keys::find(name).ok_or_else(|| ConfigError::NoSuchKey(name.to_string()))?;
            set(
                key,
                value.clone(),
                Origin::Flag(key.flag.unwrap_or(key.name)),
            );
        }
        Ok(Layers {
            values,
            read: Default::default(),
        })
    }

    fn origin(&self, name: &str) -> Origin {
        self.values
            .get(name)
            .map_or(Origin::Default, |(_, o)| o.clone())
    }

    /// The raw value of `name`, trimmed; `None` when no source set it.
    fn raw(&self, name: &'static str) -> Option<&str> {
        self.read.borrow_mut().insert(name);
        self.values.get(name).map(|(v, _)| v.trim())
    }

    /// Parses `name` with `parse`; an unparsable value is an error naming the key.
    fn get<T>(
        &self,
        name: &'static str,
        expected: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<Option<T>, ConfigError> {
        self.read.borrow_mut().insert(name);
        match self.values.get(name) {
            None => Ok(None),
            Some((v, origin)) => parse(v.trim())
                .map(Some)
                .ok_or_else(|| ConfigError::Invalid {
                    key: name,
                    value: v.clone(),
                    origin: origin.clone(),
                    expected: expected.to_string(),
                }),
        }
    }

    fn string(&self, name: &'static str) -> Option<String> {
        self.raw(name).map(str::to_string)
    }

    fn path(&self, name: &'static str) -> Option<PathBuf> {
        self.raw(name).map(PathBuf::from)
    }

    fn positive<T: std::str::FromStr + PartialOrd + Default>(
        &self,
        name: &'static str,
        expected: &str,
    ) -> Result<Option<T>, ConfigError> {
        self.get(name, expected, |v| {
            v.parse::<T>().ok().filter(|n| *n > T::default())
        })
    }

    fn whole<T: std::str::FromStr>(
        &self,
        name: &'static str,
        expected: &str,
    ) -> Result<Option<T>, ConfigError> {
        self.get(name, expected, |v| v.parse::<T>().ok())
    }

    /// A non-negative finite number.
    fn amount(&self, name: &'static str, expected: &str) -> Result<Option<f64>, ConfigError> {
        self.get(name, expected, |v| {
            v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0)
        })
    }

    fn invalid(&self, name: &'static str, expected: &str) -> ConfigError {
        let (value, origin) = self
            .values
            .get(name)
            .cloned()
            .unwrap_or_else(|| (String::new(), Origin::Default));
        ConfigError::Invalid {
            key: name,
            value,
            origin,
            expected: expected.to_string(),
        }
    }

    fn parse(&self) -> Result<Config, ConfigError> {
        let data_dir = self
            .path("data_dir")
            .unwrap_or_else(|| PathBuf::from(keys::DEFAULT_DATA_DIR));

        let collection = self
            .string("store.qdrant.collection")
            .unwrap_or_else(|| "cairn".to_string());
        // Checked here so a bad name fails at start, naming the key.
        if ServerConfig::new("", 0)
            .set_collection(&collection, &data_dir)
            .is_err()
        {
            return Err(self.invalid(
                "store.qdrant.collection",
                "letters, digits, '_', '-', '.' and `{dir}` (at most 255 characters)",
            ));
        }
        let qdrant = QdrantSettings {
            url: self.string("store.qdrant.url"),
            api_key: self.string("store.qdrant.api_key"),
            collection,
            rest_url: self.string("store.qdrant.rest_url"),
            shards: self.positive("store.qdrant.shards", "a positive integer")?,
            replication: self.positive("store.qdrant.replication", "a positive integer")?,
            write_consistency: self
                .positive("store.qdrant.write_consistency", "a positive integer")?,
            read_consistency: self
                .get(
                    "store.qdrant.read_consistency",
                    "any, majority, quorum or all",
                    |v| v.parse::<ReadConsistency>().ok(),
                )?
                .unwrap_or(ReadConsistency::Any),
            timeout: Duration::from_secs(
                self.positive("store.qdrant.timeout_secs", "a positive number of seconds")?
                    .unwrap_or(30),
            ),
        };
        let store = StoreSettings {
            qdrant,
            sync: self
                .get("store.sync", "`always` or `os`", SyncPolicy::parse)?
                .unwrap_or_default(),
            disk_reserve_bytes: self
                .whole::<u64>(
                    "store.disk_reserve_mb",
                    "a whole number of megabytes (0: no check)",
                )?
                .map_or(cairn_store::disk::DEFAULT_RESERVE_BYTES, |mb| {
                    mb.saturating_mul(keys::MIB)
                }),
        };

        let home = self
            .path("embed.home")
            .unwrap_or_else(EmbedConfig::default_home);
        let mut embed = EmbedConfig::in_home(&home);
        if let Some(dir) = self.path("embed.model_dir") {
            embed.model_dir = dir;
        }
        if let Some(lib) = self.path("embed.ort_library") {
            embed.ort_library = lib;
        }
        if let Some(n) = self.positive("embed.batch", "a positive number of texts")? {
            embed.batch_size = n;
        }
        embed.intra_threads = self.positive("embed.ort_threads", "a positive number of threads")?;
        if let Some(n) = self.positive("embed.workers", "a positive number of workers")? {
            embed.workers = n;
        }
        if let Some(spin) = self.get("embed.ort_spin", "true or false (1 or 0)", parse_bool)? {
            embed.spin = spin;
        }
        embed.hub_model = self.string("embed.hub_model");
        if let Some(n) = self.positive(
            "embed.query_batch",
            "a positive number of queries (1: no batching)",
        )? {
            embed.query_batch = n;
        }
        if let Some(us) = self.whole::<u64>("embed.query_wait_us", "a whole number of µs")? {
            embed.query_wait = Duration::from_micros(us);
        }
        if let Some(n) = self.positive("embed.cache_max_entries", "a positive number of vectors")? {
            embed.cache_max_entries = n;
        }

        let mut extract = WorkerLimits::default();
        if let Some(secs) = self.get(
            "extract.timeout_secs",
            "a positive number of seconds",
            |v| v.parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0),
        )? {
            extract.timeout = Duration::from_secs_f64(secs);
            // The CPU backstop follows the wall clock unless set itself.
            extract.cpu_seconds = Some((2.0 * secs).ceil() as u64);
        }
        if let Some(mb) = self.amount("extract.memory_mb", "a number of MiB (0: no limit)")? {
            extract.memory_bytes = (mb > 0.0).then_some((mb * keys::MIB as f64) as u64);
        }
        if let Some(secs) = self.amount("extract.cpu_secs", "a number of seconds (0: no limit)")? {
            extract.cpu_seconds = (secs > 0.0).then_some(secs.ceil() as u64);
        }
        if let Some(mb) = self.get("extract.max_output_mb", "a positive number of MiB", |v| {
            v.parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0)
        })? {
            extract.max_output_bytes = (mb * keys::MIB as f64) as u64;
        }
        if let Some(n) =
            self.positive("extract.workers", "a whole number of workers, at least 1")?
        {
            extract.max_workers = n;
        }

        let serve = ServeSettings {
            addr: self
                .get("serve.addr", "an address and port (127.0.0.1:7878)", |v| {
                    v.parse::<SocketAddr>().ok()
                })?
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 7878))),
            api_keys_file: self.path("serve.api_keys_file"),
            api_keys: self.string("serve.api_keys"),
            max_body_bytes: self
                .positive("serve.max_body_bytes", "a positive number of bytes")?
                .unwrap_or(16 * 1024 * 1024),
            request_timeout: Duration::from_secs(
                self.positive("serve.timeout_secs", "a positive number of seconds")?
                    .unwrap_or(60),
            ),
            header_timeout: Duration::from_secs(
                self.positive("serve.header_timeout_secs", "a positive number of seconds")?
                    .unwrap_or(10),
            ),
            max_connections: self
                .positive("serve.max_connections", "a positive number of connections")?
                .unwrap_or(1024),
        };

        Ok(Config {
            data_dir,
            store,
            embed,
            embed_home: home,
            extract,
            serve,
            log: self
                .string("log")
                .unwrap_or_else(|| keys::DEFAULT_LOG.to_string()),
            failpoints: self.string("failpoints"),
            file: None,
            entries: Vec::new(),
        })
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

/// The file's settings as dotted keys with their values as text.
fn flatten_file(path: &Path, text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::File {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        })?;
    let mut out = Vec::new();
    flatten(path, "", &table, &mut out)?;
    Ok(out)
}

fn flatten(
    path: &Path,
    prefix: &str,
    table: &toml::Table,
    out: &mut Vec<(String, String)>,
) -> Result<(), ConfigError> {
    for (k, v) in table {
        let name = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let text = match v {
            toml::Value::Table(t) => {
                flatten(path, &name, t, out)?;
                continue;
            }
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(_) | toml::Value::Datetime(_) => {
                return Err(ConfigError::File {
                    path: path.to_path_buf(),
                    message: format!("`{name}`: expected a string, a number or a boolean"),
                })
            }
        };
        out.push((name, text));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
