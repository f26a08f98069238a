//! Isolated extraction: a parser runs in a child process, so a crash, a hang or a memory
//! blow-up costs only the file being parsed.
//!
//! Why a process and not `catch_unwind`: `pdf-extract` recurses without bound on a Form
//! XObject that draws itself, and a stack overflow aborts the whole process (`fatal runtime
//! error: stack overflow`), as does a failed allocation; a parse can also loop or allocate
//! without end. None of these is a panic, so only a process boundary contains them. In the
//! server one hostile upload used to kill every request; in `cairn ingest` it lost the batch.
//!
//! # Protocol (one child per file)
//!
//! The parent runs `<program> <args…> extract-worker --media-type <type>
//! [--memory-bytes N] [--cpu-seconds N] [--max-output-bytes N]` ([`WorkerRequest`]), writes
//! the file's bytes on the child's stdin and closes it. The child ([`worker_main`]):
//!
//! 1. applies the limits to itself with `setrlimit` (`RLIMIT_AS` for memory, `RLIMIT_CPU`
//!    for CPU time) through the safe `rlimit` crate — the workspace forbids `unsafe`, so the
//!    parent cannot use `pre_exec`, and a limit set by the child on itself before it reads
//!    any input is just as binding;
//! 2. reads stdin, extracts in-process with [`super::extract`] (PDF still under
//!    `catch_unwind`, so an ordinary panic is a clean reply);
//! 3. writes [`REPLY_MARKER`] and one JSON [`WorkerReply`] on stdout and exits 0. Output
//!    before the marker (a library's stray prints) is ignored; JSON escapes newlines, so the
//!    marker cannot occur inside the reply.
//!
//! A file's own failure (malformed, empty) is a `failed` reply with exit status 0. A death
//! by signal is the parser crashing or hitting a limit; the parent tells which from the
//! signal (`SIGXCPU`: CPU time) and the child's stderr (Rust prints "has overflowed its
//! stack" or "memory allocation of N bytes failed" before it aborts). A non-zero exit status
//! is a broken worker (wrong program, bad arguments), not the file's fault: it is reported
//! as an internal error.
//!
//! The parent enforces the rest ([`WorkerLimits`]): a wall-clock limit (the child is
//! killed), a cap on the reply's size, and a bounded pool of concurrent children (a
//! semaphore). stdin, stdout and stderr are served by their own threads, so neither a large
//! input nor a large output can deadlock the pipes. [`IsolatedExtractor::extract`] blocks
//! its thread until the child ends: call it on the blocking pool (the ingest pipeline's
//! prepare stage already runs there), never on an async worker thread.
//!
//! # Which mode runs where
//!
//! [`crate::IngestConfig::extractor`] chooses. The library's default is
//! [`Extractor::InProcess`], because only a program that implements this protocol can be a
//! worker and a library cannot know one: in a test binary, `current_exe()` is the test
//! harness. The `cairn` binary passes `Isolated(current_exe())` to every engine it opens
//! (`cairn_service::EngineOptions::extractor`), so the server and `cairn ingest` isolate;
//! the evaluation harness reads no PDFs and extracts in-process.
//!
//! Library and integration tests without the `cairn` binary therefore extract in-process:
//! they must not feed hostile PDFs to the parser (one would abort the test binary). The
//! hostile-input corpus runs against the real binary in `cli/tests/cli/hostile.rs`; the
//! protocol and the limit handling are unit-tested below with `/bin/sh` as a stand-in
//! worker that sleeps, floods its pipes or kills itself with a signal.
//!
//! Limits are a [`WorkerLimits`] value; the `cairn` binary builds it from its `extract.*`
//! settings (wall clock 30 s, memory 1024 MiB, CPU 60 s, output 128 MiB, workers the number
//! of CPUs up to 4 by default).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{Extracted, MediaType};
use crate::IngestError;

/// The subcommand that puts a program in worker mode (`cairn extract-worker`).
pub const WORKER_COMMAND: &str = "extract-worker";

/// Precedes the JSON reply on the worker's stdout.
pub const REPLY_MARKER: &[u8] = b"\n--cairn-extract-reply-v1--\n";

/// How much of the child's stderr is kept for the error message (its tail).
const STDERR_KEEP: usize = 16 * 1024;

const MIB: u64 = 1024 * 1024;

