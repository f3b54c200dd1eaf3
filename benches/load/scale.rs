//! The phases about a big store: a backlog of pending deliveries (memory, and a restart with
//! it), a log that already holds millions of attempts (does herald slow down?), and retention
//! under steady traffic (does the disk stop growing?).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use serde_json::Value;

use herald::clock::{Clock, SystemClock};
use herald::ids;
use herald::model::{
    Attempt, DeliveryState, Endpoint, EndpointState, SignatureKind, Status, StoredSecret,
};
use herald::store::{IngestOutcome, NewEvent};

use crate::drive::{self, Counters};
use crate::herald::{new_dir, Dir, Herald};
use crate::phases::{self, EndToEnd, Ingest, Setup};
use crate::receiver::{DeadReceiver, Receiver};
use crate::Opts;
use herald::store::prelude::*;

const ACCOUNT: &str = "a1";

/// Pending deliveries piling up behind an endpoint that never answers.
pub struct Backlog {
    pub pending: u64,
    pub ingest_per_s: f64,
    /// herald's peak RSS with the backlog pending.
    pub peak_rss: Option<u64>,
    /// After a `kill -9` and a start on the same data: time to the first `200` of `/healthz`.
    pub healthz_after_restart: Duration,
    /// Pending deliveries the restarted herald found.
    pub pending_after_restart: u64,
    /// The restarted herald's peak RSS, a few seconds in.
    pub peak_rss_after_restart: Option<u64>,
}

fn pending_of(status: &serde_json::Value) -> u64 {
    status["queue"]["pending"].as_u64().unwrap_or(0)
}

pub async fn backlog(opts: &Opts) -> Result<Backlog> {
    phases::settle_disk().await;
    let mut herald = Herald::start(&opts.herald, &opts.storage()).await?;
    let dead = DeadReceiver::start().await?;
    herald.create_endpoint(ACCOUNT, &dead.url()).await?;
    let counters = Arc::new(Counters::default());
    let start = Instant::now();
    let give_up = start + Duration::from_secs(300);
    let total = opts.backlog as u64;
    let sampler = tokio::spawn(drive::sample(
        start,
        give_up.min(start + Duration::from_secs(600)),
        counters.clone(),
        None,
    ));
    let (n, size) = (opts.batch_clients, opts.batch_size);
    drive::batches_until(
        &[herald.base_url()],
        ACCOUNT,
        n,
        size,
        total,
        give_up,
        counters.clone(),
    )
    .await;
    let took = start.elapsed().as_secs_f64();
    sampler.abort();
    let acked = counters.acked.load(Ordering::Relaxed);
    let pending = pending_of(&herald.status().await?);
    let peak_rss = herald.peak_rss();
    eprintln!("    {acked} acknowledged in {took:.1} s; {pending} pending; restarting (kill -9)");

    let healthz_after_restart = herald.restart(false).await?;
    let pending_after_restart = pending_of(&herald.status().await?);
    // The start-up count runs on for a moment after the listener is up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let peak_rss_after_restart = herald.peak_rss();
    herald.stop(false).await?;
    Ok(Backlog {
        pending,
        ingest_per_s: acked as f64 / took,
        peak_rss,
        healthz_after_restart,
        pending_after_restart,
        peak_rss_after_restart,
    })
}

/// Ingest and end-to-end on a store that already holds many attempts, next to the same on an
/// empty store measured in the same phase.
pub struct History {
    pub attempts: u64,
    pub prefill_s: f64,
    pub disk_bytes: u64,
    /// End-to-end is offered this much, above what herald takes, so it measures capacity.
    pub e2e_rate: f64,
    pub empty: (Ingest, EndToEnd),
    pub full: (Ingest, EndToEnd),
    /// The delivery log of one account with [`PORTAL_DELIVERIES`] deliveries among all the
    /// others: latency of its first page, `None` if the reused store lacks that account.
    pub account_log: Option<AccountLog>,
}

/// An account's first page of the delivery log, as the portal asks for it.
#[derive(Debug, Clone)]
pub struct AccountLog {
    pub deliveries: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
}

/// The account the portal figure reads, and how many deliveries it has in the prefilled log
/// (spread evenly through it).
pub const PORTAL_ACCOUNT: &str = "bench-portal";
pub const PORTAL_DELIVERIES: usize = 200;

