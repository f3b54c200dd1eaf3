//! Debounce at ingest (docs/delivery-contract.md), for catalog event types that declare it:
//! `debounce = { window = "60s", key = "location_id", mode = "leading" }`.
//!
//! The first event for (account, type, key) opens a window and is delivered at once. Events in
//! the rest of the window are recorded `debounced` and not delivered (`leading`). With
//! `leading_trailing`, the last event debounced in a window is also delivered when the window
//! closes: each debounced event becomes the window's *candidate*, due at the window's end, and
//! replaces (debounces) the candidate before it. The decision here is pure; the store keeps the
//! windows, so a restart neither reopens nor loses one.

use crate::clock::Millis;

/// An open window, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// When the window closes (exclusive).
    pub end: Millis,
    /// `leading_trailing`: the event whose deliveries will be sent at `end`.
    pub candidate: Option<Candidate>,
}

/// A trailing candidate: an event (its ULID) and how many deliveries it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub event: u128,
    pub deliveries: usize,
}

/// What to do with an event that falls under a debounce rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Deliver now; a new window `[now, now + window)` opens.
    Open(Window),
    /// Record the event as `debounced` and send nothing.
    Debounce,
    /// `leading_trailing`: the event becomes the candidate, due at `due`; the previous
    /// candidate's deliveries (`supersedes`) are debounced.
    Trail {
        due: Millis,
        supersedes: Option<Candidate>,
    },
}

/// Decides for an event at `now` given the stored window (if any).
pub fn decide(window: Option<&Window>, now: Millis, window_ms: Millis, trailing: bool) -> Decision {
    match window {
        Some(w) if now < w.end => {
            if trailing {
                Decision::Trail {
                    due: w.end,
                    supersedes: w.candidate,
                }
            } else {
                Decision::Debounce
            }
        }
        _ => Decision::Open(Window {
            end: now.saturating_add(window_ms),
            candidate: None,
        }),
    }
}

/// The debounce key of an event: the ingest request's `debounce_key`, else the payload's
/// top-level field `field`; numbers count as their decimal string, so `279381` and `"279381"`
/// are one key. `None` (no such field, or not a string or integer) means the event is not
/// debounced.
pub fn key_of(debounce_key: Option<&str>, payload: &[u8], field: &str) -> Option<String> {
    if let Some(k) = debounce_key {
        return Some(k.to_string());
    }
    match super::ordering::payload_field(payload, field)? {
        super::ordering::Field::Key(k) => Some(k),
        super::ordering::Field::Other(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_event_opens_a_window_and_later_ones_in_it_are_debounced() {
        let Decision::Open(w) = decide(None, 1_000, 60_000, false) else {
            panic!("first event must open a window");
        };
        assert_eq!(w.end, 61_000);
        assert_eq!(decide(Some(&w), 60_999, 60_000, false), Decision::Debounce);
        assert_eq!(
            decide(Some(&w), 61_000, 60_000, false),
            Decision::Open(Window {
                end: 121_000,
                candidate: None
            })
        );
    }

    #[test]
    fn trailing_mode_makes_each_debounced_event_the_candidate() {
        let c = Candidate {
            event: 7 << 12,
            deliveries: 2,
        };
        let w = Window {
            end: 61_000,
            candidate: Some(c),
        };
        assert_eq!(
            decide(Some(&w), 30_000, 60_000, true),
            Decision::Trail {
                due: 61_000,
                supersedes: Some(c)
            }
        );
    }

    #[test]
    fn keys_normalize_numbers_and_prefer_the_request_key() {
        let p = br#"{"location_id": 279381, "x": 1}"#;
        let q = br#"{"location_id": "279381"}"#;
        assert_eq!(key_of(None, p, "location_id").as_deref(), Some("279381"));
        assert_eq!(key_of(None, q, "location_id").as_deref(), Some("279381"));
        assert_eq!(key_of(Some("k"), p, "location_id").as_deref(), Some("k"));
        assert_eq!(key_of(None, p, "missing"), None);
        assert_eq!(
            key_of(None, br#"{"location_id": 1.5}"#, "location_id"),
            None
        );
    }

    #[test]
    fn a_lone_surrogate_elsewhere_or_in_the_key_does_not_hide_it() {
        let p = br#"{"location_id": 5, "note": "\ud800"}"#;
        assert_eq!(key_of(None, p, "location_id").as_deref(), Some("5"));
        let q = br#"{"location_id": "a\ud800"}"#;
        assert_eq!(key_of(None, q, "location_id").as_deref(), Some("a\\ud800"));
    }
}
