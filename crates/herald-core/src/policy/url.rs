//! Endpoint URLs: parsed the way a browser would (odd IPv4 notations normalized by the `url`
//! crate), then checked against the transport rules before they are stored.

use std::net::IpAddr;

use url::{Host, Url};

use super::ssrf::Guard;

/// Why an endpoint URL is refused; the message is shown to the API caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UrlProblem(pub String, pub &'static str);

/// Parses and checks an endpoint URL: `https` (or `http` where allowed), a host, no user-info,
/// and no literal address the SSRF guard refuses. Host names are checked at send time, after
/// herald resolves them.
pub fn check_endpoint_url(raw: &str, allow_http: bool, guard: &Guard) -> Result<Url, UrlProblem> {
    let url = Url::parse(raw.trim()).map_err(|e| {
        UrlProblem(
            format!("url is not a valid absolute URL ({e})"),
            "invalid_url",
        )
    })?;
    match url.scheme() {
        "https" => {}
        "http" if allow_http => {}
        "http" => {
            return Err(UrlProblem(
                "url must use https (plain http is allowed only with delivery.allow_http)".into(),
                "not_https",
            ))
        }
        other => {
            return Err(UrlProblem(
                format!("url scheme {other:?} is not https"),
                "not_https",
            ))
        }
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlProblem(
            "url must not contain user-info (user:password@)".into(),
            "user_info",
        ));
    }
    if let Some(ip) = literal_ip(&url) {
        guard
            .check(ip)
            .map_err(|r| UrlProblem(format!("url is refused: {r}"), "private_address"))?;
    } else if url.host_str().is_none_or(str::is_empty) {
        return Err(UrlProblem("url has no host".into(), "no_host"));
    }
    Ok(url)
}

/// The host as an address when the URL names one literally (already normalized by `url`).
pub fn literal_ip(url: &Url) -> Option<IpAddr> {
    match url.host()? {
        Host::Ipv4(a) => Some(IpAddr::V4(a)),
        Host::Ipv6(a) => Some(IpAddr::V6(a)),
        Host::Domain(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(u: &str) -> Result<Url, UrlProblem> {
        check_endpoint_url(u, false, &Guard::default())
    }

    #[test]
    fn refused_literal_forms_are_rejected_after_normalization() {
        for u in [
            "https://127.0.0.1/hook",
            "https://2130706433/",
            "https://0177.0.0.1/",
            "https://0x7f.1/",
            "https://0x7f000001/",
            "https://10.0.0.1/",
            "https://169.254.169.254/latest/meta-data",
            "https://[::1]/",
            "https://[::ffff:127.0.0.1]/",
            "https://[fd00:ec2::254]/",
            "https://[64:ff9b::a00:1]/",
            "https://0.0.0.0/",
            "https://user:pw@example.com/",
            "http://example.com/",
            "ftp://example.com/",
            "not a url",
        ] {
            assert!(check(u).is_err(), "{u} should be refused");
        }
    }

    #[test]
    fn public_https_urls_pass_and_names_wait_for_send_time() {
        for u in [
            "https://example.com/hook?x=1",
            "https://93.184.216.34/",
            "https://localhost/",
        ] {
            assert!(check(u).is_ok(), "{u} should pass");
        }
        assert!(check_endpoint_url("http://example.com/", true, &Guard::default()).is_ok());
    }
}
