//! What a failure alert mail says (docs/operations.md, "Failure alerts"): plain text, made from
//! a few facts about the endpoint and nothing else. Nothing here can reach a secret, a portal
//! token, a header or a payload: [`Facts`] does not hold them. The endpoint is named by its
//! description, `scheme://host` and id: never its path or query, where receivers such as
//! Slack's carry their token. Addresses follow one rule ([`address_problem`]), checked when they
//! are set and again when a mail is written.

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
    /// The endpoint's description (may be empty).
    pub description: String,
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
    /// `portal.brand`: who the mail is from, for the people behind the endpoint.
    pub brand: String,
}

impl Facts {
    /// Whether the install shows a brand of its own (the portal's default brand is herald's
    /// name): its customers' mails then never name herald.
    fn branded(&self) -> bool {
        self.brand != crate::config::DEFAULT_BRAND
    }
}

/// The endpoint's URL for people: `scheme://host` (and a port other than the scheme's), never
/// the path, query or fragment, which may carry a token of the receiver's.
pub fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) if u.host_str().is_some() => u.origin().ascii_serialization(),
        _ => "(an address that cannot be read)".into(),
    }
}

/// The endpoint's host alone, for the subject line.
pub fn shown_host(url: &str) -> String {
    match url::Url::parse(url)
        .ok()
        .as_ref()
        .and_then(url::Url::host_str)
    {
        Some(host) => host.to_string(),
        None => "(an address that cannot be read)".into(),
    }
}

/// The description as one line of plain text: control characters (a line break could fake
/// lines of the mail) become spaces, and a long one is cut.
fn shown_description(d: &str) -> String {
    let line: String = d
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    line.trim().to_string()
}

/// The subject line: the brand, and the endpoint's host only.
pub fn subject(f: &Facts) -> String {
    let what = match f.kind {
        AlertKind::Failing | AlertKind::StillFailing => "is failing",
        AlertKind::Disabled => "was disabled",
        AlertKind::Recovered => "has recovered",
    };
    format!(
        "[{}] Webhook endpoint {what}: {}",
        f.brand,
        shown_host(&f.url)
    )
}

/// The plain-text body.
pub fn body(f: &Facts) -> String {
    let description = shown_description(&f.description);
    let url = match description.as_str() {
        "" => format!("{} ({})", shown_url(&f.url), f.endpoint_id),
        d => format!("\"{d}\" at {} ({})", shown_url(&f.url), f.endpoint_id),
    };
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
            "The webhook endpoint {url} was disabled{}: nothing is sent to it any more. Its \
             deliveries are not attempted until someone resumes the endpoint.",
            match f.http_status {
                Some(410) => " because it answered 410 Gone",
                _ => " because it kept failing for too long",
            }
        ),
        AlertKind::Recovered => format!(
            "The webhook endpoint {url} has recovered: an attempt succeeded, and its waiting \
             deliveries are being sent."
        ),
    };
    out.push_str(&opening);
    out.push_str("\n\n");
    let row = |out: &mut String, k: &str, v: &str| out.push_str(&format!("{k:<20}{v}\n"));
    if !description.is_empty() {
        row(&mut out, "Description:", &description);
    }
    row(&mut out, "Endpoint:", &shown_url(&f.url));
    row(&mut out, "Endpoint id:", &f.endpoint_id);
    row(&mut out, "Account:", &f.account_id);
    let when = match f.kind {
        AlertKind::Recovered => "Recovered at:",
        AlertKind::Disabled => "Disabled at:",
        AlertKind::Failing | AlertKind::StillFailing => "Noticed at:",
    };
    row(&mut out, when, &rfc3339(f.at));
    match (f.kind, f.failing_since) {
        (AlertKind::Recovered, Some(since)) if since <= f.at => {
            let down = std::time::Duration::from_secs(((f.at - since) / 1000) as u64);
            row(&mut out, "Failing since:", &rfc3339(since));
            row(
                &mut out,
                "Down for:",
                &humantime::format_duration(down).to_string(),
            );
        }
        (AlertKind::Recovered, _) => {}
        (_, Some(since)) => row(&mut out, "Failing since:", &rfc3339(since)),
        (_, None) => {}
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
        None if f.branded() => out.push_str(
            "See the endpoint's deliveries and attempts in your platform's webhook portal.\n",
        ),
        None => out.push_str(&format!(
            "See the endpoint's deliveries and attempts in your platform's webhook portal; \
             what these mails mean is in {DOCS}.\n"
        )),
    }
    out.push_str(&format!(
        "\n{} sends at most one \"failing\" mail per endpoint every {}, and one when the \
         endpoint is disabled or recovers. You get these mails because your address is set \
         for failure alerts on account {}.\n",
        f.brand, f.min_interval, f.account_id
    ));
    out
}

/// The longest address: what SMTP's path limit leaves (RFC 5321).
pub const MAX_ADDRESS: usize = 254;