/// End-to-end offered rate in the history phase: under the ~15,000–20,000/s an empty store takes
/// on the machine this was written on, and more than 80 % of it: a store that kept up with less
/// than 80 % of the empty one's capacity falls behind here (and past capacity, ingest takes the
/// CPU from delivery, which makes a saturated figure swing from run to run).
const HISTORY_E2E_RATE: f64 = 12_000.0;

pub async fn history(opts: &Opts) -> Result<History> {
    phases::settle_disk().await;
    eprintln!("  empty store");
    let receiver = Receiver::start().await?;
    let herald = Herald::start(&opts.herald, &opts.storage()).await?;
    let ep = herald.create_endpoint(ACCOUNT, &receiver.url()).await?;
    let empty = ingest_then_e2e(opts, herald, receiver, ep).await?;

    let receiver = Receiver::start().await?;
    let (dir, reuse) = match &opts.history_dir {
        Some(p) => (Dir::Kept(p.clone()), p.join("data").exists()),
        None => (new_dir()?, false),
    };
    let started = Instant::now();
    let attempts = if reuse {
        eprintln!("    reusing the store in {}", dir.path().display());
        opts.history as u64
    } else {
        prefill(opts, &dir.data(), opts.history).await?
    };
    let prefill_s = started.elapsed().as_secs_f64();
    let herald = Herald::start_in(&opts.herald, dir, &opts.storage()).await?;
    let disk_bytes = herald.data_bytes().1;
    eprintln!(
        "    {attempts} attempts written in {prefill_s:.1} s ({} MiB on disk); herald pid {}",
        disk_bytes >> 20,
        herald.pid
    );
    let account_log = account_log(&herald).await?;
    // The prefilled endpoint points nowhere (its receiver is gone), and every event of this
    // run would fan out to it too: deleted (which ends what a kept store still had pending for
    // it), and a new one for this run.
    let (status, list) = herald
        .admin(
            "GET",
            &format!("/v1/accounts/{ACCOUNT}/endpoints"),
            Value::Null,
        )
        .await?;
    if status != 200 {
        bail!("listing {ACCOUNT}'s endpoints: {status} {list}");
    }
    for old in list["items"].as_array().into_iter().flatten() {
        let id = old["id"].as_str().unwrap_or_default();
        let (status, answer) = herald
            .admin("DELETE", &format!("/v1/endpoints/{id}"), Value::Null)
            .await?;
        if !(200..300).contains(&status) {
            bail!("deleting the prefilled endpoint: {status} {answer}");
        }
    }
    let ep = herald.create_endpoint(ACCOUNT, &receiver.url()).await?;
    let full = ingest_then_e2e(opts, herald, receiver, ep).await?;
    Ok(History {
        attempts,
        prefill_s,
        disk_bytes,
        e2e_rate: HISTORY_E2E_RATE,
        empty,
        full,
        account_log,
    })
}

/// Reads [`PORTAL_ACCOUNT`]'s log: every page once (to count it), then its first page (50 newest,
/// as the portal opens it) 200 times, one after another.
async fn account_log(herald: &Herald) -> Result<Option<AccountLog>> {
    let page = format!("/v1/deliveries?account_id={PORTAL_ACCOUNT}&limit=50");
    let mut found = 0;
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("{page}&cursor={c}"),
            None => page.clone(),
        };
        let (status, answer) = herald.admin("GET", &path, Value::Null).await?;
        if status != 200 {
            bail!("listing {PORTAL_ACCOUNT}'s deliveries: {status} {answer}");
        }
        found += answer["items"].as_array().map_or(0, Vec::len);
        match answer["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    if found < PORTAL_DELIVERIES {
        eprintln!(
            "    the store has {found} deliveries of {PORTAL_ACCOUNT}, not {PORTAL_DELIVERIES} \
             (prefilled by an older bench?): account log not measured"
        );
        return Ok(None);
    }
    let mut times = Vec::with_capacity(200);
    for _ in 0..200 {
        let t = Instant::now();
        let (status, _) = herald.admin("GET", &page, Value::Null).await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        if status != 200 {
            bail!("listing {PORTAL_ACCOUNT}'s deliveries: {status}");
        }
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    let log = AccountLog {
        deliveries: found,
        p50_ms: at(0.50),
        p95_ms: at(0.95),
        max_ms: times[times.len() - 1],
    };
    eprintln!(
        "    {PORTAL_ACCOUNT}'s log ({found} deliveries): first page p50 {:.1} ms, p95 {:.1} ms",
        log.p50_ms, log.p95_ms
    );
    Ok(Some(log))
}

