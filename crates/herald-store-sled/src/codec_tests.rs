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
        channels: Vec::new(),
        tags: Vec::new(),
        request_key: None,
        trace: None,
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

#[test]
fn an_events_trace_context_round_trips_beside_its_other_fields_and_fits_its_row() {
    let ulid = ids::event_after(0, 5);
    let state = format!("a={}", "x".repeat(250));
    let trace = herald_core::trace::TraceContext::from_headers(
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        Some(&state),
    )
    .unwrap();
    let mut m = meta();
    m.trace = Some(trace.clone());
    m.ordering_key = Some("o".into());
    m.tags = vec!["t".into()];
    m.request_key = Some("r".into());
    // A payload that just fits inline with the largest context still goes inline.
    let (fits, over) = (MAX_ROW - 400, MAX_ROW);
    for len in [0, fits, over] {
        let payload = vec![b'1'; len];
        let v = encode_event(&m, &[7], &payload).unwrap();
        assert!(
            v.row.len() <= MAX_ROW,
            "{len}: row of {} bytes",
            v.row.len()
        );
        let (rec, inline) = decode_event(ulid, &v.row).unwrap();
        assert_eq!(rec.meta.trace.as_ref(), Some(&trace));
        assert_eq!(rec.meta.ordering_key.as_deref(), Some("o"));
        assert_eq!(rec.meta.request_key.as_deref(), Some("r"));
        assert_eq!(rec.targets, vec![7]);
        assert_eq!(inline.map(<[u8]>::len), rec.payload_inline.then_some(len));
    }
    let v = encode_event(&meta(), &[7], b"{}").unwrap();
    assert_eq!(decode_event(ulid, &v.row).unwrap().0.meta.trace, None);
    // What the context costs a row: 26 bytes and its tracestate's length and 4.
    let plain = encode_event(&meta(), &[7], b"{}").unwrap().row.len();
    let mut m = meta();
    m.trace = Some(herald_core::trace::TraceContext {
        tracestate: None,
        ..trace
    });
    assert_eq!(encode_event(&m, &[7], b"{}").unwrap().row.len(), plain + 26);
}

#[test]
fn an_events_channels_and_tags_round_trip_and_older_rows_have_none() {
    let ulid = ids::event_after(0, 5);
    let mut m = meta();
    m.ordering_key = Some("k".into());
    m.channels = vec!["ch-a".into(), "ch.b".into()];
    m.tags = vec!["t1".into()];
    let v = encode_event(&m, &[7], b"{}").unwrap();
    let (rec, inline) = decode_event(ulid, &v.row).unwrap();
    assert_eq!(rec.meta.channels, m.channels);
    assert_eq!(rec.meta.tags, m.tags);
    assert_eq!(rec.meta.ordering_key.as_deref(), Some("k"));
    assert_eq!((rec.targets, inline), (vec![7], Some(&b"{}"[..])));
    // Tags without channels, and neither (a row as format 10 wrote it).
    m.channels.clear();
    let (rec, _) = decode_event(ulid, &encode_event(&m, &[7], b"{}").unwrap().row).unwrap();
    assert_eq!((rec.meta.channels.len(), rec.meta.tags.len()), (0, 1));
    let (rec, _) = decode_event(ulid, &encode_event(&meta(), &[7], b"{}").unwrap().row).unwrap();
    assert!(rec.meta.channels.is_empty() && rec.meta.tags.is_empty());
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
        // The Svix-compatible API's most: 10 channels and 5 tags of 128 characters.
        channels: (0..10).map(|i| format!("{i}{}", "c".repeat(127))).collect(),
        tags: (0..5).map(|i| format!("{i}{}", "t".repeat(127))).collect(),
        request_key: None,
        trace: None,
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
        response_headers: (0..32)
            .map(|i| (format!("x-r{i}"), "r".repeat(120)))
            .collect(),
        url: Some(format!("https://example.com/{}", "p".repeat(2100))),
        manual: true,
    };
    let v = encode_attempt(DLV, &a, DeliveryState::Failed);
    assert!(21 + v.len() <= MAX_ROW, "{}", v.len());
    let back = decode_attempt(&akey(1), &v).unwrap();
    assert_eq!(back.state, DeliveryState::Failed);
    assert!(back.attempt.error.unwrap().len() <= MAX_ERROR);
    // The usual case keeps everything: a 4 KiB excerpt and a response's usual headers.
    let small = Attempt {
        error: None,
        request_headers: vec![("x-a".into(), "b".into())],
        response_body: "ok".repeat(2048),
        url: Some("https://example.com/hook".into()),
        response_headers: (0..12)
            .map(|i| (format!("x-r{i}"), "r".repeat(60)))
            .collect(),
        ..a.clone()
    };
    let back = decode_attempt(
        &akey(1),
        &encode_attempt(DLV, &small, DeliveryState::Failed),
    )
    .unwrap();
    assert_eq!(back.attempt.response_body, small.response_body);
    assert_eq!(back.attempt.request_headers, small.request_headers);
    assert_eq!(back.attempt.response_headers, small.response_headers);
    // The response headers fill what the excerpt leaves, whole and in order.
    let full = Attempt {
        error: None,
        request_headers: Vec::new(),
        url: None,
        response_body: "b".repeat(4096),
        response_headers: (0..32)
            .map(|i| (format!("x-r{i}"), "r".repeat(120)))
            .collect(),
        ..a
    };
    let v = encode_attempt(DLV, &full, DeliveryState::Failed);
    assert!(21 + v.len() <= MAX_ROW, "{}", v.len());
    let back = decode_attempt(&akey(1), &v).unwrap();
    assert_eq!(back.attempt.response_body, full.response_body);
    let kept = back.attempt.response_headers.len();
    assert!((16..32).contains(&kept), "{kept}");
    assert_eq!(back.attempt.response_headers, full.response_headers[..kept]);
}

