//! The measurements. Each phase starts a fresh herald on a fresh data dir, so no figure carries
//! another phase's backlog, cache or files.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::drive::{self, Counters, Sample};
use crate::herald::{proc_cpu_seconds, Herald};
use crate::receiver::{DeadReceiver, Receiver};
use crate::Opts;

/// The account every phase posts to.
pub const ACCOUNT: &str = "a1";

/// Where the account's deliveries go.
#[derive(Clone, Copy, PartialEq)]
pub enum Target {
    /// No endpoint: each event gets one `no_endpoint` record and nothing is sent.
    None,
    /// One endpoint pointing at the fast receiver.
    Receiver,
    /// The fast receiver plus a second endpoint at another fast receiver (the isolation control).
    ReceiverAndHealthy,
    /// The fast receiver plus a second endpoint that never answers.
    ReceiverAndDead,
    /// One endpoint at the fast receiver, ordered by the payload field `shard` (100 keys), or
    /// as one sequence (`None`).
    Ordered(Option<&'static str>),
}

/// Resource use over a phase's load.
#[derive(Default, Clone)]
pub struct Usage {
    /// herald's CPU, in cores (1.0 = one core busy all the time).
    pub herald_cores: f64,
    /// This process's CPU (clients and receivers), in cores.
    pub bench_cores: f64,
    /// Everything else on the machine meanwhile, in cores: figures taken while this is high
    /// are not herald's alone.
    pub other_cores: f64,
    /// herald's VmHWM at the end of the phase, in bytes.
    pub peak_rss: Option<u64>,
    /// Group commits per second, events per commit, and ms per flush + fsync (from /metrics).
    pub commits: Option<(f64, f64, f64)>,
}

/// Closed-loop ingest (single events or batches).
#[derive(Clone)]
pub struct Ingest {
    pub events_per_s: f64,
    pub errors: u64,
    /// 202 latency of a request, ms.
    pub ack_p50_ms: f64,
    pub ack_p99_ms: f64,
    /// Deliveries arriving at the receiver per second meanwhile.
    pub arrived_per_s: f64,
    pub usage: Usage,
}

/// Sustained end-to-end deliveries to one receiver under batch ingest.
#[derive(Clone)]
pub struct EndToEnd {
    /// Distinct deliveries per second at the healthy receiver over the steady part.
    pub deliveries_per_s: f64,
    /// Events acknowledged per second over the same part.
    pub ingest_per_s: f64,
    /// Acknowledged but not yet delivered when ingest stopped.
    pub backlog: u64,
    /// Deliveries per second while the backlog drained with no ingest (when it was worth it).
    pub drain_per_s: Option<f64>,
    pub delivered: u64,
    /// Events acknowledged over the whole phase.
    pub ingested: u64,
    /// Data dir after a graceful stop: (apparent bytes, allocated bytes).
    pub disk: Option<(u64, u64)>,
    /// Connections the dead endpoint accepted (isolation run only).
    pub dead_connections: Option<u64>,
    pub usage: Usage,
    /// Cluster mode: SQL statements the database ran per event delivered (pg_stat_statements).
    pub statements_per_delivery: Option<f64>,
}

/// Ingest → arrival latency at a fixed offered rate.
pub struct Latency {
    pub offered_per_s: f64,
    pub sent: usize,
    pub errors: u64,
    pub measured: usize,
    /// Acknowledged events that had not arrived when the phase gave up waiting.
    pub missing: usize,
    /// p50, p90, p99, p99.9 and max, in ms.
    pub ms: [f64; 5],
    pub usage: Usage,
}

/// The part of a phase before the steady state: the first fifth, at least half a second.
pub fn warmup(seconds: f64) -> f64 {
    (seconds / 5.0).max(0.5)
}

pub struct Setup {
    pub herald: Herald,
    /// Cluster mode's other nodes (`--nodes`), on the same database; they stop when dropped.
    pub others: Vec<Herald>,
    pub receiver: Receiver,
    /// The second endpoint's fast receiver, when there is one.
    pub _second: Option<Receiver>,
    pub dead: Option<DeadReceiver>,
}

impl Setup {
    /// Where load goes: every node's API, spread round robin.
    pub fn bases(&self) -> Vec<String> {
        std::iter::once(&self.herald)
            .chain(&self.others)
            .map(Herald::base_url)
            .collect()
    }
}

pub async fn setup(opts: &Opts, name: &str, target: Target) -> Result<Setup> {
    settle_disk().await;
    let storage = opts.storage();
    let herald = Herald::start(&opts.herald, &storage).await?;
    let mut others = Vec::new();
    for _ in 1..opts.nodes {
        others.push(Herald::start(&opts.herald, &storage).await?);
    }
    let receiver = Receiver::start().await?;
    let (mut second, mut dead) = (None, None);
    match target {
        Target::None => {}
        Target::Ordered(key) => {
            let ordering = serde_json::json!({"ordering": {"key": key}});
            herald
                .create_endpoint_with(ACCOUNT, &receiver.url(), ordering)
                .await?;
        }
        _ => {
            herald.create_endpoint(ACCOUNT, &receiver.url()).await?;
        }
    }
    if target == Target::ReceiverAndHealthy {
        let r = Receiver::start().await?;
        herald.create_endpoint(ACCOUNT, &r.url()).await?;
        second = Some(r);
    }
    if target == Target::ReceiverAndDead {
        let d = DeadReceiver::start().await?;
        herald.create_endpoint(ACCOUNT, &d.url()).await?;
        dead = Some(d);
    }
    eprintln!(
        "  {name}: herald pid {} at {} (data in a fresh temp dir)",
        herald.pid, herald.addr
    );
    Ok(Setup {
        herald,
        others,
        receiver,
        _second: second,
        dead,
    })
}

/// Waits for the kernel to write back what earlier phases left dirty (gigabytes after the batch
/// phases), so that a phase's fsyncs do not queue behind another phase's writeback.
pub async fn settle_disk() {
    let _ = tokio::task::spawn_blocking(|| std::process::Command::new("sync").status()).await;
}

/// CPU readings at the start of a load, turned into [`Usage`] at its end.
struct CpuMark {
    at: Instant,
    /// herald's commit counters when the mark was taken.
    commits: (f64, f64, f64),
    herald: Option<f64>,
    bench: Option<f64>,
    machine: Option<f64>,
}

impl CpuMark {
    async fn now(herald: &Herald) -> CpuMark {
        CpuMark {
            commits: herald.commits().await.unwrap_or_default(),
            at: Instant::now(),
            herald: herald.cpu_seconds(),
            bench: proc_cpu_seconds("/proc/self/stat"),
            machine: machine_busy_seconds(),
        }
    }