/// Closed-loop single ingest, then (once its deliveries are done) end-to-end at
/// [`HISTORY_E2E_RATE`]; stops herald.
/// Single ingest, then end-to-end, to `endpoint`; then deletes it, which ends what is still
/// pending for it, so a store kept for the next run (`--history-dir`) holds only history.
async fn ingest_then_e2e(
    opts: &Opts,
    herald: Herald,
    receiver: Receiver,
    endpoint: String,
) -> Result<(Ingest, EndToEnd)> {
    let mut s = Setup {
        others: Vec::new(),
        herald,
        receiver,
        _second: None,
        dead: None,
    };
    eprintln!("  single ingest, {} clients", opts.clients);
    let single = phases::ingest_on(opts, &s, opts.clients, None).await?;
    let give_up = Instant::now() + Duration::from_secs_f64(opts.drain);
    while pending_of(&s.herald.status().await?) > 0 && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "  end-to-end, {HISTORY_E2E_RATE}/s offered in batches of {}",
        opts.e2e_batch
    );
    let e2e = phases::end_to_end_on(opts, &s, true, HISTORY_E2E_RATE).await?;
    let (status, answer) = s
        .herald
        .admin("DELETE", &format!("/v1/endpoints/{endpoint}"), Value::Null)
        .await?;
    if !(200..300).contains(&status) {
        bail!("deleting the run's endpoint: {status} {answer}");
    }
    s.herald.stop(true).await?;
    Ok((single, e2e))
}

/// Writes `n` delivered events (one attempt each, recorded as herald records them) through
/// herald's own store code, for an endpoint of [`ACCOUNT`]. Returns the attempts written.
/// Attempts written between two rounds of folding in the prefill.
const FOLD_EVERY: u64 = 100_000;

// The prefill writes through the embedded store's own code, as herald would.
pub async fn prefill(opts: &Opts, data: &Path, n: usize) -> Result<u64> {
    let cache = opts.cache_capacity.unwrap_or(64 << 20);
    let store =
        herald_store_sled::SledStore::open(data, cache, Arc::new(SystemClock), Arc::default())
            .context("opening the store to prefill")?;
    let clock = SystemClock;
    let now = clock.now_ms();
    let endpoint = |account: &str| Endpoint {
        id: ids::new_id(ids::ENDPOINT, now),
        account_id: account.into(),
        url: "http://127.0.0.1:9/gone".into(),
        description: "bench history".into(),
        event_types: Vec::new(),
        headers: BTreeMap::new(),
        retry_policy: "none".into(),
        signature: SignatureKind::Hmac,
        state: EndpointState::Active,
        verified: true,
        created_at: now,
        updated_at: now,
        secrets: vec![StoredSecret {
            value: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            expires_at: None,
        }],
        ordering: None,
        rate_limit: None,
        client_certificate: None,
        filter: None,
        uid: None,
        metadata: Default::default(),
        channels: Vec::new(),
        signature_headers: Default::default(),
        propagate_trace: false,
    };
    let ep = store.put_endpoint(endpoint(ACCOUNT)).await?;
    // The portal figure's account: one delivery every n / PORTAL_DELIVERIES of the others'.
    let portal_ep = store.put_endpoint(endpoint(PORTAL_ACCOUNT)).await?;
    let every = (n / PORTAL_DELIVERIES).max(1);
    let mut written = 0u64;
    let (mut folded, mut folds) = (0, 0);
    let mut next_report = Instant::now() + Duration::from_secs(5);
    while (written as usize) < n {
        let now = clock.now_ms();
        let batch = (n - written as usize).min(1000);
        let events: Vec<NewEvent> = (0..batch)
            .map(|i| {
                let portal = (written as usize + i) % every == every - 1;
                let spread = format!("a-{}", i % opts.history_accounts);
                let (account, target) = match portal {
                    true => (PORTAL_ACCOUNT, &portal_ep),
                    false if opts.history_accounts == 1 => (ACCOUNT, &ep),
                    false => (spread.as_str(), &ep),
                };
                let body = drive::event_json(account);
                let payload =
                    body[body.find("\"payload\":").unwrap_or(0) + 10..body.len() - 1].to_string();
                NewEvent::fan_out(
                    account.into(),
                    "bench.event".into(),
                    Bytes::from(payload),
                    [target].into_iter(),
                    now,
                )
            })
            .collect();
        for outcome in store.ingest(events).await? {
            let IngestOutcome::Created {
                event_id,
                deliveries,
            } = outcome
            else {
                continue;
            };
            for d in deliveries {
                let attempt = recorded_attempt(&event_id, &d.id, &ep.id, now);
                let mut done = d.clone();
                done.state = DeliveryState::Delivered;
                done.last_status = Some(Status::Delivered);
                done.attempt_count = 1;
                done.next_attempt_at = None;
                store.update_delivery(&d, &done, Some(&attempt))?;
                written += 1;
            }
        }
        // Nothing here runs the engine: the index hands out everything, so it stays empty.
        store.due().take(i64::MAX, usize::MAX, |_| usize::MAX);
        // As herald folds ended history older than storage.fold_after
        // (crates/herald-store-sled/src/fold.rs), a slice at a time: the store measured is the
        // one a herald that ran this long has.
        if opts.fold && written % FOLD_EVERY == 0 {
            let mut from = None;
            loop {
                let f = store.fold_history(clock.now_ms() + 1, from, 20_000)?;
                folded += f.events;
                folds += f.folds;
                from = f.last.or(from);
                if !f.more {
                    break;
                }
            }
            while opts.index_pack && store.pack_account_index(clock.now_ms() + 1, 20_000)? {}
        }
        if Instant::now() > next_report {
            eprintln!(
                "    prefill: {written} of {n} attempts ({folded} events folded into {folds} rows)"
            );
            next_report += Duration::from_secs(5);
        }
    }
    store.close()?;
    let committer = store.take_committer();
    drop(store);
    if let Some(c) = committer {
        tokio::task::spawn_blocking(move || c.join()).await.ok();
    }
    Ok(written)
}

