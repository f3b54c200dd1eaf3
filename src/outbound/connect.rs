//! Connections for deliveries: resolve the name, check every address with the SSRF guard,
//! connect to a checked one (never resolving again) directly or through the egress proxy's
//! `CONNECT` to that address, TLS with the web PKI roots plus `delivery.extra_ca_file` (SNI and
//! the certificate check with the endpoint's name), and the HTTP/1.1 handshake.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1;
use hyper::header::HOST;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
pub use tokio_rustls::TlsConnector;
use url::Url;

use super::client::Phases;
use crate::policy::ssrf::{Guard, Refused};
use crate::policy::url::literal_ip;

#[derive(Debug, thiserror::Error)]
pub enum ClientSetupError {
    #[error("cannot read delivery.extra_ca_file {path}: {reason}")]
    CaFile { path: String, reason: String },
    #[error("cannot set up TLS: {0}")]
    Tls(#[source] rustls::Error),
}

/// A connection's request half.
pub type Sender = http1::SendRequest<Full<Bytes>>;
/// The task that drives a connection, ending with the connection's error if one closed it.
pub type Driver = tokio::task::JoinHandle<Result<(), hyper::Error>>;

/// Why a connection could not be made.
pub enum ConnectError {
    Blocked(Refused),
    Resolve(String),
    Tcp(String),
    Tls(String),
}

/// An HTTP `CONNECT` proxy (`delivery.proxy`).
#[derive(Debug, Clone)]
pub struct Proxy {
    pub host: String,
    pub port: u16,
}

/// Makes checked connections.
pub struct Connector {
    guard: Guard,
    tls: TlsConnector,
    /// The trusted roots, for the TLS setups of endpoints with a client certificate.
    roots: Arc<rustls::RootCertStore>,
    proxy: Option<Proxy>,
}

impl Connector {
    pub fn new(
        guard: Guard,
        extra_ca_file: Option<&Path>,
        proxy: Option<Proxy>,
    ) -> Result<Connector, ClientSetupError> {
        let roots =
            crate::tls::roots(extra_ca_file).map_err(|reason| ClientSetupError::CaFile {
                path: extra_ca_file.map_or_else(String::new, |p| p.display().to_string()),
                reason,
            })?;
        let roots = Arc::new(roots);
        let tls = crate::tls::client_builder(&roots)
            .map_err(ClientSetupError::Tls)?
            .with_no_client_auth();
        Ok(Connector {
            guard,
            tls: TlsConnector::from(Arc::new(tls)),
            roots,
            proxy,
        })
    }

    /// The TLS setup of an endpoint with a client certificate: the same roots and versions,
    /// presenting `chain` with `key` when the server asks.
    pub fn with_client_auth(
        &self,
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<TlsConnector, rustls::Error> {
        let tls = crate::tls::client_builder(&self.roots)?.with_client_auth_cert(chain, key)?;
        Ok(TlsConnector::from(Arc::new(tls)))
    }

    /// A connection to the endpoint at `url` and the task driving it; `tls` replaces the default TLS setup (an
    /// endpoint's own, with its client certificate).
    pub async fn connect(
        &self,
        url: &Url,
        host: &str,
        port: u16,
        https: bool,
        tls: Option<&TlsConnector>,
    ) -> Result<(Sender, Driver, Phases), ConnectError> {
        let mut phases = Phases::default();
        let mut phase = Instant::now();
        let addrs: Vec<SocketAddr> = match literal_ip(url) {
            Some(ip) => vec![SocketAddr::new(ip, port)],
            None => {
                let found = tokio::net::lookup_host((host, port))
                    .await
                    .map_err(|e| ConnectError::Resolve(e.to_string()))?
                    .collect();
                phases.dns = Some(phase.elapsed());
                phase = Instant::now();
                found
            }
        };
        if addrs.is_empty() {
            return Err(ConnectError::Resolve("no addresses".into()));
        }
        // Every address must pass: a name that resolves to one public and one private address
        // is refused whole, since which one is used must not be up to the resolver.
        for a in &addrs {
            self.guard.check(a.ip()).map_err(ConnectError::Blocked)?;
        }
        // Each checked address in turn, until one connects (directly, or through the proxy).
        let mut last_err = String::new();
        let mut base: Option<Stream> = None;
        for a in &addrs {
            let opened = match &self.proxy {
                None => open_tcp(*a).await.map(|s| Box::new(s) as Stream),
                Some(p) => tunnel(p, *a).await.map(|s| Box::new(s) as Stream),
            };
            match opened {
                Ok(s) => {
                    base = Some(s);
                    break;
                }
                Err(e) => last_err = e,
            }
        }
        let base = base.ok_or(ConnectError::Tcp(last_err))?;
        phases.connect = Some(phase.elapsed());
        phase = Instant::now();
        let stream: Stream = if https {
            let name = server_name(url, host).map_err(ConnectError::Tls)?;
            let tls = tls
                .unwrap_or(&self.tls)
                .connect(name, base)
                .await
                .map_err(|e| ConnectError::Tls(describe_tls_error(&e)))?;
            phases.tls = Some(phase.elapsed());
            Box::new(tls)
        } else {
            base
        };
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ConnectError::Tcp(e.to_string()))?;
        // Ends when the connection closes or every sender is dropped; its error says why a
        // connection closed before a request could leave.
        let driver = tokio::spawn(conn);
        Ok((sender, driver, phases))
    }
}

async fn open_tcp(a: SocketAddr) -> Result<TcpStream, String> {
    let tcp = TcpStream::connect(a)
        .await
        .map_err(|e| format!("cannot connect to {a}: {e}"))?;
    // Attempts are small requests answered quickly: send them without Nagle's delay.
    let _ = tcp.set_nodelay(true);
    Ok(tcp)
}

/// A tunnel to `target` (a checked address) through the proxy: `CONNECT ip:port`, then the
/// proxy's connection carries the bytes.
async fn tunnel(
    proxy: &Proxy,
    target: SocketAddr,
) -> Result<TokioIo<hyper::upgrade::Upgraded>, String> {
    let via = format!("the proxy {}:{}", proxy.host, proxy.port);
    let tcp = TcpStream::connect((proxy.host.as_str(), proxy.port))
        .await
        .map_err(|e| format!("cannot connect to {via}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (mut sender, conn) = http1::handshake::<_, Full<Bytes>>(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("{via}: {e}"))?;
    tokio::spawn(async move {
        // Ends once the tunnel is handed over (or the proxy closes the connection).
        let _ = conn.with_upgrades().await;
    });
    let authority = target.to_string();
    let req = hyper::Request::connect(authority.as_str())
        .header(HOST, authority.as_str())
        .body(Full::new(Bytes::new()))
        .map_err(|e| format!("{via}: {e}"))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("{via}: CONNECT {authority}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!(
            "{via} refused CONNECT {authority}: {}",
            resp.status()
        ));
    }
    let upgraded = hyper::upgrade::on(resp)
        .await
        .map_err(|e| format!("{via}: CONNECT {authority}: {e}"))?;
    Ok(TokioIo::new(upgraded))
}

fn server_name(url: &Url, host: &str) -> Result<ServerName<'static>, String> {
    match literal_ip(url) {
        Some(ip) => Ok(ServerName::IpAddress(ip.into())),
        None => ServerName::try_from(host.to_string())
            .map_err(|e| format!("{host} is not a valid TLS server name: {e}")),
    }
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

/// A connection's byte stream: TCP, a tunnel through the proxy, or TLS over either.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Stream = Box<dyn Io>;
