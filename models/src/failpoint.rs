//! Named crash points for the crash-consistency tests.
//!
//! A failpoint is a named step of a write path ("after the chunks are stored, before the
//! registry flips"). When the environment variable `CAIRN_FAILPOINTS` names it, reaching it
//! aborts the process at once — no destructor runs, no buffer is flushed — which is what a
//! `kill -9` at that instant would do. The tests start `cairn` with a failpoint set, let it
//! die there, restart it without, retry the same request and compare the final state with a
//! clean run's.
//!
//! Syntax: `CAIRN_FAILPOINTS=name[@n][,name[@n]...]` — abort at the `n`-th time `name` is
//! reached (default: the first). Unset (the normal case), a failpoint costs one relaxed
//! load of an already-initialized `OnceLock`.
//!
//! This is the one piece of process control in `models`; it reads the environment once and
//! does no I/O otherwise.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The environment variable that arms failpoints.
pub const ENV: &str = "CAIRN_FAILPOINTS";

#[derive(Debug)]
struct Armed {
    /// name → (hit number that aborts, hits so far)
    points: HashMap<String, (u64, AtomicU64)>,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var(ENV).ok()?;
            let points = parse(&spec);
            (!points.is_empty()).then_some(Armed {
                points: points
                    .into_iter()
                    .map(|(name, n)| (name, (n, AtomicU64::new(0))))
                    .collect(),
            })
        })
        .as_ref()
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
