//! The per-endpoint circuit breaker and auto-disable (docs/delivery-contract.md). Pure state
//! transitions; the engine keeps the states and the store persists them, so a restart keeps an open
//! breaker open.
//!
//! - closed: attempts go out. 10 consecutive failed attempts open it.
//! - open: the endpoint's deliveries wait (not attempted, not counted) until `next_probe_at`;
//!   the cool-down is 30 s, doubling after each failed probe up to 10 min.
//! - half-open: one probe attempt decides: success closes the breaker, failure opens it again
//!   with the cool-down doubled. The probe is taken until `probe_until` (how long a probe can
//!   take): a probe that never reports back frees the endpoint for another one then. Attempts
//!   sent before the breaker opened whose failures arrive later are counted, but do not move the
//!   next probe: only probes double the cool-down.
//!
//! The state is kept whole (`probe_until` too), so on a cluster every node reads the same one
//! and one probe goes out in the whole cluster (docs/cluster.md).
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breaker {
    pub phase: Phase,
    pub consecutive_failures: u32,
    /// When the current unbroken run of failures began (for auto-disable).
    pub failing_since: Option<Millis>,
    pub cooldown_ms: Millis,
    pub next_probe_at: Option<Millis>,
    /// While a probe is out: until when (then another may go).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_until: Option<Millis>,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            phase: Phase::Closed,
            consecutive_failures: 0,
            failing_since: None,
            cooldown_ms: FIRST_COOLDOWN_MS,
            next_probe_at: None,
            probe_until: None,
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
    /// Decides for an attempt due at `now`; [`Gate::Probe`] takes the probe until `probe_time`
    /// (how long a probe can take) past now. While a probe is out the others wait for it.
    pub fn gate(&mut self, now: Millis, probe_time: Millis) -> Gate {
        if self.phase == Phase::Closed {
            return Gate::Pass;
        }
        let at = self.next_probe_at.unwrap_or(now);
        match self.probe_until {
            _ if now < at => Gate::WaitUntil(at),
            Some(until) if now < until => Gate::WaitUntil(until),
            _ => {
                self.phase = Phase::HalfOpen;
                self.probe_until = Some(now + probe_time);
                Gate::Probe
            }
        }
    }

    /// A probe taken by [`gate`](Self::gate) that was not sent after all (another condition
    /// stopped it): the next attempt may probe.
    pub fn release_probe(&mut self) {
        self.probe_until = None;
    }

    /// Records a sent attempt's result (`probe`: it was the probe the gate gave); returns what
    /// changed.
    pub fn record(
        &mut self,
        ok: bool,
        probe: bool,
        now: Millis,
        disable_after_ms: Millis,
    ) -> Option<Change> {
        if ok {
            let recovered = self.phase != Phase::Closed;
            *self = Breaker::default();
            return recovered.then_some(Change::Recovered);
        }
        if probe {
            self.probe_until = None;
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
            Phase::HalfOpen | Phase::Open if probe => {
                self.phase = Phase::Open;
                self.cooldown_ms = (self.cooldown_ms * 2).min(MAX_COOLDOWN_MS);
                self.next_probe_at = Some(now + self.cooldown_ms);
                None
            }
            // An attempt sent before the breaker opened: counted, the next probe stays.
            Phase::HalfOpen | Phase::Open | Phase::Closed => None,
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
            assert_eq!(b.record(false, false, i, 5 * DAY), None);
        }
        assert_eq!(b.record(true, false, 9, 5 * DAY), None);
        assert_eq!(b.consecutive_failures, 0);
        for i in 0..9 {
            assert_eq!(b.record(false, false, 10 + i, 5 * DAY), None);
        }
        assert_eq!(b.record(false, false, 100, 5 * DAY), Some(Change::Opened));
        assert_eq!(b.phase, Phase::Open);
        assert_eq!(b.next_probe_at, Some(100 + 30_000));
    }

    #[test]
    fn open_breaker_holds_deliveries_then_lets_one_probe_decide() {
        let mut b = Breaker::default();
        for i in 0..10 {
            b.record(false, false, i, 5 * DAY);
        }
        assert_eq!(b.gate(1_000, 11_000), Gate::WaitUntil(30_009));
        assert_eq!(b.gate(30_009, 11_000), Gate::Probe);
        assert_eq!(b.gate(30_010, 11_000), Gate::WaitUntil(41_009));
        // The probe fails: open again, cool-down doubled.
        assert_eq!(b.record(false, true, 31_000, 5 * DAY), None);
        assert_eq!((b.phase, b.next_probe_at), (Phase::Open, Some(91_000)));
        assert_eq!(b.probe_until, None);
        // Doubling stops at 10 minutes.
        for _ in 0..10 {
            let at = b.next_probe_at.unwrap();
            assert_eq!(b.gate(at, 0), Gate::Probe);
            b.record(false, true, at, 5 * DAY);
        }
        assert_eq!(b.cooldown_ms, MAX_COOLDOWN_MS);
        // A successful probe closes it.
        let at = b.next_probe_at.unwrap();
        assert_eq!(b.gate(at, 0), Gate::Probe);
        assert_eq!(b.record(true, true, at, 5 * DAY), Some(Change::Recovered));
        assert_eq!(b, Breaker::default());
    }

    #[test]
    fn failing_every_attempt_for_the_window_disables() {
        let mut b = Breaker::default();
        b.record(false, false, 0, 5 * DAY);
        assert_eq!(b.record(false, false, 5 * DAY - 1, 5 * DAY), None);
        assert_eq!(
            b.record(false, false, 5 * DAY, 5 * DAY),
            Some(Change::Disable)
        );
    }

    #[test]
    fn late_failures_are_counted_without_moving_the_probe() {
        let mut b = Breaker::default();
        for i in 0..10 {
            b.record(false, false, i, 5 * DAY);
        }
        // Attempts sent before it opened fail afterwards: counted, the probe stays at 30 s.
        assert_eq!(b.record(false, false, 20, 5 * DAY), None);
        assert_eq!(b.record(false, false, 25, 5 * DAY), None);
        assert_eq!(b.consecutive_failures, 12);
        assert_eq!((b.phase, b.next_probe_at), (Phase::Open, Some(30_009)));
        assert_eq!(b.cooldown_ms, FIRST_COOLDOWN_MS);
    }

    #[test]
    fn a_probe_that_never_reports_frees_the_endpoint_after_probe_time() {
        let mut b = Breaker::default();
        for i in 0..10 {
            b.record(false, false, i, 5 * DAY);
        }
        assert_eq!(b.gate(30_009, 11_000), Gate::Probe);
        assert_eq!(b.gate(41_008, 11_000), Gate::WaitUntil(41_009));
        assert_eq!(b.gate(41_009, 11_000), Gate::Probe);
        // A probe given back (not sent) frees it at once.
        b.release_probe();
        assert_eq!(b.gate(41_010, 11_000), Gate::Probe);
        // The whole state survives a round trip through its stored form; an older record
        // without `probe_until` reads as no probe out.
        let stored = serde_json::to_string(&b).unwrap();
        assert_eq!(serde_json::from_str::<Breaker>(&stored).unwrap(), b);
        let old = r#"{"phase":"open","consecutive_failures":10,"failing_since":0,"cooldown_ms":30000,"next_probe_at":30009}"#;
        assert_eq!(
            serde_json::from_str::<Breaker>(old).unwrap().probe_until,
            None
        );
    }
}
