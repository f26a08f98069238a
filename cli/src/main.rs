//! `cairn`: the command-line interface and server of Cairn.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use cairn_api::{AppState, Metrics, ServerConfig};
use cairn_ingest::{parse_messages, DocStatus, DocumentInput, Progress};
use cairn_models::pack::TurnMode;
use cairn_models::Scope;
use cairn_service::turns::PrepareRequest;
use cairn_service::{Auth, Engine, PageRequest, Principal};
use clap::{Args, Parser, Subcommand};

/// jemalloc, not glibc's malloc: glibc kept freed arena pages after an index build (a 30k
/// store served with 318 MiB anonymous, 150 MiB of it live); jemalloc returns them (a 100k
/// store: 189 MiB against 527 MiB).
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod bench;
mod cli_eval;
mod knowledge;
mod tck;

#[derive(Debug, Parser)]
#[command(
    name = "cairn",
    version,
    about = "Cairn: agent memory with citations, on embedded Qdrant"
)]
struct Cli {
    /// Configuration file (TOML; `cairn config` prints the effective configuration) [env:
    /// CAIRN_CONFIG; default: ./cairn.toml when it exists]. Flags beat the environment,
    /// which beats the file.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Data directory (the embedded Qdrant shard and the embedding cache live here) [env:
    /// CAIRN_DATA_DIR; default: ./cairn-data].
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    scope: ScopeArgs,
    #[command(subcommand)]
    command: Command,
}

/// The store: the embedded engine in `--data-dir` (default), or a Qdrant server or cluster.
/// Shards, replication and consistency are `store.qdrant.*` settings (`cairn config`).
#[derive(Debug, Clone, Args)]
struct StoreArgs {
    /// Qdrant server gRPC URL (e.g. http://127.0.0.1:6334; https:// for TLS) [env:
    /// CAIRN_QDRANT_URL]. Without it the embedded store in --data-dir is used.
    #[arg(long, global = true)]
    qdrant_url: Option<String>,
    /// API key of the Qdrant server [env: CAIRN_QDRANT_API_KEY].
    #[arg(long, global = true)]
    qdrant_api_key: Option<String>,
    /// Collection on the server [env: CAIRN_QDRANT_COLLECTION; default: cairn]; `{dir}`
    /// becomes a digest of --data-dir.
    #[arg(long, global = true)]
    qdrant_collection: Option<String>,
}

/// The identity scope. Tenant, user and namespace are the storage boundary; agent and
/// session are recorded as provenance.
#[derive(Debug, Args)]
struct ScopeArgs {
    #[arg(long, global = true, env = "CAIRN_TENANT", default_value = "default")]
    tenant: String,
    #[arg(long, global = true, env = "CAIRN_USER", default_value = "default")]
    user: String,
    #[arg(
        long,
        global = true,
        env = "CAIRN_NAMESPACE",
        default_value = "default"
    )]
    namespace: String,
    #[arg(long, global = true, env = "CAIRN_AGENT", default_value = "default")]
    agent: String,
    /// The session [default: default]. `cairn traces list` lists every session's traces
    /// unless one is given.
    #[arg(long, global = true, env = "CAIRN_SESSION")]
    session: Option<String>,
}

