//! `run(config, listener, clock, shutdown)`: open the store, start the API and the engine, and
//! tear them down in order (stop accepting, drain attempts within the grace period, flush).

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use crate::api::{self, AppState, Tokens};
use crate::clock::Clock;
use crate::clock::Millis;
use crate::config::StoreKind;
use crate::config::{Config, ConfigError};
use crate::engine::{Engine, EngineConfig};
use crate::ids;
use crate::metrics::Metrics;
use crate::model::OPERATOR_ACCOUNT;
use crate::model::{Endpoint, EndpointState, SignatureKind, StoredSecret};
use crate::outbound::client::{Client, ClientConfig, ClientSetupError, Proxy};
use crate::policy::ssrf::Guard;
use crate::shutdown::{self, Shutdown, Trigger, GRACE};
use crate::store::prelude::*;
use crate::store::{Backend, StoreError};

/// The file holding the generated admin token when the config names none.
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// `what`: the data directory, or the cluster's database (never its URL).
    #[error("cannot open storage at {what}: {source}")]
    Store { what: String, source: StoreError },
    #[error(transparent)]
    Client(#[from] ClientSetupError),
    #[error("{key}: {message}")]
    Config { key: String, message: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    /// Storage refused writes for [`STORAGE_DOWN_STOP`], or the last flush failed: herald
    /// stopped so that its service manager starts it again on a store opened anew.
    #[error("storage failed: {0}")]
    Storage(String),
}

/// How long storage may refuse writes before herald stops with an error. sled keeps a write
/// error for good once it has one, so only a fresh start (systemd's `Restart=on-failure`) can
/// use the disk again once it takes writes; until then herald answers `503`.
pub const STORAGE_DOWN_STOP: Duration = Duration::from_secs(10);

impl From<ConfigError> for AppError {
    fn from(e: ConfigError) -> Self {
        AppError::Config {
            key: e.key,
            message: e.message,
        }
    }
}

/// A started herald: its parts (for in-process tests and tools) and the task that runs it.
pub struct Running {
    pub addr: SocketAddr,
    pub store: Backend,
    pub engine: Arc<Engine>,
    task: tokio::task::JoinHandle<()>,
    /// Why herald stopped on its own (storage), if it did.
    failure: Arc<Mutex<Option<String>>>,
}

impl Running {
    /// Resolves when herald has stopped (after the shutdown signal, or on its own when storage
    /// failed) and storage is flushed. Then the store closes: once this returns, the data
    /// directory may be opened again. An error says why herald stopped on its own, or that the
    /// last flush failed.
    pub async fn wait(self) -> Result<(), AppError> {
        if let Err(e) = self.task.await {
            tracing::error!(error = %e, "herald stopped abnormally");
        }
        let failure = self
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(self.engine);
        self.store.end().await;
        match failure {
            Some(why) => Err(AppError::Storage(why)),
            None => Ok(()),
        }
    }
}

/// Opens the store, starts the API on `listener` and the engine, and returns once herald is
/// ready (storage open, listener bound). It runs until `shutdown` fires.
pub async fn start(
    config: Config,
    listener: TcpListener,
    clock: Arc<dyn Clock>,
    outer: Shutdown,
) -> Result<Running, AppError> {
    let started = Instant::now();
    let (trigger, shutdown) = own_shutdown(outer);
    let config = Arc::new(config);
    let metrics = Arc::new(Metrics::default());
    let store = open_store(&config, clock.clone(), metrics.clone(), &shutdown).await?;
    sync_operator_endpoint(&store, &config, clock.now_ms())
        .await
        .map_err(|source| AppError::Store {
            what: storage_label(&config),
            source,
        })?;
    warn_of_reserved_headers(&store);
    let tokens = load_tokens(&config)?;
    let guard = Guard::new(config.private_allowlist().map_err(|mut e| e.remove(0))?);
    let client = delivery_client(&config, guard.clone())?;
    let alerts = start_alerts(&config, &store, &clock, &metrics, &shutdown)?;
    let traces =
        crate::traces::Traces::start(&config, &metrics).map_err(|message| AppError::Config {
            key: "telemetry".into(),
            message,
        })?;
    let engine = Engine::new(
        store.clone(),
        client,
        clock.clone(),
        EngineConfig::from_config(&config),
        metrics.clone(),
        alerts,
        traces,
    );
    let addr = listener.local_addr().map_err(|source| AppError::Io {
        what: "listener".into(),
        source,
    })?;
    let state = Arc::new(AppState {
        config: config.clone(),
        store: store.clone(),
        engine: engine.clone(),
        clock,
        tokens,
        guard,
        started,
        shutting_down: shutdown.clone(),
        limits: api::Limits {
            max_connections: config.server.max_connections,
            max_header_bytes: config.server.max_header_bytes,
            request_timeout: config.server.request_timeout.0,
        },
        auth_failures: Default::default(),
        public_url: public_url(&config, addr),
        schemas: compiled_schemas(&config)?,
        metrics,
        look: api::Look::load(&config.portal)?,
    });

    // What the start replays: the due index's entries on one box, the due deliveries no node
    // holds in a cluster.
    let (pending, _) = store
        .due_summary(state.clock.now_ms())
        .await
        .unwrap_or_default();
    tracing::info!(
        addr = %addr,
        storage = %storage_label(&config),
        pending,
        "herald listening"
    );
    notify_systemd("READY=1");

    let (task, failure) = start_serving(listener, state, shutdown, trigger);
    Ok(Running {
        addr,
        store,
        engine,
        task,
        failure,
    })
}

/// Herald's own stop: fired by the caller's signal (`outer`), or by herald itself when storage
/// stays broken.
fn own_shutdown(outer: Shutdown) -> (Arc<Trigger>, Shutdown) {
    let (trigger, shutdown) = shutdown::channel();
    let trigger = Arc::new(trigger);
    let (fire, mut outer) = (trigger.clone(), outer);
    tokio::spawn(async move {
        outer.wait().await;
        fire.fire();
    });
    (trigger, shutdown)
}

/// Starts the engine, the API server and (on one box) the storage watch; returns the task that
/// ends once herald has stopped, and where it says why it stopped on its own.
fn start_serving(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: Shutdown,
    trigger: Arc<Trigger>,
) -> (tokio::task::JoinHandle<()>, Arc<Mutex<Option<String>>>) {
    let failure = Arc::new(Mutex::new(None));
    let store = state.store.clone();
    tokio::spawn(watch_storage(
        store.clone(),
        shutdown.clone(),
        trigger,
        failure.clone(),
    ));
    let engine_task = tokio::spawn(state.engine.clone().run(shutdown.clone(), GRACE));
    let task = tokio::spawn(serve_until_stopped(
        listener,
        state,
        shutdown,
        engine_task,
        store,
        failure.clone(),
    ));
    (task, failure)
}

/// Failure alert mails (docs/operations.md, "Failure alerts"): their background task when
/// `[alerts]` names an SMTP server, else switched off.
fn start_alerts(
    config: &Config,
    store: &Backend,
    clock: &Arc<dyn Clock>,
    metrics: &Arc<Metrics>,
    shutdown: &Shutdown,
) -> Result<crate::alerts::Alerts, AppError> {
    let Some(setup) = config.alerts_setup()? else {
        return Ok(crate::alerts::Alerts::off(metrics.clone()));
    };
    crate::alerts::start(
        &setup,
        config,
        store.clone(),
        clock.clone(),
        metrics.clone(),
        shutdown.clone(),
    )
    .map_err(|e| AppError::Config {
        key: "alerts".into(),
        message: e.0,
    })
}

/// Opens the store the config names. A cluster node migrates the schema (under the advisory
/// lock), registers, and starts its listener, heartbeat and lease renewal until `shutdown`.
async fn open_store(
    config: &Config,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    shutdown: &Shutdown,
) -> Result<Backend, AppError> {
    let failed = |source| AppError::Store {
        what: storage_label(config),
        source,
    };
    let settings = crate::store::settings(config).map_err(failed)?;
    Backend::open(&settings, clock, metrics.store.clone(), shutdown)
        .await
        .map_err(failed)
}

/// Where herald keeps its data, as logs and errors name it (never a database URL).
fn storage_label(config: &Config) -> String {
    match config.storage.backend {
        StoreKind::Sled => config.storage.path.display().to_string(),
        #[cfg(feature = "postgres")]
        StoreKind::Postgres => config
            .postgres_url()
            .ok()
            .and_then(|url| crate::config::postgres::parse_url(&url).ok())
            .map(|pg| format!("postgres {}", crate::store::postgres::target_of(&pg)))
            .unwrap_or_else(|| "the cluster's database".into()),
        #[cfg(not(feature = "postgres"))]
        StoreKind::Postgres => "the cluster's database".into(),
    }
}

/// The HTTP client deliveries go out through, as `[delivery]` sets it up.
fn delivery_client(config: &Config, guard: Guard) -> Result<Client, AppError> {
    let proxy = config.proxy().map_err(|e| AppError::Config {
        key: e.key,
        message: e.message,
    })?;
    Ok(Client::new(
        ClientConfig {
            connect_timeout: config.delivery.connect_timeout.0,
            timeout: config.delivery.timeout.0,
            response_body_limit: config.delivery.response_body_limit,
            allow_http: config.delivery.allow_http,
            guard,
            proxy: proxy.map(|(host, port)| Proxy { host, port }),
        },
        config.delivery.extra_ca_file.as_deref(),
    )?)
}

/// Where people reach herald: `server.public_url`, else `http://` and the bound address.
fn public_url(config: &Config, addr: SocketAddr) -> String {
    config
        .server
        .public_url
        .as_ref()
        .map(|u| u.trim_end_matches('/').to_string())
        .unwrap_or_else(|| format!("http://{addr}"))
}

/// The catalog's schemas, compiled (`check-config` has refused a config whose schema does not
/// compile; this names the first such schema if one gets here anyway).
fn compiled_schemas(config: &Config) -> Result<crate::policy::schema::Catalog, AppError> {
    config.compile_schemas().map_err(|mut e| {
        let (ty, why) = e.remove(0);
        AppError::Config {
            key: format!("catalog.events.\"{ty}\".schema"),
            message: why,
        }
    })
}

/// Serves the API until `shutdown`, then waits for the engine and flushes the store: herald's
/// stop, in order. A final flush that fails is recorded in `failure` (herald exits 1).
async fn serve_until_stopped(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: Shutdown,
    engine_task: tokio::task::JoinHandle<()>,
    store: Backend,
    failure: Arc<Mutex<Option<String>>>,
) {
    let traces = state.engine.traces().clone();
    api::serve(listener, state, shutdown, GRACE).await;
    notify_systemd("STOPPING=1");
    if let Err(e) = engine_task.await {
        tracing::error!(error = %e, "delivery engine stopped abnormally");
    }
    // The last attempts' spans, within a few seconds.
    traces.stop().await;
    let error = match store.close().await {
        // Everything acknowledged was committed; a node's engine gave its leases back.
        Ok(()) if !store.is_embedded() => {
            tracing::info!("left the cluster; stopped");
            return;
        }
        Ok(()) => {
            tracing::info!("storage flushed; stopped");
            return;
        }
        Err(e) => e.to_string(),
    };
    tracing::error!(error = %error, "final flush failed");
    failure
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert(format!("the final flush failed: {error}"));
}

/// Runs herald until `shutdown` fires and it has stopped.
pub async fn run(
    config: Config,
    listener: TcpListener,
    clock: Arc<dyn Clock>,
    shutdown: Shutdown,
) -> Result<(), AppError> {
    start(config, listener, clock, shutdown).await?.wait().await
}

/// Stops herald (with [`AppError::Storage`]) once storage has failed for good
/// ([`Backend::failed_for_good`]) for [`STORAGE_DOWN_STOP`] in a row.
async fn watch_storage(
    store: Backend,
    mut shutdown: Shutdown,
    trigger: Arc<Trigger>,
    failure: Arc<Mutex<Option<String>>>,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut down_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait() => return,
        }
        if !store.failed_for_good() {
            down_since = None;
            continue;
        }
        let since = *down_since.get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() >= STORAGE_DOWN_STOP {
            let why = format!(
                "storage refused writes for {} s; stopping so that a fresh start can use it again",
                STORAGE_DOWN_STOP.as_secs()
            );
            tracing::error!("{why}");
            failure
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(why);
            trigger.fire();
            return;
        }
    }
}

