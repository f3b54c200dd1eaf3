//! The results: a table for people (stdout), or one JSON object with `--json`.

use serde_json::{json, Value};

use crate::phases::{EndToEnd, Ingest, Latency, Usage};
use crate::scale::{Backlog, History, Keys, Retention};
use crate::{Machine, Opts};

/// Targets from the issue.
pub const SINGLE_TARGET: f64 = 8_000.0;
pub const BATCH_TARGET: f64 = 50_000.0;
pub const E2E_TARGET: f64 = 5_000.0;
pub const P99_TARGET_MS: f64 = 25.0;
pub const ISOLATION_TARGET: f64 = 0.90;
/// Deliveries a second to an endpoint ordered with 100 keys.
pub const ORDERED_TARGET: f64 = 3_000.0;
pub const BACKLOG_RSS_TARGET: u64 = 128 << 20;
/// The backlog the RSS target is stated for.
pub const BACKLOG_TARGET_SIZE: u64 = 1_000_000;
pub const HEALTHZ_TARGET_S: f64 = 5.0;
/// With a full log, ingest and end-to-end keep at least this share of the empty-store figures.
pub const HISTORY_TARGET: f64 = 0.80;
/// An account's first page of the delivery log (the portal's log view), at its p95.
pub const ACCOUNT_LOG_TARGET_MS: f64 = 50.0;
pub const HISTORY_TARGET_SIZE: u64 = 5_000_000;
/// Once retention applies, the data dir grows by at most this share over the rest of the phase
/// (sled reuses freed space segment by segment, so the size steps up and down a little; without
/// retention it would grow by half the span again).
pub const RETENTION_FLAT: f64 = 0.20;
/// Disk per idempotency key.
pub const KEY_BYTES_TARGET: f64 = 64.0;
/// After this long of keyed traffic (every event keyed, retention 60 s, 2,000/s) the data dir
/// and RSS stay within the two targets below.
pub const KEYS_SOAK_S: f64 = 600.0;
pub const KEYS_DISK_TARGET: u64 = 400_000_000;
pub const KEYS_RSS_TARGET: u64 = 160 * 1024 * 1024;

/// Cores used by other processes during a phase above which its figures are suspect.
const BUSY_MACHINE: f64 = 0.25;

#[derive(Default)]
pub struct Results {
    pub single: Option<Ingest>,
    pub single_no_endpoint: Option<Ingest>,
    pub batch: Option<Ingest>,
    pub batch_no_endpoint: Option<Ingest>,
    pub e2e: Option<EndToEnd>,
    pub latency: Option<Latency>,
    pub isolation: Option<EndToEnd>,
    /// Like `isolation`, with a second endpoint that answers: what the fan-out alone costs.
    pub isolation_control: Option<EndToEnd>,
    /// To an endpoint ordered by a payload field with 100 keys.
    pub ordered_keys: Option<EndToEnd>,
    /// To an endpoint ordered as one sequence: one round trip per delivery.
    pub ordered_one: Option<EndToEnd>,
    pub backlog: Option<Backlog>,
    pub history: Option<History>,
    pub retention: Option<Retention>,
    /// The retention traffic with every event keyed, and a live key's cost.
    pub keys: Option<Keys>,
    pub elapsed_s: f64,
}

impl Results {
    fn usages(&self) -> Vec<(&'static str, &Usage)> {
        let ingests = [
            ("single ingest", &self.single),
            ("single ingest, no endpoint", &self.single_no_endpoint),
            ("batch ingest", &self.batch),
            ("batch ingest, no endpoint", &self.batch_no_endpoint),
        ];
        let mut out: Vec<_> = ingests
            .into_iter()
            .filter_map(|(n, r)| r.as_ref().map(|r| (n, &r.usage)))
            .collect();
        if let Some(r) = &self.e2e {
            out.push(("end-to-end", &r.usage));
        }
        if let Some(r) = &self.latency {
            out.push(("latency", &r.usage));
        }
        if let Some(r) = &self.isolation {
            out.push(("isolation (dead endpoint)", &r.usage));
        }
        if let Some(r) = &self.isolation_control {
            out.push(("isolation control (2 healthy)", &r.usage));
        }
        if let Some(r) = &self.ordered_keys {
            out.push(("ordered, 100 keys", &r.usage));
        }
        if let Some(r) = &self.ordered_one {
            out.push(("ordered, one key", &r.usage));
        }
        if let Some(h) = &self.history {
            out.push(("history, empty: single ingest", &h.empty.0.usage));
            out.push(("history, empty: end-to-end", &h.empty.1.usage));
            out.push(("history, full: single ingest", &h.full.0.usage));
            out.push(("history, full: end-to-end", &h.full.1.usage));
        }
        out
    }

