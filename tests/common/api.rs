//! The API calls tests make, for any running herald: the real process ([`Herald`]) or one in
//! this test process with a manual clock ([`InProc`]).

use std::future::Future;

use serde_json::Value;

use super::herald::{ADMIN_TOKEN, INGEST_TOKEN};

pub trait HeraldApi {
    /// Raw call: status, response headers (lower-case names), body. Panics on transport errors.
    fn call_raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> impl Future<Output = (u16, Vec<(String, String)>, Vec<u8>)>;

    /// A JSON call; the answer parsed as JSON (`Null` if empty or not JSON).
    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> impl Future<Output = (u16, Value)> {
        async move {
            let (headers, bytes): (&[(&str, &str)], Vec<u8>) = match body {
                Some(v) => (
                    &[("content-type", "application/json")],
                    serde_json::to_vec(&v).expect("serialize JSON body"),
                ),
                None => (&[], Vec::new()),
            };
            let (status, _, answer) = self.call_raw(method, path, token, headers, bytes).await;
            (
                status,
                serde_json::from_slice(&answer).unwrap_or(Value::Null),
            )
        }
    }

    fn admin(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> impl Future<Output = (u16, Value)> {
        self.call(method, path, Some(ADMIN_TOKEN), body)
    }

    fn ingest(&self, body: Value) -> impl Future<Output = (u16, Value)> {
        self.call("POST", "/v1/events", Some(INGEST_TOKEN), Some(body))
    }

    /// `POST /v1/events/batch` with the ingest token: `{"events": events}`.
    fn ingest_batch(&self, events: Value) -> impl Future<Output = (u16, Value)> {
        self.call(
            "POST",
            "/v1/events/batch",
            Some(INGEST_TOKEN),
            Some(serde_json::json!({ "events": events })),
        )
    }
}

impl HeraldApi for super::Herald {
    async fn call_raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        super::Herald::call_raw(self, method, path, token, headers, body).await
    }
}