/// Makes the reserved operator account's one endpoint match `[operator]`: created or updated
/// when `webhook_url` is set (verified: the operator configured it), removed when it is not.
/// Logs each endpoint stored with a custom header whose name herald reserved since (the W3C
/// trace context's, docs/operations.md "Traces"): it loads and delivers, without that header.
fn warn_of_reserved_headers(store: &Backend) {
    for account in store.account_ids() {
        for ep in store.account_endpoints(&account) {
            for name in ep
                .headers
                .keys()
                .filter(|n| crate::trace::is_trace_header(n))
            {
                tracing::warn!(
                    endpoint_id = %ep.id,
                    header = %name,
                    "an endpoint's custom header has a name herald now sets itself; it is not sent (remove it from the endpoint's headers)"
                );
            }
        }
    }
}

async fn sync_operator_endpoint(
    store: &Backend,
    config: &Config,
    now: Millis,
) -> Result<(), StoreError> {
    let existing = store.account_endpoints(OPERATOR_ACCOUNT);
    let (Some(url), Some(secret)) = (&config.operator.webhook_url, &config.operator.secret) else {
        for ep in existing {
            store.delete_endpoint(&ep.id).await?;
        }
        return Ok(());
    };
    let url = url::Url::parse(url)
        .map(|u| u.to_string())
        .unwrap_or_else(|_| url.clone());
    let mut ep = match existing.first() {
        Some(ep) => (**ep).clone(),
        None => Endpoint {
            id: ids::new_id(ids::ENDPOINT, now),
            account_id: OPERATOR_ACCOUNT.to_string(),
            url: url.clone(),
            description: "herald operator events".into(),
            event_types: Vec::new(),
            headers: Default::default(),
            retry_policy: config.delivery.default_retry_policy.clone(),
            signature: SignatureKind::Hmac,
            state: EndpointState::Active,
            verified: true,
            created_at: now,
            updated_at: now,
            secrets: Vec::new(),
            ordering: None,
            rate_limit: None,
            client_certificate: None,
            filter: None,
            uid: None,
            metadata: Default::default(),
            channels: Vec::new(),
            signature_headers: Default::default(),
            propagate_trace: false,
        },
    };
    let unchanged = ep.url == url && ep.secrets.len() == 1 && ep.secrets[0].value == *secret;
    if existing.len() == 1 && unchanged {
        return Ok(());
    }
    ep.url = url;
    ep.secrets = vec![StoredSecret {
        value: secret.clone(),
        expires_at: None,
    }];
    ep.updated_at = now;
    for extra in existing.iter().skip(1) {
        store.delete_endpoint(&extra.id).await?;
    }
    store.put_endpoint(ep).await?;
    Ok(())
}

