//! herald's load benchmark: `cargo bench --bench load -- [--quick] [--json] [options]`.
//!
//! Runs the release herald binary as a child process (a fresh temp config and data dir per
//! phase), delivers to an in-process HTTP/1.1 receiver, drives ingest with keep-alive clients,
//! and prints the figures next to the targets of the issue. Progress goes to stderr, results to
//! stdout. Everything stays on 127.0.0.1. `--help` lists the options.
//!
//! Phases: closed-loop single and batch ingest, end-to-end under paced batch ingest, open-loop
//! latency, isolation from a dead endpoint, an ordered endpoint with 100 keys and with one
//! ([`phases`]); a backlog of pending deliveries with a
//! `kill -9` and restart, a store prefilled with millions of attempts (written through herald's
//! own store code), disk use under steady traffic with a short retention, and with every event
//! keyed ([`scale`]).

#[path = "load/backup.rs"]
mod backup;
#[path = "load/drive.rs"]
mod drive;
#[path = "load/filters.rs"]
mod filters;
#[path = "load/herald.rs"]
mod herald;
#[path = "load/phases.rs"]
mod phases;
#[path = "load/postgres.rs"]
mod postgres;
#[path = "load/receiver.rs"]
mod receiver;
#[path = "load/report.rs"]
mod report;
#[path = "load/scale.rs"]
mod scale;
#[path = "load/svix.rs"]
mod svix;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use phases::Target;
use report::Results;

const USAGE: &str = "\
usage: cargo bench --bench load -- [options]

  --quick              short phases (whole run under a minute)
  --json               print one JSON object instead of the table
  --seconds N          length of each phase's load (default 20, quick 4)
  --clients N          single-event ingest clients (default 64)
  --batch-clients N    batch ingest clients (default 4)
  --batch-size N       events per batch request (default 1000, at most 1000)
  --rate N             offered events/s of the latency phase (default 500)
  --e2e-rate N         events/s offered (in batches) in the end-to-end and isolation phases
                       (default 6000)
  --e2e-batch N        events per batch there (default 100)
  --drain N            seconds to wait for a backlog to drain (default 30, quick 3)
  --backlog N          pending deliveries of the backlog phase (default 1000000, quick 200000)
  --history N          attempts already in the log in the history phase (default 5000000,
                       quick 200000)
  --history-dir DIR    keep the history phase's store in DIR/data, and reuse it if it is there
                       (the prefill takes minutes at the default size)
  --no-fold            prefill the history phase's store without folding it (as herald
                       before storage format 5 kept it)
  --history-accounts N accounts the history prefill spreads its events over, one event of each
                       per commit (default 1); with many, the account index has a row per
                       event until it is packed
  --no-index-pack      prefill without packing the account index (as herald before it did)
  --retention S        storage.retention in the retention phase, seconds (default 60, the least
                       herald takes); the phase runs 3 times as long
  --retention-rate N   events/s offered in the retention phase (default 2000)
  --keys-seconds N     length of the keys phase's soak (default 600): retention traffic with
                       every event keyed
  --keys-marginal N    seconds of each of its two runs that measure a live key's disk cost
                       (default 120, retention 30 days: unkeyed, then keyed)
  --cache-capacity N   herald's storage.cache_capacity in bytes (default: herald's, 32 MiB)
  --phases LIST        comma-separated subset of:
                       ingest,batch,e2e,latency,isolation,ordered,backlog,history,
                       retention,keys,backup,filters,svix
                       (default all; --quick leaves out retention, keys, backup and filters).
                       backup: an online backup of a store of --history delivered events
                       and 100,000 pending while 16 clients post (alternating runs without
                       and with it), then a restore into a new directory.
                       filters: batch ingest with 10 endpoints, alternating runs without
                       and with a 5-operator payload filter on each (3 of each)
                       svix: single ingest through /v1/events and through the Svix-compatible
                       API's message route, alternating (6 of each, swapping which goes first)
  --no-variants        skip the variants: account without endpoint, isolation control
                       (--quick skips them too)
  --dump-latency PATH  write each latency-phase event (send time, latency, id) as CSV
  --herald PATH        the herald binary (default: the one cargo built for this bench)
  --postgres URL       run herald in cluster mode on this PostgreSQL database; each phase
                       starts on an emptied database. Default phases then: ingest,batch,
                       e2e,latency. With pg_stat_statements loaded on the server
                       (shared_preload_libraries), e2e reports SQL statements per delivery
  --nodes N            with --postgres: N nodes on the database (default 1), the load spread
                       over them round robin; CPU and RSS figures are the first node's
  --compare            with --postgres: run the phases on sled, then on PostgreSQL with one
                       node (and with --nodes N nodes, if N > 1), and print the figures side
                       by side
