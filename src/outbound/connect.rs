//! Connections for deliveries: resolve the name, check every address with the SSRF guard,
//! connect to a checked one (never resolving again), TLS with the web PKI roots plus
//! `delivery.extra_ca_file`, and the HTTP/1.1 handshake.

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use url::Url;

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

/// Why a connection could not be made.
pub enum ConnectError {
    Blocked(Refused),
    Resolve(String),
    Tcp(String),
    Tls(String),
}

/// Makes checked connections.
pub struct Connector {
    guard: Guard,
    tls: TlsConnector,
}

impl Connector {
    pub fn new(guard: Guard, extra_ca_file: Option<&Path>) -> Result<Connector, ClientSetupError> {
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
        Ok(Connector {
            guard,
            tls: TlsConnector::from(Arc::new(tls)),
        })
    }

    pub async fn connect(
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
            self.guard.check(a.ip()).map_err(ConnectError::Blocked)?;
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
