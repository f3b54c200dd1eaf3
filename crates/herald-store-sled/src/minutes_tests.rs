//! The charts' minute rows: keyed by hour first, so trimming the past day is a key range; an
//! endpoint's minutes read across hours; a store that keyed them by endpoint first (format 9)
//! re-keys them at open.

use super::*;
use herald_core::model::Status;
use herald_store::Minute;

const EP_A: &str = "ep_01HZZZZZZZZZZZZZZZZZZZZZZA";
const EP_B: &str = "ep_01HZZZZZZZZZZZZZZZZZZZZZZB";
const HOUR: Millis = 3_600_000;

fn delivered(at: Millis, n: u32) -> Minute {
    let mut m = Minute {
        at,
        latency_sum_ms: u64::from(n) * 10,
        latency_max_ms: 10,
        ..Minute::default()
    };
    m.counts[Status::Delivered as usize] = n;
    m
}

/// The minute of each row in the tree's key order.
fn minutes_in_key_order(store: &SledStore) -> Vec<Millis> {
    store
        .inner
        .trees
        .minutes
        .iter()
        .map(|item| {
            let (k, _) = item.unwrap();
            minutes::at_of(&k).expect("a minute row's key")
        })
        .collect()
}

/// Rows of two endpoints over three hours lie in hour order, so a trim removes a prefix of the
/// tree; reads of one endpoint span the hours; a trim mid-hour keeps that hour's later rows;
/// dropping an endpoint's minutes leaves the other's.
#[tokio::test]
async fn minute_rows_lie_in_hour_order_and_trim_as_a_key_range() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    for id in [EP_A, EP_B] {
        store.put_endpoint(endpoint(id, "acct")).await.unwrap();
    }
    let h0 = T0.div_euclid(HOUR) * HOUR;
    let ats = [
        h0,
        h0 + 59 * Minute::MS,
        h0 + HOUR + 5 * Minute::MS,
        h0 + 2 * HOUR,
    ];
    let mut rows = Vec::new();
    for (i, at) in ats.iter().enumerate() {
        rows.push((EP_B.to_string(), delivered(*at, 1)));
        rows.push((EP_A.to_string(), delivered(*at, i as u32 + 1)));
    }
    store.add_minutes(rows).unwrap();
    let order = minutes_in_key_order(&store);
    assert_eq!(order.len(), 8);
    assert!(
        order.windows(2).all(|w| w[0] / HOUR <= w[1] / HOUR),
        "rows in hour order across endpoints: {order:?}"
    );

    let a = store.endpoint_minutes(EP_A, 0).unwrap();
    assert_eq!(a.iter().map(|m| m.at).collect::<Vec<_>>(), ats.to_vec());
    assert_eq!(
        a.iter().map(|m| m.delivered()).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    let later = store.endpoint_minutes(EP_A, h0 + 30 * Minute::MS).unwrap();
    assert_eq!(
        later.iter().map(|m| m.at).collect::<Vec<_>>(),
        ats[1..].to_vec()
    );

    // Cut in the second hour, after its row: the first hour and that row go.
    let gone = store.trim_minutes(h0 + HOUR + 6 * Minute::MS).unwrap();
    assert_eq!(gone, 6);
    assert_eq!(minutes_in_key_order(&store), [h0 + 2 * HOUR, h0 + 2 * HOUR]);
    store.drop_minutes(EP_A).unwrap();
    assert!(store.endpoint_minutes(EP_A, 0).unwrap().is_empty());
    assert_eq!(store.endpoint_minutes(EP_B, 0).unwrap().len(), 1);
    close(store);
}

/// A store in format 9 (rows keyed by endpoint id, a NUL and the minute) opens with every row
/// re-keyed: each endpoint reads its minutes as they were, and the trim finds them.
#[tokio::test]
async fn a_format_9_store_rekeys_its_minute_rows() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let h0 = T0.div_euclid(HOUR) * HOUR;
    {
        let store = open(dir.path(), &clock);
        close(store);
        let db = open_sled(sled::Config::new().path(dir.path()), dir.path()).unwrap();
        let tree = db.open_tree("minutes").unwrap();
        // 2,500 rows: more than one batch of the migration.
        for i in 0..1250i64 {
            for ep in [EP_A, EP_B] {
                let mut k = ep.as_bytes().to_vec();
                k.push(0);
                k.extend_from_slice(&(h0 + i * Minute::MS).to_be_bytes());
                let v = format!(
                    r#"{{"counts":{{"delivered":{}}},"latency_sum_ms":5,"latency_max_ms":5}}"#,
                    i + 1
                );
                tree.insert(k, v.as_bytes()).unwrap();
            }
        }
        db.open_tree("meta")
            .unwrap()
            .insert(meta_keys::FORMAT, &[9])
            .unwrap();
        db.flush().unwrap();
    }
    let store = open(dir.path(), &clock);
    let format = store.inner.trees.meta.get(meta_keys::FORMAT).unwrap();
    assert_eq!(format.unwrap().as_ref(), [FORMAT]);
    for ep in [EP_A, EP_B] {
        let got = store.endpoint_minutes(ep, 0).unwrap();
        assert_eq!(got.len(), 1250, "{ep}");
        assert_eq!(got[0].at, h0);
        assert_eq!(got[0].delivered(), 1);
        assert_eq!(got[1249].at, h0 + 1249 * Minute::MS);
        assert_eq!(got[1249].delivered(), 1250);
    }
    let order = minutes_in_key_order(&store);
    assert!(order.windows(2).all(|w| w[0] / HOUR <= w[1] / HOUR));
    assert_eq!(store.trim_minutes(h0 + 1000 * Minute::MS).unwrap(), 2000);
    assert_eq!(store.endpoint_minutes(EP_A, 0).unwrap().len(), 250);
    close(store);
}

/// Format 13 to 14: the minutes kept are summed into their hours, latency buckets and all, and
/// running the step again writes the same.
#[tokio::test]
async fn the_format_14_step_sums_the_minutes_into_their_hours() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let h0 = T0.div_euclid(HOUR) * HOUR;
    let mut slow = delivered(h0 + 5 * Minute::MS, 1);
    slow.record(Status::Delivered, 400);
    for (at, m) in [
        (h0, delivered(h0, 2)),
        (h0 + 5 * Minute::MS, slow),
        (h0 + HOUR, delivered(h0 + HOUR, 3)),
    ] {
        let k = minutes::key(EP_A, at);
        store
            .inner
            .trees
            .minutes
            .insert(
                k,
                serde_json::to_vec(&serde_json::json!({
                    "counts": {"delivered": m.delivered()},
                    "latency_sum_ms": m.latency_sum_ms,
                    "latency_max_ms": m.latency_max_ms,
                    "latency_buckets": m.stored_buckets(),
                }))
                .unwrap(),
            )
            .unwrap();
    }
    let trees = &store.inner.trees;
    for _ in 0..2 {
        assert_eq!(
            minutes::hours_from_minutes(&trees.minutes, &trees.hours).unwrap(),
            2
        );
    }
    let hours = store.endpoint_hours(EP_A, 0).unwrap();
    let mut first = delivered(h0, 2);
    first.add(&slow);
    let mut second = delivered(h0 + HOUR, 3);
    second.at = h0 + HOUR;
    assert_eq!(hours, vec![first, second]);
    assert_eq!(
        hours[0].latency_buckets.iter().sum::<u32>(),
        1,
        "the slow one's bucket"
    );
    close(store);
}
