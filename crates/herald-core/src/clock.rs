//! Wall time that gets stored: timestamps, due times, windows.
//!
//! Everything that records or compares wall time asks a [`Clock`], so tests can move time by hand
//! ([`ManualClock`]) instead of sleeping. Timers (how long to wait) use `tokio::time`; the engine
//! also listens to [`Clock::changed`] so a manual jump wakes it at once.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> Millis;

    /// Notified when time jumps by hand (one waiter: the engine's scheduler). The system clock
    /// never jumps, so it has none.
    fn changed(&self) -> Option<&Notify> {
        None
    }
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as Millis)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
    changed: Notify,
}

impl ManualClock {
    pub fn new(start: Millis) -> Self {
        Self {
            now: AtomicI64::new(start),
            changed: Notify::new(),
        }
    }

    pub fn set(&self, now: Millis) {
        self.now.store(now, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    pub fn advance(&self, by: Duration) {
        self.now
            .fetch_add(by.as_millis() as Millis, Ordering::SeqCst);
        self.changed.notify_waiters();
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }

    fn changed(&self) -> Option<&Notify> {
        Some(&self.changed)
    }
}

/// RFC 3339 UTC with milliseconds, the one time format of the API.
pub fn rfc3339(ms: Millis) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Parses an RFC 3339 time: `Z` or a numeric offset (`+02:00`), optional fractional seconds.
pub fn parse_rfc3339(s: &str) -> Option<Millis> {
    let s = s.trim();
    // Split off the zone: humantime reads the rest as UTC, then the offset moves it.
    let (local, offset_ms) = if let Some(rest) = s.strip_suffix(['Z', 'z']) {
        (rest, 0)
    } else {
        let (rest, zone) = s.split_at_checked(s.len().checked_sub(6)?)?;
        let sign = match zone.as_bytes().first()? {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let (h, m) = zone[1..].split_once(':')?;
        if h.len() != 2 || m.len() != 2 {
            return None;
        }
        let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
        if h > 23 || m > 59 {
            return None;
        }
        (rest, sign * (h * 60 + m) * 60_000)
    };
    if local.len() < 19 || !matches!(local.as_bytes()[10], b'T' | b't') {
        return None;
    }
    let t = humantime::parse_rfc3339_weak(local).ok()?;
    let utc = t.duration_since(UNIX_EPOCH).ok()?.as_millis() as Millis;
    Some(utc - offset_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_has_milliseconds_and_round_trips() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_614_265_330_123), "2021-02-25T15:02:10.123Z");
        assert_eq!(
            parse_rfc3339("2021-02-25T15:02:10.123Z"),
            Some(1_614_265_330_123)
        );
        assert_eq!(
            parse_rfc3339("2021-02-25T15:02:10Z"),
            Some(1_614_265_330_000)
        );
        assert_eq!(
            parse_rfc3339("2021-02-25T17:02:10.123+02:00"),
            Some(1_614_265_330_123)
        );
        assert_eq!(
            parse_rfc3339("2021-02-25T10:02:10-05:00"),
            Some(1_614_265_330_000)
        );
        for bad in [
            "yesterday",
            "2021-02-25",
            "2021-02-25T15:02:10+2",
            "2021-02-25 15:02:10Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.advance(Duration::from_secs(2));
        assert_eq!(c.now_ms(), 3_000);
        c.set(10);
        assert_eq!(c.now_ms(), 10);
    }
}
