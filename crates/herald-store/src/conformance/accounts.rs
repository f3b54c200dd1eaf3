//! Accounts: plans, secrets and quotas, alert addresses and claims, breakers, portal sessions, rate limits, applications and kept answers.

use super::*;

pub async fn plans_secrets_and_quotas_are_kept_per_account<H: Harness>(s: Subject<H>) {
    let store = &*s.store;
    assert_eq!(store.account_plan("acct"), None, "{}", s.name);
    store
        .set_account_plan("acct", Some("pro".into()))
        .await
        .unwrap();
    assert_eq!(
        store.account_plan("acct").as_deref(),
        Some("pro"),
        "{}",
        s.name
    );
    assert!(
        store.account_ids().contains(&"acct".to_string()),
        "{}",
        s.name
    );
    store.set_account_plan("acct", None).await.unwrap();
    assert_eq!(store.account_plan("acct"), None, "{}", s.name);

    store
        .set_account_secret("acct", "API_KEY", "s3cret")
        .await
        .unwrap();
    store
        .set_account_secret("acct", "API_KEY", "s3cret-2")
        .await
        .unwrap();
    assert_eq!(
        store
            .account_secret("acct", "API_KEY")
            .await
            .unwrap()
            .as_deref(),
        Some("s3cret-2"),
        "{}",
        s.name
    );
    assert_eq!(
        store.account_secret("other", "API_KEY").await.unwrap(),
        None,
        "{}",
        s.name
    );
    assert_eq!(
        store.account_secrets().await.unwrap(),
        vec![(
            "acct".to_string(),
            "API_KEY".to_string(),
            "s3cret-2".to_string()
        )],
        "{}: every account secret, as the archive reads them",
        s.name
    );

    // Exactly `per_minute` takes succeed, even when asked all at once.
    let w = windows(s.clock.now_ms());
    let limits = Limits {
        per_minute: Some(5),
        per_day: Some(100),
    };
    let mut takes = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let store = s.store.clone();
        takes.spawn(async move { store.quota_take("acct", w, limits).await.unwrap() });
    }
    let mut granted = 0;
    while let Some(t) = takes.join_next().await {
        granted += usize::from(t.unwrap());
    }
    assert_eq!(granted, 5, "{}", s.name);
    assert_eq!(
        store.quota_usage("acct", w).await.unwrap(),
        (5, 5),
        "{}",
        s.name
    );
    assert_eq!(
        store.quota_usage("other", w).await.unwrap(),
        (0, 0),
        "{}",
        s.name
    );
    // The next minute has room again; the day counts on.
    let next = windows(s.clock.now_ms() + 60_000);
    assert!(
        store.quota_take("acct", next, limits).await.unwrap(),
        "{}",
        s.name
    );
    assert_eq!(
        store.quota_usage("acct", next).await.unwrap(),
        (1, 6),
        "{}",
        s.name
    );
    // A restore sets the usage a backup read; takes count on from it.
    store.set_quota_usage("third", next, (4, 40)).await.unwrap();
    assert_eq!(
        store.quota_usage("third", next).await.unwrap(),
        (4, 40),
        "{}",
        s.name
    );
    assert!(
        store.quota_take("third", next, limits).await.unwrap(),
        "{}",
        s.name
    );
    assert!(
        !store.quota_take("third", next, limits).await.unwrap(),
        "{}: the minute is full at 5",
        s.name
    );
    // A window that has passed counts nothing.
    let later = windows(s.clock.now_ms() + 2 * 86_400_000);
    assert_eq!(
        store.quota_usage("third", later).await.unwrap(),
        (0, 0),
        "{}",
        s.name
    );
}

