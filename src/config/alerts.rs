//! `[alerts]` (docs/operations.md, "Failure alerts"): the SMTP server failure alert mails go
//! through, from the config or its file, the sender and the interval. The URL may carry a
//! password: no message here quotes it, and this type's `Debug` never shows it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{secs, Config, ConfigError, Dur};

/// The shortest `alerts.min_interval`: below a minute a flapping endpoint could fill an inbox.
pub const MIN_INTERVAL: Duration = Duration::from_secs(60);
/// The range of `alerts.max_per_account_per_hour`: at least one mail, and never so many that
/// churning endpoints make the operator's relay a spam cannon.
pub const MAX_PER_ACCOUNT_PER_HOUR: std::ops::RangeInclusive<u32> = 1..=1000;

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Alerts {
    /// `smtp://[user:password@]host[:port]` (STARTTLS required, port 587 by default) or
    /// `smtps://...` (TLS from the first byte, port 465 by default).
    pub smtp_url: Option<String>,
    /// A file holding the URL (systemd credentials), read at start.
    pub smtp_url_file: Option<PathBuf>,
    /// The mails' `From:` address.
    pub from: Option<String>,
    /// At most one "failing" mail per endpoint per this long.
    pub min_interval: Dur,
    /// At most this many mails of any kind per account per UTC clock hour.
    pub max_per_account_per_hour: u32,
}

impl Default for Alerts {
    fn default() -> Self {
        Alerts {
            smtp_url: None,
            smtp_url_file: None,
            from: None,
            min_interval: secs(3600),
            max_per_account_per_hour: 20,
        }
    }
}

impl fmt::Debug for Alerts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Alerts")
            .field("smtp_url", &self.smtp_url.as_ref().map(|_| "(hidden)"))
            .field("smtp_url_file", &self.smtp_url_file)
            .field("from", &self.from)
            .field("min_interval", &self.min_interval)
            .field("max_per_account_per_hour", &self.max_per_account_per_hour)
            .finish()
    }
}

/// How the connection to the SMTP server is secured: both always encrypt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTls {
    /// `smtp://`: a plain connection upgraded with STARTTLS; a server that does not offer it
    /// is refused before anything is sent.
    StartTls,
    /// `smtps://`: TLS from the first byte.
    Implicit,
}

/// The SMTP server, parsed from `alerts.smtp_url`.
#[derive(Clone)]
pub struct SmtpServer {
    pub tls: SmtpTls,
    pub host: String,
    pub port: u16,
    /// (user, password), percent-decoded.
    pub credentials: Option<(String, String)>,
}

impl fmt::Debug for SmtpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpServer")
            .field("tls", &self.tls)
            .field("host", &self.host)
            .field("port", &self.port)
            .field(
                "credentials",
                &self.credentials.as_ref().map(|_| "(hidden)"),
            )
            .finish()
    }
}

/// What alerts need from the config, checked: where to send, from whom, how often.
#[derive(Debug, Clone)]
pub struct AlertsSetup {
    pub server: SmtpServer,
    pub from: lettre::message::Mailbox,
    pub min_interval: Duration,
    /// `alerts.max_per_account_per_hour`.
    pub max_per_hour: u32,
}

impl Config {
    /// The alerts' setup; `Ok(None)` when no SMTP URL is configured (no alerts). The error
    /// names the key and never quotes the URL.
    pub fn alerts_setup(&self) -> Result<Option<AlertsSetup>, ConfigError> {
        let a = &self.alerts;
        let problem = |key: &str, message: String| ConfigError {
            key: format!("alerts.{key}"),
            message,
        };
        let (raw, key) = match (&a.smtp_url, &a.smtp_url_file) {
            (None, None) => return Ok(None),
            (Some(_), Some(_)) => {
                return Err(problem(
                    "smtp_url",
                    "and alerts.smtp_url_file are both set; keep one".into(),
                ))
            }
            (Some(url), None) => (url.trim().to_string(), "smtp_url"),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    problem(
                        "smtp_url_file",
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                let line = text.lines().map(str::trim).find(|l| !l.is_empty());
                let line = line.ok_or_else(|| {
                    problem("smtp_url_file", format!("{} is empty", path.display()))
                })?;
                (line.to_string(), "smtp_url_file")
            }
        };
        let server = parse_smtp_url(&raw).map_err(|why| problem(key, why))?;
        let from = match &a.from {
            None => {
                return Err(problem(
                    "from",
                    "is required with an SMTP URL: the address alert mails come from, such as \
                     \"herald@example.com\""
                        .into(),
                ))
            }
            Some(f) => f.parse::<lettre::message::Mailbox>().map_err(|e| {
                problem(
                    "from",
                    format!("{f:?} is not a mail address such as \"herald@example.com\" ({e})"),
                )
            })?,
        };
        Ok(Some(AlertsSetup {
            server,
            from,
            min_interval: a.min_interval.0,
            max_per_hour: a.max_per_account_per_hour,
        }))
    }

