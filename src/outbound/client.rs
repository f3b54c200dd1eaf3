//! The delivery client: one HTTP/1.1 POST per attempt over rustls, with its own connection pool.
//!
//! Why not a general-purpose client: herald must resolve the host itself, refuse the whole name
//! if any resolved address is refused (SSRF guard), and connect only to an address it checked,
//! so a DNS answer that changes between check and connect (rebinding) cannot slip through. It also
//! needs the connect phase (DNS + TCP + TLS, `connect_timeout`) and the response phase (request
//! sent to response body read, `timeout`) timed separately, redirects never followed, and at most
//! `response_body_limit` bytes read. hyper's connection-level API gives exactly that; pooling is a
//! small map of idle `SendRequest`s per scheme, host and port.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue, HOST};
use hyper::{Method, Request as HttpRequest, Response};
use url::Url;

pub use super::connect::{ClientSetupError, Proxy};
use super::connect::{ConnectError, Connector, Driver, Sender, TlsConnector};
use crate::model::Status;
use crate::policy::ssrf::Guard;

/// Idle connections older than this are not reused: many servers close idle keep-alive
/// connections after 60 s or more, and reusing one they just closed would look like a failure.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle connections kept per host, so a burst does not leave hundreds of sockets open.
const MAX_IDLE_PER_HOST: usize = 16;

#[derive(Clone)]
pub struct ClientConfig {
    pub connect_timeout: Duration,
    pub timeout: Duration,
    pub response_body_limit: usize,
    pub allow_http: bool,
    pub guard: Guard,
    /// Every connection goes through this HTTP `CONNECT` proxy, if set.
    pub proxy: Option<Proxy>,
}

/// One request to send.
pub struct Request {
    pub url: Url,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    /// The endpoint's client certificate, presented when its server asks (mutual TLS).
    pub identity: Option<Arc<ClientIdentity>>,
}

/// An endpoint's TLS setup with its client certificate.
pub struct ClientIdentity {
    /// Names the certificate (its SHA-256): connections made with it are pooled apart.
    pub sha256: String,
    pub tls: TlsConnector,
}

/// What came of one request.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: Status,
    pub http_status: Option<u16>,
    /// The raw `Retry-After` header, if the receiver sent one.
    pub retry_after: Option<String>,
    pub error: Option<String>,
    /// At most `response_body_limit` bytes of the response body.
    pub body: Vec<u8>,
    /// The response's headers as kept ([`kept_headers`]); empty without a response.
    pub headers: Vec<(String, String)>,
    pub duration: Duration,
    /// How long a new connection's phases took; `None` when the request went out on a pooled
    /// connection, or no connection was made.
    pub phases: Option<Phases>,
}

/// A new connection's phases, each's own duration: the name's lookup (none for an IP
/// address), the TCP connection (through the proxy when there is one), the TLS handshake.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phases {
    pub dns: Option<Duration>,
    pub connect: Option<Duration>,
    pub tls: Option<Duration>,
}

/// A response keeps at most this many of its headers (docs/delivery-contract.md)...
pub const KEPT_HEADERS: usize = 32;
/// ...and at most this many bytes of their names and values together.
pub const KEPT_HEADER_BYTES: usize = 4096;

/// The response's headers as an attempt keeps them: in the order received, a name's values
/// joined by `, `, the first [`KEPT_HEADERS`] names whose names and values fit
/// [`KEPT_HEADER_BYTES`] together (the rest are left out whole: a value is never cut).
pub fn kept_headers(headers: &hyper::HeaderMap) -> Vec<(String, String)> {
    let mut kept = Vec::new();
    let mut bytes = 0;
    for name in headers.keys() {
        if kept.len() == KEPT_HEADERS {
            break;
        }
        let mut value = String::new();
        for (i, v) in headers.get_all(name).iter().enumerate() {
            if i > 0 {
                value.push_str(", ");
            }
            value.push_str(&String::from_utf8_lossy(v.as_bytes()));
        }
        bytes += name.as_str().len() + value.len();
        if bytes > KEPT_HEADER_BYTES {
            break;
        }
        kept.push((name.as_str().to_string(), value));
    }
    kept
}

