//! Load drivers: closed-loop keep-alive clients posting single events or batches, an open-loop
//! paced sender, and the sampler that turns counters into rates over the steady part of a phase.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::herald::INGEST_TOKEN;
use crate::receiver::Arrivals;

pub type ApiClient = Client<HttpConnector, Full<Bytes>>;

/// A keep-alive HTTP/1.1 client.
pub fn new_client(max_idle: usize) -> ApiClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(max_idle)
        .build(connector)
}

/// Every event gets a distinct payload.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// One ingest item: `account_id`, `type` and a payload of about 200 bytes. Its `shard` (one
/// of 100, in turn) is the ordering key of the ordered phase.
pub fn event_json(account: &str) -> String {
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let shard = seq % 100;
    format!(
        "{{\"account_id\":\"{account}\",\"type\":\"bench.event\",\"payload\":{{\
         \"order_id\":\"ord_{seq:012}\",\"shard\":\"s{shard:02}\",\"customer\":{{\"id\":\"cus_4242\",\
         \"email\":\"bench@example.com\"}},\"items\":[{{\"sku\":\"SKU-0001\",\"qty\":2,\
         \"price_cents\":1999}},{{\"sku\":\"SKU-0002\",\"qty\":1,\"price_cents\":4500}}],\
         \"currency\":\"EUR\",\"note\":\"benchmark event for herald load testing\"}}}}"
    )
}

/// A batch body of `n` events.
pub fn batch_json(account: &str, n: usize) -> String {
    let items: Vec<String> = (0..n).map(|_| event_json(account)).collect();
    format!("{{\"events\":[{}]}}", items.join(","))
}

/// A batch body of `n` events, each with its own `idempotency_key` (a UUID-sized key, as a
/// careful producer sends one per event).
pub fn keyed_batch_json(account: &str, n: usize) -> String {
    let items: Vec<String> = (0..n)
        .map(|_| {
            let e = event_json(account);
            let seq = SEQ.load(Ordering::Relaxed);
            format!(
                "{{\"idempotency_key\":\"4f1c2a9e-7b3d-4c21-9e0f-{seq:012x}\",{}",
                &e[1..]
            )
        })
        .collect();
    format!("{{\"events\":[{}]}}", items.join(","))
}

/// Posts a JSON body with the ingest token; the status and the answer.
pub async fn post(client: &ApiClient, url: &str, body: String) -> Result<(u16, Bytes)> {
    post_with(client, url, body, &[]).await
}

/// [`post`] with more headers.
pub async fn post_with(
    client: &ApiClient,
    url: &str,
    body: String,
    headers: &[(&str, &str)],
) -> Result<(u16, Bytes)> {
    let mut req = Request::builder()
        .method("POST")
        .uri(url)
        .header("authorization", format!("Bearer {INGEST_TOKEN}"))
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::from(body)))?;
    let resp = client.request(req).await?;
    let status = resp.status().as_u16();
    Ok((status, resp.into_body().collect().await?.to_bytes()))
}

/// What the drivers count as they go.
#[derive(Default)]
pub struct Counters {
    /// Events acknowledged with 202.
    pub acked: AtomicU64,
    /// Requests (or batch items) that failed.
    pub errors: AtomicU64,
}

/// `n` clients, one keep-alive connection each, posting single events back to back until
/// `until`, client `k` to `bases[k % bases.len()]` (the nodes of a cluster). Returns each
/// acknowledged request's latency in microseconds.
pub async fn closed_single(
    bases: &[String],
    account: &str,
    clients: usize,
    until: Instant,
    counters: Arc<Counters>,
) -> Vec<u32> {
    closed_loop(bases, account, clients, None, until, counters).await
}

/// `n` clients posting batches of `size` events back to back until `until`.
pub async fn closed_batch(
    bases: &[String],
    account: &str,
    clients: usize,
    size: usize,
    until: Instant,
    counters: Arc<Counters>,
) -> Vec<u32> {
    closed_loop(bases, account, clients, Some(size), until, counters).await
}

