//! Power loss: every event herald acknowledged survives power cuts, not only kill -9. After 12
//! cuts under 8 producers, with deliveries and retries in flight, herald still has every event it
//! answered 202 to, each one's idempotency key still answers `duplicate` with it, and every one
//! arrives at the receiver; and herald reopens its store after each cut.
//!
//! A process killed with SIGKILL loses nothing it wrote: its writes are in the page cache and
//! reach the disk anyway. A power cut loses whatever was not fsynced. Here herald's storage sits
//! on powercut_fs (`tests/tools/powercut/`, a FUSE filesystem in Python): it keeps every write that
//! was not fsynced in memory and, on command, cuts the power. Rounds alternate between
//! - kill -9, then `cut` (all unsynced data lost) or `cut-random SEED` (a random half of the
//!   unsynced 4 KiB pages kept, each with its latest content), and
//! - `cut-after-writes N [SEED]`: the cut lands right after the Nth next write, in the middle of
//!   herald's commits, and every later operation fails with EIO until herald is killed.
//!
//! Needs Debian's `fuse3` (libfuse3.so.3 and fusermount3), /dev/fuse, and pip's `mfusepy`
//! (`tests/tools/powercut/requirements.txt`): the test fails, never skips, without them.
//! `HERALD_POWERLOSS_SEED=N` repeats a run. `HERALD_POWERCUT_FS_ARGS` passes extra arguments to the
//! filesystem: with `--ignore-fdatasync` (fdatasync makes nothing durable, a disk that lies) this
//! test fails, which shows it can.

use crate::common;

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::herald::{http_call, new_client, Launch, ADMIN_TOKEN};
use common::{behaviour, delivery_toml, Herald, Receiver, Reply, TestCa};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::time::Instant;

const PRODUCERS: usize = 8;
const ACCOUNT: &str = "acc";
const ROUNDS: usize = 12;
/// How the power goes out, round after round (cycling).
const CUTS: [Cut; 4] = [
    Cut::AfterKill { random: false },
    Cut::MidWrite { random: true },
    Cut::AfterKill { random: true },
    Cut::MidWrite { random: false },
];
const FS_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/tools/powercut/powercut_fs.py"
);
const INSTALL: &str = "install Debian's `fuse3` package (apt-get install -y fuse3) and pip's \
                       `mfusepy` (python3 -m pip install -r tests/tools/powercut/requirements.txt)";

#[derive(Clone, Copy, Debug)]
enum Cut {
    /// kill -9, then `cut` or `cut-random SEED`.
    AfterKill { random: bool },
    /// `cut-after-writes N [SEED]` while herald runs, then kill -9 and `revive`.
    MidWrite { random: bool },
}

// --- the filesystem ---------------------------------------------------------------------------

/// powercut_fs mounted on a temp dir; unmounted (and its process ended) when dropped.
struct PowercutFs {
    _dir: tempfile::TempDir,
    mount: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// Fails (with what to install) unless the FUSE tools are here.
fn require_fuse_tools() {
    match Command::new("fusermount3").arg("-V").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "`fusermount3 -V` failed ({}): {}\nthe power-loss test needs FUSE 3: {INSTALL}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => {
            panic!("fusermount3 is missing ({e}); the power-loss test needs FUSE 3: {INSTALL}")
        }
    }
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: the power-loss test needs the kernel's FUSE device \
         (modprobe fuse, or a container started with --device /dev/fuse)"
    );
    // Importing mfusepy also loads libfuse3.so.3.
    match Command::new("python3")
        .args(["-c", "import mfusepy"])
        .output()
    {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "python3 cannot import mfusepy: {}\nthe power-loss test needs it: {INSTALL}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!("python3 is missing ({e}); the power-loss test needs it: {INSTALL}"),
    }
}