/// (https, host, port, the client certificate's SHA-256 if one is presented).
type PoolKey = (bool, String, u16, Option<String>);

pub struct Client {
    cfg: ClientConfig,
    connector: Connector,
    idle: Mutex<HashMap<PoolKey, Vec<(Sender, Instant)>>>,
}

impl Client {
    pub fn new(
        cfg: ClientConfig,
        extra_ca_file: Option<&Path>,
    ) -> Result<Client, ClientSetupError> {
        let connector = Connector::new(cfg.guard.clone(), extra_ca_file, cfg.proxy.clone())?;
        Ok(Client {
            cfg,
            connector,
            idle: Mutex::new(HashMap::new()),
        })
    }

    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// The TLS setup presenting a client certificate (see [`Connector::with_client_auth`]).
    pub fn client_identity(
        &self,
        id: crate::outbound::identity::Identity,
    ) -> Result<ClientIdentity, String> {
        let tls = self
            .connector
            .with_client_auth(id.chain, id.key)
            .map_err(|e| format!("the client certificate cannot be used: {e}"))?;
        Ok(ClientIdentity {
            sha256: id.shown.sha256,
            tls,
        })
    }

    /// Sends one POST and classifies the result. Never panics, never follows a redirect.
    pub async fn send(&self, req: Request) -> Outcome {
        let start = Instant::now();
        let https = match req.url.scheme() {
            "https" => true,
            "http" if self.cfg.allow_http => false,
            _ => {
                return fail(
                    start,
                    Status::Blocked,
                    "plain http is not allowed (delivery.allow_http = false)".into(),
                )
            }
        };
        let Some(host) = req.url.host_str().map(str::to_string) else {
            return fail(start, Status::ConnectionError, "url has no host".into());
        };
        let port = req.url.port_or_known_default().unwrap_or(443);
        let key: PoolKey = (
            https,
            host.clone(),
            port,
            req.identity.as_ref().map(|i| i.sha256.clone()),
        );
        let http_req = match build_request(&req) {
            Ok(r) => r,
            Err(e) => return fail(start, Status::ConnectionError, e),
        };

        // A pooled connection first; if the server closed it before taking the request, the
        // request comes back unsent and goes out on a fresh connection instead.
        let mut http_req = Some(http_req);
        while let Some(mut sender) = self.take_idle(&key) {
            let Some(r) = http_req.take() else { break };
            match self.exchange(&mut sender, r, start).await {
                Exchange::Done(outcome, reusable) => {
                    if reusable {
                        self.put_idle(key, sender);
                    }
                    return outcome;
                }
                Exchange::Unsent(r) => http_req = Some(r),
            }
        }
        let Some(http_req) = http_req else {
            return fail(start, Status::ConnectionError, "request was lost".into());
        };

        let (mut sender, driver, phases) = match self.open(&req, &host, port, https, start).await {
            Ok(connection) => connection,
            Err(failed) => return failed,
        };
        let mut outcome = match self.exchange(&mut sender, http_req, start).await {
            Exchange::Done(outcome, reusable) => {
                if reusable {
                    self.put_idle(key, sender);
                }
                outcome
            }
            Exchange::Unsent(..) => closed_before_sent(driver, start).await,
        };
        outcome.phases = Some(phases);
        outcome
    }