/// An attempt as herald records a delivered one: its request headers and the receiver's answer.
fn recorded_attempt(event_id: &str, delivery_id: &str, endpoint_id: &str, at: i64) -> Attempt {
    let h = |k: &str, v: String| (k.to_string(), v);
    Attempt {
        id: ids::new_id(ids::ATTEMPT, at),
        number: 1,
        at,
        duration_ms: 1,
        status: Status::Delivered,
        http_status: Some(200),
        error: None,
        request_headers: vec![
            h("content-type", "application/json".into()),
            h("user-agent", format!("herald/{}", herald::VERSION)),
            h("webhook-id", event_id.into()),
            h("webhook-timestamp", (at / 1000).to_string()),
            h(
                "webhook-signature",
                "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=".into(),
            ),
            h("herald-event-type", "bench.event".into()),
            h("herald-attempt", "1".into()),
            h("herald-delivery-id", delivery_id.into()),
            h("herald-endpoint-id", endpoint_id.into()),
        ],
        response_body: "ok".into(),
        response_headers: vec![
            h("content-length", "2".into()),
            h("date", "Sun, 06 Dec 2026 12:00:00 GMT".into()),
        ],
        url: None,
        manual: false,
    }
}

/// How long the retention phase runs, in retention periods.
pub const RETENTION_SPAN: f64 = 3.0;

/// Disk use under steady traffic with a short retention.
pub struct Retention {
    pub retention_s: f64,
    pub rate: f64,
    /// (seconds since the traffic started, data dir allocated bytes).
    pub samples: Vec<(f64, u64)>,
    /// herald's resident set (VmRSS) at each sample, bytes.
    pub rss: Vec<u64>,
    pub delivered: u64,
    /// Events acknowledged.
    pub acked: u64,
    /// The keys' database at the last sample, allocated bytes.
    pub keys_bytes: u64,
}

impl Retention {
    /// Allocated bytes at the first sample at or after `t`.
    pub fn at(&self, t: f64) -> Option<u64> {
        self.samples.iter().find(|s| s.0 >= t).map(|s| s.1)
    }

    /// The last sample: (seconds, data dir bytes, RSS bytes).
    pub fn last(&self) -> Option<(f64, u64, u64)> {
        let (t, b) = *self.samples.last()?;
        Some((t, b, *self.rss.last()?))
    }
}