    /// The problems of `[alerts]`.
    pub(super) fn alerts_problems(&self) -> Vec<ConfigError> {
        let a = &self.alerts;
        let mut out = Vec::new();
        if let Err(e) = self.alerts_setup() {
            out.push(e);
        }
        if a.smtp_url.is_none() && a.smtp_url_file.is_none() && a.from.is_some() {
            out.push(ConfigError {
                key: "alerts.from".into(),
                message: "is set, but no alerts.smtp_url (or smtp_url_file) says where to send"
                    .into(),
            });
        }
        if a.min_interval.0 < MIN_INTERVAL {
            out.push(ConfigError {
                key: "alerts.min_interval".into(),
                message: "must be at least \"1m\"".into(),
            });
        }
        if !MAX_PER_ACCOUNT_PER_HOUR.contains(&a.max_per_account_per_hour) {
            out.push(ConfigError {
                key: "alerts.max_per_account_per_hour".into(),
                message: format!(
                    "is {}; it must be {} to {} (mails per account per hour)",
                    a.max_per_account_per_hour,
                    MAX_PER_ACCOUNT_PER_HOUR.start(),
                    MAX_PER_ACCOUNT_PER_HOUR.end()
                ),
            });
        }
        out
    }
}

/// Parses an SMTP URL; the reason never quotes the URL (it may hold a password).
pub fn parse_smtp_url(raw: &str) -> Result<SmtpServer, String> {
    let shape = "write smtp://[USER:PASSWORD@]HOST[:PORT] (STARTTLS) or smtps://... (TLS)";
    let url = url::Url::parse(raw).map_err(|e| format!("is not a URL ({e}); {shape}"))?;
    let (tls, default_port) = match url.scheme() {
        "smtp" => (SmtpTls::StartTls, 587),
        "smtps" => (SmtpTls::Implicit, 465),
        other => {
            return Err(format!(
                "has the scheme {other:?}; {shape}: herald sends alert mails encrypted only"
            ))
        }
    };
    let host = match url.host() {
        Some(url::Host::Domain(d)) if !d.is_empty() => d.to_string(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        _ => return Err(format!("names no host; {shape}")),
    };
    if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
        return Err(format!("has a path, query or fragment; {shape}"));
    }
    let decode = |s: &str| {
        percent_decode(s).ok_or_else(|| "has a user name or password that is not UTF-8".to_string())
    };
    let credentials = match (url.username(), url.password()) {
        ("", None) => None,
        (user, Some(password)) if !user.is_empty() => Some((decode(user)?, decode(password)?)),
        _ => {
            return Err(format!(
                "has a user name without a password or the reverse; {shape}"
            ))
        }
    };
    Ok(SmtpServer {
        tls,
        host,
        port: url.port().unwrap_or(default_port),
        credentials,
    })
}