impl ScopeArgs {
    fn scope(&self) -> Result<Scope> {
        Ok(Scope::new(
            &self.tenant,
            &self.user,
            &self.namespace,
            &self.agent,
            self.session.as_deref().unwrap_or("default"),
        )?)
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the agent-memory TCK bridge protocol (for the public conformance suite).
    TckBridge {
        /// Address to listen on (loopback only).
        #[arg(long, default_value = "127.0.0.1:3001")]
        addr: SocketAddr,
        /// The tenant the bridge serves (the suite has no tenants).
        #[arg(long, default_value = "tck")]
        tenant: String,
        /// The user the bridge serves.
        #[arg(long, default_value = "tck")]
        user: String,
    },
    /// Serve the HTTP API.
    Serve {
        /// Address to listen on [env: CAIRN_ADDR; default: 127.0.0.1:7878]. Without API keys
        /// only loopback addresses are allowed.
        #[arg(long)]
        addr: Option<String>,
        /// File of API key entries (`<sha256-hex>:<tenant>[:<users>[:proposer]]`, one per
        /// line) [env: CAIRN_API_KEYS_FILE].
        #[arg(long)]
        api_keys: Option<PathBuf>,
        /// Largest request body in bytes [env: CAIRN_MAX_BODY; default: 16 MiB].
        #[arg(long)]
        max_body: Option<String>,
        /// Request timeout in seconds [env: CAIRN_REQUEST_TIMEOUT_SECS; default: 60].
        #[arg(long)]
        timeout: Option<String>,
        /// Seconds a connection may take to send a request's headers, and may stay idle
        /// between requests, before it is closed [env: CAIRN_HEADER_TIMEOUT_SECS; default:
        /// 10].
        #[arg(long)]
        header_timeout: Option<String>,
        /// Most connections open at once (lowered to fit the open-file limit; more wait in
        /// the listen backlog) [env: CAIRN_MAX_CONNECTIONS; default: 1024].
        #[arg(long)]
        max_connections: Option<String>,
    },
    /// Print the effective configuration: every setting, its value and where it came from
    /// (default, the file, a variable or a flag), as TOML that can start a `cairn.toml`.
    Config {
        /// Print JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Ingest files and directories (.txt, .md, .pdf), or messages (--messages).
    Ingest {
        /// Files and directories (directories are walked recursively).
        paths: Vec<PathBuf>,
        /// Only files matching one of these globs (when walking directories).
        #[arg(long)]
        include: Vec<String>,
        /// Skip files matching one of these globs.
        #[arg(long)]
        exclude: Vec<String>,
        /// A JSON or JSONL file of conversation messages.
        ///
        /// Re-running the same file records nothing new. A message is keyed by its
        /// `turn_id`, else by its `ts`, else (a line with neither) by its role, content and
        /// occurrence number in the file, so identical lines stay separate messages and
        /// each maps onto itself on a re-run, even after lines are added or the file moves.
        /// (The HTTP API treats a keyless message as new instead.)
        #[arg(long)]
        messages: Option<PathBuf>,
        /// A BEIR `corpus.jsonl`: each line `{_id, title, text}` becomes the document
        /// `beir:<_id>` with text `title + " " + text`.
        #[arg(long)]
        beir: Option<PathBuf>,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Recall a MemoryPack for a query.
    Recall {
        query: String,
        /// Token budget of the pack.
        #[arg(long)]
        budget: Option<usize>,
        /// Print the agent-turn-v1 JSON envelope instead of Markdown.
        #[arg(long)]
        json: bool,
    },
    /// List the scope's documents.
    Documents {
        #[arg(long)]
        json: bool,
    },
    /// Point counts of the scope.
    Stats {
        #[arg(long)]
        json: bool,
    },
    /// Serve the MCP tools (recall, remember, turns, ...) over stdin/stdout for a desktop
    /// client (Claude Desktop, Cursor, VS Code) as the local operator. stdout is the
    /// protocol; logs go to stderr. Over HTTP the same tools are at `/mcp` of `cairn serve`.
    Mcp,
    /// Print the sha256 of an API key, for the key file.
    HashKey { key: String },
    /// Agent grants of --tenant/--user: issue (prints the agent's key once), list, suspend,
    /// revoke, restore. The operator's command: it works on the data directory directly.
    Grants {
        #[command(subcommand)]
        action: GrantsCommand,
    },
    /// Knowledge: entities (people, organizations, places...), their relationships and
    /// merges.
    Entities {
        /// Print the service's JSON.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        action: knowledge::EntitiesCommand,
    },
    /// Knowledge: facts (subject, predicate, object) with validity, supersession and
    /// conflicts; predicate declarations.
    Facts {
        /// Print the service's JSON.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        action: knowledge::FactsCommand,
    },
    /// Knowledge: the user's preferences.
    Prefs {
        /// Print the service's JSON.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        action: knowledge::PrefsCommand,
    },
    /// Reasoning memory: agents' traces, their steps and tool calls.
    Traces {
        /// Print the service's JSON.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        action: knowledge::TracesCommand,
    },
    /// Forget what a ref names (doc:, msg:, conv:, turn:, evt:, cand:, mem:, ent:, pref:,
    /// fact:, trace:...) and what derives from it.
    Forget {
        #[arg(value_name = "REF")]
        reference: String,
        /// Also delete invalidated derived records, and flush before answering.
        #[arg(long)]
        hard: bool,
        #[arg(long)]
        json: bool,
    },
    /// Copy a whole deployment between stores: a data directory (the embedded store) and a
    /// Qdrant server, in either direction (or two of either). Every point of every scope is
    /// copied with its vectors (nothing is re-embedded); re-running is safe (the same points
    /// are written over themselves). Then the target is verified: its point count equals
    /// the source's, and a sample of searches returns the same points on both. Progress on
    /// stderr, the JSON report on stdout.
    Migrate {
        /// The source: a data directory, or a Qdrant server gRPC URL (http:// or https://).
        #[arg(long)]
        from: String,
        /// The target: a data directory (created when missing), or a Qdrant server gRPC URL.
        #[arg(long)]
        to: String,
        /// The collection on a server side [default: --qdrant-collection, else cairn];
        /// `{dir}` becomes a digest of the data-directory side (else of --data-dir).
        #[arg(long)]
        collection: Option<String>,
        /// The source's collection, when it differs from --collection (server to server).
        #[arg(long)]
        from_collection: Option<String>,
        /// The target's collection, when it differs from --collection (server to server).
        #[arg(long)]
        to_collection: Option<String>,
        /// Points per page (one read and one write each).
        #[arg(long, default_value_t = cairn_service::migrate::DEFAULT_PAGE)]
        page: usize,
    },
    /// Back up the whole store into a new directory while it keeps serving: a consistent
    /// copy at one instant (every write acknowledged before the backup began is in it) plus
    /// a manifest. With --server, the running `cairn serve` at that URL takes it (key-less
    /// on loopback: the operator's); without, this process opens --data-dir (no server may
    /// hold it). The backup directory is a data directory of its own.
    Backup {
        /// The backup directory: new or empty, outside the data directory.
        #[arg(long)]
        to: PathBuf,
        /// The URL of a running `cairn serve` (e.g. http://127.0.0.1:7878) to back up.
        #[arg(long)]
        server: Option<String>,
    },
    /// Restore a backup into a new data directory (--data-dir) and verify it: the point
    /// count against the backup's manifest, and a recall sample searched on both with each
    /// sampled point read back. Fails (non-zero) when a check fails. The JSON report on
    /// stdout.
    Restore {
        /// The backup directory (`cairn backup --to`).
        #[arg(long)]
        from: PathBuf,
    },
    /// Benchmarks: figures and ratios, never pass/fail.
    Bench {
        #[command(subcommand)]
        which: bench::BenchCommand,
    },
    /// Retrieval-quality evaluation on public benchmarks.
    Eval {
        #[command(subcommand)]
        which: cli_eval::EvalCommand,
    },
    /// Internal: extract one document in an isolated worker process (bytes on stdin, reply
    /// on stdout; see `cairn_ingest::extract::isolate`). cairn starts it for each PDF.
    #[command(name = "extract-worker", hide = true)]
    ExtractWorker {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Command::ExtractWorker { args } = &cli.command {
        // Before anything else: the worker needs no configuration and no threads, and it
        // caps its own address space.
        return cairn_ingest::extract::isolate::worker_main(args);
    }
    let (app, filter) = match App::new(&cli).and_then(|app| {
        let filter = tracing_subscriber::EnvFilter::try_new(&app.config.log)
            .with_context(|| format!("configuration: log = {:?}", app.config.log))?;
        Ok((app, filter))
    }) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("error: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli, app)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// What every command runs with: the configuration, read once at start, and the extractor
/// every engine of this process uses.
pub(crate) struct App {
    pub config: cairn_config::Config,
    /// PDFs in `cairn extract-worker` children with the `extract.*` limits, so a hostile
    /// file costs only itself, never the server or the rest of a batch.
    extractor: cairn_ingest::extract::Extractor,
}

impl App {
    /// Loads the configuration: the file (`--config`, else `CAIRN_CONFIG`, else
    /// `./cairn.toml` when it exists), then the environment, then the flags.
    fn new(cli: &Cli) -> Result<App> {
        let env = |name: &str| std::env::var(name).ok();
        let named = cli.config.clone().or_else(|| {
            env(cairn_config::FILE_ENV)
                .filter(|v| !v.trim().is_empty())
                .map(PathBuf::from)
        });
        let path = match named {
            Some(p) => Some(p),
            None => {
                let default = PathBuf::from(cairn_config::DEFAULT_FILE);
                default.is_file().then_some(default)
            }
        };
        let text = path
            .as_ref()
            .map(|p| {
                std::fs::read_to_string(p)
                    .with_context(|| format!("reading the configuration file {}", p.display()))
            })
            .transpose()?;
        let flags = flags(cli);
        let config = cairn_config::Config::load(&cairn_config::Sources {
            file: path.as_deref().zip(text.as_deref()),
            env: &env,
            flags: &flags,
        })?;
        if let Some(spec) = &config.failpoints {
            cairn_models::failpoint::arm(spec);
        }
        let exe = std::env::current_exe().context("locating the cairn binary for extraction")?;
        let extractor = cairn_ingest::extract::Extractor::isolated(exe, config.extract.clone());
        Ok(App { config, extractor })
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.config.data_dir
    }

    /// The model configuration.
    pub fn embed(&self) -> &cairn_embed::EmbedConfig {
        &self.config.embed
    }

    /// Opens the engine on the configured data directory and store (blocking work off the
    /// runtime).
    pub async fn open_engine(&self) -> Result<Arc<Engine>> {
        let dir = self.config.data_dir.clone();
        let embed = self.config.embed.clone();
        let options = cairn_service::EngineOptions {
            extractor: Some(self.extractor.clone()),
            ..self.config.engine_options()?
        };
        let engine = tokio::task::spawn_blocking(move || Engine::open_with(&dir, &embed, options))
            .await
            .context("engine start-up task")??;
        Ok(Arc::new(engine))
    }

    /// The model alone, with workspaces of the evaluation harness on the configured store
    /// (a server gets one collection per workspace).
    pub async fn eval_env(&self, cache_dir: Option<PathBuf>) -> Result<cairn_eval::EvalEnv> {
        let env = cairn_eval::EvalEnv::open(self.config.embed.clone(), cache_dir).await?;
        let server = self.config.server(env.embedder.spec().dim)?;
        Ok(env.on_server(server))
    }

    /// The dimension of the configured model (loads it; nothing is embedded).
    pub async fn model_dim(&self) -> Result<usize> {
        let embed = self.config.embed.clone();
        Ok(tokio::task::spawn_blocking(move || {
            cairn_embed::Embedder::open(&embed, None).map(|e| e.spec().dim)
        })
        .await
        .context("model start-up task")??)
    }
}

/// The configuration keys the command line sets.
fn flags(cli: &Cli) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut set = |key: &'static str, value: Option<String>| {
        if let Some(v) = value {
            out.push((key, v));
        }
    };
    set(
        "data_dir",
        cli.data_dir.as_ref().map(|p| p.display().to_string()),
    );
    set("store.qdrant.url", cli.store.qdrant_url.clone());
    set("store.qdrant.api_key", cli.store.qdrant_api_key.clone());
    set(
        "store.qdrant.collection",
        cli.store.qdrant_collection.clone(),
    );
    if let Command::Serve {
        addr,
        api_keys,
        max_body,
        timeout,
        header_timeout,
        max_connections,
    } = &cli.command
    {
        set("serve.addr", addr.clone());
        set(
            "serve.api_keys_file",
            api_keys.as_ref().map(|p| p.display().to_string()),
        );
        set("serve.max_body_bytes", max_body.clone());
        set("serve.timeout_secs", timeout.clone());
        set("serve.header_timeout_secs", header_timeout.clone());
        set("serve.max_connections", max_connections.clone());
    }
    out
}

/// `cairn grants ...`.
#[derive(Debug, Subcommand)]
enum GrantsCommand {
    /// Issue (or re-issue, with a new key) a grant to an agent.
    Issue {
        /// The agent identity.
        #[arg(long = "for")]
        agent: String,
        /// Operations, comma-separated: recall, read, write_documents, write_messages,
        /// complete_turn, propose, decide_candidates, forget.
        #[arg(long, value_delimiter = ',')]
        ops: Vec<String>,
        /// A named set: proposer, assistant, trusted.
        #[arg(long)]
        preset: Option<String>,
        #[arg(long)]
        note: Option<String>,
        /// Pin the agent's Ed25519 public key (the JWK `x`, base64url): its requests must
        /// then be signed (HTTP Message Signatures).
        #[arg(long)]
        ed25519_x: Option<String>,
    },
    /// List the grants.
    List,
    /// Suspend an agent's grant.
    Suspend {
        #[arg(long = "for")]
        agent: String,
        #[arg(long)]
        note: Option<String>,
    },
    /// Revoke an agent's grant for good.
    Revoke {
        #[arg(long = "for")]
        agent: String,
        #[arg(long)]
        note: Option<String>,
    },
    /// Restore a suspended grant.
    Restore {
        #[arg(long = "for")]
        agent: String,
        #[arg(long)]
        note: Option<String>,
    },
}

async fn grants(engine: &Engine, scope: &Scope, action: GrantsCommand) -> Result<()> {
    use cairn_service::grants::{GrantChangeRequest, GrantRequest, StatusChange};
    let who = Principal::Local;
    fn word<T: serde::de::DeserializeOwned>(s: &str) -> serde_json::Result<T> {
        serde_json::from_value(serde_json::Value::String(s.trim().to_string()))
    }
    let change = |note: Option<String>| GrantChangeRequest {
        tenant: scope.tenant.clone(),
        user: scope.user.clone(),
        note,
    };
    let out = match action {
        GrantsCommand::Issue {
            agent,
            ops,
            preset,
            note,
            ed25519_x,
        } => {
            let operations = ops
                .iter()
                .filter(|o| !o.trim().is_empty())
                .map(|o| word(o).with_context(|| format!("unknown operation {o:?}")))
                .collect::<Result<Vec<_>>>()?;
            let preset = preset
                .map(|p| word(&p).with_context(|| format!("unknown preset {p:?}")))
                .transpose()?;
            let issued = engine
                .issue_grant(
                    &who,
                    GrantRequest {
                        tenant: scope.tenant.clone(),
                        user: scope.user.clone(),
                        agent,
                        operations,
                        preset,
                        note,
                        public_key: ed25519_x.map(|x| cairn_service::grants::PublicJwk {
                            kty: "OKP".into(),
                            crv: "Ed25519".into(),
                            x,
                        }),
                    },
                )
                .await?;
            serde_json::to_value(issued)?
        }
        GrantsCommand::List => {
            serde_json::to_value(engine.list_grants(&who, &scope.tenant, &scope.user).await?)?
        }
        GrantsCommand::Suspend { agent, note } => serde_json::to_value(
            engine
                .change_grant(&who, &agent, change(note), StatusChange::Suspend)
                .await?,
        )?,
        GrantsCommand::Revoke { agent, note } => serde_json::to_value(
            engine
                .change_grant(&who, &agent, change(note), StatusChange::Revoke)
                .await?,
        )?,
        GrantsCommand::Restore { agent, note } => serde_json::to_value(
            engine
                .change_grant(&who, &agent, change(note), StatusChange::Restore)
                .await?,
        )?,
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    engine.flush().await?;
    Ok(())
}

async fn run(cli: Cli, app: App) -> Result<std::process::ExitCode> {
    use std::process::ExitCode;
    match cli.command {
        Command::Bench { which } => bench::run(&app, which).await,
        Command::Eval { which } => cli_eval::run(&app, which).await,
        Command::Config { json } => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "file": app.config.file,
                        "settings": app.config.entries(),
                    }))?
                );
            } else {
                print!("{}", app.config.render());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::ExtractWorker { .. } => bail!("extract-worker runs before the async runtime"),
        Command::Mcp => {
            let engine = app.open_engine().await?;
            eprintln!(
                "cairn: MCP server on stdio (data dir {})",
                app.data_dir().display()
            );
            cairn_api::mcp::serve_stdio(Arc::clone(&engine))
                .await
                .context("MCP over stdio")?;
            engine.flush().await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Grants { action } => {
            let scope = cli.scope.scope()?;
            let engine = app.open_engine().await?;
            grants(&engine, &scope, action).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Entities { json, action } => {
            let scope = cli.scope.scope()?;
            let engine = app.open_engine().await?;
            knowledge::entities(&engine, &scope, json, action).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Facts { json, action } => {
            let scope = cli.scope.scope()?;
            let engine = app.open_engine().await?;
            knowledge::facts(&engine, &scope, json, action).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Prefs { json, action } => {
            let scope = cli.scope.scope()?;
            let engine = app.open_engine().await?;
            knowledge::prefs(&engine, &scope, json, action).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Traces { json, action } => {
            let scope = cli.scope.scope()?;
            let engine = app.open_engine().await?;
            let session = cli.scope.session.as_deref();
            knowledge::traces(&engine, &scope, session, json, action).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Forget {
            reference,
            hard,
            json,
        } => {
            let scope = cli.scope.scope()?;
            let engine = app.open_engine().await?;
            knowledge::forget(&engine, &scope, reference, hard, json).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate {
            from,
            to,
            collection,
            from_collection,
            to_collection,
            page,
        } => {
            migrate(
                &app,
                MigrateArgs {
                    from,
                    to,
                    collection,
                    from_collection,
                    to_collection,
                    page,
                },
            )
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Backup { to, server } => {
            backup(&app, &to, server.as_deref()).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Restore { from } => {
            restore(&app, &from).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::HashKey { key } => {
            println!("{}", cairn_models::ids::sha256_hex(key.as_bytes()));
            Ok(ExitCode::SUCCESS)
        }
        Command::TckBridge { addr, tenant, user } => tck::run(&app, addr, &tenant, &user).await,
        Command::Serve { .. } => {
            // The flags are in the configuration (`flags`).
            let serve = app.config.serve.clone();
            let addr = serve.addr;
            // Connections are open files: take the hard limit (Debian's default soft limit is
            // 1,024, which a burst of idle clients can exhaust).
            if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
                eprintln!("cairn: could not raise the open-file limit: {e}");
            }
            let spec = match (&serve.api_keys_file, &serve.api_keys) {
                (Some(path), _) => std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?,
                (None, Some(v)) => v.clone(),
                (None, None) => String::new(),
            };
            let auth = Auth::parse(&spec).map_err(anyhow::Error::msg)?;
            if !auth.enabled() && !addr.ip().is_loopback() {
                bail!("refusing to listen on {addr} without API keys: configure keys (--api-keys or CAIRN_API_KEYS) or use a loopback address");
            }
            let engine = app.open_engine().await?;
            // A server store that is unreachable, or holds vectors of another model, stops
            // the start here instead of failing the first requests.
            engine
                .check_store()
                .await
                .context("checking the store (--qdrant-url)")?;
            let backend = engine.backend();
            eprintln!(
                "cairn: store {} at {}{}",
                backend.kind,
                backend.location,
                backend
                    .collection
                    .map(|c| format!(", collection {c}"))
                    .unwrap_or_default()
            );
            let state = Arc::new(AppState {
                engine,
                auth: auth.clone(),
                metrics: Metrics::default(),
                config: ServerConfig {
                    max_body_bytes: serve.max_body_bytes,
                    request_timeout: serve.request_timeout,
                    header_read_timeout: serve.header_timeout,
                    max_connections: serve.max_connections,
                },
            });
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?;
            let local = listener.local_addr()?;
            if auth.enabled() {
                eprintln!("cairn: listening on http://{local} (API keys required)");
            } else {
                eprintln!("cairn: listening on http://{local} (no API keys configured: loopback only, every tenant open to local callers)");
            }
            let engine = Arc::clone(&state.engine);
            cairn_api::serve(listener, state, shutdown_signal()).await?;
            engine.flush().await?;
            eprintln!("cairn: stopped");
            Ok(ExitCode::SUCCESS)
        }
        Command::Ingest {
            paths,
            include,
            exclude,
            messages,
            beir,
            json,
        } => {
            let scope = cli.scope.scope()?;
            if paths.is_empty() && messages.is_none() && beir.is_none() {
                bail!(
                    "nothing to ingest: give files or directories, --messages FILE or --beir FILE"
                );
            }
            let engine = app.open_engine().await?;
            let mut failed = false;
            if let Some(file) = messages {
                let text = std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?;
                let msgs = parse_messages(&text)?;
                // Keyless lines keyed by content and occurrence (`KeylessMessages::ByContent`).
                let receipts = engine
                    .import_messages(&Principal::Local, &scope, msgs)
                    .await?;
                let created = receipts.iter().filter(|r| r.created).count();
                if json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&serde_json::json!({"messages": receipts}))?
                    );
                } else {
                    println!(
                        "messages: {} recorded, {} already stored",
                        created,
                        receipts.len() - created
                    );
                }
            }
            if !paths.is_empty() {
                let inputs = collect_files(&paths, &include, &exclude)?
                    .iter()
                    .map(|p| {
                        // Canonical absolute paths are the source keys: the same file is the
                        // same source whatever the working directory.
                        DocumentInput::file(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
                    })
                    .collect();
                failed |= ingest_inputs(&engine, &scope, inputs, json).await?;
            }
            if let Some(corpus) = beir {
                let inputs = cairn_ingest::beir::read_corpus(&corpus)?
                    .into_iter()
                    .map(|d| {
                        DocumentInput::text(
                            format!("beir:{}", d.id),
                            d.full_text(),
                            cairn_ingest::MediaType::Text,
                        )
                    })
                    .collect();
                failed |= ingest_inputs(&engine, &scope, inputs, json).await?;
            }
            engine.flush().await?;
            Ok(if failed {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Recall {
            query,
            budget,
            json,
        } => {
            let scope = cli.scope.scope()?;
            let engine = app.open_engine().await?;
            // The same service call as `POST /v1/turns/prepare`: one envelope, one set of
            // rules (query limits, turn id), whatever the door.
            let envelope = engine
                .prepare_turn(
                    &Principal::Local,
                    PrepareRequest {
                        scope,
                        user_message: query,
                        turn_id: None,
                        mode: TurnMode::Text,
                        token_budget: budget,
                        filters: Default::default(),
                    },
                )
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&envelope)?);
            } else {
                print!("{}", envelope.memory_pack.context_markdown);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Documents { json } => {
            let scope = cli.scope.scope()?;
            let engine = app.open_engine().await?;
            let docs = engine
                .list_documents(&Principal::Local, &scope.partition(), PageRequest::ALL)
                .await?
                .items;
            if json {
                println!("{}", serde_json::to_string_pretty(&docs)?);
            } else if docs.is_empty() {
                println!("no documents in {}", scope.partition().key());
            } else {
                println!(
                    "{:<34} {:>4} {:>6}  {:<20} SOURCE",
                    "DOC ID", "VER", "CHUNKS", "INGESTED"
                );
                for d in docs {
                    let when = chrono::DateTime::from_timestamp_millis(d.ingested_at)
                        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                        .unwrap_or_default();
                    println!(
                        "{:<34} {:>4} {:>6}  {:<20} {}",
                        d.doc_id, d.version, d.chunks, when, d.source
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { json } => {
            let scope = cli.scope.scope()?;
            let engine = app.open_engine().await?;
            let stats = engine.counts(&Principal::Local, &scope.partition()).await?;
            let total = engine.count_all().await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "scope": scope.partition(),
                        "counts": stats,
                        "all_scopes_points": total,
                    }))?
                );
            } else {
                println!("scope {}", scope.partition().key());
                println!("  documents {}", stats.documents);
                println!("  chunks    {}", stats.chunks);
                println!("  messages  {}", stats.messages);
                println!("  turns     {}", stats.turns);
                println!("  entities  {}", stats.entities);
                println!("  prefs     {}", stats.preferences);
                println!("  facts     {}", stats.facts);
                println!("  relations {}", stats.relationships);
                println!("  traces    {}", stats.traces);
                println!("all scopes: {total} points");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `cairn migrate`'s arguments.
/// `cairn backup`: through a running server (`--server`), or on the data directory.
async fn backup(app: &App, to: &Path, server: Option<&str>) -> Result<()> {
    let to = std::path::absolute(to).with_context(|| format!("{}", to.display()))?;
    let manifest = match server {
        Some(url) => {
            let url = format!("{}/v1/admin/backup", url.trim_end_matches('/'));
            eprintln!("backup: asking {url} to back up into {}", to.display());
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .into();
            let mut resp = agent
                .post(&url)
                .header("content-type", "application/json")
                .send(serde_json::json!({"to": to.display().to_string()}).to_string())
                .with_context(|| format!("POST {url}"))?;
            let status = resp.status().as_u16();
            let body = resp.body_mut().read_to_string().unwrap_or_default();
            if status == 504 {
                bail!(
                    "the server took longer than its request timeout; the backup carries on \
                     there and is complete when {} appears",
                    to.join(cairn_service::backup::MANIFEST).display()
                );
            }
            if status != 200 {
                bail!("backup refused ({status}): {body}");
            }
            serde_json::from_str::<serde_json::Value>(&body)?
        }
        None => {
            let engine = app.open_engine().await?;
            let started = Instant::now();
            let last = std::sync::Mutex::new(Instant::now());
            let progress = |p: cairn_store::BackupProgress| {
                if let Ok(mut last) = last.lock() {
                    if last.elapsed() >= Duration::from_secs(2) || p.copied == p.total {
                        *last = Instant::now();
                        let rate = p.copied as f64 / started.elapsed().as_secs_f64().max(1e-3);
                        eprintln!(
                            "backup: {}/{} points copied ({rate:.0}/s), {} writes replayed",
                            p.copied, p.total, p.replayed
                        );
                    }
                }
            };
            let manifest = engine.backup(&Principal::Local, &to, &progress).await?;
            engine.flush().await?;
            serde_json::to_value(manifest)?
        }
    };
    println!("{}", serde_json::to_string_pretty(&manifest)?);
    Ok(())
}

/// `cairn restore`: copies the backup into a new data directory and verifies it.
async fn restore(app: &App, from: &Path) -> Result<()> {
    let data_dir = app.data_dir();
    let dim = app.model_dim().await?;
    let started = Instant::now();
    let last = std::sync::Mutex::new(Instant::now());
    let progress = |p: cairn_service::migrate::CopyProgress| {
        if let Ok(mut last) = last.lock() {
            if last.elapsed() >= Duration::from_secs(2) || p.copied == p.total {
                *last = Instant::now();
                let rate = p.copied as f64 / started.elapsed().as_secs_f64().max(1e-3);
                eprintln!("restore: {}/{} points ({rate:.0}/s)", p.copied, p.total);
            }
        }
    };
    // `store.qdrant.url` (`--qdrant-url`): restore onto that server's collection.
    let server = app.config.server(dim)?;
    let target = match &server {
        Some(c) => format!("collection {} on {}", c.collection, c.url),
        None => data_dir.display().to_string(),
    };
    let report = cairn_service::backup::restore(from, data_dir, server, dim, &progress).await?;
    let sample = report
        .copy
        .as_ref()
        .map(|c| &c.sample)
        .or(report.sample.as_ref());
    eprintln!(
        "restore: {} points into {target}, verified (counts; recall sample {}/{})",
        report.points,
        sample.map_or(0, |s| s.matched),
        sample.map_or(0, |s| s.total)
    );
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

#[derive(Debug)]
struct MigrateArgs {
    from: String,
    to: String,
    collection: Option<String>,
    from_collection: Option<String>,
    to_collection: Option<String>,
    page: usize,
}

/// `cairn migrate`: opens both stores with the model's dimension, copies with a progress
/// display, prints the report (JSON) and fails when the verification does.
async fn migrate(app: &App, args: MigrateArgs) -> Result<()> {
    use cairn_service::migrate::{self, CopyProgress, Side};
    // `{dir}` in a collection name: the data-directory side, as `cairn --data-dir <it>`
    // would name its collection; else --data-dir.
    let dir_of = |arg: &str| (!Side::is_server(arg)).then(|| PathBuf::from(arg));
    let template_dir = dir_of(&args.from)
        .or_else(|| dir_of(&args.to))
        .unwrap_or_else(|| app.data_dir().to_path_buf());
    let qdrant = &app.config.store.qdrant;
    let side = |arg: &str, collection: Option<&String>| -> Result<Side> {
        if !Side::is_server(arg) {
            return Ok(Side::Embedded(PathBuf::from(arg)));
        }
        let url = arg.trim();
        // The configured server settings (key, shards, replication, consistency), then
        // this command's collection flags.
        let mut config = qdrant.server_config(url, 0, &template_dir)?;
        if let Some(name) = collection.or(args.collection.as_ref()) {
            config.set_collection(name, &template_dir)?;
        }
        Ok(Side::Server(config))
    };
    let from = side(&args.from, args.from_collection.as_ref())?;
    let to = side(&args.to, args.to_collection.as_ref())?;
    // The model gives the dense dimension (a new target is created with it, an existing
    // store is checked against it); nothing is embedded.
    let dim = app.model_dim().await?;
    let sync = app.config.store.sync;
    // The source first: a refused source creates no target.
    let source = migrate::open_source(&from, &to, dim, sync).await?;
    let target = migrate::open_target(&to, dim, sync).await?;
    let describe = |b: cairn_store::BackendInfo| {
        format!(
            "{} {}{}",
            b.kind,
            b.location,
            b.collection
                .map(|c| format!(" (collection {c})"))
                .unwrap_or_default()
        )
    };
    eprintln!(
        "migrate: {} -> {}",
        describe(source.backend()),
        describe(target.backend())
    );

    let started = Instant::now();
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} points · {msg} · ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    });
    let last_line = std::sync::Mutex::new(Instant::now());
    let progress = |p: CopyProgress| {
        let rate = p.copied as f64 / started.elapsed().as_secs_f64().max(1e-3);
        let msg = format!("{} pages · {rate:.0} points/s", p.pages);
        if let Some(bar) = &bar {
            bar.set_length(p.total);
            bar.set_position(p.copied);
            bar.set_message(msg);
        } else if let Ok(mut last) = last_line.lock() {
            if last.elapsed() >= Duration::from_secs(5) {
                *last = Instant::now();
                eprintln!("migrate: {}/{} points · {msg}", p.copied, p.total);
            }
        }
    };
    let report = migrate::copy(source.as_ref(), target.as_ref(), args.page, &progress).await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let report = report?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    eprintln!(
        "migrate: {} points copied in {:.1}s ({} pages); target {} points (source {}); recall sample {}/{} matched{}",
        report.points_copied,
        report.elapsed_ms as f64 / 1000.0,
        report.pages,
        report.counts.target_after,
        report.counts.source_after,
        report.sample.matched,
        report.sample.total,
        if report.index_built { "; vector index built" } else { "" },
    );
    report.check()?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("cairn: shutting down");
}

/// Files to ingest: named files always; directories walked for .txt/.md/.markdown/.pdf,
/// filtered by the include/exclude globs.
fn collect_files(
    paths: &[PathBuf],
    include: &[String],
    exclude: &[String],
) -> Result<Vec<PathBuf>> {
    let build = |globs: &[String]| -> Result<Option<globset::GlobSet>> {
        if globs.is_empty() {
            return Ok(None);
        }
        let mut b = globset::GlobSetBuilder::new();
        for g in globs {
            b.add(globset::Glob::new(g).with_context(|| format!("glob {g:?}"))?);
        }
        Ok(Some(b.build()?))
    };
    let inc = build(include)?;
    let exc = build(exclude)?;
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            for entry in walkdir::WalkDir::new(p).sort_by_file_name() {
                let entry = match entry {
                    Ok(e) => e,
                    Err(e) => {
                        eprintln!("warning: {e}");
                        continue;
                    }
                };
                if !entry.file_type().is_file() {
                    continue;
                }
                let path = entry.path();
                let name = path.to_string_lossy();
                if cairn_ingest::MediaType::from_path(&name).is_none() {
                    continue;
                }
                if inc.as_ref().is_some_and(|g| !g.is_match(path))
                    || exc.as_ref().is_some_and(|g| g.is_match(path))
                {
                    continue;
                }
                out.push(path.to_path_buf());
            }
        } else if !exc.as_ref().is_some_and(|g| g.is_match(p)) {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Ingests documents with a progress display and a summary. Returns whether any failed.
async fn ingest_inputs(
    engine: &Arc<Engine>,
    scope: &Scope,
    inputs: Vec<DocumentInput>,
    json: bool,
) -> Result<bool> {
    let total = inputs.len() as u64;
    let started = Instant::now();
    let chunks_written = Arc::new(AtomicU64::new(0));
    let chunks_planned = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let bar = if std::io::stderr().is_terminal() && !json {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} files · {msg} · ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(bar)
    } else {
        None
    };
    let progress: Arc<dyn Fn(Progress) + Send + Sync> = {
        let bar = bar.clone();
        let chunks_written = Arc::clone(&chunks_written);
        let chunks_planned = Arc::clone(&chunks_planned);
        let done = Arc::clone(&done);
        let last_line = Arc::new(std::sync::Mutex::new(Instant::now()));
        Arc::new(move |p: Progress| {
            match p {
                Progress::Chunked { chunks } => {
                    chunks_planned.fetch_add(chunks as u64, Ordering::Relaxed);
                }
                Progress::Written { chunks } => {
                    chunks_written.fetch_add(chunks as u64, Ordering::Relaxed);
                }
                Progress::Finished => {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            let written = chunks_written.load(Ordering::Relaxed);
            let rate = written as f64 / started.elapsed().as_secs_f64().max(1e-3);
            let msg = format!(
                "{written}/{} chunks · {rate:.1} chunks/s",
                chunks_planned.load(Ordering::Relaxed)
            );
            if let Some(bar) = &bar {
                bar.set_position(done.load(Ordering::Relaxed));
                bar.set_message(msg);
            } else if let Ok(mut last) = last_line.lock() {
                if last.elapsed() >= Duration::from_secs(5) {
                    *last = Instant::now();
                    eprintln!(
                        "ingest: {}/{total} files · {msg}",
                        done.load(Ordering::Relaxed)
                    );
                }
            }
        })
    };
    let batch = engine
        .ingest_batch(&Principal::Local, scope, inputs, progress)
        .await?;
    let outcomes = batch.outcomes;
    let written = batch.chunks;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let elapsed = started.elapsed();
    // The service built the HNSW index and merged segments after a large batch (the server
    // does the same in the background; one threshold for both, in the engine).
    if let Some(build) = batch.index_built {
        eprintln!(
            "ingest: vector index built in {:.1}s",
            build.took.as_secs_f64()
        );
    }

    let mut created = 0;
    let mut updated = 0;
    let mut unchanged = 0;
    let mut failures = Vec::new();
    let mut reports = Vec::new();
    for o in outcomes {
        match o.result {
            Ok(r) => {
                match r.status {
                    DocStatus::Created => created += 1,
                    DocStatus::Updated => updated += 1,
                    DocStatus::Unchanged => unchanged += 1,
                }
                for w in &r.warnings {
                    eprintln!("warning: {}: {w}", r.source);
                }
                reports.push(r);
            }
            Err(e) => failures.push((o.source, e)),
        }
    }
    if json {
        let out = serde_json::json!({
            "created": created,
            "updated": updated,
            "unchanged": unchanged,
            "failed": failures.len(),
            "chunks_written": written,
            "seconds": elapsed.as_secs_f64(),
            "documents": reports,
            "failures": failures.iter().map(|(s, e)| serde_json::json!({
                "source": s, "code": e.code(), "error": e.to_string()
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "ingested {} files in {:.1}s: {created} created, {updated} updated, {unchanged} unchanged, {} failed; {written} chunks written ({:.1} chunks/s)",
            total,
            elapsed.as_secs_f64(),
            failures.len(),
            written as f64 / elapsed.as_secs_f64().max(1e-3)
        );
        for (source, e) in &failures {
            println!("  failed: {source}: {e}");
        }
    }
    Ok(!failures.is_empty())
}
