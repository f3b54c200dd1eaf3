//! Drives herald's Svix-compatible API (docs/svix.md) with the official Rust library, svix 2.9.1,
//! as `tests/svix/drive.py` and `tests/svix/js/drive.mjs` do with the Python and JavaScript ones.
//!
//! ```sh
//! cargo build --manifest-path tests/svix/rust/Cargo.toml
//! HERALD_URL=http://127.0.0.1:PORT HERALD_ADMIN_TOKEN=... HERALD_INGEST_TOKEN=... \
//!     tests/svix/rust/target/debug/herald-svix-drive
//! ```
//!
//! herald must run with `[svix] enabled = true`, `[endpoints] require_verification = false`,
//! plain http to loopback allowed (`delivery.allow_http`, `delivery.allow_private_networks`) and
//! the catalog types `order.created` and `order.refunded`. The walk makes its own applications
//! (uids carry a random run id, so it can run twice against one herald), starts its own receiver
//! on 127.0.0.1:0 and stops at the first check that fails, naming the step:
//! `FAIL at step '...': why`, exit status 1. Every request the receiver gets is verified with
//! `svix::webhooks::Webhook` given only the `svix-*` headers, trying each known secret of its
//! endpoint. The last line on success is `svix-rust: all checks passed`.
//!
//! A library error `Generic(...)` on a call that herald answered with a 2xx means the library
//! could not read herald's answer (a serde error): that is an herald bug, reported as such.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{HeaderMap, Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use svix::api::{
    ApplicationCreateOptions, ApplicationListOptions, EndpointCreateOptions, EndpointListOptions, EventTypeListOptions,
    MessageAttemptListByEndpointOptions, MessageAttemptListByMsgOptions, MessageCreateOptions, MessageGetOptions,
    MessageListOptions, Svix, SvixOptions,
};
use svix::error::Error as SvixError;
use svix::models::{
    AppPortalAccessIn, ApplicationIn, ApplicationOut, ApplicationPatch, EndpointHeadersIn, EndpointHeadersPatchIn,
    EndpointIn, EndpointOut, EndpointPatch, EndpointSecretRotateIn, EndpointUpsertIn, EventTypeIn, EventTypeOut,
    ListResponseApplicationOut, ListResponseEndpointOut, ListResponseEventTypeOut, ListResponseMessageAttemptOut,
    ListResponseMessageOut, MessageAttemptOut, MessageAttemptTriggerType, MessageIn, MessageOut, MessageStatus,
    MessageStatusText, Ordering, StatusCodeClass,
};
use svix::webhooks::Webhook;

const LABEL: &str = "svix-rust";
const CREATED: &str = "order.created";
const REFUNDED: &str = "order.refunded";
const DEADLINE: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(100);
const SVIX_HEADERS: [&str; 3] = ["svix-id", "svix-timestamp", "svix-signature"];
const WEBHOOK_HEADERS: [&str; 3] = ["webhook-id", "webhook-timestamp", "webhook-signature"];

type R<T> = Result<T, String>;
type SvixResult<T> = svix::error::Result<T>;

// ---- checks ------------------------------------------------------------------------------

static STEP: Mutex<String> = Mutex::new(String::new());

fn step(name: &str) {
    *STEP.lock().unwrap() = name.to_owned();
    println!("-- {name}");
}

macro_rules! check {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

fn check_eq<T: PartialEq + Debug>(got: T, want: T, what: &str) -> R<()> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, want {want:?}"))
    }
}

fn set<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> BTreeSet<String> {
    items.into_iter().map(Into::into).collect()
}

fn describe(what: &str, e: &SvixError) -> String {
    match e {
        // A 2xx answer the library could not read is a serde_json error: `Error("...", line: L,
        // column: C)`. That is an herald bug (docs/svix.md promises the libraries' shapes).
        SvixError::Generic(s) if s.starts_with("Error(") && s.contains("line:") => {
            format!("{what}: the library refused herald's answer (serde): {s}")
        }
        SvixError::Generic(s) => format!("{what}: the request failed: {s}"),
        SvixError::Http(c) => format!("{what}: HTTP {} {:?}", c.status, c.payload),
        SvixError::Validation(c) => format!("{what}: HTTP {} {:?}", c.status, c.payload),
        SvixError::Timeout { .. } => format!("{what}: {e}"),
    }
}

/// A library call that must succeed.
trait Lib<T> {
    fn lib(self, what: &str) -> R<T>;
}

impl<T> Lib<T> for SvixResult<T> {
    fn lib(self, what: &str) -> R<T> {
        self.map_err(|e| describe(what, &e))
    }
}

/// A library call that must fail with an HTTP status in `statuses` (and `code`, when given) and
/// a JSON error body the library parsed: `{code, detail}`, or for 422 `{detail: [...]}`.
async fn expect_error<T: Debug>(
    what: &str,
    call: impl std::future::Future<Output = SvixResult<T>>,
    statuses: &[u16],
    code: Option<&str>,
) -> R<SvixError> {
    let e = match call.await {
        Ok(v) => return Err(format!("{what}: succeeded ({v:?}), want HTTP {statuses:?}")),
        Err(e) => e,
    };
    match &e {
        SvixError::Http(c) => {
            let st = c.status.as_u16();
            check!(statuses.contains(&st), "{what}: HTTP {st} {:?}, want {statuses:?}", c.payload);
            let Some(body) = &c.payload else {
                return Err(format!("{what}: HTTP {st} without a {{code, detail}} JSON body (docs/svix.md, Errors)"));
            };
            check!(!body.code.is_empty(), "{what}: HTTP {st} with an empty code: {body:?}");
            if let Some(code) = code {
                check_eq(body.code.as_str(), code, &format!("{what}: code of the HTTP {st} answer"))?;
            }
        }
        SvixError::Validation(c) => {
            check!(statuses.contains(&422), "{what}: HTTP 422 {:?}, want {statuses:?}", c.payload);
            let Some(body) = &c.payload else {
                return Err(format!("{what}: HTTP 422 without a {{detail: [...]}} JSON body"));
            };
            check!(!body.detail.is_empty(), "{what}: HTTP 422 with an empty detail list");
            if let Some(code) = code {
                check!(
                    body.detail.iter().any(|d| d.r#type == code),
                    "{what}: no detail of type {code:?} in {:?}",
                    body.detail
                );
            }
        }
        _ => return Err(describe(&format!("{what} (want HTTP {statuses:?})"), &e)),
    }
    Ok(e)
}

/// Calls `f` until it answers `Some`; fails after 20 s with the last description it gave.
async fn wait_for<T>(what: &str, mut f: impl AsyncFnMut() -> R<(Option<T>, String)>) -> R<T> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (value, last) = f().await?;
        if let Some(v) = value {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {DEADLINE:?} waiting for {what}; last: {last}"));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The list answers: `{data, iterator, prevIterator, done}`.
trait Page {
    type Item;
    fn parts(self) -> (Vec<Self::Item>, Option<String>, bool);
}

macro_rules! page {
    ($($list:ty => $item:ty),* $(,)?) => {$(
        impl Page for $list {
            type Item = $item;
            fn parts(self) -> (Vec<$item>, Option<String>, bool) {
                (self.data, self.iterator, self.done)
            }
        }
    )*};
}

page!(
    ListResponseApplicationOut => ApplicationOut,
    ListResponseEndpointOut => EndpointOut,
    ListResponseMessageOut => MessageOut,
    ListResponseMessageAttemptOut => MessageAttemptOut,
    ListResponseEventTypeOut => EventTypeOut,
);

/// Pages through a list `limit` items at a time, following `iterator` until `done`.
async fn collect<P: Page>(
    what: &str,
    limit: u64,
    mut fetch: impl AsyncFnMut(u64, Option<String>) -> SvixResult<P>,
) -> R<Vec<P::Item>> {
    let mut items = Vec::new();
    let mut iterator: Option<String> = None;
    let mut seen = BTreeSet::new();
    for _ in 0..5000 {
        let (data, next, done) = fetch(limit, iterator.clone()).await.lib(what)?.parts();
        check!(data.len() as u64 <= limit, "{what}: {} items on a page of limit={limit}", data.len());
        items.extend(data);
        if done {
            check!(next.is_none(), "{what}: done=true but iterator={next:?} (docs/svix.md: null when done)");
            return Ok(items);
        }
        let Some(next) = next else {
            return Err(format!("{what}: done=false but no iterator"));
        };
        check!(seen.insert(next.clone()), "{what}: iterator {next:?} came back twice");
        iterator = Some(next);
    }
    Err(format!("{what}: still not done after 5000 pages"))
}

// ---- randomness, secrets -----------------------------------------------------------------

fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)).expect("/dev/urandom");
    buf
}

/// A Svix-style secret: `whsec_` + standard base64 (padded) of `n` random bytes.
fn new_secret(n: usize) -> String {
    format!("whsec_{}", B64.encode(random_bytes(n)))
}

fn secret_len(secret: &str) -> R<usize> {
    let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
    B64.decode(b64).map(|b| b.len()).map_err(|e| format!("secret {:.10}... is not base64: {e}", secret))
}

// ---- the receiver ------------------------------------------------------------------------

#[derive(Clone)]
struct Got {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Default)]
struct RxState {
    requests: Vec<Got>,
    secrets: HashMap<String, Vec<String>>,
    /// Indexes of requests no known secret verified when they came (a secret learned from a
    /// rotation a moment after herald signed with it): tried again at the end.
    unverified: Vec<usize>,
}

