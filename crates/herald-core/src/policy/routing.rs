//! Which endpoints take an event: the one decision fan-out, replay and the filter test share
//! (docs/api.md, "Payload filters"). An endpoint takes an event when its event types take the
//! event's type, then when its channels take the event's channels, then when its payload filter
//! matches; the first step that fails leaves the event out, and the filter test names it.

use std::cell::OnceCell;

use serde_json::Value;

use crate::filter::{Filter, Subject};
use crate::model::{type_matches, Endpoint};

/// What an endpoint asks of an event, step by step: a stored endpoint's ([`Route::of`]) or the
/// values of a form not saved yet (the filter test).
#[derive(Debug, Clone, Copy)]
pub struct Route<'a> {
    /// Exact types, `prefix.*` patterns or `*`; none takes every type.
    pub event_types: &'a [String],
    /// None takes events of any channel (or of none); else one of the event's must be listed.
    pub channels: &'a [String],
    /// `None` matches everything.
    pub filter: Option<&'a Filter>,
}

/// The step of [`Route`] that left an event out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    Type,
    Channels,
    Filter,
}

/// An event as the route sees it: its type, its channels, and its payload, parsed once however
/// many endpoints' filters ask (and not at all when none does).
pub struct Event<'a> {
    event_type: &'a str,
    channels: &'a [String],
    payload: &'a [u8],
    subject: OnceCell<Subject>,
}

impl<'a> Event<'a> {
    /// An event whose payload is parsed when a filter first needs it.
    pub fn new(event_type: &'a str, channels: &'a [String], payload: &'a [u8]) -> Event<'a> {
        Event {
            event_type,
            channels,
            payload,
            subject: OnceCell::new(),
        }
    }

    /// An event whose payload is parsed already.
    pub fn parsed(event_type: &'a str, channels: &'a [String], payload: Value) -> Event<'a> {
        let subject = OnceCell::new();
        let _ = subject.set(Subject::new(event_type, payload));
        Event {
            event_type,
            channels,
            payload: &[],
            subject,
        }
    }

    /// The filter's subject. A payload that does not parse decides nothing: the error comes
    /// back, never a stand-in value that some filters would take.
    fn subject(&self) -> Result<&Subject, serde_json::Error> {
        if let Some(s) = self.subject.get() {
            return Ok(s);
        }
        let parsed = Subject::new(self.event_type, serde_json::from_slice(self.payload)?);
        Ok(self.subject.get_or_init(|| parsed))
    }
}

impl<'a> Route<'a> {
    /// What a stored endpoint asks.
    pub fn of(ep: &'a Endpoint) -> Route<'a> {
        Route {
            event_types: &ep.event_types,
            channels: &ep.channels,
            filter: ep.filter.as_ref(),
        }
    }

    /// True if the event's type is one these types take.
    pub fn takes_type(&self, event_type: &str) -> bool {
        self.event_types.is_empty() || self.event_types.iter().any(|p| type_matches(p, event_type))
    }

    /// True if the event's channels are ones these take: none are listed, or one of the
    /// event's is.
    pub fn takes_channels(&self, channels: &[String]) -> bool {
        self.channels.is_empty() || self.channels.iter().any(|c| channels.contains(c))
    }

    /// The first step that leaves the event out, or `None` when the endpoint takes it.
    pub fn decide(&self, ev: &Event) -> Result<Option<Left>, serde_json::Error> {
        if !self.takes_type(ev.event_type) {
            return Ok(Some(Left::Type));
        }
        if !self.takes_channels(ev.channels) {
            return Ok(Some(Left::Channels));
        }
        match self.filter {
            Some(f) if !f.matches(ev.subject()?) => Ok(Some(Left::Filter)),
            _ => Ok(None),
        }
    }

    /// [`Route::decide`] in words: `None` when the endpoint takes the event, else the step that
    /// left it out (`type invoice.paid is not one of this endpoint's`, `payload.amount: 50 is
    /// not >= 100`).
    pub fn explain(&self, ev: &Event) -> Result<Option<String>, serde_json::Error> {
        Ok(match self.decide(ev)? {
            None => None,
            Some(Left::Type) => Some(format!(
                "type {} is not one of this endpoint's",
                ev.event_type
            )),
            Some(Left::Channels) if ev.channels.is_empty() => Some(
                "the event was sent on no channel, and this endpoint takes only its channels' \
                 events"
                    .to_string(),
            ),
            Some(Left::Channels) => Some(format!(
                "channels {} are none of this endpoint's",
                ev.channels.join(", ")
            )),
            Some(Left::Filter) => match self.filter {
                Some(f) => f.explain(ev.subject()?),
                None => None,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_step_in_turn_leaves_an_event_out_and_says_which() {
        let types = strings(&["order.*"]);
        let channels = strings(&["eu"]);
        let filter = Filter::parse(&json!({"payload": {"amount": {"$gte": 1000}}}))
            .unwrap()
            .unwrap();
        let route = Route {
            event_types: &types,
            channels: &channels,
            filter: Some(&filter),
        };
        let eu = strings(&["eu"]);
        let us = strings(&["us"]);
        let big = br#"{"amount": 5000}"#;
        let small = br#"{"amount": 50}"#;

        let ev = Event::new("invoice.paid", &eu, big);
        assert_eq!(route.decide(&ev).unwrap(), Some(Left::Type));
        assert_eq!(
            route.explain(&ev).unwrap().as_deref(),
            Some("type invoice.paid is not one of this endpoint's")
        );
        let ev = Event::new("order.created", &us, big);
        assert_eq!(route.decide(&ev).unwrap(), Some(Left::Channels));
        assert_eq!(
            route.explain(&ev).unwrap().as_deref(),
            Some("channels us are none of this endpoint's")
        );
        let ev = Event::new("order.created", &[], big);
        assert_eq!(route.decide(&ev).unwrap(), Some(Left::Channels));
        let ev = Event::new("order.created", &eu, small);
        assert_eq!(route.decide(&ev).unwrap(), Some(Left::Filter));
        assert_eq!(
            route.explain(&ev).unwrap().as_deref(),
            Some("payload.amount: 50 is not >= 1000")
        );
        let ev = Event::new("order.created", &eu, big);
        assert_eq!(route.decide(&ev).unwrap(), None);
        assert_eq!(route.explain(&ev).unwrap(), None);
    }

    #[test]
    fn the_payload_is_parsed_only_when_a_filter_asks_and_a_bad_one_decides_nothing() {
        let open = Route {
            event_types: &[],
            channels: &[],
            filter: None,
        };
        let ev = Event::new("t.x", &[], b"not json");
        assert_eq!(open.decide(&ev).unwrap(), None);
        let filter = Filter::parse(&json!({"type": "t.x"})).unwrap().unwrap();
        let filtered = Route {
            filter: Some(&filter),
            ..open
        };
        assert!(filtered.decide(&ev).is_err());
        let ev = Event::parsed("t.x", &[], json!({}));
        assert_eq!(filtered.decide(&ev).unwrap(), None);
    }
}
