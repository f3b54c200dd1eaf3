//! Which failure alert mails go out (docs/operations.md, "Failure alerts"): a pure decision over
//! an endpoint's alert mark, the one record both stores keep per endpoint and change only
//! through [`claim`] under a compare-and-swap, so two nodes of a cluster never both send.
//!
//! - *failing*: the breaker opened. Mailed unless a failing mail went out less than
//!   `min_interval` ago.
//! - *still failing*: a probe of an open breaker failed. Mailed only when the people were not
//!   told of this run of failures yet (its opening fell inside `min_interval` of an earlier
//!   mail and a recovery was mailed since) and `min_interval` has passed: so an endpoint that
//!   flapped and then stayed down is reported once more, never every probe.
//! - *disabled*: the endpoint was disabled. Always mailed (it happens once until it is resumed).
//! - *recovered*: the first success after failures (the breaker closed, or a resumed endpoint
//!   delivered). Mailed only when a failing or disabled mail went out since the last recovery
//!   mail, so every recovery mail answers a failure mail.

use serde::{Deserialize, Serialize};

use crate::clock::Millis;

/// What happened to an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertKind {
    Failing,
    StillFailing,
    Disabled,
    Recovered,
}

impl AlertKind {
    /// The word the mail's subject and the logs use.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Failing | AlertKind::StillFailing => "failing",
            AlertKind::Disabled => "disabled",
            AlertKind::Recovered => "recovered",
        }
    }
}

/// What is kept per endpoint: when the last failing mail was claimed, and whether the people
/// were told of a failure that no recovery mail has answered yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertMark {
    pub failing_at: Option<Millis>,
    pub told: bool,
}

/// The mark after a mail of `kind` at `now`, if that mail goes out; `None`: no mail, the mark
/// stays as it is.
pub fn claim(
    mark: AlertMark,
    kind: AlertKind,
    now: Millis,
    min_interval_ms: Millis,
) -> Option<AlertMark> {
    let interval_passed = mark
        .failing_at
        .is_none_or(|at| now.saturating_sub(at) >= min_interval_ms);
    match kind {
        AlertKind::Failing if interval_passed => Some(AlertMark {
            failing_at: Some(now),
            told: true,
        }),
        AlertKind::StillFailing if interval_passed && !mark.told => Some(AlertMark {
            failing_at: Some(now),
            told: true,
        }),
        AlertKind::Disabled => Some(AlertMark { told: true, ..mark }),
        AlertKind::Recovered if mark.told => Some(AlertMark {
            told: false,
            ..mark
        }),
        AlertKind::Failing | AlertKind::StillFailing | AlertKind::Recovered => None,
    }
}

/// An hour in milliseconds: the window of `alerts.max_per_account_per_hour`.
pub const HOUR_MS: Millis = 3_600_000;

/// What is kept per account: how many mails were claimed in which UTC clock hour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertHour {
    /// The hour's start (a multiple of [`HOUR_MS`]).
    pub hour: Millis,
    pub mails: u32,
}

/// The account's count after one more mail at `now`, if the hour's cap `max` leaves room;
/// `None`: the cap is reached, no mail. A count of an earlier hour starts again from zero.
pub fn count(kept: AlertHour, now: Millis, max: u32) -> Option<AlertHour> {
    let hour = now - now.rem_euclid(HOUR_MS);
    let mails = if kept.hour == hour { kept.mails } else { 0 };
    (mails < max).then_some(AlertHour {
        hour,
        mails: mails + 1,
    })
}

/// One claim of an alert mail: the endpoint's mark and its account's hour decide together.
#[derive(Debug, Clone, Copy)]
pub struct AlertClaim<'a> {
    pub endpoint_id: &'a str,
    pub account_id: &'a str,
    pub kind: AlertKind,
    pub now: Millis,
    pub min_interval_ms: Millis,
    /// `alerts.max_per_account_per_hour`.
    pub max_per_hour: u32,
}

