//! Values round-trip, stay below the row limit, and old layouts still read.

use super::*;

fn meta() -> EventMeta {
    EventMeta {
        id: String::new(),
        account_id: "1".into(),
        event_type: "t".into(),
        received_at: 5,
        idempotency_key: Some("k".into()),
        debounce_key: None,
        ordering_key: None,
        deliveries: Vec::new(),
    }
}

#[test]
fn event_values_keep_payload_bytes_exactly() {
    let ulid = ids::event_after(0, 5);
    let payload = br#"{ "b":1,  "a" : [1.0e3] }"#;
    let v = encode_event(&meta(), &[7, 0], payload).unwrap();
    assert!(v.payload_inline && v.target_rows.is_empty());
    let (rec, inline) = decode_event(ulid, &v.row).unwrap();
    assert_eq!(rec.meta.id, ids::format(ids::EVENT, ulid));
    assert_eq!(rec.meta.idempotency_key.as_deref(), Some("k"));
    assert_eq!(rec.targets, vec![7, 0]);
    assert_eq!(rec.meta.deliveries.len(), 2);
    assert_eq!(rec.payload_len, payload.len());
    assert_eq!(inline, Some(&payload[..]));

    let big = vec![b' '; MAX_ROW];
    let v = encode_event(&meta(), &[], &big).unwrap();
    let (rec, inline) = decode_event(ulid, &v.row).unwrap();
    assert_eq!((rec.payload_len, inline), (big.len(), None));
    assert!(!rec.payload_inline);
}

#[test]
fn an_events_ordering_key_round_trips_and_older_rows_have_none() {
    let ulid = ids::event_after(0, 5);
    let mut m = meta();
    m.ordering_key = Some("customer 7".into());
    let v = encode_event(&m, &[7], b"{}").unwrap();
    let (rec, inline) = decode_event(ulid, &v.row).unwrap();
    assert_eq!(rec.meta.ordering_key.as_deref(), Some("customer 7"));
    assert_eq!((rec.targets, inline), (vec![7], Some(&b"{}"[..])));
    let v = encode_event(&meta(), &[7], b"{}").unwrap();
    assert_eq!(
        decode_event(ulid, &v.row).unwrap().0.meta.ordering_key,
        None
    );
}

/// The largest event row: every text field at its API maximum (255 four-byte characters
/// for the keys), the most inline targets and the largest payload that stays inline.
#[test]
fn event_rows_stay_below_the_row_limit_at_the_maximum() {
    let long = |n: usize| "\u{1F600}".repeat(n);
    let meta = EventMeta {
        id: String::new(),
        account_id: "a".repeat(128),
        event_type: "t".repeat(128),
        received_at: 5,
        idempotency_key: Some(long(255)),
        debounce_key: Some(long(255)),
        ordering_key: Some(long(255)),
        deliveries: Vec::new(),
    };
    for fan_out in [1, INLINE_TARGETS, INLINE_TARGETS + 1, ids::MAX_FAN_OUT] {
        let targets: Vec<u128> = (1..=fan_out as u128).collect();
        for len in [0, 1000, 3000, MAX_ROW, 256 * 1024] {
            let payload = vec![b'x'; len];
            let v = encode_event(&meta, &targets, &payload).unwrap();
            assert!(
                17 + v.row.len() <= MAX_ROW,
                "{fan_out} targets, {len} bytes"
            );
            for row in &v.target_rows {
                assert!(21 + row.len() <= MAX_ROW);
            }
            let ulid = ids::event_after(0, 5);
            let (mut rec, inline) = decode_event(ulid, &v.row).unwrap();
            assert_eq!(rec.target_count, fan_out);
            assert_eq!(rec.targets_in_rows, fan_out > INLINE_TARGETS);
            for row in &v.target_rows {
                decode_targets(row, &mut rec.targets).unwrap();
            }
            assert_eq!(rec.targets, targets);
            assert_eq!(inline.map(<[u8]>::len), v.payload_inline.then_some(len));
        }
    }
}

/// Layout 1 (storage format 2) event rows still read.
#[test]
fn layout_1_event_rows_read() {
    let mut w = Writer::with_capacity(64);
    w.i64(5);
    w.str("1");
    w.str("t");
    w.opt_str(Some("k"));
    w.opt_str(None);
    w.u16(1);
    w.u128(7);
    w.u32(2);
    w.tail(b"{}");
    let ulid = ids::event_after(0, 5);
    let row = w.finish();
    let (rec, inline) = decode_event(ulid, &row).unwrap();
    assert_eq!(rec.targets, vec![7]);
    assert_eq!(inline, Some(&b"{}"[..]));
    assert!(rec.payload_inline);
}

#[test]
fn attempt_rows_stay_below_the_row_limit() {
    let a = Attempt {
        id: "att_01".into(),
        number: 1,
        at: 1,
        duration_ms: 1,
        status: Status::HttpError,
        http_status: Some(500),
        error: Some("e".repeat(10_000)),
        request_headers: (0..32)
            .map(|i| (format!("x-h{i}"), "v".repeat(4096)))
            .collect(),
        response_body: "\u{e9}".repeat(4096),
    };
    let v = encode_attempt(&a, DeliveryState::Failed);
    assert!(21 + v.len() <= MAX_ROW, "{}", v.len());
    let back = decode_attempt(1, &v).unwrap();
    assert_eq!(back.state, DeliveryState::Failed);
    assert!(back.attempt.error.unwrap().len() <= MAX_ERROR);
    // The usual case keeps everything.
    let small = Attempt {
        error: None,
        request_headers: vec![("x-a".into(), "b".into())],
        response_body: "ok".repeat(2048),
        ..a
    };
    let back = decode_attempt(1, &encode_attempt(&small, DeliveryState::Failed)).unwrap();
    assert_eq!(back.attempt.response_body, small.response_body);
    assert_eq!(back.attempt.request_headers, small.request_headers);
}

#[test]
fn attempts_round_trip() {
    let a = Attempt {
        id: "att_x".into(),
        number: 3,
        at: 1_700_000_000_000,
        duration_ms: 12,
        status: Status::HttpError,
        http_status: Some(503),
        error: Some("boom".into()),
        request_headers: vec![("webhook-id".into(), "evt_1".into())],
        response_body: "busy".into(),
    };
    let rec = decode_attempt(3, &encode_attempt(&a, DeliveryState::Pending)).unwrap();
    assert_eq!(rec.state, DeliveryState::Pending);
    assert_eq!(format!("{:?}", rec.attempt), format!("{a:?}"));
}

#[test]
fn short_or_unknown_values_are_corrupt_not_a_panic() {
    assert!(decode_pending(&[]).is_err());
    assert!(decode_pending(&[9, 0]).is_err());
    assert!(decode_attempt(1, &[V1, 0, 0]).is_err());
    let p = Pending {
        due: 42,
        manual: true,
    };
    assert_eq!(decode_pending(&encode_pending(p, 9)).unwrap(), (p, 9));
}
