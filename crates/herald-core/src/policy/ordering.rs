//! Ordered delivery per key (docs/delivery-contract.md): which sequence a delivery to an ordered
//! endpoint joins.
//!
//! An endpoint with `ordering = {"key": "<field>"}` delivers the events with the same value of
//! that top-level payload field one at a time, in commit order; the ingest field `ordering_key`
//! overrides the payload's value; a missing field (or `null`) is the empty key. With
//! `{"key": null}` the whole endpoint is one sequence (an ingest `ordering_key` does not split
//! it). The store keeps each sequence's waiting deliveries behind its head
//! (the embedded store's due index); this module only names the sequence.

use std::hash::{Hash, Hasher};

use serde_json::value::RawValue;

use crate::model::Ordering;

/// A top-level payload field's value, as a key.
#[derive(Debug, PartialEq, Eq)]
pub enum Field {
    /// A string as it is, an integer as its decimal text (`279381` and `"279381"` are one key).
    Key(String),
    /// Any other JSON value, as its raw text.
    Other(String),
}

/// The payload's top-level field `field`, if the payload has it. Only the top level is read,
/// each value left raw: a value elsewhere that serde_json cannot turn into a `Value` (a lone
/// surrogate escape such as "\ud800": valid JSON grammar, refused at ingest as not I-JSON, but
/// stored by older versions) must not hide the key.
pub fn payload_field(payload: &[u8], field: &str) -> Option<Field> {
    let map: std::collections::HashMap<String, &RawValue> = serde_json::from_slice(payload).ok()?;
    let raw = map.get(field)?.get();
    Some(match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(serde_json::Value::String(s)) => Field::Key(s),
        Ok(serde_json::Value::Number(n)) if n.is_i64() || n.is_u64() => Field::Key(n.to_string()),
        Ok(_) => Field::Other(raw.to_string()),
        // A string serde_json cannot decode (a lone surrogate in the value itself): its escaped
        // text is a stable key all the same.
        Err(_) => match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
            Some(inner) => Field::Key(inner.to_string()),
            None => Field::Other(raw.to_string()),
        },
    })
}

/// The ordering key of an event for an endpoint ordered by `ordering`.
pub fn key_of(ordering: &Ordering, ordering_key: Option<&str>, payload: &[u8]) -> String {
    let Some(field) = &ordering.key else {
        return String::new();
    };
    if let Some(k) = ordering_key {
        return k.to_string();
    }
    match payload_field(payload, field) {
        Some(Field::Key(k)) => k,
        Some(Field::Other(raw)) if raw != "null" => raw,
        _ => String::new(),
    }
}

/// The sequence a key names within its endpoint (a hash: two keys that share one are simply
/// delivered one after the other, never out of order).
pub fn sequence(key: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by(field: Option<&str>) -> Ordering {
        Ordering {
            key: field.map(str::to_string),
        }
    }

    #[test]
    fn keys_come_from_the_override_the_field_or_are_empty() {
        let p = br#"{"customer": "c_1", "n": 42, "f": 1.5, "o": {"a": 1}, "z": null}"#;
        let cases: [(Ordering, Option<&str>, &str); 8] = [
            (by(Some("customer")), None, "c_1"),
            (by(Some("customer")), Some("over"), "over"),
            (by(Some("n")), None, "42"),
            (by(Some("f")), None, "1.5"),
            (by(Some("o")), None, r#"{"a": 1}"#),
            (by(Some("z")), None, ""),
            (by(Some("missing")), None, ""),
            (by(None), Some("over"), ""),
        ];
        for (ordering, over, want) in cases {
            assert_eq!(key_of(&ordering, over, p), want, "{ordering:?} {over:?}");
        }
        assert_eq!(key_of(&by(Some("n")), None, br#"{"n": "42"}"#), "42");
        assert_eq!(
            key_of(&by(Some("k")), None, br#"{"k": "\ud800"}"#),
            r"\ud800"
        );
        assert_eq!(key_of(&by(Some("k")), None, b"not json"), "");
    }

    #[test]
    fn a_key_always_names_the_same_sequence() {
        assert_eq!(sequence("c_1"), sequence("c_1"));
        assert_ne!(sequence("c_1"), sequence("c_2"));
    }
}
