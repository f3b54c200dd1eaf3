//! The API's connections: accept within `server.max_connections`, parse with
//! `server.max_header_bytes`, bound every request by `server.request_timeout`, and close them
//! all within the grace period when herald stops.
//!
//! Limits (docs/operations.md): nobody without a token can exhaust the server.
//! - Past `max_connections` open connections herald stops accepting; new connections wait in
//!   the kernel's backlog (or are refused once it is full) while established ones keep working,
//!   so file descriptors are left for the store and outbound deliveries.
//! - hyper answers `431` to a request head larger than `max_header_bytes` (its read buffer
//!   never grows past that).
//! - A request's head and body must arrive within `request_timeout` of its first byte: hyper's
//!   header timeout covers the head (and idle keep-alive connections), and the body readers
//!   answer `408` and close the connection at the deadline ([`RequestDeadline`]).
//! - At shutdown every connection is asked to close gracefully; those still open when the grace
//!   period ends are dropped, so a client that stops sending mid-body never holds herald up.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::AppState;
use crate::shutdown::Shutdown;

/// When the request being read must have fully arrived: its first byte's time plus
/// `server.request_timeout`. Put in each request's extensions for the body readers.
#[derive(Debug, Clone, Copy)]
pub struct RequestDeadline(pub Instant);

/// When the next request's first byte arrived on a connection. Bytes read while a request is
/// being served (its body) do not count; the next request's clock starts after it is answered.
#[derive(Default)]
struct FirstByte(Mutex<RequestClock>);

#[derive(Default)]
struct RequestClock {
    first_byte: Option<Instant>,
    serving: bool,
}

impl FirstByte {
    fn lock(&self) -> std::sync::MutexGuard<'_, RequestClock> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bytes_arrived(&self) {
        let mut c = self.lock();
        if !c.serving && c.first_byte.is_none() {
            c.first_byte = Some(Instant::now());
        }
    }

    /// A request's head arrived: when its first byte did.
    fn serve(&self) -> Instant {
        let mut c = self.lock();
        c.serving = true;
        c.first_byte.take().unwrap_or_else(Instant::now)
    }

    fn served(&self) {
        self.lock().serving = false;
    }
}

/// The TCP stream, noting when each request's first byte arrives.
struct Timed {
    stream: TcpStream,
    first_byte: Arc<FirstByte>,
}

impl AsyncRead for Timed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.first_byte.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for Timed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Logs failed authentications at most once a second per address (a flood of wrong tokens
/// must not flood the log).
#[derive(Default)]
pub struct AuthFailures(Mutex<HashMap<IpAddr, Instant>>);

/// Addresses remembered at most; past it, those not seen for a second are forgotten.
const AUTH_LOG_ADDRESSES: usize = 4096;

impl AuthFailures {
    pub fn record(&self, peer: SocketAddr, method: &hyper::Method, path: &str) {
        let now = Instant::now();
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if seen
            .get(&peer.ip())
            .is_some_and(|at| now.duration_since(*at) < Duration::from_secs(1))
        {
            return;
        }
        if seen.len() >= AUTH_LOG_ADDRESSES {
            seen.retain(|_, at| now.duration_since(*at) < Duration::from_secs(1));
        }
        seen.insert(peer.ip(), now);
        drop(seen);
        // The route only: never the token, nor the query (it may carry ids someone typed).
        tracing::warn!(remote = %peer, method = %method, route = path, "authentication failed");
    }
}

/// The server's limits, from `[server]`.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub max_header_bytes: usize,
    pub request_timeout: Duration,
}

/// Accepts connections until shutdown, then closes each gracefully within `grace`; whatever is
/// still open then is dropped.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    mut shutdown: Shutdown,
    grace: Duration,
) {
    let limits = state.limits;
    let room = Arc::new(Semaphore::new(limits.max_connections));
    let mut conns = JoinSet::new();
    loop {
        let permit = tokio::select! {
            p = room.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = shutdown.wait() => break,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.wait() => break,
        };
        // Reap finished connections as we go, so the set holds only open ones.
        while conns.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let conn_shutdown = shutdown.clone();
        conns.spawn(async move {
            connection(stream, peer, state, conn_shutdown).await;
            drop(permit);
        });
    }
    drop(listener);
    let drained =
        tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(
            open = conns.len(),
            "closing API connections that did not finish within the grace period"
        );
        conns.shutdown().await;
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<AppState>,
    mut shutdown: Shutdown,
) {
    let limits = state.limits;
    let first_byte = Arc::new(FirstByte::default());
    let io = TokioIo::new(Timed {
        stream,
        first_byte: first_byte.clone(),
    });
    let svc = service_fn(move |mut req: Request<Incoming>| {
        let state = state.clone();
        let first_byte = first_byte.clone();
        async move {
            let started = first_byte.serve();
            req.extensions_mut()
                .insert(RequestDeadline(started + limits.request_timeout));
            let resp = super::route(state, req, peer).await;
            first_byte.served();
            Ok::<_, Infallible>(resp)
        }
    });
    let conn = http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.request_timeout)
        .max_buf_size(limits.max_header_bytes)
        .serve_connection(io, svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = shutdown.wait() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