#[test]
fn an_attempts_url_and_trigger_round_trip_and_layout_2_rows_have_neither() {
    let a = Attempt {
        id: "att_x".into(),
        number: 2,
        at: 1_700_000_000_000,
        duration_ms: 12,
        status: Status::Delivered,
        http_status: Some(200),
        error: None,
        request_headers: vec![("svix-id".into(), "evt_1".into())],
        response_body: "ok".into(),
        response_headers: Vec::new(),
        url: Some("https://example.com/hook".into()),
        manual: true,
    };
    let v = encode_attempt(DLV, &a, DeliveryState::Delivered);
    let rec = decode_attempt(&akey(2), &v).unwrap();
    assert_eq!(format!("{:?}", rec.attempt), format!("{a:?}"));
    // The same row as layout 3 wrote it: no count of response headers after the flags.
    let mut v3 = v[..v.len() - 1].to_vec();
    v3[0] = ATTEMPT_V3;
    let rec = decode_attempt(&akey(2), &v3).unwrap();
    assert_eq!(format!("{:?}", rec.attempt), format!("{a:?}"));
    // The same row as layout 2 wrote it: no URL and no flags after the state.
    let mut v2 = v[..v.len() - 1 - 1 - 1 - a.url.as_ref().unwrap().len()].to_vec();
    v2[0] = ATTEMPT_V2;
    let rec = decode_attempt(&akey(2), &v2).unwrap();
    assert_eq!((rec.attempt.url, rec.attempt.manual), (None, false));
    assert_eq!(rec.attempt.response_body, "ok");
    assert_eq!(rec.state, DeliveryState::Delivered);
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
        response_headers: vec![
            ("retry-after".into(), "30".into()),
            ("x-request-id".into(), "r-\u{e9}".into()),
        ],
        url: None,
        manual: false,
    };
    let rec = decode_attempt(&akey(3), &encode_attempt(DLV, &a, DeliveryState::Pending)).unwrap();
    assert_eq!(rec.state, DeliveryState::Pending);
    assert_eq!(format!("{:?}", rec.attempt), format!("{a:?}"));
}

/// A delivery (the second of its event) for the attempt tests.
const DLV: u128 = 0x0190_0000_0000_0000_0000_0000_0000_0401;

fn akey(number: u32) -> [u8; 21] {
    super::super::key::attempt(DLV, number)
}

/// The headers herald records for a delivery attempt, as `outbound::request` builds them.
fn recorded(number: u32, at: Millis) -> Vec<(String, String)> {
    let event = ids::event_of(DLV).unwrap().0;
    vec![
        ("content-type".into(), "application/json".into()),
        ("user-agent".into(), "herald/0.1.0".into()),
        ("webhook-id".into(), ids::format(ids::EVENT, event)),
        ("webhook-timestamp".into(), at.div_euclid(1000).to_string()),
        (
            "webhook-signature".into(),
            "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=".into(),
        ),
        ("herald-event-type".into(), "order.created".into()),
        ("herald-attempt".into(), number.to_string()),
        ("herald-delivery-id".into(), ids::format(ids::DELIVERY, DLV)),
        (
            "herald-endpoint-id".into(),
            "ep_01M8XKEPBZBHX86GYB3AB3G9JJ".into(),
        ),
        ("x-team".into(), "{{ secret.API_KEY }}".into()),
    ]
}

