//! The filters phase: batch ingest into an account with 10 endpoints, alternating runs with no
//! filter and with a 5-operator payload filter on every endpoint that takes every event, on one
//! herald (docs/api.md, "Payload filters"). A filter costs one parse of the payload per event
//! (for all its endpoints together) and the tests themselves.

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::phases::{self, Setup, Target, ACCOUNT};
use crate::Opts;

/// Endpoints of the account, all to the phase's receiver.
const ENDPOINTS: usize = 10;
/// Runs of each kind (without, with filters), alternating.
const ROUNDS: usize = 3;

/// Five operators, each true of every event the bench sends.
fn filter() -> Value {
    json!({
        "type": "bench.event",
        "payload": {
            "currency": {"$in": ["EUR", "USD"]},
            "customer": {"id": {"$startsWith": "cus_"}},
            "items": {"$exists": true},
            "order_id": {"$neq": ""},
        }
    })
}

/// Each round: (events/s without filters, events/s with them).
pub struct FilterFigures {
    pub rounds: Vec<(f64, f64)>,
}

pub async fn filters(opts: &Opts) -> Result<FilterFigures> {
    let mut s = phases::setup(opts, "10 endpoints", Target::Receiver).await?;
    let mut endpoints = Vec::new();
    let (_, list) = s
        .herald
        .admin(
            "GET",
            &format!("/v1/accounts/{ACCOUNT}/endpoints"),
            Value::Null,
        )
        .await?;
    for ep in list["items"].as_array().into_iter().flatten() {
        endpoints.push(ep["id"].as_str().unwrap_or_default().to_string());
    }
    while endpoints.len() < ENDPOINTS {
        let id = s
            .herald
            .create_endpoint_with(ACCOUNT, &s.receiver.url(), json!({}))
            .await?;
        endpoints.push(id);
    }
    let mut rounds = Vec::new();
    for _ in 0..ROUNDS {
        set_filters(&s, &endpoints, Value::Null).await?;
        let without = run(opts, &s).await?;
        set_filters(&s, &endpoints, filter()).await?;
        let with = run(opts, &s).await?;
        rounds.push((without, with));
    }
    s.herald.stop(false).await?;
    Ok(FilterFigures { rounds })
}

async fn set_filters(s: &Setup, endpoints: &[String], filter: Value) -> Result<()> {
    for id in endpoints {
        let (status, answer) = s
            .herald
            .admin(
                "PATCH",
                &format!("/v1/endpoints/{id}"),
                json!({ "filter": filter }),
            )
            .await?;
        if status != 200 {
            bail!("setting a filter: {status} {answer}");
        }
    }
    Ok(())
}

async fn run(opts: &Opts, s: &Setup) -> Result<f64> {
    let r = phases::ingest_on(opts, s, opts.batch_clients, Some(opts.batch_size)).await?;
    if r.errors > 0 {
        bail!("{} ingest requests failed", r.errors);
    }
    Ok(r.events_per_s)
}

pub fn print(f: &FilterFigures) {
    eprintln!("filters: batch ingest, {ENDPOINTS} endpoints, without and with a 5-operator filter on each");
    for (i, (without, with)) in f.rounds.iter().enumerate() {
        eprintln!(
            "  round {i}: {without:.0} events/s without, {with:.0} with filters ({:.0} %)",
            100.0 * with / without.max(1.0)
        );
    }
    let (a, b) = f
        .rounds
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    eprintln!(
        "  all rounds: {:.0} % of the rate without filters",
        100.0 * b / f64::max(a, 1.0)
    );
}