    /// A new connection to the request's endpoint (through the SSRF guard, the proxy, TLS with
    /// its client certificate), within the connect timeout; the failed attempt's outcome if not.
    async fn open(
        &self,
        req: &Request,
        host: &str,
        port: u16,
        https: bool,
        start: Instant,
    ) -> Result<(Sender, Driver, Phases), Outcome> {
        let connect = tokio::time::timeout(
            self.cfg.connect_timeout,
            self.connector.connect(
                &req.url,
                host,
                port,
                https,
                req.identity.as_ref().map(|i| &i.tls),
            ),
        );
        match connect.await {
            Err(_) => Err(fail(
                start,
                Status::Timeout,
                format!(
                    "connecting took longer than {}",
                    humantime::format_duration(self.cfg.connect_timeout)
                ),
            )),
            Ok(Err(ConnectError::Blocked(r))) => Err(fail(start, Status::Blocked, r.to_string())),
            Ok(Err(ConnectError::Resolve(e))) => Err(fail(
                start,
                Status::ConnectionError,
                format!("cannot resolve {host}: {e}"),
            )),
            Ok(Err(ConnectError::Tcp(e))) => Err(fail(start, Status::ConnectionError, e)),
            Ok(Err(ConnectError::Tls(e))) => Err(fail(start, Status::TlsError, e)),
            Ok(Ok(connection)) => Ok(connection),
        }
    }

    /// Sends the request on a ready connection and reads the response within `timeout`.
    async fn exchange(
        &self,
        sender: &mut Sender,
        req: HttpRequest<Full<Bytes>>,
        start: Instant,
    ) -> Exchange {
        let limit = self.cfg.response_body_limit;
        let timeout = self.cfg.timeout;
        let work = async {
            if sender.ready().await.is_err() {
                return Err(Some(req));
            }
            let resp = match sender.try_send_request(req).await {
                Ok(r) => r,
                Err(mut e) => {
                    return match e.take_message() {
                        Some(r) => Err(Some(r)),
                        None => Ok(Err(e.into_error())),
                    }
                }
            };
            Ok(Ok(read_limited(resp, limit).await))
        };
        match tokio::time::timeout(timeout, work).await {
            Err(_) => Exchange::Done(
                fail(
                    start,
                    Status::Timeout,
                    format!(
                        "no complete response within {}",
                        humantime::format_duration(timeout)
                    ),
                ),
                false,
            ),
            Ok(Err(Some(req))) => Exchange::Unsent(req),
            Ok(Err(None)) => Exchange::Done(
                fail(start, Status::ConnectionError, "connection closed".into()),
                false,
            ),
            Ok(Ok(Err(e))) => {
                // A TLS 1.3 server judges the client's certificate after the client's side of
                // the handshake is done: its refusal arrives as an alert on the first read.
                let status = if is_tls_failure(&e) {
                    Status::TlsError
                } else {
                    Status::ConnectionError
                };
                Exchange::Done(fail(start, status, describe_hyper_error(&e)), false)
            }
            Ok(Ok(Ok((head, body, complete, body_err)))) => {
                answered(start, &head, body, complete, body_err)
            }
        }
    }