/// Tokens from the config and its files. With no admin token configured, herald makes one in
/// the data directory (mode 0600) and logs where it is, never the token itself.
fn load_tokens(config: &Config) -> Result<Tokens, AppError> {
    let (admin, ingest) = config
        .tokens()
        .map_err(|mut e| AppError::from(e.remove(0)))?;
    let mut tokens = Tokens { admin, ingest };
    if tokens.admin.is_empty() {
        let path = config.storage.path.join(ADMIN_TOKEN_FILE);
        if !path.exists() {
            write_private(&path, &format!("{}\n", crate::ids::random_hex(32)))?;
            tracing::info!(file = %path.display(), "no admin token configured; created one in this file (mode 0600)");
        } else {
            tracing::info!(file = %path.display(), "no admin token configured; using the one in this file");
        }
        let text = std::fs::read_to_string(&path).map_err(|source| AppError::Io {
            what: format!("cannot read {}", path.display()),
            source,
        })?;
        tokens.admin = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
    }
    Ok(tokens)
}

fn write_private(path: &Path, content: &str) -> Result<(), AppError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| AppError::Io {
        what: format!("cannot write {}", path.display()),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    f.write_all(content.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)
}

/// `sd_notify`: a datagram to `$NOTIFY_SOCKET` when systemd runs herald with `Type=notify`.
fn notify_systemd(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sock = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot notify systemd");
            return;
        }
    };
    let bytes = path.as_encoded_bytes();
    let result = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
    } else {
        sock.send_to(state.as_bytes(), Path::new(&path))
    };
    if let Err(e) = result {
        tracing::warn!(error = %e, "cannot notify systemd");
    }
}

