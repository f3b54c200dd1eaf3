//! Payload filters, operator by operator: each table row is a filter, a payload, and whether it
//! matches.

use serde_json::json;

use super::*;

/// The payload every table is matched against.
fn payload() -> Value {
    json!({
        "amount": 100,
        "price": 1.5,
        "big": 18446744073709551615u64,
        "negative": -3,
        "status": "paid",
        "name": "Acme Corp",
        "flag": true,
        "nothing": null,
        "tags": ["a", "b"],
        "customer": {"id": "cus_1", "tier": "gold", "address": {"country": "FR"}},
        "a.b": "dotted",
        "empty": {},
    })
}

/// Runs a table: `(filter, matches)` against `payload()` with type `invoice.paid`. A row that
/// does not match must also explain why; one that matches must not.
fn table(rows: &[(Value, bool)]) {
    let subject = Subject::new("invoice.paid", payload());
    for (i, (filter, want)) in rows.iter().enumerate() {
        let f = Filter::parse(filter)
            .unwrap_or_else(|e| panic!("row {i}: {filter} is refused: {e}"))
            .expect("not null");
        assert_eq!(f.matches(&subject), *want, "row {i}: {filter}");
        assert_eq!(
            f.explain(&subject).is_none(),
            *want,
            "row {i}: {filter} explains {:?}",
            f.explain(&subject)
        );
    }
}

fn p(v: Value) -> Value {
    json!({ "payload": v })
}

#[test]
fn literal_means_equal() {
    table(&[
        (p(json!({"amount": 100})), true),
        (p(json!({"amount": 100.0})), true),
        (p(json!({"amount": 101})), false),
        (p(json!({"amount": "100"})), false),
        (p(json!({"status": "paid"})), true),
        (p(json!({"status": "Paid"})), false),
        (p(json!({"flag": true})), true),
        (p(json!({"flag": 1})), false),
        (p(json!({"nothing": null})), true),
        (p(json!({"missing": null})), false),
        (p(json!({"tags": ["a", "b"]})), true),
        (p(json!({"tags": ["b", "a"]})), false),
        (p(json!({"tags": "a"})), false),
        (p(json!({"customer": {"tier": "gold"}})), true),
        (p(json!({"customer": {"address": {"country": "FR"}}})), true),
        (
            p(json!({"customer": {"address": {"country": "DE"}}})),
            false,
        ),
        (p(json!({"a.b": "dotted"})), true),
        (p(json!({"a": {"b": "dotted"}})), false),
        (json!({"type": "invoice.paid"}), true),
        (json!({"type": "invoice.created"}), false),
        (json!({}), true),
    ]);
}

#[test]
fn eq_and_neq() {
    table(&[
        (p(json!({"amount": {"$eq": 100}})), true),
        (p(json!({"amount": {"$eq": 1e2}})), true),
        (p(json!({"big": {"$eq": 18446744073709551615u64}})), true),
        (p(json!({"big": {"$eq": 18446744073709551614u64}})), false),
        (p(json!({"tags": {"$eq": ["a", "b"]}})), true),
        (p(json!({"customer": {"$eq": {"id": "cus_1"}}})), false),
        (p(json!({"empty": {"$eq": {}}})), true),
        (p(json!({"nothing": {"$eq": null}})), true),
        (p(json!({"missing": {"$eq": null}})), false),
        (p(json!({"amount": {"$neq": 100}})), false),
        (p(json!({"amount": {"$neq": "100"}})), true),
        (p(json!({"status": {"$neq": "open"}})), true),
        (p(json!({"nothing": {"$neq": null}})), false),
        (p(json!({"missing": {"$neq": 1}})), true),
        (p(json!({"missing": {"$neq": null}})), true),
    ]);
}

