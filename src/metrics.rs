//! Prometheus metrics, kept in atomics and rendered in the text exposition format at
//! `GET /metrics`. Names follow Prometheus conventions: `herald_` prefix, `_total` counters,
//! `_seconds` histograms, and only bounded labels (`status`, `state`; never an id).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::histogram::{Histogram, LATENCY_BUCKETS};
use crate::model::Status;
use crate::store::StoreMetrics;

/// What became of a failure alert (docs/operations.md, "Failure alerts"): `herald_alerts_total`'s
/// `result` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertResult {
    /// Handed to the SMTP server.
    Sent,
    /// A try failed; another follows.
    Retried,
    /// Every try failed (or the store could not say whom to mail): given up.
    Failed,
    /// The alert queue was full: dropped before it was decided.
    Dropped,
    /// A failing mail not sent: within `alerts.min_interval` of the last one.
    Suppressed,
}

impl AlertResult {
    pub const ALL: [AlertResult; 5] = [
        AlertResult::Sent,
        AlertResult::Retried,
        AlertResult::Failed,
        AlertResult::Dropped,
        AlertResult::Suppressed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AlertResult::Sent => "sent",
            AlertResult::Retried => "retried",
            AlertResult::Failed => "failed",
            AlertResult::Dropped => "dropped",
            AlertResult::Suppressed => "suppressed",
        }
    }
}

/// Every metric herald exports.
pub struct Metrics {
    /// What the store counts itself: events ingested, its commits and their fsyncs.
    pub store: Arc<StoreMetrics>,
    attempts: [AtomicU64; Status::ALL.len()],
    pub attempt_duration: Histogram,
    pub ingest_to_first_attempt: Histogram,
    pub breaker_openings: AtomicU64,
    pub quota_check_failures: AtomicU64,
    alerts: [AtomicU64; AlertResult::ALL.len()],
    /// Spans the collector took, and spans dropped (the queue was full, or the collector did
    /// not take them): docs/operations.md, "Traces".
    pub trace_spans_exported: AtomicU64,
    pub trace_spans_dropped: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            store: Arc::default(),
            attempts: std::array::from_fn(|_| AtomicU64::new(0)),
            attempt_duration: Histogram::new(&LATENCY_BUCKETS),
            ingest_to_first_attempt: Histogram::new(&LATENCY_BUCKETS),
            breaker_openings: AtomicU64::new(0),
            quota_check_failures: AtomicU64::new(0),
            alerts: std::array::from_fn(|_| AtomicU64::new(0)),
            trace_spans_exported: AtomicU64::new(0),
            trace_spans_dropped: AtomicU64::new(0),
        }
    }
}

