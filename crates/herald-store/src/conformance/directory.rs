//! The directory: endpoints changed one change at a time, stored filters, client certificates, a deleted endpoint's deliveries.

use super::*;

pub async fn endpoints_are_created_changed_and_deleted_one_change_at_a_time<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    let made = store
        .create_endpoint(endpoint(EP_A, "acct"), 2)
        .await
        .unwrap()
        .expect("within the limit");
    assert_eq!(made.url, "https://example.com/hook", "{}", s.name);
    assert_eq!(
        store
            .endpoint(EP_A)
            .map(|e| serde_json::to_value(&*e).unwrap()),
        Some(serde_json::to_value(&*made).unwrap()),
        "{}",
        s.name
    );
    store
        .create_endpoint(endpoint(EP_B, "acct"), 2)
        .await
        .unwrap()
        .expect("within the limit");
    let third = "ep_01HZZZZZZZZZZZZZZZZZZZZZZC";
    assert!(
        store
            .create_endpoint(endpoint(third, "acct"), 2)
            .await
            .unwrap()
            .is_none(),
        "{}: past the account's limit",
        s.name
    );
    assert!(store.endpoint(third).is_none(), "{}", s.name);
    let ids: Vec<_> = store
        .account_endpoints("acct")
        .iter()
        .map(|e| e.id.clone())
        .collect();
    assert_eq!(ids, [EP_A, EP_B], "{}", s.name);
    assert!(
        store.account_ids().contains(&"acct".to_string()),
        "{}",
        s.name
    );

    // A change applies against the stored endpoint; `false` writes nothing; an error of the
    // change's own is answered and changes nothing.
    let (changed, wrote) = store
        .change_endpoint(EP_A, |ep| {
            ep.description = "orders".into();
            Ok::<_, StoreError>(true)
        })
        .await
        .unwrap()
        .expect("exists");
    assert!(wrote, "{}", s.name);
    assert_eq!(changed.description, "orders", "{}", s.name);
    let (_, wrote) = store
        .change_endpoint(EP_A, |_| Ok::<_, StoreError>(false))
        .await
        .unwrap()
        .expect("exists");
    assert!(!wrote, "{}", s.name);
    let refused = store
        .change_endpoint(EP_A, |ep| {
            ep.description = "lost".into();
            Err(StoreError::Closed)
        })
        .await;
    assert!(matches!(refused, Err(StoreError::Closed)), "{}", s.name);
    assert_eq!(
        store.endpoint(EP_A).unwrap().description,
        "orders",
        "{}",
        s.name
    );
    assert!(
        store
            .change_endpoint("ep_01HZZZZZZZZZZZZZZZZZZZZZZD", |_| Ok::<_, StoreError>(
                true
            ))
            .await
            .unwrap()
            .is_none(),
        "{}",
        s.name
    );

    // Ten changes at once: each sees the one before.
    let mut changes = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let store = s.store.clone();
        changes.spawn(async move {
            store
                .change_endpoint(EP_B, |ep| {
                    ep.description.push('x');
                    Ok::<_, StoreError>(true)
                })
                .await
                .unwrap()
        });
    }
    while changes.join_next().await.is_some() {}
    assert_eq!(
        store.endpoint(EP_B).unwrap().description,
        "x".repeat(10),
        "{}",
        s.name
    );

    // The size bound holds on both, with the same answer.
    let mut big = endpoint(EP_A, "acct");
    big.description = "d".repeat(MAX_ENDPOINT_SIZE);
    assert!(
        matches!(
            store.put_endpoint(big).await,
            Err(StoreError::TooLarge {
                max: MAX_ENDPOINT_SIZE,
                ..
            })
        ),
        "{}",
        s.name
    );
    let mut paused = (*store.endpoint(EP_A).unwrap()).clone();
    paused.state = EndpointState::Paused;
    store.put_endpoint(paused).await.unwrap();
    assert_eq!(
        store.endpoint(EP_A).unwrap().state,
        EndpointState::Paused,
        "{}",
        s.name
    );

    assert!(store.delete_endpoint(EP_A).await.unwrap(), "{}", s.name);
    assert!(!store.delete_endpoint(EP_A).await.unwrap(), "{}", s.name);
    assert!(store.endpoint(EP_A).is_none(), "{}", s.name);
    store.fresh_directory().await.unwrap();
    assert_eq!(store.account_endpoints("acct").len(), 1, "{}", s.name);

    // Every change was durable: the store opened again has each of them.
    let s = s.reopen().await;
    let back = s.store.endpoint(EP_B).expect("kept");
    assert_eq!(back.description, "x".repeat(10), "{}", s.name);
    assert!(s.store.endpoint(EP_A).is_none(), "{}", s.name);
    assert_eq!(s.store.account_endpoints("acct").len(), 1, "{}", s.name);
}

