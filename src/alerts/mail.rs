//! What a failure alert mail says (docs/operations.md, "Failure alerts"): plain text, made from
//! a few facts about the endpoint and nothing else. Nothing here can reach a secret, a portal
//! token, a header or a payload: [`Facts`] does not hold them. The endpoint's URL is shown
//! without its query and fragment, which may carry a token of the receiver's.

use lettre::message::header::ContentType;
use lettre::message::{Mailbox, Message};

use crate::clock::{rfc3339, Millis};
use crate::policy::alerts::AlertKind;
use crate::policy::breaker::{FIRST_COOLDOWN_MS, MAX_COOLDOWN_MS, OPEN_AFTER};

/// Where the docs of these mails are, for installs with no public portal address.
pub const DOCS: &str = "the \"Failure alerts\" section of herald's docs/operations.md \
                        (installed as /usr/share/doc/herald/docs/operations.md)";

/// Everything a mail tells.
#[derive(Debug, Clone)]
pub struct Facts {
    pub kind: AlertKind,
    pub endpoint_id: String,
    pub url: String,
    pub account_id: String,
    /// When the endpoint's current run of failures began.
    pub failing_since: Option<Millis>,
    /// The last sent attempt's status and HTTP code.
    pub last_status: Option<&'static str>,
    pub http_status: Option<u16>,
    /// Its deliveries waiting (`None`: the store could not say).
    pub pending: Option<u64>,
    /// When it happened.
    pub at: Millis,
    /// `server.public_url` + `/portal`, when the config names a public address.
    pub portal: Option<String>,
    /// `alerts.min_interval`, as written for people.
    pub min_interval: String,
}

/// The endpoint's URL for people: scheme, host, port and path; the query and fragment are left
/// out (they may carry a token of the receiver's).
pub fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let cut = u.query().is_some() || u.fragment().is_some();
            u.set_query(None);
            u.set_fragment(None);
            if cut {
                format!("{u} (query left out)")
            } else {
                u.to_string()
            }
        }
        Err(_) => "(an URL herald cannot read)".into(),
    }
}

/// The subject line.
pub fn subject(f: &Facts) -> String {
    let what = match f.kind {
        AlertKind::Failing | AlertKind::StillFailing => "is failing",
        AlertKind::Disabled => "was disabled",
        AlertKind::Recovered => "has recovered",
    };
    format!("Webhook endpoint {what}: {}", shown_url(&f.url))
}

/// The plain-text body.
pub fn body(f: &Facts) -> String {
    let url = shown_url(&f.url);
    let mut out = String::new();
    let opening = match f.kind {
        AlertKind::Failing => format!(
            "The webhook endpoint {url} is failing: its last {OPEN_AFTER} attempts in a row \
             failed, so its deliveries now wait and one probe attempt is made after {}s, then \
             at longer intervals up to every {} minutes, until one succeeds.",
            FIRST_COOLDOWN_MS / 1000,
            MAX_COOLDOWN_MS / 60_000
        ),
        AlertKind::StillFailing => format!(
            "The webhook endpoint {url} is still failing: every probe attempt since it \
             started failing again has failed, and its deliveries wait."
        ),
        AlertKind::Disabled => format!(
            "The webhook endpoint {url} was disabled: nothing is sent to it any more. Its \
             deliveries are not attempted until someone resumes the endpoint."
        ),
        AlertKind::Recovered => format!(
            "The webhook endpoint {url} has recovered: an attempt succeeded, and its waiting \
             deliveries are being sent."
        ),
    };
    out.push_str(&opening);
    out.push_str("\n\n");
    let row = |out: &mut String, k: &str, v: &str| out.push_str(&format!("{k:<20}{v}\n"));
    row(&mut out, "Endpoint:", &url);
    row(&mut out, "Endpoint id:", &f.endpoint_id);
    row(&mut out, "Account:", &f.account_id);
    let when = match f.kind {
        AlertKind::Recovered => "Recovered at:",
        AlertKind::Disabled => "Disabled at:",
        AlertKind::Failing | AlertKind::StillFailing => "Noticed at:",
    };
    row(&mut out, when, &rfc3339(f.at));
    if f.kind != AlertKind::Recovered {
        if let Some(since) = f.failing_since {
            row(&mut out, "Failing since:", &rfc3339(since));
        }
    }
    if let Some(status) = f.last_status {
        let code = match f.http_status {
            Some(c) => format!("HTTP {c}"),
            None => "no HTTP answer".into(),
        };
        row(&mut out, "Last attempt:", &format!("{status} ({code})"));
    }
    let pending = match f.pending {
        Some(n) => n.to_string(),
        None => "unknown".into(),
    };
    row(&mut out, "Waiting deliveries:", &pending);
    out.push('\n');
    match &f.portal {
        Some(portal) => out.push_str(&format!(
            "See the endpoint's deliveries and attempts in the webhook portal: {portal} \
             (open it from your platform's dashboard to sign in).\n"
        )),
        None => out.push_str(&format!(
            "See the endpoint's deliveries and attempts in your platform's webhook portal; \
             what these mails mean is in {DOCS}.\n"
        )),
    }
    out.push_str(&format!(
        "\nherald sends at most one \"failing\" mail per endpoint every {}, and one when the \
         endpoint is disabled or recovers. You get these mails because your address is set \
         for failure alerts on account {}.\n",
        f.min_interval, f.account_id
    ));
    out
}