impl PowercutFs {
    async fn mount() -> PowercutFs {
        require_fuse_tools();
        let dir = tempfile::Builder::new()
            .prefix("herald-powercut-")
            .tempdir()
            .expect("temp dir");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).expect("create the mount point");
        let log = dir.path().join("powercut_fs.log");
        let log_file = std::fs::File::create(&log).expect("create the filesystem's log");
        let extra: Vec<String> = std::env::var("HERALD_POWERCUT_FS_ARGS")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        if !extra.is_empty() {
            eprintln!("powercut_fs extra arguments: {extra:?}");
        }
        let child = Command::new("python3")
            .arg(FS_SCRIPT)
            .arg(&mount)
            .arg("--die-with-parent")
            .args(&extra)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("dup log file"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning python3 {FS_SCRIPT}: {e}"));
        let mut fs = PowercutFs {
            _dir: dir,
            mount,
            log,
            child: Some(child),
        };
        let deadline = Duration::from_secs(15);
        let end = Instant::now() + deadline;
        while !fs.is_mounted() {
            if let Some(status) = fs.child.as_mut().unwrap().try_wait().unwrap() {
                fs.child = None;
                panic!(
                    "powercut_fs exited ({status}) before mounting; its log:\n{}",
                    fs.log_text()
                );
            }
            if Instant::now() >= end {
                panic!(
                    "powercut_fs did not mount {} within {deadline:?}; its log:\n{}",
                    fs.mount.display(),
                    fs.log_text()
                );
            }
            // Polling interval while waiting for the mount.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        fs
    }

    fn is_mounted(&self) -> bool {
        let mounts = std::fs::read_to_string("/proc/mounts").expect("read /proc/mounts");
        let want = self.mount.display().to_string();
        mounts
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Writes a command to the control file `/.powercut`.
    fn command(&self, cmd: &str) {
        std::fs::write(self.mount.join(".powercut"), cmd).unwrap_or_else(|e| {
            panic!(
                "powercut command {cmd:?} failed: {e}; log:\n{}",
                self.log_text()
            )
        });
    }

    /// The control file's text: counters, then a `pending_file` line per file with unsynced data.
    fn status(&self) -> String {
        std::fs::read_to_string(self.mount.join(".powercut"))
            .unwrap_or_else(|e| panic!("reading the powercut status: {e}"))
    }

    fn counter(&self, name: &str) -> u64 {
        let status = self.status();
        status
            .lines()
            .find_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                [k, v] if k == name => v.parse().ok(),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no counter {name:?} in the powercut status:\n{status}"))
    }

    fn pending_files(&self) -> Vec<String> {
        self.status()
            .lines()
            .filter(|l| l.starts_with("pending_file "))
            .map(str::to_string)
            .collect()
    }

    /// Unmounts and waits for the filesystem to exit cleanly.
    async fn unmount(mut self) {
        let out = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mount)
            .output()
            .expect("run fusermount3");
        assert!(
            out.status.success(),
            "fusermount3 -u {} failed: {}",
            self.mount.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut child = self.child.take().unwrap();
        let deadline = Duration::from_secs(10);
        let end = Instant::now() + deadline;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= end {
                let _ = child.kill();
                let _ = child.wait();
                panic!("powercut_fs did not exit within {deadline:?} of its unmount");
            }
            // Polling interval while waiting for the process to end.
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let log = self.log_text();
        assert!(
            status.success(),
            "powercut_fs exited with {status}; log:\n{log}"
        );
        assert!(
            !log.contains("Traceback") && !log.contains("exception"),
            "powercut_fs hit an exception (an operation answered EINVAL); log:\n{log}"
        );
    }
}

impl Drop for PowercutFs {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let unmounted = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.mount)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !unmounted {
                let _ = Command::new("fusermount3")
                    .args(["-u", "-z"])
                    .arg(&self.mount)
                    .stderr(Stdio::null())
                    .status();
            }
            // Mounted with auto_unmount: a killed filesystem process is unmounted too.
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("powercut_fs log:\n{}", self.log_text());
        }
    }
}

// --- load -------------------------------------------------------------------------------------

/// Whether the receiver answers 500 to the first attempt of this event (about one in four), so
/// retries are in flight at every cut. Later attempts get 200: nothing runs out of retries.
fn fails_first_attempt(webhook_id: &str) -> bool {
    webhook_id.bytes().map(u32::from).sum::<u32>() % 4 == 0
}

