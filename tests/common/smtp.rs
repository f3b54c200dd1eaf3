//! A real SMTP server for failure alert tests: Debian's aiosmtpd run by
//! `tests/tools/smtp_sink.py` on a free port, with a certificate of the test's own CA, writing
//! every message it accepts to a directory this side reads.
//!
//! Needs Debian's `python3-aiosmtpd` (`.ci/run` installs it): it is run by `/usr/bin/python3`,
//! the interpreter the Debian package installs into.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::tls::TestCa;

/// How the server takes connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Plain text first; STARTTLS required before any mail (`smtp://`).
    StartTls,
    /// TLS from the first byte (`smtps://`).
    Smtps,
}

pub struct SmtpSink {
    child: Child,
    dir: tempfile::TempDir,
    pub port: u16,
    mode: Mode,
    login: Option<(String, String)>,
}

/// One message the server accepted.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Mail {
    pub mail_from: String,
    pub rcpt_tos: Vec<String>,
    /// The message as sent (headers, a blank line, the body).
    pub data: String,
}

impl Mail {
    /// A header's value (the first of that name), unfolded.
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.data.split("\r\n\r\n").next()?;
        let mut lines = head.split("\r\n").peekable();
        while let Some(line) = lines.next() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            if k.eq_ignore_ascii_case(name) {
                let mut value = v.trim().to_string();
                while lines.peek().is_some_and(|l| l.starts_with([' ', '\t'])) {
                    value.push(' ');
                    value.push_str(lines.next().unwrap_or_default().trim());
                }
                return Some(value);
            }
        }
        None
    }

    /// The body, with quoted-printable soft line breaks and `=XX` escapes undone when the mail
    /// says it is so encoded (what a mail reader shows).
    pub fn body(&self) -> String {
        let raw = self.data.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
        let qp = self
            .header("Content-Transfer-Encoding")
            .is_some_and(|e| e.eq_ignore_ascii_case("quoted-printable"));
        if !qp {
            return raw.replace("\r\n", "\n");
        }
        let joined = raw.replace("=\r\n", "");
        let bytes = joined.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if bytes[i] == b'=' && i + 2 < bytes.len() {
                if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
            }
            out.push(bytes[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).replace("\r\n", "\n")
    }
}

impl SmtpSink {
    /// Starts the server with a certificate of `ca` for `localhost`.
    pub fn start(ca: &TestCa, mode: Mode) -> SmtpSink {
        Self::launch(ca, mode, None, false)
    }

    /// Like [`SmtpSink::start`], and the server requires this login.
    pub fn with_login(ca: &TestCa, user: &str, password: &str) -> SmtpSink {
        Self::launch(
            ca,
            Mode::StartTls,
            Some((user.to_string(), password.to_string())),
            false,
        )
    }

    /// A server that answers 554 to every message.
    pub fn refusing(ca: &TestCa) -> SmtpSink {
        Self::launch(ca, Mode::StartTls, None, true)
    }

    fn launch(ca: &TestCa, mode: Mode, login: Option<(String, String)>, refuse: bool) -> SmtpSink {
        let dir = tempfile::Builder::new()
            .prefix("herald-smtp-")
            .tempdir()
            .expect("temp dir");
        let (chain, key) = ca.server_identity_pem();
        let cert_path = dir.path().join("cert.pem");
        let key_path = dir.path().join("key.pem");
        std::fs::write(&cert_path, chain).expect("write cert");
        std::fs::write(&key_path, key).expect("write key");
        let mails = dir.path().join("mails");
        std::fs::create_dir(&mails).expect("mails dir");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/tools/smtp_sink.py");
        let mut cmd = Command::new("/usr/bin/python3");
        cmd.arg(script)
            .arg("--dir")
            .arg(&mails)
            .arg("--cert")
            .arg(&cert_path)
            .arg("--key")
            .arg(&key_path)
            .arg("--mode")
            .arg(match mode {
                Mode::StartTls => "starttls",
                Mode::Smtps => "smtps",
            });
        if let Some((u, p)) = &login {
            cmd.arg("--user").arg(u).arg("--password").arg(p);
        }
        if refuse {
            cmd.arg("--refuse");
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect(
                "start /usr/bin/python3 tests/tools/smtp_sink.py \
                 (apt-get install -y --no-install-recommends python3-aiosmtpd)",
            );
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the SMTP server's port");
        let port = line.trim().parse().unwrap_or_else(|_| {
            let _ = child.kill();
            panic!(
                "tests/tools/smtp_sink.py did not start (is python3-aiosmtpd installed?); \
                 it printed {line:?}"
            )
        });
        SmtpSink {
            child,
            dir,
            port,
            mode,
            login,
        }
    }

    /// `[alerts] smtp_url` for this server (with its login, if it has one).
    pub fn url(&self) -> String {
        let scheme = match self.mode {
            Mode::StartTls => "smtp",
            Mode::Smtps => "smtps",
        };
        // Percent-encoded, as a URL's user-info must be.
        let enc = |s: &str| {
            s.bytes()
                .map(|b| match b {
                    b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect::<String>()
        };
        let login = match &self.login {
            Some((u, p)) => format!("{}:{}@", enc(u), enc(p)),
            None => String::new(),
        };
        format!("{scheme}://{login}localhost:{}", self.port)
    }

    /// The messages accepted so far, in order.
    pub fn mails(&self) -> Vec<Mail> {
        let dir = self.dir.path().join("mails");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .expect("read mails dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        names.sort();
        names
            .iter()
            .map(|n| {
                let text = std::fs::read_to_string(dir.join(n)).expect("read a mail");
                serde_json::from_str(&text).expect("a mail record")
            })
            .collect()
    }

    /// Waits until at least `n` messages arrived; panics after `deadline`.
    pub async fn wait_for(&self, n: usize, deadline: Duration) -> Vec<Mail> {
        super::wait_until(deadline, &format!("{n} mail(s) arrive"), || async {
            self.mails().len() >= n
        })
        .await;
        self.mails()
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