/// `n` clients creating single messages through the Svix-compatible API, as the official
/// libraries send them: `eventType` and `payload`, `?with_content=false`, and an
/// `idempotency-key: auto_<uuid>` header of its own on each request.
pub async fn closed_svix(
    bases: &[String],
    account: &str,
    clients: usize,
    until: Instant,
    counters: Arc<Counters>,
) -> Vec<u32> {
    let mut tasks = Vec::new();
    for k in 0..clients {
        let url = format!(
            "{}/api/v1/app/{account}/msg?with_content=false",
            bases[k % bases.len()]
        );
        let counters = counters.clone();
        tasks.push(tokio::spawn(async move {
            let client = new_client(1);
            let mut latencies = Vec::new();
            while Instant::now() < until {
                let seq = SEQ.fetch_add(1, Ordering::Relaxed);
                let key = format!("auto_{:08x}-0000-4000-8000-{:012x}", k, seq);
                let sent = Instant::now();
                let ok = matches!(
                    post_with(&client, &url, message_json(), &[("idempotency-key", &key)]).await,
                    Ok((202, _))
                );
                if ok {
                    counters.acked.fetch_add(1, Ordering::Relaxed);
                    latencies.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                } else {
                    counters.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap_or_default());
    }
    all
}

/// A Svix `MessageIn`: [`event_json`]'s type and payload, made as cheaply (the clients share
/// the machine with herald).
fn message_json() -> String {
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let shard = seq % 100;
    format!(
        "{{\"eventType\":\"bench.event\",\"payload\":{{\
         \"order_id\":\"ord_{seq:012}\",\"shard\":\"s{shard:02}\",\"customer\":{{\"id\":\"cus_4242\",\
         \"email\":\"bench@example.com\"}},\"items\":[{{\"sku\":\"SKU-0001\",\"qty\":2,\
         \"price_cents\":1999}},{{\"sku\":\"SKU-0002\",\"qty\":1,\"price_cents\":4500}}],\
         \"currency\":\"EUR\",\"note\":\"benchmark event for herald load testing\"}}}}"
    )
}

async fn closed_loop(
    bases: &[String],
    account: &str,
    clients: usize,
    batch: Option<usize>,
    until: Instant,
    counters: Arc<Counters>,
) -> Vec<u32> {
    let path = match batch {
        Some(_) => "/v1/events/batch",
        None => "/v1/events",
    };
    let mut tasks = Vec::new();
    for k in 0..clients {
        let url = format!("{}{path}", bases[k % bases.len()]);
        let (account, counters) = (account.to_string(), counters.clone());
        tasks.push(tokio::spawn(async move {
            let client = new_client(1);
            let mut latencies = Vec::new();
            while Instant::now() < until {
                let body = match batch {
                    Some(n) => batch_json(&account, n),
                    None => event_json(&account),
                };
                let sent = Instant::now();
                let (ok, failed) = match post(&client, &url, body).await {
                    Ok((202, answer)) => match batch {
                        Some(n) => {
                            let ok = count(&answer, b"\"status\":202");
                            (ok, n as u64 - ok)
                        }
                        None => (1, 0),
                    },
                    Ok(_) => (0, batch.unwrap_or(1) as u64),
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        (0, batch.unwrap_or(1) as u64)
                    }
                };
                counters.acked.fetch_add(ok, Ordering::Relaxed);
                counters.errors.fetch_add(failed, Ordering::Relaxed);
                if ok > 0 {
                    latencies.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap_or_default());
    }
    all
}

/// Occurrences of `needle` in `hay`.
fn count(hay: &[u8], needle: &[u8]) -> u64 {
    hay.windows(needle.len()).filter(|w| *w == needle).count() as u64
}

/// The `event_id` of a 202 answer.
pub fn event_id(answer: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(answer).ok()?;
    let start = text.find("\"event_id\":\"")? + "\"event_id\":\"".len();
    let len = text[start..].find('"')?;
    Some(text[start..start + len].to_string())
}

/// An open-loop sender's record: each acknowledged event's scheduled send time and id.
pub struct Paced {
    pub sent: Vec<(Instant, String)>,
    pub errors: u64,
}

/// Sends single events at `rate` per second for `duration` from `start`, each at its scheduled
/// time whether or not earlier ones were answered (open loop, no coordinated omission).
pub async fn open_loop(
    bases: &[String],
    account: &str,
    rate: f64,
    start: Instant,
    dur: Duration,
    counters: Arc<Counters>,
) -> Paced {
    let urls: Vec<String> = bases.iter().map(|b| format!("{b}/v1/events")).collect();
    let client = new_client(64);
    let total = (rate * dur.as_secs_f64()) as u64;
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let at = start + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(at.into()).await;
        let url = urls[i as usize % urls.len()].clone();
        let (client, body) = (client.clone(), event_json(account));
        let counters = counters.clone();
        tasks.push(tokio::spawn(async move {
            let id = match post(&client, &url, body).await {
                Ok((202, answer)) => event_id(&answer),
                _ => None,
            };
            let counter = if id.is_some() {
                &counters.acked
            } else {
                &counters.errors
            };
            counter.fetch_add(1, Ordering::Relaxed);
            id.map(|id| (at, id))
        }));
    }
    let mut paced = Paced {
        sent: Vec::new(),
        errors: 0,
    };
    for task in tasks {
        match task.await.ok().flatten() {
            Some(sent) => paced.sent.push(sent),
            None => paced.errors += 1,
        }
    }
    paced
}

/// How [`paced_batches`] makes its batches: `size` events of `account`, each with its own
/// idempotency key if `keyed`.
pub struct Batches<'a> {
    pub account: &'a str,
    pub size: usize,
    pub keyed: bool,
}

/// Sends batches so that `rate` events per second are offered for `dur` from `start`. At most
/// `max_outstanding` batches wait for their answer at once; beyond that the sender waits too,
/// so a herald that cannot keep up is offered less (the acknowledged rate shows what it took).
pub async fn paced_batches(
    bases: &[String],
    batches: Batches<'_>,
    rate: f64,
    start: Instant,
    dur: Duration,
    counters: Arc<Counters>,
) {
    let Batches {
        account,
        size,
        keyed,
    } = batches;
    const MAX_OUTSTANDING: usize = 16;
    let urls: Vec<String> = bases
        .iter()
        .map(|b| format!("{b}/v1/events/batch"))
        .collect();
    let client = new_client(MAX_OUTSTANDING);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_OUTSTANDING));
    let until = start + dur;
    let mut tasks = Vec::new();
    for i in 0u64.. {
        let at = start + Duration::from_secs_f64((i * size as u64) as f64 / rate);
        if at >= until {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let body = if keyed {
            keyed_batch_json(account, size)
        } else {
            batch_json(account, size)
        };
        let (client, url) = (client.clone(), urls[i as usize % urls.len()].clone());
        let counters = counters.clone();
        tasks.push(tokio::spawn(async move {
            let ok = match post(&client, &url, body).await {
                Ok((202, answer)) => count(&answer, b"\"status\":202"),
                _ => 0,
            };
            counters.acked.fetch_add(ok, Ordering::Relaxed);
            counters
                .errors
                .fetch_add(size as u64 - ok, Ordering::Relaxed);
            drop(slot);
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

/// Counter readings at one moment of a phase.
#[derive(Clone, Copy)]
pub struct Sample {
    /// Seconds since the phase started.
    pub t: f64,
    pub acked: u64,
    pub arrived: u64,
}

/// Reads the counters every 250 ms from `start` to `until`, printing a line per second to stderr.
pub async fn sample(
    start: Instant,
    until: Instant,
    counters: Arc<Counters>,
    arrivals: Option<Arc<Arrivals>>,
) -> Vec<Sample> {
    let read = || Sample {
        t: start.elapsed().as_secs_f64(),
        acked: counters.acked.load(Ordering::Relaxed),
        arrived: arrivals.as_ref().map_or(0, |a| a.unique()),
    };
    let mut samples = vec![read()];
    let mut last_print = samples[0];
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.tick().await;
    while Instant::now() < until {
        tick.tick().await;
        let s = read();
        samples.push(s);
        if s.t - last_print.t >= 0.99 {
            let dt = s.t - last_print.t;
            let mut line = format!(
                "    t={:>5.1}s  acked {:>7.0}/s",
                s.t,
                (s.acked - last_print.acked) as f64 / dt
            );
            if arrivals.is_some() {
                line += &format!(
                    "  arrived {:>7.0}/s",
                    (s.arrived - last_print.arrived) as f64 / dt
                );
            }
            eprintln!("{line}");
            last_print = s;
        }
    }
    samples
}

/// The rate of `field` between the first sample at or after `from` and the last one at or before
/// `to` (seconds since the phase started).
pub fn rate(samples: &[Sample], from: f64, to: f64, field: fn(&Sample) -> u64) -> f64 {
    let Some(a) = samples.iter().find(|s| s.t >= from) else {
        return 0.0;
    };
    let Some(b) = samples.iter().rev().find(|s| s.t <= to + 0.01) else {
        return 0.0;
    };
    if b.t <= a.t {
        return 0.0;
    }
    (field(b) - field(a)) as f64 / (b.t - a.t)
}

/// The `q` quantile (0..=1) of sorted values, nearest rank.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// `clients` clients posting batches of `size` events back to back until `total` events were
/// acknowledged (or `give_up` passed).
pub async fn batches_until(
    bases: &[String],
    account: &str,
    clients: usize,
    size: usize,
    total: u64,
    give_up: Instant,
    counters: Arc<Counters>,
) {
    let mut tasks = Vec::new();
    for k in 0..clients {
        let url = format!("{}/v1/events/batch", bases[k % bases.len()]);
        let (account, counters) = (account.to_string(), counters.clone());
        tasks.push(tokio::spawn(async move {
            let client = new_client(1);
            while counters.acked.load(Ordering::Relaxed) < total && Instant::now() < give_up {
                let left = total.saturating_sub(counters.acked.load(Ordering::Relaxed));
                let n = (left as usize).clamp(1, size);
                match post(&client, &url, batch_json(&account, n)).await {
                    Ok((202, answer)) => {
                        let ok = count(&answer, b"\"status\":202");
                        counters.acked.fetch_add(ok, Ordering::Relaxed);
                        counters.errors.fetch_add(n as u64 - ok, Ordering::Relaxed);
                    }
                    _ => {
                        counters.errors.fetch_add(n as u64, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}