/// The ids among `ids` that herald does not know (`GET /v1/events/{id}` answers 404), asked by
/// 8 tasks at once, and the idempotency key of each one it knows; panics on any other answer.
async fn unknown_events(base: &str, ids: &[String]) -> (Vec<String>, Vec<(String, String)>) {
    let chunks: Vec<Vec<String>> = ids
        .chunks(ids.len().div_ceil(8).max(1))
        .map(<[String]>::to_vec)
        .collect();
    let tasks: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let base = base.to_string();
            tokio::spawn(async move {
                let client = new_client();
                let (mut unknown, mut keys) = (Vec::new(), Vec::new());
                for id in chunk {
                    let path = format!("/v1/events/{id}");
                    let (status, _, body) = http_call(
                        &client,
                        &base,
                        "GET",
                        &path,
                        Some(ADMIN_TOKEN),
                        &[],
                        Vec::new(),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("GET {path}: {e:#}"));
                    match status {
                        200 => {
                            let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
                            let key = event["idempotency_key"].as_str().expect("keyed");
                            keys.push((id, key.to_string()));
                        }
                        404 => unknown.push(id),
                        _ => panic!("GET {path}: {status} {}", String::from_utf8_lossy(&body)),
                    }
                }
                (unknown, keys)
            })
        })
        .collect();
    let (mut unknown, mut keys) = (Vec::new(), Vec::new());
    for t in tasks {
        let (u, k) = t.await.unwrap();
        unknown.extend(u);
        keys.extend(k);
    }
    unknown.sort();
    (unknown, keys)
}