/// Alert addresses sit beside the plan and each is changed alone; an endpoint's alert mark is
/// claimed by exactly one of many callers at once (as two nodes deciding one mail would).
pub async fn alert_addresses_stay_apart_from_the_plan_and_an_alert_is_claimed_once<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    let hour = 3_600_000;
    assert!(
        store.alert_emails("acct").await.unwrap().is_empty(),
        "{}",
        s.name
    );
    store
        .set_account_plan("acct", Some("pro".into()))
        .await
        .unwrap();
    store
        .set_alert_emails("acct", vec!["a@acct.test".into(), "b@acct.test".into()])
        .await
        .unwrap();
    store.set_account_plan("acct", None).await.unwrap();
    assert_eq!(
        store.alert_emails("acct").await.unwrap(),
        ["a@acct.test", "b@acct.test"],
        "{}: removing the plan keeps the addresses",
        s.name
    );
    store
        .set_account_plan("acct", Some("pro".into()))
        .await
        .unwrap();
    store.set_alert_emails("acct", vec![]).await.unwrap();
    assert_eq!(
        store.account_plan("acct").as_deref(),
        Some("pro"),
        "{}: clearing the addresses keeps the plan",
        s.name
    );
    assert!(
        store.all_alert_emails().await.unwrap().is_empty(),
        "{}",
        s.name
    );
    store
        .set_alert_emails("b", vec!["x@b.test".into()])
        .await
        .unwrap();
    store
        .set_alert_emails("a", vec!["y@a.test".into()])
        .await
        .unwrap();
    assert_eq!(
        store.all_alert_emails().await.unwrap(),
        vec![
            ("a".to_string(), vec!["y@a.test".to_string()]),
            ("b".to_string(), vec!["x@b.test".to_string()]),
        ],
        "{}",
        s.name
    );

    // Twelve claims of one failing mail at once: one wins.
    store
        .create_endpoint(endpoint(EP_A, "acct"), 10)
        .await
        .unwrap();
    let mut claims = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let store = s.store.clone();
        claims
            .spawn(async move { claim_of(&*store, EP_A, AlertKind::Failing, START, 1_000).await });
    }
    let mut won = 0;
    while let Some(c) = claims.join_next().await {
        won += usize::from(c.unwrap());
    }
    assert_eq!(won, 1, "{}", s.name);
    let claim = |kind, at| {
        let store = s.store.clone();
        async move { claim_of(&*store, EP_A, kind, at, 1_000).await }
    };
    assert!(claim(AlertKind::Recovered, START + 1).await, "{}", s.name);
    assert!(!claim(AlertKind::Recovered, START + 2).await, "{}", s.name);
    assert!(
        !claim(AlertKind::Failing, START + hour - 1).await,
        "{}",
        s.name
    );
    assert!(claim(AlertKind::Failing, START + hour).await, "{}", s.name);
    // Another endpoint's mark is its own; a deleted endpoint's mark goes with it.
    store
        .create_endpoint(endpoint(EP_B, "acct"), 10)
        .await
        .unwrap();
    assert!(claim_b(store, START).await, "{}", s.name);
    assert!(!claim_b(store, START + 1).await, "{}", s.name);
    assert!(store.delete_endpoint(EP_B).await.unwrap());
    // A claim for an endpoint that is gone (one racing its deletion or a purge) writes no
    // mark: created again, the endpoint starts with none.
    assert_eq!(
        claim_for(store, EP_B, AlertKind::Failing, START + 2, 1_000).await,
        Claimed::Gone,
        "{}",
        s.name
    );
    store
        .create_endpoint(endpoint(EP_B, "acct"), 10)
        .await
        .unwrap();
    assert!(claim_b(store, START + 3).await, "{}", s.name);
}

pub async fn claim_b<S: Store>(store: &S, at: i64) -> bool {
    claim_of(store, EP_B, AlertKind::Failing, at, 1_000).await
}

/// A claim of `kind` for endpoint `ep` of account "acct" at `at`, with an hour's interval and
/// at most `max` mails an hour.
pub async fn claim_for<S: Store>(
    store: &S,
    ep: &str,
    kind: AlertKind,
    at: i64,
    max: u32,
) -> Claimed {
    store
        .claim_alert(AlertClaim {
            endpoint_id: ep,
            account_id: "acct",
            kind,
            now: at,
            min_interval_ms: 3_600_000,
            max_per_hour: max,
        })
        .await
        .unwrap()
}

pub async fn claim_of<S: Store>(store: &S, ep: &str, kind: AlertKind, at: i64, max: u32) -> bool {
    matches!(
        claim_for(store, ep, kind, at, max).await,
        Claimed::Send { .. }
    )
}

/// An account's mails are capped per UTC clock hour across its endpoints and across callers
/// at once (as nodes of a cluster); a mark given back lets the next mail through but the hour
/// keeps counting it; a give-back never brings back a deleted endpoint's mark.
pub async fn alert_mails_are_capped_per_account_per_hour_and_a_claim_can_be_given_back<
    H: Harness,