/// How documents are extracted. See the module documentation for which mode runs where.
#[derive(Debug, Clone, Default)]
pub enum Extractor {
    /// In this process (PDF under `catch_unwind` only: a stack overflow or an allocation
    /// failure in the parser aborts the process). The library's default.
    #[default]
    InProcess,
    /// PDFs in a child process with limits; text and Markdown stay in-process (they are
    /// simple and already size-capped). Clones share one pool of worker slots.
    Isolated(Arc<IsolatedExtractor>),
}

impl Extractor {
    /// An isolated extractor that runs `program extract-worker …` for each PDF.
    pub fn isolated(program: impl Into<PathBuf>, limits: WorkerLimits) -> Self {
        Extractor::Isolated(Arc::new(IsolatedExtractor::new(program, limits)))
    }

    /// Extracts one document. Blocking (it may wait for a child process): call it on the
    /// blocking pool, never on an async worker thread.
    pub fn extract(
        &self,
        source: &str,
        bytes: &[u8],
        media_type: MediaType,
    ) -> Result<Extracted, IngestError> {
        match (self, media_type) {
            (Extractor::Isolated(worker), MediaType::Pdf) => {
                worker.extract(source, bytes, media_type)
            }
            _ => super::extract(source, bytes, media_type),
        }
    }
}

/// Limits of one extraction child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLimits {
    /// Wall-clock time from spawn; then the child is killed.
    pub timeout: Duration,
    /// Address-space limit the child sets on itself (`RLIMIT_AS`); `None`: no limit.
    pub memory_bytes: Option<u64>,
    /// CPU-time limit the child sets on itself (`RLIMIT_CPU`); `None`: no limit. A backstop
    /// for a child the parent cannot kill (the parent died); the default is twice the
    /// wall-clock limit so that the wall clock normally decides.
    pub cpu_seconds: Option<u64>,
    /// Largest reply (JSON, bytes) read from the child.
    pub max_output_bytes: u64,
    /// Children running at once (per [`IsolatedExtractor`]).
    pub max_workers: usize,
}

impl Default for WorkerLimits {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        WorkerLimits {
            timeout: Duration::from_secs(30),
            memory_bytes: Some(1024 * MIB),
            cpu_seconds: Some(60),
            max_output_bytes: 128 * MIB,
            max_workers: cpus.clamp(1, 4),
        }
    }
}

/// Runs extraction children: a program implementing [`WORKER_COMMAND`], its limits and a
/// pool of worker slots.
#[derive(Debug)]
pub struct IsolatedExtractor {
    program: PathBuf,
    args: Vec<OsString>,
    limits: WorkerLimits,
    slots: Slots,
}

impl IsolatedExtractor {
    pub fn new(program: impl Into<PathBuf>, limits: WorkerLimits) -> Self {
        let slots = Slots::new(limits.max_workers);
        IsolatedExtractor {
            program: program.into(),
            args: Vec::new(),
            limits,
            slots,
        }
    }

    /// Arguments placed before [`WORKER_COMMAND`] (a wrapper program, or a stand-in worker
    /// in tests).
    pub fn with_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    pub fn program(&self) -> &std::path::Path {
        &self.program
    }

    pub fn limits(&self) -> &WorkerLimits {
        &self.limits
    }

    /// Extracts one document in a child process. Blocking: see the module docs.
    pub fn extract(
        &self,
        source: &str,
        bytes: &[u8],
        media_type: MediaType,
    ) -> Result<Extracted, IngestError> {
        let request = WorkerRequest {
            media_type,
            memory_bytes: self.limits.memory_bytes,
            cpu_seconds: self.limits.cpu_seconds,
            max_output_bytes: Some(self.limits.max_output_bytes),
        };
        let _slot = self.slots.acquire();
        let run = self.run_child(bytes, &request).map_err(|e| {
            IngestError::Unavailable(format!(
                "cannot run the extraction worker {}: {e}",
                self.program.display()
            ))
        })?;
        self.interpret(source, media_type, run)
    }