/// Only the `svix-*` headers of a request: what the Svix library verifies here.
fn svix_only(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in SVIX_HEADERS {
        if let Some(v) = headers.get(name) {
            out.insert(name, v.clone());
        }
    }
    out
}

fn verifies_with(got: &Got, secret: &str) -> bool {
    match Webhook::new(secret) {
        Ok(wh) => wh.verify(&got.body, &svix_only(&got.headers)).is_ok(),
        Err(_) => false,
    }
}

#[derive(Clone)]
struct Receiver {
    port: u16,
    st: Arc<Mutex<RxState>>,
}

impl Receiver {
    async fn start() -> R<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("receiver: bind 127.0.0.1:0: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let rx = Receiver { port, st: Arc::new(Mutex::new(RxState::default())) };
        let st = rx.st.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| Receiver::handle(st.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(rx)
    }

    async fn handle(st: Arc<Mutex<RxState>>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
        let path = req.uri().path().trim_start_matches('/').to_owned();
        let headers = req.headers().clone();
        let body = req.into_body().collect().await?.to_bytes();
        let got = Got { path, headers, body };
        let mut s = st.lock().unwrap();
        let ok = s.secrets.get(&got.path).is_some_and(|secrets| secrets.iter().any(|k| verifies_with(&got, k)));
        s.requests.push(got);
        if !ok {
            let i = s.requests.len() - 1;
            s.unverified.push(i);
        }
        Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    fn add_secret(&self, path: &str, secret: &str) {
        self.st.lock().unwrap().secrets.entry(path.to_owned()).or_default().push(secret.to_owned());
    }

    fn got(&self, path: &str, msg_id: &str) -> Vec<Got> {
        let s = self.st.lock().unwrap();
        s.requests.iter().filter(|g| g.path == path && g.header("svix-id") == Some(msg_id)).cloned().collect()
    }

    fn ids(&self, path: &str) -> BTreeSet<String> {
        let s = self.st.lock().unwrap();
        s.requests
            .iter()
            .filter(|g| g.path == path)
            .map(|g| g.header("svix-id").unwrap_or("(no svix-id)").to_owned())
            .collect()
    }

    fn count(&self) -> usize {
        self.st.lock().unwrap().requests.len()
    }

    /// Waits until `path` got at least `count` requests with svix-id `msg_id`.
    async fn wait(&self, what: &str, path: &str, msg_id: &str, count: usize) -> R<Vec<Got>> {
        wait_for(&format!("{what}: {count} request(s) with svix-id {msg_id} at /{path}"), async || {
            let got = self.got(path, msg_id);
            let n = got.len();
            Ok(((n >= count).then_some(got), format!("{n} so far; /{path} got {:?}", self.ids(path))))
        })
        .await
    }

    /// The requests that no known secret of their endpoint verifies, now.
    fn finish_verification(&self) -> Vec<String> {
        let s = self.st.lock().unwrap();
        let mut failures = Vec::new();
        for &i in &s.unverified {
            let g = &s.requests[i];
            let secrets = s.secrets.get(&g.path).cloned().unwrap_or_default();
            if !secrets.iter().any(|k| verifies_with(g, k)) {
                failures.push(format!(
                    "/{} svix-id {:?}: none of its {} known secret(s) verifies it",
                    g.path,
                    g.header("svix-id"),
                    secrets.len()
                ));
            }
        }
        failures
    }
}

// ---- the walk ----------------------------------------------------------------------------

struct Sent {
    event_type: String,
    payload: Value,
}

/// What one message sent by the walk carries, and which receiver paths must get it.
#[derive(Default)]
struct MsgSpec<'a> {
    payload: Option<Value>,
    channels: Option<&'a [&'a str]>,
    tags: Option<&'a [&'a str]>,
    event_id: Option<String>,
    client: Option<Svix>,
    options: Option<MessageCreateOptions>,
    retention: Option<i64>,
}

struct Apps {
    a1: ApplicationOut,
    a2: ApplicationOut,
}

struct Eps {
    main: EndpointOut,
    s_main: String,
    cha: EndpointOut,
    reff: EndpointOut,
    other: EndpointOut,
}

struct Msgs {
    m1: MessageOut,
    m2: MessageOut,
    m3: MessageOut,
    m4: MessageOut,
    m5: MessageOut,
}

struct Walk {
    ingest_token: String,
    svx: Svix,
    run: String,
    rx: Receiver,
    sent: HashMap<String, Sent>,
    /// receiver path -> the message ids it must get, exactly
    expect: BTreeMap<String, BTreeSet<String>>,
}

fn env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => {
            eprintln!("FAIL: set {name}");
            std::process::exit(2);
        }
    }
}

fn s(v: &str) -> String {
    v.to_owned()
}

impl Walk {
    fn client(&self, token: &str) -> Svix {
        self.svx.with_token(token.to_owned())
    }

    fn uid(&self, name: &str) -> String {
        format!("drs-{}-{name}", self.run)
    }

    // -- messages ------------------------------------------------------------------------

    async fn send(&mut self, app: &str, event_type: &str, to: &[&str], o: MsgSpec<'_>) -> R<MessageOut> {
        let n = self.sent.len() + 1;
        let payload = o.payload.unwrap_or_else(|| json!({"n": n, "run": self.run, "nested": {"ok": true}}));
        let mut m = MessageIn::new(s(event_type), payload.clone());
        m.channels = o.channels.map(|c| set(c.iter().copied()));
        m.tags = o.tags.map(|t| set(t.iter().copied()));
        m.event_id = o.event_id.clone();
        m.payload_retention_period = o.retention;
        let with_content = o.options.as_ref().and_then(|x| x.with_content);
        let client = o.client.unwrap_or_else(|| self.svx.clone());
        let msg = client
            .message()
            .create(s(app), m, o.options)
            .await
            .lib(&format!("POST /api/v1/app/{app}/msg ({event_type})"))?;
        check!(!msg.id.is_empty(), "message without id");
        check_eq(msg.event_type.as_str(), event_type, &format!("message {} eventType", msg.id))?;
        // svix 2.x sends with_content=false unless told otherwise (request.rs).
        if with_content == Some(true) {
            check_eq(&msg.payload, &payload, &format!("message {} payload (with_content=true)", msg.id))?;
        } else {
            check_eq(
                &msg.payload,
                &json!({}),
                &format!("message {} payload (with_content=false, the library's default)", msg.id),
            )?;
        }
        if let Some(c) = o.channels {
            check_eq(
                msg.channels.clone().unwrap_or_default(),
                set(c.iter().copied()),
                &format!("message {} channels", msg.id),
            )?;
        }
        if let Some(t) = o.tags {
            check_eq(
                msg.tags.clone().unwrap_or_default(),
                set(t.iter().copied()),
                &format!("message {} tags", msg.id),
            )?;
        }
        if let Some(e) = &o.event_id {
            check_eq(msg.event_id.as_ref(), Some(e), &format!("message {} eventId", msg.id))?;
        }
        if !self.sent.contains_key(&msg.id) {
            self.sent.insert(msg.id.clone(), Sent { event_type: s(event_type), payload });
            for path in to {
                self.expect.entry(s(path)).or_default().insert(msg.id.clone());
            }
        }
        Ok(msg)
    }

    /// Waits for `count` requests of `msg` at `path`; checks headers and body.
    async fn delivered(&self, msg: &MessageOut, path: &str, count: usize) -> R<Vec<Got>> {
        let reqs = self.rx.wait(&format!("delivery of {}", msg.id), path, &msg.id, count).await?;
        let want = &self.sent[&msg.id].payload;
        for r in &reqs {
            for (a, b) in SVIX_HEADERS.iter().zip(WEBHOOK_HEADERS) {
                check!(r.header(a).is_some(), "/{path} request for {} has no {a} header", msg.id);
                check_eq(r.header(a), r.header(b), &format!("/{path} request for {}: {a} vs {b}", msg.id))?;
            }
            let body: Value = serde_json::from_slice(&r.body).map_err(|e| {
                format!(
                    "/{path} request for {}: body is not JSON ({e}): {:?}",
                    msg.id,
                    String::from_utf8_lossy(&r.body)
                )
            })?;
            check_eq(&body, want, &format!("/{path} request body for {}", msg.id))?;
        }
        Ok(reqs)
    }

    async fn msg_ids(
        &self,
        app: &str,
        what: &str,
        client: Option<&Svix>,
        limit: u64,
        opts: impl Fn() -> MessageListOptions,
    ) -> R<(Vec<String>, Vec<MessageOut>)> {
        let c = client.unwrap_or(&self.svx);
        let items = collect(what, limit, async |l, it| {
            let mut o = opts();
            o.limit = Some(l);
            o.iterator = it;
            c.message().list(s(app), Some(o)).await
        })
        .await?;
        Ok((items.iter().map(|m| m.id.clone()).collect(), items))
    }

    async fn attempts_by_msg(
        &self,
        app: &str,
        msg: &str,
        opts: impl Fn() -> MessageAttemptListByMsgOptions,
    ) -> R<Vec<MessageAttemptOut>> {
        collect(&format!("attempts of {msg}"), 50, async |l, it| {
            let mut o = opts();
            o.limit = Some(l);
            o.iterator = it;
            self.svx.message_attempt().list_by_msg(s(app), s(msg), Some(o)).await
        })
        .await
    }