>(
    s: Subject<H>,
) {
    let store = &*s.store;
    let hour = 3_600_000;
    // START is not on an hour: the window is the clock hour, not an hour from the first.
    let first_hour = START - START.rem_euclid(hour);
    let eps: Vec<String> = (0..8)
        .map(|i| format!("ep_01HZZZZZZZZZZZZZZZZZZZZZC{i}"))
        .collect();
    for ep in &eps {
        store
            .create_endpoint(endpoint(ep, "acct"), 20)
            .await
            .unwrap();
    }
    // Eight disabled mails at once, for eight endpoints, at most 3 an hour: 3 go.
    let mut claims = tokio::task::JoinSet::new();
    for ep in eps.clone() {
        let store = s.store.clone();
        claims.spawn(async move { claim_for(&*store, &ep, AlertKind::Disabled, START, 3).await });
    }
    let mut verdicts = Vec::new();
    while let Some(c) = claims.join_next().await {
        verdicts.push(c.unwrap());
    }
    let sent = verdicts
        .iter()
        .filter(|v| matches!(v, Claimed::Send { .. }))
        .count();
    let over = verdicts.iter().filter(|v| **v == Claimed::OverCap).count();
    assert_eq!((sent, over), (3, 5), "{}: {verdicts:?}", s.name);
    // Another account has its own hour.
    store
        .create_endpoint(endpoint(EP_A, "other"), 20)
        .await
        .unwrap();
    let other = store
        .claim_alert(AlertClaim {
            endpoint_id: EP_A,
            account_id: "other",
            kind: AlertKind::Failing,
            now: START,
            min_interval_ms: hour,
            max_per_hour: 3,
        })
        .await
        .unwrap();
    assert!(
        matches!(other, Claimed::Send { .. }),
        "{}: {other:?}",
        s.name
    );
    // The next clock hour has room again.
    assert!(
        claim_of(store, &eps[0], AlertKind::Disabled, first_hour + hour, 3).await,
        "{}",
        s.name
    );

    // A failing mail given back: the next failing mail within min_interval goes, and the
    // hour still counts both.
    let Claimed::Send { before, after } =
        claim_for(store, &eps[1], AlertKind::Failing, first_hour + hour + 1, 3).await
    else {
        panic!("{}: the failing mail is claimed", s.name);
    };
    assert_eq!(before.failing_at, None, "{}", s.name);
    assert_eq!(after.failing_at, Some(first_hour + hour + 1), "{}", s.name);
    assert!(
        !claim_of(store, &eps[1], AlertKind::Failing, first_hour + hour + 2, 3).await,
        "{}: within min_interval",
        s.name
    );
    assert!(
        store.give_back_alert(&eps[1], after, before).await.unwrap(),
        "{}",
        s.name
    );
    assert!(
        !store.give_back_alert(&eps[1], after, before).await.unwrap(),
        "{}: given back once",
        s.name
    );
    assert!(
        claim_of(store, &eps[1], AlertKind::Failing, first_hour + hour + 3, 3).await,
        "{}: given back, the next failing mail goes",
        s.name
    );
    assert_eq!(
        claim_for(
            store,
            &eps[2],
            AlertKind::Disabled,
            first_hour + hour + 4,
            3
        )
        .await,
        Claimed::OverCap,
        "{}: the given-back mail still counts",
        s.name
    );
    // A give-back after the endpoint is deleted brings no mark back.
    let Claimed::Send { before, after } = claim_for(
        store,
        &eps[3],
        AlertKind::Disabled,
        first_hour + 2 * hour,
        3,
    )
    .await
    else {
        panic!("{}: the disabled mail is claimed", s.name);
    };
    assert!(store.delete_endpoint(&eps[3]).await.unwrap());
    assert!(!store.give_back_alert(&eps[3], after, before).await.unwrap());
    assert_eq!(
        claim_for(
            store,
            &eps[3],
            AlertKind::Disabled,
            first_hour + 2 * hour,
            3
        )
        .await,
        Claimed::Gone,
        "{}",
        s.name
    );
}