    fn run_child(&self, bytes: &[u8], request: &WorkerRequest) -> std::io::Result<ChildRun> {
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .arg(WORKER_COMMAND)
            .args(request.to_args())
            // The child's own log lines would only add noise to the stderr tail we keep.
            .env("CAIRN_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let deadline = Instant::now() + self.limits.timeout;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let cap = self.limits.max_output_bytes;
        let overflow = AtomicBool::new(false);
        std::thread::scope(|s| {
            // Each pipe has its own thread: a child that writes a lot before reading all of
            // its input, or fills stderr, can never block the others.
            s.spawn(move || {
                if let Some(mut stdin) = stdin {
                    // A child that dies early closes the pipe: a broken pipe here is expected
                    // and the exit status tells the story.
                    let _ = stdin.write_all(bytes);
                }
            });
            let out = s.spawn(|| read_capped(stdout, cap, &overflow));
            let err = s.spawn(move || read_tail(stderr, STDERR_KEEP));
            let ended = wait_until(&mut child, deadline, &overflow);
            let stdout = out.join().unwrap_or_default();
            let stderr = err.join().unwrap_or_default();
            let mut ended = ended?;
            if overflow.load(Ordering::Acquire) {
                // Closing the pipe may have killed the child (SIGPIPE) before the wait loop
                // saw the flag: the cause is still the output's size.
                ended = Ended::OutputTooLarge;
            }
            Ok(ChildRun {
                ended,
                stdout,
                stderr,
            })
        })
    }

    fn interpret(
        &self,
        source: &str,
        media_type: MediaType,
        run: ChildRun,
    ) -> Result<Extracted, IngestError> {
        let failed = |reason: String| IngestError::Extraction {
            source_name: source.to_string(),
            reason,
        };
        let parser = parser_name(media_type);
        let status = match run.ended {
            Ended::TimedOut => {
                return Err(failed(format!(
                    "timed out after {} (the {parser} was stopped)",
                    human_duration(self.limits.timeout)
                )))
            }
            Ended::OutputTooLarge => {
                return Err(failed(format!(
                    "the extracted text exceeded the {} output limit",
                    human_bytes(self.limits.max_output_bytes)
                )))
            }
            Ended::Exited(status) => status,
        };
        let stderr = String::from_utf8_lossy(&run.stderr);
        if let Some(signal) = exit_signal(&status) {
            return Err(failed(crash_reason(parser, signal, &stderr, &self.limits)));
        }
        match status.code() {
            Some(0) => {}
            Some(101) => {
                return Err(failed(format!(
                    "the {parser} crashed (panic: {})",
                    last_line(&stderr)
                )))
            }
            code => {
                return Err(IngestError::Internal(format!(
                    "the extraction worker {} failed ({}): {}",
                    self.program.display(),
                    code.map_or("no exit status".to_string(), |c| format!("exit status {c}")),
                    last_line(&stderr)
                )))
            }
        }
        let reply = decode_reply(&run.stdout).map_err(|e| {
            IngestError::Internal(format!(
                "the extraction worker {} sent no readable reply: {e}",
                self.program.display()
            ))
        })?;
        reply.into_result(source, media_type)
    }
}

/// How a child ended.
#[derive(Debug)]
enum Ended {
    Exited(ExitStatus),
    TimedOut,
    OutputTooLarge,
}

#[derive(Debug)]
struct ChildRun {
    ended: Ended,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Waits for the child until `deadline`, killing it on time-out or when its output
/// overflowed. The child is always reaped before this returns.
fn wait_until(
    child: &mut std::process::Child,
    deadline: Instant,
    overflow: &AtomicBool,
) -> std::io::Result<Ended> {
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(Ended::Exited(status)),
            Ok(None) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        }
        let stop = if overflow.load(Ordering::Acquire) {
            Some(Ended::OutputTooLarge)
        } else if Instant::now() >= deadline {
            Some(Ended::TimedOut)
        } else {
            None
        };
        if let Some(ended) = stop {
            // The child may have exited between try_wait and kill; either way wait reaps it.
            let _ = child.kill();
            child.wait()?;
            return Ok(ended);
        }
        std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Reads up to `cap` bytes; past that, flags `overflow` and stops (closing the pipe).
fn read_capped(pipe: Option<impl Read>, cap: u64, overflow: &AtomicBool) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(pipe) = pipe {
        let mut limited = pipe.take(cap.saturating_add(1));
        if limited.read_to_end(&mut out).is_ok() && out.len() as u64 > cap {
            overflow.store(true, Ordering::Release);
            out.clear();
        }
    }
    out
}

/// Reads a pipe to its end, keeping the last `keep` bytes.
fn read_tail(pipe: Option<impl Read>, keep: usize) -> Vec<u8> {
    let mut tail = Vec::new();
    let Some(mut pipe) = pipe else {
        return tail;
    };
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 2 * keep {
                    tail.drain(..tail.len() - keep);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    if tail.len() > keep {
        tail.drain(..tail.len() - keep);
    }
    tail
}

/// A counting semaphore for blocking threads (the callers are on the blocking pool).
#[derive(Debug)]
struct Slots {
    max: usize,
    used: Mutex<usize>,
    freed: Condvar,
}

#[derive(Debug)]
struct SlotGuard<'a>(&'a Slots);

impl Slots {
    fn new(max: usize) -> Self {
        Slots {
            max: max.max(1),
            used: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    fn acquire(&self) -> SlotGuard<'_> {
        // A poisoned lock only means another thread panicked while holding the counter,
        // which is never left inconsistent (one increment or decrement).
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        while *used >= self.max {
            used = self
                .freed
                .wait(used)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *used += 1;
        SlotGuard(self)
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        let mut used = self.0.used.lock().unwrap_or_else(PoisonError::into_inner);
        *used = used.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

// ---------- the protocol ----------

/// What the parent asks of a worker (its command-line arguments after [`WORKER_COMMAND`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRequest {
    pub media_type: MediaType,
    pub memory_bytes: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub max_output_bytes: Option<u64>,
}

/// Worker arguments that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("unknown worker argument {0:?}")]
    UnknownArgument(String),
    #[error("worker argument {0} needs a value")]
    MissingValue(String),
    #[error("invalid value {value:?} for {arg}")]
    InvalidValue { arg: String, value: String },
    #[error("--media-type is required")]
    MissingMediaType,
    #[error("no reply marker in the worker's output")]
    NoReply,
    #[error("unreadable reply: {0}")]
    BadReply(String),
}

impl WorkerRequest {
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "--media-type".to_string(),
            self.media_type.as_str().to_string(),
        ];
        let mut opt = |name: &str, v: Option<u64>| {
            if let Some(v) = v {
                args.push(name.to_string());
                args.push(v.to_string());
            }
        };
        opt("--memory-bytes", self.memory_bytes);
        opt("--cpu-seconds", self.cpu_seconds);
        opt("--max-output-bytes", self.max_output_bytes);
        args
    }

