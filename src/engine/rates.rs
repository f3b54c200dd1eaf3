//! Each endpoint's last success on this node, in memory: the endpoint's `last_success_at` shows
//! it at once, before the minutes' flush keeps it in the store ([`super::minutes`]), which every
//! node and a restarted herald read. The endpoints' success rates and the charts read the
//! counts the store keeps for every node.

use std::collections::HashMap;

use crate::clock::Millis;
use crate::model::Status;

#[derive(Default)]
pub struct Rates(HashMap<String, Millis>);

impl Rates {
    /// Notes an attempt's outcome: a delivery is the endpoint's last success.
    pub fn record(&mut self, endpoint_id: &str, now: Millis, status: Status) {
        if status != Status::Delivered {
            return;
        }
        match self.0.get_mut(endpoint_id) {
            Some(t) => *t = (*t).max(now),
            None => {
                self.0.insert(endpoint_id.to_string(), now);
            }
        }
    }

    pub fn last_success(&self, endpoint_id: &str) -> Option<Millis> {
        self.0.get(endpoint_id).copied()
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
    fn the_newest_delivery_is_the_last_success() {
        let mut r = Rates::default();
        r.record("e", 2_000, Status::Delivered);
        r.record("e", 1_000, Status::Delivered);
        r.record("e", 3_000, Status::HttpError);
        assert_eq!(r.last_success("e"), Some(2_000));
        assert_eq!(r.last_success("other"), None);
        r.forget("e");
        assert_eq!(r.last_success("e"), None);
    }
}