/// The traffic of the retention phase (batches at the retention rate) for `seconds`, every
/// event keyed or not, with `storage.retention = retention_s` (`None`: herald's default, 30
/// days).
pub struct Soak {
    pub keyed: bool,
    pub seconds: f64,
    pub retention_s: Option<f64>,
}

/// The keys phase: the keyed soak with a short retention, and the cost of a key while it lives
/// (the same traffic keyed and not, nothing pruned).
pub struct Keys {
    pub soak: Retention,
    pub unkeyed: Retention,
    pub keyed: Retention,
}

impl Keys {
    /// Disk per live idempotency key: the keyed run's data dir less the unkeyed one's, per key.
    pub fn bytes_per_key(&self) -> Option<f64> {
        let (_, with, _) = self.keyed.last()?;
        let (_, without, _) = self.unkeyed.last()?;
        (self.keyed.acked > 0).then(|| (with as f64 - without as f64) / self.keyed.acked as f64)
    }

    /// The keys' own tables per key at the end of the keyed run (keys live apart from the
    /// log, so this is their whole cost on disk, with none of the log's run-to-run spread).
    pub fn keys_db_per_key(&self) -> Option<f64> {
        (self.keyed.acked > 0).then(|| self.keyed.keys_bytes as f64 / self.keyed.acked as f64)
    }
}

pub async fn keys(opts: &Opts) -> Result<Keys> {
    let run = |keyed, seconds, retention_s| Soak {
        keyed,
        seconds,
        retention_s,
    };
    eprintln!("  keyed, storage.retention = {} s:", opts.retention_s);
    let soak = retention(opts, run(true, opts.keys_s, Some(opts.retention_s))).await?;
    let marginal = opts.keys_marginal_s;
    eprintln!(
        "  a live key's cost: {marginal} s unkeyed, then {marginal} s keyed, retention 30 days:"
    );
    let unkeyed = retention(opts, run(false, marginal, None)).await?;
    let keyed = retention(opts, run(true, marginal, None)).await?;
    Ok(Keys {
        soak,
        unkeyed,
        keyed,
    })
}

/// Runs `soak`, sampling the data dir and herald's RSS.
pub async fn retention(opts: &Opts, soak: Soak) -> Result<Retention> {
    phases::settle_disk().await;
    let Soak {
        keyed,
        seconds,
        retention_s,
    } = soak;
    let storage = match retention_s {
        Some(r) => format!("{}\nretention = \"{r}s\"", opts.storage()),
        None => opts.storage(),
    };
    let retention_s = retention_s.unwrap_or(30.0 * 86_400.0);
    let mut herald = Herald::start_in(&opts.herald, new_dir()?, &storage).await?;
    let receiver = Receiver::start().await?;
    herald.create_endpoint(ACCOUNT, &receiver.url()).await?;
    let counters = Arc::new(Counters::default());
    let dur = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let rate = opts.retention_rate;
    let driver = {
        let base = herald.base_url();
        let counters = counters.clone();
        tokio::spawn(async move {
            let batches = drive::Batches {
                account: ACCOUNT,
                size: 100,
                keyed,
            };
            drive::paced_batches(&[base], batches, rate, start, dur, counters).await;
        })
    };
    let mut samples = Vec::new();
    let mut rss = Vec::new();
    let mut keys_bytes = 0;
    let every = Duration::from_secs_f64((retention_s / 4.0).clamp(0.5, 15.0));
    while start.elapsed() < dur {
        tokio::time::sleep(every).await;
        let t = start.elapsed().as_secs_f64();
        let bytes = herald.data_bytes().1;
        let resident = herald.rss().unwrap_or(0);
        eprintln!(
            "    t={t:>5.1}s  data dir {:.1} MiB  RSS {:.1} MiB",
            bytes as f64 / 1048576.0,
            resident as f64 / 1048576.0
        );
        samples.push((t, bytes));
        rss.push(resident);
        keys_bytes = herald.keys_bytes().1;
    }
    driver.await?;
    herald.stop(true).await?;
    Ok(Retention {
        retention_s,
        rate,
        samples,
        rss,
        delivered: receiver.arrivals.unique(),
        acked: counters.acked.load(std::sync::atomic::Ordering::Relaxed),
        keys_bytes,
    })
}
