//! Per-account quotas: two independent fixed windows, the calendar minute and the UTC day
//! (docs/delivery-contract.md). No sliding window, no hourly window. The arithmetic here is pure;
//! the counters live in the store.

use crate::clock::Millis;

const MINUTE_MS: Millis = 60_000;
const DAY_MS: Millis = 86_400_000;

/// The windows an instant falls in: minutes and days since the Unix epoch. Unix time has no leap
/// seconds, so every UTC day is exactly 86,400,000 ms and day boundaries are UTC midnights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    pub minute: i64,
    pub day: i64,
}

pub fn windows(now: Millis) -> Windows {
    Windows {
        minute: now.div_euclid(MINUTE_MS),
        day: now.div_euclid(DAY_MS),
    }
}

/// An account's limits; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    pub per_minute: Option<u64>,
    pub per_day: Option<u64>,
}

/// True if one more delivery fits, given this minute's and today's counts so far.
pub fn allows(limits: Limits, minute_count: u64, day_count: u64) -> bool {
    limits.per_minute.is_none_or(|max| minute_count < max)
        && limits.per_day.is_none_or(|max| day_count < max)
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-12-02T23:59:59.999Z and the next millisecond.
    const BEFORE_MIDNIGHT: Millis = 1_796_255_999_999;

    #[test]
    fn minute_window_turns_at_the_minute_boundary() {
        let last_ms = BEFORE_MIDNIGHT - 60_000; // 23:58:59.999
        let w = windows(last_ms);
        assert_eq!(windows(last_ms + 1).minute, w.minute + 1); // 23:59:00.000
        assert_eq!(windows(last_ms - 59_999).minute, w.minute); // 23:58:00.000
        assert_eq!(windows(last_ms - 60_000).minute, w.minute - 1); // 23:57:59.999
    }

    #[test]
    fn day_window_turns_at_utc_midnight_only() {
        let d = windows(BEFORE_MIDNIGHT).day;
        assert_eq!(windows(BEFORE_MIDNIGHT + 1).day, d + 1);
        // Twelve hours earlier is the same day: no other boundary.
        assert_eq!(windows(BEFORE_MIDNIGHT - 12 * 3_600_000).day, d);
        assert_eq!(
            crate::clock::rfc3339(BEFORE_MIDNIGHT + 1),
            "2026-12-03T00:00:00.000Z"
        );
    }

    #[test]
    fn limits_allow_up_to_the_count() {
        let l = Limits {
            per_minute: Some(2),
            per_day: Some(3),
        };
        assert!(allows(l, 0, 0));
        assert!(allows(l, 1, 2));
        assert!(!allows(l, 2, 2), "minute full");
        assert!(!allows(l, 0, 3), "day full");
        assert!(allows(Limits::default(), u64::MAX - 1, u64::MAX - 1));
    }
}