    async fn attempts_by_endpoint(
        &self,
        app: &str,
        ep: &str,
        opts: impl Fn() -> MessageAttemptListByEndpointOptions,
    ) -> R<Vec<MessageAttemptOut>> {
        collect(&format!("attempts of {ep}"), 50, async |l, it| {
            let mut o = opts();
            o.limit = Some(l);
            o.iterator = it;
            self.svx.message_attempt().list_by_endpoint(s(app), s(ep), Some(o)).await
        })
        .await
    }

    async fn app_ids(&self, limit: u64) -> R<Vec<String>> {
        let items = collect("application list", limit, async |l, it| {
            self.svx
                .application()
                .list(Some(ApplicationListOptions { limit: Some(l), iterator: it, ..Default::default() }))
                .await
        })
        .await?;
        Ok(items.into_iter().map(|a| a.id).collect())
    }

    async fn ep_ids(&self, app: &str, limit: u64) -> R<Vec<String>> {
        let items = collect("endpoint list", limit, async |l, it| {
            self.svx
                .endpoint()
                .list(s(app), Some(EndpointListOptions { limit: Some(l), iterator: it, ..Default::default() }))
                .await
        })
        .await?;
        Ok(items.into_iter().map(|e| e.id).collect())
    }

    // -- the walk ------------------------------------------------------------------------

    async fn main(&mut self) -> R<()> {
        println!("svix 2.9.1 (Rust), receiver on 127.0.0.1:{}, run {}", self.rx.port, self.run);
        step("health: GET /api/v1/health");
        self.svx.health().get().await.lib("GET /api/v1/health")?;

        let apps = self.applications().await?;
        let eps = self.endpoints(&apps).await?;
        let msgs = self.messages(&apps).await?;
        self.attempts(&apps, &eps, &msgs).await?;
        self.headers_and_secrets(&apps, &eps).await?;
        self.disable(&apps, &eps).await?;
        self.event_types().await?;
        self.portal(&apps, &eps, &msgs).await?;
        self.tokens(&apps, &eps).await?;
        self.final_deliveries(&apps).await?;

        step("receiver: every request verified with svix::webhooks::Webhook (svix-* headers only)");
        let failures = self.rx.finish_verification();
        check!(failures.is_empty(), "{} request(s) failed verification:\n  {}", failures.len(), failures.join("\n  "));
        check!(self.rx.count() > 0, "the receiver got no request at all");
        println!("{} deliveries verified", self.rx.count());
        Ok(())
    }

    async fn applications(&mut self) -> R<Apps> {
        let svx = self.svx.clone();
        let app = svx.application();

        step("applications: create with a uid");
        let u1 = self.uid("main");
        let mut a_in = ApplicationIn::new(s("drive main"));
        a_in.uid = Some(u1.clone());
        a_in.metadata = Some(BTreeMap::from([(s("team"), s("one"))]));
        let a1 = app.create(a_in, None).await.lib("POST /api/v1/app (with uid)")?;
        check_eq(&a1.id, &u1, "application id (docs/svix.md: the uid when given)")?;
        check_eq(a1.uid.as_ref(), Some(&u1), "application uid")?;
        check_eq(a1.name.as_str(), "drive main", "application name")?;
        check_eq(&a1.metadata, &BTreeMap::from([(s("team"), s("one"))]), "application metadata")?;

        step("applications: create without a uid");
        let a2 = app.create(ApplicationIn::new(s("drive other")), None).await.lib("POST /api/v1/app (no uid)")?;
        check!(a2.id.starts_with("app_"), "application id {:?} does not start with app_", a2.id);
        check_eq(a2.uid.as_ref(), None, "uid of an application created without one")?;
        check!(a2.metadata.is_empty(), "metadata of an application created without any: {:?}", a2.metadata);

        step("applications: the same uid again without get_if_exists is a conflict");
        let mut again = ApplicationIn::new(s("again"));
        again.uid = Some(u1.clone());
        expect_error("POST /api/v1/app with an existing uid", app.create(again.clone(), None), &[409], None).await?;

        step("applications: get_or_create (existing, then new)");
        let same = app.get_or_create(again, None).await.lib("get_or_create of an existing uid")?;
        check_eq(&same.id, &a1.id, "get_or_create of an existing uid")?;
        check_eq(same.name.as_str(), "drive main", "get_or_create must not change the existing application")?;
        let u3 = self.uid("doomed");
        let mut d_in = ApplicationIn::new(s("drive doomed"));
        d_in.uid = Some(u3.clone());
        let a3 = app.get_or_create(d_in, None).await.lib("get_or_create of a new uid")?;
        check_eq(&a3.id, &u3, "get_or_create of a new uid")?;

        step("applications: an idempotency-key repeated gives the same application");
        let key = self.uid("app-key");
        let opts = || Some(ApplicationCreateOptions { idempotency_key: Some(key.clone()) });
        let i1 = app
            .create(ApplicationIn::new(s("drive idem")), opts())
            .await
            .lib("POST /api/v1/app with an idempotency-key")?;
        let i2 =
            app.create(ApplicationIn::new(s("drive idem")), opts()).await.lib("POST /api/v1/app with the key again")?;
        check_eq(&i2.id, &i1.id, "second POST /api/v1/app with the same idempotency-key")?;

        step("applications: list with limit=1, following iterator until done");
        let seen = self.app_ids(1).await?;
        for a in [&a1, &a2, &a3, &i1] {
            check!(seen.contains(&a.id), "application {} missing from the list", a.id);
        }
        check_eq(seen.iter().filter(|x| **x == i1.id).count(), 1, "times the idempotent application is listed")?;
        check_eq(set(seen.iter().cloned()).len(), seen.len(), "distinct applications vs listed across pages")?;

        step("applications: get by uid and by id");
        check_eq(app.get(u1.clone()).await.lib("GET /api/v1/app/{uid}")?.id, a1.id.clone(), "GET /api/v1/app/{uid}")?;
        check_eq(
            app.get(a2.id.clone()).await.lib("GET /api/v1/app/{id}")?.name,
            s("drive other"),
            "GET /api/v1/app/{id}",
        )?;

        step("applications: PUT (update) and PATCH");
        let mut up_in = ApplicationIn::new(s("drive other renamed"));
        up_in.metadata = Some(BTreeMap::from([(s("k"), s("v"))]));
        let up = app.upsert(a2.id.clone(), up_in).await.lib("PUT /api/v1/app/{id}")?;
        check_eq(&up.id, &a2.id, "PUT keeps the id")?;
        check_eq(up.name.as_str(), "drive other renamed", "name after PUT")?;
        check_eq(&up.metadata, &BTreeMap::from([(s("k"), s("v"))]), "metadata after PUT")?;
        let md = BTreeMap::from([(s("team"), s("two")), (s("x"), s("y"))]);
        let p = app
            .patch(a1.id.clone(), ApplicationPatch { metadata: Some(md.clone()), ..Default::default() })
            .await
            .lib("PATCH /api/v1/app/{uid} metadata")?;
        check_eq(&p.metadata, &md, "metadata after PATCH")?;
        check_eq(p.name.as_str(), "drive main", "PATCH of the metadata must keep the name")?;
        let p = app
            .patch(a1.id.clone(), ApplicationPatch { name: Some(s("drive main renamed")), ..Default::default() })
            .await
            .lib("PATCH /api/v1/app/{uid} name")?;
        check_eq(p.name.as_str(), "drive main renamed", "name after PATCH")?;
        check_eq(&p.metadata, &md, "PATCH of the name must keep the metadata")?;
        check_eq(
            app.get(a1.id.clone()).await.lib("GET after PATCH")?.name,
            s("drive main renamed"),
            "name read back after PATCH",
        )?;

        step("applications: PUT on an absent application creates it with the path as uid");
        let u5 = self.uid("put");
        let a5 =
            app.upsert(u5.clone(), ApplicationIn::new(s("drive put"))).await.lib("PUT /api/v1/app/{uid} creating")?;
        check_eq(&a5.id, &u5, "id of the application PUT created")?;
        check_eq(
            app.get(u5).await.lib("GET the application PUT created")?.name,
            s("drive put"),
            "application PUT created, read back",
        )?;

        step("applications: DELETE, then GET answers 404");
        app.delete(a3.id.clone()).await.lib("DELETE /api/v1/app/{uid}")?;
        expect_error(&format!("GET /api/v1/app/{} after DELETE", a3.id), app.get(a3.id.clone()), &[404], None).await?;
        check!(!self.app_ids(250).await?.contains(&a3.id), "a deleted application is still listed");

        step("applications: a message naming `application` creates it");
        let u6 = self.uid("auto");
        let mut m = MessageIn::new(s(CREATED), json!({"auto": true}));
        let mut auto = ApplicationIn::new(s("drive auto"));
        auto.uid = Some(u6.clone());
        m.application = Some(auto);
        svx.message().create(u6.clone(), m, None).await.lib("POST msg naming `application`")?;
        check_eq(
            app.get(u6).await.lib("GET the application a message created")?.name,
            s("drive auto"),
            "application created by a message",
        )?;

        Ok(Apps { a1, a2 })
    }