#[test]
fn ordering_operators() {
    table(&[
        (p(json!({"amount": {"$gt": 99}})), true),
        (p(json!({"amount": {"$gt": 100}})), false),
        (p(json!({"amount": {"$gte": 100}})), true),
        (p(json!({"amount": {"$gte": 100.5}})), false),
        (p(json!({"amount": {"$lt": 100.5}})), true),
        (p(json!({"amount": {"$lt": 100}})), false),
        (p(json!({"amount": {"$lte": 100}})), true),
        (p(json!({"amount": {"$lte": 99}})), false),
        (p(json!({"price": {"$gt": 1}})), true),
        (p(json!({"negative": {"$lt": 0}})), true),
        (
            p(json!({"negative": {"$gt": 18446744073709551615u64}})),
            false,
        ),
        (p(json!({"big": {"$gt": -1}})), true),
        (p(json!({"status": {"$gt": "open"}})), true),
        (p(json!({"status": {"$lt": "open"}})), false),
        (p(json!({"status": {"$gte": "paid"}})), true),
        // Another type never matches, in either direction.
        (p(json!({"status": {"$gt": 1}})), false),
        (p(json!({"status": {"$lt": 1}})), false),
        (p(json!({"amount": {"$gt": "1"}})), false),
        (p(json!({"nothing": {"$lt": 1}})), false),
        (p(json!({"tags": {"$gt": "a"}})), false),
        (p(json!({"missing": {"$lt": 1}})), false),
        // Several operators on one path: all must hold.
        (p(json!({"amount": {"$gte": 50, "$lt": 200}})), true),
        (p(json!({"amount": {"$gte": 50, "$lt": 100}})), false),
    ]);
}

#[test]
fn in_and_nin() {
    table(&[
        (p(json!({"status": {"$in": ["paid", "open"]}})), true),
        (p(json!({"status": {"$in": ["open"]}})), false),
        (p(json!({"status": {"$in": []}})), false),
        (p(json!({"amount": {"$in": [1, 100.0]}})), true),
        (p(json!({"nothing": {"$in": [null]}})), true),
        (p(json!({"tags": {"$in": ["a"]}})), false),
        (p(json!({"missing": {"$in": [null]}})), false),
        (p(json!({"status": {"$nin": ["open", "void"]}})), true),
        (p(json!({"status": {"$nin": ["paid"]}})), false),
        (p(json!({"amount": {"$nin": [100]}})), false),
        (p(json!({"missing": {"$nin": ["x"]}})), true),
        (p(json!({"status": {"$nin": []}})), true),
    ]);
}

#[test]
fn exists() {
    table(&[
        (p(json!({"amount": {"$exists": true}})), true),
        (p(json!({"nothing": {"$exists": true}})), true),
        (p(json!({"missing": {"$exists": true}})), false),
        (p(json!({"missing": {"$exists": false}})), true),
        (p(json!({"amount": {"$exists": false}})), false),
        (p(json!({"customer": {"address": {"$exists": true}}})), true),
        (p(json!({"customer": {"phone": {"$exists": false}}})), true),
        // A step into a scalar or an array is a missing path.
        (p(json!({"status": {"x": {"$exists": false}}})), true),
        (p(json!({"tags": {"0": {"$exists": true}}})), false),
        (json!({"type": {"x": {"$exists": false}}}), true),
    ]);
}

#[test]
fn starts_with_and_ends_with() {
    table(&[
        (p(json!({"name": {"$startsWith": "Acme"}})), true),
        (p(json!({"name": {"$startsWith": "acme"}})), false),
        (p(json!({"name": {"$startsWith": ""}})), true),
        (p(json!({"name": {"$endsWith": "Corp"}})), true),
        (p(json!({"name": {"$endsWith": "Inc"}})), false),
        (p(json!({"amount": {"$startsWith": "1"}})), false),
        (p(json!({"missing": {"$endsWith": ""}})), false),
        (json!({"type": {"$startsWith": "invoice."}}), true),
        (json!({"type": {"$endsWith": ".created"}}), false),
    ]);
}