    pub fn parse(args: &[String]) -> Result<Self, ProtocolError> {
        let mut media_type = None;
        let mut request = WorkerRequest {
            media_type: MediaType::Pdf,
            memory_bytes: None,
            cpu_seconds: None,
            max_output_bytes: None,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (arg.as_str(), None),
            };
            if !matches!(
                name,
                "--media-type" | "--memory-bytes" | "--cpu-seconds" | "--max-output-bytes"
            ) {
                return Err(ProtocolError::UnknownArgument(arg.clone()));
            }
            let value = match inline.or_else(|| it.next().cloned()) {
                Some(v) => v,
                None => return Err(ProtocolError::MissingValue(name.to_string())),
            };
            let invalid = || ProtocolError::InvalidValue {
                arg: name.to_string(),
                value: value.clone(),
            };
            let number = || value.parse::<u64>().map_err(|_| invalid());
            match name {
                "--media-type" => {
                    media_type = Some(MediaType::parse(&value).ok_or_else(invalid)?);
                }
                "--memory-bytes" => request.memory_bytes = Some(number()?),
                "--cpu-seconds" => request.cpu_seconds = Some(number()?),
                _ => request.max_output_bytes = Some(number()?),
            }
        }
        request.media_type = media_type.ok_or(ProtocolError::MissingMediaType)?;
        Ok(request)
    }
}

/// What went wrong with a file, as the worker reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    Extraction,
    Empty,
    Unsupported,
    Internal,
}

/// The worker's reply (JSON after [`REPLY_MARKER`] on stdout).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum WorkerReply {
    Ok {
        text: String,
        page_starts: Vec<usize>,
        warnings: Vec<String>,
    },
    Failed {
        kind: FailureKind,
        reason: String,
    },
}

impl WorkerReply {
    pub fn from_result(result: Result<Extracted, IngestError>) -> Self {
        match result {
            Ok(e) => WorkerReply::Ok {
                text: e.text,
                page_starts: e.page_starts,
                warnings: e.warnings,
            },
            Err(e) => {
                let (kind, reason) = match e {
                    IngestError::Extraction { reason, .. } => (FailureKind::Extraction, reason),
                    IngestError::UnsupportedMedia { reason, .. } => {
                        (FailureKind::Unsupported, reason)
                    }
                    IngestError::Empty { .. } => (FailureKind::Empty, String::new()),
                    other => (FailureKind::Internal, other.to_string()),
                };
                WorkerReply::Failed { kind, reason }
            }
        }
    }