    /// History figures as shares of the empty store's: (single ingest, end-to-end).
    fn history_ratios(&self) -> Option<(f64, f64)> {
        let h = self.history.as_ref()?;
        let ((single, e2e), (s, e)) = (&h.empty, &h.full);
        if single.events_per_s <= 0.0 || e2e.deliveries_per_s <= 0.0 {
            return None;
        }
        Some((
            s.events_per_s / single.events_per_s,
            e.deliveries_per_s / e2e.deliveries_per_s,
        ))
    }

    /// Growth of the data dir once retention applies: from 1.5 retention periods to the end.
    fn retention_growth(&self) -> Option<(u64, u64, f64)> {
        let r = self.retention.as_ref()?;
        let from = r.at(r.retention_s * 1.5)?;
        let to = r.samples.last()?.1;
        (from > 0).then(|| (from, to, to as f64 / from as f64 - 1.0))
    }

    fn peak_rss(&self) -> Option<u64> {
        self.usages().iter().filter_map(|(_, u)| u.peak_rss).max()
    }

    /// Allocated data-dir bytes per delivered event, from the end-to-end phase.
    fn disk_per_event(&self) -> Option<f64> {
        let e = self.e2e.as_ref()?;
        let (_, allocated) = e.disk?;
        (e.delivered > 0).then(|| allocated as f64 / e.delivered as f64)
    }

    fn isolation_ratio(&self) -> Option<f64> {
        let (base, dead) = (self.e2e.as_ref()?, self.isolation.as_ref()?);
        (base.deliveries_per_s > 0.0).then(|| dead.deliveries_per_s / base.deliveries_per_s)
    }

    /// (figure, target, measured, met) for every target that was measured.
    /// `met` is `None` for a target stated for a bigger size than this run's (a `--quick`
    /// backlog or history): measured, not judged.
    fn verdicts(&self) -> Vec<(&'static str, String, f64, Option<bool>)> {
        let mut v = Vec::new();
        if let Some(r) = &self.single {
            let t = format!("≥ {}/s", thousands(SINGLE_TARGET));
            v.push((
                "single_ingest_per_s",
                t,
                r.events_per_s,
                Some(r.events_per_s >= SINGLE_TARGET),
            ));
        }
        if let Some(r) = &self.batch {
            let t = format!("≥ {}/s", thousands(BATCH_TARGET));
            v.push((
                "batch_ingest_per_s",
                t,
                r.events_per_s,
                Some(r.events_per_s >= BATCH_TARGET),
            ));
        }
        if let Some(r) = &self.e2e {
            let t = format!("≥ {}/s", thousands(E2E_TARGET));
            let d = r.deliveries_per_s;
            v.push(("end_to_end_per_s", t, d, Some(d >= E2E_TARGET)));
        }
        if let Some(r) = &self.latency {
            let t = format!("≤ {P99_TARGET_MS} ms");
            let ok = r.ms[2] <= P99_TARGET_MS && r.missing == 0;
            v.push(("latency_p99_ms", t, r.ms[2], Some(ok)));
        }
        if let Some(ratio) = self.isolation_ratio() {
            let t = format!("≥ {:.0} %", ISOLATION_TARGET * 100.0);
            v.push(("isolation_ratio", t, ratio, Some(ratio >= ISOLATION_TARGET)));
        }
        if let Some(r) = &self.ordered_keys {
            let t = format!("≥ {}/s", thousands(ORDERED_TARGET));
            let d = r.deliveries_per_s;
            v.push(("ordered_100_keys_per_s", t, d, Some(d >= ORDERED_TARGET)));
        }
        if let Some(b) = &self.backlog {
            let judged = |ok: bool| (b.pending >= BACKLOG_TARGET_SIZE).then_some(ok);
            let at = format!(" at {} pending", thousands(BACKLOG_TARGET_SIZE as f64));
            if let Some(rss) = b.peak_rss {
                let t = format!("≤ {}{at}", mib(BACKLOG_RSS_TARGET));
                let ok = judged(rss <= BACKLOG_RSS_TARGET);
                v.push(("backlog_peak_rss_bytes", t, rss as f64, ok));
            }
            let s = b.healthz_after_restart.as_secs_f64();
            let t = format!("≤ {HEALTHZ_TARGET_S} s{at}");
            v.push((
                "healthz_after_restart_s",
                t,
                s,
                judged(s <= HEALTHZ_TARGET_S),
            ));
        }
        if let (Some((single, e2e)), Some(h)) = (self.history_ratios(), &self.history) {
            let t = format!(
                "≥ {:.0} % at {} attempts",
                HISTORY_TARGET * 100.0,
                thousands(HISTORY_TARGET_SIZE as f64)
            );
            let judged = |ok: bool| (h.attempts >= HISTORY_TARGET_SIZE).then_some(ok);
            let single_ok = judged(single >= HISTORY_TARGET);
            v.push(("history_single_ratio", t.clone(), single, single_ok));
            v.push(("history_e2e_ratio", t, e2e, judged(e2e >= HISTORY_TARGET)));
            if let Some(log) = &h.account_log {
                let t = format!(
                    "≤ {ACCOUNT_LOG_TARGET_MS:.0} ms at {} deliveries",
                    thousands(HISTORY_TARGET_SIZE as f64)
                );
                let ok = judged(log.p95_ms <= ACCOUNT_LOG_TARGET_MS);
                v.push(("account_log_p95_ms", t, log.p95_ms, ok));
            }
        }
        if let Some((_, _, growth)) = self.retention_growth() {
            let t = format!("≤ +{:.0} %", RETENTION_FLAT * 100.0);
            v.push((
                "retention_disk_growth",
                t,
                growth,
                Some(growth <= RETENTION_FLAT),
            ));
        }
        if let Some(k) = &self.keys {
            if let Some(per_key) = k.keys_db_per_key() {
                let t = format!("≤ {KEY_BYTES_TARGET:.0} bytes");
                v.push((
                    "idempotency_key_bytes",
                    t,
                    per_key,
                    Some(per_key <= KEY_BYTES_TARGET),
                ));
            }
            if let Some((t, disk, rss)) = k.soak.last() {
                // Judged once the soak ran its 10 minutes (the last sample may land a little
                // before the end).
                let long = t >= KEYS_SOAK_S * 0.95;
                let target = format!("≤ {} MB after 10 min", KEYS_DISK_TARGET / 1_000_000);
                v.push((
                    "keys_disk_bytes",
                    target,
                    disk as f64,
                    long.then_some(disk <= KEYS_DISK_TARGET),
                ));
                let target = format!("≤ {} after 10 min", mib(KEYS_RSS_TARGET));
                v.push((
                    "keys_rss_bytes",
                    target,
                    rss as f64,
                    long.then_some(rss <= KEYS_RSS_TARGET),
                ));
            }
        }
        v
    }
}

