//! Endpoints' secrets in rows of their own: they never count toward the endpoint's size, come
//! back at open, go with the endpoint, and a store that kept them in the record (formats 7 and
//! 8) moves them at open.

use super::*;
use herald_core::model::StoredSecret;

fn secret(n: usize, expires_at: Option<Millis>) -> StoredSecret {
    StoredSecret {
        value: format!("whsec_{}", "k".repeat(40 + n)),
        expires_at,
    }
}

/// The endpoint's rows in the `endpoints` tree: its record's JSON and how many secrets rows.
fn rows(store: &SledStore, id: &str) -> (Option<serde_json::Value>, usize) {
    let tree = &store.inner.trees.endpoints;
    let record = tree
        .get(id.as_bytes())
        .unwrap()
        .map(|v| serde_json::from_slice(&v).unwrap());
    let secrets = tree.scan_prefix([id.as_bytes(), b"\0"].concat()).count();
    (record, secrets)
}

/// An endpoint whose record fills [`herald_store::MAX_ENDPOINT_SIZE`] takes five secrets of
/// 256 bytes; they come back at open and leave with the endpoint.
#[tokio::test]
async fn secrets_are_rows_of_their_own_that_never_count_toward_the_size() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let mut ep = endpoint("ep_01HZZZZZZZZZZZZZZZZZZZZZZA", "acme");
    let record = serde_json::to_vec(&ep).unwrap().len() + ep.id.len();
    ep.description = "d".repeat(herald_store::MAX_ENDPOINT_SIZE - record);
    store
        .put_endpoint(ep.clone())
        .await
        .expect("fits without secrets");
    ep.secrets = (0..5)
        .map(|n| StoredSecret {
            value: "s".repeat(256),
            expires_at: Some(T0 + n),
        })
        .collect();
    store
        .put_endpoint(ep.clone())
        .await
        .expect("secrets do not count");
    let (record, secret_rows) = rows(&store, &ep.id);
    let record = record.expect("record");
    assert!(record.get("secrets").is_none(), "{record}");
    assert_eq!(
        record["description"].as_str().unwrap().len(),
        ep.description.len()
    );
    assert!(secret_rows >= 1);
    close(store);

    let store = open(dir.path(), &clock);
    let got = store.endpoint(&ep.id).expect("endpoint");
    let values = |e: &Endpoint| -> Vec<(String, Option<Millis>)> {
        e.secrets
            .iter()
            .map(|s| (s.value.clone(), s.expires_at))
            .collect()
    };
    assert_eq!(values(&got), values(&ep));
    assert!(store.delete_endpoint(&ep.id).await.unwrap());
    assert_eq!(rows(&store, &ep.id), (None, 0));
    close(store);
    let store = open(dir.path(), &clock);
    assert!(store.endpoint(&ep.id).is_none());
    close(store);
}

/// A store in format 7 (the format before this step's: an endpoint's secrets in its record, as
/// the JSON of the whole endpoint) opens with each endpoint's secrets moved to their rows, its
/// other fields as they were; a second open moves nothing.
#[tokio::test]
async fn a_format_7_store_moves_endpoint_secrets_out_of_their_records() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let mut a = endpoint("ep_01HZZZZZZZZZZZZZZZZZZZZZZA", "acme");
    a.secrets = vec![secret(0, None), secret(1, Some(T0 + 5))];
    a.headers.insert("x-a".into(), "1".into());
    let mut b = endpoint("ep_01HZZZZZZZZZZZZZZZZZZZZZZB", "other");
    b.secrets = vec![secret(2, None)];
    {
        // The rows as format 7 wrote them: the whole endpoint, secrets included, under its id.
        let store = open(dir.path(), &clock);
        close(store);
        let db = open_sled(sled::Config::new().path(dir.path()), dir.path()).unwrap();
        let endpoints = db.open_tree("endpoints").unwrap();
        for ep in [&a, &b] {
            let whole = serde_json::to_vec(ep).unwrap();
            assert!(String::from_utf8_lossy(&whole).contains("\"secrets\""));
            endpoints.insert(ep.id.as_bytes(), whole).unwrap();
        }
        db.open_tree("meta")
            .unwrap()
            .insert(meta_keys::FORMAT, &[7])
            .unwrap();
        db.flush().unwrap();
    }
    let store = open(dir.path(), &clock);
    let format = store.inner.trees.meta.get(meta_keys::FORMAT).unwrap();
    assert_eq!(format.unwrap().as_ref(), [FORMAT]);
    for ep in [&a, &b] {
        let got = store.endpoint(&ep.id).expect("endpoint");
        assert_eq!(
            serde_json::to_value(&*got).unwrap(),
            serde_json::to_value(ep).unwrap(),
            "the endpoint as it was, secrets included"
        );
        let (record, secret_rows) = rows(&store, &ep.id);
        assert!(record.unwrap().get("secrets").is_none());
        assert_eq!(secret_rows, 1);
    }
    close(store);
    let store = open(dir.path(), &clock);
    assert_eq!(store.endpoint(&a.id).unwrap().secrets.len(), 2);
    assert_eq!(store.endpoint(&b.id).unwrap().secrets.len(), 1);
    close(store);
}
