//! A TCP proxy in front of PostgreSQL that reads the wire protocol and can cut the connection at
//! one chosen point of one chosen statement: right after the server completed it (the server
//! has committed, the client never hears so) or instead of sending it (the server never runs
//! it). For the cluster tests of a commit whose answer is lost.
//!
//! It follows the protocol only as far as it must: the untyped start (an `SSLRequest`, answered
//! with `N` by a server without TLS, then the startup message), then typed messages both ways
//! (a type byte and a length). A statement is recognised by its text: `Parse` names a prepared
//! statement whose SQL contains the needle, and a `Bind` of that statement, or a simple `Query`
//! with it, starts it; the next `CommandComplete` ends it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

const SSL_REQUEST: u32 = 80_877_103;

/// Where to cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Close both sides instead of passing on the server's `CommandComplete`.
    AfterComplete,
    /// Close both sides instead of passing on the client's `Bind` (or `Query`).
    BeforeExecute,
}

#[derive(Default)]
struct Shared {
    armed: Mutex<Option<Cut>>,
    fired: AtomicUsize,
}

impl Shared {
    /// Takes the armed cut if it is `cut`.
    fn take(&self, cut: Cut) -> bool {
        let mut armed = self.armed.lock().unwrap();
        if *armed == Some(cut) {
            *armed = None;
            self.fired.fetch_add(1, Ordering::SeqCst);
            return true;
        }
        false
    }
}

pub struct PgProxy {
    port: u16,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PgProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PgProxy {
    /// Listens on a free loopback port and passes connections on to `upstream_port`; statements
    /// whose text contains `needle` can be cut ([`PgProxy::arm`]).
    pub async fn start(upstream_port: u16, needle: &'static str) -> PgProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)).await else {
                    continue;
                };
                let s = s.clone();
                tokio::spawn(pipe(client, server, s, needle));
            }
        });
        PgProxy { port, shared, task }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Cuts the next statement with the needle at `cut` (once).
    pub fn arm(&self, cut: Cut) {
        *self.shared.armed.lock().unwrap() = Some(cut);
    }

    /// How many cuts were made.
    pub fn fired(&self) -> usize {
        self.shared.fired.load(Ordering::SeqCst)
    }
}

/// One connection's state, seen from both directions.
#[derive(Default)]
struct Conn {
    /// Prepared statements whose SQL has the needle.
    marked: Mutex<std::collections::HashSet<Vec<u8>>>,
    /// A marked statement runs: the next `CommandComplete` is its.
    running: AtomicBool,
}

async fn pipe(client: TcpStream, server: TcpStream, shared: Arc<Shared>, needle: &'static str) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    if start(&mut cr, &mut cw, &mut sr, &mut sw).await.is_none() {
        return;
    }
    let conn = Arc::new(Conn::default());
    let up = upstream(cr, sw, conn.clone(), shared.clone(), needle);
    let down = downstream(sr, cw, conn, shared);
    // Either side ending (or cutting) ends both: dropping the halves closes the sockets.
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

/// The untyped start: an optional `SSLRequest` and the server's one-byte answer, then the
/// startup message.
async fn start(
    cr: &mut OwnedReadHalf,
    cw: &mut OwnedWriteHalf,
    sr: &mut OwnedReadHalf,
    sw: &mut OwnedWriteHalf,
) -> Option<()> {
    loop {
        let len = read_exact(cr, 4).await?;
        let n = u32::from_be_bytes(len[..].try_into().unwrap()) as usize;
        let rest = read_exact(cr, n.checked_sub(4)?).await?;
        sw.write_all(&len).await.ok()?;
        sw.write_all(&rest).await.ok()?;
        if rest.len() >= 4 && u32::from_be_bytes(rest[..4].try_into().unwrap()) == SSL_REQUEST {
            let answer = read_exact(sr, 1).await?;
            assert_eq!(answer, b"N", "the proxy reads only connections without TLS");
            cw.write_all(&answer).await.ok()?;
            continue;
        }
        return Some(());
    }
}

async fn read_exact(r: &mut OwnedReadHalf, n: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).await.ok()?;
    Some(buf)
}

/// A typed message: its type, and the whole message as sent (type, length, body).
async fn message(r: &mut OwnedReadHalf) -> Option<(u8, Vec<u8>)> {
    let head = read_exact(r, 5).await?;
    let len = u32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
    let body = read_exact(r, len.checked_sub(4)?).await?;
    let mut all = head;
    all.extend_from_slice(&body);
    Some((all[0], all))
}

/// The NUL-terminated strings at the start of a body.
fn cstrings(body: &[u8], n: usize) -> Vec<&[u8]> {
    body.split(|b| *b == 0).take(n).collect()
}

async fn upstream(
    mut r: OwnedReadHalf,
    mut w: OwnedWriteHalf,
    conn: Arc<Conn>,
    shared: Arc<Shared>,
    needle: &'static str,
) -> Option<()> {
    let needle = needle.as_bytes();
    let has_needle = |sql: &[u8]| sql.windows(needle.len()).any(|w| w == needle);
    loop {
        let (kind, msg) = message(&mut r).await?;
        let body = &msg[5..];
        let starts = match kind {
            b'P' => {
                let parts = cstrings(body, 2);
                if parts.len() == 2 && has_needle(parts[1]) {
                    conn.marked.lock().unwrap().insert(parts[0].to_vec());
                }
                false
            }
            b'B' => {
                let parts = cstrings(body, 2);
                parts.len() == 2 && conn.marked.lock().unwrap().contains(parts[1])
            }
            b'Q' => has_needle(body),
            _ => false,
        };
        if starts {
            if shared.take(Cut::BeforeExecute) {
                return None;
            }
            conn.running.store(true, Ordering::SeqCst);
        }
        w.write_all(&msg).await.ok()?;
    }
}

async fn downstream(
    mut r: OwnedReadHalf,
    mut w: OwnedWriteHalf,
    conn: Arc<Conn>,
    shared: Arc<Shared>,
) -> Option<()> {
    loop {
        let (kind, msg) = message(&mut r).await?;
        if kind == b'C'
            && conn.running.swap(false, Ordering::SeqCst)
            && shared.take(Cut::AfterComplete)
        {
            return None;
        }
        w.write_all(&msg).await.ok()?;
    }
}
