//! Traces (docs/operations.md, "Traces"): OpenTelemetry spans over OTLP (HTTP/protobuf), off
//! unless `[telemetry] otlp_endpoint` or `OTEL_EXPORTER_OTLP_ENDPOINT` names a collector.
//!
//! - A request that creates events has a server span that continues the request's W3C
//!   `traceparent`; its context is what the events keep ([`RequestSpan::context`]). With traces
//!   off, the events keep the request's own context, so an endpoint that propagates the trace
//!   still joins the producer's.
//! - Every attempt has a client span, a child of the kept context whenever and wherever it runs
//!   ([`Traces::sending`]); a decision that sent nothing has an internal one
//!   ([`Traces::not_sent`]).
//! - Spans leave through a bounded queue ([`export`]): nothing waits on the collector.

mod export;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use hyper::HeaderMap;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status as SpanStatus, TraceContextExt, TraceFlags,
    TraceId, TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span, SpanExporter as _};
use opentelemetry_sdk::Resource;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::model::{Attempt, Delivery, Endpoint, EventMeta, Status};
use crate::outbound::client::{Client, ClientConfig, Phases};
use crate::policy::ssrf::Guard;
use crate::trace::TraceContext;

pub use export::{BATCH, BATCH_DELAY, QUEUE};

/// The path spans are posted to under the collector's base URL.
const TRACES_PATH: &str = "/v1/traces";
/// How long the exporter's client may take to connect to the collector.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an export may take (its retries too), unless `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`
/// or `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds) says otherwise, as the exporter reads them.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

fn export_timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|k| std::env::var(k).ok()?.trim().parse::<u64>().ok())
    .map_or(EXPORT_TIMEOUT, Duration::from_millis)
}