#[test]
fn and_or_not() {
    table(&[
        (
            json!({"$and": [{"type": "invoice.paid"}, p(json!({"amount": 100}))]}),
            true,
        ),
        (
            json!({"$and": [{"type": "invoice.paid"}, p(json!({"amount": 1}))]}),
            false,
        ),
        (
            json!({"$or": [p(json!({"amount": 1})), p(json!({"status": "paid"}))]}),
            true,
        ),
        (
            json!({"$or": [p(json!({"amount": 1})), p(json!({"status": "open"}))]}),
            false,
        ),
        (json!({"$not": p(json!({"amount": 1}))}), true),
        (json!({"$not": p(json!({"amount": 100}))}), false),
        // Plain negation: a missing path's false becomes true.
        (json!({"$not": p(json!({"missing": {"$gt": 1}}))}), true),
        (
            json!({"$not": p(json!({"missing": {"$exists": false}}))}),
            false,
        ),
        // Below a path, they hold filters of that path.
        (p(json!({"amount": {"$not": {"$gt": 200}}})), true),
        (p(json!({"amount": {"$not": 100}})), false),
        (
            p(json!({"status": {"$or": ["open", {"$startsWith": "pa"}]}})),
            true,
        ),
        (
            p(json!({"customer": {"$and": [{"tier": "gold"}, {"id": {"$exists": true}}]}})),
            true,
        ),
        (
            p(json!({"customer": {"$and": [{"tier": "gold"}, {"id": "x"}]}})),
            false,
        ),
        // Top-level keys together: all must hold.
        (
            json!({"type": "invoice.paid", "payload": {"amount": {"$gte": 100}}}),
            true,
        ),
        (
            json!({"type": "invoice.paid", "payload": {"amount": {"$gte": 101}}}),
            false,
        ),
    ]);
}

#[test]
fn explain_names_the_path_and_the_failed_test() {
    let subject = Subject::new("invoice.paid", json!({"amount": 50, "status": "open"}));
    let cases = [
        (p(json!({"amount": {"$gte": 100}})), "payload.amount: 50 is not >= 100"),
        (p(json!({"status": "paid"})), "payload.status: \"open\" is not \"paid\""),
        (p(json!({"status": {"$nin": ["open"]}})), "payload.status: \"open\" is in [\"open\"]"),
        (p(json!({"customer": {"id": "x"}})), "payload.customer.id: missing"),
        (p(json!({"amount": {"$exists": false}})), "payload.amount: 50 is there"),
        (json!({"type": {"$startsWith": "order."}}), "type: \"invoice.paid\" does not start with \"order.\""),
        (
            json!({"$not": p(json!({"amount": 50}))}),
            "the filter under $not matches (payload.amount 50)",
        ),
        (
            json!({"$or": [p(json!({"amount": 1})), {"type": "x"}]}),
            "no filter of $or matches (payload.amount: 50 is not 1; type: \"invoice.paid\" is not \"x\")",
        ),
    ];
    for (filter, want) in cases {
        let f = Filter::parse(&filter).expect("valid").expect("not null");
        assert_eq!(f.explain(&subject).as_deref(), Some(want), "{filter}");
    }
}

/// `(filter, the field the refusal names)`.
fn refused(rows: &[(Value, &str)]) {
    for (filter, field) in rows {
        match Filter::parse(filter) {
            Ok(_) => panic!("{filter} is accepted"),
            Err(e) => {
                assert_eq!(e.field, *field, "{filter}: {}", e.message);
                assert!(e.message.starts_with(field), "{filter}: {}", e.message);
            }
        }
    }
}