fn mark(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "✓",
        Some(false) => "✗",
        None => "(not judged: smaller run)",
    }
}

/// 12345.6 → "12,346".
pub fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Prints the table to stdout.
pub fn print_table(opts: &Opts, machine: &Machine, r: &Results) {
    println!();
    println!(
        "herald load benchmark{}{} — {} s per phase, {} cores, Linux {}, {}",
        if opts.quick { " (--quick)" } else { "" },
        match (&opts.postgres, opts.nodes) {
            (None, _) => String::new(),
            (Some(_), 1) => ", cluster mode on PostgreSQL (one node)".into(),
            (Some(_), n) => format!(", cluster mode on PostgreSQL ({n} nodes)"),
        },
        opts.seconds,
        machine.cores,
        machine.kernel,
        machine.cpu
    );
    println!();
    let mut t = Table::new(r);
    ingest_rows(&mut t, opts, r);
    delivery_rows(&mut t, opts, r);
    resource_rows(&mut t, r);
    ordering_rows(&mut t, r);
    history_rows(&mut t, opts, r);
    retention_rows(&mut t, r);
    t.print();
    println!(
        "CPU during each phase (cores busy; the machine has {}):",
        machine.cores
    );
    for (name, u) in r.usages() {
        let commits = u.commits.map_or(String::new(), |(per_s, events, ms)| {
            format!("  commits {per_s:.0}/s × {events:.0} events, flush+fsync {ms:.1} ms")
        });
        println!(
            "  {:<30} herald {:.2}  bench {:.2}  others {:.2}{}  RSS {:>9}{commits}",
            name,
            u.herald_cores,
            u.bench_cores,
            u.other_cores,
            if u.other_cores > BUSY_MACHINE {
                "!"
            } else {
                " "
            },
            u.peak_rss.map_or("?".into(), mib)
        );
    }
    if r.usages().iter().any(|(_, u)| u.other_cores > BUSY_MACHINE) {
        println!();
        println!(
            "warning: other processes used more than {BUSY_MACHINE} cores during the phases \
             marked !; their figures understate herald. Rerun on a quiet machine."
        );
    }
    if r.isolation.is_some() && opts.seconds < 12.0 {
        println!();
        println!(
            "note: the dead endpoint's attempts time out after 5 s, 8 at a time, so its circuit \
             breaker opens only ~10 s into the isolation phase; run with --seconds 20 or more to \
             see isolation with the breaker open."
        );
    }
    let verdicts = r.verdicts();
    let met = verdicts.iter().filter(|v| v.3 == Some(true)).count();
    let judged = verdicts.iter().filter(|v| v.3.is_some()).count();
    println!();
    println!(
        "targets met: {met} of {judged} judged   (total {:.0} s)",
        r.elapsed_s
    );
}

