//! The per-endpoint circuit breaker and auto-disable (SPEC §7). Pure state transitions; the
//! engine keeps the states and the store persists them, so a restart keeps an open breaker open.
//!
//! - closed: attempts go out. 10 consecutive failed attempts open it.
//! - open: the endpoint's deliveries wait (not attempted, not counted) until `next_probe_at`;
//!   the cool-down is 30 s, doubling after each failed probe up to 10 min.
//! - half-open: one probe attempt decides: success closes the breaker, failure opens it again.
//!
//! An endpoint whose attempts have all failed for `endpoints.disable_after` is disabled.

use serde::{Deserialize, Serialize};

use crate::clock::Millis;

pub const OPEN_AFTER: u32 = 10;
pub const FIRST_COOLDOWN_MS: Millis = 30_000;
pub const MAX_COOLDOWN_MS: Millis = 600_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Closed,
    Open,
    HalfOpen,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breaker {
    pub phase: Phase,
    pub consecutive_failures: u32,
    /// When the current unbroken run of failures began (for auto-disable).
    pub failing_since: Option<Millis>,
    pub cooldown_ms: Millis,
    pub next_probe_at: Option<Millis>,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            phase: Phase::Closed,
            consecutive_failures: 0,
            failing_since: None,
            cooldown_ms: FIRST_COOLDOWN_MS,
            next_probe_at: None,
        }
    }
}

/// What the breaker says about an attempt that is due now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Send it.
    Pass,
    /// Send it as the one probe of a half-open breaker.
    Probe,
    /// Do not attempt; wait until then.
    WaitUntil(Millis),
}

/// Something an operator should hear about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Opened,
    Recovered,
    Disable,
}

impl Breaker {
    /// Decides for an attempt due at `now`. `probe_running` is true while a probe is out; the
    /// others then wait for at most `probe_time` (how long a probe can take) past now.
    pub fn gate(&mut self, now: Millis, probe_running: bool, probe_time: Millis) -> Gate {
        match self.phase {
            Phase::Closed => Gate::Pass,
            Phase::Open | Phase::HalfOpen => {
                let at = self.next_probe_at.unwrap_or(now);
                if now < at {
                    Gate::WaitUntil(at)
                } else if probe_running {
                    Gate::WaitUntil(now + probe_time)
                } else {
                    self.phase = Phase::HalfOpen;
                    Gate::Probe
                }
            }
        }
    }

    /// Records a sent attempt's result; returns what changed.
    pub fn record(&mut self, ok: bool, now: Millis, disable_after_ms: Millis) -> Option<Change> {
        if ok {
            let recovered = self.phase != Phase::Closed;
            *self = Breaker::default();
            return recovered.then_some(Change::Recovered);
        }
        self.consecutive_failures += 1;
        let since = *self.failing_since.get_or_insert(now);
        if now - since >= disable_after_ms {
            return Some(Change::Disable);
        }
        match self.phase {
            Phase::Closed if self.consecutive_failures >= OPEN_AFTER => {
                self.phase = Phase::Open;
                self.cooldown_ms = FIRST_COOLDOWN_MS;
                self.next_probe_at = Some(now + self.cooldown_ms);
                Some(Change::Opened)
            }
            Phase::HalfOpen | Phase::Open => {
                self.phase = Phase::Open;
                self.cooldown_ms = (self.cooldown_ms * 2).min(MAX_COOLDOWN_MS);
                self.next_probe_at = Some(now + self.cooldown_ms);
                None
            }
            Phase::Closed => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Millis = 86_400_000;

    #[test]
    fn ten_consecutive_failures_open_it_and_a_success_in_between_resets_the_count() {
        let mut b = Breaker::default();
        for i in 0..9 {
            assert_eq!(b.record(false, i, 5 * DAY), None);
        }
        assert_eq!(b.record(true, 9, 5 * DAY), None);
        assert_eq!(b.consecutive_failures, 0);
        for i in 0..9 {
            assert_eq!(b.record(false, 10 + i, 5 * DAY), None);
        }
        assert_eq!(b.record(false, 100, 5 * DAY), Some(Change::Opened));
        assert_eq!(b.phase, Phase::Open);
        assert_eq!(b.next_probe_at, Some(100 + 30_000));
    }

    #[test]
    fn open_breaker_holds_deliveries_then_lets_one_probe_decide() {
        let mut b = Breaker::default();
        for i in 0..10 {
            b.record(false, i, 5 * DAY);
        }
        assert_eq!(b.gate(1_000, false, 11_000), Gate::WaitUntil(30_009));
        assert_eq!(b.gate(30_009, false, 11_000), Gate::Probe);
        assert_eq!(b.gate(30_010, true, 11_000), Gate::WaitUntil(41_010));
        // The probe fails: open again, cool-down doubled.
        assert_eq!(b.record(false, 31_000, 5 * DAY), None);
        assert_eq!((b.phase, b.next_probe_at), (Phase::Open, Some(91_000)));
        // Doubling stops at 10 minutes.
        for _ in 0..10 {
            b.gate(b.next_probe_at.unwrap(), false, 0);
            b.record(false, b.next_probe_at.unwrap(), 5 * DAY);
        }
        assert_eq!(b.cooldown_ms, MAX_COOLDOWN_MS);
        // A successful probe closes it.
        let at = b.next_probe_at.unwrap();
        assert_eq!(b.gate(at, false, 0), Gate::Probe);
        assert_eq!(b.record(true, at, 5 * DAY), Some(Change::Recovered));
        assert_eq!(b, Breaker::default());
    }

    #[test]
    fn failing_every_attempt_for_the_window_disables() {
        let mut b = Breaker::default();
        b.record(false, 0, 5 * DAY);
        assert_eq!(b.record(false, 5 * DAY - 1, 5 * DAY), None);
        assert_eq!(b.record(false, 5 * DAY, 5 * DAY), Some(Change::Disable));
    }
}
