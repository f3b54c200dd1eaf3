//! The delivery log: changes, reads through filters and cursors, attempts recorded, minutes, the retention sweep, the store's own figures.

use super::*;

/// The contract's change of a delivery is a manual retry's: pending again, due at a time, or
/// left as it is. Other changes of state come with an attempt (the engine's).
pub async fn a_delivery_changes_through_its_change_or_says_why_not<H: Harness>(s: Subject<H>) {
    let store = &*s.store;
    let (_, deliveries) = ingest_one(&s).await;
    let id = deliveries[0].id.clone();

    let left = store
        .change_delivery(&id, |_| None::<(Delivery, ())>)
        .await
        .unwrap();
    assert_eq!(left, Changed::No, "{}", s.name);
    let at = START + 3_600_000;
    let moved = store
        .change_delivery(&id, move |d| Some((retried(d, at), 7)))
        .await
        .unwrap();
    assert_eq!(moved, Changed::Yes(7), "{}", s.name);
    let read = store.delivery(&id).await.unwrap().expect("stored");
    assert_eq!(
        (read.state, read.next_attempt_at, read.manual, read.queued),
        (DeliveryState::Pending, Some(at), true, true),
        "{}",
        s.name
    );
    assert_eq!(
        store.stats().await.unwrap().get(DeliveryState::Pending),
        2,
        "{}: still two pending",
        s.name
    );
    let missing = store
        .change_delivery("dlv_01HZZZZZZZZZZZZZZZZZZZZZZZ", |_| None::<(Delivery, ())>)
        .await
        .unwrap();
    assert_eq!(missing, Changed::NotFound, "{}", s.name);
}

/// A search by payload text lists the deliveries of the events whose payload holds it, its
/// bytes exactly (case matters; a large payload's too), within the filter's account; a page
/// looks at no more than [`crate::SEARCH_EVENTS`] events, and one that stopped there has a
/// cursor from which the next page goes on.
pub async fn a_search_finds_payload_text_looking_at_a_bounded_number_of_events<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    let with = |account: &str, payload: Vec<u8>| {
        let mut e = event(account, None, s.clock.now_ms());
        e.payload = Bytes::from(payload);
        e.targets = vec![lane_of(Some(EP_A))];
        e
    };
    let needle = b"{\"order\":\"needle-77\"}".to_vec();
    let mut large = format!("{{\"pad\":\"{}\",\"order\":\"", "x".repeat(300_000)).into_bytes();
    large.extend_from_slice(b"needle-77\"}");
    let ingest = |events: Vec<NewEvent>| async move {
        store
            .ingest_events(events)
            .await
            .unwrap()
            .iter()
            .map(|o| created(o).1[0].id.clone())
            .collect::<Vec<_>>()
    };
    let oldest = ingest(vec![with("a", large)]).await;
    let filler: Vec<NewEvent> = (0..crate::SEARCH_EVENTS)
        .map(|i| with("a", format!("{{\"order\":\"other-{i}\"}}").into_bytes()))
        .collect();
    ingest(filler).await;
    ingest(vec![with("a", b"{\"order\":\"NEEDLE-77\"}".to_vec())]).await;
    ingest(vec![with("b", needle.clone())]).await;
    let newest = ingest(vec![with("a", needle)]).await;

    let search = |cursor: Option<String>| async move {
        let filter = DeliveryFilter {
            account_id: Some("a".into()),
            text: Some("needle-77".into()),
            ..Default::default()
        };
        store.list_deliveries(filter, 50, cursor).await.unwrap()
    };
    // The newest SEARCH_EVENTS of account a: the newest event only (not the other case's, not
    // account b's); the page stopped there with a cursor.
    let (page, next) = search(None).await;
    let ids: Vec<String> = page.into_iter().map(|d| d.id).collect();
    assert_eq!(ids, newest, "{}", s.name);
    assert!(
        next.is_some(),
        "{}: a search that stopped has a cursor",
        s.name
    );
    // The next page looks at the rest: the oldest event's large payload holds it too.
    let (page, next) = search(next).await;
    let ids: Vec<String> = page.into_iter().map(|d| d.id).collect();
    assert_eq!(ids, oldest, "{}", s.name);
    assert_eq!(next, None, "{}: all looked at", s.name);
    // Every account's log: account b's event is found too.
    let filter = DeliveryFilter {
        text: Some("needle-77".into()),
        ..Default::default()
    };
    let (page, _) = store.list_deliveries(filter, 1, None).await.unwrap();
    assert_eq!(page[0].id, newest[0], "{}", s.name);
    let (page, _) = store
        .list_deliveries(
            DeliveryFilter {
                text: Some("needle-77".into()),
                ..Default::default()
            },
            2,
            None,
        )
        .await
        .unwrap();
    assert_eq!(page.len(), 2, "{}", s.name);
    assert_eq!(page[1].account_id, "b", "{}", s.name);
}