#[test]
fn attempt_rows_leave_out_what_follows_from_their_key_and_read_back_exactly() {
    let at = 1_796_290_063_123;
    let a = Attempt {
        id: ids::format(ids::ATTEMPT, ids::ulid_floor(at) | 77),
        number: 2,
        at,
        duration_ms: 3,
        status: Status::Delivered,
        http_status: Some(200),
        error: None,
        request_headers: recorded(2, at),
        response_body: String::new(),
        response_headers: Vec::new(),
        url: None,
        manual: false,
    };
    let v = encode_attempt(DLV, &a, DeliveryState::Delivered);
    let spelled_out: usize = a
        .request_headers
        .iter()
        .map(|(k, v)| 8 + k.len() + v.len())
        .sum();
    assert!(
        v.len() < 200,
        "{} bytes (the headers alone were {spelled_out})",
        v.len()
    );
    let back = decode_attempt(&akey(2), &v).unwrap();
    assert_eq!(back.state, DeliveryState::Delivered);
    assert_eq!(format!("{:?}", back.attempt), format!("{a:?}"));

    // Values that differ from what the key says are kept as they were (another attempt's
    // number, another event's id, a retyped content type), and so are odd attempt ids.
    let mut odd = a.clone();
    odd.id = "att_not-a-ulid".into();
    odd.request_headers[0].1 = "application/json; charset=utf-8".into();
    odd.request_headers[2].1 = "evt_01M8XKEPC336KSN0HMKQSE0800".into();
    odd.request_headers[6].1 = "7".into();
    odd.request_headers.swap(1, 8);
    let back = decode_attempt(&akey(2), &encode_attempt(DLV, &odd, DeliveryState::Failed)).unwrap();
    assert_eq!(format!("{:?}", back.attempt), format!("{odd:?}"));
}

#[test]
fn attempt_rows_of_layout_1_still_read() {
    let mut w = Writer::with_capacity(64);
    w.str("att_x");
    w.i64(1_700_000_000_000);
    w.i64(12);
    w.u8(status_code(Status::HttpError));
    w.u16(503);
    w.opt_str(Some("boom"));
    w.u16(1);
    w.str("webhook-id");
    w.str("evt_1");
    w.str("busy");
    w.u8(state_code(DeliveryState::Pending));
    let rec = decode_attempt(&akey(3), &w.finish()).unwrap();
    assert_eq!(rec.state, DeliveryState::Pending);
    assert_eq!(rec.attempt.number, 3);
    assert_eq!(rec.attempt.id, "att_x");
    assert_eq!(rec.attempt.duration_ms, 12);
    assert_eq!(rec.attempt.http_status, Some(503));
    assert_eq!(rec.attempt.error.as_deref(), Some("boom"));
    assert_eq!(
        rec.attempt.request_headers,
        vec![("webhook-id".to_string(), "evt_1".to_string())]
    );
    assert_eq!(rec.attempt.response_body, "busy");
}

#[test]
fn varints_round_trip() {
    let mut w = Writer::default();
    let values = [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX];
    for v in values {
        w.varint(v);
    }
    let bytes = w.finish();
    let mut r = Reader(&bytes);
    for v in values {
        assert_eq!(r.varint().unwrap(), v);
    }
    assert!(Reader(&[0x80, 0x80][..]).varint().is_err());
}

#[test]
fn short_or_unknown_values_are_corrupt_not_a_panic() {
    assert!(decode_pending(&[]).is_err());
    assert!(decode_pending(&[9, 0]).is_err());
    assert!(decode_attempt(&akey(1), &[V1, 0, 0]).is_err());
    assert!(decode_attempt(&akey(1), &[ATTEMPT_V2, 1, 0]).is_err());
    assert!(decode_attempt(&akey(1), &[9]).is_err());
    assert!(decode_attempt(&[0; 5], &[V1]).is_err());
    let p = Pending {
        due: 42,
        manual: true,
    };
    assert_eq!(decode_pending(&encode_pending(p, 9)).unwrap(), (p, 9));
}
