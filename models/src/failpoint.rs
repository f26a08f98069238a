//! Named crash points for the crash-consistency tests.
//!
//! A failpoint is a named step of a write path ("after the chunks are stored, before the
//! registry flips"). When the process armed it ([`arm`]; the `cairn` binary arms what its
//! `failpoints` setting, `CAIRN_FAILPOINTS`, names), reaching it aborts the process at once — no destructor runs, no buffer is flushed — which is what a
//! `kill -9` at that instant would do. The tests start `cairn` with a failpoint set, let it
//! die there, restart it without, retry the same request and compare the final state with a
//! clean run's.
//!
//! Syntax: `name[@n][,name[@n]...]` — abort at the `n`-th time `name` is reached (default:
//! the first). Unarmed (the normal case), a failpoint costs one load of a `OnceLock`.
//!
//! This is the one piece of process control in `models`. It reads no environment: the
//! binary passes the specification in, once, at start.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

#[derive(Debug)]
struct Armed {
    /// name → (hit number that aborts, hits so far)
    points: HashMap<String, (u64, AtomicU64)>,
}

static ARMED: OnceLock<Armed> = OnceLock::new();

fn armed() -> Option<&'static Armed> {
    ARMED.get()
}

/// Arms the failpoints `spec` names (see the module docs for the syntax). Once per process,
/// before the first write: returns false, and changes nothing, when failpoints were already
/// armed or `spec` names none.
pub fn arm(spec: &str) -> bool {
    let points = parse(spec);
    if points.is_empty() {
        return false;
    }
    ARMED
        .set(Armed {
            points: points
                .into_iter()
                .map(|(name, n)| (name, (n, AtomicU64::new(0))))
                .collect(),
        })
        .is_ok()
}

fn parse(spec: &str) -> Vec<(String, u64)> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.split_once('@') {
            Some((name, n)) => (name.to_string(), n.parse().unwrap_or(1).max(1)),
            None => (s.to_string(), 1),
        })
        .collect()
}

/// Aborts the process if `name` is armed and this is the hit it names.
pub fn failpoint(name: &str) {
    let Some(armed) = armed() else { return };
    if let Some((at, hits)) = armed.points.get(name) {
        let n = hits.fetch_add(1, Ordering::SeqCst) + 1;
        if n == *at {
            eprintln!("cairn: failpoint {name} reached (hit {n}): aborting");
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_hit_numbers() {
        assert_eq!(
            parse("a, b@3 ,c@0,,d@x"),
            vec![
                ("a".to_string(), 1),
                ("b".to_string(), 3),
                ("c".to_string(), 1),
                ("d".to_string(), 1)
            ]
        );
    }

    #[test]
    fn unarmed_failpoint_returns() {
        // The test environment does not set CAIRN_FAILPOINTS for this name.
        failpoint("models.test.never-armed");
    }
}