    async fn usage(&self, herald: &Herald) -> Usage {
        let wall = self.at.elapsed().as_secs_f64().max(1e-9);
        let (n0, e0, f0) = self.commits;
        let commits = herald.commits().await.and_then(|(n, events, fsync)| {
            let (n, events, fsync) = (n - n0, events - e0, fsync - f0);
            (n > 0.0).then(|| (n / wall, events / n, fsync * 1000.0 / n))
        });
        let cores = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => (b - a) / wall,
            _ => 0.0,
        };
        let herald_cores = cores(self.herald, herald.cpu_seconds());
        let bench_cores = cores(self.bench, proc_cpu_seconds("/proc/self/stat"));
        let machine_cores = cores(self.machine, machine_busy_seconds());
        Usage {
            herald_cores,
            bench_cores,
            other_cores: (machine_cores - herald_cores - bench_cores).max(0.0),
            peak_rss: herald.peak_rss(),
            commits,
        }
    }
}

/// CPU time the whole machine spent busy so far (all CPUs, /proc/stat), in seconds.
fn machine_busy_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
    let busy = ticks.get(..8)?.iter().sum::<f64>() - ticks[3] - ticks[4];
    Some(busy / 100.0)
}

/// Closed-loop ingest: `clients` clients posting single events (`batch` None) or batches.
pub async fn ingest(
    opts: &Opts,
    name: &str,
    target: Target,
    clients: usize,
    batch: Option<usize>,
) -> Result<Ingest> {
    let mut s = setup(opts, name, target).await?;
    let r = ingest_on(opts, &s, clients, batch).await;
    s.herald.stop(false).await?;
    r
}