/// What a claim decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// The mail goes out: the mark went from `before` to `after` and the account's hour
    /// counts it. `before` is what the store's `Alerts::give_back_alert` puts
    /// back if the mail is given up.
    Send { before: AlertMark, after: AlertMark },
    /// The mark lets no mail through ([`claim`]); nothing changed.
    Withheld,
    /// The mark would, but the account's mails this hour reached the cap; nothing changed.
    OverCap,
    /// The endpoint no longer exists; nothing was written.
    Gone,
}

/// [`claim`] and [`count`] together: the new mark and hour, or why not.
pub fn decide(
    c: &AlertClaim<'_>,
    mark: AlertMark,
    hour: AlertHour,
) -> Result<(AlertMark, AlertHour), Claimed> {
    let next = claim(mark, c.kind, c.now, c.min_interval_ms).ok_or(Claimed::Withheld)?;
    let counted = count(hour, c.now, c.max_per_hour).ok_or(Claimed::OverCap)?;
    Ok((next, counted))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Millis = 3_600_000;

    fn run(steps: &[(AlertKind, Millis)]) -> Vec<bool> {
        let mut mark = AlertMark::default();
        steps
            .iter()
            .map(|&(kind, at)| match claim(mark, kind, at, HOUR) {
                Some(next) => {
                    mark = next;
                    true
                }
                None => false,
            })
            .collect()
    }

    #[test]
    fn one_failing_mail_per_interval_and_a_recovery_only_after_a_failure_mail() {
        use AlertKind::*;
        assert_eq!(
            run(&[
                (Failing, 0),
                (Recovered, 60_000),
                // Opens again within the hour: not mailed, and so neither is its recovery.
                (Failing, 120_000),
                (Recovered, 180_000),
                (Recovered, 190_000),
                // An hour after the first mail, an opening is mailed again.
                (Failing, HOUR),
                (Recovered, HOUR + 1),
            ]),
            [true, true, false, false, false, true, true]
        );
    }

    #[test]
    fn an_endpoint_that_flapped_then_stays_down_is_reported_once_more_after_the_interval() {
        use AlertKind::*;
        assert_eq!(
            run(&[
                (Failing, 0),
                (Recovered, 1_000),
                (Failing, 2_000),
                // Probes fail: nothing until the interval has passed, then once.
                (StillFailing, 600_000),
                (StillFailing, HOUR),
                (StillFailing, HOUR + 600_000),
                (StillFailing, 3 * HOUR),
                (Recovered, 3 * HOUR + 1),
            ]),
            [true, true, false, false, true, false, false, true]
        );
        // A failure that was mailed is not mailed again by its probes.
        assert_eq!(
            run(&[(Failing, 0), (StillFailing, 2 * HOUR)]),
            [true, false]
        );
    }

    #[test]
    fn disabled_is_always_mailed_and_makes_the_next_recovery_mailed() {
        use AlertKind::*;
        assert_eq!(
            run(&[
                (Failing, 0),
                (Recovered, 1),
                (Failing, 2),
                (Disabled, 3),
                (Recovered, 4),
                (Disabled, 5),
            ]),
            [true, true, false, true, true, true]
        );
        assert_eq!(AlertKind::StillFailing.as_str(), "failing");
    }

    #[test]
    fn the_hourly_count_resets_at_each_utc_clock_hour_and_stops_at_the_cap() {
        let start = 1_796_212_800_000; // 2026-12-02T12:00:00Z
        let mut kept = AlertHour::default();
        for n in 1..=3 {
            kept = count(kept, start + 59 * 60_000, 3).expect("room");
            assert_eq!(
                kept,
                AlertHour {
                    hour: start,
                    mails: n
                }
            );
        }
        assert_eq!(count(kept, start + HOUR_MS - 1, 3), None);
        assert_eq!(
            count(kept, start + HOUR_MS, 3),
            Some(AlertHour {
                hour: start + HOUR_MS,
                mails: 1
            })
        );
    }
}