/// The mail, ready to send: `from` to every address of `to` (addresses checked when they were
/// set; one that no longer parses is skipped). `None` if none is left.
pub fn message(f: &Facts, from: &Mailbox, to: &[String]) -> Option<Message> {
    let mut builder = Message::builder()
        .from(from.clone())
        .subject(subject(f))
        .header(ContentType::TEXT_PLAIN);
    let mut any = false;
    for addr in to {
        if let Ok(a) = addr.parse::<lettre::Address>() {
            builder = builder.to(Mailbox::new(None, a));
            any = true;
        }
    }
    if !any {
        return None;
    }
    builder.body(body(f)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(kind: AlertKind) -> Facts {
        Facts {
            kind,
            endpoint_id: "ep_01".into(),
            url: "https://hooks.example.com/in?token=SECRET#frag".into(),
            account_id: "acme".into(),
            failing_since: Some(1_796_212_800_000),
            last_status: Some("http_error"),
            http_status: Some(503),
            pending: Some(7),
            at: 1_796_212_830_000,
            portal: None,
            min_interval: "1h".into(),
        }
    }

    #[test]
    fn a_failing_mail_names_the_endpoint_account_since_status_and_backlog() {
        let f = facts(AlertKind::Failing);
        assert_eq!(
            subject(&f),
            "Webhook endpoint is failing: https://hooks.example.com/in (query left out)"
        );
        let b = body(&f);
        for needle in [
            "Endpoint id:        ep_01\n",
            "Account:            acme\n",
            "Failing since:      2026-12-02T12:00:00.000Z\n",
            "Last attempt:       http_error (HTTP 503)\n",
            "Waiting deliveries: 7\n",
            "docs/operations.md",
        ] {
            assert!(b.contains(needle), "{needle:?} in\n{b}");
        }
        assert!(!b.contains("SECRET") && !subject(&f).contains("SECRET"));
    }

    #[test]
    fn the_portal_is_named_when_there_is_one_and_a_recovery_says_so() {
        let mut f = facts(AlertKind::Recovered);
        f.portal = Some("https://hooks.acme.test/portal".into());
        let b = body(&f);
        assert!(b.contains("https://hooks.acme.test/portal"), "{b}");
        assert!(
            b.contains("has recovered") && !b.contains("Failing since"),
            "{b}"
        );
        let from: Mailbox = "herald@example.com".parse().unwrap();
        let m = message(&f, &from, &["ops@acme.test".into()]).unwrap();
        let text = String::from_utf8(m.formatted()).unwrap();
        assert!(text.contains("To: ops@acme.test"), "{text}");
        assert!(message(&f, &from, &[]).is_none());
    }
}