/// The spans' URL of a collector's base URL (`telemetry.otlp_endpoint`), or why it is not one.
pub fn collector_url(base: &str) -> Result<String, String> {
    // The errors never repeat the value: a URL may hold a credential.
    let url = url::Url::parse(base.trim()).map_err(|e| {
        format!("is not a URL ({e}); give the collector's base URL, e.g. http://127.0.0.1:4318")
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("is not an http:// or https:// URL with a host".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("has a query or a fragment; give the base URL only".into());
    }
    Ok(format!(
        "{}{TRACES_PATH}",
        url.as_str().trim_end_matches('/')
    ))
}

/// Whether the environment asks for traces: an OTLP endpoint is set, and neither
/// `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none` says otherwise.
fn environment_asks() -> bool {
    let var = |k: &str| std::env::var(k).ok().map(|v| v.trim().to_ascii_lowercase());
    if var("OTEL_SDK_DISABLED").as_deref() == Some("true")
        || var("OTEL_TRACES_EXPORTER").as_deref() == Some("none")
    {
        return false;
    }
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|k| var(k).is_some_and(|v| !v.is_empty()))
}

/// Traces: on (a tracer and its export task) or off.
#[derive(Clone, Default)]
pub struct Traces(Option<Arc<On>>);

struct On {
    tracer: SdkTracer,
    /// Kept alive for the tracer's sake.
    _provider: SdkTracerProvider,
    stop: Mutex<
        Option<(
            tokio::sync::oneshot::Sender<()>,
            tokio::task::JoinHandle<()>,
        )>,
    >,
    room: export::Room,
    metrics: Arc<Metrics>,
}

impl On {
    /// The tracer, unless the export queue is full (the collector is down or slow): then the
    /// span that would have been made is counted as dropped and none is made, so a collector
    /// that does not keep up costs the requests and attempts nothing. What the span's context
    /// would have been given is then what it would be with traces off.
    fn tracer(&self) -> Option<&SdkTracer> {
        if self.room.is_full() {
            self.metrics
                .trace_spans_dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return None;
        }
        Some(&self.tracer)
    }
}

impl Traces {
    /// No spans: requests' contexts are still kept with their events.
    pub fn off() -> Traces {
        Traces(None)
    }

    /// Traces as the config and the environment set them (off when neither names a
    /// collector). Must run inside the runtime: it starts the export task.
    pub fn start(config: &Config, metrics: &Arc<Metrics>) -> Result<Traces, String> {
        let url = match &config.telemetry.otlp_endpoint {
            Some(base) => Some(collector_url(base)?),
            None if environment_asks() => None,
            None => return Ok(Traces::off()),
        };
        let client = Client::new(
            ClientConfig {
                connect_timeout: CONNECT_TIMEOUT,
                timeout: export_timeout(),
                response_body_limit: export::ANSWER_LIMIT,
                allow_http: true,
                guard: Guard::new(
                    ["0.0.0.0/0", "::/0"]
                        .iter()
                        .filter_map(|c| c.parse().ok())
                        .collect(),
                ),
                proxy: None,
            },
            config.delivery.extra_ca_file.as_deref(),
        )
        .map_err(|e| e.to_string())?;
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(export::Collector(client))
            .with_protocol(Protocol::HttpBinary);
        if let Some(url) = &url {
            builder = builder.with_endpoint(url.clone());
        }
        let mut exporter = builder
            .build()
            .map_err(|e| format!("cannot set up the trace exporter: {e}"))?;
        let resource = resource();
        exporter.set_resource(&resource);
        let (queue, stop, task) = export::Queue::start(exporter, metrics.clone());
        let room = queue.room();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(queue)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer_with_scope(
            InstrumentationScope::builder("herald")
                .with_version(crate::VERSION)
                .build(),
        );
        // Without userinfo: the log never shows a credential.
        let shown = url
            .as_deref()
            .and_then(|u| url::Url::parse(u).ok())
            .map_or_else(
                || "from OTEL_EXPORTER_OTLP_*".to_string(),
                |u| shown_url(&u),
            );
        tracing::info!(collector = %shown, "traces on");
        Ok(Traces(Some(Arc::new(On {
            tracer,
            _provider: provider,
            stop: Mutex::new(Some((stop, task))),
            room,
            metrics: metrics.clone(),
        }))))
    }

    /// Sends the spans still queued, waiting at most a few seconds ([`export::STOP_WAIT`]).
    pub async fn stop(&self) {
        let Some(on) = &self.0 else { return };
        let taken = on.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((stop, task)) = taken {
            let _ = stop.send(());
            let _ = tokio::time::timeout(export::STOP_WAIT, task).await;
        }
    }

    /// The span of a request that creates events (`name`: its method and route), continuing
    /// the request's `traceparent` when it has a valid one.
    pub fn request(
        &self,
        name: &'static str,
        route: &'static str,
        headers: &HeaderMap,
    ) -> RequestSpan {
        let caller = request_context(headers);
        let Some(tracer) = self.0.as_ref().and_then(|on| on.tracer()) else {
            return RequestSpan {
                span: None,
                context: caller,
            };
        };
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("http.route", route),
            ])
            .start_with_context(tracer, &parent_of(caller.as_ref()));
        let context = Some(kept(span.span_context(), caller.and_then(|c| c.tracestate)));
        RequestSpan {
            span: Some(span),
            context,
        }
    }

    /// The client span of an attempt of `d` to `endpoint`, started now: a child of the event's
    /// kept context (a new trace for an event that kept none).
    pub fn sending(
        &self,
        event: &EventMeta,
        d: &Delivery,
        endpoint: &Endpoint,
        number: u32,
    ) -> AttemptSpan {
        let Some(tracer) = self.0.as_ref().and_then(|on| on.tracer()) else {
            return AttemptSpan {
                span: None,
                propagate: endpoint
                    .propagate_trace
                    .then(|| event.trace.clone())
                    .flatten(),
            };
        };
        let started = SystemTime::now();
        let mut span = tracer
            .span_builder("POST")
            .with_kind(SpanKind::Client)
            .with_start_time(started)
            .start_with_context(tracer, &parent_of(event.trace.as_ref()));
        if span.is_recording() {
            span.set_attributes(herald_attributes(event, d, number));
            span.set_attribute(KeyValue::new("http.request.method", "POST"));
            if let Ok(url) = url::Url::parse(&endpoint.url) {
                span.set_attribute(KeyValue::new("url.full", shown_url(&url)));
                if let Some(host) = url.host_str() {
                    span.set_attribute(KeyValue::new("server.address", host.to_string()));
                }
                if let Some(port) = url.port_or_known_default() {
                    span.set_attribute(KeyValue::new("server.port", i64::from(port)));
                }
            }
        }
        let propagate = endpoint.propagate_trace.then(|| {
            kept(
                span.span_context(),
                event.trace.as_ref().and_then(|t| t.tracestate.clone()),
            )
        });
        AttemptSpan {
            span: Some((span, started)),
            propagate,
        }
    }

    /// The internal span of an attempt that sent nothing (`attempt.status` says why).
    pub fn not_sent(&self, event: &EventMeta, d: &Delivery, attempt: &Attempt) {
        let Some(tracer) = self.0.as_ref().and_then(|on| on.tracer()) else {
            return;
        };
        let mut span = tracer
            .span_builder("herald.not_sent")
            .with_kind(SpanKind::Internal)
            .start_with_context(tracer, &parent_of(event.trace.as_ref()));
        if span.is_recording() {
            span.set_attributes(herald_attributes(event, d, attempt.number));
            span.set_attribute(KeyValue::new("herald.status", attempt.status.as_str()));
        }
        span.end();
    }
}