    async fn endpoints(&mut self, apps: &Apps) -> R<Eps> {
        let svx = self.svx.clone();
        let ep = svx.endpoint();
        let a1 = apps.a1.id.clone();
        let a2 = apps.a2.id.clone();
        let types = set([CREATED, REFUNDED]);

        step("endpoints: create with a whsec_ secret, uid, metadata, eventTypes, headers, throttleRate");
        let s_main = new_secret(32);
        self.rx.add_secret("main", &s_main);
        let ep_uid = self.uid("ep-main");
        let mut e_in = EndpointIn::new(self.rx.url("main"));
        e_in.uid = Some(ep_uid.clone());
        e_in.description = Some(s("main endpoint"));
        e_in.metadata = Some(BTreeMap::from([(s("owner"), s("drive"))]));
        e_in.event_types = Some(types.clone());
        e_in.secret = Some(s_main.clone());
        e_in.throttle_rate = Some(10);
        e_in.headers = Some(BTreeMap::from([(s("X-Drive-Created"), s("yes"))]));
        let main = ep.create(a1.clone(), e_in, None).await.lib("POST endpoint (main)")?;
        check!(main.id.starts_with("ep_"), "endpoint id {:?} does not start with ep_", main.id);
        check_eq(main.url.clone(), self.rx.url("main"), "endpoint url")?;
        check_eq(main.uid.as_ref(), Some(&ep_uid), "endpoint uid")?;
        check_eq(main.description.as_str(), "main endpoint", "endpoint description")?;
        check_eq(&main.metadata, &BTreeMap::from([(s("owner"), s("drive"))]), "endpoint metadata")?;
        check_eq(main.event_types.as_ref(), Some(&types), "endpoint eventTypes")?;
        check_eq(main.throttle_rate, Some(10), "endpoint throttleRate")?;
        check_eq(main.disabled.unwrap_or(false), false, "disabled of a new endpoint")?;

        step("endpoints: create with channels and an unprefixed secret (read as base64)");
        let s_cha = new_secret(24);
        let s_cha_b64 = s_cha.strip_prefix("whsec_").unwrap().to_owned();
        self.rx.add_secret("cha", &s_cha);
        let mut c_in = EndpointIn::new(self.rx.url("cha"));
        c_in.channels = Some(set(["ch-a"]));
        c_in.secret = Some(s_cha_b64);
        let cha = ep.create(a1.clone(), c_in, None).await.lib("POST endpoint (channels)")?;
        check_eq(cha.channels.clone().unwrap_or_default(), set(["ch-a"]), "endpoint channels")?;
        check!(
            cha.event_types.as_ref().is_none_or(|t| t.is_empty()),
            "endpoint created without eventTypes has {:?}",
            cha.event_types
        );
        check_eq(cha.description.as_str(), "", "description of an endpoint created without one")?;
        check!(cha.metadata.is_empty(), "metadata of an endpoint created without any: {:?}", cha.metadata);
        check_eq(
            ep.get_secret(a1.clone(), cha.id.clone()).await.lib("GET secret (channels endpoint)")?.key,
            s_cha.clone(),
            "an unprefixed secret is stored as whsec_ + the same base64",
        )?;

        step("endpoints: create with an idempotency-key twice, no secret given");
        let key = self.uid("ep-key");
        let r_in = || {
            let mut r = EndpointIn::new(self.rx.url("refunded"));
            r.event_types = Some(set([REFUNDED]));
            r
        };
        let opts = || Some(EndpointCreateOptions { idempotency_key: Some(key.clone()) });
        let reff = ep.create(a1.clone(), r_in(), opts()).await.lib("POST endpoint with an idempotency-key")?;
        let ref2 = ep.create(a1.clone(), r_in(), opts()).await.lib("POST endpoint with the key again")?;
        check_eq(&ref2.id, &reff.id, "second endpoint POST with the same idempotency-key")?;
        let s_ref = ep.get_secret(a1.clone(), reff.id.clone()).await.lib("GET generated secret")?.key;
        check!(s_ref.starts_with("whsec_"), "generated secret {:.10}... lacks whsec_", s_ref);
        let n = secret_len(&s_ref)?;
        check!((24..=64).contains(&n), "generated secret decodes to {n} bytes");
        self.rx.add_secret("refunded", &s_ref);

        step("endpoints: an endpoint in the other application");
        let s_other = new_secret(64);
        self.rx.add_secret("other", &s_other);
        let mut o_in = EndpointIn::new(self.rx.url("other"));
        o_in.secret = Some(s_other);
        let other = ep.create(a2.clone(), o_in, None).await.lib("POST endpoint (other application)")?;

        step("endpoints: get by uid and by id; get_secret");
        check_eq(
            ep.get(a1.clone(), ep_uid.clone()).await.lib("GET endpoint by uid")?.id,
            main.id.clone(),
            "GET endpoint by uid",
        )?;
        check_eq(
            ep.get(a1.clone(), main.id.clone()).await.lib("GET endpoint by id")?.uid,
            Some(ep_uid.clone()),
            "GET endpoint by id",
        )?;
        check_eq(
            ep.get_secret(a1.clone(), main.id.clone()).await.lib("get_secret")?.key,
            s_main.clone(),
            "get_secret",
        )?;
        check_eq(
            ep.get_secret(a1.clone(), ep_uid.clone()).await.lib("get_secret by uid")?.key,
            s_main.clone(),
            "get_secret by uid",
        )?;

        step("endpoints: list (limit=1 pages; order ascending vs descending)");
        let ids = self.ep_ids(&a1, 1).await?;
        check_eq(
            set(ids.iter().cloned()),
            set([&main.id, &cha.id, &reff.id].map(|x| x.clone())),
            "endpoints of the application",
        )?;
        check_eq(ids.len(), 3, "endpoints listed (each once)")?;
        let ordered = async |order| -> R<Vec<String>> {
            let o = EndpointListOptions { limit: Some(250), order: Some(order), ..Default::default() };
            Ok(ep
                .list(a1.clone(), Some(o))
                .await
                .lib("endpoint list with order")?
                .data
                .into_iter()
                .map(|e| e.id)
                .collect())
        };
        let asc = ordered(Ordering::Ascending).await?;
        let mut desc = ordered(Ordering::Descending).await?;
        check_eq(set(asc.iter().cloned()), set(ids.iter().cloned()), "endpoints listed ascending")?;
        desc.reverse();
        check_eq(&desc, &asc, "order=descending reversed vs order=ascending")?;

        step("endpoints: PATCH and PUT");
        let p = ep
            .patch(
                a1.clone(),
                main.id.clone(),
                EndpointPatch {
                    description: Some(s("patched")),
                    metadata: Some(BTreeMap::from([(s("owner"), s("patch"))])),
                    ..Default::default()
                },
            )
            .await
            .lib("PATCH endpoint")?;
        check_eq(p.description.as_str(), "patched", "description after PATCH")?;
        check_eq(&p.metadata, &BTreeMap::from([(s("owner"), s("patch"))]), "metadata after PATCH")?;
        check_eq(p.uid.as_ref(), Some(&ep_uid), "PATCH must keep the uid")?;
        check_eq(p.event_types.as_ref(), Some(&types), "PATCH must keep eventTypes")?;
        check_eq(p.url.clone(), self.rx.url("main"), "PATCH must keep the url")?;
        let mut u_in = EndpointUpsertIn::new(self.rx.url("main"));
        u_in.uid = Some(ep_uid.clone());
        u_in.description = Some(s("put"));
        u_in.metadata = Some(BTreeMap::from([(s("owner"), s("put"))]));
        u_in.event_types = Some(types.clone());
        u_in.throttle_rate = Some(10);
        let u = ep.upsert(a1.clone(), main.id.clone(), u_in).await.lib("PUT endpoint")?;
        check_eq(&u.id, &main.id, "PUT on an existing endpoint keeps its id")?;
        check_eq(u.description.as_str(), "put", "description after PUT")?;
        check_eq(&u.metadata, &BTreeMap::from([(s("owner"), s("put"))]), "metadata after PUT")?;
        check_eq(
            ep.get_secret(a1.clone(), main.id.clone()).await.lib("get_secret after PUT")?.key,
            s_main.clone(),
            "PUT must keep the secret",
        )?;

        step("endpoints: PUT on an absent endpoint creates it with the path as uid; DELETE");
        let put_uid = self.uid("ep-put");
        let c = ep
            .upsert(a2.clone(), put_uid.clone(), EndpointUpsertIn::new(self.rx.url("put")))
            .await
            .lib("PUT endpoint creating")?;
        check_eq(c.uid.as_ref(), Some(&put_uid), "uid of the endpoint PUT created")?;
        check!(c.id.starts_with("ep_"), "endpoint id {:?}", c.id);
        check_eq(
            ep.get(a2.clone(), put_uid.clone()).await.lib("GET the endpoint PUT created")?.id,
            c.id.clone(),
            "endpoint PUT created, read back by uid",
        )?;
        ep.delete(a2.clone(), c.id.clone()).await.lib("DELETE endpoint")?;
        expect_error("GET a deleted endpoint", ep.get(a2.clone(), c.id.clone()), &[404], None).await?;

        Ok(Eps { main, s_main, cha, reff, other })
    }

