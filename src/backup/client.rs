//! `herald backup`: asks the running herald for a backup (`GET /v1/backup`) and writes it to a
//! file under a temporary name, renamed once the archive is whole (every part's checksum and
//! the end's counts checked) (mode 0600: it holds secrets). The temporary file is always created
//! anew, never written through what was at its name. Nothing is ever left under the final name
//! by a failed or killed backup.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::header::{AUTHORIZATION, HOST};
use hyper::Request;
use hyper_util::rt::TokioIo;

use super::format::Tally;

/// How a download is going.
pub struct Progress {
    pub events: u64,
    pub deliveries: u64,
    /// The deliveries the store held when the backup began (from `/v1/status`'s queue), if
    /// known.
    pub deliveries_total: Option<u64>,
    pub bytes: u64,
}

/// Where a backup goes: a file (written under a temporary name first) or stdout.
pub enum Target {
    File(PathBuf),
    Stdout,
}

/// Downloads a backup from herald at `addr` with `token` into `target`, calling `progress` as
/// it goes. A file takes its name once its frame checks ([`super::format::Reader::skim`]).
pub async fn download(
    addr: SocketAddr,
    token: &str,
    target: &Target,
    mut progress: impl FnMut(&Progress),
) -> Result<super::format::Totals, String> {
    let total = deliveries_total(addr, token).await;
    let mut resp = request(addr, token, "/v1/backup").await?;
    if !resp.status().is_success() {
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(format!(
            "herald answered {}: {}",
            resp_status_text(&body),
            String::from_utf8_lossy(&body).trim()
        ));
    }
    let (mut out, temp, written) = output(target)?;
    let removing = |e: String| {
        if let Some(t) = &temp {
            let _ = std::fs::remove_file(t);
        }
        e
    };
    let mut tally = Tally::default();
    let mut bytes = 0u64;
    let body = resp.body_mut();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| removing(format!("the backup was cut short: {e}")))?;
        let Ok(chunk) = frame.into_data() else {
            continue;
        };
        tally.feed(&chunk);
        bytes += chunk.len() as u64;
        out.write_all(&chunk)
            .map_err(|e| removing(format!("cannot write the archive: {e}")))?;
        progress(&Progress {
            events: tally.events,
            deliveries: tally.deliveries,
            deliveries_total: total,
            bytes,
        });
    }
    out.flush()
        .map_err(|e| removing(format!("cannot write the archive: {e}")))?;
    drop(out);
    if !tally.ended {
        return Err(removing(
            "the backup was cut short (herald stopped or failed; see its log)".into(),
        ));
    }
    let (Target::File(path), Some(temp), Some(file)) = (target, &temp, written) else {
        return Ok(super::format::Totals {
            events: tally.events,
            deliveries: tally.deliveries,
            ..Default::default()
        });
    };
    keep(file, temp, path).map_err(removing)
}

/// Where the archive is written: stdout, or the target file's temporary name (with a second
/// handle of it, through which it is read back and synced, never by its name).
#[allow(clippy::type_complexity)]
fn output(
    target: &Target,
) -> Result<(Box<dyn Write>, Option<PathBuf>, Option<std::fs::File>), String> {
    Ok(match target {
        Target::File(path) => {
            let temp = temp_name(path);
            let file = private_file(&temp)?;
            let again = file.try_clone().map_err(|e| {
                let _ = std::fs::remove_file(&temp);
                format!("cannot write {}: {e}", temp.display())
            })?;
            (
                Box::new(std::io::BufWriter::new(file)),
                Some(temp),
                Some(again),
            )
        }
        Target::Stdout => (Box::new(std::io::stdout().lock()), None, None),
    })
}

/// Checks the archive written to `temp` (read back through `file`), syncs it and renames it
/// to `path`; its counts.
fn keep(
    mut file: std::fs::File,
    temp: &Path,
    path: &Path,
) -> Result<super::format::Totals, String> {
    std::io::Seek::rewind(&mut file).map_err(|e| e.to_string())?;
    let totals = super::format::Reader::new(std::io::BufReader::new(&file))
        .and_then(super::format::Reader::skim)
        .map_err(|e| format!("the archive received does not check: {e}"))?;
    file.sync_all().map_err(|e| e.to_string())?;
    std::fs::rename(temp, path).map_err(|e| format!("cannot rename the archive: {e}"))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(totals)
}

/// `FILE` is written as `.FILE.partial` beside it.
fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "backup".into());
    path.with_file_name(format!(".{name}.partial"))
}

/// Creates the temporary file anew, mode 0600: whatever is at its name (a stale partial
/// archive of another mode, or a link planted there) is unlinked first, never followed, and
/// the file is created exclusively without following a link, so the archive never lands in
/// someone else's file (docs/operations.md, "Backup, restore, upgrade").
fn private_file(path: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(format!(
                "cannot remove the stale {} (remove it, then back up again): {e}",
                path.display()
            ))
        }
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))
}

fn resp_status_text(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_else(|| "an error".into())
}

/// The deliveries the store holds now, from `/v1/status` (for the time left).
async fn deliveries_total(addr: SocketAddr, token: &str) -> Option<u64> {
    let resp = request(addr, token, "/v1/status").await.ok()?;
    let body = resp.into_body().collect().await.ok()?.to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let queue = v.get("queue")?.as_object()?;
    Some(queue.values().filter_map(|n| n.as_u64()).sum())
}

async fn request(
    addr: SocketAddr,
    token: &str,
    path: &str,
) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot reach herald at {addr}: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("cannot talk to herald at {addr}: {e}"))?;
    tokio::spawn(conn);
    let req = Request::get(path)
        .header(HOST, addr.to_string())
        .header(AUTHORIZATION, format!("Bearer {token}"))
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    sender
        .send_request(req)
        .await
        .map_err(|e| format!("herald at {addr} did not answer: {e}"))
}