/// The span of a request that creates events, and the context its events keep.
pub struct RequestSpan {
    span: Option<Span>,
    context: Option<TraceContext>,
}

impl RequestSpan {
    /// What the request's events keep: the span's context (the request's own with traces off),
    /// with the request's `tracestate`.
    pub fn context(&self) -> Option<&TraceContext> {
        self.context.as_ref()
    }

    /// Ends the span with the answer's status.
    pub fn answered(self, status: u16) {
        let Some(mut span) = self.span else { return };
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if status >= 500 {
            span.set_status(SpanStatus::error(format!("answered {status}")));
        }
        span.end();
    }
}

/// An attempt's client span, from before its request to its outcome.
pub struct AttemptSpan {
    /// The span and when it started (none with traces off).
    span: Option<(Span, SystemTime)>,
    /// What the request carries as `traceparent` and `tracestate`: the span's context when the
    /// endpoint propagates the trace (the event's kept context with traces off).
    propagate: Option<TraceContext>,
}

impl AttemptSpan {
    pub fn propagated(&self) -> Option<&TraceContext> {
        self.propagate.as_ref()
    }

    /// Ends the span with the attempt's outcome, and the new connection's phases as events.
    pub fn sent(self, attempt: &Attempt, phases: Option<&Phases>) {
        let Some((mut span, started)) = self.span else {
            return;
        };
        if span.is_recording() {
            span.set_attribute(KeyValue::new("herald.status", attempt.status.as_str()));
            if let Some(code) = attempt.http_status {
                span.set_attribute(KeyValue::new("http.response.status_code", i64::from(code)));
            }
            if attempt.status != Status::Delivered {
                span.set_attribute(KeyValue::new("error.type", attempt.status.as_str()));
                span.set_status(SpanStatus::error(
                    attempt
                        .error
                        .clone()
                        .unwrap_or_else(|| attempt.status.as_str().to_string()),
                ));
            }
            if let Some(p) = phases {
                let mut at = started;
                for (name, took) in [("dns", p.dns), ("connect", p.connect), ("tls", p.tls)] {
                    if let Some(took) = took {
                        at += took;
                        span.add_event_with_timestamp(
                            name,
                            at,
                            vec![KeyValue::new(
                                "herald.duration_ms",
                                took.as_secs_f64() * 1000.0,
                            )],
                        );
                    }
                }
            }
        }
        span.end();
    }
}

/// The attributes every attempt's span has.
fn herald_attributes(event: &EventMeta, d: &Delivery, number: u32) -> Vec<KeyValue> {
    let mut kv = vec![
        KeyValue::new("herald.account_id", d.account_id.clone()),
        KeyValue::new("herald.event_id", event.id.clone()),
        KeyValue::new("herald.delivery_id", d.id.clone()),
        KeyValue::new("herald.attempt", i64::from(number)),
    ];
    if let Some(ep) = &d.endpoint_id {
        kv.push(KeyValue::new("herald.endpoint_id", ep.clone()));
    }
    kv
}