    /// The reply as the result of extracting `source`.
    pub fn into_result(
        self,
        source: &str,
        media_type: MediaType,
    ) -> Result<Extracted, IngestError> {
        let source_name = source.to_string();
        match self {
            WorkerReply::Ok {
                text,
                page_starts,
                warnings,
            } => {
                if text.trim().is_empty() {
                    return Err(IngestError::Empty { source_name });
                }
                // Page starts index characters of `text` and must ascend: a reply that says
                // otherwise is not trusted for page citations.
                let chars = text.chars().count();
                if page_starts.windows(2).any(|w| w[0] > w[1])
                    || page_starts.last().is_some_and(|&s| s > chars)
                {
                    return Err(IngestError::Internal(format!(
                        "{source}: the extraction worker sent inconsistent page offsets"
                    )));
                }
                Ok(Extracted {
                    text,
                    media_type,
                    page_starts,
                    warnings,
                })
            }
            WorkerReply::Failed { kind, reason } => Err(match kind {
                FailureKind::Extraction => IngestError::Extraction {
                    source_name,
                    reason,
                },
                FailureKind::Unsupported => IngestError::UnsupportedMedia {
                    source_name,
                    reason,
                },
                FailureKind::Empty => IngestError::Empty { source_name },
                FailureKind::Internal => {
                    IngestError::Internal(format!("{source}: extraction worker: {reason}"))
                }
            }),
        }
    }
}

/// The worker's stdout: the marker, then the reply as JSON.
pub fn encode_reply(reply: &WorkerReply) -> Vec<u8> {
    let mut out = REPLY_MARKER.to_vec();
    // Serializing strings, numbers and enums cannot fail; an error would be a bug, and
    // the parent reports a missing reply as an internal error.
    if serde_json::to_writer(&mut out, reply).is_err() {
        return Vec::new();
    }
    out.push(b'\n');
    out
}

/// The reply in a worker's stdout (after the last marker).
pub fn decode_reply(stdout: &[u8]) -> Result<WorkerReply, ProtocolError> {
    let at = stdout
        .windows(REPLY_MARKER.len())
        .rposition(|w| w == REPLY_MARKER)
        .ok_or(ProtocolError::NoReply)?;
    serde_json::from_slice(&stdout[at + REPLY_MARKER.len()..])
        .map_err(|e| ProtocolError::BadReply(e.to_string()))
}

// ---------- the worker side ----------

/// The worker: `args` are those after [`WORKER_COMMAND`]. Reads the document on stdin and
/// writes the reply on stdout (see the module docs). Runs in its own process, before any
/// async runtime or thread pool starts (they would only add to the address space).
pub fn worker_main(args: &[String]) -> ExitCode {
    let request = match WorkerRequest::parse(args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{WORKER_COMMAND}: {e}");
            return ExitCode::from(64);
        }
    };
    let reply = match apply_limits(&request) {
        Err(e) => WorkerReply::Failed {
            kind: FailureKind::Internal,
            reason: format!("cannot apply resource limits: {e}"),
        },
        Ok(()) => {
            let mut bytes = Vec::new();
            match std::io::stdin().lock().read_to_end(&mut bytes) {
                Err(e) => WorkerReply::Failed {
                    kind: FailureKind::Internal,
                    reason: format!("cannot read the document from stdin: {e}"),
                },
                Ok(_) => {
                    WorkerReply::from_result(super::extract("input", &bytes, request.media_type))
                }
            }
        }
    };
    let mut out = encode_reply(&reply);
    if let Some(max) = request.max_output_bytes {
        if out.len() as u64 > max {
            out = encode_reply(&WorkerReply::Failed {
                kind: FailureKind::Extraction,
                reason: format!(
                    "the extracted text exceeded the {} output limit",
                    human_bytes(max)
                ),
            });
        }
    }
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(&out).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{WORKER_COMMAND}: cannot write the reply: {e}");
            ExitCode::from(74)
        }
    }
}