/// Why herald does not mail `addr` (a reason from docs/api.md's list, and a sentence), or
/// `None` when it does. An address is ASCII `local@domain`:
/// the local part a dot-atom (letters, digits and ``#$&'*+-/=?^_`{|}~``, dots between them;
/// no quoted local part, no `%` or `!`, which route mail on through another host), the domain
/// a domain name of two or more labels (an internationalized one in its `xn--` form; no IP
/// address, bracketed or not). UTF-8 addresses are refused: they would need SMTPUTF8.
pub fn address_problem(addr: &str) -> Option<(&'static str, &'static str)> {
    if addr.len() > MAX_ADDRESS {
        return Some(("too_long", "it is longer than 254 characters"));
    }
    if !addr.is_ascii() {
        return Some((
            "not_ascii",
            "it is not ASCII (write an internationalized domain in its xn-- form)",
        ));
    }
    let Some((local, domain)) = addr.rsplit_once('@') else {
        return Some(("no_at", "it has no @"));
    };
    if local.is_empty() || local.len() > 64 {
        return Some((
            "local_part",
            "its local part (before the @) must be 1 to 64 characters",
        ));
    }
    if local.starts_with('"') {
        return Some(("quoted_local_part", "it has a quoted local part"));
    }
    if local.contains('@') {
        return Some(("several_at", "it has more than one @"));
    }
    if local.contains(['%', '!']) {
        return Some((
            "routing",
            "its local part holds % or !, which route mail through another host",
        ));
    }
    let atext = |c: char| c.is_ascii_alphanumeric() || "#$&'*+-/=?^_`{|}~".contains(c);
    if local
        .split('.')
        .any(|atom| atom.is_empty() || !atom.chars().all(atext))
    {
        return Some((
            "local_part",
            "its local part must be letters, digits and #$&'*+-/=?^_`{|}~ with single dots \
             between them",
        ));
    }
    if domain.starts_with('[') {
        return Some(("ip_literal", "its domain is an IP address literal"));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    let label_ok = |l: &&str| {
        (1..=63).contains(&l.len())
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if domain.len() > 253 || labels.len() < 2 || !labels.iter().all(label_ok) {
        return Some((
            "domain",
            "its domain must be a name such as example.com: labels of letters, digits and \
             hyphens, separated by dots",
        ));
    }
    if labels
        .last()
        .is_some_and(|l| l.chars().all(|c| c.is_ascii_digit()))
    {
        return Some(("ip_literal", "its domain is an IP address"));
    }
    None
}

/// An address of an account's list that a mail skips, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Its index in the account's `alert_emails`.
    pub index: usize,
    pub why: String,
}

/// `addr` as an address herald mails: today's rule ([`address_problem`]), then lettre's
/// parser; else why not. The one check for setting an address and for sending to one.
pub fn address(addr: &str) -> Result<lettre::Address, (&'static str, String)> {
    match address_problem(addr) {
        Some((reason, why)) => Err((reason, why.to_string())),
        None => addr
            .parse::<lettre::Address>()
            .map_err(|e| ("not_an_address", format!("it does not parse ({e})"))),
    }
}

/// The account's addresses this mail goes to, and those it skips: an address stored before
/// today's rule that the rule refuses ([`address_problem`]), or that lettre cannot read.
pub fn recipients(to: &[String]) -> (Vec<lettre::Address>, Vec<Skipped>) {
    let mut good = Vec::new();
    let mut skipped = Vec::new();
    for (index, addr) in to.iter().enumerate() {
        match address(addr) {
            Ok(a) => good.push(a),
            Err((_, why)) => skipped.push(Skipped { index, why }),
        }
    }
    (good, skipped)
}

/// The mail, ready to send: `from` to every address of `to` (at least one).
pub fn message(
    f: &Facts,
    from: &Mailbox,
    to: &[lettre::Address],
) -> Result<Message, lettre::error::Error> {
    plain(&f.brand, from, to, subject(f), body(f))
}

/// A plain-text mail from `from` (named by the brand, unless `alerts.from` names someone) to
/// every address of `to`.
fn plain(
    brand: &str,
    from: &Mailbox,
    to: &[lettre::Address],
    subject: String,
    body: String,
) -> Result<Message, lettre::error::Error> {
    let from = match &from.name {
        Some(_) => from.clone(),
        None => Mailbox::new(Some(brand.to_string()), from.email.clone()),
    };
    let mut builder = Message::builder()
        .from(from)
        .subject(subject)
        .header(ContentType::TEXT_PLAIN);
    for a in to {
        builder = builder.to(Mailbox::new(None, a.clone()));
    }
    builder.body(body)
}

/// What a test mail tells: whose addresses it proves, when, and where the portal is.
#[derive(Debug, Clone)]
pub struct TestFacts {
    pub account_id: String,
    pub at: Millis,
    /// `server.public_url` + `/portal`, when the config names a public address.
    pub portal: Option<String>,
    /// `alerts.min_interval`, as written for people.
    pub min_interval: String,
    pub brand: String,
}

/// The test mail the account asked for: it says that it is a test, which mails the addresses
/// get and why, and nothing of any endpoint.
pub fn test_message(
    f: &TestFacts,
    from: &Mailbox,
    to: &[lettre::Address],
) -> Result<Message, lettre::error::Error> {
    let subject = format!("[{}] Test of your webhook failure alerts", f.brand);
    let mut body = format!(
        "This is a test mail: someone asked for it for account {} at {}. Nothing is \
         failing.\n\n\
         When a webhook endpoint of this account starts failing, is disabled, or recovers, \
         this address gets a mail like this one, naming the endpoint, its last error and how \
         many deliveries wait. {} sends at most one \"failing\" mail per endpoint every {}.\n",
        f.account_id,
        rfc3339(f.at),
        f.brand,
        f.min_interval,
    );
    if let Some(portal) = &f.portal {
        body.push_str(&format!(
            "\nThe webhook portal: {portal} (open it from your platform's dashboard to sign in).\n"
        ));
    }
    body.push_str(&format!(
        "\nYou get this mail because your address is set for failure alerts on account {}.\n",
        f.account_id
    ));
    plain(&f.brand, from, to, subject, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(kind: AlertKind) -> Facts {
        Facts {
            kind,
            endpoint_id: "ep_01".into(),
            description: "Billing\r\nBcc: x@evil.test".into(),
            url: "https://hooks.example.com/services/T0/SECRET?token=SECRET#frag".into(),
            account_id: "acme".into(),
            failing_since: Some(1_796_212_800_000),
            last_status: Some("http_error"),
            http_status: Some(503),
            pending: Some(7),
            at: 1_796_212_830_000,
            portal: None,
            min_interval: "1h".into(),
            brand: "herald".into(),
        }
    }

    #[test]
    fn a_failing_mail_names_the_endpoint_account_since_status_and_backlog() {
        let f = facts(AlertKind::Failing);
        assert_eq!(
            subject(&f),
            "[herald] Webhook endpoint is failing: hooks.example.com"
        );
        let b = body(&f);
        for needle in [
            "The webhook endpoint \"Billing  Bcc: x@evil.test\" at https://hooks.example.com \
             (ep_01) is failing",
            "Description:        Billing  Bcc: x@evil.test\n",
            "Endpoint:           https://hooks.example.com\n",
            "Endpoint id:        ep_01\n",
            "Account:            acme\n",
            "Failing since:      2026-12-02T12:00:00.000Z\n",
            "Last attempt:       http_error (HTTP 503)\n",
            "Waiting deliveries: 7\n",
            "docs/operations.md",
        ] {
            assert!(b.contains(needle), "{needle:?} in\n{b}");
        }
        for shown in [&b, &subject(&f)] {
            assert!(
                !shown.contains("SECRET") && !shown.contains("/services"),
                "{shown}"
            );
        }
        let mut f = f;
        f.url = "http://10.0.0.7:8443/hook".into();
        f.description = String::new();
        assert_eq!(
            subject(&f),
            "[herald] Webhook endpoint is failing: 10.0.0.7"
        );
        assert!(
            body(&f).contains("endpoint http://10.0.0.7:8443 (ep_01) is"),
            "{}",
            body(&f)
        );
    }

    #[test]
    fn the_portal_is_named_when_there_is_one_and_a_recovery_says_so() {
        let mut f = facts(AlertKind::Recovered);
        f.portal = Some("https://hooks.acme.test/portal".into());
        let b = body(&f);
        assert!(b.contains("https://hooks.acme.test/portal"), "{b}");
        assert!(
            b.contains("has recovered") && b.contains("Down for:           30s\n"),
            "a recovery says how long the endpoint was down: {b}"
        );
        let from: Mailbox = "herald@example.com".parse().unwrap();
        let (to, skipped) = recipients(&["ops@acme.test".into(), "a@[127.0.0.1]".into()]);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert_eq!(skipped[0].index, 1);
        let m = message(&f, &from, &to).unwrap();
        let text = String::from_utf8(m.formatted()).unwrap();
        assert!(text.contains("To: ops@acme.test"), "{text}");
    }

    #[test]
    fn an_address_is_ascii_local_at_domain_with_a_dot_atom_and_a_domain_name() {
        for good in [
            "ops@example.com",
            "Oncall+herald@sub.acme.test",
            "a.b-c_d'e/f=g?h^i`j{k|l}m~n#o$p&q*r@x.example",
            "ops@xn--bcher-kva.example",
            "o@a-b.c0",
        ] {
            assert_eq!(address_problem(good), None, "{good}");
            assert!(good.parse::<lettre::Address>().is_ok(), "{good}");
        }
        for bad in [
            "\"a b\"@quoted.example",
            "a@[127.0.0.1]",
            "a@[IPv6:::1]",
            "a@127.0.0.1",
            "a%b@relay.example",
            "a!b@relay.example",
            "a@b@example.com",
            "ops@bücher.example",
            "jörg@example.com",
            "ops@localhost",
            ".a@example.com",
            "a..b@example.com",
            "a.@example.com",
            "a@-x.example",
            "a@x-.example",
            "a@x..example",
            "a@example.com.",
            "a b@example.com",
            "a@exa_mple.com",
            "@example.com",
            "a@",
            "plain",
        ] {
            assert!(address_problem(bad).is_some(), "{bad}");
        }
        let long = format!("{}@example.com", "a".repeat(65));
        assert!(address_problem(&long).is_some());
    }
}
