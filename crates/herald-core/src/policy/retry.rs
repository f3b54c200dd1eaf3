//! Retry arithmetic: which outcomes are retried and how long to wait. Pure functions.

use std::time::{Duration, SystemTime};

use crate::clock::Millis;
use crate::model::Status;

/// `Retry-After` never holds a delivery longer than this (docs/delivery-contract.md).
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(3600);
/// Each delay moves by up to this fraction either way, so retries of many deliveries that failed
/// together do not arrive together.
pub const JITTER: f64 = 0.10;

/// True if an attempt that ended with `status` (and `http_status`) may be tried again.
pub fn is_retryable(status: Status, http_status: Option<u16>) -> bool {
    match status {
        Status::Timeout | Status::ConnectionError | Status::TlsError => true,
        Status::HttpError => matches!(http_status, Some(408 | 429 | 500..=599)),
        _ => false,
    }
}

/// The wait before the next attempt, after attempt number `attempts_made` (1-based) failed, or
/// `None` when the policy is exhausted. `jitter` is in [-1, 1] and scales [`JITTER`];
/// `retry_after` (already capped) sets a floor.
pub fn next_delay(
    policy: &[Duration],
    attempts_made: u32,
    jitter: f64,
    retry_after: Option<Duration>,
) -> Option<Duration> {
    let base = *policy.get(attempts_made.checked_sub(1)? as usize)?;
    // Config durations are bounded (config::MAX_DURATION), so this cannot overflow; saturate
    // anyway rather than panic on a value that slipped past.
    let factor = (1.0 + jitter.clamp(-1.0, 1.0) * JITTER).max(0.0);
    let jittered =
        Duration::try_from_secs_f64(base.as_secs_f64() * factor).unwrap_or(Duration::MAX);
    Some(match retry_after {
        Some(floor) => jittered.max(floor),
        None => jittered,
    })
}

/// Parses `Retry-After` (delay seconds or an HTTP date) into a wait from `now`, capped at
/// [`RETRY_AFTER_CAP`]. A date in the past means no wait; garbage means none given.
pub fn parse_retry_after(value: &str, now: Millis) -> Option<Duration> {
    let value = value.trim();
    let wait = if let Ok(secs) = value.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        let now = SystemTime::UNIX_EPOCH + Duration::from_millis(now.max(0) as u64);
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(RETRY_AFTER_CAP))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn retried_and_not_retried_outcomes() {
        for (status, code, want) in [
            (Status::Timeout, None, true),
            (Status::ConnectionError, None, true),
            (Status::TlsError, None, true),
            (Status::HttpError, Some(408), true),
            (Status::HttpError, Some(429), true),
            (Status::HttpError, Some(500), true),
            (Status::HttpError, Some(503), true),
            (Status::HttpError, Some(599), true),
            (Status::HttpError, Some(302), false),
            (Status::HttpError, Some(400), false),
            (Status::HttpError, Some(404), false),
            (Status::HttpError, Some(410), false),
            (Status::Blocked, None, false),
            (Status::Delivered, Some(200), false),
        ] {
            assert_eq!(is_retryable(status, code), want, "{status:?} {code:?}");
        }
    }

    #[test]
    fn delays_follow_the_policy_then_stop() {
        let policy = [ms(300), ms(600)];
        assert_eq!(next_delay(&policy, 1, 0.0, None), Some(ms(300)));
        assert_eq!(next_delay(&policy, 2, 0.0, None), Some(ms(600)));
        assert_eq!(next_delay(&policy, 3, 0.0, None), None);
        assert_eq!(next_delay(&[], 1, 0.0, None), None);
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let policy = [Duration::from_secs(100)];
        assert_eq!(
            next_delay(&policy, 1, 1.0, None),
            Some(Duration::from_secs(110))
        );
        assert_eq!(
            next_delay(&policy, 1, -1.0, None),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            next_delay(&policy, 1, 7.0, None),
            Some(Duration::from_secs(110))
        );
    }

    #[test]
    fn retry_after_is_a_floor() {
        let policy = [ms(300)];
        assert_eq!(
            next_delay(&policy, 1, 0.0, Some(Duration::from_secs(2))),
            Some(Duration::from_secs(2))
        );
        assert_eq!(next_delay(&policy, 1, 0.0, Some(ms(10))), Some(ms(300)));
    }

    #[test]
    fn retry_after_parses_seconds_and_dates_and_is_capped() {
        let now = 1_445_412_480_000; // Wed, 21 Oct 2015 07:28:00 GMT
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("99999", now), Some(RETRY_AFTER_CAP));
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
