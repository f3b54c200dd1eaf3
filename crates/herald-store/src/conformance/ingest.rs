//! Ingest: events read back exactly, idempotency keys, debounce windows, the fan-out.

use super::*;

pub async fn an_ingest_is_read_back_exactly_with_a_pending_delivery_per_target<H: Harness>(
    s: Subject<H>,
) {
    let mut traced = event("acct", None, START);
    traced.trace = Some(trace_context());
    let out = s
        .store
        .ingest_events(vec![traced, event("acct", None, START)])
        .await
        .unwrap();
    assert_eq!(out.len(), 2, "{}", s.name);
    let (first, deliveries) = created(&out[0]);
    let (second, _) = created(&out[1]);
    assert!(first < second, "{}: ids grow in commit order", s.name);
    assert_eq!(deliveries.len(), 2, "{}", s.name);
    assert_eq!(
        deliveries[0].endpoint_id.as_deref(),
        Some(EP_A),
        "{}",
        s.name
    );
    assert_eq!(
        deliveries[1].endpoint_id.as_deref(),
        Some(EP_B),
        "{}",
        s.name
    );
    for d in &deliveries {
        assert_eq!(d.state, DeliveryState::Pending, "{}", s.name);
        assert_eq!(d.event_id, first, "{}", s.name);
        assert_eq!(d.attempt_count, 0, "{}", s.name);
        let read = s.store.delivery(&d.id).await.unwrap().expect("stored");
        assert_eq!(json(&read), json(d), "{}: read back as answered", s.name);
        assert!(
            s.store.attempts(&d.id).await.unwrap().is_empty(),
            "{}",
            s.name
        );
    }
    let (meta, payload) = s.store.event(&first).await.unwrap().expect("stored");
    assert_eq!(
        (meta.account_id.as_str(), meta.event_type.as_str()),
        ("acct", "order.created"),
        "{}",
        s.name
    );
    assert_eq!(
        meta.trace,
        Some(trace_context()),
        "{}: its trace context",
        s.name
    );
    let (other, _) = s.store.event(&second).await.unwrap().expect("stored");
    assert_eq!(other.trace, None, "{}: an event without one", s.name);

    assert_eq!(
        &payload[..],
        b"{\"n\":1}",
        "{}: the payload's bytes",
        s.name
    );
    let (_, _, all) = s
        .store
        .event_with_deliveries(&first)
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(
        all.iter().map(json).collect::<Vec<_>>(),
        deliveries.iter().map(json).collect::<Vec<_>>(),
        "{}",
        s.name
    );

    let stats = s.store.stats().await.unwrap();
    assert_eq!(stats.get(DeliveryState::Pending), 4, "{}", s.name);
    let (due, oldest) = s.store.due_summary(s.clock.now_ms()).await.unwrap();
    assert_eq!((due, oldest), (4, Some(START)), "{}", s.name);
    assert_eq!(
        s.store.endpoint_pending(EP_A).await.unwrap(),
        2,
        "{}",
        s.name
    );

    // Unknown and malformed ids answer nothing, never an error.
    for id in ["evt_01HZZZZZZZZZZZZZZZZZZZZZZZ", "nonsense"] {
        assert!(s.store.event(id).await.unwrap().is_none(), "{}", s.name);
    }
    assert!(
        s.store.delivery("dlv_x").await.unwrap().is_none(),
        "{}",
        s.name
    );

    // Durable when acknowledged: the store opened again has the events, their payloads
    // and their pending deliveries.
    let s = s.reopen().await;
    let (meta, payload) = s.store.event(&first).await.unwrap().expect("kept");
    assert_eq!(&payload[..], b"{\"n\":1}", "{}", s.name);
    assert_eq!(meta.trace, Some(trace_context()), "{}", s.name);
    for d in &deliveries {
        let read = s.store.delivery(&d.id).await.unwrap().expect("kept");
        assert_eq!(json(&read), json(d), "{}", s.name);
    }
    assert_eq!(
        s.store.stats().await.unwrap().get(DeliveryState::Pending),
        4,
        "{}",
        s.name
    );
    // Whoever attempts a delivery has its event's context with it.
    let taken = s.take(&deliveries[0].id).await;
    assert_eq!(taken.due.event.trace, Some(trace_context()), "{}", s.name);
    s.release(taken).await;
}