/// Closed-loop ingest on a running herald (left running).
pub async fn ingest_on(
    opts: &Opts,
    s: &Setup,
    clients: usize,
    batch: Option<usize>,
) -> Result<Ingest> {
    let counters = Arc::new(Counters::default());
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(opts.seconds);
    let cpu = CpuMark::now(&s.herald).await;
    let sampler = tokio::spawn(drive::sample(
        start,
        until,
        counters.clone(),
        Some(s.receiver.arrivals.clone()),
    ));
    let base = s.bases();
    let mut latencies = match batch {
        Some(n) => drive::closed_batch(&base, ACCOUNT, clients, n, until, counters.clone()).await,
        None => drive::closed_single(&base, ACCOUNT, clients, until, counters.clone()).await,
    };
    let usage = cpu.usage(&s.herald).await;
    let samples = sampler.await?;
    latencies.sort_unstable();
    let ms = |q| drive::quantile(&latencies, q).map_or(0.0, |us| f64::from(us) / 1000.0);
    let steady =
        |f: fn(&Sample) -> u64| drive::rate(&samples, warmup(opts.seconds), opts.seconds, f);
    Ok(Ingest {
        events_per_s: steady(|s| s.acked),
        errors: counters.errors.load(std::sync::atomic::Ordering::Relaxed),
        ack_p50_ms: ms(0.5),
        ack_p99_ms: ms(0.99),
        arrived_per_s: steady(|s| s.arrived),
        usage,
    })
}

/// Batch ingest offered at `opts.e2e_rate` events/s while herald delivers to the receiver (and
/// to the second endpoint of `target`, if any); with the receiver alone, then the drain. Only the
/// first receiver's arrivals count.
pub async fn end_to_end(opts: &Opts, name: &str, target: Target) -> Result<EndToEnd> {
    let dead = target == Target::ReceiverAndDead;
    let mut s = setup(opts, name, target).await?;
    let mut r = end_to_end_on(opts, &s, target == Target::Receiver, opts.e2e_rate).await?;
    // A dead endpoint's attempts hold a graceful stop for the whole grace period.
    s.herald.stop(!dead).await?;
    if target == Target::Receiver {
        r.disk = Some(s.herald.data_bytes());
        if let Some(url) = &opts.postgres {
            let n = crate::postgres::statements(url).await;
            r.statements_per_delivery = n.map(|n| n as f64 / r.delivered.max(1) as f64);
        }
    }
    Ok(r)
}

