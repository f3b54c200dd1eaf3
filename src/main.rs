//! The `herald` command: parse, load and validate the config, bind, run; map errors to exit codes
//! (0 success, 1 runtime failure, 2 bad config or usage).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use herald::cli::{Cli, Command};
use herald::clock::SystemClock;
use herald::config::{Config, ConfigError, StoreKind};

/// jemalloc instead of the system allocator: sled, hyper and serde allocate per request and per
/// row, and glibc's malloc took about a fifth of herald's CPU under load. Measured here (sled,
/// 1M rows): glibc 12.3 s, mimalloc 6.4 s, jemalloc 6.5 s; resident memory glibc 50 MB,
/// mimalloc 115 MB, jemalloc 63 MB. jemalloc is as fast and gives freed memory back.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read when it starts (before `main`); `_RJEM_MALLOC_CONF` in the
/// environment overrides them. By default jemalloc keeps 4 arenas per core, each holding freed
/// pages for 10 s, and caches blocks up to 32 KiB per thread: memory herald's threads (tokio's
/// workers, sled's flushers, the committer) freed but the process still holds. Two arenas,
/// freed pages returned after half a second by jemalloc's own thread, and only blocks up to
/// 4 KiB cached per thread: measured with `cargo bench --bench load`, this takes 15–30 MiB off
/// every peak (a million pending deliveries at the same cache: 144–148 MiB against 164–169 with
/// jemalloc's defaults; a store of 10,000,000 folded attempts serves at 121 MiB ingesting and
/// 143 MiB delivering against 135 and 171), with the same ingest and delivery rates.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)] // the symbol jemalloc reads (the binary's other unsafe code is below)
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: MallocConf = MallocConf(
    c"narenas:2,tcache_max:4096,dirty_decay_ms:500,muzzy_decay_ms:0,background_thread:true"
        .as_ptr(),
);

/// What jemalloc reads as `const char *malloc_conf`.
#[cfg(feature = "jemalloc")]
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a `'static` C string that nothing writes.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)]
unsafe impl Sync for MallocConf {}

/// For a command that writes a whole store and ends (`restore`): memory freed goes back to the
/// system at once rather than after half a second. A restore frees and allocates sled's log
/// buffers and its pages faster than that: measured on a restore of 225 MB of 250 KB payloads,
/// a peak of 58–60 MiB against 78–83 MiB (docs/operations.md). Every arena now and to come.
#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)] // jemalloc's control interface is C's
fn return_freed_memory_at_once() {
    use std::ffi::{c_void, CString};
    let zero: isize = 0;
    let set = |name: &str| {
        let Ok(name) = CString::new(name) else { return };
        // SAFETY: `name` is a NUL-terminated string that outlives the call; the new value is
        // an `ssize_t` (`isize`) read from `zero`, of the size given; nothing is read back.
        unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                (&zero as *const isize).cast_mut().cast::<c_void>(),
                std::mem::size_of::<isize>(),
            );
        }
    };
    set("arenas.dirty_decay_ms");
    let mut narenas: u32 = 0;
    let mut len = std::mem::size_of::<u32>();
    // SAFETY: reads an `unsigned` into `narenas`, whose size `len` gives.
    let read = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arenas.narenas".as_ptr(),
            (&mut narenas as *mut u32).cast::<c_void>(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if read == 0 {
        // An arena not created yet answers an error, and takes the default set above.
        (0..narenas).for_each(|i| set(&format!("arena.{i}.dirty_decay_ms")));
    }
}

#[cfg(not(feature = "jemalloc"))]
fn return_freed_memory_at_once() {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config, dev } => serve(config, dev),
        Command::CheckConfig { path } => match Config::load(&path) {
            Ok(_) => {
                println!("{}: ok", path.display());
                ExitCode::SUCCESS
            }
            Err(errors) => report(&errors),
        },
        Command::Receive { listen, secret } => receive(&listen, secret),
        Command::Migrate { config } => migrate(config),
        Command::Copy { from, to, ca_file } => copy(&from, &to, ca_file),
        Command::Backup { config, out } => backup(config, &out),
        Command::Restore {
            check,
            config,
            to,
            ca_file,
            file,
        } => {
            return_freed_memory_at_once();
            restore(check, config, to, ca_file, &file)
        }
        Command::Openapi { config } => {
            let loaded = match &config {
                Some(p) => Config::load(p),
                None => Config::from_toml(""),
            };
            match loaded {
                Ok(c) => {
                    let doc = herald::api::openapi::document(&c, &c.public_url());
                    match serde_json::to_string_pretty(&doc) {
                        Ok(text) => {
                            println!("{text}");
                            ExitCode::SUCCESS
                        }
                        Err(e) => {
                            eprintln!("herald openapi: {e}");
                            ExitCode::FAILURE
                        }
                    }
                }
                Err(errors) => report(&errors),
            }
        }
    }
}