pub async fn an_idempotency_key_answers_the_first_event_within_its_window_only<H: Harness>(
    s: Subject<H>,
) {
    let out = s
        .store
        .ingest_events(vec![event("acct", Some("k1"), START)])
        .await
        .unwrap();
    let (first, _) = created(&out[0]);
    // Within one batch, and in a later one: the first event's id, nothing stored.
    let again = s
        .store
        .ingest_events(vec![
            event("acct", Some("k1"), START),
            event("acct", Some("k2"), START),
            event("acct", Some("k2"), START),
        ])
        .await
        .unwrap();
    assert!(
        matches!(&again[0], IngestOutcome::Duplicate { event_id } if *event_id == first),
        "{}: {again:?}",
        s.name
    );
    let (k2, _) = created(&again[1]);
    assert!(
        matches!(&again[2], IngestOutcome::Duplicate { event_id } if *event_id == k2),
        "{}: a key taken earlier in the same batch: {again:?}",
        s.name
    );
    // Keys are per account.
    let other = s
        .store
        .ingest_events(vec![event("other", Some("k1"), START)])
        .await
        .unwrap();
    assert_ne!(created(&other[0]).0, first, "{}", s.name);
    assert_eq!(
        s.store.stats().await.unwrap().get(DeliveryState::Pending),
        6,
        "{}: duplicates queue nothing",
        s.name
    );

    // The key answers until its window ends, to the millisecond; then it makes a new event.
    s.clock.set(START + IDEMPOTENCY_WINDOW_MS - 1);
    let again = s
        .store
        .ingest_events(vec![event("acct", Some("k1"), s.clock.now_ms())])
        .await
        .unwrap();
    assert!(
        matches!(&again[0], IngestOutcome::Duplicate { event_id } if *event_id == first),
        "{}: a millisecond before the window ends: {again:?}",
        s.name
    );
    s.clock.set(START + IDEMPOTENCY_WINDOW_MS);
    let later = s
        .store
        .ingest_events(vec![event("acct", Some("k1"), s.clock.now_ms())])
        .await
        .unwrap();
    assert_ne!(
        created(&later[0]).0,
        first,
        "{}: once the window ended",
        s.name
    );
}

pub async fn a_debounced_key_skips_the_events_its_window_holds<H: Harness>(s: Subject<H>) {
    let debounced = |at| NewEvent {
        debounce_key: Some("cart-1".into()),
        debounce: Some(DebounceRule {
            key: "cart-1".into(),
            window_ms: 60_000,
            trailing: false,
        }),
        ..event("acct", None, at)
    };
    let out = s.store.ingest_events(vec![debounced(START)]).await.unwrap();
    let (_, first) = created(&out[0]);
    assert!(
        first.iter().all(|d| d.state == DeliveryState::Pending),
        "{}: the first event of a window goes",
        s.name
    );
    s.clock.advance(Duration::from_secs(1));
    let out = s
        .store
        .ingest_events(vec![debounced(START + 1_000)])
        .await
        .unwrap();
    let (_, held) = created(&out[0]);
    assert!(
        held.iter().all(|d| d.state == DeliveryState::Skipped),
        "{}: within the window: {held:?}",
        s.name
    );
    s.clock.advance(Duration::from_secs(60));
    let out = s
        .store
        .ingest_events(vec![debounced(START + 61_000)])
        .await
        .unwrap();
    let (_, after) = created(&out[0]);
    assert!(
        after.iter().all(|d| d.state == DeliveryState::Pending),
        "{}: after the window: {after:?}",
        s.name
    );
}

/// Events come in through one operation: the store calls the fan-out (once, when the endpoints
/// do not change meanwhile) and stores what it made; the fan-out's own error comes back as it
/// is, with nothing stored.
pub async fn ingest_calls_the_fan_out_and_returns_its_error_unchanged<H: Harness>(s: Subject<H>) {
    #[derive(Debug, PartialEq)]
    enum Refused {
        No,
        Store,
    }
    impl From<StoreError> for Refused {
        fn from(_: StoreError) -> Self {
            Refused::Store
        }
    }
    let store = &*s.store;
    let mut calls = 0;
    let out = store
        .ingest(|| {
            calls += 1;
            Ok::<_, Refused>(vec![event("acct", None, START)])
        })
        .await
        .unwrap();
    created(&out[0]);
    assert_eq!(calls, 1, "{}", s.name);
    let pending = store.stats().await.unwrap().get(DeliveryState::Pending);
    let refused = store
        .ingest(|| Err::<Vec<NewEvent>, _>(Refused::No))
        .await
        .unwrap_err();
    assert_eq!(refused, Refused::No, "{}", s.name);
    assert_eq!(
        store.stats().await.unwrap().get(DeliveryState::Pending),
        pending,
        "{}: nothing stored",
        s.name
    );
}
