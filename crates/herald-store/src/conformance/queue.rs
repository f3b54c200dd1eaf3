//! The queue: what is due is taken once, within a take's limits, ordered lanes one at a time, holds given back, the intake.

use super::*;

/// `queue_changed` resolves once an ingest made a delivery due (on one box, by the due index's
/// permit; in a cluster, by the notice its listener hears, which herald starts with the node).
pub async fn the_queue_says_it_changed_when_an_ingest_made_work<H: Harness>(s: Subject<H>) {
    let store = &*s.store;
    let _listening = s.listen();
    // Until the listener listens, a notice goes unheard: ingest again, up to a deadline.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (woken, stored) = tokio::join!(
            tokio::time::timeout(Duration::from_millis(500), store.queue_changed()),
            store.ingest_events(vec![event("acct", None, START)]),
        );
        stored.unwrap();
        if woken.is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}: no wake within 10 s",
            s.name
        );
    }
}

pub async fn a_due_delivery_is_taken_once_and_a_held_one_comes_back_at_its_time<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    let (event_id, deliveries) = ingest_one(&s).await;
    let mut taken = take_all(&s).await;
    let want: Vec<&str> = deliveries.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids(&taken), want, "{}: both due deliveries", s.name);
    for t in &taken {
        assert!(store.is_held(&t.due.delivery.id), "{}", s.name);
        assert_eq!(t.due.event.id, event_id, "{}", s.name);
        assert_eq!(&t.due.payload[..], b"{\"n\":1}", "{}", s.name);
        let fenced = match t.fence {
            Fence::Claimed => s.name == "sled",
            Fence::Lease(_) => s.name == "postgres",
        };
        assert!(fenced, "{}: {:?}", s.name, t.fence);
    }
    assert!(
        take_all(&s).await.is_empty(),
        "{}: a taken delivery is not taken again",
        s.name
    );

    // One is held (an open breaker) for five seconds, the other is delivered.
    let b = taken.pop().unwrap();
    let a = taken.pop().unwrap();
    let held_id = a.due.delivery.id.clone();
    store.release(a.hold, Some(START + 5_000)).await.unwrap();
    deliver(&s, b).await;
    assert!(!store.is_held(&held_id), "{}", s.name);
    assert_eq!(
        store.next_due(&everything()).await.unwrap(),
        Some(START + 5_000),
        "{}: due again when the hold ends",
        s.name
    );
    s.clock.set(START + 4_999);
    assert!(take_all(&s).await.is_empty(), "{}: held", s.name);
    s.clock.set(START + 5_000);
    let again = take_all(&s).await;
    assert_eq!(ids(&again), vec![held_id.as_str()], "{}", s.name);
    assert_eq!(again[0].due.delivery.attempt_count, 0, "{}", s.name);
    for t in again {
        deliver(&s, t).await;
    }
    assert_nothing_due(&s).await;
    assert!(take_all(&s).await.is_empty(), "{}", s.name);
}

pub async fn a_take_hands_out_no_more_of_an_endpoint_than_its_limits_allow<H: Harness>(
    s: Subject<H>,
) {
    // What the scheduler tunes by: a batch and a hold of at least one.
    let taking = s.store.taking();
    assert!(
        taking.batch >= 1 && taking.hold_per_slot >= 1,
        "{}: {taking:?}",
        s.name
    );
    let store = &*s.store;
    let mut to_a = Vec::new();
    for i in 0..3 {
        s.clock.set(START + i);
        let mut e = event_to("acct", EP_A, None);
        e.received_at = START + i;
        let out = store.ingest_events(vec![e]).await.unwrap();
        to_a.push(created(&out[0]).1[0].id.clone());
    }
    let out = store
        .ingest_events(vec![event_to("acct", EP_B, None)])
        .await
        .unwrap();
    let to_b = created(&out[0]).1[0].id.clone();
    s.clock.set(START + 10);
    let limits = |a: usize, others: usize| FixedLimits {
        named: vec![(EP_A.to_string(), a)],
        others,
    };

    let first = take_within(&s, 100, &limits(2, 1)).await;
    assert_eq!(
        ids(&first),
        vec![to_a[0].as_str(), to_a[1].as_str(), to_b.as_str()],
        "{}: A's two earliest and B's one",
        s.name
    );
    assert!(
        take_within(&s, 100, &limits(0, 5)).await.is_empty(),
        "{}: none more of A, and B has none left",
        s.name
    );
    assert_eq!(
        store.next_due(&limits(1, 5)).await.unwrap(),
        Some(START + 2),
        "{}: A's third is what a take that allows A would hand out",
        s.name
    );
    let third = take_within(&s, 1, &limits(5, 5)).await;
    assert_eq!(ids(&third), vec![to_a[2].as_str()], "{}", s.name);
    for t in first.into_iter().chain(third) {
        deliver(&s, t).await;
    }
    assert_nothing_due(&s).await;
}