/// A mail no endpoint's mark governs (a test mail) counts toward the same hourly cap as the
/// claims, exactly up to the cap however many callers count at once, per account and per
/// clock hour.
pub async fn a_mail_without_an_endpoint_counts_toward_the_accounts_hour<H: Harness>(s: Subject<H>) {
    let store = &*s.store;
    let hour = 3_600_000;
    let first_hour = START - START.rem_euclid(hour);
    store
        .create_endpoint(endpoint(EP_A, "acct"), 20)
        .await
        .unwrap();
    assert!(
        claim_of(store, EP_A, AlertKind::Disabled, START, 3).await,
        "{}: the first mail of the hour is claimed",
        s.name
    );
    let mut counts = tokio::task::JoinSet::new();
    for _ in 0..5 {
        let store = s.store.clone();
        counts.spawn(async move { store.count_alert_mail("acct", START, 3).await.unwrap() });
    }
    let mut counted = 0;
    while let Some(c) = counts.join_next().await {
        counted += usize::from(c.unwrap());
    }
    assert_eq!(
        counted, 2,
        "{}: one claim and two test mails fill 3",
        s.name
    );
    assert_eq!(
        claim_for(store, EP_A, AlertKind::Failing, START + 1, 3).await,
        Claimed::OverCap,
        "{}: the test mails count toward the claims' cap",
        s.name
    );
    assert!(
        store.count_alert_mail("other", START, 3).await.unwrap(),
        "{}: another account has its own hour",
        s.name
    );
    assert!(
        store
            .count_alert_mail("acct", first_hour + hour, 3)
            .await
            .unwrap(),
        "{}: the next clock hour has room again",
        s.name
    );
    assert!(
        !store
            .count_alert_mail("acct", first_hour + hour, 0)
            .await
            .unwrap(),
        "{}: a cap of 0 counts nothing",
        s.name
    );
}

pub async fn a_breaker_changes_one_change_at_a_time_and_open_ones_are_listed<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    let day = 86_400_000;
    assert_eq!(
        store.breaker(EP_A).await.unwrap(),
        Breaker::default(),
        "{}",
        s.name
    );
    assert!(
        store.open_breakers().await.unwrap().is_empty(),
        "{}",
        s.name
    );
    let mut changes = Vec::new();
    for i in 0..10 {
        let at = START + i;
        changes.push(
            store
                .change_breaker(EP_A, at, move |br| br.record(false, false, at, day))
                .await
                .unwrap(),
        );
    }
    assert_eq!(changes[..9], [None; 9], "{}", s.name);
    assert_eq!(changes[9], Some(Change::Opened), "{}", s.name);
    let open = store.breaker(EP_A).await.unwrap();
    assert_eq!(open.phase, Phase::Open, "{}", s.name);
    assert_eq!(open.consecutive_failures, 10, "{}", s.name);
    assert_eq!(
        store.open_breakers().await.unwrap(),
        vec![(EP_A.to_string(), open)],
        "{}",
        s.name
    );
    let at = START + 60_000;
    let recovered = store
        .change_breaker(EP_A, at, move |br| br.record(true, true, at, day))
        .await
        .unwrap();
    assert_eq!(recovered, Some(Change::Recovered), "{}", s.name);
    assert_eq!(
        store.breaker(EP_A).await.unwrap(),
        Breaker::default(),
        "{}",
        s.name
    );
    assert!(
        store.open_breakers().await.unwrap().is_empty(),
        "{}",
        s.name
    );
}

pub async fn a_portal_session_opens_until_it_expires_or_is_revoked<H: Harness>(s: Subject<H>) {
    let store = &*s.store;
    let session = session("ps_1", true, START + 3_600_000);
    store
        .create_portal_session(&session, token_hash("hps_token"))
        .await
        .unwrap();
    let found = store
        .portal_session("hps_token", START + 1)
        .await
        .unwrap()
        .expect("open");
    assert_eq!(
        (
            found.id.as_str(),
            found.account_id.as_str(),
            found.read_only
        ),
        ("ps_1", "acct", true),
        "{}",
        s.name
    );
    assert!(
        store
            .portal_session("hps_token", START + 3_600_000)
            .await
            .unwrap()
            .is_none(),
        "{}: expired",
        s.name
    );
    assert!(
        store
            .portal_session("hps_other", START)
            .await
            .unwrap()
            .is_none(),
        "{}",
        s.name
    );
    assert!(
        store.revoke_portal_session("ps_1").await.unwrap(),
        "{}",
        s.name
    );
    assert!(
        !store.revoke_portal_session("ps_1").await.unwrap(),
        "{}",
        s.name
    );
    assert!(
        store
            .portal_session("hps_token", START + 1)
            .await
            .unwrap()
            .is_none(),
        "{}: revoked",
        s.name
    );
}

