//! Hostile inputs against the real `cairn` binary: a PDF whose Form XObject draws itself
//! (a stack overflow in the parser), mutually recursive XObjects, deeply nested arrays and
//! dictionaries, a compression bomb, truncated and random PDFs, empty files, invalid UTF-8
//! and a huge single line (corpus: `cairn_ingest::fixtures::hostile`).
//!
//! (a) `cairn serve`: each input uploaded with `POST /v1/documents/upload` gets its typed
//! answer, `/healthz` answers after each, and a document stored before is still listed and
//! recallable afterwards. (b) `cairn ingest dir/` with good files among the hostile ones:
//! exit status 2, every good file stored, every bad file listed with its reason.
//!
//! The extraction workers run with a 10 s time limit and a 512 MiB memory limit
//! (`CAIRN_EXTRACT_*`) so the run stays short; the bomb inflates to 1 GiB.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cairn_ingest::fixtures::{hostile, simple_pdf, Hostile};
use serde_json::{json, Value};

/// What the compression bomb inflates to.
const BOMB_BYTES: u64 = 1 << 30;

/// Worker limits for the test run (and quiet logs).
const ENV: [(&str, &str); 4] = [
    ("CAIRN_EXTRACT_TIMEOUT_SECS", "10"),
    ("CAIRN_EXTRACT_MEMORY_MB", "512"),
    ("CAIRN_EXTRACT_WORKERS", "2"),
    ("CAIRN_LOG", "error"),
];

/// What each hostile input must get.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Rejected with this code; the message contains one of these phrases.
    Rejected(&'static str, &'static [&'static str]),
    /// Decodable after all: stored, with a warning when `warned`.
    Stored { warned: bool },
}

fn expect(name: &str) -> Expect {
    const CRASHED: &[&str] = &["crashed", "stack overflow"];
    match name {
        "self-xobject" | "mutual-xobjects" => {
            Expect::Rejected("extraction_failed", &["(SIGABRT / stack overflow)"])
        }
        "nested-arrays" | "nested-dicts" => Expect::Rejected("extraction_failed", CRASHED),
        "zip-bomb" => Expect::Rejected("extraction_failed", &["memory limit", "timed out"]),
        "truncated" | "garbage" => Expect::Rejected("extraction_failed", &["malformed PDF"]),
        "empty-pdf" => Expect::Rejected("extraction_failed", &["no %PDF header"]),
        "empty-text" => Expect::Rejected("empty_document", &["no text"]),
        "invalid-utf8" => Expect::Stored { warned: true },
        "huge-line" => Expect::Stored { warned: false },
        other => panic!("no expectation for {other}"),
    }
}

fn corpus() -> &'static [Hostile] {
    static CORPUS: OnceLock<Vec<Hostile>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let t = Instant::now();
        let c = hostile(BOMB_BYTES);
        let bomb = c.iter().find(|h| h.name == "zip-bomb").unwrap();
        eprintln!(
            "hostile corpus: {} inputs in {:.1}s (the bomb: {} bytes inflating to {BOMB_BYTES})",
            c.len(),
            t.elapsed().as_secs_f64(),
            bomb.bytes.len()
        );
        c
    })
}

fn good_pdf() -> Vec<u8> {
    simple_pdf(&[
        "Expense policy.\nMeals on business trips are reimbursed up to 40 euros per day.",
        "Receipts must be uploaded within thirty days of the trip.",
    ])
}

// ---------- a real server ----------

