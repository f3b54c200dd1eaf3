//! Attempt counts by status over the last hour and day, for `/v1/status`.
//!
//! One bucket per minute for 24 hours, in memory: it restarts from zero when herald does (the
//! delivery log in the store keeps the full history).

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::clock::Millis;
use crate::model::Status;

const MINUTE: Millis = 60_000;
const BUCKETS: usize = 24 * 60;

#[derive(Default)]
pub struct Recent {
    buckets: Mutex<VecDeque<(Millis, [u64; Status::ALL.len()])>>,
}

impl Recent {
    pub fn record(&self, now: Millis, status: Status) {
        let minute = now.div_euclid(MINUTE);
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if b.back().is_none_or(|(m, _)| *m != minute) {
            b.push_back((minute, [0; Status::ALL.len()]));
            while b.len() > BUCKETS {
                b.pop_front();
            }
        }
        if let Some((_, counts)) = b.back_mut() {
            counts[status as usize] += 1;
        }
    }

    /// Counts by status over the last `minutes` minutes (including the current one).
    pub fn totals(&self, now: Millis, minutes: i64) -> Vec<(Status, u64)> {
        let from = now.div_euclid(MINUTE) - minutes + 1;
        let b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let mut sums = [0u64; Status::ALL.len()];
        for (_, counts) in b.iter().filter(|(m, _)| *m >= from) {
            for (s, c) in sums.iter_mut().zip(counts) {
                *s += c;
            }
        }
        Status::ALL
            .into_iter()
            .zip(sums)
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// The last `minutes` minutes that had attempts, oldest first: (minute start, counts by
    /// status).
    pub fn by_minute(&self, now: Millis, minutes: i64) -> Vec<(Millis, Vec<(Status, u64)>)> {
        let from = now.div_euclid(MINUTE) - minutes + 1;
        let b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        b.iter()
            .filter(|(m, _)| *m >= from)
            .map(|(m, counts)| {
                let nonzero = Status::ALL
                    .into_iter()
                    .zip(*counts)
                    .filter(|(_, n)| *n > 0)
                    .collect();
                (m * MINUTE, nonzero)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hour_and_day_windows_count_by_status() {
        let r = Recent::default();
        let t0 = 10 * 24 * 3600 * 1000;
        r.record(t0, Status::Delivered);
        r.record(t0 + 2 * 3600 * 1000, Status::Timeout);
        r.record(t0 + 2 * 3600 * 1000, Status::Delivered);
        let now = t0 + 2 * 3600 * 1000 + 1000;
        assert_eq!(
            r.totals(now, 60),
            vec![(Status::Delivered, 1), (Status::Timeout, 1)]
        );
        assert_eq!(
            r.totals(now, 24 * 60),
            vec![(Status::Delivered, 2), (Status::Timeout, 1)]
        );
        let minutes = r.by_minute(now, 60);
        assert_eq!(minutes.len(), 1);
        assert_eq!(minutes[0].0, (t0 + 2 * 3600 * 1000) / MINUTE * MINUTE);
    }
}