/// The table's rows: (figure, measured, target, whether met), and the verdicts they show.
struct Table {
    rows: Vec<[String; 4]>,
    verdicts: Vec<(&'static str, String, f64, Option<bool>)>,
}

impl Table {
    fn new(r: &Results) -> Table {
        Table {
            rows: Vec::new(),
            verdicts: r.verdicts(),
        }
    }

    /// The target of the verdict `name` and its mark.
    fn verdict(&self, name: &str) -> Option<(String, &'static str)> {
        self.verdicts
            .iter()
            .find(|v| v.0 == name)
            .map(|v| (v.1.clone(), mark(v.3)))
    }

    fn row(&mut self, figure: String, measured: String, v: Option<(String, &str)>) {
        let (t, m) = v.unwrap_or_default();
        self.rows.push([figure, measured, t, m.to_string()]);
    }

    fn print(&self) {
        let widths: Vec<usize> = (0..4)
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let pad =
            |s: &str, w: usize| format!("{s}{}", " ".repeat(w.saturating_sub(s.chars().count())));
        println!(
            "{}  {}  target",
            pad("figure", widths[0]),
            pad("measured", widths[1])
        );
        println!("{}", "-".repeat(widths.iter().sum::<usize>() + 8));
        for r in &self.rows {
            let target = format!("{} {}", r[2], r[3]);
            println!(
                "{}  {}  {}",
                pad(&r[0], widths[0]),
                pad(&r[1], widths[1]),
                target.trim_end()
            );
        }
        println!();
    }
}

/// Ingest, one event a request and in batches.
fn ingest_rows(t: &mut Table, opts: &Opts, r: &Results) {
    if let Some(i) = &r.single {
        t.row(
            format!("single ingest, {} clients (202/s)", opts.clients),
            format!("{}/s", thousands(i.events_per_s)),
            t.verdict("single_ingest_per_s"),
        );
        t.row(
            "  ack latency p50 / p99".into(),
            format!("{:.1} / {:.1} ms", i.ack_p50_ms, i.ack_p99_ms),
            None,
        );
        t.row(
            "  deliveries meanwhile".into(),
            format!("{}/s", thousands(i.arrived_per_s)),
            None,
        );
    }
    if let Some(i) = &r.single_no_endpoint {
        t.row(
            "  same, account without endpoint".into(),
            format!("{}/s", thousands(i.events_per_s)),
            None,
        );
    }
    if let Some(i) = &r.batch {
        t.row(
            format!(
                "batch ingest, {}×{} (events/s)",
                opts.batch_clients, opts.batch_size
            ),
            format!("{}/s", thousands(i.events_per_s)),
            t.verdict("batch_ingest_per_s"),
        );
        t.row(
            "  deliveries meanwhile".into(),
            format!("{}/s", thousands(i.arrived_per_s)),
            None,
        );
    }
    if let Some(i) = &r.batch_no_endpoint {
        t.row(
            "  same, account without endpoint".into(),
            format!("{}/s", thousands(i.events_per_s)),
            None,
        );
    }
}

/// Deliveries end to end, and the latency from ingest to arrival.
fn delivery_rows(t: &mut Table, opts: &Opts, r: &Results) {
    if let Some(e) = &r.e2e {
        t.row(
            "end-to-end deliveries/s, one receiver".into(),
            format!("{}/s", thousands(e.deliveries_per_s)),
            t.verdict("end_to_end_per_s"),
        );
        t.row(
            format!(
                "  ingest meanwhile (offered {}/s in batches of {})",
                thousands(opts.e2e_rate),
                opts.e2e_batch
            ),
            format!("{}/s", thousands(e.ingest_per_s)),
            None,
        );
        t.row(
            "  backlog when ingest stopped".into(),
            thousands(e.backlog as f64),
            None,
        );
        if let Some(n) = e.statements_per_delivery {
            t.row(
                "  SQL statements per delivered event".into(),
                format!("{n:.2}"),
                None,
            );
        }
        if let Some(d) = e.drain_per_s {
            t.row(
                "  drain rate, no ingest".into(),
                format!("{}/s", thousands(d)),
                None,
            );
        }
    }
    if let Some(l) = &r.latency {
        t.row(
            format!(
                "ingest→arrival @ {}/s: p50 / p90",
                thousands(l.offered_per_s)
            ),
            format!("{:.1} / {:.1} ms", l.ms[0], l.ms[1]),
            None,
        );
        t.row(
            "  p99".into(),
            format!("{:.1} ms", l.ms[2]),
            t.verdict("latency_p99_ms"),
        );
        t.row(
            "  p99.9 / max".into(),
            format!("{:.1} / {:.1} ms", l.ms[3], l.ms[4]),
            None,
        );
        t.row(
            "  measured / missing / errors".into(),
            format!("{} / {} / {}", l.measured, l.missing, l.errors),
            None,
        );
    }
}

/// Memory, disk, and a dead endpoint's effect on the others.
fn resource_rows(t: &mut Table, r: &Results) {
    if let Some(rss) = r.peak_rss() {
        t.row("herald peak RSS (max over phases)".into(), mib(rss), None);
    }
    if let (Some(d), Some(e)) = (r.disk_per_event(), &r.e2e) {
        let of = format!(
            "{} of {} delivered",
            thousands(e.delivered as f64),
            thousands(e.ingested as f64)
        );
        t.row(
            format!("disk bytes per delivered event ({of})"),
            thousands(d),
            None,
        );
    }
    if let (Some(base), Some(dead)) = (&r.e2e, &r.isolation) {
        t.row(
            "isolation: healthy e2e without / with dead".into(),
            format!(
                "{}/s / {}/s",
                thousands(base.deliveries_per_s),
                thousands(dead.deliveries_per_s)
            ),
            None,
        );
        if let Some(ratio) = r.isolation_ratio() {
            t.row(
                "  ratio".into(),
                format!("{:.0} %", ratio * 100.0),
                t.verdict("isolation_ratio"),
            );
        }
        if let Some(control) = &r.isolation_control {
            let c = control.deliveries_per_s;
            let vs = if c > 0.0 {
                format!(
                    " ({:.0} % of it with dead)",
                    dead.deliveries_per_s / c * 100.0
                )
            } else {
                String::new()
            };
            t.row(
                "  control: with a second healthy endpoint".into(),
                format!("{}/s{vs}", thousands(c)),
                None,
            );
        }
    }
}

/// Ordered deliveries and a backlog's drain.
fn ordering_rows(t: &mut Table, r: &Results) {
    if let Some(o) = &r.ordered_keys {
        t.row(
            "ordered endpoint, 100 keys: deliveries/s".into(),
            format!("{}/s", thousands(o.deliveries_per_s)),
            t.verdict("ordered_100_keys_per_s"),
        );
    }
    if let Some(o) = &r.ordered_one {
        // Offered more than one sequence carries: its pace is one delivery per round trip
        // (attempt, record, next), under ingest and in the drain without it.
        let rtt = |pace: f64| if pace > 0.0 { 1000.0 / pace } else { 0.0 };
        let under = o.deliveries_per_s;
        t.row(
            "ordered endpoint, one key: deliveries/s (ms each)".into(),
            format!("{}/s ({:.2} ms)", thousands(under), rtt(under)),
            None,
        );
        if let Some(d) = o.drain_per_s {
            t.row(
                "  drain, no ingest".into(),
                format!("{}/s ({:.2} ms)", thousands(d), rtt(d)),
                None,
            );
        }
    }
    if let Some(b) = &r.backlog {
        t.row(
            format!(
                "backlog: peak RSS with {} pending",
                thousands(b.pending as f64)
            ),
            b.peak_rss.map_or("?".into(), mib),
            t.verdict("backlog_peak_rss_bytes"),
        );
        t.row(
            "  ingest rate while it piled up".into(),
            format!("{}/s", thousands(b.ingest_per_s)),
            None,
        );
        t.row(
            "  after kill -9: /healthz 200 after".into(),
            format!("{:.2} s", b.healthz_after_restart.as_secs_f64()),
            t.verdict("healthz_after_restart_s"),
        );
        t.row(
            "  pending found / peak RSS after the restart".into(),
            format!(
                "{} / {}",
                thousands(b.pending_after_restart as f64),
                b.peak_rss_after_restart.map_or("?".into(), mib)
            ),
            None,
        );
    }
}

/// The log with a large history: ingest, deliveries and an account's log.
fn history_rows(t: &mut Table, opts: &Opts, r: &Results) {
    if let Some(h) = &r.history {
        t.row(
            format!(
                "history: {} attempts in the log ({} on disk)",
                thousands(h.attempts as f64),
                mib(h.disk_bytes)
            ),
            format!("prefilled in {:.0} s", h.prefill_s),
            None,
        );
        let ratios = r.history_ratios();
        let vs = |empty: f64, full: f64, ratio: Option<f64>| {
            let pct = ratio.map_or(String::new(), |x| format!(" ({:.0} %)", x * 100.0));
            format!("{}/s → {}/s{pct}", thousands(empty), thousands(full))
        };
        t.row(
            format!("  single ingest, {} clients: empty → full", opts.clients),
            vs(
                h.empty.0.events_per_s,
                h.full.0.events_per_s,
                ratios.map(|r| r.0),
            ),
            t.verdict("history_single_ratio"),
        );
        t.row(
            format!(
                "  end-to-end (offered {}/s): empty → full",
                thousands(h.e2e_rate)
            ),
            vs(
                h.empty.1.deliveries_per_s,
                h.full.1.deliveries_per_s,
                ratios.map(|r| r.1),
            ),
            t.verdict("history_e2e_ratio"),
        );
        if let Some(log) = &h.account_log {
            t.row(
                format!(
                    "  an account's log ({} of them), first page: p50 / p95",
                    log.deliveries
                ),
                format!(
                    "{:.1} / {:.1} ms (max {:.1})",
                    log.p50_ms, log.p95_ms, log.max_ms
                ),
                t.verdict("account_log_p95_ms"),
            );
        }
    }
}

/// Disk under retention, and idempotency keys over time.
fn retention_rows(t: &mut Table, r: &Results) {
    if let Some(ret) = &r.retention {
        if let Some((from, to, growth)) = r.retention_growth() {
            t.row(
                format!(
                    "retention {} s, {}/s: disk at 1.5× / {}× retention",
                    ret.retention_s,
                    thousands(ret.rate),
                    crate::scale::RETENTION_SPAN
                ),
                format!(
                    "{} / {} ({:+.1} %, without retention {:+.0} %)",
                    mib(from),
                    mib(to),
                    growth * 100.0,
                    (crate::scale::RETENTION_SPAN / 1.5 - 1.0) * 100.0
                ),
                t.verdict("retention_disk_growth"),
            );
        }
    }
    if let Some(k) = &r.keys {
        if let Some((after, disk, rss)) = k.soak.last() {
            t.row(
                format!(
                    "every event keyed, retention {} s, {}/s: data dir after {after:.0} s",
                    k.soak.retention_s,
                    thousands(k.soak.rate)
                ),
                format!("{:.0} MB", disk as f64 / 1e6),
                t.verdict("keys_disk_bytes"),
            );
            t.row(
                "  herald RSS then".into(),
                mib(rss),
                t.verdict("keys_rss_bytes"),
            );
        }
        if let Some(marginal) = k.bytes_per_key() {
            t.row(
                format!(
                    "  data dir per key ({} keyed events vs as many unkeyed)",
                    thousands(k.keyed.acked as f64)
                ),
                format!("{marginal:.0} bytes"),
                None,
            );
        }
        if let Some(per_key) = k.keys_db_per_key() {
            t.row(
                format!(
                    "  disk per live idempotency key (keys' tables / {} keys)",
                    thousands(k.keyed.acked as f64)
                ),
                format!("{per_key:.0} bytes"),
                t.verdict("idempotency_key_bytes"),
            );
            t.row(
                format!(
                    "  24 h of keys at {}/s (a retention of a day or more keeps them 24 h)",
                    thousands(k.keyed.rate)
                ),
                format!("{:.1} GB", per_key * k.keyed.rate * 86_400.0 / 1e9),
                None,
            );
        }
    }
}

fn usage_json(u: &Usage) -> Value {
    let commits = u.commits.map(|(per_s, events, ms)| {
        json!({"per_s": per_s, "events_per_commit": events, "flush_fsync_ms": ms})
    });
    json!({"herald_cores": u.herald_cores, "bench_cores": u.bench_cores, "other_cores": u.other_cores,
           "peak_rss_bytes": u.peak_rss, "commits": commits})
}

fn ingest_json(i: &Option<Ingest>) -> Value {
    i.as_ref().map_or(Value::Null, |i| {
        json!({
            "events_per_s": i.events_per_s,
            "errors": i.errors,
            "ack_p50_ms": i.ack_p50_ms,
            "ack_p99_ms": i.ack_p99_ms,
            "deliveries_per_s": i.arrived_per_s,
            "usage": usage_json(&i.usage),
        })
    })
}

fn e2e_json(e: &Option<EndToEnd>) -> Value {
    e.as_ref().map_or(Value::Null, |e| {
        json!({
            "deliveries_per_s": e.deliveries_per_s,
            "ingest_per_s": e.ingest_per_s,
            "backlog": e.backlog,
            "drain_per_s": e.drain_per_s,
            "delivered": e.delivered,
            "ingested": e.ingested,
            "disk_apparent_bytes": e.disk.map(|d| d.0),
            "disk_allocated_bytes": e.disk.map(|d| d.1),
            "dead_endpoint_connections": e.dead_connections,
            "statements_per_delivery": e.statements_per_delivery,
            "usage": usage_json(&e.usage),
        })
    })
}

/// The whole result as one JSON object.
pub fn to_json(opts: &Opts, machine: &Machine, r: &Results) -> Value {
    let latency = r.latency.as_ref().map_or(Value::Null, |l| {
        json!({
            "offered_per_s": l.offered_per_s,
            "sent": l.sent,
            "errors": l.errors,
            "measured": l.measured,
            "missing": l.missing,
            "p50_ms": l.ms[0], "p90_ms": l.ms[1], "p99_ms": l.ms[2], "p999_ms": l.ms[3], "max_ms": l.ms[4],
            "usage": usage_json(&l.usage),
        })
    });
    let targets: Vec<Value> = r
        .verdicts()
        .into_iter()
        .map(|(name, target, measured, met)| json!({"name": name, "target": target, "measured": measured, "met": met}))
        .collect();
    json!({
        "machine": {"cores": machine.cores, "kernel": machine.kernel, "cpu": machine.cpu},
        "settings": {
            "quick": opts.quick, "seconds": opts.seconds, "clients": opts.clients,
            "batch_clients": opts.batch_clients, "batch_size": opts.batch_size, "rate": opts.rate,
            "e2e_rate": opts.e2e_rate, "e2e_batch": opts.e2e_batch,
            "backend": if opts.postgres.is_some() { "postgres" } else { "sled" },
            "nodes": opts.nodes,
        },
        "single_ingest": ingest_json(&r.single),
        "single_ingest_no_endpoint": ingest_json(&r.single_no_endpoint),
        "batch_ingest": ingest_json(&r.batch),
        "batch_ingest_no_endpoint": ingest_json(&r.batch_no_endpoint),
        "end_to_end": e2e_json(&r.e2e),
        "latency": latency,
        "isolation": {
            "healthy_with_dead_endpoint": e2e_json(&r.isolation),
            "healthy_with_second_healthy_endpoint": e2e_json(&r.isolation_control),
            "ratio": r.isolation_ratio(),
        },
        "ordered": {
            "keys_100": e2e_json(&r.ordered_keys),
            "one_key": e2e_json(&r.ordered_one),
        },
        "backlog": r.backlog.as_ref().map(|b| json!({
            "pending": b.pending,
            "ingest_per_s": b.ingest_per_s,
            "peak_rss_bytes": b.peak_rss,
            "healthz_after_restart_s": b.healthz_after_restart.as_secs_f64(),
            "pending_after_restart": b.pending_after_restart,
            "peak_rss_after_restart_bytes": b.peak_rss_after_restart,
        })),
        "history": r.history.as_ref().map(|h| json!({
            "attempts": h.attempts,
            "prefill_s": h.prefill_s,
            "disk_bytes": h.disk_bytes,
            "end_to_end_offered_per_s": h.e2e_rate,
            "empty": {"single_ingest": ingest_json(&Some(h.empty.0.clone())), "end_to_end": e2e_json(&Some(h.empty.1.clone()))},
            "full": {"single_ingest": ingest_json(&Some(h.full.0.clone())), "end_to_end": e2e_json(&Some(h.full.1.clone()))},
            "ratios": r.history_ratios().map(|(s, e)| json!({"single_ingest": s, "end_to_end": e})),
            "account_log": h.account_log.as_ref().map(|l| json!({
                "deliveries": l.deliveries, "p50_ms": l.p50_ms, "p95_ms": l.p95_ms, "max_ms": l.max_ms,
            })),
        })),
        "retention": r.retention.as_ref().map(|x| json!({
            "retention_s": x.retention_s,
            "offered_per_s": x.rate,
            "delivered": x.delivered,
            "samples": x.samples.iter().map(|(t, b)| json!({"t_s": t, "allocated_bytes": b})).collect::<Vec<_>>(),
            "growth_after_retention": r.retention_growth().map(|g| g.2),
        })),
        "keys": r.keys.as_ref().map(|k| json!({
            "retention_s": k.soak.retention_s,
            "offered_per_s": k.soak.rate,
            "delivered": k.soak.delivered,
            "samples": k.soak.samples.iter().zip(&k.soak.rss).map(|((t, b), rss)| json!({"t_s": t, "allocated_bytes": b, "rss_bytes": rss})).collect::<Vec<_>>(),
            "marginal": {"keyed_bytes": k.keyed.last().map(|l| l.1), "unkeyed_bytes": k.unkeyed.last().map(|l| l.1), "keys": k.keyed.acked},
            "bytes_per_key": k.keys_db_per_key(),
            "data_dir_bytes_per_key": k.bytes_per_key(),
            "keys_db_bytes": k.keyed.keys_bytes,
        })),
        "peak_rss_bytes": r.peak_rss(),
        "disk_bytes_per_delivered_event": r.disk_per_event(),
        "targets": targets,
        "elapsed_s": r.elapsed_s,
    })
}

/// A setup's name in `--compare`'s table.
pub fn setup_name(opts: &Opts) -> String {
    match (&opts.postgres, opts.nodes) {
        (None, _) => "sled".into(),
        (Some(_), 1) => "PostgreSQL, 1 node".into(),
        (Some(_), n) => format!("PostgreSQL, {n} nodes"),
    }
}

/// `--compare`'s figures: a row per figure, a column per setup ("—" where a setup has none).
fn comparison_rows(runs: &[(Opts, Results)]) -> Vec<(String, Vec<Option<String>>)> {
    type Figure = fn(&Results) -> Option<String>;
    let figures: Vec<(&str, Figure)> = vec![
        ("single ingest (events/s)", |r| {
            r.single.as_ref().map(|i| thousands(i.events_per_s))
        }),
        ("  ack p99", |r| {
            r.single.as_ref().map(|i| format!("{:.1} ms", i.ack_p99_ms))
        }),
        ("batch ingest (events/s)", |r| {
            r.batch.as_ref().map(|i| thousands(i.events_per_s))
        }),
        ("end-to-end (deliveries/s)", |r| {
            r.e2e.as_ref().map(|e| thousands(e.deliveries_per_s))
        }),
        ("  drain after the load (deliveries/s)", |r| {
            r.e2e.as_ref().and_then(|e| e.drain_per_s.map(thousands))
        }),
        ("  SQL statements per delivered event", |r| {
            r.e2e
                .as_ref()
                .and_then(|e| e.statements_per_delivery.map(|n| format!("{n:.2}")))
        }),
        ("  herald CPU (cores, first node)", |r| {
            r.e2e
                .as_ref()
                .map(|e| format!("{:.2}", e.usage.herald_cores))
        }),
        ("ingest→arrival p50 / p99", |r| {
            r.latency
                .as_ref()
                .map(|l| format!("{:.1} / {:.1} ms", l.ms[0], l.ms[2]))
        }),
        ("herald peak RSS (first node)", |r| r.peak_rss().map(mib)),
    ];
    figures
        .into_iter()
        .map(|(name, f)| {
            (
                name.to_string(),
                runs.iter().map(|(_, r)| f(r)).collect::<Vec<_>>(),
            )
        })
        .filter(|(_, cells)| cells.iter().any(Option::is_some))
        .collect()
}

/// Prints `--compare`'s table to stdout.
pub fn print_comparison(machine: &Machine, runs: &[(Opts, Results)]) {
    let Some((first, _)) = runs.first() else {
        return;
    };
    println!();
    println!(
        "herald load benchmark, sled and PostgreSQL side by side — {} s per phase, {} cores, \
         Linux {}, {}",
        first.seconds, machine.cores, machine.kernel, machine.cpu
    );
    println!();
    let names: Vec<String> = runs.iter().map(|(o, _)| setup_name(o)).collect();
    let rows = comparison_rows(runs);
    let label = rows
        .iter()
        .map(|(n, _)| n.chars().count())
        .max()
        .unwrap_or(0);
    let widths: Vec<usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            rows.iter()
                .filter_map(|(_, c)| c[i].as_ref().map(|s| s.chars().count()))
                .chain([n.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |first: &str, cells: Vec<&str>| {
        let mut out = format!("{first:<label$}");
        for (cell, w) in cells.iter().zip(&widths) {
            out.push_str(&format!("  {cell:>w$}"));
        }
        println!("{}", out.trim_end());
    };
    line("", names.iter().map(String::as_str).collect());
    for (name, cells) in &rows {
        line(
            name,
            cells.iter().map(|c| c.as_deref().unwrap_or("—")).collect(),
        );
    }
}

/// `--compare`'s results as JSON: each setup's full report, named.
pub fn compare_json(machine: &Machine, runs: &[(Opts, Results)]) -> Value {
    json!({
        "compare": runs
            .iter()
            .map(|(o, r)| json!({"setup": setup_name(o), "report": to_json(o, machine, r)}))
            .collect::<Vec<_>>(),
    })
}
