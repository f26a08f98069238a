//! `cairn mcp`: the MCP server over stdio, as a desktop client runs it (the real binary, the
//! real engine and model). The client here speaks the stdio transport by hand (one JSON-RPC
//! message per line), which also checks that nothing but protocol reaches stdout. The rmcp
//! client runs against the same handler in `api/tests/api/mcp.rs`.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(120);

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: u64,
}

impl Server {
    fn start(data: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .arg("--data-dir")
            .arg(data)
            .arg("mcp")
            .env("CAIRN_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Server {
            child,
            stdin,
            lines,
            next_id: 0,
        }
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request and returns its response, skipping notifications. Every line on
    /// stdout must be a JSON-RPC message.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .lines
                .recv_timeout(WAIT)
                .unwrap_or_else(|e| panic!("{method}: no response ({e})"));
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON-RPC ({e}): {line}"));
            assert_eq!(message["jsonrpc"], "2.0", "{message}");
            if message["id"] == id {
                assert!(message.get("error").is_none(), "{method}: {message}");
                return message["result"].clone();
            }
        }
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
    }
}

#[test]
fn mcp_over_stdio_lists_tools_and_recalls() {
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::start(data.path());

    let init = server.request(
        "initialize",
        json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "cairn-cli-test", "version": "0"},
        }),
    );
    assert_eq!(init["serverInfo"]["name"], "cairn", "{init}");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");
    server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    let listed = server.request("tools/list", json!({}));
    let mut names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, cairn_api::mcp::TOOLS);

    let scope = json!({"tenant": "acme", "user": "alice"});
    let stored = server.call(
        "remember",
        json!({"scope": scope, "document": {
            "source": "wifi.txt",
            "text": "The guest wifi network is called Harbor-Guest and its password changes every Monday.",
        }}),
    );
    assert_ne!(stored["isError"], true, "{stored}");
    let doc_id = stored["structuredContent"]["document"]["doc_id"]
        .as_str()
        .unwrap()
        .to_string();

    let recalled = server.call(
        "recall",
        json!({"scope": scope, "query": "What is the guest wifi network called?"}),
    );
    assert_ne!(recalled["isError"], true, "{recalled}");
    let markdown = recalled["content"][0]["text"].as_str().unwrap();
    assert!(markdown.contains("Harbor-Guest"), "{markdown}");
    let cites = recalled["structuredContent"]["citations"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| {
            c["ref"]
                .as_str()
                .unwrap()
                .starts_with(&format!("doc:{doc_id}#"))
        });
    assert!(cites, "{recalled}");

    // A tool error carries the stable code.
    let failed = server.call(
        "forget",
        json!({"scope": scope, "ref": "doc:00000000000000000000000000000000"}),
    );
    assert_eq!(failed["isError"], true, "{failed}");
    assert!(
        failed["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("not_found: "),
        "{failed}"
    );

    // Closing stdin ends the server cleanly (it flushes the store first).
    drop(server.stdin.take());
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cairn mcp did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");

    // What it stored is there for the next process.
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--data-dir")
        .arg(data.path())
        .args(["--tenant", "acme", "--user", "alice", "documents", "--json"])
        .env("CAIRN_LOG", "error")
        .output()
        .unwrap();
    let docs: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(docs[0]["doc_id"], doc_id.as_str(), "{docs}");
}