    async fn messages(&mut self, apps: &Apps) -> R<Msgs> {
        let svx = self.svx.clone();
        let (a1, a2) = (apps.a1.id.clone(), apps.a2.id.clone());
        let (main, cha, reff) = ("main", "cha", "refunded");

        step("messages: create (eventType, payload, eventId, channels, tags)");
        let e1 = self.uid("evt-1");
        let m1 = self
            .send(
                &a1,
                CREATED,
                &[main, cha],
                MsgSpec {
                    channels: Some(&["ch-a"]),
                    tags: Some(&["t-one"]),
                    event_id: Some(e1.clone()),
                    options: Some(MessageCreateOptions { with_content: Some(true), ..Default::default() }),
                    ..Default::default()
                },
            )
            .await?;
        let m2 = self
            .send(
                &a1,
                REFUNDED,
                &[main, reff],
                MsgSpec {
                    channels: Some(&["ch-b"]),
                    tags: Some(&["t-two"]),
                    event_id: Some(self.uid("evt-2")),
                    options: Some(MessageCreateOptions { with_content: Some(false), ..Default::default() }),
                    ..Default::default()
                },
            )
            .await?;
        let m3 = self
            .send(
                &a1,
                CREATED,
                &[main],
                MsgSpec { tags: Some(&["t-one", "t-three"]), retention: Some(30), ..Default::default() },
            )
            .await?;

        step("messages: a duplicate eventId answers 409 and creates nothing");
        let (before, _) = self.msg_ids(&a1, "messages", None, 250, MessageListOptions::default).await?;
        let mut dup = MessageIn::new(s(CREATED), json!({"dup": 1}));
        dup.event_id = Some(e1.clone());
        expect_error(
            "message with an eventId already used",
            svx.message().create(a1.clone(), dup, None),
            &[409],
            Some("conflict"),
        )
        .await?;
        let (after, _) = self.msg_ids(&a1, "messages", None, 250, MessageListOptions::default).await?;
        check_eq(set(after), set(before.iter().cloned()), "messages after the refused duplicate")?;

        step("messages: deliverAt answers 422");
        let mut later = MessageIn::new(s(CREATED), json!({}));
        later.deliver_at = Some(Utc::now() + chrono::Duration::minutes(5));
        expect_error("message with deliverAt", svx.message().create(a1.clone(), later, None), &[422], None).await?;

        // A point in time between the messages above and those below (before/after filters).
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t_mid: DateTime<Utc> = Utc::now();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let early = set([&m1.id, &m2.id, &m3.id].map(|x| x.clone()));

        step("messages: the same idempotency-key twice (library create options) gives one message");
        let key = self.uid("msg-key");
        let opts = || Some(MessageCreateOptions { with_content: Some(true), idempotency_key: Some(key.clone()) });
        let idem = json!({"idem": self.run});
        let m4 = self
            .send(
                &a1,
                REFUNDED,
                &[main, reff],
                MsgSpec { tags: Some(&["t-two"]), options: opts(), payload: Some(idem.clone()), ..Default::default() },
            )
            .await?;
        let mut again = MessageIn::new(s(REFUNDED), idem);
        again.tags = Some(set(["t-two"]));
        let again =
            svx.message().create(a1.clone(), again, opts()).await.lib("POST msg with the idempotency-key again")?;
        check_eq(&again.id, &m4.id, "message id for a repeated idempotency-key")?;
        let (ids, _) = self.msg_ids(&a1, "messages", None, 250, MessageListOptions::default).await?;
        check_eq(ids.iter().filter(|x| **x == m4.id).count(), 1, "times the idempotent message is listed")?;
        check_eq(ids.len(), before.len() + 1, "messages after one idempotent message posted twice")?;
        let m5 = self
            .send(&a1, CREATED, &[main, cha], MsgSpec { channels: Some(&["ch-a", "ch-c"]), ..Default::default() })
            .await?;
        let mut mine = early.clone();
        mine.insert(m4.id.clone());
        mine.insert(m5.id.clone());

        step("messages: list (newest first, pages of 2, with_content)");
        let (ids, items) = self
            .msg_ids(&a1, "messages", None, 2, || MessageListOptions { with_content: Some(true), ..Default::default() })
            .await?;
        check_eq(set(ids.iter().cloned()), mine.clone(), "messages of the application")?;
        check!(
            items.windows(2).all(|w| w[0].timestamp >= w[1].timestamp),
            "messages not newest first: {:?}",
            items.iter().map(|m| m.timestamp).collect::<Vec<_>>()
        );
        let pos = |id: &str| ids.iter().position(|x| x == id).unwrap();
        check!(pos(&m5.id) < pos(&m1.id), "the newest message is not listed before the oldest");
        for m in &items {
            check_eq(&m.payload, &self.sent[&m.id].payload, &format!("payload of {} listed with_content=true", m.id))?;
        }
        let (_, items) = self
            .msg_ids(&a1, "messages without content", None, 2, || MessageListOptions {
                with_content: Some(false),
                ..Default::default()
            })
            .await?;
        for m in &items {
            check_eq(&m.payload, &json!({}), &format!("payload of {} listed with_content=false", m.id))?;
        }

        step("messages: list filters event_types, channel, tag, before, after");
        let only = async |what: &str, f: &dyn Fn(&mut MessageListOptions)| -> R<BTreeSet<String>> {
            let (ids, _) = self
                .msg_ids(&a1, &format!("messages {what}"), None, 2, || {
                    let mut o = MessageListOptions::default();
                    f(&mut o);
                    o
                })
                .await?;
            Ok(set(ids))
        };
        let ids2 = |a: &MessageOut, b: &MessageOut| set([a.id.clone(), b.id.clone()]);
        check_eq(
            only("event_types=order.refunded", &|o| o.event_types = Some(set([REFUNDED]))).await?,
            ids2(&m2, &m4),
            "event_types filter",
        )?;
        check_eq(
            only("event_types=both", &|o| o.event_types = Some(set([REFUNDED, CREATED]))).await?,
            mine.clone(),
            "event_types filter with two types",
        )?;
        check_eq(only("channel=ch-a", &|o| o.channel = Some(s("ch-a"))).await?, ids2(&m1, &m5), "channel filter ch-a")?;
        check_eq(
            only("channel=ch-b", &|o| o.channel = Some(s("ch-b"))).await?,
            set([m2.id.clone()]),
            "channel filter ch-b",
        )?;
        check_eq(only("tag=t-one", &|o| o.tag = Some(s("t-one"))).await?, ids2(&m1, &m3), "tag filter t-one")?;
        check_eq(only("tag=t-two", &|o| o.tag = Some(s("t-two"))).await?, ids2(&m2, &m4), "tag filter t-two")?;
        check_eq(only("before", &|o| o.before = Some(t_mid)).await?, early.clone(), "before filter")?;
        check_eq(only("after", &|o| o.after = Some(t_mid)).await?, ids2(&m4, &m5), "after filter")?;

        step("messages: get by id and by eventId, with and without content");
        let with = || Some(MessageGetOptions { with_content: Some(true) });
        let g = svx.message().get(a1.clone(), m1.id.clone(), with()).await.lib("GET msg by id")?;
        check_eq(
            (&g.id, g.event_type.as_str(), &g.payload, g.event_id.as_ref()),
            (&m1.id, CREATED, &self.sent[&m1.id].payload, Some(&e1)),
            "message by id",
        )?;
        check_eq(g.channels.unwrap_or_default(), set(["ch-a"]), "channels of the message read back")?;
        check_eq(g.tags.unwrap_or_default(), set(["t-one"]), "tags of the message read back")?;
        let g = svx.message().get(a1.clone(), e1.clone(), with()).await.lib("GET msg by eventId")?;
        check_eq(&g.id, &m1.id, "message by eventId")?;
        let g = svx
            .message()
            .get(a1.clone(), m1.id.clone(), Some(MessageGetOptions { with_content: Some(false) }))
            .await
            .lib("GET msg with_content=false")?;
        check_eq(&g.payload, &json!({}), "message read with with_content=false")?;
        expect_error(
            "a message of one application read under another",
            svx.message().get(a2.clone(), m1.id.clone(), None),
            &[404],
            None,
        )
        .await?;

        step("messages: deliveries reach the endpoints whose types and channels take them");
        self.delivered(&m1, main, 1).await?;
        self.delivered(&m1, cha, 1).await?;
        self.delivered(&m2, reff, 1).await?;
        for m in [&m2, &m3, &m4, &m5] {
            self.delivered(m, main, 1).await?;
        }
        self.delivered(&m5, cha, 1).await?;
        for m in [&m1, &m2, &m3, &m4, &m5] {
            check_eq(
                self.rx.got(main, &m.id)[0].header("x-drive-created"),
                Some("yes"),
                &format!("custom header given at creation, on {}", m.id),
            )?;
        }
        Ok(Msgs { m1, m2, m3, m4, m5 })
    }

