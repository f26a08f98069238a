//! Prometheus metrics, kept by hand: request counts and latency histograms per route and
//! status, plus ingest and recall counters. Rendered in the text exposition format.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// Latency bucket upper bounds in seconds.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

#[derive(Debug, Default)]
struct Inner {
    requests: BTreeMap<(String, String, u16), u64>,
    latency: BTreeMap<(String, String), Histogram>,
    counters: BTreeMap<&'static str, u64>,
}

/// Process-wide metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn observe(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        let mut inner = self.lock();
        *inner
            .requests
            .entry((method.to_string(), route.to_string(), status))
            .or_default() += 1;
        let h = inner
            .latency
            .entry((method.to_string(), route.to_string()))
            .or_insert_with(|| Histogram {
                counts: vec![0; BUCKETS.len()],
                ..Default::default()
            });
        let secs = elapsed.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    /// Adds to a named counter (`cairn_<name>_total`).
    pub fn add(&self, name: &'static str, n: u64) {
        *self.lock().counters.entry(name).or_default() += n;
    }

    pub fn render(&self) -> String {
        let inner = self.lock();
        let mut out = String::new();
        out.push_str(
            "# HELP cairn_http_requests_total HTTP requests by method, route and status.\n",
        );
        out.push_str("# TYPE cairn_http_requests_total counter\n");
        for ((m, r, s), n) in &inner.requests {
            out.push_str(&format!(
                "cairn_http_requests_total{{method=\"{m}\",route=\"{r}\",status=\"{s}\"}} {n}\n"
            ));
        }
        out.push_str("# HELP cairn_http_request_duration_seconds Request latency.\n");
        out.push_str("# TYPE cairn_http_request_duration_seconds histogram\n");
        for ((m, r), h) in &inner.latency {
            for (b, c) in BUCKETS.iter().zip(&h.counts) {
                out.push_str(&format!(
                    "cairn_http_request_duration_seconds_bucket{{method=\"{m}\",route=\"{r}\",le=\"{b}\"}} {c}\n"
                ));
            }
            out.push_str(&format!(
                "cairn_http_request_duration_seconds_bucket{{method=\"{m}\",route=\"{r}\",le=\"+Inf\"}} {}\n",
                h.count
            ));
            out.push_str(&format!(
                "cairn_http_request_duration_seconds_sum{{method=\"{m}\",route=\"{r}\"}} {}\n",
                h.sum
            ));
            out.push_str(&format!(
                "cairn_http_request_duration_seconds_count{{method=\"{m}\",route=\"{r}\"}} {}\n",
                h.count
            ));
        }
        for (name, n) in &inner.counters {
            out.push_str(&format!(
                "# TYPE cairn_{name}_total counter\ncairn_{name}_total {n}\n"
            ));
        }
        out
    }
}