/// `url.full` as spans show it: without userinfo, query or fragment.
fn shown_url(url: &url::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

/// A request's `traceparent` and `tracestate` (several `tracestate` headers joined by `,`).
fn request_context(headers: &HeaderMap) -> Option<TraceContext> {
    let traceparent = headers.get("traceparent")?.to_str().ok()?;
    let mut states = headers
        .get_all("tracestate")
        .iter()
        .filter_map(|v| v.to_str().ok());
    let state: Option<Cow<'_, str>> = match (states.next(), states.next()) {
        (None, _) => None,
        (Some(one), None) => Some(Cow::Borrowed(one)),
        (Some(a), Some(b)) => {
            let mut all = format!("{a},{b}");
            for more in states {
                all.push(',');
                all.push_str(more);
            }
            Some(Cow::Owned(all))
        }
    };
    TraceContext::from_headers(Some(traceparent), state.as_deref())
}

/// A context to start spans under: the kept (remote) span, or none (a new trace).
fn parent_of(t: Option<&TraceContext>) -> Context {
    let Some(t) = t else {
        return Context::new();
    };
    let state = t
        .tracestate
        .as_deref()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_bytes(t.trace_id),
        SpanId::from_bytes(t.parent_id),
        TraceFlags::new(t.flags),
        true,
        state,
    ))
}

/// A span's context as kept and propagated, with the request's `tracestate`.
fn kept(sc: &SpanContext, tracestate: Option<String>) -> TraceContext {
    TraceContext {
        trace_id: sc.trace_id().to_bytes(),
        parent_id: sc.span_id().to_bytes(),
        flags: sc.trace_flags().to_u8(),
        tracestate,
    }
}

/// The resource spans carry: `service.name` (`herald` unless `OTEL_SERVICE_NAME` or
/// `OTEL_RESOURCE_ATTRIBUTES` names it), `service.version`, and what `OTEL_RESOURCE_ATTRIBUTES`
/// adds.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|v| !v.as_str().starts_with("unknown_service"));
    let mut b =
        Resource::builder().with_attribute(KeyValue::new("service.version", crate::VERSION));
    if !named {
        b = b.with_service_name("herald");
    }
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collectors_base_url_gets_the_traces_path_and_anything_else_is_refused() {
        assert_eq!(
            collector_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            collector_url("https://otel.example.com/base/").unwrap(),
            "https://otel.example.com/base/v1/traces"
        );
        for (bad, words) in [
            ("127.0.0.1:4318", "is not a URL"),
            ("ftp://x", "http:// or https://"),
            ("http://x/?k=1", "query"),
            ("http://u:s3cret@x/#f", "fragment"),
            ("nonsense", "is not a URL"),
        ] {
            let why = collector_url(bad).unwrap_err();
            assert!(
                why.contains(words) && !why.contains("s3cret"),
                "{bad}: {why}"
            );
        }
    }

    #[test]
    fn url_full_drops_userinfo_query_and_fragment() {
        let u = url::Url::parse("https://user:pw@hooks.example.com:8443/in/x?token=s3cret#top")
            .unwrap();
        assert_eq!(shown_url(&u), "https://hooks.example.com:8443/in/x");
    }

    #[test]
    fn a_requests_context_joins_its_tracestate_headers_and_ignores_an_invalid_parent() {
        let mut h = HeaderMap::new();
        h.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                .parse()
                .unwrap(),
        );
        h.append("tracestate", "a=1".parse().unwrap());
        h.append("tracestate", "b=2,c=3".parse().unwrap());
        let t = request_context(&h).unwrap();
        assert_eq!(t.tracestate.as_deref(), Some("a=1,b=2,c=3"));
        assert!(t.sampled());
        h.insert("traceparent", "00-zz-b7ad6b7169203331-01".parse().unwrap());
        assert_eq!(request_context(&h), None);
        assert_eq!(request_context(&HeaderMap::new()), None);
    }

    /// A stored context is the parent of the spans made under it: same trace, its span id as
    /// the parent, remote, its flags.
    #[test]
    fn a_kept_context_is_a_remote_parent_and_comes_back_as_kept() {
        let t = TraceContext::from_headers(
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"),
            Some("shop=7"),
        )
        .unwrap();
        let cx = parent_of(Some(&t));
        let sc = cx.span().span_context().clone();
        assert!(sc.is_remote() && !sc.is_sampled());
        assert_eq!(kept(&sc, t.tracestate.clone()), t);
        assert!(!parent_of(None).has_active_span());
    }
}
