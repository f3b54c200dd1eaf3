//! An OTLP/HTTP trace collector for tests: a real HTTP server that takes what herald posts to
//! `/v1/traces` and reads it with the official protobuf definitions (the `opentelemetry-proto`
//! crate), and, to check the wire format with an implementation that is not Rust's,
//! `tests/tools/otlp_read.py` (PyPI's `opentelemetry-proto`).

use std::collections::BTreeMap;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;
use serde_json::{json, Value};

use super::{behaviour, Receiver, Reply};

/// One span as the collector received it.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenSpan {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    /// `SPAN_KIND_SERVER`, `SPAN_KIND_CLIENT`, `SPAN_KIND_INTERNAL`...
    pub kind: String,
    pub attributes: BTreeMap<String, Value>,
    pub events: Vec<String>,
    /// 0 unset, 1 ok, 2 error.
    pub status: i32,
    pub resource: BTreeMap<String, Value>,
    pub scope: String,
}

impl SeenSpan {
    pub fn attr(&self, key: &str) -> &Value {
        self.attributes.get(key).unwrap_or(&Value::Null)
    }

    /// The span as `otlp_read.py` prints it (without the times).
    fn as_json(&self) -> Value {
        json!({
            "trace_id": self.trace_id, "span_id": self.span_id,
            "parent_span_id": self.parent_span_id, "name": self.name, "kind": self.kind,
            "attributes": self.attributes, "events": self.events, "status": self.status,
            "resource": self.resource, "scope": self.scope,
        })
    }
}

/// The collector: answers every export `200` (or as the test says) and keeps what came.
pub struct Collector {
    pub receiver: Receiver,
}

impl Collector {
    pub fn start() -> Collector {
        Collector {
            receiver: Receiver::http(behaviour(|_, _| {
                Reply::status(200).with_header("content-type", "application/x-protobuf")
            })),
        }
    }

    /// The base URL herald's `telemetry.otlp_endpoint` names.
    pub fn base_url(&self) -> String {
        self.receiver.url("")
    }

    /// The `[telemetry]` table pointing herald at this collector.
    pub fn toml(&self) -> String {
        format!(
            "[telemetry]\notlp_endpoint = {}\n",
            super::toml_string(&self.base_url())
        )
    }

    /// Every span received so far, in arrival order. Panics on a request that is not an OTLP
    /// export of protobuf to `/v1/traces`.
    pub fn spans(&self) -> Vec<SeenSpan> {
        let mut out = Vec::new();
        for r in self.receiver.requests() {
            assert_eq!(r.method, "POST");
            assert_eq!(r.path, "/v1/traces", "spans go to /v1/traces");
            assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
            let req = ExportTraceServiceRequest::decode(r.body.as_ref())
                .unwrap_or_else(|e| panic!("not an ExportTraceServiceRequest: {e}"));
            out.extend(read(&req));
        }
        out
    }

    /// Waits until the spans received satisfy `done`; then all of them.
    pub async fn wait(
        &self,
        deadline: Duration,
        what: &str,
        done: impl Fn(&[SeenSpan]) -> bool,
    ) -> Vec<SeenSpan> {
        let end = tokio::time::Instant::now() + deadline;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if tokio::time::Instant::now() >= end {
                panic!("timed out after {deadline:?} waiting until {what}; spans: {spans:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Reads every export received with `tests/tools/otlp_read.py` (the official Python
    /// definitions) and checks it finds the very spans this side read.
    pub fn check_with_python(&self) {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for (i, r) in self.receiver.requests().iter().enumerate() {
            let path = dir.path().join(format!("{i}.bin"));
            std::fs::write(&path, &r.body).unwrap();
            files.push(path);
        }
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/otlp_read.py");
        let out = std::process::Command::new("python3")
            .arg(script)
            .args(&files)
            .output()
            .expect("python3 runs");
        assert!(
            out.status.success(),
            "otlp_read.py failed (pip install -r tests/tools/requirements.txt): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut python: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        for s in &mut python {
            let o = s.as_object_mut().unwrap();
            assert!(o["start"].as_u64().unwrap() > 0 && o["end"].as_u64() >= o["start"].as_u64());
            o.remove("start");
            o.remove("end");
            let kind = o["kind"].as_str().unwrap().to_string();
            o.insert("kind".into(), json!(kind));
        }
        let ours: Vec<Value> = self.spans().iter().map(SeenSpan::as_json).collect();
        assert!(!ours.is_empty());
        assert_eq!(python, ours, "the Python reading differs from the Rust one");
    }
}

fn read(req: &ExportTraceServiceRequest) -> Vec<SeenSpan> {
    let mut out = Vec::new();
    for rs in &req.resource_spans {
        let resource = rs
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for ss in &rs.scope_spans {
            let scope = ss
                .scope
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default();
            for s in &ss.spans {
                out.push(SeenSpan {
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    name: s.name.clone(),
                    kind: kind_name(s.kind).into(),
                    attributes: attributes(&s.attributes),
                    events: s.events.iter().map(|e| e.name.clone()).collect(),
                    status: s.status.as_ref().map_or(0, |st| st.code),
                    resource: resource.clone(),
                    scope: scope.clone(),
                });
            }
        }
    }
    out
}

fn kind_name(kind: i32) -> &'static str {
    match kind {
        1 => "SPAN_KIND_INTERNAL",
        2 => "SPAN_KIND_SERVER",
        3 => "SPAN_KIND_CLIENT",
        4 => "SPAN_KIND_PRODUCER",
        5 => "SPAN_KIND_CONSUMER",
        _ => "SPAN_KIND_UNSPECIFIED",
    }
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, Value> {
    kvs.iter()
        .map(|kv| {
            let v = kv
                .value
                .as_ref()
                .and_then(|v| v.value.as_ref())
                .map_or(Value::Null, any);
            (kv.key.clone(), v)
        })
        .collect()
}

fn any(v: &Any) -> Value {
    match v {
        Any::StringValue(s) => json!(s),
        Any::BoolValue(b) => json!(b),
        Any::IntValue(i) => json!(i),
        Any::DoubleValue(d) => json!(d),
        Any::BytesValue(b) => json!(hex(b)),
        Any::ArrayValue(a) => Value::Array(
            a.values
                .iter()
                .map(|v| v.value.as_ref().map_or(Value::Null, any))
                .collect(),
        ),
        Any::KvlistValue(l) => Value::Object(attributes(&l.values).into_iter().collect()),
        #[allow(unreachable_patterns)]
        _ => Value::Null,
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