/// The most sled cache a restore uses (docs/operations.md, "Backup, restore, upgrade").
const RESTORE_CACHE: u64 = 8 << 20;

/// `herald restore` (docs/operations.md): writes an archive, checked before, into the store the
/// config names, which must be empty: a missing or empty data directory, or a cluster database
/// without events, endpoints, plans or account secrets (its schema is brought up to date first)
/// that no node serves. All or nothing: a restore that fails leaves the store as it found it
/// (on one box written beside the directory and renamed into place, [`crate::backup::place`];
/// in a cluster, the database held and the tables it filled emptied again). On one box the
/// store is closed (synced) before this returns.
pub async fn restore(
    config: &Config,
    input: impl std::io::Read + Send + 'static,
    progress: impl FnMut(&crate::backup::format::Totals),
) -> Result<crate::backup::format::Totals, String> {
    let clock: Arc<dyn Clock> = Arc::new(crate::clock::SystemClock);
    match config.storage.backend {
        StoreKind::Sled => restore_into_sled(config, clock, input, progress).await,
        #[cfg(feature = "postgres")]
        StoreKind::Postgres => restore_into_postgres(config, clock, input, progress).await,
        #[cfg(not(feature = "postgres"))]
        StoreKind::Postgres => Err("this herald was built without the `postgres` feature".into()),
    }
}