/// Lowers this process's own limits (never above the current hard limits, which an
/// unprivileged process cannot raise).
#[cfg(unix)]
fn apply_limits(request: &WorkerRequest) -> std::io::Result<()> {
    use rlimit::Resource;
    let set = |resource: Resource, soft: u64, hard: u64| -> std::io::Result<()> {
        let (_, current_hard) = rlimit::getrlimit(resource)?;
        rlimit::setrlimit(resource, soft.min(current_hard), hard.min(current_hard))
    };
    if let Some(bytes) = request.memory_bytes {
        set(Resource::AS, bytes, bytes)?;
    }
    if let Some(secs) = request.cpu_seconds {
        // SIGXCPU at the soft limit; SIGKILL one second later should it be ignored.
        set(Resource::CPU, secs, secs.saturating_add(1))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn apply_limits(_request: &WorkerRequest) -> std::io::Result<()> {
    // No rlimits here: the parent's wall-clock limit and output cap still apply.
    Ok(())
}

// ---------- messages ----------

fn parser_name(media_type: MediaType) -> &'static str {
    match media_type {
        MediaType::Pdf => "PDF parser",
        MediaType::Text | MediaType::Markdown => "text decoder",
    }
}

#[cfg(unix)]
fn exit_signal(status: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn exit_signal(_status: &ExitStatus) -> Option<i32> {
    None
}

#[cfg(unix)]
fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        other => return format!("signal {other}"),
    };
    name.to_string()
}

#[cfg(not(unix))]
fn signal_name(signal: i32) -> String {
    format!("signal {signal}")
}

/// Why a child that died by `signal` died, from the signal and its stderr.
fn crash_reason(parser: &str, signal: i32, stderr: &str, limits: &WorkerLimits) -> String {
    #[cfg(unix)]
    if signal == libc::SIGXCPU {
        return match limits.cpu_seconds {
            Some(s) => format!("exceeded the {s} s CPU-time limit"),
            None => "exceeded its CPU-time limit".to_string(),
        };
    }
    if stderr.contains("memory allocation of") && stderr.contains("failed") {
        return match limits.memory_bytes {
            Some(b) => format!("exceeded the {} memory limit", human_bytes(b)),
            None => format!("the {parser} ran out of memory"),
        };
    }
    let name = signal_name(signal);
    if stderr.contains("overflowed its stack") {
        return format!("the {parser} crashed ({name} / stack overflow)");
    }
    #[cfg(unix)]
    if signal == libc::SIGKILL {
        return format!(
            "the {parser} was killed ({name}: the hard CPU-time limit or the system ran out of memory)"
        );
    }
    format!("the {parser} crashed ({name})")
}

fn last_line(stderr: &str) -> String {
    let line = stderr
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no message");
    line.chars().take(300).collect()
}

/// `1 GiB`, `512 MiB`, `4 KiB`, `100 bytes`.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {unit}", n / size);
        }
    }
    for (size, unit) in UNITS {
        if n >= size {
            return format!("{:.1} {unit}", n as f64 / size as f64);
        }
    }
    format!("{n} bytes")
}