/// A filter stored under looser limits than this herald's (a later release may tighten them)
/// still loads when the store opens, and matches as it did: the limits apply when a filter is
/// set, not when a stored one is read.
pub async fn a_stored_filter_over_todays_limits_loads_and_matches<H: Harness>(s: Subject<H>) {
    use herald_core::filter::{Filter, Subject as FilterSubject, MAX_DEPTH, MAX_OPERATORS};
    let mut deep = serde_json::json!({"$gte": 10});
    for _ in 0..MAX_DEPTH {
        deep = serde_json::json!({ "k": deep });
    }
    let mut many: serde_json::Map<String, serde_json::Value> = (0..=MAX_OPERATORS)
        .map(|i| (format!("f{i}"), serde_json::json!({"$exists": false})))
        .collect();
    many.insert("deep".into(), deep);
    let stored = serde_json::json!({ "payload": many });
    assert!(Filter::parse(&stored).is_err(), "over today's limits");
    let mut ep = endpoint(EP_A, "acct");
    ep.filter = Some(Filter::load(&stored).expect("its grammar holds"));
    s.store.create_endpoint(ep, 10).await.unwrap();

    let s = s.reopen().await;
    let back = s.store.endpoint(EP_A).expect("kept");
    let filter = back.filter.as_ref().expect("the filter is kept");
    assert_eq!(filter.source(), &stored, "{}", s.name);
    let passes =
        serde_json::json!({"deep": {"k": {"k": {"k": {"k": {"k": {"k": {"k": {"k": 10}}}}}}}}});
    assert!(
        filter.matches(&FilterSubject::new("order.created", passes)),
        "{}",
        s.name
    );
    assert!(
        !filter.matches(&FilterSubject::new(
            "order.created",
            serde_json::json!({"f0": 1})
        )),
        "{}",
        s.name
    );
}

pub async fn a_client_certificate_is_kept_apart_and_removed_with_its_endpoint<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    store
        .create_endpoint(endpoint(EP_A, "acct"), 10)
        .await
        .unwrap();
    let described = ClientCertificate {
        subject: "CN=client".into(),
        not_after: START + 86_400_000,
        sha256: "ab".repeat(32),
    };
    // Larger than one row of the embedded store: kept in pieces there.
    let chain = format!("-----BEGIN CERTIFICATE-----\n{}\n", "A".repeat(20_000));
    let key = "-----BEGIN PRIVATE KEY-----\nKEY\n";
    let ep = store
        .set_client_certificate(EP_A, Some((&chain, key, described.clone())), START)
        .await
        .unwrap()
        .expect("exists");
    assert_eq!(
        ep.client_certificate.as_ref(),
        Some(&described),
        "{}",
        s.name
    );
    assert_eq!(
        store.client_certificate_pem(EP_A).await.unwrap(),
        Some((chain.clone(), key.to_string())),
        "{}",
        s.name
    );
    store
        .set_client_certificate(EP_A, None, START + 1)
        .await
        .unwrap();
    assert_eq!(
        store.client_certificate_pem(EP_A).await.unwrap(),
        None,
        "{}",
        s.name
    );
    assert!(
        store.endpoint(EP_A).unwrap().client_certificate.is_none(),
        "{}",
        s.name
    );
    store
        .set_client_certificate(EP_A, Some((&chain, key, described)), START + 2)
        .await
        .unwrap();
    store.delete_endpoint(EP_A).await.unwrap();
    assert_eq!(
        store.client_certificate_pem(EP_A).await.unwrap(),
        None,
        "{}",
        s.name
    );
    assert!(
        store
            .set_client_certificate("ep_01HZZZZZZZZZZZZZZZZZZZZZZD", None, START)
            .await
            .unwrap()
            .is_none(),
        "{}",
        s.name
    );
}

pub async fn a_deleted_endpoints_waiting_deliveries_are_made_due_at_once<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    store
        .create_endpoint(endpoint(EP_A, "acct"), 10)
        .await
        .unwrap();
    let out = store
        .ingest_events(vec![event("acct", None, START), event("acct", None, START)])
        .await
        .unwrap();
    let first = created(&out[0]).1[0].id.clone();
    assert_eq!(store.endpoint_pending(EP_A).await.unwrap(), 2, "{}", s.name);
    // One waits for a later attempt (a manual change puts it an hour out).
    store
        .change_delivery(&first, |d| Some((retried(d, START + 3_600_000), ())))
        .await
        .unwrap();
    store.delete_endpoint(EP_A).await.unwrap();
    let moved = store.expedite_endpoint(EP_A, START + 5).await.unwrap();
    assert!(moved >= 1, "{}: the later one is due now ({moved})", s.name);
    let d = store.delivery(&first).await.unwrap().expect("stored");
    assert!(
        d.next_attempt_at.is_some_and(|at| at <= START + 5),
        "{}: {d:?}",
        s.name
    );
}
