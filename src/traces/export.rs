//! How spans leave herald: a bounded queue of herald's own between the spans' ends and one
//! export task, and the OTLP exporter's HTTP client, which is herald's delivery client (rustls,
//! the bundled roots plus `delivery.extra_ca_file`) without the SSRF guard (the collector is the
//! operator's own address, often on the host or the private network).
//!
//! Nothing here waits on the collector where a span ends: a span that finds the queue full is
//! dropped and counted, and so are the spans of a batch the collector did not take (after the
//! exporter's own retries within its timeout).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::header::HeaderName;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter, SpanProcessor};
use tokio::sync::mpsc;

use crate::metrics::Metrics;
use crate::outbound::client::{Client, Request as Outgoing};

/// Spans waiting for the export task, at most: past it, a span that ends is dropped.
pub const QUEUE: usize = 16_384;
/// Spans per export request, at most.
pub const BATCH: usize = 2048;
/// How long the export task gathers spans before it sends what it has.
pub const BATCH_DELAY: Duration = Duration::from_millis(200);
/// How long a stopping herald waits for the spans still queued to reach the collector.
pub const STOP_WAIT: Duration = Duration::from_secs(3);
/// The largest collector answer read.
pub(super) const ANSWER_LIMIT: usize = 64 * 1024;

/// The span processor: each span that ends goes into the queue, or is counted as dropped.
pub struct Queue {
    tx: mpsc::Sender<SpanData>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Queue")
    }
}

impl Queue {
    /// The queue and the task that exports what enters it until `stop` is sent (then what is
    /// queued goes out within [`STOP_WAIT`]).
    pub fn start<E: SpanExporter + 'static>(
        exporter: E,
        metrics: Arc<Metrics>,
    ) -> (
        Queue,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(export_loop(exporter, rx, stopped, metrics.clone()));
        (Queue { tx, metrics }, stop, task)
    }

    /// Whether a span that ends now would find room: when it would not (the collector is down
    /// or slow, and the queue filled), herald makes no span at all ([`super::Traces`]).
    pub fn room(&self) -> Room {
        Room(self.tx.clone())
    }
}

/// A look at the queue's room, kept by [`super::Traces`].
pub struct Room(mpsc::Sender<SpanData>);

impl Room {
    pub fn is_full(&self) -> bool {
        self.0.capacity() == 0
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if self.tx.try_send(span).is_err() {
            self.metrics
                .trace_spans_dropped
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    /// The export task ends with herald's stop ([`super::Traces::stop`]), not here: the SDK
    /// calls this from synchronous code, where waiting on the task could block a runtime thread.
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Waits for a first span, lets more gather for [`BATCH_DELAY`] (nothing wakes the task
/// meanwhile: a span that ends only enters the queue), then exports what is queued in batches
/// of at most [`BATCH`]; once `stop` comes, what is queued then goes out and the task ends.
async fn export_loop<E: SpanExporter>(
    exporter: E,
    mut rx: mpsc::Receiver<SpanData>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
    metrics: Arc<Metrics>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut warned: Option<std::time::Instant> = None;
    let mut stopping = false;
    while !stopping {
        tokio::select! {
            first = rx.recv() => match first {
                Some(s) => batch.push(s),
                None => break,
            },
            _ = &mut stop => stopping = true,
        }
        if !stopping {
            tokio::select! {
                _ = tokio::time::sleep(BATCH_DELAY) => {}
                _ = &mut stop => stopping = true,
            }
        }
        while let Ok(s) = rx.try_recv() {
            batch.push(s);
            if batch.len() == BATCH {
                send(&exporter, &mut batch, &metrics, &mut warned).await;
            }
        }
        if !batch.is_empty() {
            send(&exporter, &mut batch, &metrics, &mut warned).await;
        }
    }
}

/// Exports `batch` (emptied); its spans count as exported, or as dropped when the collector
/// did not take them (logged at most once a minute).
async fn send<E: SpanExporter>(
    exporter: &E,
    batch: &mut Vec<SpanData>,
    metrics: &Metrics,
    warned: &mut Option<std::time::Instant>,
) {
    let n = batch.len() as u64;
    match exporter.export(std::mem::take(batch)).await {
        Ok(()) => {
            metrics.trace_spans_exported.fetch_add(n, Ordering::Relaxed);
        }
        Err(e) => {
            metrics.trace_spans_dropped.fetch_add(n, Ordering::Relaxed);
            if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                *warned = Some(std::time::Instant::now());
                tracing::warn!(spans = n, error = %e, "the trace collector did not take spans; they are dropped (logged at most once a minute)");
            }
        }
    }
}

/// The exporter's HTTP client: herald's own.
pub struct Collector(pub Client);

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Collector")
    }
}

#[async_trait::async_trait]
impl HttpClient for Collector {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (head, body) = request.into_parts();
        let url = url::Url::parse(&head.uri.to_string())?;
        let headers: Vec<(HeaderName, hyper::header::HeaderValue)> = head
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let outcome = self
            .0
            .send(Outgoing {
                url,
                headers,
                body,
                identity: None,
            })
            .await;
        let Some(code) = outcome.http_status else {
            return Err(outcome
                .error
                .unwrap_or_else(|| "no answer from the collector".into())
                .into());
        };
        let mut answer = Response::builder().status(code);
        if let Some(after) = outcome.retry_after {
            answer = answer.header(hyper::header::RETRY_AFTER, after);
        }
        Ok(answer.body(Bytes::from(outcome.body))?)
    }
}