pub async fn a_rate_limit_bucket_gives_its_burst_then_one_token_per_interval<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    let limit = RateLimit { per_second: 2.0 };
    let now = s.clock.now_ms();
    for i in 0..2 {
        assert_eq!(
            store.take_token(EP_A, limit, now).await.unwrap(),
            Ok(()),
            "{}: token {i} of the burst",
            s.name
        );
    }
    let next = store
        .take_token(EP_A, limit, now)
        .await
        .unwrap()
        .expect_err("the burst is spent");
    assert_eq!(next, now + 500, "{}: one token each half second", s.name);
    assert_eq!(
        store.take_token(EP_A, limit, next).await.unwrap(),
        Ok(()),
        "{}",
        s.name
    );
    assert!(
        store.take_token(EP_A, limit, next).await.unwrap().is_err(),
        "{}",
        s.name
    );
    // Each endpoint has its own bucket.
    assert_eq!(
        store.take_token(EP_B, limit, now).await.unwrap(),
        Ok(()),
        "{}",
        s.name
    );
}

pub fn application(id: &str) -> Application {
    Application {
        id: id.into(),
        name: format!("{id}'s name"),
        uid: Some(id.into()),
        metadata: [("plan".to_string(), "gold".to_string())].into(),
        rate_limit: Some(5),
        created_at: START,
        updated_at: START + 1,
    }
}

pub fn answer(at: i64, status: u16) -> ApiAnswer {
    ApiAnswer {
        status,
        body: format!("{{\"at\":{at}}}"),
        at,
        event_id: None,
    }
}