/// Batch ingest at `rate` on a running herald (left running); with `drain`, then waits for the
/// backlog to drain.
pub async fn end_to_end_on(opts: &Opts, s: &Setup, drain: bool, rate: f64) -> Result<EndToEnd> {
    let arrivals = s.receiver.arrivals.clone();
    let already = arrivals.unique();
    let counters = Arc::new(Counters::default());
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(opts.seconds);
    let cpu = CpuMark::now(&s.herald).await;
    let sampler = tokio::spawn(drive::sample(
        start,
        until,
        counters.clone(),
        Some(arrivals.clone()),
    ));
    let base = s.bases();
    let (size, dur) = (opts.e2e_batch, until - start);
    let batches = drive::Batches {
        account: ACCOUNT,
        size,
        keyed: false,
    };
    drive::paced_batches(&base, batches, rate, start, dur, counters.clone()).await;
    let usage = cpu.usage(&s.herald).await;
    let samples = sampler.await?;
    let steady =
        |f: fn(&Sample) -> u64| drive::rate(&samples, warmup(opts.seconds), opts.seconds, f);
    let acked = counters.acked.load(std::sync::atomic::Ordering::Relaxed);
    let backlog = acked.saturating_sub(arrivals.unique() - already);
    let mut drain_per_s = None;
    if drain {
        let (t0, a0) = (Instant::now(), arrivals.unique());
        let give_up = t0 + Duration::from_secs_f64(opts.drain);
        if backlog > 0 {
            eprintln!("    draining a backlog of {backlog} deliveries");
        }
        while arrivals.unique() - already < acked && Instant::now() < give_up {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A drain of a few hundred deliveries measures start-up, not throughput.
        if backlog >= 2000 {
            let dt = t0.elapsed().as_secs_f64();
            drain_per_s = Some((arrivals.unique() - a0) as f64 / dt);
        }
    }
    let dead_connections = s
        .dead
        .as_ref()
        .map(|d| d.connections.load(std::sync::atomic::Ordering::Relaxed));
    let usage = Usage {
        peak_rss: s.herald.peak_rss(),
        ..usage
    };
    Ok(EndToEnd {
        deliveries_per_s: steady(|s| s.arrived),
        ingest_per_s: steady(|s| s.acked),
        backlog,
        drain_per_s,
        delivered: arrivals.unique() - already,
        ingested: acked,
        disk: None,
        dead_connections,
        statements_per_delivery: None,
        usage,
    })
}

/// Batch ingest at `rate` to an ordered endpoint (`key`: the payload field, or `None` for one
/// sequence), then the drain: how many deliveries a second ordering allows.
pub async fn ordered(
    opts: &Opts,
    name: &str,
    key: Option<&'static str>,
    rate: f64,
) -> Result<EndToEnd> {
    let mut s = setup(opts, name, Target::Ordered(key)).await?;
    let r = end_to_end_on(opts, &s, true, rate).await?;
    s.herald.stop(true).await?;
    Ok(r)
}

/// Single events sent open loop at `opts.rate` per second; each event's time from its send to its
/// first arrival at the receiver (matched by `webhook-id`, the event id of the 202).
pub async fn latency(opts: &Opts, name: &str) -> Result<Latency> {
    let mut s = setup(opts, name, Target::Receiver).await?;
    let arrivals = s.receiver.arrivals.clone();
    let counters = Arc::new(Counters::default());
    let start = Instant::now() + Duration::from_millis(50);
    let dur = Duration::from_secs_f64(opts.seconds);
    let cpu = CpuMark::now(&s.herald).await;
    let sampler = tokio::spawn(drive::sample(
        start,
        start + dur,
        counters.clone(),
        Some(arrivals.clone()),
    ));
    let base = s.bases();
    let paced = drive::open_loop(&base, ACCOUNT, opts.rate, start, dur, counters).await;
    let usage = cpu.usage(&s.herald).await;
    sampler.await?;
    let give_up = Instant::now() + Duration::from_secs_f64(opts.drain.min(5.0));
    while (arrivals.unique() as usize) < paced.sent.len() && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.herald.stop(false).await?;
    let cutoff = start + Duration::from_secs_f64(warmup(opts.seconds));
    let mut missing = 0;
    let mut micros: Vec<u64> = Vec::new();
    let mut csv = String::from("sent_s,latency_ms,event_id\n");
    for (at, id) in paced.sent.iter().filter(|(at, _)| *at >= cutoff) {
        match arrivals.arrived(id) {
            Some(t) => {
                let us = t.saturating_duration_since(*at).as_micros() as u64;
                micros.push(us);
                let sent = at.duration_since(start).as_secs_f64();
                csv += &format!("{sent:.4},{:.3},{id}\n", us as f64 / 1000.0);
            }
            None => missing += 1,
        }
    }
    if let Some(path) = &opts.dump_latency {
        std::fs::write(path, csv)?;
        eprintln!("    per-event latencies written to {}", path.display());
    }
    micros.sort_unstable();
    let ms = |q| drive::quantile(&micros, q).map_or(0.0, |us| us as f64 / 1000.0);
    Ok(Latency {
        offered_per_s: opts.rate,
        sent: paced.sent.len(),
        errors: paced.errors,
        measured: micros.len(),
        missing,
        ms: [ms(0.5), ms(0.9), ms(0.99), ms(0.999), ms(1.0)],
        usage,
    })
}