/// `%XX` sequences decoded; `None` if the result is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h)? * 16 + hex(l)?) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::problems;

    #[test]
    fn smtp_urls_parse_with_their_tls_and_default_ports() {
        let s = parse_smtp_url("smtp://mail.example.com").unwrap();
        assert_eq!(
            (s.tls, s.host.as_str(), s.port),
            (SmtpTls::StartTls, "mail.example.com", 587)
        );
        assert!(s.credentials.is_none());
        let s = parse_smtp_url("smtps://u%40x:p%3Ass@127.0.0.1:2465/").unwrap();
        assert_eq!(
            (s.tls, s.host.as_str(), s.port),
            (SmtpTls::Implicit, "127.0.0.1", 2465)
        );
        assert_eq!(s.credentials, Some(("u@x".into(), "p:ss".into())));
        assert!(
            !format!("{s:?}").contains("p:ss"),
            "Debug hides the password"
        );
    }

    #[test]
    fn check_config_names_each_alerts_key_and_never_the_password() {
        let keys =
            |toml: &str| -> Vec<String> { problems(toml).into_iter().map(|p| p.0).collect() };
        assert!(
            problems("").is_empty(),
            "no [alerts]: no alerts, no problem"
        );
        assert!(problems(
            "[alerts]\nsmtp_url = \"smtps://u:p@mail.example.com\"\nfrom = \"herald@example.com\"\n"
        )
        .is_empty());
        assert_eq!(
            keys("[alerts]\nsmtp_url = \"smtp://mail.example.com\"\n"),
            ["alerts.from"]
        );
        assert_eq!(
            keys("[alerts]\nsmtp_url = \"smtp://m.example.com\"\nfrom = \"not an address\"\n"),
            ["alerts.from"]
        );
        assert_eq!(
            keys("[alerts]\nfrom = \"herald@example.com\"\n"),
            ["alerts.from"]
        );
        assert_eq!(
            keys(
                "[alerts]\nsmtp_url = \"smtp://m.example.com\"\nsmtp_url_file = \"/x\"\n\
                 from = \"h@example.com\"\n"
            ),
            ["alerts.smtp_url"]
        );
        assert_eq!(
            keys(
                "[alerts]\nsmtp_url_file = \"/nonexistent/herald-smtp\"\nfrom = \"h@example.com\"\n"
            ),
            ["alerts.smtp_url_file"]
        );
        let bad = problems(
            "[alerts]\nsmtp_url = \"http://u:TOPSECRET@m.example.com\"\nfrom = \"h@example.com\"\n\
             min_interval = \"10s\"\n",
        );
        let keys: Vec<&str> = bad.iter().map(|p| p.0.as_str()).collect();
        assert_eq!(keys, ["alerts.smtp_url", "alerts.min_interval"]);
        assert!(bad.iter().all(|p| !p.1.contains("TOPSECRET")), "{bad:?}");
        // A file holding the URL (with a password) is read; its errors name the file's key.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("smtp");
        std::fs::write(&file, "\n  smtps://u:TOPSECRET@mail.example.com:2465  \n").unwrap();
        let config = Config::from_toml(&format!(
            "[alerts]\nsmtp_url_file = {:?}\nfrom = \"h@example.com\"\nmin_interval = \"2h\"\n",
            file.display().to_string()
        ))
        .unwrap();
        let setup = config.alerts_setup().unwrap().unwrap();
        assert_eq!(
            (setup.server.port, setup.min_interval.as_secs()),
            (2465, 7200)
        );
        assert!(!format!("{config:?}{setup:?}").contains("TOPSECRET"));
        let e = Config::from_toml("[alerts]\nsmtp = 1\n").unwrap_err();
        assert_eq!(e[0].key, "alerts.smtp");
    }

    #[test]
    fn max_per_account_per_hour_is_1_to_1000_and_20_by_default() {
        let with = |n: &str| {
            format!("[alerts]\nsmtp_url = \"smtp://m.example.com\"\nfrom = \"h@example.com\"\n{n}")
        };
        let setup = |text: &str| {
            let c = Config::from_toml(text).unwrap();
            assert!(c.alerts_problems().is_empty(), "{text}");
            c.alerts_setup().unwrap().unwrap().max_per_hour
        };
        assert_eq!(setup(&with("")), 20);
        assert_eq!(setup(&with("max_per_account_per_hour = 1\n")), 1);
        assert_eq!(setup(&with("max_per_account_per_hour = 1000\n")), 1000);
        for bad in ["0", "1001"] {
            let text = with(&format!("max_per_account_per_hour = {bad}\n"));
            let problems = Config::from_toml(&text).unwrap().alerts_problems();
            let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
            assert_eq!(keys, ["alerts.max_per_account_per_hour"], "{bad}");
            assert!(problems[0].message.contains("1 to 1000"), "{problems:?}");
        }
    }

    #[test]
    fn bad_smtp_urls_are_refused_without_quoting_them() {
        for bad in [
            "http://user:s3cret@mail.example.com",
            "smtp://user:s3cret@mail.example.com/path",
            "smtp://user@mail.example.com",
            "smtp://:s3cret@mail.example.com",
            "smtp://",
            "s3cret",
        ] {
            let why = parse_smtp_url(bad).expect_err(bad);
            assert!(!why.contains("s3cret"), "{why}");
        }
    }
}
