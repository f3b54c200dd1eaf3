//! A token bucket per endpoint for `rate_limit` (docs/delivery-contract.md): at most `per_second`
//! attempts a second, bursts up to `max(1, ceil(per_second))`. A delivery over the rate waits (its
//! lane is held until the next token); it is not dropped, not recorded and not counted as a
//! failure. On a cluster the bucket is a row the nodes take from together (`store::postgres`), with
//! the same arithmetic.

use crate::clock::Millis;
use crate::model::RateLimit;

/// One endpoint's bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    tokens: f64,
    at: Millis,
}

impl Bucket {
    /// A full bucket at `now`.
    pub fn full(limit: RateLimit, now: Millis) -> Bucket {
        Bucket {
            tokens: limit.burst(),
            at: now,
        }
    }

    /// Takes a token at `now` (`Ok`), or says when the next one comes (`Err`).
    pub fn take(&mut self, limit: RateLimit, now: Millis) -> Result<(), Millis> {
        let elapsed = (now - self.at).max(0) as f64 / 1000.0;
        self.tokens = (self.tokens + elapsed * limit.per_second).min(limit.burst());
        self.at = now.max(self.at);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        Err(next_token(limit, self.tokens, self.at))
    }
}

/// When a bucket holding `tokens` (fewer than one) at `at` has its next token.
pub fn next_token(limit: RateLimit, tokens: f64, at: Millis) -> Millis {
    let wait_s = (1.0 - tokens) / limit.per_second;
    at + (wait_s * 1000.0).ceil() as Millis
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let l = RateLimit { per_second: 5.0 };
        let mut b = Bucket::full(l, 0);
        for _ in 0..5 {
            assert_eq!(b.take(l, 0), Ok(()));
        }
        assert_eq!(b.take(l, 0), Err(200));
        assert_eq!(b.take(l, 200), Ok(()));
        assert_eq!(b.take(l, 200), Err(400));
        // A second later, at most the burst again.
        let mut n = 0;
        while b.take(l, 5_000).is_ok() {
            n += 1;
        }
        assert_eq!(n, 5);
    }

    #[test]
    fn fractions_allow_one_at_a_time() {
        let l = RateLimit { per_second: 0.5 };
        let mut b = Bucket::full(l, 0);
        assert_eq!(b.take(l, 0), Ok(()));
        assert_eq!(b.take(l, 0), Err(2000));
        assert_eq!(b.take(l, 1999), Err(2000));
        assert_eq!(b.take(l, 2000), Ok(()));
    }

    /// In any window of a second, at most per_second + burst attempts pass.
    #[test]
    fn no_second_has_more_than_rate_plus_burst() {
        let l = RateLimit { per_second: 5.0 };
        let mut b = Bucket::full(l, 0);
        let mut passed = Vec::new();
        for t in (0..10_000).step_by(7) {
            while b.take(l, t).is_ok() {
                passed.push(t);
            }
        }
        for start in (0..9_000).step_by(50) {
            let n = passed
                .iter()
                .filter(|t| **t >= start && **t < start + 1000)
                .count();
            assert!(n <= 10, "{n} in [{start}, {})", start + 1000);
        }
        assert!(passed.len() >= 50, "{}", passed.len());
    }
}
