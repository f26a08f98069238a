//! Run provenance (command, commit, date, machine) and writing reports to disk.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::{EvalError, Result};

/// Where and how a run was made.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    /// The command line, as typed (shell-quoted where needed).
    pub command: String,
    /// `git rev-parse HEAD`, with `-dirty` when tracked files differ from it.
    pub git_commit: String,
    /// UTC, RFC 3339.
    pub date: String,
    pub machine: Machine,
    /// The embedding model id (name + weights hash).
    pub model: String,
}

/// The machine a run was made on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Logical CPUs available to the process (`nproc`).
    pub nproc: usize,
    pub cpu: String,
    /// `MemTotal` in GiB (`free -g`).
    pub memory_gib: f64,
    pub os: String,
    /// `/proc/loadavg` (1, 5, 15 minutes) when the run started: other work on the machine
    /// slows ingest and inflates latencies.
    pub load_average: String,
}

fn quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:@+".contains(c))
    {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

fn git(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl RunInfo {
    /// Collects the provenance of the current process.
    pub fn collect(model: &str) -> Self {
        let mut args = std::env::args();
        let program = args
            .next()
            .map(|p| {
                Path::new(&p)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or(p)
            })
            .unwrap_or_else(|| "cairn".into());
        let command = std::iter::once(program)
            .chain(args)
            .map(|a| quote(&a))
            .collect::<Vec<_>>()
            .join(" ");
        let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
        let dirty =
            git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        RunInfo {
            command,
            git_commit: if dirty {
                format!("{commit}-dirty")
            } else {
                commit
            },
            date: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            machine: Machine::collect(),
            model: model.to_string(),
        }
    }

    /// The provenance block at the top of every Markdown report.
    pub fn markdown(&self) -> String {
        format!(
            "- command: `{}`\n- git commit: `{}`\n- date: {}\n- machine: {} CPUs (`nproc`), {:.0} GiB RAM (`free -g` total), {}, {}; load average at start {}\n- model: `{}`\n",
            self.command,
            self.git_commit,
            self.date,
            self.machine.nproc,
            self.machine.memory_gib,
            self.machine.cpu,
            self.machine.os,
            self.machine.load_average,
            self.model
        )
    }
}

impl Machine {
    pub fn collect() -> Self {
        let nproc = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib: f64 = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let os = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|r| format!("Linux {}", r.trim()))
            .unwrap_or_else(|_| std::env::consts::OS.to_string());
        let load_average = std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default();
        Machine {
            nproc,
            cpu,
            memory_gib: kib / (1024.0 * 1024.0),
            os,
            load_average,
        }
    }
}

/// Writes `text` to `dir/name`, creating `dir`. Returns the path written.
pub fn write_file(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| EvalError::io(dir, e))?;
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| EvalError::io(&path, e))?;
    Ok(path)
}

/// Pretty JSON of a report.
pub fn to_json<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string_pretty(value).map_err(|e| EvalError::Internal(format!("JSON: {e}")))
}

/// A file-name-safe form of a dataset or split name: ASCII alphanumerics, `-` and `_`
/// kept (lowercased), anything else becomes `-`.
pub fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

/// Formats a metric with three decimals, or "–" when absent.
pub fn f3(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{v:.3}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote("--mode"), "--mode");
        assert_eq!(quote("dense,bm25"), "dense,bm25");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(f3(Some(0.12345)), "0.123");
        assert_eq!(f3(None), "–");
        assert_eq!(sanitize("SciFact v1.0"), "scifact-v1-0");
    }
}