/// `30 s`, `0.5 s`.
fn human_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_through_arguments() {
        let full = WorkerRequest {
            media_type: MediaType::Pdf,
            memory_bytes: Some(1 << 30),
            cpu_seconds: Some(60),
            max_output_bytes: Some(128 << 20),
        };
        assert_eq!(WorkerRequest::parse(&full.to_args()), Ok(full));
        let bare = WorkerRequest {
            media_type: MediaType::Markdown,
            memory_bytes: None,
            cpu_seconds: None,
            max_output_bytes: None,
        };
        assert_eq!(bare.to_args(), ["--media-type", "text/markdown"]);
        assert_eq!(WorkerRequest::parse(&bare.to_args()), Ok(bare));
        let inline: Vec<String> = ["--media-type=application/pdf", "--cpu-seconds=5"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            WorkerRequest::parse(&inline).map(|r| r.cpu_seconds),
            Ok(Some(5))
        );
    }

    #[test]
    fn bad_requests_are_typed_errors() {
        let parse =
            |a: &[&str]| WorkerRequest::parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(parse(&[]), Err(ProtocolError::MissingMediaType));
        assert!(matches!(
            parse(&["--media-type", "image/png"]),
            Err(ProtocolError::InvalidValue { .. })
        ));
        assert!(matches!(
            parse(&["--media-type", "application/pdf", "--memory-bytes", "-1"]),
            Err(ProtocolError::InvalidValue { .. })
        ));
        assert!(matches!(
            parse(&["--media-type"]),
            Err(ProtocolError::MissingValue(_))
        ));
        assert!(matches!(
            parse(&["--media-type", "application/pdf", "--frobnicate", "1"]),
            Err(ProtocolError::UnknownArgument(_))
        ));
    }

    #[test]
    fn replies_round_trip_and_ignore_noise_before_the_marker() {
        let ok = WorkerReply::Ok {
            text: format!("page one\n{}\npage two \"quoted\"", "line\n".repeat(3)),
            page_starts: vec![0, 9],
            warnings: vec!["low text yield".into()],
        };
        let mut stdout = b"stray library output\n".to_vec();
        stdout.extend(encode_reply(&ok));
        assert_eq!(decode_reply(&stdout), Ok(ok.clone()));
        let failed = WorkerReply::Failed {
            kind: FailureKind::Extraction,
            reason: "malformed PDF: bad xref".into(),
        };
        assert_eq!(decode_reply(&encode_reply(&failed)), Ok(failed));
        assert_eq!(decode_reply(b"{}"), Err(ProtocolError::NoReply));
        let mut torn = encode_reply(&ok);
        torn.truncate(torn.len() / 2 + REPLY_MARKER.len());
        assert!(matches!(
            decode_reply(&torn),
            Err(ProtocolError::BadReply(_))
        ));
    }

    #[test]
    fn replies_map_to_results_with_the_source_name() {
        let e = WorkerReply::Failed {
            kind: FailureKind::Extraction,
            reason: "malformed PDF".into(),
        }
        .into_result("a.pdf", MediaType::Pdf);
        assert!(
            matches!(&e, Err(IngestError::Extraction { source_name, reason }) if source_name == "a.pdf" && reason == "malformed PDF")
        );
        let e = WorkerReply::Ok {
            text: " \n".into(),
            page_starts: vec![0],
            warnings: vec![],
        }
        .into_result("b.pdf", MediaType::Pdf);
        assert!(matches!(e, Err(IngestError::Empty { .. })));
        let e = WorkerReply::Ok {
            text: "abc".into(),
            page_starts: vec![2, 1],
            warnings: vec![],
        }
        .into_result("c.pdf", MediaType::Pdf);
        assert!(matches!(e, Err(IngestError::Internal(_))));
        // What the worker computes in-process survives the trip unchanged.
        let pdf = crate::fixtures::simple_pdf(&["First page text.", "Second page text."]);
        let direct = crate::extract::extract("d.pdf", &pdf, MediaType::Pdf).unwrap();
        let reply = WorkerReply::from_result(Ok(direct.clone()));
        let back = decode_reply(&encode_reply(&reply))
            .unwrap()
            .into_result("d.pdf", MediaType::Pdf)
            .unwrap();
        assert_eq!(back, direct);
        let empty = WorkerReply::from_result(Err(IngestError::Empty {
            source_name: "input".into(),
        }));
        assert!(matches!(
            empty.into_result("e.pdf", MediaType::Pdf),
            Err(IngestError::Empty { source_name }) if source_name == "e.pdf"
        ));
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(1 << 30), "1 GiB");
        assert_eq!(human_bytes(512 << 20), "512 MiB");
        assert_eq!(human_bytes(1536 << 20), "1536 MiB");
        assert_eq!(human_bytes(100), "100 bytes");
        assert_eq!(human_duration(Duration::from_secs(30)), "30 s");
        assert_eq!(human_duration(Duration::from_millis(500)), "0.5 s");
    }

    // ---------- limit handling, with /bin/sh standing in for the worker ----------
    // `sh -c SCRIPT sh extract-worker --media-type …`: the worker arguments become the
    // script's positional parameters and are ignored. `exec` keeps one process, so a kill
    // closes the pipes at once.

    fn sh(script: &str, limits: WorkerLimits) -> IsolatedExtractor {
        IsolatedExtractor::new("/bin/sh", limits).with_args(["-c", script, "sh"])
    }

    fn quick() -> WorkerLimits {
        WorkerLimits {
            timeout: Duration::from_secs(20),
            ..WorkerLimits::default()
        }
    }

    fn reason(r: Result<Extracted, IngestError>) -> String {
        match r {
            Err(IngestError::Extraction { reason, .. }) => reason,
            other => panic!("expected an extraction error, got {other:?}"),
        }
    }

    #[test]
    fn a_good_reply_is_the_result() {
        let reply = WorkerReply::Ok {
            text: "Hello from the worker.".into(),
            page_starts: vec![0],
            warnings: vec![],
        };
        let encoded = String::from_utf8(encode_reply(&reply)).unwrap();
        // The script reads all of its input (1 MiB) before answering.
        let script = format!("cat >/dev/null; printf '%s' '{encoded}'");
        let x = sh(&script, quick());
        let got = x
            .extract("a.pdf", &vec![b'x'; 1 << 20], MediaType::Pdf)
            .unwrap();
        assert_eq!(got.text, "Hello from the worker.");
        assert_eq!(got.media_type, MediaType::Pdf);
    }

    #[test]
    fn a_hung_worker_is_killed_at_the_time_limit() {
        let limits = WorkerLimits {
            timeout: Duration::from_millis(300),
            ..WorkerLimits::default()
        };
        let started = Instant::now();
        let r = reason(sh("exec sleep 30", limits).extract("h.pdf", b"%PDF", MediaType::Pdf));
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(r, "timed out after 0.3 s (the PDF parser was stopped)");
    }

    #[test]
    fn deaths_by_signal_are_named() {
        let cases = [
            (
                "echo \"thread 'main' has overflowed its stack\" >&2; kill -ABRT $$",
                "the PDF parser crashed (SIGABRT / stack overflow)",
            ),
            (
                "echo 'memory allocation of 1073741824 bytes failed' >&2; kill -ABRT $$",
                "exceeded the 1 GiB memory limit",
            ),
            ("kill -XCPU $$", "exceeded the 60 s CPU-time limit"),
            ("kill -SEGV $$", "the PDF parser crashed (SIGSEGV)"),
        ];
        for (script, want) in cases {
            let r = reason(sh(script, quick()).extract("s.pdf", b"%PDF", MediaType::Pdf));
            assert_eq!(r, want, "{script}");
        }
    }

    #[test]
    fn floods_do_not_deadlock_and_output_is_capped() {
        let limits = WorkerLimits {
            max_output_bytes: 1 << 20,
            ..quick()
        };
        // 64 MiB on stdout against a 1 MiB cap: stopped, not buffered, not deadlocked.
        let r = reason(
            sh("exec head -c 67108864 /dev/zero", limits.clone()).extract(
                "o.pdf",
                b"%PDF",
                MediaType::Pdf,
            ),
        );
        assert_eq!(r, "the extracted text exceeded the 1 MiB output limit");
        // 8 MiB on stderr while the parent still writes 8 MiB of input the child never reads.
        let e = sh("head -c 8388608 /dev/zero >&2; exit 3", limits).extract(
            "e.pdf",
            &vec![b'x'; 8 << 20],
            MediaType::Pdf,
        );
        assert!(
            matches!(&e, Err(IngestError::Internal(m)) if m.contains("exit status 3")),
            "{e:?}"
        );
    }

    #[test]
    fn a_missing_program_or_garbage_reply_is_not_blamed_on_the_file() {
        let x = IsolatedExtractor::new("/nonexistent/cairn", quick());
        assert!(matches!(
            x.extract("m.pdf", b"%PDF", MediaType::Pdf),
            Err(IngestError::Unavailable(_))
        ));
        let e = sh("echo not a reply", quick()).extract("g.pdf", b"%PDF", MediaType::Pdf);
        assert!(matches!(e, Err(IngestError::Internal(_))), "{e:?}");
    }

    #[test]
    fn text_stays_in_process_and_the_default_is_in_process() {
        let x = Extractor::Isolated(Arc::new(sh("exit 9", quick())));
        let e = x
            .extract("t.txt", b"plain text here", MediaType::Text)
            .unwrap();
        assert_eq!(e.text, "plain text here");
        assert!(matches!(Extractor::default(), Extractor::InProcess));
    }

    #[test]
    fn the_pool_bounds_concurrent_workers() {
        let slots = Slots::new(2);
        let active = std::sync::atomic::AtomicUsize::new(0);
        let peak = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..6 {
                s.spawn(|| {
                    let _slot = slots.acquire();
                    let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(30));
                    active.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        assert_eq!(peak.load(Ordering::SeqCst), 2);
    }
}