/// Gauges read at scrape time from the parts that own them.
pub struct Gauges {
    pub deliveries_by_state: Vec<(&'static str, i64)>,
    pub due: usize,
    pub in_flight: usize,
    pub storage_bytes: u64,
}

impl Metrics {
    pub fn attempt(&self, status: Status) {
        self.attempts[status as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn attempts(&self, status: Status) -> u64 {
        self.attempts[status as usize].load(Ordering::Relaxed)
    }

    pub fn alert(&self, result: AlertResult) {
        self.alerts[result as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn alerts(&self, result: AlertResult) -> u64 {
        self.alerts[result as usize].load(Ordering::Relaxed)
    }

    /// The text exposition format (version 0.0.4).
    pub fn render(&self, g: &Gauges) -> String {
        let mut out = String::with_capacity(8 * 1024);
        self.render_deliveries(&mut out);
        render_gauges(&mut out, g);
        self.render_failures(&mut out);
        self.render_store(&mut out);
        out
    }

    /// Events ingested, attempts by status and their timings.
    fn render_deliveries(&self, out: &mut String) {
        counter(
            out,
            "herald_events_ingested_total",
            "Events acknowledged (stored durably) at ingest.",
            self.store.events_ingested.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP herald_attempts_total Delivery attempts by status, sent or not.\n\
             # TYPE herald_attempts_total counter"
        );
        for s in Status::ALL {
            let _ = writeln!(
                out,
                "herald_attempts_total{{status=\"{}\"}} {}",
                s.as_str(),
                self.attempts(s)
            );
        }
        self.attempt_duration.render(
            out,
            "herald_attempt_duration_seconds",
            "Duration of sent attempts, connect to response.",
        );
        self.ingest_to_first_attempt.render(
            out,
            "herald_ingest_to_first_attempt_seconds",
            "Time from ingest to a delivery's first attempt.",
        );
    }

    /// Breakers opened, quota checks failed open, alert mails by result.
    fn render_failures(&self, out: &mut String) {
        counter(
            out,
            "herald_breaker_openings_total",
            "Times an endpoint's circuit breaker opened.",
            self.breaker_openings.load(Ordering::Relaxed),
        );
        counter(
            out,
            "herald_quota_check_failures_total",
            "Quota checks that failed on a storage error and were allowed (fail open).",
            self.quota_check_failures.load(Ordering::Relaxed),
        );
        counter(
            out,
            "herald_trace_spans_exported_total",
            "Spans the trace collector took.",
            self.trace_spans_exported.load(Ordering::Relaxed),
        );
        counter(
            out,
            "herald_trace_spans_dropped_total",
            "Spans dropped: the export queue was full, or the trace collector did not take them.",
            self.trace_spans_dropped.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP herald_alerts_total Failure alert mails by result (sent, retried, failed, \
             dropped, suppressed).\n# TYPE herald_alerts_total counter"
        );
        for r in AlertResult::ALL {
            let _ = writeln!(
                out,
                "herald_alerts_total{{result=\"{}\"}} {}",
                r.as_str(),
                self.alerts(r)
            );
        }
    }

    /// The store's commits and their syncs.
    fn render_store(&self, out: &mut String) {
        self.store.commit_batch_size.render(
            out,
            "herald_commit_batch_size",
            "Events acknowledged by one group commit (one fsync).",
        );
        self.store.fsync_duration.render(
            out,
            "herald_fsync_duration_seconds",
            "Duration of a group commit's flush and fsync.",
        );
    }
}

/// Deliveries by state, the due index, attempts in flight and the store's size.
fn render_gauges(out: &mut String, g: &Gauges) {
    let _ = writeln!(
        out,
        "# HELP herald_deliveries Deliveries by state (the queue is `pending`).\n\
         # TYPE herald_deliveries gauge"
    );
    for (state, n) in &g.deliveries_by_state {
        let _ = writeln!(out, "herald_deliveries{{state=\"{state}\"}} {n}");
    }
    gauge(
        out,
        "herald_due_deliveries",
        "Pending deliveries in the in-memory due index.",
        g.due as u64,
    );
    gauge(
        out,
        "herald_in_flight_attempts",
        "Attempts running now.",
        g.in_flight as u64,
    );
    gauge(
        out,
        "herald_storage_bytes",
        "Size of the data directory's store on disk.",
        g.storage_bytes,
    );
}

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
    );
}

fn gauge(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.store.fsync_duration.observe(0.003);
        m.store.fsync_duration.observe(0.003);
        m.store.fsync_duration.observe(7.0);
        let text = m.render(&Gauges {
            deliveries_by_state: vec![("pending", 2)],
            due: 1,
            in_flight: 0,
            storage_bytes: 10,
        });
        assert!(text.contains("herald_fsync_duration_seconds_bucket{le=\"0.0025\"} 0\n"));
        assert!(text.contains("herald_fsync_duration_seconds_bucket{le=\"0.005\"} 2\n"));
        assert!(text.contains("herald_fsync_duration_seconds_bucket{le=\"5\"} 2\n"));
        assert!(text.contains("herald_fsync_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("herald_fsync_duration_seconds_count 3\n"));
        assert!(text.contains("herald_deliveries{state=\"pending\"} 2\n"));
    }
}
