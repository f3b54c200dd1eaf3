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
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::header::{HeaderName, HeaderValue, HOST};
use hyper::{Method, Request as HttpRequest, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use url::Url;

use crate::model::Status;
use crate::policy::ssrf::{Guard, Refused};
use crate::policy::url::literal_ip;

/// Idle connections older than this are not reused: many servers close idle keep-alive
/// connections after 60 s or more, and reusing one they just closed would look like a failure.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle connections kept per host, so a burst does not leave hundreds of sockets open.
const MAX_IDLE_PER_HOST: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum ClientSetupError {
    #[error("cannot read delivery.extra_ca_file {path}: {reason}")]
    CaFile { path: String, reason: String },
    #[error("cannot set up TLS: {0}")]
    Tls(#[source] rustls::Error),
}

#[derive(Clone)]
pub struct ClientConfig {
    pub connect_timeout: Duration,
    pub timeout: Duration,
    pub response_body_limit: usize,
    pub allow_http: bool,
    pub guard: Guard,
}

/// One request to send.
pub struct Request {
    pub url: Url,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
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
    pub duration: Duration,
}

type PoolKey = (bool, String, u16);
type Sender = http1::SendRequest<Full<Bytes>>;

pub struct Client {
    cfg: ClientConfig,
    tls: TlsConnector,
    idle: Mutex<HashMap<PoolKey, Vec<(Sender, Instant)>>>,
}

/// Why a connection could not be made.
enum ConnectError {
    Blocked(Refused),
    Resolve(String),
    Tcp(String),
    Tls(String),
}

impl Client {
    pub fn new(
        cfg: ClientConfig,
        extra_ca_file: Option<&Path>,
    ) -> Result<Client, ClientSetupError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = extra_ca_file {
            let ca_err = |reason: String| ClientSetupError::CaFile {
                path: path.display().to_string(),
                reason,
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| ca_err(e.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ca_err(e.to_string()))?;
            if certs.is_empty() {
                return Err(ca_err("no PEM certificate in the file".into()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| ca_err(e.to_string()))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(ClientSetupError::Tls)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Client {
            cfg,
            tls: TlsConnector::from(Arc::new(tls)),
            idle: Mutex::new(HashMap::new()),
        })
    }

    pub fn config(&self) -> &ClientConfig {
        &self.cfg
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
        let key: PoolKey = (https, host.clone(), port);
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

        let connect = tokio::time::timeout(
            self.cfg.connect_timeout,
            self.connect(&req.url, &host, port, https),
        );
        let mut sender = match connect.await {
            Err(_) => {
                return fail(
                    start,
                    Status::Timeout,
                    format!(
                        "connecting took longer than {}",
                        humantime::format_duration(self.cfg.connect_timeout)
                    ),
                )
            }
            Ok(Err(ConnectError::Blocked(r))) => {
                return fail(start, Status::Blocked, r.to_string())
            }
            Ok(Err(ConnectError::Resolve(e))) => {
                return fail(
                    start,
                    Status::ConnectionError,
                    format!("cannot resolve {host}: {e}"),
                )
            }
            Ok(Err(ConnectError::Tcp(e))) => return fail(start, Status::ConnectionError, e),
            Ok(Err(ConnectError::Tls(e))) => return fail(start, Status::TlsError, e),
            Ok(Ok(s)) => s,
        };
        match self.exchange(&mut sender, http_req, start).await {
            Exchange::Done(outcome, reusable) => {
                if reusable {
                    self.put_idle(key, sender);
                }
                outcome
            }
            Exchange::Unsent(_) => fail(
                start,
                Status::ConnectionError,
                "connection closed before the request was sent".into(),
            ),
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
            Ok(Ok(Err(e))) => Exchange::Done(
                fail(start, Status::ConnectionError, describe_hyper_error(&e)),
                false,
            ),
            Ok(Ok(Ok((head, body, complete, body_err)))) => {
                let code = head.status.as_u16();
                if let Some(e) = body_err {
                    return Exchange::Done(
                        Outcome {
                            http_status: Some(code),
                            body,
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
                        duration: start.elapsed(),
                    },
                    complete,
                )
            }
        }
    }

    async fn connect(
        &self,
        url: &Url,
        host: &str,
        port: u16,
        https: bool,
    ) -> Result<Sender, ConnectError> {
        let addrs: Vec<SocketAddr> = match literal_ip(url) {
            Some(ip) => vec![SocketAddr::new(ip, port)],
            None => tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| ConnectError::Resolve(e.to_string()))?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(ConnectError::Resolve("no addresses".into()));
        }
        // Every address must pass: a name that resolves to one public and one private address
        // is refused whole, since which one is used must not be up to the resolver.
        for a in &addrs {
            self.cfg
                .guard
                .check(a.ip())
                .map_err(ConnectError::Blocked)?;
        }
        let mut last_err = String::new();
        let mut tcp = None;
        for a in &addrs {
            match TcpStream::connect(a).await {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last_err = format!("cannot connect to {a}: {e}"),
            }
        }
        let tcp = tcp.ok_or(ConnectError::Tcp(last_err))?;
        // Attempts are small requests answered quickly: send them without Nagle's delay.
        let _ = tcp.set_nodelay(true);
        let stream = if https {
            let name = server_name(url, host).map_err(ConnectError::Tls)?;
            let tls = self
                .tls
                .connect(name, tcp)
                .await
                .map_err(|e| ConnectError::Tls(describe_tls_error(&e)))?;
            Stream::Tls(Box::new(tls))
        } else {
            Stream::Plain(tcp)
        };
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ConnectError::Tcp(e.to_string()))?;
        tokio::spawn(async move {
            // Ends when the connection closes or every sender is dropped.
            let _ = conn.await;
        });
        Ok(sender)
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
        duration: start.elapsed(),
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

fn server_name(url: &Url, host: &str) -> Result<ServerName<'static>, String> {
    match literal_ip(url) {
        Some(ip) => Ok(ServerName::IpAddress(ip.into())),
        None => ServerName::try_from(host.to_string())
            .map_err(|e| format!("{host} is not a valid TLS server name: {e}")),
    }
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

fn describe_tls_error(e: &std::io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => format!("TLS handshake failed: {tls}"),
        None => format!("TLS handshake failed: {e}"),
    }
}

/// A TCP stream, with or without TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
