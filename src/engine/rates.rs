//! What each endpoint's sent attempts came to over the last hour on this node, per minute, and
//! its last success: `/v1/status`'s `endpoints_last_hour` and the endpoint's `last_success_at`.
//! In memory: it starts from zero when herald does. The charts and the endpoints' success rates
//! read the counts the store keeps for every node ([`super::minutes`]).

use std::collections::{HashMap, VecDeque};

use crate::clock::Millis;
use crate::model::Status;
use crate::store::Minute;

const MINUTE: Millis = 60_000;
/// Minutes kept per endpoint.
pub const MINUTES: i64 = 60;

#[derive(Default)]
struct Endpoint {
    minutes: VecDeque<Minute>,
    last_success: Option<Millis>,
}

#[derive(Default)]
pub struct Rates(HashMap<String, Endpoint>);

impl Rates {
    pub fn record(&mut self, endpoint_id: &str, now: Millis, status: Status, duration_ms: u64) {
        let at = now.div_euclid(MINUTE) * MINUTE;
        let e = self.0.entry(endpoint_id.to_string()).or_default();
        if e.minutes.back().is_none_or(|m| m.at != at) {
            e.minutes.push_back(Minute {
                at,
                ..Minute::default()
            });
        }
        while e
            .minutes
            .front()
            .is_some_and(|m| m.at <= at - MINUTES * MINUTE)
        {
            e.minutes.pop_front();
        }
        if let Some(m) = e.minutes.back_mut() {
            m.counts[status as usize] += 1;
            m.latency_sum_ms += duration_ms;
            m.latency_max_ms = m.latency_max_ms.max(duration_ms);
        }
        if status == Status::Delivered {
            e.last_success = Some(now);
        }
    }

    /// The last hour's minutes that had attempts, oldest first.
    fn minutes(&self, endpoint_id: &str, now: Millis) -> Vec<Minute> {
        let from = (now.div_euclid(MINUTE) - MINUTES + 1) * MINUTE;
        self.0
            .get(endpoint_id)
            .map(|e| e.minutes.iter().filter(|m| m.at >= from).copied().collect())
            .unwrap_or_default()
    }

    /// Delivered and all attempts in the last hour, if there were any.
    pub fn rate(&self, endpoint_id: &str, now: Millis) -> Option<(u32, u32)> {
        let (good, all) = self
            .minutes(endpoint_id, now)
            .iter()
            .fold((0, 0), |(g, a), m| (g + m.delivered(), a + m.attempts()));
        (all > 0).then_some((good, all))
    }

    pub fn last_success(&self, endpoint_id: &str) -> Option<Millis> {
        self.0.get(endpoint_id)?.last_success
    }

    /// Every endpoint with attempts in the last hour.
    pub fn endpoints(&self) -> impl Iterator<Item = &String> {
        self.0.keys()
    }

    /// Forgets an endpoint's figures (its account was purged).
    pub fn forget(&mut self, endpoint_id: &str) {
        self.0.remove(endpoint_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_roll_and_rates_count_the_last_hour() {
        let mut r = Rates::default();
        let t = 1_000 * MINUTE;
        r.record("e", t, Status::Delivered, 10);
        r.record("e", t + 1_000, Status::HttpError, 30);
        r.record("e", t + MINUTE, Status::Timeout, 5_000);
        let m = r.minutes("e", t + MINUTE);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].attempts(), m[0].delivered()), (2, 1));
        assert_eq!((m[0].latency_sum_ms, m[0].latency_max_ms), (40, 30));
        assert_eq!(r.rate("e", t + MINUTE), Some((1, 3)));
        assert_eq!(r.last_success("e"), Some(t));
        // An hour later the first minute is gone.
        assert_eq!(r.rate("e", t + 60 * MINUTE), Some((0, 1)));
        assert_eq!(r.rate("e", t + 61 * MINUTE), None);
        assert_eq!(r.rate("other", t), None);
    }
}