    async fn attempts(&mut self, apps: &Apps, eps: &Eps, msgs: &Msgs) -> R<()> {
        let svx = self.svx.clone();
        let a1 = apps.a1.id.clone();
        let ep = &eps.main;
        let main_url = self.rx.url("main");

        step("attempts: list by message (poll until a successful one exists)");
        let att = wait_for(&format!("a successful attempt of {} to {}", msgs.m1.id, ep.id), async || {
            let atts = self.attempts_by_msg(&a1, &msgs.m1.id, Default::default).await?;
            let desc = format!("{:?}", atts.iter().map(|a| (&a.endpoint_id, a.status)).collect::<Vec<_>>());
            Ok((atts.into_iter().find(|a| a.endpoint_id == ep.id && a.status == MessageStatus::Success), desc))
        })
        .await?;
        check!(!att.id.is_empty(), "attempt without id");
        check_eq(&att.msg_id, &msgs.m1.id, "attempt msgId")?;
        check_eq(&att.endpoint_id, &ep.id, "attempt endpointId")?;
        check_eq(&att.url, &main_url, "attempt url (the endpoint URL)")?;
        check_eq(att.response_status_code, 200, "attempt responseStatusCode")?;
        check_eq(att.status_text, MessageStatusText::Success, "attempt statusText")?;
        check_eq(att.trigger_type, MessageAttemptTriggerType::Scheduled, "attempt triggerType")?;
        check!(att.response_duration_ms >= 0, "attempt responseDurationMs {} < 0", att.response_duration_ms);
        check!(att.msg.is_none(), "attempt carries msg without with_msg=true");
        let with_body = self
            .attempts_by_msg(&a1, &msgs.m1.id, || MessageAttemptListByMsgOptions {
                with_content: Some(true),
                ..Default::default()
            })
            .await?;
        let Some(wb) = with_body.iter().find(|a| a.id == att.id) else {
            return Err(format!("attempt {} missing when listed with_content=true", att.id));
        };
        check_eq(wb.response.as_str(), "ok", "attempt response (the receiver's body) with_content=true")?;
        wait_for(&format!("an attempt of {} to the ch-a endpoint", msgs.m1.id), async || {
            let atts = self.attempts_by_msg(&a1, &msgs.m1.id, Default::default).await?;
            Ok((atts.iter().any(|a| a.endpoint_id == eps.cha.id).then_some(()), format!("{} attempts", atts.len())))
        })
        .await?;
        let atts = self.attempts_by_msg(&a1, &msgs.m1.id, Default::default).await?;
        check!(
            atts.iter().all(|a| a.endpoint_id != eps.reff.id),
            "an attempt of an order.created message to the order.refunded endpoint"
        );
        let only = self
            .attempts_by_msg(&a1, &msgs.m1.id, || MessageAttemptListByMsgOptions {
                endpoint_id: Some(ep.id.clone()),
                ..Default::default()
            })
            .await?;
        check!(
            !only.is_empty() && only.iter().all(|a| a.endpoint_id == ep.id),
            "endpoint_id filter: {:?}",
            only.iter().map(|a| &a.endpoint_id).collect::<Vec<_>>()
        );

        step("attempts: list by endpoint, and its filters");
        let all = [&msgs.m1, &msgs.m2, &msgs.m3, &msgs.m4, &msgs.m5];
        for m in all {
            wait_for(&format!("a successful attempt of {} to {}", m.id, ep.id), async || {
                let atts = self
                    .attempts_by_msg(&a1, &m.id, || MessageAttemptListByMsgOptions {
                        endpoint_id: Some(ep.id.clone()),
                        ..Default::default()
                    })
                    .await?;
                let desc = format!("{:?}", atts.iter().map(|a| a.status).collect::<Vec<_>>());
                Ok((atts.iter().any(|a| a.status == MessageStatus::Success).then_some(()), desc))
            })
            .await?;
        }
        let by_ep = self.attempts_by_endpoint(&a1, &ep.id, Default::default).await?;
        let got = set(by_ep.iter().map(|a| a.msg_id.clone()));
        check_eq(got.clone(), set(all.map(|m| m.id.clone())), "messages of the attempts listed by endpoint")?;
        for a in &by_ep {
            check_eq(
                (a.endpoint_id.as_str(), a.url.as_str(), a.response_status_code, a.status, a.status_text),
                (ep.id.as_str(), main_url.as_str(), 200, MessageStatus::Success, MessageStatusText::Success),
                &format!("attempt {} listed by endpoint", a.id),
            )?;
        }
        let msgs_of = async |f: &dyn Fn(&mut MessageAttemptListByEndpointOptions)| -> R<BTreeSet<String>> {
            let atts = self
                .attempts_by_endpoint(&a1, &ep.id, || {
                    let mut o = MessageAttemptListByEndpointOptions::default();
                    f(&mut o);
                    o
                })
                .await?;
            Ok(set(atts.into_iter().map(|a| a.msg_id)))
        };
        let pair = |a: &MessageOut, b: &MessageOut| set([a.id.clone(), b.id.clone()]);
        check_eq(msgs_of(&|o| o.status = Some(MessageStatus::Success)).await?, got.clone(), "status=0 filter")?;
        check_eq(msgs_of(&|o| o.status = Some(MessageStatus::Fail)).await?, BTreeSet::new(), "status=2 filter")?;
        check_eq(
            msgs_of(&|o| o.status_code_class = Some(StatusCodeClass::Code2xx)).await?,
            got.clone(),
            "status_code_class=200 filter",
        )?;
        check_eq(
            msgs_of(&|o| o.status_code_class = Some(StatusCodeClass::Code5xx)).await?,
            BTreeSet::new(),
            "status_code_class=500 filter",
        )?;
        check_eq(
            msgs_of(&|o| o.event_types = Some(set([REFUNDED]))).await?,
            pair(&msgs.m2, &msgs.m4),
            "event_types filter on attempts",
        )?;
        check_eq(
            msgs_of(&|o| o.channel = Some(s("ch-a"))).await?,
            pair(&msgs.m1, &msgs.m5),
            "channel filter on attempts",
        )?;
        check_eq(msgs_of(&|o| o.tag = Some(s("t-one"))).await?, pair(&msgs.m1, &msgs.m3), "tag filter on attempts")?;
        let with_msg = self
            .attempts_by_endpoint(&a1, &ep.id, || MessageAttemptListByEndpointOptions {
                with_msg: Some(true),
                ..Default::default()
            })
            .await?;
        check!(!with_msg.is_empty(), "no attempt listed with_msg=true");
        for a in &with_msg {
            let Some(m) = &a.msg else {
                return Err(format!("attempt {} listed with_msg=true has no msg", a.id));
            };
            check_eq(&m.id, &a.msg_id, &format!("msg of attempt {}", a.id))?;
            check_eq(&m.event_type, &self.sent[&a.msg_id].event_type, &format!("msg eventType of attempt {}", a.id))?;
        }

        step("attempts: resend makes a manual attempt and a second request with the same svix-id");
        let m2 = &msgs.m2;
        check_eq(self.rx.got("main", &m2.id).len(), 1, &format!("requests of {} at /main before the resend", m2.id))?;
        svx.message_attempt()
            .resend(a1.clone(), m2.id.clone(), ep.id.clone(), None)
            .await
            .lib("POST .../msg/{msg}/endpoint/{ep}/resend")?;
        let by_ep_opts = || MessageAttemptListByMsgOptions { endpoint_id: Some(ep.id.clone()), ..Default::default() };
        let man = wait_for(&format!("a manual attempt of {}", m2.id), async || {
            let atts = self.attempts_by_msg(&a1, &m2.id, by_ep_opts).await?;
            let desc = format!("{:?}", atts.iter().map(|a| (a.trigger_type, a.status)).collect::<Vec<_>>());
            let man: Vec<_> = atts
                .into_iter()
                .filter(|a| a.trigger_type == MessageAttemptTriggerType::Manual && a.status == MessageStatus::Success)
                .collect();
            Ok(((!man.is_empty()).then_some(man), desc))
        })
        .await?;
        check_eq(man.len(), 1, "manual attempts after one resend")?;
        check_eq(&man[0].url, &main_url, "url of the manual attempt")?;
        check_eq(man[0].response_status_code, 200, "responseStatusCode of the manual attempt")?;
        check_eq(
            self.attempts_by_msg(&a1, &m2.id, by_ep_opts).await?.len(),
            2,
            &format!("attempts of {} to {} after a resend", m2.id, ep.id),
        )?;
        let reqs = self.delivered(m2, "main", 2).await?;
        check_eq(reqs.len(), 2, &format!("requests of {} at /main after one resend", m2.id))?;
        check_eq(reqs[1].header("svix-id"), reqs[0].header("svix-id"), "svix-id of the resent request")?;
        check_eq(reqs[0].header("svix-id"), Some(m2.id.as_str()), "svix-id is the message id")?;
        Ok(())
    }