/// EP_A ordered by the payload's `k`, and three events to it, keyed x, y, x, a millisecond
/// apart from START: their deliveries.
async fn ordered_x_y_x<H: Harness>(s: &Subject<H>) -> Vec<Delivery> {
    let mut ep = endpoint(EP_A, "acct");
    ep.ordering = Some(herald_core::model::Ordering {
        key: Some("k".into()),
    });
    s.store.create_endpoint(ep, 100).await.unwrap();
    let mut made = Vec::new();
    for (i, k) in ["x", "y", "x"].iter().enumerate() {
        let e = NewEvent {
            targets: vec![lane_of(Some(EP_A))],
            payload: Bytes::from(format!(r#"{{"k": "{k}"}}"#)),
            ..event("acct", None, START + i as i64)
        };
        let out = s.store.ingest_events(vec![e]).await.unwrap();
        made.push(created(&out[0]).1[0].clone());
    }
    made
}

pub async fn an_ordered_lane_hands_out_one_delivery_at_a_time_in_commit_order<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    let made = ordered_x_y_x(&s).await;
    let order: Vec<String> = made.iter().map(|d| d.id.clone()).collect();
    let ordering = |d: Delivery| async move { store.ordering_of(&d).await.unwrap() };
    assert_eq!(
        ordering(made[0].clone()).await,
        Some(("x".to_string(), None)),
        "{}: x's first heads its lane",
        s.name
    );
    assert_eq!(
        ordering(made[2].clone()).await,
        Some(("x".to_string(), Some(order[0].clone()))),
        "{}: x's second waits for its first",
        s.name
    );
    s.clock.set(START + 10);
    let heads = take_all(&s).await;
    assert_eq!(
        ids(&heads),
        vec![order[0].as_str(), order[1].as_str()],
        "{}: the heads of x and y; x's second waits behind its first",
        s.name
    );
    let mut heads = heads.into_iter();
    let x1 = heads.next().unwrap();
    assert!(take_all(&s).await.is_empty(), "{}", s.name);
    deliver(&s, x1).await;
    let next = take_all(&s).await;
    assert_eq!(
        ids(&next),
        vec![order[2].as_str()],
        "{}: x's second once its first has ended",
        s.name
    );
    assert_eq!(
        ordering(made[2].clone()).await,
        Some(("x".to_string(), None)),
        "{}: nothing ahead of x's second now",
        s.name
    );
    for t in next.into_iter().chain(heads) {
        deliver(&s, t).await;
    }
}

pub async fn what_waits_is_counted_per_endpoint_due_behind_and_not_taken<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    ordered_x_y_x(&s).await;
    for _ in 0..2 {
        store
            .ingest_events(vec![event_to("acct", EP_B, None)])
            .await
            .unwrap();
    }
    s.clock.set(START + 10);
    let only_b = FixedLimits {
        named: vec![(EP_A.to_string(), 0)],
        others: 10,
    };
    let mut taken = take_within(&s, 100, &only_b).await;
    assert_eq!(taken.len(), 2, "{}: B's two", s.name);
    let kept = taken.pop().unwrap();
    let given_back = taken.pop().unwrap();
    store
        .release(given_back.hold, Some(START + 100))
        .await
        .unwrap();
    let counts = |now: i64| async move {
        let mut w = store.waiting_by_endpoint(now).await.unwrap();
        w.sort_by(|a, b| a.endpoint_id.cmp(&b.endpoint_id));
        w.into_iter()
            .map(|w| {
                (
                    w.endpoint_id.unwrap_or_default(),
                    w.waiting,
                    w.due,
                    w.behind,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        counts(START + 10).await,
        vec![(EP_A.to_string(), 3, 2, 1), (EP_B.to_string(), 1, 0, 0)],
        "{}: A's heads of x and y are due and x's second is behind; B's taken one is not \
         waiting and the one given back is not due before its time",
        s.name
    );
    assert_eq!(
        s.store.due_summary(START + 10).await.unwrap().0,
        3,
        "{}: due, behind or not",
        s.name
    );
    assert_eq!(
        counts(START + 100).await[1],
        (EP_B.to_string(), 1, 1, 0),
        "{}",
        s.name
    );
    deliver(&s, kept).await;
}

pub async fn a_leaving_node_gives_back_what_it_took<H: Harness>(s: Subject<H>) {
    let store = &*s.store;
    let (_, deliveries) = ingest_one(&s).await;
    let taken = take_all(&s).await;
    assert_eq!(taken.len(), deliveries.len(), "{}", s.name);
    let left = store.leave().await.unwrap();
    if s.name != "sled" {
        // Due at once for the other nodes: the store holds nothing for this one now.
        assert_eq!(left, 2, "{}: both leases given back", s.name);
        for d in &deliveries {
            assert!(!store.is_held(&d.id), "{}", s.name);
        }
        assert_eq!(
            store.next_due(&everything()).await.unwrap(),
            Some(START),
            "{}: due as they were",
            s.name
        );
    } else {
        // One box: there are no other nodes, and the claims end with the process.
        assert_eq!(left, 0, "{}", s.name);
        for d in &deliveries {
            assert!(store.is_held(&d.id), "{}", s.name);
        }
    }
}

/// An intake that takes whatever it is offered and keeps what it is handed.
struct Catching<T> {
    handed: Mutex<Vec<Taken<T>>>,
}

impl<T: Send> Intake<T> for Catching<T> {
    fn reserve(&self, _endpoint: &str) -> bool {
        true
    }

    fn cancel(&self, _endpoint: &str) {}

    fn take(&self, taken: Vec<Taken<T>>) {
        self.handed.lock().unwrap().extend(taken);
    }
}

pub async fn ingest_hands_fresh_deliveries_to_the_intake_or_queues_them_never_both<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    let intake = Arc::new(Catching {
        handed: Mutex::default(),
    });
    store.set_intake(Some(intake.clone()));
    let (_, deliveries) = ingest_one(&s).await;
    let handed: Vec<Taken<HoldOf<H>>> = std::mem::take(&mut *intake.handed.lock().unwrap());
    let queued = take_all(&s).await;
    let mut seen: Vec<&str> = ids(&handed);
    seen.extend(ids(&queued));
    seen.sort();
    let want: Vec<&str> = deliveries.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(seen, want, "{}: each delivery exactly once", s.name);
    if s.name != "sled" {
        assert_eq!(handed.len(), 2, "{}: taken at ingest", s.name);
    } else {
        assert!(handed.is_empty(), "{}: one box queues them", s.name);
    }
    for t in handed.into_iter().chain(queued) {
        assert!(store.is_held(&t.due.delivery.id), "{}", s.name);
        deliver(&s, t).await;
    }

    // Without an intake, everything is queued.
    store.set_intake(None);
    let (_, deliveries) = ingest_one(&s).await;
    assert!(intake.handed.lock().unwrap().is_empty(), "{}", s.name);
    let queued = take_all(&s).await;
    let want: Vec<&str> = deliveries.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids(&queued), want, "{}", s.name);
    for t in queued {
        deliver(&s, t).await;
    }
}