";

const PHASES: [&str; 13] = [
    "ingest",
    "batch",
    "e2e",
    "latency",
    "isolation",
    "ordered",
    "backlog",
    "history",
    "retention",
    "keys",
    "backup",
    "filters",
    "svix",
];

/// The one-key run offers this many times the e2e rate: more than one sequence carries, so it
/// measures the sequence's own pace (one delivery per round trip).
const ONE_KEY_OFFER: f64 = 4.0;

#[derive(Clone)]
pub struct Opts {
    pub quick: bool,
    pub json: bool,
    pub seconds: f64,
    pub clients: usize,
    pub batch_clients: usize,
    pub batch_size: usize,
    pub rate: f64,
    pub e2e_rate: f64,
    pub e2e_batch: usize,
    pub drain: f64,
    pub phases: Vec<String>,
    pub variants: bool,
    pub backlog: usize,
    pub history: usize,
    pub retention_s: f64,
    pub retention_rate: f64,
    pub keys_s: f64,
    pub keys_marginal_s: f64,
    pub cache_capacity: Option<u64>,
    pub history_dir: Option<PathBuf>,
    /// Fold the history phase's prefilled store as herald would (`--no-fold`: leave it hot).
    pub fold: bool,
    pub history_accounts: usize,
    pub index_pack: bool,
    pub herald: PathBuf,
    pub dump_latency: Option<PathBuf>,
    /// `--postgres URL`: cluster mode on this database.
    pub postgres: Option<String>,
    /// `--nodes N`: cluster nodes the load is spread over (with `--postgres`).
    pub nodes: usize,
    /// `--compare`: the same phases on sled and on PostgreSQL, side by side.
    pub compare: bool,
}

fn parse_args(args: &[String]) -> Result<Opts> {
    let quick = args.iter().any(|a| a == "--quick");
    let mut o = Opts {
        quick,
        json: false,
        seconds: if quick { 4.0 } else { 20.0 },
        clients: 64,
        batch_clients: 4,
        batch_size: 1000,
        rate: 500.0,
        e2e_rate: 6000.0,
        e2e_batch: 100,
        drain: if quick { 3.0 } else { 30.0 },
        phases: PHASES
            .iter()
            .filter(|p| !quick || !["retention", "keys", "backup", "filters"].contains(*p))
            .map(|p| p.to_string())
            .collect(),
        // The variants (account without endpoint, isolation control) are left out of --quick.
        variants: !quick,
        backlog: if quick { 200_000 } else { 1_000_000 },
        history: if quick { 200_000 } else { 5_000_000 },
        retention_s: 60.0,
        retention_rate: 2000.0,
        keys_s: 600.0,
        keys_marginal_s: 120.0,
        cache_capacity: None,
        history_dir: None,
        fold: true,
        history_accounts: 1,
        index_pack: true,
        herald: PathBuf::new(),
        dump_latency: None,
        postgres: None,
        nodes: 1,
        compare: false,
    };
    let mut phases_given = false;
    let mut herald = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            // `cargo bench` passes `--bench` to every bench binary.
            "--quick" | "--bench" => {}
            "--json" => o.json = true,
            "--no-variants" => o.variants = false,
            "--seconds" => o.seconds = value()?.parse()?,
            "--clients" => o.clients = value()?.parse()?,
            "--batch-clients" => o.batch_clients = value()?.parse()?,
            "--batch-size" => o.batch_size = value()?.parse()?,
            "--rate" => o.rate = value()?.parse()?,
            "--e2e-rate" => o.e2e_rate = value()?.parse()?,
            "--e2e-batch" => o.e2e_batch = value()?.parse()?,
            "--drain" => o.drain = value()?.parse()?,
            "--backlog" => o.backlog = value()?.parse()?,
            "--history" => o.history = value()?.parse()?,
            "--retention" => o.retention_s = value()?.parse()?,
            "--retention-rate" => o.retention_rate = value()?.parse()?,
            "--keys-seconds" => o.keys_s = value()?.parse()?,
            "--keys-marginal" => o.keys_marginal_s = value()?.parse()?,
            "--cache-capacity" => o.cache_capacity = Some(value()?.parse()?),
            "--history-dir" => o.history_dir = Some(PathBuf::from(value()?)),
            "--no-fold" => o.fold = false,
            "--history-accounts" => o.history_accounts = value()?.parse::<usize>()?.max(1),
            "--no-index-pack" => o.index_pack = false,
            "--herald" => herald = Some(PathBuf::from(value()?)),
            "--dump-latency" => o.dump_latency = Some(PathBuf::from(value()?)),
            "--postgres" => o.postgres = Some(value()?.to_string()),
            "--nodes" => o.nodes = value()?.parse::<usize>()?.max(1),
            "--compare" => o.compare = true,
            "--phases" => {
                phases_given = true;
                o.phases = value()?.split(',').map(|p| p.trim().to_string()).collect();
                if let Some(p) = o.phases.iter().find(|p| !PHASES.contains(&p.as_str())) {
                    bail!("unknown phase {p:?}; phases are {}", PHASES.join(","));
                }
            }
            other => bail!("unknown option {other:?}"),
        }
    }
    if o.nodes > 1 && o.postgres.is_none() {
        bail!("--nodes needs --postgres (nodes share a database)");
    }
    if o.compare && o.postgres.is_none() {
        bail!("--compare needs --postgres (it compares sled with it)");
    }
    if o.postgres.is_some() && !phases_given {
        // The other phases measure the embedded store's files.
        o.phases = ["ingest", "batch", "e2e", "latency"]
            .iter()
            .map(|p| p.to_string())
            .collect();
    }
    if o.keys_s <= 0.0 || o.keys_marginal_s <= 0.0 {
        bail!("--keys-seconds and --keys-marginal must be above 0");
    }
    if o.retention_s < 60.0 || o.retention_rate <= 0.0 {
        bail!("--retention must be at least 60 (herald's least storage.retention), --retention-rate above 0");
    }
    if o.seconds < 1.0 || o.rate <= 0.0 || o.e2e_rate <= 0.0 {
        bail!("--seconds must be at least 1, --rate and --e2e-rate above 0");
    }
    if o.clients == 0 || o.batch_clients == 0 {
        bail!("client counts must be at least 1");
    }
    if !(1..=1000).contains(&o.batch_size) || !(1..=1000).contains(&o.e2e_batch) {
        bail!("batch sizes must be 1 to 1000");
    }
    o.herald = match herald {
        Some(p) => p,
        None => herald::binary()?,
    };
    Ok(o)
}

