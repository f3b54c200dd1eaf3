//! A real PostgreSQL server for cluster tests (docs/cluster.md): Debian's server binaries
//! (`initdb`, `pg_ctl`, from the `postgresql` package that `.ci/run` installs), a cluster in a
//! temp directory, a free port on 127.0.0.1, trust authentication for the user `herald`.
//! PostgreSQL refuses to run as root, so when the tests run as root (CI) the server runs as
//! `nobody` through `runuser`. A missing binary fails the test with a sentence saying what to
//! install: these tests never skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// How the server is set up.
#[derive(Default, Clone)]
pub struct PgOptions {
    /// Serve TLS with this certificate chain and key (PEM), and refuse plain connections
    /// over TCP.
    pub tls: Option<(String, String)>,
    /// Keep PostgreSQL's flushes to disk (fsync, full-page writes); off by default for speed.
    /// Without them a commit still survives the server's crash (`stop`), since the WAL is
    /// written before the commit answers, only not the machine's.
    pub durable: bool,
}

/// A running PostgreSQL; stopped (immediately) and removed when dropped.
pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    options: PgOptions,
}

/// The directory of the newest installed PostgreSQL's server binaries
/// (`HERALD_TEST_PG_BIN` overrides it).
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("HERALD_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL's server binaries (initdb, pg_ctl) are not installed: no \
             /usr/lib/postgresql/*/bin/initdb. Install Debian's `postgresql` package (.ci/run \
             does) or point HERALD_TEST_PG_BIN at a directory holding them"
        ),
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `nobody`'s uid and gid, for the cluster directory's owner when tests run as root.
fn nobody() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "nobody"])
            .output()
            .expect("run id");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("nobody's id")
    };
    (id("-u"), id("-g"))
}

fn check(what: &str, out: std::io::Result<Output>) -> Output {
    let out = out.unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    if !out.status.success() {
        panic!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

impl Postgres {
    /// A fresh server with the default options.
    pub fn start() -> Postgres {
        Postgres::start_with(PgOptions::default())
    }

    pub fn start_with(options: PgOptions) -> Postgres {
        let bin = bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("herald-pg")
            .tempdir()
            .expect("temp dir");
        if is_root() {
            let (uid, gid) = nobody();
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .expect("chown the cluster dir");
        }
        let pg = Postgres {
            dir,
            bin,
            port: 0,
            options,
        };
        check(
            "initdb",
            pg.server_command("initdb")
                .arg("-D")
                .arg(pg.data())
                .args([
                    "-U",
                    "herald",
                    "--auth=trust",
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ])
                .output(),
        );
        if let Some((cert, key)) = &pg.options.tls {
            for (name, text) in [("server.crt", cert), ("server.key", key)] {
                let path = pg.data().join(name);
                std::fs::write(&path, text).expect("write the server's TLS files");
                std::fs::set_permissions(
                    &path,
                    std::os::unix::fs::PermissionsExt::from_mode(0o600),
                )
                .expect("chmod");
                if is_root() {
                    let (uid, gid) = nobody();
                    std::os::unix::fs::chown(&path, Some(uid), Some(gid)).expect("chown");
                }
            }
            // Over TCP only TLS connections are accepted; the unix socket stays trusted.
            std::fs::write(
                pg.data().join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
            )
            .expect("write pg_hba.conf");
        }
        let mut pg = pg;
        pg.start_server();
        pg
    }

    /// A command running one of the server's binaries as the cluster's owner.
    fn server_command(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts the server on a free port.
    fn start_server(&mut self) {
        for _ in 0..5 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            if self.launch(port).status.success() {
                self.port = port;
                return;
            }
        }
        panic!("PostgreSQL did not start; its log:\n{}", self.log());
    }

    /// `pg_ctl start` on `port`, waiting until the server accepts connections.
    fn launch(&self, port: u16) -> Output {
        let mut settings = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200",
            self.dir.path().display()
        );
        if !self.options.durable {
            settings.push_str(" -c fsync=off -c full_page_writes=off");
        }
        if self.options.tls.is_some() {
            settings.push_str(" -c ssl=on");
        }
        self.server_command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-w", "-t", "30", "-o", &settings, "start"])
            .output()
            .expect("run pg_ctl")
    }

    /// Stops the server at once (`immediate`: as if the machine lost it), keeping its data.
    pub fn stop(&self) {
        check(
            "pg_ctl stop",
            self.server_command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "stop"])
                .output(),
        );
    }

    /// Starts the stopped server again on its port (nodes keep their URL).
    pub fn restart(&self) {
        let out = self.launch(self.port);
        if !out.status.success() {
            panic!("PostgreSQL did not restart; its log:\n{}", self.log());
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Creates database `name` (through the unix socket) and returns its URL over TCP.
    pub fn database(&self, name: &str) -> String {
        self.sql(&format!("CREATE DATABASE {name}"), "postgres");
        self.url(name)
    }

    /// The URL of database `name` over TCP (`sslmode=require` when the server serves TLS).
    pub fn url(&self, name: &str) -> String {
        let tls = if self.options.tls.is_some() {
            "?sslmode=require"
        } else {
            ""
        };
        format!("postgres://herald@localhost:{}/{name}{tls}", self.port)
    }

    /// Runs `sql` in database `db` with psql over the unix socket; returns its unaligned output.
    pub fn sql(&self, sql: &str, db: &str) -> String {
        let out = check(
            "psql",
            Command::new(self.bin.join("psql"))
                .args([
                    "-X",
                    "-q",
                    "-A",
                    "-t",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-U",
                    "herald",
                ])
                .arg("-h")
                .arg(self.dir.path())
                .arg("-p")
                .arg(self.port.to_string())
                .args(["-d", db, "-c", sql])
                .output(),
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Runs the SQL file `path` (a `pg_dump` of a database, say) in database `db` with psql.
    pub fn sql_file(&self, path: &Path, db: &str) {
        check(
            "psql",
            Command::new(self.bin.join("psql"))
                .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-U", "herald"])
                .arg("-h")
                .arg(self.dir.path())
                .arg("-p")
                .arg(self.port.to_string())
                .args(["-d", db, "-f"])
                .arg(path)
                .output(),
        );
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .server_command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// A new database on the PostgreSQL server this test process shares (started on first use),
/// for the harness's heralds when `HERALD_TEST_BACKEND=postgres`. The server outlives no test
/// process: a watcher stops it and removes its directory once the process has ended.
pub fn shared_database() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::OnceLock;
    static SERVER: OnceLock<Postgres> = OnceLock::new();
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let pg = SERVER.get_or_init(|| {
        let pg = Postgres::start();
        pg.stop_after_process();
        pg
    });
    pg.database(&format!("herald_{}", NEXT.fetch_add(1, Ordering::Relaxed)))
}

impl Postgres {
    /// Starts a watcher that stops the server at once and removes its directory when this
    /// process has ended (for a server held in a static, which is never dropped).
    fn stop_after_process(&self) {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             kill -QUIT $(head -1 {data}/postmaster.pid) 2>/dev/null; sleep 2; rm -rf {dir}",
            pid = std::process::id(),
            data = self.data().display(),
            dir = self.dir.path().display(),
        );
        // Outlives this process on purpose (it waits for this process to end): never waited on.
        #[allow(clippy::zombie_processes)]
        Command::new("sh")
            .args(["-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the watcher of the shared PostgreSQL");
    }
}
