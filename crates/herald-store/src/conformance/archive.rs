//! The archive: pages exported and imported, a copy's marks, and a purge that leaves no debounce window.

use super::*;

/// The archive's operations by name: `export_events` pages down from the newest with a
/// cursor, `is_empty` tells an empty store, `import_events` and `finish_import` write the pages
/// into another store of the same kind, which then exports the same events.
pub async fn the_archive_operations_page_import_and_finish<H: Harness>(s: Subject<H>) {
    let store = &*s.store;
    assert!(store.is_empty().await.unwrap(), "{}: a new store", s.name);
    for i in 0..3 {
        let mut e = event("acct", None, START + i);
        // The middle event keeps a trace context; the copy keeps it too.
        e.trace = (i == 1).then(trace_context);
        store.ingest_events(vec![e]).await.unwrap();
    }
    assert!(!store.is_empty().await.unwrap(), "{}", s.name);
    let (first, next) = store.export_events(None, 2).await.unwrap();
    assert_eq!(first.len(), 2, "{}", s.name);
    let next = next.unwrap_or_else(|| panic!("{}: a cursor after a full page", s.name));
    let (second, end) = store.export_events(Some(next), 2).await.unwrap();
    assert_eq!((second.len(), end), (1, None), "{}", s.name);
    let ids = |page: &[crate::EventHistory]| -> Vec<String> {
        page.iter().map(|h| h.meta.id.clone()).collect()
    };
    let mut all = first.clone();
    all.extend(second.iter().cloned());
    let mut sorted = ids(&all);
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(ids(&all), sorted, "{}: newest first", s.name);

    let target = s.another().await;
    assert!(target.store.is_empty().await.unwrap(), "{}", s.name);
    target.store.import_events(first, START).await.unwrap();
    target.store.import_events(second, START).await.unwrap();
    target.store.finish_import().await.unwrap();
    let (copied, none) = target.store.export_events(None, 10).await.unwrap();
    assert_eq!(none, None, "{}", s.name);
    assert_eq!(ids(&copied), ids(&all), "{}", s.name);
    for (a, b) in copied.iter().zip(&all) {
        assert_eq!(a.payload, b.payload, "{}", s.name);
        assert_eq!(a.deliveries.len(), b.deliveries.len(), "{}", s.name);
        assert_eq!(a.meta.trace, b.meta.trace, "{}", s.name);
    }
    let traced: Vec<_> = copied.iter().filter_map(|h| h.meta.trace.clone()).collect();
    assert_eq!(
        traced,
        vec![trace_context()],
        "{}: the one context, copied",
        s.name
    );
}

/// A copy's target records how far the copy got, resumes from there, refuses another source
/// and a store it did not fill; the embedded store is no copy's target at all.
pub async fn a_copy_is_begun_marked_resumed_and_finished_on_a_clusters_store_only<H: Harness>(
    s: Subject<H>,
) {
    let store = &*s.store;
    let begun = store.begin_copy("/srv/one", START).await;
    if s.name == "sled" {
        assert!(matches!(begun, Err(StoreError::Format(_))), "{begun:?}");
        let marked = store.keep_copy_mark("/srv/one", None, 0, false).await;
        assert!(matches!(marked, Err(StoreError::Format(_))), "{marked:?}");
        return;
    }
    assert_eq!(begun.unwrap(), CopyStart::Fresh);
    let again = store.begin_copy("/srv/one", START).await.unwrap();
    assert_eq!(
        again,
        CopyStart::Resumed {
            cursor: None,
            copied: 0
        },
        "begun, nothing marked: it starts over"
    );
    store
        .keep_copy_mark("/srv/one", Some("evt_01HZZZZZZZZZZZZZZZZZZZZZZZ"), 7, false)
        .await
        .unwrap();
    assert_eq!(
        store.begin_copy("/srv/one", START).await.unwrap(),
        CopyStart::Resumed {
            cursor: Some("evt_01HZZZZZZZZZZZZZZZZZZZZZZZ".into()),
            copied: 7
        }
    );
    let other = store.begin_copy("/srv/two", START).await;
    assert!(matches!(other, Err(StoreError::Format(_))), "{other:?}");
    store
        .keep_copy_mark("/srv/one", None, 9, true)
        .await
        .unwrap();
    assert_eq!(
        store.begin_copy("/srv/one", START).await.unwrap(),
        CopyStart::Finished
    );

    // A store that holds what no copy wrote is refused, and nothing is recorded.
    let used = s.another().await;
    used.store
        .set_account_plan("acct", Some("pro".into()))
        .await
        .unwrap();
    let refused = used.store.begin_copy("/srv/one", START).await;
    assert!(matches!(refused, Err(StoreError::Format(_))), "{refused:?}");
    let still = used.store.begin_copy("/srv/one", START).await;
    assert!(matches!(still, Err(StoreError::Format(_))), "{still:?}");
}

/// A purged account leaves no debounce window either, whatever its key: one keyed by a
/// payload field (no `debounce_key` in the request) goes too, so the same event after the
/// purge is not `debounced`; the other account's window of the same key stays.
pub async fn a_purged_account_leaves_no_debounce_window<H: Harness>(s: Subject<H>) {
    let store = &*s.store;
    let located = |account: &str| {
        let mut e = event_to(account, if account == "acct" { EP_A } else { EP_B }, None);
        e.event_type = "loc.changed".into();
        e.payload = Bytes::from_static(b"{\"loc\":\"L1\"}");
        e.debounce = Some(DebounceRule {
            key: format!("{account}\0loc.changed\0L1"),
            window_ms: 3_600_000,
            trailing: false,
        });
        e
    };
    for (id, account) in [(EP_A, "acct"), (EP_B, "other")] {
        store
            .create_endpoint(endpoint(id, account), 10)
            .await
            .unwrap();
    }
    store
        .ingest_events(vec![located("acct"), located("other")])
        .await
        .unwrap();
    store.purge_account("acct").await.unwrap();
    store
        .create_endpoint(endpoint(EP_A, "acct"), 10)
        .await
        .unwrap();
    let out = store
        .ingest_events(vec![located("acct"), located("other")])
        .await
        .unwrap();
    assert_eq!(
        created(&out[0]).1[0].state,
        DeliveryState::Pending,
        "{}: the purged account's window is gone",
        s.name
    );
    assert_eq!(
        created(&out[1]).1[0].state,
        DeliveryState::Skipped,
        "{}: the other's stays",
        s.name
    );
}
