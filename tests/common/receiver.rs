//! A real HTTP/1.1 webhook receiver (plain or HTTPS) that records requests.
//!
//! Herald's delivery path must be tested against a genuine server: real TCP,
//! real TLS with a certificate chain, keep-alive, slow and hanging peers. The
//! receiver answers each request with whatever its `behaviour` closure says,
//! and records every request so tests can assert on method, headers and body.
//!
//! Constructors are synchronous but spawn onto the current Tokio runtime, so
//! they must be called from inside one (e.g. a `#[tokio::test]`). The server
//! stops (all listeners and connections, including hung ones, are dropped)
//! when the `Receiver` is dropped.

use std::convert::Infallible;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::{JoinHandle, JoinSet};

use super::tls::TestCa;

/// One request as the receiver saw it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    /// The request target: path plus `?query` if there was one.
    pub path: String,
    /// Header names are lower-case; order and duplicates are kept.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// When the full request (headers and body) had arrived.
    pub at: Instant,
}

impl Recorded {
    /// First value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as UTF-8 text (lossy), for messages and simple asserts.
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON; panics with the raw body if it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("request body is not JSON ({e}): {}", self.body_text()))
    }
}

/// What to answer to one request.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Waited before answering (simulates a slow receiver).
    pub delay: Duration,
    /// Never answer; hold the connection open until the receiver is dropped.
    pub hang: bool,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            delay: Duration::ZERO,
            hang: false,
        }
    }

    /// Never answers (for timeout tests); the connection is held open until
    /// the `Receiver` is dropped.
    pub fn hang() -> Self {
        Reply {
            hang: true,
            ..Reply::status(200)
        }
    }

    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// Decides the reply for a request; the `usize` is the 0-based index of this
/// request among all requests the receiver has seen (any connection, any path).
pub type Behaviour = Arc<dyn Fn(&Recorded, usize) -> Reply + Send + Sync>;

/// Wraps a closure as a [`Behaviour`] (saves writing `Arc::new` and the type).
pub fn behaviour(f: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static) -> Behaviour {
    Arc::new(f)
}

struct Shared {
    requests: Mutex<Vec<Recorded>>,
    arrived: Notify,
    behaviour: Behaviour,
    connections: AtomicUsize,
    /// Each failed TLS handshake: how long after its connection was accepted, and why.
    tls_failures: Mutex<Vec<String>>,
}

/// A running receiver. See the module docs.
pub struct Receiver {
    shared: Arc<Shared>,
    port: u16,
    tls: bool,
    server: JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // Aborting the accept task drops its JoinSet, which aborts every
        // connection task (hung ones too) and so closes their sockets.
        self.server.abort();
    }
}

impl Receiver {
    /// Plain HTTP receiver on 127.0.0.1 (URL uses `127.0.0.1`).
    pub fn http(behaviour: Behaviour) -> Receiver {
        Self::start(None, behaviour)
    }

    /// HTTPS receiver presenting a `localhost` certificate signed by `ca`
    /// (URL uses `localhost`, so hostname verification is exercised).
    pub fn https(ca: &TestCa, behaviour: Behaviour) -> Receiver {
        Self::start(Some(ca.server_config()), behaviour)
    }

    /// HTTPS receiver with the given TLS setup (e.g. one requiring client certificates).
    pub fn https_with(config: Arc<rustls::ServerConfig>, behaviour: Behaviour) -> Receiver {
        Self::start(Some(config), behaviour)
    }

    /// HTTPS receiver that always answers 200 with an empty body.
    pub fn ok_https(ca: &TestCa) -> Receiver {
        Self::https(ca, behaviour(|_, _| Reply::status(200)))
    }

    /// Plain HTTP receiver that always answers 200 with an empty body.
    pub fn ok_http() -> Receiver {
        Self::http(behaviour(|_, _| Reply::status(200)))
    }

