//! The receivers herald delivers to: a fast one (HTTP/1.1, answers 200 at once, notes when each
//! `webhook-id` first arrived) and a dead one (accepts connections, reads, never answers).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::task::AbortHandle;

/// What a receiver saw.
#[derive(Default)]
pub struct Arrivals {
    /// Requests answered, duplicates included.
    pub requests: AtomicU64,
    /// Distinct `webhook-id`s.
    pub unique: AtomicU64,
    first: Mutex<HashMap<Box<str>, Instant>>,
}

impl Arrivals {
    fn record(&self, id: &str, at: Instant) {
        let mut first = self.first.lock().unwrap();
        if !first.contains_key(id) {
            first.insert(id.into(), at);
            self.unique.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// When `webhook-id` `id` first arrived.
    pub fn arrived(&self, id: &str) -> Option<Instant> {
        self.first.lock().unwrap().get(id).copied()
    }

    pub fn unique(&self) -> u64 {
        self.unique.load(Ordering::Relaxed)
    }
}

/// Tasks to abort when a receiver goes away (its listener and every connection).
#[derive(Default, Clone)]
struct Tasks(Arc<Mutex<Vec<AbortHandle>>>);

impl Tasks {
    fn add(&self, handle: AbortHandle) {
        let mut tasks = self.0.lock().unwrap();
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }

    fn abort_all(&self) {
        for task in self.0.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// The fast receiver; stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    pub arrivals: Arc<Arrivals>,
    tasks: Tasks,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

impl Receiver {
    pub async fn start() -> Result<Receiver> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let arrivals = Arc::new(Arrivals::default());
        let tasks = Tasks::default();
        let (seen, conns) = (arrivals.clone(), tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let seen = seen.clone();
                let service = service_fn(move |req| answer(seen.clone(), req));
                let conn = tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
                conns.add(conn.abort_handle());
            }
        });
        tasks.add(accept.abort_handle());
        Ok(Receiver {
            addr,
            arrivals,
            tasks,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }
}

async fn answer(
    arrivals: Arc<Arrivals>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let at = Instant::now();
    if let Some(id) = req
        .headers()
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
    {
        arrivals.record(id, at);
    }
    arrivals.requests.fetch_add(1, Ordering::Relaxed);
    let _ = req.into_body().collect().await;
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}

/// An endpoint that never answers: it accepts, reads whatever comes, and holds the connection.
pub struct DeadReceiver {
    pub addr: SocketAddr,
    /// Connections accepted so far.
    pub connections: Arc<AtomicU64>,
    tasks: Tasks,
}

impl Drop for DeadReceiver {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

impl DeadReceiver {
    pub async fn start() -> Result<DeadReceiver> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let connections = Arc::new(AtomicU64::new(0));
        let tasks = Tasks::default();
        let (count, conns) = (connections.clone(), tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::Relaxed);
                let conn = tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                });
                conns.add(conn.abort_handle());
            }
        });
        tasks.add(accept.abort_handle());
        Ok(DeadReceiver {
            addr,
            connections,
            tasks,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }
}