pub async fn the_log_lists_newest_first_through_filters_and_cursors<H: Harness>(s: Subject<H>) {
    let store = &*s.store;
    let mut ids = Vec::new();
    for i in 0..30 {
        s.clock.advance(Duration::from_secs(1));
        let mut e = event(if i % 3 == 0 { "a" } else { "b" }, None, s.clock.now_ms());
        e.event_type = if i % 2 == 0 { "even" } else { "odd" }.into();
        let out = store.ingest_events(vec![e]).await.unwrap();
        ids.extend(created(&out[0]).1.into_iter().map(|d| d.id));
    }
    ids.reverse();

    // Every page, every delivery once, newest first.
    let mut listed = Vec::new();
    let mut cursor = None;
    loop {
        let (page, next) = store
            .list_deliveries(DeliveryFilter::default(), 7, cursor)
            .await
            .unwrap();
        assert!(page.len() <= 7, "{}", s.name);
        listed.extend(page.into_iter().map(|d| d.id));
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(listed, ids, "{}", s.name);

    let count = |filter: DeliveryFilter| async move {
        let (page, next) = store
            .list_deliveries(filter.clone(), 100, None)
            .await
            .unwrap();
        assert!(next.is_none());
        page
    };
    let of_a = count(DeliveryFilter {
        account_id: Some("a".into()),
        ..Default::default()
    })
    .await;
    assert_eq!(of_a.len(), 20, "{}", s.name);
    assert!(of_a.iter().all(|d| d.account_id == "a"), "{}", s.name);
    let to_b = count(DeliveryFilter {
        endpoint_id: Some(EP_B.into()),
        event_type: Some("odd".into()),
        ..Default::default()
    })
    .await;
    assert_eq!(to_b.len(), 15, "{}", s.name);
    assert!(
        to_b.iter()
            .all(|d| d.endpoint_id.as_deref() == Some(EP_B) && d.event_type == "odd"),
        "{}",
        s.name
    );
    let since = count(DeliveryFilter {
        since: Some(START + 21_000),
        ..Default::default()
    })
    .await;
    assert_eq!(
        since.len(),
        20,
        "{}: ten events from the 21st second on",
        s.name
    );
    let failed = count(DeliveryFilter {
        state: Some(DeliveryState::Failed),
        ..Default::default()
    })
    .await;
    assert!(failed.is_empty(), "{}", s.name);
}

pub async fn an_attempt_is_recorded_with_what_follows_it_in_one_write<H: Harness>(s: Subject<H>) {
    let store = &*s.store;
    let (_, deliveries) = ingest_one(&s).await;
    let was = deliveries[0].clone();
    assert!(!store.is_held(&was.id), "{}", s.name);
    let taken = s.take(&was.id).await;
    assert!(store.is_held(&was.id), "{}: held while attempted", s.name);
    assert_eq!(
        store
            .change_delivery(&was.id, |_| None::<(Delivery, ())>)
            .await
            .unwrap(),
        Changed::Busy,
        "{}: a change waits for the attempt",
        s.name
    );

    // A failed first attempt, retried in a minute.
    let at = s.clock.now_ms();
    let (attempt, now) = failed_first(&was, at);
    store
        .record_attempt(&was, &now, &attempt, taken.fence)
        .await
        .unwrap();
    s.release(taken).await;
    assert!(!store.is_held(&was.id), "{}", s.name);
    let read = store.delivery(&was.id).await.unwrap().expect("stored");
    assert_eq!(
        (
            read.state,
            read.attempt_count,
            read.last_status,
            read.last_http_status
        ),
        (
            DeliveryState::Pending,
            1,
            Some(Status::HttpError),
            Some(500)
        ),
        "{}",
        s.name
    );
    assert_eq!(read.next_attempt_at, Some(at + 60_000), "{}", s.name);
    let attempts = store.attempts(&was.id).await.unwrap();
    assert_eq!(attempts.len(), 1, "{}", s.name);
    assert_eq!(
        (
            attempts[0].number,
            attempts[0].status,
            attempts[0].http_status
        ),
        (1, Status::HttpError, Some(500)),
        "{}",
        s.name
    );
    assert_eq!(attempts[0].response_body, "oops", "{}", s.name);
    assert_eq!(
        attempts[0].response_headers,
        [
            ("content-type".to_string(), "text/plain".to_string()),
            ("x-request-id".to_string(), "req-\u{e9}-1".to_string()),
        ],
        "{}: the response's headers, in order",
        s.name
    );

    // The retry delivers it.
    s.clock.advance(Duration::from_secs(61));
    let taken = s.take(&was.id).await;
    let at = s.clock.now_ms();
    let second = Attempt {
        id: herald_core::ids::new_id(herald_core::ids::ATTEMPT, at),
        number: 2,
        at,
        status: Status::Delivered,
        http_status: Some(204),
        response_body: String::new(),
        response_headers: Vec::new(),
        ..attempt
    };
    let mut done = read.clone();
    done.state = DeliveryState::Delivered;
    done.attempt_count = 2;
    done.last_status = Some(Status::Delivered);
    done.last_http_status = Some(204);
    done.next_attempt_at = None;
    done.queued = false;
    store
        .record_attempt(&read, &done, &second, taken.fence)
        .await
        .unwrap();
    s.release(taken).await;
    let read = store.delivery(&was.id).await.unwrap().expect("stored");
    assert_eq!(
        (read.state, read.attempt_count, read.next_attempt_at),
        (DeliveryState::Delivered, 2, None),
        "{}",
        s.name
    );
    assert_eq!(
        store.attempts(&was.id).await.unwrap().len(),
        2,
        "{}",
        s.name
    );
    let stats = store.stats().await.unwrap();
    assert_eq!(
        (
            stats.get(DeliveryState::Pending),
            stats.get(DeliveryState::Delivered)
        ),
        (1, 1),
        "{}",
        s.name
    );
}

pub fn minute(at: i64, delivered: u32, timeouts: u32, latency: u64) -> Minute {
    let mut m = Minute {
        at,
        ..Minute::default()
    };
    for _ in 0..delivered {
        m.record(Status::Delivered, latency);
    }
    for _ in 0..timeouts {
        m.record(Status::Timeout, latency);
    }
    m
}

pub async fn minutes_add_up_across_writers_survive_a_reopen_and_are_trimmed<H: Harness>(
    s: Subject<H>,
) {
    let t0 = START.div_euclid(Minute::MS) * Minute::MS;
    let add = |v: Vec<(String, Minute)>| {
        let store = s.store.clone();
        async move { store.add_minutes(v).await.expect("add minutes") }
    };
    for id in [EP_A, EP_B] {
        s.store.put_endpoint(endpoint(id, "acct")).await.unwrap();
    }
    // An endpoint that does not exist (deleted since its attempts were counted) gets none.
    let none = "ep_01HZZZZZZZZZZZZZZZZZZZZZZC";
    add(vec![(none.into(), minute(t0, 1, 0, 1))]).await;
    // The row of the decisions that sent no request is kept, with no endpoint behind it.
    let mut decided = Minute {
        at: t0,
        ..Minute::default()
    };
    decided.record(Status::NoEndpoint, 0);
    add(vec![(crate::NOT_SENT.into(), decided)]).await;
    // Two nodes' flushes of the same minute add up; the max is the larger.
    add(vec![
        (EP_A.into(), minute(t0, 2, 1, 100)),
        (EP_A.into(), minute(t0 + Minute::MS, 1, 0, 10)),
        (EP_B.into(), minute(t0, 5, 0, 1)),
    ])
    .await;
    add(vec![(EP_A.into(), minute(t0, 1, 2, 300))]).await;
    let s = s.reopen().await;
    let got = s.store.endpoint_minutes(EP_A, t0).await.unwrap();
    let mut want = minute(t0, 2, 1, 100);
    want.add(&minute(t0, 1, 2, 300));
    assert_eq!(want.latency_buckets.iter().sum::<u32>(), 6);
    assert_eq!(
        got,
        vec![want, minute(t0 + Minute::MS, 1, 0, 10)],
        "{}",
        s.name
    );
    // From a later minute on, only that minute; another endpoint's are its own.
    let later = s.store.endpoint_minutes(EP_A, t0 + 1).await.unwrap();
    assert_eq!(later.len(), 1, "{}: {later:?}", s.name);
    assert_eq!(
        s.store.endpoint_minutes(EP_B, 0).await.unwrap(),
        vec![minute(t0, 5, 0, 1)]
    );
    assert!(s.store.endpoint_minutes(none, 0).await.unwrap().is_empty());
    // Every endpoint's, from a minute on.
    let mut all = s.store.minutes_since(t0).await.unwrap();
    all.sort_by(|a, b| (&a.0, a.1.at).cmp(&(&b.0, b.1.at)));
    let ids: Vec<(&str, i64)> = all.iter().map(|(id, m)| (id.as_str(), m.at)).collect();
    assert_eq!(
        ids,
        [
            (crate::NOT_SENT, t0),
            (EP_A, t0),
            (EP_A, t0 + Minute::MS),
            (EP_B, t0)
        ],
        "{}",
        s.name
    );
    assert_eq!(all[0].1, decided, "{}", s.name);
    assert_eq!(all[1].1, got[0], "{}", s.name);
    assert_eq!(
        s.store.minutes_since(t0 + 1).await.unwrap(),
        vec![(EP_A.to_string(), minute(t0 + Minute::MS, 1, 0, 10))],
        "{}",
        s.name
    );
    // Trimming drops what starts before the cut, for every endpoint.
    let gone = s.store.trim_minutes(t0 + Minute::MS).await.unwrap();
    assert_eq!(gone, 3, "{}", s.name);
    assert_eq!(s.store.endpoint_minutes(EP_A, 0).await.unwrap().len(), 1);
    assert!(s.store.endpoint_minutes(EP_B, 0).await.unwrap().is_empty());

    // Each minute was added to its hour too, and the minutes' trim leaves the hours: each the
    // sum of its minutes, latency buckets and all.
    let hour_of = |at: i64| at.div_euclid(Minute::HOUR_MS) * Minute::HOUR_MS;
    let mut want_hours: Vec<Minute> = Vec::new();
    for m in &got {
        match want_hours.last_mut() {
            Some(h) if h.at == hour_of(m.at) => h.add(m),
            _ => {
                let mut h = Minute {
                    at: hour_of(m.at),
                    ..Minute::default()
                };
                h.add(m);
                want_hours.push(h);
            }
        }
    }
    assert_eq!(
        s.store.endpoint_hours(EP_A, 0).await.unwrap(),
        want_hours,
        "{}",
        s.name
    );
    let mut b_hour = minute(t0, 5, 0, 1);
    b_hour.at = hour_of(t0);
    assert_eq!(
        s.store.endpoint_hours(EP_B, 0).await.unwrap(),
        vec![b_hour],
        "{}",
        s.name
    );
    assert!(s.store.endpoint_hours(none, 0).await.unwrap().is_empty());
    // Every endpoint's hours, from an hour on, the decisions' row too.
    let mut every = s.store.hours_since(hour_of(t0)).await.unwrap();
    every.sort_by(|a, b| (&a.0, a.1.at).cmp(&(&b.0, b.1.at)));
    let mut decided_hour = decided;
    decided_hour.at = hour_of(t0);
    assert_eq!(
        every[0],
        (crate::NOT_SENT.to_string(), decided_hour),
        "{}",
        s.name
    );
    assert_eq!(every.len(), want_hours.len() + 2, "{}: {every:?}", s.name);
    let last = want_hours.last().unwrap().at;
    assert_eq!(
        s.store.endpoint_hours(EP_A, last).await.unwrap().len(),
        1,
        "{}: from an hour on",
        s.name
    );
    // Trimming hours drops what starts before the cut, for every endpoint.
    let gone = s.store.trim_hours(last + Minute::HOUR_MS).await.unwrap();
    assert_eq!(gone as usize, want_hours.len() + 2, "{}", s.name);
    assert!(s.store.endpoint_hours(EP_A, 0).await.unwrap().is_empty());
}

/// An endpoint's last success: the newest of every flush (and of two in one) is kept, across a
/// reopen; one for an endpoint that does not exist is not; the endpoint's delete and its
/// account's purge take it.
pub async fn the_newest_last_success_is_kept_until_its_endpoint_goes<H: Harness>(s: Subject<H>) {
    for id in [EP_A, EP_B] {
        s.store.put_endpoint(endpoint(id, "acct")).await.unwrap();
    }
    let none = "ep_01HZZZZZZZZZZZZZZZZZZZZZZC";
    assert_eq!(
        s.store.last_success(EP_A).await.unwrap(),
        None,
        "{}",
        s.name
    );
    keep_successes(
        &s,
        &[
            (EP_A, START + 20),
            (EP_A, START + 10),
            (EP_B, START),
            (none, START),
        ],
    )
    .await;
    // Another node's older flush does not move it back.
    keep_successes(&s, &[(EP_A, START + 5)]).await;
    let s = s.reopen().await;
    assert_eq!(
        s.store.last_success(EP_A).await.unwrap(),
        Some(START + 20),
        "{}",
        s.name
    );
    assert_eq!(
        s.store.last_success(EP_B).await.unwrap(),
        Some(START),
        "{}",
        s.name
    );
    assert_eq!(
        s.store.last_success(none).await.unwrap(),
        None,
        "{}",
        s.name
    );
    keep_successes(&s, &[(EP_A, START + 30)]).await;
    assert_eq!(
        s.store.last_success(EP_A).await.unwrap(),
        Some(START + 30),
        "{}",
        s.name
    );
    assert!(s.store.delete_endpoint(EP_A).await.unwrap());
    assert_eq!(
        s.store.last_success(EP_A).await.unwrap(),
        None,
        "{}: gone with its endpoint",
        s.name
    );
    s.store.purge_account("acct").await.unwrap();
    assert_eq!(
        s.store.last_success(EP_B).await.unwrap(),
        None,
        "{}: gone with its account",
        s.name
    );
}

/// Keeps these last successes, or fails the case.
async fn keep_successes<H: Harness>(s: &Subject<H>, v: &[(&str, i64)]) {
    let v = v.iter().map(|(id, at)| (id.to_string(), *at)).collect();
    s.store
        .keep_last_successes(v)
        .await
        .expect("keep last successes");
}

/// A flush of many endpoints' minutes over more than a day of hours adds up in one go, the same
/// (endpoint, minute) twice in one flush included; each endpoint reads its own across the hours,
/// and a trim keeps exactly what starts at or after the cut.
pub async fn a_large_flush_of_minutes_adds_up_and_trims_by_time<H: Harness>(s: Subject<H>) {
    let t0 = START.div_euclid(Minute::MS) * Minute::MS;
    let ids: Vec<String> = (0..40)
        .map(|i| format!("ep_01HZZZZZZZZZZZZZZZZZZZZZ{i:02}"))
        .collect();
    for id in &ids {
        s.store.put_endpoint(endpoint(id, "acct")).await.unwrap();
    }
    let mut flush = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        // Every 37th minute over 26 hours, and the first minute twice.
        for k in 0..43i64 {
            flush.push((id.clone(), minute(t0 + k * 37 * Minute::MS, 1, 0, i as u64)));
        }
        flush.push((id.clone(), minute(t0, 2, 1, 1_000)));
    }
    s.store.add_minutes(flush).await.expect("add minutes");
    for (i, id) in ids.iter().enumerate() {
        let got = s.store.endpoint_minutes(id, 0).await.unwrap();
        assert_eq!(got.len(), 43, "{}: {id}", s.name);
        assert_eq!(got[0].at, t0);
        assert_eq!(
            got[0].delivered(),
            3,
            "{}: both of the flush's rows",
            s.name
        );
        assert_eq!(got[0].latency_max_ms, 1_000);
        assert_eq!(got[42].at, t0 + 42 * 37 * Minute::MS);
        assert_eq!(got[42].latency_max_ms, i as u64);
        assert!(got.windows(2).all(|w| w[0].at < w[1].at), "{}", s.name);
    }
    let cut = t0 + 20 * 37 * Minute::MS + 1;
    let gone = s.store.trim_minutes(cut).await.unwrap();
    assert_eq!(gone, 40 * 21, "{}", s.name);
    let left = s.store.endpoint_minutes(&ids[7], 0).await.unwrap();
    assert_eq!(left.len(), 22, "{}", s.name);
    assert!(left.iter().all(|m| m.at >= cut), "{}", s.name);
}