    fn take_idle(&self, key: &PoolKey) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(key)?;
        while let Some((sender, since)) = list.pop() {
            if since.elapsed() < IDLE_TIMEOUT && !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn put_idle(&self, key: PoolKey, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.entry(key).or_default();
        list.retain(|(s, since)| since.elapsed() < IDLE_TIMEOUT && !s.is_closed());
        if list.len() < MAX_IDLE_PER_HOST {
            list.push((sender, Instant::now()));
        }
    }
}

enum Exchange {
    /// The outcome, and whether the connection may be reused.
    Done(Outcome, bool),
    /// The connection was closed before the request left: try another one.
    Unsent(HttpRequest<Full<Bytes>>),
}

fn fail(start: Instant, status: Status, error: String) -> Outcome {
    Outcome {
        status,
        http_status: None,
        retry_after: None,
        error: Some(error),
        body: Vec::new(),
        headers: Vec::new(),
        duration: start.elapsed(),
        phases: None,
    }
}

fn build_request(req: &Request) -> Result<HttpRequest<Full<Bytes>>, String> {
    let path = match req.url.query() {
        Some(q) => format!("{}?{q}", req.url.path()),
        None => req.url.path().to_string(),
    };
    let host = match req.url.port() {
        Some(p) => format!("{}:{p}", req.url.host_str().unwrap_or_default()),
        None => req.url.host_str().unwrap_or_default().to_string(),
    };
    let mut builder = HttpRequest::builder()
        .method(Method::POST)
        .uri(path)
        .header(HOST, host);
    for (k, v) in &req.headers {
        builder = builder.header(k, v);
    }
    builder
        .body(Full::new(req.body.clone()))
        .map_err(|e| format!("cannot build the request: {e}"))
}

/// The outcome of a request the endpoint answered: delivered on a 2xx, an HTTP error
/// otherwise (its `Retry-After` kept), a connection error if the body broke off; `complete`:
/// whether the connection may be used again.
fn answered(
    start: Instant,
    head: &hyper::http::response::Parts,
    body: Vec<u8>,
    complete: bool,
    body_err: Option<String>,
) -> Exchange {
    let code = head.status.as_u16();
    if let Some(e) = body_err {
        return Exchange::Done(
            Outcome {
                http_status: Some(code),
                body,
                headers: kept_headers(&head.headers),
                ..fail(start, Status::ConnectionError, e)
            },
            false,
        );
    }
    let status = if head.status.is_success() {
        Status::Delivered
    } else {
        Status::HttpError
    };
    let error = (!head.status.is_success()).then(|| {
        if head.status.is_redirection() {
            format!("HTTP {code}: redirects are not followed")
        } else {
            format!("HTTP {code}")
        }
    });
    let retry_after = head
        .headers
        .get(hyper::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Exchange::Done(
        Outcome {
            status,
            http_status: Some(code),
            retry_after,
            error,
            body,
            headers: kept_headers(&head.headers),
            duration: start.elapsed(),
            phases: None,
        },
        complete,
    )
}

/// Reads at most `limit` body bytes. Returns the head, the bytes, whether the body was read to
/// its end (only then can the connection be reused), and a body error if one cut it short.
async fn read_limited(
    resp: Response<hyper::body::Incoming>,
    limit: usize,
) -> (hyper::http::response::Parts, Vec<u8>, bool, Option<String>) {
    let (head, mut body) = resp.into_parts();
    let mut buf = Vec::new();
    loop {
        match body.frame().await {
            None => return (head, buf, true, None),
            Some(Err(e)) => return (head, buf, false, Some(describe_hyper_error(&e))),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let room = limit.saturating_sub(buf.len());
                    buf.extend_from_slice(&data[..data.len().min(room)]);
                    if data.len() > room {
                        // The rest is not read: the connection is dropped instead of drained.
                        return (head, buf, false, None);
                    }
                }
            }
        }
    }
}

/// Whether a TLS error (an alert from the server, a bad record) caused `e`.
/// The outcome of a fresh connection that died before the request left. Why is the driving
/// task's error (the sender knows only that its channel closed): a server that refused the
/// client certificate (TLS 1.3) closes it with an alert right after the handshake.
async fn closed_before_sent(driver: Driver, start: Instant) -> Outcome {
    let cause = match tokio::time::timeout(Duration::from_secs(1), driver).await {
        Ok(Ok(Err(e))) => Some(e),
        _ => None,
    };
    match cause {
        Some(e) if is_tls_failure(&e) => fail(start, Status::TlsError, describe_hyper_error(&e)),
        Some(e) => fail(
            start,
            Status::ConnectionError,
            format!(
                "connection closed before the request was sent: {}",
                describe_hyper_error(&e)
            ),
        ),
        None => fail(
            start,
            Status::ConnectionError,
            "connection closed before the request was sent".into(),
        ),
    }
}

fn is_tls_failure(e: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<rustls::Error>() {
            return true;
        }
        // `io::Error::source` skips the error it wraps; look at that one itself.
        if let Some(inner) = s
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            if inner.is::<rustls::Error>() {
                return true;
            }
        }
        source = s.source();
    }
    false
}

fn describe_hyper_error(e: &hyper::Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}