impl Opts {
    /// Lines for herald's `[storage]` table. In cluster mode the database is emptied first,
    /// so every phase starts as on a fresh data directory.
    pub fn storage(&self) -> String {
        match &self.postgres {
            Some(url) => {
                if let Err(e) = tokio::task::block_in_place(|| {
                    tokio::runtime::Handle::current().block_on(postgres::empty(url))
                }) {
                    eprintln!("load: cannot empty the database: {e:#}");
                }
                format!(
                    "backend = \"postgres\"\n[storage.postgres]\nurl = {url:?}\npool_size = 32\n"
                )
            }
            None => self
                .cache_capacity
                .map_or(String::new(), |c| format!("cache_capacity = {c}")),
        }
    }
}

/// The machine the figures come from.
pub struct Machine {
    pub cores: usize,
    pub kernel: String,
    pub cpu: String,
}

impl Machine {
    fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or("unknown CPU".to_string(), |(_, v)| v.trim().to_string());
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or("unknown".to_string(), |k| k.trim().to_string()),
            cpu,
        }
    }
}

async fn run(opts: &Opts) -> Result<Results> {
    let started = Instant::now();
    let want = |p: &str| opts.phases.iter().any(|x| x == p);
    let mut r = Results::default();
    if want("ingest") {
        eprintln!(
            "[ingest] {} clients posting single events for {} s",
            opts.clients, opts.seconds
        );
        r.single = Some(
            phases::ingest(opts, "with endpoint", Target::Receiver, opts.clients, None).await?,
        );
        if opts.variants {
            r.single_no_endpoint =
                Some(phases::ingest(opts, "no endpoint", Target::None, opts.clients, None).await?);
        }
    }
    if want("batch") {
        let (n, size) = (opts.batch_clients, opts.batch_size);
        eprintln!(
            "[batch] {n} clients posting {size}-event batches for {} s",
            opts.seconds
        );
        r.batch =
            Some(phases::ingest(opts, "with endpoint", Target::Receiver, n, Some(size)).await?);
        if opts.variants {
            r.batch_no_endpoint =
                Some(phases::ingest(opts, "no endpoint", Target::None, n, Some(size)).await?);
        }
    }
    if want("e2e") || want("isolation") {
        eprintln!(
            "[e2e] {} events/s offered in {}-event batches, deliveries to one receiver, for {} s",
            opts.e2e_rate, opts.e2e_batch, opts.seconds
        );
        r.e2e = Some(phases::end_to_end(opts, "healthy endpoint only", Target::Receiver).await?);
    }
    if want("latency") {
        eprintln!(
            "[latency] {} events/s open loop for {} s",
            opts.rate, opts.seconds
        );
        r.latency = Some(phases::latency(opts, "paced").await?);
    }
    if want("isolation") {
        eprintln!("[isolation] as [e2e], with a second endpoint that never answers");
        let dead = Target::ReceiverAndDead;
        r.isolation = Some(phases::end_to_end(opts, "healthy + dead endpoint", dead).await?);
        if opts.variants {
            eprintln!("[isolation control] as [e2e], with a second endpoint that answers");
            let control = Target::ReceiverAndHealthy;
            r.isolation_control =
                Some(phases::end_to_end(opts, "healthy + healthy endpoint", control).await?);
        }
    }
    if want("ordered") {
        eprintln!(
            "[ordered] as [e2e], to an endpoint ordered by a payload field with 100 keys; then \
             {}/s to one ordered as a single sequence",
            opts.e2e_rate * ONE_KEY_OFFER
        );
        let rate = opts.e2e_rate;
        r.ordered_keys =
            Some(phases::ordered(opts, "ordered, 100 keys", Some("shard"), rate).await?);
        let rate = rate * ONE_KEY_OFFER;
        r.ordered_one = Some(phases::ordered(opts, "ordered, one key", None, rate).await?);
    }
    if want("backlog") {
        eprintln!(
            "[backlog] {} deliveries pending behind an endpoint that never answers, then kill -9 and restart",
            opts.backlog
        );
        r.backlog = Some(scale::backlog(opts).await?);
    }
    if want("history") {
        eprintln!(
            "[history] [ingest] and [e2e] on an empty store, then on one with {} delivered attempts",
            opts.history
        );
        r.history = Some(scale::history(opts).await?);
    }
    if want("backup") {
        eprintln!(
            "[backup] herald backup of {} delivered events and 100000 pending under 16 clients, then herald restore",
            opts.history
        );
        backup::print(&backup::backup(opts).await?);
    }
    if want("filters") {
        eprintln!(
            "[filters] {} clients posting {}-event batches, 10 endpoints, without and with filters",
            opts.batch_clients, opts.batch_size
        );
        filters::print(&filters::filters(opts).await?);
    }
    if want("svix") {
        eprintln!(
            "[svix] {} clients posting single events, then single messages the Svix libraries' way",
            opts.clients
        );
        svix::print(&svix::svix(opts).await?);
    }
    if want("retention") {
        eprintln!(
            "[retention] {}/s for {} s with storage.retention = {} s, disk sampled",
            opts.retention_rate,
            opts.retention_s * scale::RETENTION_SPAN,
            opts.retention_s
        );
        let soak = scale::Soak {
            keyed: false,
            seconds: opts.retention_s * scale::RETENTION_SPAN,
            retention_s: Some(opts.retention_s),
        };
        r.retention = Some(scale::retention(opts, soak).await?);
    }
    if want("keys") {
        eprintln!(
            "[keys] {}/s for {} s with storage.retention = {} s, every event with its own \
             idempotency key, disk and RSS sampled",
            opts.retention_rate, opts.keys_s, opts.retention_s
        );
        r.keys = Some(scale::keys(opts).await?);
    }
    r.elapsed_s = started.elapsed().as_secs_f64();
    Ok(r)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let opts = match parse_args(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("load: {e:#}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let machine = Machine::read();
    eprintln!("herald: {}", opts.herald.display());
    eprintln!(
        "machine: {} cores, Linux {}, {}",
        machine.cores, machine.kernel, machine.cpu
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("load: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if opts.compare {
        return compare(&runtime, &opts, &machine);
    }
    match runtime.block_on(run(&opts)) {
        Ok(results) => {
            if opts.json {
                println!("{}", report::to_json(&opts, &machine, &results));
            } else {
                report::print_table(&opts, &machine, &results);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("load: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--compare`: the phases on sled, on PostgreSQL with one node and (with `--nodes N`) with N
/// nodes, one after the other on this machine; then one table with a column for each.
fn compare(runtime: &tokio::runtime::Runtime, opts: &Opts, machine: &Machine) -> ExitCode {
    let mut setups = vec![Opts {
        postgres: None,
        nodes: 1,
        ..opts.clone()
    }];
    setups.push(Opts {
        nodes: 1,
        ..opts.clone()
    });
    if opts.nodes > 1 {
        setups.push(opts.clone());
    }
    let mut done = Vec::new();
    for setup in setups {
        eprintln!("== {}", report::setup_name(&setup));
        match runtime.block_on(run(&setup)) {
            Ok(results) => done.push((setup, results)),
            Err(e) => {
                eprintln!("load: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    if opts.json {
        println!("{}", report::compare_json(machine, &done));
    } else {
        report::print_comparison(machine, &done);
    }
    ExitCode::SUCCESS
}
