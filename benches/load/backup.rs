//! The backup phase: an online backup of a big store (`--history` delivered events, folded, and
//! [`PENDING`] pending ones) while 16 single-event clients post, alternating runs without and
//! with a backup; then the archive restored into a new directory (docs/operations.md, "Backup,
//! restore, upgrade"). The archive goes to the disk the store is on.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::herald::{new_dir, Dir, Herald};
use crate::phases::{self, Setup};
use crate::receiver::{DeadReceiver, Receiver};
use crate::Opts;

/// Deliveries left pending (behind a paused endpoint) when the backup is taken.
const PENDING: usize = 100_000;
/// Single-event clients posting meanwhile.
const CLIENTS: usize = 16;
/// Runs of each kind (without, with a backup), alternating.
const ROUNDS: usize = 2;

pub struct BackupFigures {
    pub events: u64,
    pub data_bytes: u64,
    pub archive_bytes: u64,
    /// The backup alone (nothing else offered).
    pub backup_alone_s: f64,
    /// Each run: (ingest/s without a backup, ingest/s while one runs, that backup's seconds,
    /// requests refused while it ran).
    pub runs: Vec<(f64, f64, f64, u64)>,
    pub restore_s: f64,
}

pub async fn backup(opts: &Opts) -> Result<BackupFigures> {
    phases::settle_disk().await;
    let (dir, reuse) = match &opts.history_dir {
        Some(p) => (Dir::Kept(p.clone()), p.join("data").exists()),
        None => (new_dir()?, false),
    };
    if !reuse {
        crate::scale::prefill(opts, &dir.data(), opts.history).await?;
    }
    let work = dir.path().to_path_buf();
    let herald = Herald::start_in(&opts.herald, dir, &opts.storage()).await?;
    // The prefilled endpoints (and a kept store's from an earlier run) point nowhere: paused.
    let (_, accounts) = herald.admin("GET", "/v1/accounts", Value::Null).await?;
    for a in accounts["items"].as_array().into_iter().flatten() {
        let account = a["account_id"].as_str().unwrap_or_default();
        let path = format!("/v1/accounts/{account}/endpoints");
        let (_, list) = herald.admin("GET", &path, Value::Null).await?;
        for ep in list["items"].as_array().into_iter().flatten() {
            let id = ep["id"].as_str().unwrap_or_default();
            herald
                .admin("POST", &format!("/v1/endpoints/{id}/pause"), json!({}))
                .await?;
        }
    }
    // An endpoint that never answers holds what this phase leaves pending.
    let dead = DeadReceiver::start().await?;
    add_pending(&herald, &dead.url(), PENDING).await?;
    let status = herald.status().await?;
    let events: u64 = status["queue"]
        .as_object()
        .map(|q| q.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0);
    let data_bytes = herald.data_bytes().0;
    eprintln!(
        "    {events} deliveries ({} pending), {} MiB on disk",
        pending_of(&status),
        data_bytes >> 20
    );
    let receiver = Receiver::start().await?;
    herald
        .create_endpoint(crate::phases::ACCOUNT, &receiver.url())
        .await?;
    let s = Setup {
        others: Vec::new(),
        herald,
        receiver,
        _second: None,
        dead: Some(dead),
    };
    let archive = work.join("bench.backup");
    let config = backup_config(&s.herald, &work)?;
    let started = Instant::now();
    run_backup(&opts.herald, &config, &archive).await?;
    let backup_alone_s = started.elapsed().as_secs_f64();
    eprintln!("    backup alone: {backup_alone_s:.1} s");
    // Each run with a backup lasts no longer than the backup alone took: the backup under load
    // takes longer, so the whole run has one going.
    let mut run_opts = opts.clone();
    run_opts.seconds = (backup_alone_s * 0.8).clamp(4.0, opts.seconds.max(4.0));
    let mut runs = Vec::new();
    for round in 0..ROUNDS {
        let without = phases::ingest_on(&run_opts, &s, CLIENTS, None).await?;
        let started = Instant::now();
        let taking = tokio::spawn(run_backup_owned(
            opts.herald.clone(),
            config.clone(),
            archive.clone(),
        ));
        let with = phases::ingest_on(&run_opts, &s, CLIENTS, None).await?;
        taking.await??;
        let took = started.elapsed().as_secs_f64();
        eprintln!(
            "    round {round}: {:.0}/s without, {:.0}/s with a backup ({took:.1} s; {} refused)",
            without.events_per_s, with.events_per_s, with.errors
        );
        runs.push((without.events_per_s, with.events_per_s, took, with.errors));
    }
    let archive_bytes = std::fs::metadata(&archive)?.len();
    let restored = work.join("restored");
    let _ = std::fs::remove_dir_all(&restored);
    let started = Instant::now();
    let out = Command::new(&opts.herald)
        .args(["restore", "--to"])
        .arg(format!("sled:{}", restored.display()))
        .arg(&archive)
        .output()?;
    let restore_s = started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("herald restore: {}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::remove_dir_all(&restored).ok();
    std::fs::remove_file(&archive).ok();
    Ok(BackupFigures {
        events,
        data_bytes,
        archive_bytes,
        backup_alone_s,
        runs,
        restore_s,
    })
}

fn pending_of(status: &Value) -> u64 {
    status["queue"]["pending"].as_u64().unwrap_or(0)
}

/// `n` events in batches, to an endpoint that never answers, of an account of their own: they
/// stay pending.
async fn add_pending(herald: &Herald, url: &str, n: usize) -> Result<()> {
    herald.create_endpoint("held", url).await?;
    let mut left = n;
    while left > 0 {
        let k = left.min(1000);
        let events: Vec<Value> = (0..k)
            .map(|i| json!({"account_id": "held", "type": "bench.event", "payload": {"i": i}}))
            .collect();
        let (status, answer) = herald
            .admin("POST", "/v1/events/batch", json!({ "events": events }))
            .await?;
        if !(200..300).contains(&status) {
            bail!("adding pending deliveries: {status} {answer}");
        }
        left -= k;
    }
    Ok(())
}

/// A config `herald backup` reads: the bench herald's, with the address it listens on.
fn backup_config(h: &Herald, work: &Path) -> Result<std::path::PathBuf> {
    let text =
        std::fs::read_to_string(h.config_path())?.replace("127.0.0.1:0", &h.addr.to_string());
    let path = work.join("backup.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

async fn run_backup(bin: &Path, config: &Path, archive: &Path) -> Result<()> {
    run_backup_owned(
        bin.to_path_buf(),
        config.to_path_buf(),
        archive.to_path_buf(),
    )
    .await
}

async fn run_backup_owned(
    bin: std::path::PathBuf,
    config: std::path::PathBuf,
    archive: std::path::PathBuf,
) -> Result<()> {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(&bin)
            .args(["backup", "--config"])
            .arg(&config)
            .arg("--out")
            .arg(&archive)
            .output()
            .context("running herald backup")?;
        if !out.status.success() {
            bail!("herald backup: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    })
    .await?
}

/// The figures as lines.
pub fn print(b: &BackupFigures) {
    let mib = |n: u64| n as f64 / (1 << 20) as f64;
    eprintln!(
        "backup: {} deliveries; data dir {:.0} MiB, archive {:.0} MiB ({:.0} %)",
        b.events,
        mib(b.data_bytes),
        mib(b.archive_bytes),
        100.0 * b.archive_bytes as f64 / b.data_bytes.max(1) as f64
    );
    eprintln!("  backup alone: {:.1} s", b.backup_alone_s);
    for (i, (without, with, took, refused)) in b.runs.iter().enumerate() {
        eprintln!(
            "  round {i}: ingest {without:.0}/s without, {with:.0}/s with a backup ({:.0} %); the backup took {took:.1} s; {refused} refused",
            100.0 * with / without.max(1.0)
        );
    }
    eprintln!("  restore into a new directory: {:.1} s", b.restore_s);
}