    async fn headers_and_secrets(&mut self, apps: &Apps, eps: &Eps) -> R<()> {
        let svx = self.svx.clone();
        let ep = svx.endpoint();
        let a1 = apps.a1.id.clone();
        let id = eps.main.id.clone();
        let lower =
            |h: BTreeMap<String, String>| h.into_iter().map(|(k, v)| (k.to_lowercase(), v)).collect::<BTreeMap<_, _>>();

        step("headers: set (PUT), read back with `sensitive`");
        let h_in = BTreeMap::from([(s("X-Drive-One"), s("1")), (s("X-Drive-Two"), s("2"))]);
        ep.set_headers(a1.clone(), id.clone(), EndpointHeadersIn::new(h_in)).await.lib("PUT endpoint headers")?;
        let h = ep.get_headers(a1.clone(), id.clone()).await.lib("GET endpoint headers")?;
        check_eq(
            lower(h.headers),
            BTreeMap::from([(s("x-drive-one"), s("1")), (s("x-drive-two"), s("2"))]),
            "headers after PUT",
        )?;
        check_eq(h.sensitive, BTreeSet::new(), "sensitive headers (none uses a secret)")?;

        step("headers: PATCH with deleteHeaders, read back, delivered");
        let mut patch = EndpointHeadersPatchIn::new(BTreeMap::from([(s("X-Drive-One"), s("uno"))]));
        patch.delete_headers = Some(vec![s("X-Drive-Two")]);
        ep.patch_headers(a1.clone(), id.clone(), patch).await.lib("PATCH endpoint headers")?;
        let h = ep.get_headers(a1.clone(), id.clone()).await.lib("GET endpoint headers after PATCH")?;
        check_eq(lower(h.headers), BTreeMap::from([(s("x-drive-one"), s("uno"))]), "headers after PATCH")?;
        check_eq(h.sensitive, BTreeSet::new(), "sensitive headers after PATCH")?;
        let m = self.send(&a1, CREATED, &["main"], MsgSpec::default()).await?;
        let r = self.delivered(&m, "main", 1).await?.remove(0);
        check_eq(r.header("x-drive-one"), Some("uno"), "patched custom header on the delivery")?;
        check_eq(r.header("x-drive-two"), None, "a deleted custom header on the delivery")?;
        check_eq(r.header("x-drive-created"), None, "a header PUT replaced, on the delivery")?;

        step("secrets: rotate_secret with a given key (default grace): the new one signs, the old one too");
        let s2 = new_secret(48);
        let out = ep
            .rotate_secret(
                a1.clone(),
                id.clone(),
                EndpointSecretRotateIn { key: Some(s2.clone()), grace_period_seconds: None },
                None,
            )
            .await
            .lib("POST .../secret/rotate with a key")?;
        check_eq(&out.key, &s2, "key answered by rotate")?;
        self.rx.add_secret("main", &s2);
        check_eq(
            ep.get_secret(a1.clone(), id.clone()).await.lib("get_secret after rotate")?.key,
            s2.clone(),
            "get_secret after rotate",
        )?;
        let m = self.send(&a1, CREATED, &["main"], MsgSpec::default()).await?;
        let req = self.delivered(&m, "main", 1).await?.remove(0);
        check!(verifies_with(&req, &s2), "the new secret does not verify a delivery after rotation");
        check!(verifies_with(&req, &eps.s_main), "the old secret does not verify a delivery during the grace period");

        step("secrets: rotate without a key, gracePeriodSeconds=0: only the new one signs");
        let out = ep
            .rotate_secret(
                a1.clone(),
                id.clone(),
                EndpointSecretRotateIn { key: None, grace_period_seconds: Some(0) },
                None,
            )
            .await
            .lib("POST .../secret/rotate without a key")?;
        let s3 = out.key;
        check!(s3.starts_with("whsec_") && s3 != s2, "generated key {:.10}...", s3);
        let n = secret_len(&s3)?;
        check!((24..=64).contains(&n), "generated secret decodes to {n} bytes");
        self.rx.add_secret("main", &s3);
        check_eq(
            ep.get_secret(a1.clone(), id.clone()).await.lib("get_secret after the second rotation")?.key,
            s3.clone(),
            "get_secret after the second rotation",
        )?;
        let m = self.send(&a1, REFUNDED, &["main", "refunded"], MsgSpec::default()).await?;
        let req = self.delivered(&m, "main", 1).await?.remove(0);
        check!(verifies_with(&req, &s3), "the generated secret does not verify a delivery");
        check!(!verifies_with(&req, &s2), "the secret expired by gracePeriodSeconds=0 still verifies");
        check!(!verifies_with(&req, &eps.s_main), "the first secret still verifies after two rotations");
        self.delivered(&m, "refunded", 1).await?;

        step("secrets: gracePeriodSeconds out of range answers 422");
        expect_error(
            "rotate with gracePeriodSeconds=604801",
            ep.rotate_secret(
                a1.clone(),
                id.clone(),
                EndpointSecretRotateIn { key: None, grace_period_seconds: Some(604_801) },
                None,
            ),
            &[422],
            None,
        )
        .await?;
        check_eq(
            ep.get_secret(a1.clone(), id.clone()).await.lib("get_secret")?.key,
            s3,
            "a refused rotation must not change the secret",
        )?;
        Ok(())
    }

    async fn disable(&mut self, apps: &Apps, eps: &Eps) -> R<()> {
        let svx = self.svx.clone();
        let a1 = apps.a1.id.clone();
        let id = eps.reff.id.clone();

        step("disable: PATCH disabled=true; a message is not delivered to it");
        let p = svx
            .endpoint()
            .patch(a1.clone(), id.clone(), EndpointPatch { disabled: Some(true), ..Default::default() })
            .await
            .lib("PATCH endpoint disabled=true")?;
        check_eq(p.disabled, Some(true), "disabled after PATCH")?;
        check_eq(
            svx.endpoint().get(a1.clone(), id.clone()).await.lib("GET endpoint")?.disabled,
            Some(true),
            "disabled read back",
        )?;
        let m = self.send(&a1, REFUNDED, &["main"], MsgSpec::default()).await?;
        self.delivered(&m, "main", 1).await?;
        let atts = wait_for(
            &format!("the not-sent attempt of {} to the disabled endpoint (docs/svix.md: status 4)", m.id),
            async || {
                let all = self.attempts_by_msg(&a1, &m.id, Default::default).await?;
                let desc =
                    format!("{:?}", all.iter().map(|a| (&a.endpoint_id, a.status, a.status_text)).collect::<Vec<_>>());
                let mine: Vec<_> = all.into_iter().filter(|a| a.endpoint_id == id).collect();
                Ok(((!mine.is_empty()).then_some(mine), desc))
            },
        )
        .await?;
        for a in &atts {
            check_eq(
                (a.status, a.status_text),
                (MessageStatus::Canceled, MessageStatusText::Canceled),
                "attempt to a disabled endpoint",
            )?;
        }
        check_eq(self.rx.got("refunded", &m.id).len(), 0, "requests a disabled endpoint got")?;

        step("disable: PATCH disabled=false; delivered again");
        let p = svx
            .endpoint()
            .patch(a1.clone(), id.clone(), EndpointPatch { disabled: Some(false), ..Default::default() })
            .await
            .lib("PATCH endpoint disabled=false")?;
        check_eq(p.disabled.unwrap_or(false), false, "disabled after PATCH disabled=false")?;
        check_eq(p.event_types, Some(set([REFUNDED])), "PATCH disabled must keep eventTypes")?;
        let m = self.send(&a1, REFUNDED, &["main", "refunded"], MsgSpec::default()).await?;
        self.delivered(&m, "refunded", 1).await?;
        self.delivered(&m, "main", 1).await?;
        Ok(())
    }

    async fn event_types(&mut self) -> R<()> {
        let svx = self.svx.clone();
        step("event types: list (pages of 1), get");
        let names: Vec<String> = collect("event types", 1, async |l, it| {
            svx.event_type()
                .list(Some(EventTypeListOptions { limit: Some(l), iterator: it, ..Default::default() }))
                .await
        })
        .await?
        .into_iter()
        .map(|e| e.name)
        .collect();
        check!(names.iter().any(|n| n == CREATED), "{CREATED} missing from the event types: {names:?}");
        check!(names.iter().any(|n| n == REFUNDED), "{REFUNDED} missing from the event types: {names:?}");
        let et = svx.event_type().get(s(CREATED)).await.lib("GET /api/v1/event-type/order.created")?;
        check_eq(et.name.as_str(), CREATED, "event type name")?;
        check_eq(et.description.as_str(), "An order was created", "event type description (the catalog's)")?;
        check_eq(et.archived.unwrap_or(false), false, "event type archived")?;
        if let Some(schemas) = et.schemas.as_ref().and_then(|v| v.as_object()).filter(|o| !o.is_empty()) {
            check_eq(schemas.keys().cloned().collect::<Vec<_>>(), vec![s("1")], "event type schemas keys")?;
        }
        let full = svx
            .event_type()
            .list(Some(EventTypeListOptions { limit: Some(250), with_content: Some(true), ..Default::default() }))
            .await
            .lib("event types listed with_content=true")?;
        check!(full.data.iter().any(|e| e.name == CREATED), "event types listed with_content=true lack {CREATED}");
        expect_error(
            "GET an event type not in the catalog",
            svx.event_type().get(format!("drs.{}.none", self.run)),
            &[404],
            None,
        )
        .await?;

        step("event types: create answers 409 for a catalog type, 422 for another");
        expect_error(
            "create of a catalog type",
            svx.event_type().create(EventTypeIn::new(s(CREATED), s("again")), None),
            &[409],
            None,
        )
        .await?;
        expect_error(
            "create of a new type",
            svx.event_type().create(EventTypeIn::new(format!("drs.{}.new", self.run), s("new")), None),
            &[422],
            Some("catalog_in_config"),
        )
        .await?;
        Ok(())
    }