/// The events whose idempotency key, sent again, does not answer `duplicate` with the event
/// itself (batches of 1,000): `(event id, what herald answered)`.
async fn forgotten_keys(herald: &Herald, keyed: &[(String, String)]) -> Vec<(String, String)> {
    let mut forgotten = Vec::new();
    for batch in keyed.chunks(1000) {
        let events: Vec<_> = batch
            .iter()
            .map(|(_, key)| {
                json!({"account_id": ACCOUNT, "type": "power.test", "payload": {"again": true},
                       "idempotency_key": key})
            })
            .collect();
        let (status, answer) = herald
            .admin("POST", "/v1/events/batch", Some(json!({"events": events})))
            .await;
        assert_eq!(status, 202, "{answer}");
        let results = answer["results"].as_array().expect("results");
        for ((id, _), r) in batch.iter().zip(results) {
            if r["duplicate"] != true || r["event_id"] != id.as_str() {
                forgotten.push((id.clone(), r.to_string()));
            }
        }
    }
    forgotten
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_events_survive_power_cuts() {
    let seed: u64 = std::env::var("HERALD_POWERLOSS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
        });
    eprintln!("power-loss test seed: HERALD_POWERLOSS_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    // Declared first, so it is dropped (unmounted) after herald is killed.
    let fs = PowercutFs::mount().await;
    let ca = TestCa::new();
    let ca_dir = tempfile::tempdir().expect("temp dir");
    let ca_file = ca.write_ca_file(ca_dir.path());
    let first_seen = Arc::new(Mutex::new(HashSet::new()));
    let recv = {
        let first_seen = first_seen.clone();
        Receiver::https(
            &ca,
            behaviour(move |r, _| {
                let id = r.header("webhook-id").unwrap_or_default().to_string();
                let first = first_seen.lock().unwrap().insert(id.clone());
                if first && fails_first_attempt(&id) {
                    Reply::status(500)
                } else {
                    Reply::status(200)
                }
            }),
        )
    };
    let storage = fs.mount.join("data");
    let extra = format!(
        "{}default_retry_policy = \"fast\"\n[retry_policies]\nfast = [\"200ms\", \"500ms\"]\n",
        delivery_toml(&ca_file)
    );
    let extra = format!("{extra}{}", common::ON_SLED);
    let mut herald = Herald::start_with(
        &extra,
        Launch {
            storage: Some(storage.clone()),
            ..Launch::default()
        },
    )
    .await;
    // herald's private data directory, made on the filesystem, which keeps modes.
    assert_eq!(mode(&storage), 0o700, "storage dir mode");
    assert_eq!(mode(&storage.join("db")), 0o600, "sled data file mode");
    let (status, answer) = herald
        .admin(
            "POST",
            &format!("/v1/accounts/{ACCOUNT}/endpoints"),
            Some(json!({"url": recv.url("/hook")})),
        )
        .await;
    assert_eq!(status, 201, "create endpoint: {answer}");

    let mut acked: Vec<String> = Vec::new();
    for round in 0..ROUNDS {
        let cut = CUTS[round % CUTS.len()];
        let target = rng.gen_range(300..=3000);
        let cut_seed: u64 = rng.gen_range(1..=1_000_000);
        let requests_before = recv.count();
        let stop = Arc::new(AtomicBool::new(false));
        let round_acked = Arc::new(Mutex::new(Vec::new()));
        let producers = common::herald::spawn_producers(
            &herald.base_url(),
            (ACCOUNT, "power.test"),
            PRODUCERS,
            &stop,
            &round_acked,
        );
        common::wait_until(
            Duration::from_secs(30),
            &format!("round {round}: {target} events acknowledged and deliveries under way"),
            || async {
                round_acked.lock().unwrap().len() >= target && recv.count() >= requests_before + 20
            },
        )
        .await;

        let what = match cut {
            Cut::AfterKill { random } => {
                herald.kill9();
                let pending = fs.pending_files();
                let cmd = if random {
                    format!("cut-random {cut_seed}")
                } else {
                    "cut".to_string()
                };
                fs.command(&cmd);
                format!("kill -9, then `{cmd}`; unsynced then: {pending:?}")
            }
            Cut::MidWrite { random } => {
                let cuts = fs.counter("cuts");
                let writes = rng.gen_range(1..=100);
                let cmd = if random {
                    format!("cut-after-writes {writes} {cut_seed}")
                } else {
                    format!("cut-after-writes {writes}")
                };
                fs.command(&cmd);
                common::wait_until(
                    Duration::from_secs(20),
                    &format!("round {round}: the armed cut (`{cmd}`) happened"),
                    || async { fs.counter("cuts") > cuts },
                )
                .await;
                herald.kill9();
                fs.command("revive");
                format!("`{cmd}`, then kill -9 and `revive`")
            }
        };
        stop.store(true, Ordering::Relaxed);
        for p in producers {
            p.await.unwrap();
        }
        let round_acked = std::mem::take(&mut *round_acked.lock().unwrap());
        eprintln!(
            "round {round}: {} acknowledged, {} requests at the receiver; {what}; \
             pages dropped by cuts so far: {}, kept: {}",
            round_acked.len(),
            recv.count() - requests_before,
            fs.counter("cut_pages_dropped"),
            fs.counter("cut_pages_kept"),
        );
        acked.extend(round_acked);

        // The store must open after every cut (restart panics, with herald's log, unless
        // herald logs `herald listening`).
        herald.restart().await;
    }

    let want: HashSet<String> = acked.iter().cloned().collect();
    assert_eq!(
        want.len(),
        acked.len(),
        "an event id was acknowledged twice"
    );
    eprintln!("{} acknowledged events in all", want.len());
    assert!(
        fs.counter("cut_pages_dropped") > 0,
        "no cut dropped any unsynced page: the test did not exercise a power cut\n{}",
        fs.status()
    );

    // herald still has every acknowledged event...
    let started = Instant::now();
    let (unknown, keyed) = unknown_events(&herald.base_url(), &acked).await;
    eprintln!(
        "looked up {} acknowledged events in {:?}",
        acked.len(),
        started.elapsed()
    );
    assert!(
        unknown.is_empty(),
        "{} of {} acknowledged events are gone from herald after the power cuts (seed {seed}), \
         e.g. {:?}\npowercut status:\n{}",
        unknown.len(),
        acked.len(),
        &unknown[..unknown.len().min(5)],
        fs.status()
    );

    // ...every idempotency key it acknowledged still names its event (the keys' tables are
    // synced apart from the log: a cut loses what they had not synced, and the next start
    // writes it again from the log)...
    let forgotten = forgotten_keys(&herald, &keyed).await;
    assert!(
        forgotten.is_empty(),
        "{} of {} acknowledged idempotency keys were forgotten after the power cuts (seed \
         {seed}), e.g. {:?}\npowercut status:\n{}",
        forgotten.len(),
        keyed.len(),
        &forgotten[..forgotten.len().min(5)],
        fs.status()
    );

    // ...and every one arrives at the receiver.
    let deadline = Duration::from_secs(60);
    let mut missing: Vec<String> = Vec::new();
    let arrived = tokio::time::timeout(deadline, async {
        loop {
            let seen = recv.webhook_ids();
            missing = want.difference(&seen).cloned().collect();
            if missing.is_empty() {
                return;
            }
            // Polling interval while deliveries drain.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    if arrived.is_err() {
        missing.sort();
        let mut detail = Vec::new();
        for id in missing.iter().take(5) {
            let (status, event) = herald.admin("GET", &format!("/v1/events/{id}"), None).await;
            detail.push(format!("{id}: GET /v1/events/{id} -> {status} {event}"));
        }
        panic!(
            "{} of {} acknowledged events never arrived within {deadline:?} (seed {seed}); \
             first ones:\n{}\npowercut status:\n{}",
            missing.len(),
            want.len(),
            detail.join("\n"),
            fs.status()
        );
    }

    herald.kill9();
    drop(herald);
    fs.unmount().await;
}