struct Server {
    child: Child,
    base: String,
    agent: ureq::Agent,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// `cairn serve` on 127.0.0.1, port chosen by the OS and read back from its log line.
    fn start(data: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .arg("--data-dir")
            .arg(data)
            .args(["serve", "--addr", "127.0.0.1:0"])
            .envs(ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        {
            let log = Arc::clone(&log);
            // Drains stderr for the server's whole life, so it never blocks on logging.
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(rest) = line.split("listening on http://").nth(1) {
                        let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                        let _ = tx.send(addr);
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        let addr = rx
            .recv_timeout(Duration::from_secs(180))
            .unwrap_or_else(|_| panic!("server did not start: {:?}", log.lock().unwrap()));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        Server {
            child,
            base: format!("http://{addr}"),
            agent,
            log,
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn finish(resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Option<(u16, Value)> {
        let mut resp = resp.ok()?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().ok()?;
        Some((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    fn get(&self, path: &str) -> Option<(u16, Value)> {
        Self::finish(self.agent.get(format!("{}{path}", self.base)).call())
    }

    fn post_json(&self, path: &str, body: &Value) -> Option<(u16, Value)> {
        Self::finish(
            self.agent
                .post(format!("{}{path}", self.base))
                .header("content-type", "application/json")
                .send(body.to_string().as_bytes()),
        )
    }

    /// `None`: no HTTP answer at all (the connection died).
    fn upload(&self, file_name: &str, bytes: &[u8]) -> Option<(u16, Value)> {
        let boundary = "cairn-hostile-boundary-42";
        let mut body = Vec::new();
        for (name, value) in [("tenant", "acme"), ("user", "alice"), ("namespace", "kb")] {
            body.extend(
                format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                    .as_bytes(),
            );
        }
        body.extend(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{file_name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend(bytes);
        body.extend(format!("\r\n--{boundary}--\r\n").as_bytes());
        Self::finish(
            self.agent
                .post(format!("{}/v1/documents/upload", self.base))
                .header(
                    "content-type",
                    format!("multipart/form-data; boundary={boundary}"),
                )
                .send(&body[..]),
        )
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Checks one answer against the expectation; returns a complaint, if any.
fn check(h: &Hostile, status: u16, body: &Value) -> Option<String> {
    let code = body["error"]["code"].as_str().unwrap_or("");
    let message = body["error"]["message"].as_str().unwrap_or("");
    match expect(h.name) {
        Expect::Rejected(want, phrases) => {
            if !(400..500).contains(&status) || code != want {
                return Some(format!("{}: expected {want}, got {status} {body}", h.name));
            }
            if !phrases.iter().any(|p| message.contains(p)) {
                return Some(format!(
                    "{}: message {message:?} names none of {phrases:?}",
                    h.name
                ));
            }
        }
        Expect::Stored { warned } => {
            let warnings = body["warnings"].as_array().map_or(0, Vec::len);
            if status != 200 || (warned && warnings == 0) {
                return Some(format!(
                    "{}: expected stored (warned: {warned}), got {status} {body}",
                    h.name
                ));
            }
        }
    }
    None
}

#[test]
fn hostile_uploads_cost_only_themselves() {
    let corpus = corpus();
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::start(data.path());
    let scope = json!({"tenant": "acme", "user": "alice", "namespace": "kb"});

    let (s, report) = server.upload("expenses.pdf", &good_pdf()).unwrap();
    assert_eq!(s, 200, "{report}");
    let doc_id = report["doc_id"].as_str().unwrap().to_string();

    let (mut tried, mut crashes) = (0, 0);
    let mut complaints = Vec::new();
    for h in corpus {
        tried += 1;
        let started = Instant::now();
        let answer = server.upload(&h.file_name, &h.bytes);
        let healthy = server.alive()
            && server
                .get("/healthz")
                .is_some_and(|(s, v)| s == 200 && v["status"] == "ok");
        if !healthy {
            crashes += 1;
            eprintln!(
                "{}: the server went down; its log: {:?}",
                h.name,
                server.log.lock().unwrap()
            );
            server = Server::start(data.path());
            continue;
        }
        let Some((status, body)) = answer else {
            complaints.push(format!("{}: no HTTP answer", h.name));
            continue;
        };
        println!(
            "  {:<16} {:>9} bytes  {status} {:<18} {:>5.1}s  {}",
            h.name,
            h.bytes.len(),
            body["error"]["code"].as_str().unwrap_or("stored"),
            started.elapsed().as_secs_f64(),
            body["error"]["message"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("warnings: {}", body["warnings"]))
        );
        complaints.extend(check(h, status, &body));
    }

    // The document stored before is still there and recallable.
    let mut lost = 0;
    let (s, docs) = server
        .get("/v1/documents?tenant=acme&user=alice&namespace=kb")
        .unwrap();
    assert_eq!(s, 200, "{docs}");
    let listed = docs["documents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["doc_id"] == doc_id.as_str());
    let (s, pack) = server
        .post_json(
            "/v1/recall",
            &json!({"scope": scope, "query": "How much are meals on business trips reimbursed?"}),
        )
        .unwrap();
    assert_eq!(s, 200, "{pack}");
    let recalled = pack["citations"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["doc_id"] == doc_id.as_str());
    if !(listed && recalled) {
        lost += 1;
        eprintln!("the good document is gone: listed {listed}, recalled {recalled}: {pack}");
    }
    println!("hostile inputs tried: {tried}, server crashes: {crashes}, files lost: {lost}");
    assert_eq!((crashes, lost), (0, 0));
    assert!(complaints.is_empty(), "{complaints:#?}");
    assert!(server.alive());
}

fn cairn(data: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .envs(ENV)
        .output()
        .unwrap()
}

#[test]
fn cli_ingest_stores_the_good_files_among_hostile_ones() {
    let corpus = corpus();
    let data = tempfile::tempdir().unwrap();
    let docs = tempfile::tempdir().unwrap();
    let good = [
        (
            "guide.md",
            b"# Office guide\n\n## Kitchen\n\nThe kitchen on floor 3 has two coffee machines.\n"
                .to_vec(),
        ),
        (
            "wifi.txt",
            b"The guest wifi network is called Harbor-Guest; its password changes every Monday."
                .to_vec(),
        ),
        ("expenses.pdf", good_pdf()),
    ];
    for (name, bytes) in &good {
        std::fs::write(docs.path().join(name), bytes).unwrap();
    }
    for h in corpus {
        std::fs::write(docs.path().join(&h.file_name), &h.bytes).unwrap();
    }
    let dir = docs.path().to_str().unwrap();
    let started = Instant::now();
    let out = cairn(data.path(), &["ingest", dir]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "cairn ingest ({:.1}s):\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    let crashes = usize::from(out.status.code().is_none());
    assert_eq!(
        out.status.code(),
        Some(2),
        "failed files give exit status 2: {stdout}\n{stderr}"
    );

    // Every bad file is listed with its reason.
    let mut complaints = Vec::new();
    for h in corpus {
        let path = std::fs::canonicalize(docs.path().join(&h.file_name)).unwrap();
        let line = stdout
            .lines()
            .find(|l| l.starts_with("  failed: ") && l.contains(path.to_str().unwrap()));
        match (expect(h.name), line) {
            (Expect::Rejected(_, phrases), Some(line)) => {
                if !phrases.iter().any(|p| line.contains(p)) {
                    complaints.push(format!("{}: {line:?} names none of {phrases:?}", h.name));
                }
            }
            (Expect::Rejected(..), None) => {
                complaints.push(format!("{}: not listed as failed", h.name))
            }
            (Expect::Stored { .. }, Some(line)) => {
                complaints.push(format!("{}: should be stored: {line}", h.name))
            }
            (Expect::Stored { .. }, None) => {}
        }
    }

    // Every good file is stored.
    let out = cairn(data.path(), &["documents", "--json"]);
    assert!(out.status.success());
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let sources: Vec<&str> = listed
        .iter()
        .map(|d| d["source"].as_str().unwrap())
        .collect();
    let mut lost = 0;
    for (name, _) in &good {
        let path = std::fs::canonicalize(docs.path().join(name)).unwrap();
        if !sources.contains(&path.to_str().unwrap()) {
            lost += 1;
            eprintln!("{name} was not stored: {sources:?}");
        }
    }
    println!(
        "hostile inputs tried: {}, ingest crashes: {crashes}, files lost: {lost}",
        corpus.len()
    );
    assert_eq!((crashes, lost), (0, 0));
    assert!(complaints.is_empty(), "{complaints:#?}\n{stdout}");
}