pub async fn a_sweep_removes_what_is_past_the_retention_and_keeps_what_is_pending<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    let retained = Retained {
        retention_ms: 3_600_000,
        fold_after_ms: 60_000,
    };
    // An old event whose deliveries ended, and an old one still pending.
    let out = store
        .ingest_events(vec![
            event("acct", Some("old-key"), START),
            event("acct", None, START),
        ])
        .await
        .unwrap();
    let (ended, ended_deliveries) = created(&out[0]);
    let (pending, _) = created(&out[1]);
    for d in &ended_deliveries {
        let taken = s.take(&d.id).await;
        let at = s.clock.now_ms();
        let attempt = Attempt {
            id: herald_core::ids::new_id(herald_core::ids::ATTEMPT, at),
            number: 1,
            at,
            duration_ms: 3,
            status: Status::Delivered,
            http_status: Some(200),
            error: None,
            request_headers: Vec::new(),
            response_body: String::new(),
            response_headers: Vec::new(),
            url: None,
            manual: false,
        };
        let mut done = d.clone();
        done.state = DeliveryState::Delivered;
        done.attempt_count = 1;
        done.last_status = Some(Status::Delivered);
        done.last_http_status = Some(200);
        done.next_attempt_at = None;
        store
            .record_attempt(d, &done, &attempt, taken.fence)
            .await
            .unwrap();
        s.release(taken).await;
    }
    let session = session("ps_old", false, START + 60_000);
    store
        .create_portal_session(&session, token_hash("hps_old"))
        .await
        .unwrap();

    // Within the retention, a sweep keeps everything.
    s.clock.set(START + 60_000);
    let stop = AtomicBool::new(false);
    let swept = store.sweep(s.clock.now_ms(), retained, &stop).await;
    assert_eq!(swept.events, 0, "{}: {swept:?}", s.name);
    assert!(store.event(&ended).await.unwrap().is_some(), "{}", s.name);

    // Past it, the ended event goes with its deliveries; the pending one stays.
    let later = START + 2 * IDEMPOTENCY_WINDOW_MS;
    s.clock.set(later);
    let swept = store.sweep(later, retained, &stop).await;
    assert_eq!(swept.events, 1, "{}: {swept:?}", s.name);
    assert!(store.event(&ended).await.unwrap().is_none(), "{}", s.name);
    for d in &ended_deliveries {
        assert!(store.delivery(&d.id).await.unwrap().is_none(), "{}", s.name);
    }
    assert!(store.event(&pending).await.unwrap().is_some(), "{}", s.name);
    assert!(
        store
            .portal_session("hps_old", later)
            .await
            .unwrap()
            .is_none(),
        "{}",
        s.name
    );
}

pub async fn the_store_reports_its_health_size_and_nodes<H: Harness>(s: Subject<H>) {
    let store = &*s.store;
    store
        .ingest_events(vec![event("acct", None, START)])
        .await
        .unwrap();
    assert!(store.healthy().await, "{}", s.name);
    assert!(store.size_on_disk().await > 0, "{}", s.name);
    let nodes = store.nodes().await.unwrap();
    match s.name {
        "sled" => assert!(nodes.is_none()),
        _ => {
            let (me, all) = nodes.expect("a cluster has nodes");
            assert!(all.iter().any(|n| n.id == me), "{me} in {all:?}");
        }
    }
}