pub async fn applications_and_kept_answers_are_per_account_and_go_with_a_purge<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    let n = s.name;
    store.put_application(&application("acct")).await.unwrap();
    store.put_application(&application("other")).await.unwrap();
    let mut changed = application("acct");
    changed.name = "renamed".into();
    store.put_application(&changed).await.unwrap();
    assert_eq!(
        store.application("acct").await.unwrap(),
        Some(changed),
        "{n}"
    );
    assert_eq!(store.application("nobody").await.unwrap(), None, "{n}");
    let ids: Vec<String> = store
        .applications()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(ids, ["acct", "other"], "{n}");

    // The first answer of a key within the window stays; another account's key is its own.
    let first = answer(START, 201);
    assert_eq!(
        store
            .keep_api_answer("acct", "k", first.clone())
            .await
            .unwrap(),
        first,
        "{n}"
    );
    let again = store
        .keep_api_answer("acct", "k", answer(START + 5, 409))
        .await
        .unwrap();
    assert_eq!(again, first, "{n}: a second answer replaced the first");
    let other = answer(START + 1, 202);
    assert_eq!(
        store
            .keep_api_answer("other", "k", other.clone())
            .await
            .unwrap(),
        other,
        "{n}"
    );
    assert_eq!(
        store.api_answer("acct", "k", START + 10).await.unwrap(),
        Some(first.clone()),
        "{n}"
    );
    assert_eq!(
        store.api_answer("acct", "missing", START).await.unwrap(),
        None,
        "{n}"
    );
    let expired = START + IDEMPOTENCY_WINDOW_MS;
    assert_eq!(
        store.api_answer("acct", "k", expired).await.unwrap(),
        None,
        "{n}"
    );
    let later = answer(expired, 200);
    assert_eq!(
        store
            .keep_api_answer("acct", "k", later.clone())
            .await
            .unwrap(),
        later,
        "{n}"
    );
    assert_eq!(store.api_answers().await.unwrap().len(), 2, "{n}");

    // A message's eventId is its idempotency key; its account's first event is kept.
    assert_eq!(store.first_event_at("acct").await.unwrap(), None, "{n}");
    let out = store
        .ingest_events(vec![event("acct", Some("evt-key"), START + 7)])
        .await
        .unwrap();
    let (id, _) = created(&out[0]);
    let now = START + 8;
    assert_eq!(
        store.keyed_event("acct", "evt-key", now).await.unwrap(),
        Some(id),
        "{n}"
    );
    assert_eq!(
        store.keyed_event("other", "evt-key", now).await.unwrap(),
        None,
        "{n}"
    );
    assert_eq!(
        store
            .keyed_event("acct", "evt-key", START + 7 + IDEMPOTENCY_WINDOW_MS)
            .await
            .unwrap(),
        None,
        "{n}"
    );
    assert_eq!(
        store.first_event_at("acct").await.unwrap(),
        Some(START + 7),
        "{n}"
    );

    // A message's request key keeps its answer (the event) in the event's own commit.
    let mut keyed = event("acct", None, START + 9);
    keyed.request_key = Some("req-1".into());
    let out = store.ingest_events(vec![keyed]).await.unwrap();
    let (kept_id, _) = created(&out[0]);
    let kept = store.api_answer("acct", "req-1", START + 10).await.unwrap();
    let kept = kept.unwrap_or_else(|| panic!("{n}: the message's answer was not kept"));
    assert_eq!(
        (kept.status, kept.event_id),
        (202, Some(kept_id.clone())),
        "{n}"
    );
    // The commit claims the request key: the same request again (in a later batch, or twice
    // in one) is answered by the first message and stores nothing; a key whose kept answer
    // is not a message is answered by that answer. The key is decided before the eventId.
    let keyed = |key: &str, idem: Option<&str>, at| {
        let mut e = event("acct", idem, at);
        e.request_key = Some(key.into());
        e
    };
    let out = store
        .ingest_events(vec![
            keyed("req-1", Some("evt-new"), START + 11),
            keyed("req-2", None, START + 11),
            keyed("req-2", None, START + 11),
            keyed("k", None, START + 11),
        ])
        .await
        .unwrap();
    let (req_2, _) = created(&out[1]);
    assert!(
        matches!(&out[0], IngestOutcome::Repeated { event_id: Some(e) } if *e == kept_id),
        "{n}: {out:?}"
    );
    assert!(
        matches!(&out[2], IngestOutcome::Repeated { event_id: Some(e) } if *e == req_2),
        "{n}: {out:?}"
    );
    assert!(
        matches!(&out[3], IngestOutcome::Repeated { event_id: None }),
        "{n}: {out:?}"
    );
    // A message refused as a duplicate by its eventId leaves its request key unclaimed.
    let out = store
        .ingest_events(vec![keyed("req-3", Some("evt-key"), START + 12)])
        .await
        .unwrap();
    assert!(
        matches!(&out[0], IngestOutcome::Duplicate { .. }),
        "{n}: {out:?}"
    );
    assert_eq!(
        store.api_answer("acct", "req-3", START + 12).await.unwrap(),
        None,
        "{n}"
    );
    let out = store
        .ingest_events(vec![keyed("req-3", None, START + 12)])
        .await
        .unwrap();
    created(&out[0]);

    // A purge takes the account's record and answers; the other account keeps its own.
    store.purge_account("acct").await.unwrap();
    assert_eq!(store.application("acct").await.unwrap(), None, "{n}");
    assert_eq!(
        store.api_answer("acct", "k", expired + 1).await.unwrap(),
        None,
        "{n}"
    );
    let gone = store.api_answer("acct", "req-1", START + 10).await.unwrap();
    assert_eq!(gone, None, "{n}: the message's kept answer stayed");
    assert_eq!(store.first_event_at("acct").await.unwrap(), None, "{n}");
    assert_eq!(
        store.application("other").await.unwrap(),
        Some(application("other")),
        "{n}"
    );
    assert_eq!(
        store.api_answer("other", "k", START + 2).await.unwrap(),
        Some(other),
        "{n}"
    );

    // The sweep lets answers go once past the window.
    let stop = AtomicBool::new(false);
    let retained = Retained {
        retention_ms: 10 * IDEMPOTENCY_WINDOW_MS,
        fold_after_ms: 10 * IDEMPOTENCY_WINDOW_MS,
    };
    let sweep_at = START + 2 * IDEMPOTENCY_WINDOW_MS;
    s.clock.set(sweep_at);
    store.sweep(sweep_at, retained, &stop).await;
    assert!(
        store.api_answers().await.unwrap().is_empty(),
        "{n}: an old answer stayed"
    );
}