    async fn portal(&mut self, apps: &Apps, eps: &Eps, msgs: &Msgs) -> R<()> {
        let svx = self.svx.clone();
        let (a1, a2) = (apps.a1.id.clone(), apps.a2.id.clone());

        step("portal: app_portal_access answers url and token; the url serves the portal page");
        let acc = svx
            .authentication()
            .app_portal_access(a1.clone(), AppPortalAccessIn::new(), None)
            .await
            .lib("POST /api/v1/auth/app-portal-access/{app}")?;
        check!(!acc.token.is_empty() && !acc.url.is_empty(), "app portal access without url or token: {acc:?}");
        check!(acc.url.contains(&acc.token), "the portal url {} does not carry the token", acc.url);
        let (status, ctype, body) = raw_get(&acc.url).await?;
        check_eq(status, 200, &format!("GET {}", acc.url.split('#').next().unwrap_or_default()))?;
        check!(ctype.contains("text/html"), "portal page content-type {ctype:?}");
        let lower = String::from_utf8_lossy(&body).to_lowercase();
        check!(lower.contains("<html") || lower.contains("<!doctype html"), "the portal page is not HTML");

        step("portal: expiry outside 3600..max_session_ttl answers 422");
        let mut short = AppPortalAccessIn::new();
        short.expiry = Some(60);
        expect_error(
            "app portal access expiry=60",
            svx.authentication().app_portal_access(a1.clone(), short, None),
            &[422],
            None,
        )
        .await?;
        let mut long = AppPortalAccessIn::new();
        long.expiry = Some(10_000_000);
        expect_error(
            "app portal access expiry=10000000",
            svx.authentication().app_portal_access(a1.clone(), long, None),
            &[422],
            None,
        )
        .await?;

        step("portal: its token lists its application's endpoints");
        let p = self.client(&acc.token);
        let ids: BTreeSet<String> = p
            .endpoint()
            .list(a1.clone(), Some(EndpointListOptions { limit: Some(250), ..Default::default() }))
            .await
            .lib("portal token: list endpoints of its application")?
            .data
            .into_iter()
            .map(|e| e.id)
            .collect();
        check_eq(
            ids,
            set([&eps.main.id, &eps.cha.id, &eps.reff.id].map(|x| x.clone())),
            "endpoints the portal token lists",
        )?;
        check_eq(
            p.endpoint().get(a1.clone(), eps.main.id.clone()).await.lib("portal token: GET endpoint")?.id,
            eps.main.id.clone(),
            "portal GET endpoint",
        )?;
        let (mids, _) = self.msg_ids(&a1, "portal messages", Some(&p), 50, MessageListOptions::default).await?;
        check!(mids.contains(&msgs.m1.id), "the portal message list lacks a message of its application");

        step("portal: not another application, not the secret, not a message");
        expect_error(
            "portal token: endpoints of another application",
            p.endpoint().list(a2.clone(), None),
            &[403, 404],
            None,
        )
        .await?;
        expect_error(
            "portal token: an endpoint of another application",
            p.endpoint().get(a2.clone(), eps.other.id.clone()),
            &[403, 404],
            None,
        )
        .await?;
        expect_error(
            "portal token: messages of another application",
            p.message().list(a2.clone(), None),
            &[403, 404],
            None,
        )
        .await?;
        expect_error(
            "portal token: get_secret",
            p.endpoint().get_secret(a1.clone(), eps.main.id.clone()),
            &[403],
            None,
        )
        .await?;
        let (before, _) = self.msg_ids(&a1, "messages", None, 250, MessageListOptions::default).await?;
        expect_error(
            "portal token: create a message",
            p.message().create(a1.clone(), MessageIn::new(s(CREATED), json!({"portal": true})), None),
            &[403],
            None,
        )
        .await?;
        let (after, _) = self.msg_ids(&a1, "messages", None, 250, MessageListOptions::default).await?;
        check_eq(set(after), set(before), "messages after the portal's refused message")?;

        step("portal: a read-only session reads but cannot change");
        let mut ro_in = AppPortalAccessIn::new();
        #[allow(deprecated)] // `readOnly` is what docs/svix.md serves (2.9.1 marks it deprecated)
        {
            ro_in.read_only = Some(true);
        }
        ro_in.expiry = Some(3600);
        let ro =
            svx.authentication().app_portal_access(a1.clone(), ro_in, None).await.lib("read-only app portal access")?;
        let ro = self.client(&ro.token);
        let listed = ro.endpoint().list(a1.clone(), None).await.lib("read-only portal token: list endpoints")?;
        check!(!listed.data.is_empty(), "the read-only portal endpoint list is empty");
        expect_error(
            "read-only portal token: PATCH endpoint",
            ro.endpoint().patch(
                a1.clone(),
                eps.main.id.clone(),
                EndpointPatch { description: Some(s("ro")), ..Default::default() },
            ),
            &[403],
            None,
        )
        .await?;
        check_eq(
            svx.endpoint().get(a1.clone(), eps.main.id.clone()).await.lib("GET endpoint")?.description,
            s("put"),
            "description after a refused read-only PATCH",
        )?;
        Ok(())
    }

    async fn tokens(&mut self, apps: &Apps, eps: &Eps) -> R<()> {
        let a1 = apps.a1.id.clone();
        step("ingest token: creates a message; cannot list applications or create an endpoint");
        let ing = self.client(&self.ingest_token.clone());
        let m = self.send(&a1, CREATED, &["main"], MsgSpec { client: Some(ing.clone()), ..Default::default() }).await?;
        self.delivered(&m, "main", 1).await?;
        expect_error("ingest token: list applications", ing.application().list(None), &[403], None).await?;
        expect_error(
            "ingest token: create an endpoint",
            ing.endpoint().create(a1.clone(), EndpointIn::new(self.rx.url("ingest")), None),
            &[403],
            None,
        )
        .await?;
        check_eq(self.ep_ids(&a1, 250).await?.len(), 3, "endpoints after the ingest token's refused create")?;

        step("a wrong token answers 401 with a JSON {code, detail}");
        let wrong = self.client(&format!("drs-wrong-token-{}", self.run));
        expect_error("wrong token: list applications", wrong.application().list(None), &[401], None).await?;

        step("another application's endpoint under the wrong application answers 404");
        expect_error(
            "GET endpoint of app 2 under app 1",
            self.svx.endpoint().get(a1.clone(), eps.other.id.clone()),
            &[404],
            None,
        )
        .await?;
        expect_error(
            "GET an application that does not exist",
            self.svx.application().get(self.uid("nobody")),
            &[404],
            None,
        )
        .await?;
        Ok(())
    }

    async fn final_deliveries(&mut self, apps: &Apps) -> R<()> {
        let (a1, a2) = (apps.a1.id.clone(), apps.a2.id.clone());
        step("deliveries: after a last message to every endpoint, each got exactly its messages");
        let last = self
            .send(
                &a1,
                REFUNDED,
                &["main", "cha", "refunded"],
                MsgSpec { channels: Some(&["ch-a"]), ..Default::default() },
            )
            .await?;
        let other = self.send(&a2, CREATED, &["other"], MsgSpec::default()).await?;
        for path in ["main", "cha", "refunded"] {
            self.delivered(&last, path, 1).await?;
        }
        self.delivered(&other, "other", 1).await?;
        for (path, want) in &self.expect {
            for id in want {
                self.rx.wait("expected delivery", path, id, 1).await?;
            }
        }
        for path in ["main", "cha", "refunded", "other", "put", "ingest"] {
            let got = self.rx.ids(path);
            let want = self.expect.get(path).cloned().unwrap_or_default();
            let extra: Vec<_> = got.difference(&want).collect();
            check!(extra.is_empty(), "/{path} got messages it must not: {extra:?}");
            check_eq(got, want, &format!("messages received at /{path}"))?;
        }
        Ok(())
    }
}

/// A plain GET (the portal page), through hyper's client: status, content-type, body.
async fn raw_get(url: &str) -> R<(u16, String, Bytes)> {
    let url = url.split('#').next().unwrap_or_default();
    let uri: hyper::Uri = url.parse().map_err(|e| format!("GET {url}: not a URI: {e}"))?;
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let resp = tokio::time::timeout(Duration::from_secs(15), client.get(uri))
        .await
        .map_err(|_| format!("GET {url}: timed out"))?
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = resp.status().as_u16();
    let ctype = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let body = resp.into_body().collect().await.map_err(|e| format!("GET {url}: body: {e}"))?.to_bytes();
    Ok((status, ctype, body))
}

#[tokio::main]
async fn main() {
    let base = env("HERALD_URL").trim_end_matches('/').to_owned();
    let admin_token = env("HERALD_ADMIN_TOKEN");
    let ingest_token = env("HERALD_INGEST_TOKEN");
    // No retries: a 5xx must show up as a failure, not be retried away. No proxy is used (the
    // library reads none from the environment; proxy_address stays None).
    let svx = Svix::new(
        admin_token,
        Some(SvixOptions { server_url: Some(base), retry_schedule: Some(vec![]), ..Default::default() }),
    );
    step("(start)");
    let rx = match Receiver::start().await {
        Ok(rx) => rx,
        Err(e) => {
            println!("FAIL at step '(start)': {e}");
            std::process::exit(1);
        }
    };
    let run: String = random_bytes(4).iter().map(|b| format!("{b:02x}")).collect();
    let mut walk = Walk { ingest_token, svx, run, rx, sent: HashMap::new(), expect: BTreeMap::new() };
    match walk.main().await {
        Ok(()) => println!("{LABEL}: all checks passed"),
        Err(why) => {
            let at = STEP.lock().unwrap().clone();
            println!("FAIL at step '{at}': {why}");
            std::process::exit(1);
        }
    }
}