#[test]
fn wrong_filters_are_refused_naming_the_path() {
    refused(&[
        (json!([]), "filter"),
        (json!("x"), "filter"),
        (json!({"amount": 1}), "filter.amount"),
        (json!({"$exists": true}), "filter.$exists"),
        (json!({"$nor": []}), "filter.$nor"),
        (
            p(json!({"amount": {"$gte": true}})),
            "filter.payload.amount.$gte",
        ),
        (
            p(json!({"amount": {"$gt": null}})),
            "filter.payload.amount.$gt",
        ),
        (
            p(json!({"amount": {"$lt": [1]}})),
            "filter.payload.amount.$lt",
        ),
        (
            p(json!({"amount": {"$in": 1}})),
            "filter.payload.amount.$in",
        ),
        (
            p(json!({"amount": {"$nin": [[1]]}})),
            "filter.payload.amount.$nin",
        ),
        (
            p(json!({"amount": {"$in": [{"a": 1}]}})),
            "filter.payload.amount.$in",
        ),
        (
            p(json!({"amount": {"$exists": 1}})),
            "filter.payload.amount.$exists",
        ),
        (
            p(json!({"name": {"$startsWith": 1}})),
            "filter.payload.name.$startsWith",
        ),
        (
            p(json!({"name": {"$endsWith": null}})),
            "filter.payload.name.$endsWith",
        ),
        (
            p(json!({"name": {"$regex": "x"}})),
            "filter.payload.name.$regex",
        ),
        (p(json!({"name": {}})), "filter.payload.name"),
        (json!({"$and": []}), "filter.$and"),
        (json!({"$or": {"type": "x"}}), "filter.$or"),
        (
            json!({"$and": [{"type": "x"}, {"amount": 1}]}),
            "filter.$and[1].amount",
        ),
        (json!({"$not": "x"}), "filter.$not"),
        (
            p(json!({"a": {"$or": [1, {"$gt": true}]}})),
            "filter.payload.a.$or[1].$gt",
        ),
    ]);
}

#[test]
fn limits_are_refused() {
    // 4 KiB of JSON text.
    let long = "x".repeat(MAX_BYTES);
    refused(&[(p(json!({ "name": long })), "filter")]);
    // 8 levels of nesting: the top object is level 1.
    let mut deep = json!(1);
    for _ in 0..7 {
        deep = json!({ "k": deep });
    }
    assert!(Filter::parse(&json!({ "payload": deep.clone() })).is_ok());
    refused(&[(json!({"payload": {"k": deep}}), "filter")]);
    // 64 operators.
    let at_most: serde_json::Map<String, Value> = (0..MAX_OPERATORS)
        .map(|i| (format!("f{i}"), json!(i)))
        .collect();
    assert!(Filter::parse(&p(Value::Object(at_most.clone()))).is_ok());
    let mut over = at_most;
    over.insert("one_more".into(), json!(1));
    refused(&[(p(Value::Object(over)), "filter")]);
}

#[test]
fn null_is_no_filter_and_the_source_round_trips() {
    assert!(Filter::parse(&Value::Null).expect("null").is_none());
    let v = json!({"payload": {"amount": {"$gte": 100}}, "type": {"$in": ["a", "b"]}});
    let f = Filter::parse(&v).expect("valid").expect("not null");
    assert_eq!(f.source(), &v);
    let text = serde_json::to_string(&f).expect("serialize");
    let back: Filter = serde_json::from_str(&text).expect("deserialize");
    assert_eq!(back, f);
    assert!(serde_json::from_str::<Filter>(r#"{"amount": 1}"#).is_err());
}

#[test]
fn a_stored_filter_over_the_limits_still_loads_and_matches() {
    // Stored under looser limits (a release before these): more operators, deeper, longer.
    let mut deep = json!({"$gte": 10});
    for _ in 0..MAX_DEPTH {
        deep = json!({ "k": deep });
    }
    let mut many: serde_json::Map<String, Value> = (0..MAX_OPERATORS)
        .map(|i| (format!("f{i}"), json!({"$exists": false})))
        .collect();
    many.insert("amount".into(), json!({"$gte": 50}));
    many.insert("note".into(), json!({"$neq": "x".repeat(MAX_BYTES)}));
    let stored = json!({"$or": [p(Value::Object(many)), p(json!({ "deep": deep }))]});
    assert!(Filter::parse(&stored).is_err(), "over today's limits");

    let text = serde_json::to_string(&stored).expect("serialize");
    let loaded: Filter = serde_json::from_str(&text).expect("a stored filter loads");
    assert_eq!(loaded.source(), &stored);
    assert!(loaded.matches(&Subject::new("invoice.paid", payload())));
    assert!(!loaded.matches(&Subject::new(
        "invoice.paid",
        json!({"amount": 10, "f0": 1})
    )));
    // The grammar still holds on load.
    assert!(serde_json::from_str::<Filter>(r#"{"payload": {"amount": {"$like": 1}}}"#).is_err());
}