    /// `https://localhost:PORT/path` or `http://127.0.0.1:PORT/path`.
    /// A missing leading `/` on `path` is added.
    pub fn url(&self, path: &str) -> String {
        let slash = if path.starts_with('/') { "" } else { "/" };
        if self.tls {
            format!("https://localhost:{}{slash}{path}", self.port)
        } else {
            format!("http://127.0.0.1:{}{slash}{path}", self.port)
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Snapshot of all requests so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The `webhook-id`s of the requests so far (each event's id once, however often it came).
    pub fn webhook_ids(&self) -> std::collections::HashSet<String> {
        self.shared
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter_map(|r| r.header("webhook-id").map(str::to_string))
            .collect()
    }

    pub fn count(&self) -> usize {
        self.shared.requests.lock().unwrap().len()
    }

    /// Asserts that no second (from any request on) saw more than `most` of the requests so
    /// far: an endpoint's rate limit, which allows its rate plus a burst in any one second.
    pub fn assert_at_most_per_second(&self, most: usize) {
        let times: Vec<Instant> = self.requests().iter().map(|r| r.at).collect();
        for (i, start) in times.iter().enumerate() {
            let in_window = times[i..]
                .iter()
                .take_while(|t| t.duration_since(*start) < Duration::from_secs(1))
                .count();
            assert!(
                in_window <= most,
                "{in_window} requests within one second from request {i} (at most {most})"
            );
        }
    }

    /// The `type` of each request's JSON body so far, in arrival order (operator events).
    pub fn event_types(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| r.json()["type"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// TCP connections accepted so far (fewer than requests = keep-alive reuse).
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// TLS handshakes that failed (e.g. the client rejected our certificate), each with how
    /// long after its connection was accepted it failed, and why: for a test's failure message.
    pub fn tls_failures(&self) -> Vec<String> {
        self.shared
            .tls_failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits until at least `n` requests have arrived and returns all of them;
    /// panics after `deadline` saying how many did arrive.
    pub async fn wait_for(&self, n: usize, deadline: Duration) -> Vec<Recorded> {
        let end = tokio::time::Instant::now() + deadline;
        loop {
            // Register interest before checking, so no notification is lost.
            let notified = self.shared.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let seen = self.requests();
            if seen.len() >= n {
                return seen;
            }
            if tokio::time::timeout_at(end, notified).await.is_err() {
                let seen = self.requests();
                if seen.len() >= n {
                    return seen;
                }
                let list: Vec<String> = seen
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect();
                panic!(
                    "receiver on port {}: expected at least {n} request(s) within {deadline:?}, \
                     but only {} arrived: {list:?}",
                    self.port,
                    seen.len()
                );
            }
        }
    }

    fn start(tls: Option<Arc<rustls::ServerConfig>>, behaviour: Behaviour) -> Receiver {
        let (listeners, port) = bind_loopback();
        let shared = Arc::new(Shared {
            requests: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            behaviour,
            connections: AtomicUsize::new(0),
            tls_failures: Mutex::new(Vec::new()),
        });
        let is_tls = tls.is_some();
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let server = tokio::spawn(serve(listeners, acceptor, shared.clone()));
        Receiver {
            shared,
            port,
            tls: is_tls,
            server,
        }
    }
}

/// Binds 127.0.0.1 on a free port and, best effort, ::1 on the same port, so
/// `localhost` works whichever address family the client resolves it to.
fn bind_loopback() -> (Vec<TcpListener>, u16) {
    for _ in 0..20 {
        let v4 = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
        let port = v4.local_addr().expect("local addr").port();
        let mut std_listeners = vec![v4];
        match std::net::TcpListener::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, port))) {
            Ok(v6) => std_listeners.push(v6),
            // Someone else holds [::1]:port: pick another port.
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            // No IPv6 loopback here: IPv4 only.
            Err(_) => {}
        }
        let listeners = std_listeners
            .into_iter()
            .map(|l| {
                l.set_nonblocking(true).expect("set_nonblocking");
                TcpListener::from_std(l).expect("Receiver must be created inside a Tokio runtime")
            })
            .collect();
        return (listeners, port);
    }
    panic!("could not find a port free on both 127.0.0.1 and ::1");
}

/// Accept loop. Connection tasks live in a JoinSet owned by this task, so
/// aborting this task tears every connection down.
async fn serve(
    listeners: Vec<TcpListener>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    for listener in listeners {
        let tx = tx.clone();
        tasks.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                if tx.send(stream).is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    loop {
        tokio::select! {
            stream = rx.recv() => {
                let Some(stream) = stream else { break };
                let _ = stream.set_nodelay(true);
                shared.connections.fetch_add(1, Ordering::SeqCst);
                tasks.spawn(connection(stream, acceptor.clone(), shared.clone()));
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
) {
    let state = shared.clone();
    let service = service_fn(move |req| handle(req, state.clone()));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.keep_alive(true);
    // Errors (client went away, failed handshake) just end the connection;
    // tests observe them through what the client under test reports.
    match acceptor {
        Some(acceptor) => {
            let accepted = std::time::Instant::now();
            match acceptor.accept(stream).await {
                Ok(tls) => {
                    let _ = http.serve_connection(TokioIo::new(tls), service).await;
                }
                Err(e) => {
                    let failed = format!("after {:?}: {e}", accepted.elapsed());
                    shared
                        .tls_failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(failed);
                }
            }
        }
        None => {
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        }
    }
}

async fn handle(
    req: hyper::Request<Incoming>,
    shared: Arc<Shared>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    // A body that fails mid-way is recorded as what arrived (empty).
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let recorded = Recorded {
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| parts.uri.path().to_string()),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
                (k.as_str().to_ascii_lowercase(), v)
            })
            .collect(),
        body,
        at: Instant::now(),
    };
    let index = {
        let mut requests = shared.requests.lock().unwrap();
        requests.push(recorded.clone());
        requests.len() - 1
    };
    shared.arrived.notify_waiters();

    let reply = (shared.behaviour)(&recorded, index);
    if reply.hang {
        std::future::pending::<()>().await;
    }
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut response = hyper::Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        response = response.header(name.as_str(), value.as_str());
    }
    let response = response
        .body(Full::new(Bytes::from(reply.body)))
        .unwrap_or_else(|e| panic!("behaviour produced an invalid reply: {e}"));
    Ok(response)
}