fn open_failed(config: &Config, e: StoreError) -> String {
    format!("cannot open storage at {}: {e}", storage_label(config))
}

/// A restore into a new data directory beside the configured one, renamed into place once
/// whole and synced ([`crate::backup::place`]). A restore opens the store of its own kind.
async fn restore_into_sled(
    config: &Config,
    clock: Arc<dyn Clock>,
    input: impl std::io::Read + Send + 'static,
    progress: impl FnMut(&crate::backup::format::Totals),
) -> Result<crate::backup::format::Totals, String> {
    let now = clock.now_ms();
    let failed = |e: StoreError| open_failed(config, e);
    let place = crate::backup::place::Place::prepare(&config.storage.path)?;
    // A restore writes and reads nothing back: a small cache is enough.
    let restored = match Backend::open_embedded(
        place.dir(),
        config.storage.cache_capacity.min(RESTORE_CACHE),
        clock,
    ) {
        Ok(store) => {
            let restored = crate::backup::restore(&store, input, now, progress)
                .await
                .map_err(|e| e.to_string());
            let closed = store
                .close()
                .await
                .map_err(|e| format!("cannot sync the restored store: {e}"));
            store.end().await;
            restored.and_then(|t| closed.map(|()| t))
        }
        Err(e) => Err(failed(e)),
    };
    match restored {
        Ok(t) => place.commit().map(|()| t),
        Err(e) => match place.abandon() {
            Ok(()) => Err(e),
            Err(left) => Err(format!("{e}; and {left}")),
        },
    }
}

/// A restore into the cluster's database, under the hold that keeps nodes out, emptied again
/// if it fails. A restore opens the store of its own kind.
#[cfg(feature = "postgres")]
async fn restore_into_postgres(
    config: &Config,
    clock: Arc<dyn Clock>,
    input: impl std::io::Read + Send + 'static,
    progress: impl FnMut(&crate::backup::format::Totals),
) -> Result<crate::backup::format::Totals, String> {
    use crate::store::postgres::{Database, RestoreHold};
    let now = clock.now_ms();
    let failed = |e: StoreError| open_failed(config, e);
    let db = crate::store::postgres_settings(config)
        .and_then(|s| Database::new(&s))
        .map_err(|e| failed(e.into()))?;
    let client = db.dedicated().await.map_err(|e| failed(e.into()))?;
    let lease = config.storage.postgres.lease.0;
    let hold = RestoreHold::take(client, now, lease.as_millis() as i64)
        .await
        .map_err(|e| format!("cannot restore into {}: {e}", storage_label(config)))?;
    let restored = match Backend::join(db, clock, lease).await {
        Ok(store) => {
            let restored = crate::backup::restore(&store, input, now, progress)
                .await
                .map_err(|e| e.to_string());
            // The store registered as a node to read the database: the restore is no
            // node that serves, so it leaves no row behind.
            let left = store.leave().await.map(|_| ()).map_err(failed);
            restored.and_then(|t| left.map(|()| t))
        }
        Err(e) => Err(failed(e)),
    };
    if let Err(e) = &restored {
        if let Err(left) = hold.undo().await {
            hold.release().await;
            return Err(format!(
                "{e}; and emptying what it wrote failed ({left}): drop and create the \
                 database before restoring again"
            ));
        }
    }
    hold.release().await;
    restored
}