/// The config at `path` (built-in defaults without one), loaded and validated.
fn load(path: Option<&PathBuf>) -> Result<Config, ExitCode> {
    match path {
        Some(p) => Config::load(p),
        None => Config::from_toml("").and_then(|c| c.validate().map(|()| c)),
    }
    .map_err(|errors| report(&errors))
}

/// `herald migrate`: the cluster schema brought to this herald's version (docs/cluster.md).
fn migrate(path: Option<PathBuf>) -> ExitCode {
    let config = match load(path.as_ref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if config.storage.backend != StoreKind::Postgres {
        eprintln!(
            "herald migrate: storage.backend is \"sled\"; migrate applies a PostgreSQL \
             cluster's schema (a sled store is migrated when herald serve opens it)"
        );
        return ExitCode::from(2);
    }
    migrate_postgres(&config)
}

#[cfg(feature = "postgres")]
fn migrate_postgres(config: &Config) -> ExitCode {
    use herald::store::postgres::{migrate, Database};
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("herald migrate: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let done = rt.block_on(async {
        let db = Database::new(&herald::store::postgres_settings(config)?)?;
        let mut client = db.dedicated().await?;
        migrate(&mut client, config.storage.postgres.lease.0).await
    });
    match done {
        Ok(m) if m.from == m.to => {
            println!(
                "herald migrate: the schema is at version {}; nothing to do",
                m.to
            );
            ExitCode::SUCCESS
        }
        Ok(m) => {
            println!(
                "herald migrate: the schema went from version {} to {}",
                m.from, m.to
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("herald migrate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `herald copy`: a stopped sled store into an empty cluster database (docs/cluster.md).
#[cfg(feature = "postgres")]
fn copy(from: &str, to: &str, ca_file: Option<PathBuf>) -> ExitCode {
    use herald::backup::copy::Copied;

    let (Some(path), Some(url)) = (from.strip_prefix("sled:"), to.strip_prefix("postgres:")) else {
        eprintln!("herald copy: write --from sled:PATH --to postgres:URL");
        return ExitCode::from(2);
    };
    let mut config = match Config::from_toml("") {
        Ok(c) => c,
        Err(errors) => return report(&errors),
    };
    config.storage.backend = StoreKind::Postgres;
    config.storage.postgres.url = Some(url.to_string());
    config.storage.postgres.ca_file = ca_file;
    if let Err(errors) = config.validate() {
        return report(&errors);
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("herald copy: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let source = std::fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path));
    let done = rt.block_on(copy_store(&config, &source));
    match done {
        Ok(Copied::Done {
            deliveries,
            resumed,
        }) => {
            println!(
                "herald copy: {} {deliveries} deliveries with their events and attempts, and every \
                 endpoint, plan and account secret",
                if resumed { "finished the copy:" } else { "copied" }
            );
            ExitCode::SUCCESS
        }
        Ok(Copied::AlreadyDone) => {
            println!(
                "herald copy: this store was copied into this database already; nothing to do"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("herald copy: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the sled store at `source`, migrates the database, joins it for the copy's length and
/// copies, showing progress on stderr.
#[cfg(feature = "postgres")]
async fn copy_store(
    config: &Config,
    source: &std::path::Path,
) -> Result<herald::backup::copy::Copied, String> {
    use herald::store::postgres::{migrate, Database};
    use herald::store::prelude::*;
    use herald::store::Backend;
    use std::io::IsTerminal;

    if !source.join("conf").exists() {
        return Err(format!("{} holds no herald store", source.display()));
    }
    let store =
        Backend::open_embedded(source, config.storage.cache_capacity, Arc::new(SystemClock))
            .map_err(|e| {
                format!(
                    "cannot open the store at {} (stop the herald that runs on it first): {e}",
                    source.display()
                )
            })?;
    let db = herald::store::postgres_settings(config)
        .and_then(|s| Database::new(&s))
        .map_err(|e| e.to_string())?;
    let mut client = db.dedicated().await.map_err(|e| e.to_string())?;
    let lease = config.storage.postgres.lease.0;
    migrate(&mut client, lease)
        .await
        .map_err(|e| e.to_string())?;
    drop(client);
    let target = Backend::join(db, Arc::new(SystemClock), lease)
        .await
        .map_err(|e| e.to_string())?;
    let terminal = std::io::stderr().is_terminal();
    let mut last_line = std::time::Instant::now();
    let now = herald::clock::Clock::now_ms(&SystemClock);
    let copied =
        herald::backup::copy::copy(&store, &target, &source.display().to_string(), now, |p| {
            let left = (p.total - p.deliveries) as f64 / p.rate.max(1.0);
            let line = format!(
                "{}/{} deliveries, {:.0}/s, {} left",
                p.deliveries,
                p.total,
                p.rate,
                humantime::format_duration(std::time::Duration::from_secs(left as u64))
            );
            if terminal {
                eprint!("\r\x1b[2K{line}");
            } else if last_line.elapsed() >= std::time::Duration::from_secs(5) {
                eprintln!("{line}");
                last_line = std::time::Instant::now();
            }
        })
        .await
        .map_err(|e| e.to_string());
    if terminal {
        eprintln!();
    }
    // The copy joined the cluster to write: it is no node that serves, so it leaves no row.
    let left = target.leave().await.map(|_| ()).map_err(|e| e.to_string());
    let _ = store.close().await;
    store.end().await;
    copied.and_then(|c| left.map(|()| c))
}

#[cfg(not(feature = "postgres"))]
fn copy(_from: &str, _to: &str, _ca_file: Option<PathBuf>) -> ExitCode {
    eprintln!("herald copy: this herald was built without the `postgres` feature");
    ExitCode::from(2)
}

#[cfg(not(feature = "postgres"))]
fn migrate_postgres(_config: &Config) -> ExitCode {
    eprintln!("herald migrate: this herald was built without the `postgres` feature");
    ExitCode::from(2)
}

/// `herald backup`: the running herald's store, online, into a file (docs/operations.md).
fn backup(path: Option<PathBuf>, out: &std::path::Path) -> ExitCode {
    use herald::backup::client::{download, Target};
    let config = match load(path.as_ref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let addr = match config.listen_addr() {
        Ok(a) if a.ip().is_unspecified() => std::net::SocketAddr::new(
            match a {
                std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            },
            a.port(),
        ),
        Ok(a) => a,
        Err(e) => return report(&[e]),
    };
    let token = match admin_token(&config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("herald backup: {e}");
            return ExitCode::from(2);
        }
    };
    let target = if out.as_os_str() == "-" {
        Target::Stdout
    } else {
        Target::File(out.to_path_buf())
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("herald backup: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut shown = Shown::new();
    let done = rt.block_on(download(addr, &token, &target, |p| {
        let rate = p.deliveries as f64 / shown.started.elapsed().as_secs_f64().max(1e-3);
        let left = p
            .deliveries_total
            .map(|t| t.saturating_sub(p.deliveries) as f64 / rate.max(1.0));
        shown.line(&format!(
            "{} events, {} deliveries{}, {:.0} deliveries/s, {} MB{}",
            p.events,
            p.deliveries,
            p.deliveries_total
                .map(|t| format!(" of about {t}"))
                .unwrap_or_default(),
            rate,
            p.bytes / 1_000_000,
            left.map(|l| format!(
                ", {} left",
                humantime::format_duration(std::time::Duration::from_secs(l as u64))
            ))
            .unwrap_or_default(),
        ));
    }));
    shown.end();
    match done {
        Ok(t) => {
            if let Target::File(path) = &target {
                eprintln!(
                    "herald backup: wrote {} ({} events, {} deliveries, {} attempts)",
                    path.display(),
                    t.events,
                    t.deliveries,
                    t.attempts
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("herald backup: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The admin token `herald backup` presents: the config's first, else its token file's first,
/// else the one herald made in its data directory.
fn admin_token(config: &Config) -> Result<String, String> {
    let (admin, _) = config.tokens().map_err(|e| {
        e.iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    if let Some(t) = admin.into_iter().next() {
        return Ok(t);
    }
    let path = config.storage.path.join(herald::app::ADMIN_TOKEN_FILE);
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| {
            t.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(str::to_string)
        })
        .ok_or_else(|| {
            format!(
                "no admin token: the config names none and {} cannot be read",
                path.display()
            )
        })
}

/// A progress line on stderr: redrawn in place on a terminal, else printed every 5 s.
struct Shown {
    terminal: bool,
    started: std::time::Instant,
    last: Option<std::time::Instant>,
}

impl Shown {
    fn new() -> Shown {
        use std::io::IsTerminal;
        Shown {
            terminal: std::io::stderr().is_terminal(),
            started: std::time::Instant::now(),
            last: None,
        }
    }

    fn line(&mut self, line: &str) {
        if self.terminal {
            eprint!("\r\x1b[2K{line}");
        } else if self
            .last
            .is_none_or(|l| l.elapsed() >= std::time::Duration::from_secs(5))
        {
            eprintln!("{line}");
            self.last = Some(std::time::Instant::now());
        }
    }

    fn end(&self) {
        if self.terminal {
            eprintln!();
        }
    }
}

/// `herald restore`: checks an archive, and unless `--check`, writes it into an empty store
/// (the config's, or the one `--to` names).
fn restore(
    check_only: bool,
    path: Option<PathBuf>,
    to: Option<String>,
    ca_file: Option<PathBuf>,
    file: &std::path::Path,
) -> ExitCode {
    let totals = match check_archive(file) {
        Ok(t) => t,
        Err(code) => return code,
    };
    if check_only {
        return ExitCode::SUCCESS;
    }
    let config = match restore_target(path, to, ca_file) {
        Ok(c) => c,
        Err(code) => return code,
    };
    write_archive(&config, file, &totals)
}

fn open_archive(file: &std::path::Path) -> Result<std::fs::File, ExitCode> {
    std::fs::File::open(file).map_err(|e| {
        eprintln!("herald restore: cannot open {}: {e}", file.display());
        ExitCode::from(2)
    })
}

/// Reads the whole archive, checking it, and says what it holds; its totals.
fn check_archive(file: &std::path::Path) -> Result<herald::backup::format::Totals, ExitCode> {
    let input = open_archive(file)?;
    let mut shown = Shown::new();
    let checked = herald::backup::check(std::io::BufReader::new(input), |t| {
        shown.line(&format!(
            "checking: {} events, {} deliveries",
            t.events, t.deliveries
        ));
    });
    shown.end();
    let (info, totals) = checked.map_err(|e| {
        eprintln!("herald restore: {}: {e}", file.display());
        ExitCode::FAILURE
    })?;
    println!(
        "herald restore: {} is whole: format {}, written by herald {} from a {} store, \
         {} parts, {} directory rows, {} events, {} deliveries, {} attempts",
        file.display(),
        info.format,
        info.herald,
        info.source,
        totals.parts + 1,
        totals.directory,
        totals.events,
        totals.deliveries,
        totals.attempts
    );
    Ok(totals)
}

/// Writes the checked archive into the store `config` names, showing its progress against
/// the archive's `totals`.
fn write_archive(
    config: &Config,
    file: &std::path::Path,
    totals: &herald::backup::format::Totals,
) -> ExitCode {
    let input = match open_archive(file) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("herald restore: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut shown = Shown::new();
    let done = rt.block_on(herald::app::restore(
        config,
        std::io::BufReader::with_capacity(1 << 20, input),
        |t| {
            let rate = t.deliveries as f64 / shown.started.elapsed().as_secs_f64().max(1e-3);
            let left = totals.deliveries.saturating_sub(t.deliveries) as f64 / rate.max(1.0);
            shown.line(&format!(
                "{}/{} deliveries, {} events, {:.0}/s, {} left",
                t.deliveries,
                totals.deliveries,
                t.events,
                rate,
                humantime::format_duration(std::time::Duration::from_secs(left as u64))
            ));
        },
    ));
    shown.end();
    match done {
        Ok(t) => {
            println!(
                "herald restore: restored {} events, {} deliveries and {} attempts, and {} \
                 directory rows",
                t.events, t.deliveries, t.attempts, t.directory
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("herald restore: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The config whose storage a restore writes: `--to sled:PATH` or `--to postgres:URL` on the
/// built-in defaults, else the config file's (the built-in defaults without one).
fn restore_target(
    path: Option<PathBuf>,
    to: Option<String>,
    ca_file: Option<PathBuf>,
) -> Result<Config, ExitCode> {
    let Some(to) = to else {
        return load(path.as_ref());
    };
    let mut config = Config::from_toml("").map_err(|errors| report(&errors))?;
    if let Some(dir) = to.strip_prefix("sled:") {
        config.storage.backend = StoreKind::Sled;
        config.storage.path = PathBuf::from(dir);
    } else if let Some(url) = to.strip_prefix("postgres:") {
        config.storage.backend = StoreKind::Postgres;
        config.storage.postgres.url = Some(url.to_string());
        config.storage.postgres.ca_file = ca_file;
    } else {
        eprintln!("herald restore: write --to sled:PATH or --to postgres:URL");
        return Err(ExitCode::from(2));
    }
    config.validate().map_err(|errors| report(&errors))?;
    Ok(config)
}

fn report(errors: &[ConfigError]) -> ExitCode {
    for e in errors {
        eprintln!("config error: {e}");
    }
    ExitCode::from(2)
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

fn serve(path: Option<PathBuf>, dev: bool) -> ExitCode {
    // Before any file or thread exists: the data directory holds secrets (docs/operations.md).
    herald::store::files::private_umask();
    let mut config = match &path {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(errors) => return report(&errors),
        },
        None => match Config::from_toml("") {
            Ok(c) => c,
            Err(errors) => return report(&errors),
        },
    };
    if dev {
        config.apply_dev();
    }
    if let Err(errors) = config.validate() {
        return report(&errors);
    }
    herald::telemetry::init(&config.log);
    if dev {
        tracing::warn!("--dev: plain http and loopback targets allowed, verification skipped; never use this in production");
    }
    if path.is_none() {
        tracing::info!("no --config given: running on built-in defaults");
    }
    raise_fd_limit(&config);
    let addr = match config.listen_addr() {
        Ok(a) => a,
        Err(e) => return report(&[e]),
    };
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("herald: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(addr = %addr, error = %e, "cannot listen");
                return ExitCode::FAILURE;
            }
        };
        let (trigger, shutdown) = herald::shutdown::channel();
        if let Err(e) = herald::shutdown::on_signals(trigger) {
            tracing::error!(error = %e, "cannot install signal handlers");
            return ExitCode::FAILURE;
        }
        match herald::app::run(config, listener, Arc::new(SystemClock), shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "herald stopped");
                ExitCode::FAILURE
            }
        }
    })
}

fn receive(listen: &str, secret: String) -> ExitCode {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("herald receive: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("herald receive: cannot listen on {listen}: {e}");
                return ExitCode::FAILURE;
            }
        };
        match herald::receive::run(listener, secret).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("herald receive: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Raises the soft limit on open files to the hard one (often 1024 vs 524288 under systemd):
/// herald holds up to `server.max_connections` API connections, `delivery.max_in_flight`
/// outbound ones and its store's files. Warns if even the hard limit leaves too little room.
fn raise_fd_limit(config: &Config) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    if limit.current != limit.maximum {
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(error = %e, "cannot raise the open-file limit");
        }
    }
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    // API connections, outbound connections (in flight and idle), the store and some margin.
    let wanted = (config.server.max_connections + 2 * config.delivery.max_in_flight + 256) as u64;
    if now < wanted {
        tracing::warn!(
            open_files = now,
            wanted,
            "the open-file limit is lower than server.max_connections and delivery.max_in_flight \
             need; raise it (LimitNOFILE= under systemd) or lower those settings"
        );
    }
}
