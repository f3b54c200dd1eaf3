//! Upgrades a data directory in place from the storage format an older herald wrote, one
//! format at a time (2 → 3 → 4 → 5 → 6 → 7 → 8 → 9 → 10 → 11 → 12).
//!
//! Format 2 → 3 (run at open, before anything reads the store):
//! - idempotency keys were one row per (account, key) holding JSON `{event_id, at}`; now a row
//!   keyed by the claim's day and a digest of (account, key), holding the event's ULID, so a
//!   day's keys expire together and no key's length reaches the row size;
//! - debounce windows were keyed by the (account, type, key) text and held JSON with the
//!   candidate's delivery ids; now keyed by its digest, with a binary value naming the candidate
//!   event, and an index by end time so closed windows expire in time order;
//! - event rows of layout 1 stay as they are (herald reads both layouts);
//! - every event gets an entry in its account's index, so an account's log is a key range.
//!
//! Keys past their 24 h and windows already closed are dropped rather than carried over. The
//! rows are converted in batches, each written as one sled batch (new rows and the removal of
//! the old ones together), so a migration cut short by a crash goes on where it stopped when
//! herald starts again; the caller sets the format once every step is done, after an fsync.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use super::codec;
use super::key;
use super::keys::{self, KeyRow, Keys};
use super::{StoreError, Trees, IDEMPOTENCY_WINDOW_MS};
use herald_core::clock::Millis;
use herald_core::ids::{self, DELIVERY, EVENT};
use herald_core::model::StoredSecret;
use herald_core::policy::debounce::{Candidate, Window};

/// Format 3 → 4: idempotency keys move from the `log` tree to their own database
/// ([`super::keys`]), row for row (the row's key loses its kind byte). Each batch is added
/// there and synced before it leaves the log, so a crash in between leaves a key in both
/// places and the next start moves it again. The keys' watermark is the log's last event: every
/// key the log had is in the keys database then.
pub(super) fn from_format_3(trees: &Trees, keys: &Keys) -> Result<(), StoreError> {
    let last = match trees
        .log
        .range(key::event(0)..key::end(key::EVENT))
        .next_back()
    {
        Some(item) => key::ulid(&item?.0).unwrap_or(0),
        None => 0,
    };
    let mut moved = 0usize;
    loop {
        let mut rows = Vec::with_capacity(BATCH);
        let mut gone = sled::Batch::default();
        for item in trees.log.scan_prefix([key::IDEMPOTENCY]).take(BATCH) {
            let (k, v) = item?;
            let row: KeyRow = packed_row(&k[1..])
                .ok_or_else(|| StoreError::Corrupt("format 3 idempotency key".into()))?;
            let event = u128::from_be_bytes(
                v.as_ref()
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("format 3 idempotency record".into()))?,
            );
            rows.push((row, event));
            gone.remove(k);
        }
        if rows.is_empty() {
            break;
        }
        moved += rows.len();
        keys.add(&rows, last)?;
        keys.sync()?;
        trees.log.apply_batch(gone)?;
    }
    keys.add(&[], last)?;
    keys.checkpoint()?;
    tracing::info!(
        idempotency_keys = moved,
        "storage migrated from format 3 to format 4"
    );
    Ok(())
}

/// Rows converted per sled batch.
const BATCH: usize = 1000;

#[derive(serde::Deserialize)]
struct OldIdempotency {
    event_id: String,
    at: Millis,
}

#[derive(serde::Deserialize)]
struct OldWindow {
    end: Millis,
    #[serde(default)]
    candidate: Vec<String>,
}

/// Format 2 to 3 (docs/operations.md, "Backup, restore, upgrade"): a frozen step, tested on a
/// store format 2 wrote (tests/fixtures/format2). Longer than most functions: it is kept as it
/// was written and tested, since the format it reads never changes again.
pub(super) fn from_format_2(
    db: &sled::Db,
    trees: &Trees,
    data_file: &File,
    now: Millis,
) -> Result<(), StoreError> {
    let (mut keys, mut windows) = (0usize, 0usize);
    loop {
        let mut batch = sled::Batch::default();
        let mut n = 0;
        for item in trees.log.scan_prefix([key::OLD_IDEMPOTENCY]).take(BATCH) {
            let (k, v) = item?;
            batch.remove(k.clone());
            n += 1;
            let Some((account, idem)) = split_account_key(&k[1..]) else {
                continue;
            };
            let old: OldIdempotency = serde_json::from_slice(&v)
                .map_err(|e| StoreError::Corrupt(format!("format 2 idempotency record: {e}")))?;
            let Some(event) = ids::parse(EVENT, &old.event_id) else {
                continue;
            };
            if now - old.at >= IDEMPOTENCY_WINDOW_MS {
                continue;
            }
            let day = key::idempotency_day(ids::ulid_ms(event));
            // Format 3's row: its kind byte, then the key row.
            let mut k3 = vec![key::IDEMPOTENCY];
            k3.extend_from_slice(&key::idempotency_format_3(day, account, idem));
            batch.insert(k3, &event.to_be_bytes()[..]);
            keys += 1;
        }
        for item in trees
            .log
            .scan_prefix([key::OLD_WINDOW])
            .take(BATCH.saturating_sub(n))
        {
            let (k, v) = item?;
            batch.remove(k.clone());
            n += 1;
            let old: OldWindow = serde_json::from_slice(&v)
                .map_err(|e| StoreError::Corrupt(format!("format 2 debounce window: {e}")))?;
            if old.end <= now {
                continue;
            }
            let candidate = old
                .candidate
                .first()
                .and_then(|d| ids::parse(DELIVERY, d))
                .and_then(ids::event_of)
                .map(|(event, _)| Candidate {
                    event,
                    deliveries: old.candidate.len(),
                });
            let rule_key = String::from_utf8_lossy(&k[1..]);
            let wk = key::window(&rule_key);
            let w = Window {
                end: old.end,
                candidate,
            };
            // Its key's text begins with its account: it is indexed at once (format 8's
            // step skips a window that names its account).
            let account = key::account_digest(rule_key.split('\0').next().unwrap_or_default());
            batch.insert(&wk[..], &codec::encode_window_of(&w, &account)[..]);
            batch.insert(&key::account_window(&account, &wk)[..], &[][..]);
            batch.insert(&key::window_end(w.end, &wk)[..], &[][..]);
            windows += 1;
        }
        if n == 0 {
            break;
        }
        trees.log.apply_batch(batch)?;
    }
    let indexed = index_accounts(trees)?;
    db.flush()?;
    data_file.sync_data()?;
    tracing::info!(
        idempotency_keys = keys,
        debounce_windows = windows,
        events_indexed = indexed,
        "storage migrated from format 2 to format 3"
    );
    Ok(())
}

/// Adds every event to its account's index (format 3 lists an account's log from it), in rows
/// of up to [`codec::INDEX_PER_ROW`] events per account. Safe to run again after a crash: a
/// row written twice is the same row.
fn index_accounts(trees: &Trees) -> Result<usize, StoreError> {
    let row = |batch: &mut sled::Batch, account: &str, events: &[u128]| {
        batch.insert(
            &key::account_event(account, events[0])[..],
            codec::encode_ulids(events),
        );
    };
    let mut n = 0;
    let mut open: HashMap<String, Vec<u128>> = HashMap::new();
    let mut batch = sled::Batch::default();
    let mut rows = 0;
    for item in trees.log.range(key::event(0)..key::end(key::EVENT)) {
        let (k, v) = item?;
        let Some(event) = key::ulid(&k) else {
            continue;
        };
        let account = codec::decode_event(event, &v)?.0.meta.account_id;
        let events = open.entry(account.clone()).or_default();
        events.push(event);
        n += 1;
        if events.len() == codec::INDEX_PER_ROW {
            row(&mut batch, &account, events);
            open.remove(&account);
            rows += 1;
            if rows == BATCH / 10 {
                trees.log.apply_batch(std::mem::take(&mut batch))?;
                rows = 0;
            }
        }
        if n % 1_000_000 == 0 {
            tracing::info!(
                events_indexed = n,
                "migrating storage: indexing events by account"
            );
        }
    }
    for (account, events) in &open {
        row(&mut batch, account, events);
    }
    trees.log.apply_batch(batch)?;
    Ok(n)
}

/// Format 2's idempotency key: account id, NUL, key.
fn split_account_key(k: &[u8]) -> Option<(&str, &str)> {
    let nul = k.iter().position(|b| *b == 0)?;
    let account = std::str::from_utf8(&k[..nul]).ok()?;
    let idem = std::str::from_utf8(&k[nul + 1..]).ok()?;
    Some((account, idem))
}

/// Format 4 to 5: format 5 adds folded history ([`super::fold`]), rows of a kind format 4 never
/// wrote, so its rows stay as they are; the folder folds them in the background like any other.
/// A format-4 herald would not see folded events, so the format says a newer herald wrote it.
pub(super) fn from_format_4() {
    tracing::info!("storage migrated from format 4 to format 5 (history is folded from now on)");
}

/// Format 5 to 6: format 6 packed format 5's idempotency keys (a row per key) many to a sled
/// row; both layouts are read by the next step, which moves them out of sled, so nothing is
/// rewritten here.
pub(super) fn from_format_5() {
    tracing::info!(
        "storage migrated from format 5 to format 6 (its idempotency keys move in the next step)"
    );
}

/// Format 6 to 7: idempotency keys leave their sled database (`old`, `keys/` in the data
/// directory, formats 4 to 6) for tables of their own ([`super::keys`]). Both of its layouts
/// are read: a row per key (formats 4 and 5: the day and a 16-byte digest → the ULID) and
/// chunks (format 6: the day and the chunk's upper digest → [`CHUNK_V1`] and entries of a
/// 12-byte digest and the ULID). Keys are added as they are read and synced at the end with the
/// old database's watermark; the old directory is removed by the caller once the format is
/// recorded, so a migration cut short runs again whole (adding a key twice is adding it once).
pub(super) fn from_format_6(old: &Path, keys: &Keys) -> Result<(), StoreError> {
    let mut moved = 0usize;
    let mut watermark = 0;
    if old.join("db").is_file() {
        super::remove_partial_snapshots(old)?;
        let db = super::open_sled(sled::Config::new().path(old).cache_capacity(1 << 20), old)?;
        if let Some(v) = db.open_tree("meta")?.get(b"watermark")? {
            watermark = u128::from_be_bytes(
                v.as_ref()
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("format 6 keys' watermark".into()))?,
            );
        }
        let mut rows = Vec::with_capacity(BATCH * 10);
        for item in db.iter() {
            let (k, v) = item?;
            old_keys(&k, &v, &mut rows)?;
            if rows.len() >= BATCH * 10 {
                moved += rows.len();
                keys.add(&std::mem::take(&mut rows), 0)?;
            }
        }
        moved += rows.len();
        keys.add(&rows, watermark)?;
    }
    keys.checkpoint()?;
    keys.sync()?;
    tracing::info!(
        idempotency_keys = moved,
        "storage migrated from format 6 to format 7 (idempotency keys in tables of their own)"
    );
    Ok(())
}

/// A key of the row-per-key layouts (formats 3 to 5: the day, then a 16-byte digest) as
/// today's: the same day and the digest's first [`keys::DIGEST`] bytes.
fn packed_row(k: &[u8]) -> Option<KeyRow> {
    if k.len() != 20 {
        return None;
    }
    k[..4 + keys::DIGEST].try_into().ok()
}

/// Format 6's chunk layout version (its first byte).
const CHUNK_V1: u8 = 1;

/// The keys of one row of formats 4 to 6's keys database, appended to `rows`.
fn old_keys(k: &[u8], v: &[u8], rows: &mut Vec<(KeyRow, u128)>) -> Result<(), StoreError> {
    let corrupt = || StoreError::Corrupt("format 6 idempotency keys".into());
    let ulid = |b: &[u8]| -> Result<u128, StoreError> {
        Ok(u128::from_be_bytes(b.try_into().map_err(|_| corrupt())?))
    };
    match k.len() {
        // A row per key: the day and a 16-byte digest, whose first 12 bytes are today's.
        20 => rows.push((packed_row(k).ok_or_else(corrupt)?, ulid(v)?)),
        // A chunk: its entries, each a 12-byte digest and the ULID.
        16 => {
            let (&CHUNK_V1, entries) = v.split_first().ok_or_else(corrupt)? else {
                return Err(corrupt());
            };
            let entry = keys::DIGEST + 16;
            if entries.len() % entry != 0 {
                return Err(corrupt());
            }
            for e in entries.chunks_exact(entry) {
                let mut row: KeyRow = [0; 4 + keys::DIGEST];
                row[..4].copy_from_slice(&k[..4]);
                row[4..].copy_from_slice(&e[..keys::DIGEST]);
                rows.push((row, ulid(&e[keys::DIGEST..])?));
            }
        }
        _ => return Err(corrupt()),
    }
    Ok(())
}

/// Format 8 to 9: an endpoint's secrets leave its record (the `endpoints` row keyed by its id)
/// for rows of their own ([`super::endpoints::put_secrets`]), so they never count toward the
/// endpoint's size (docs/api.md, `too_large`). Each endpoint is rewritten in one batch (its
/// record without `secrets` and its secrets' rows), which sled recovers all or nothing, so a
/// migration cut short goes on where it stopped: a record without `secrets` has been moved.
/// The record is rewritten as the JSON object it is, every other field kept as stored.
pub(super) fn from_format_8(trees: &Trees) -> Result<(), StoreError> {
    let tree = &trees.endpoints;
    let mut moved = 0usize;
    for item in tree.iter() {
        let (k, v) = item?;
        if k.contains(&0) {
            // A secrets row (moved already).
            continue;
        }
        let id = std::str::from_utf8(&k)
            .map_err(|_| StoreError::Corrupt("format 8 endpoint id".into()))?;
        let corrupt = |e: serde_json::Error| StoreError::Corrupt(format!("endpoint {id}: {e}"));
        let mut record: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&v).map_err(corrupt)?;
        let Some(secrets) = record.remove("secrets") else {
            continue;
        };
        let secrets: Vec<StoredSecret> = serde_json::from_value(secrets).map_err(corrupt)?;
        let record = serde_json::to_vec(&record).map_err(|e| StoreError::Encode(e.to_string()))?;
        let mut batch = sled::Batch::default();
        super::endpoints::put_secrets(tree, &mut batch, id, &secrets)?;
        batch.insert(k, record);
        tree.apply_batch(batch)?;
        moved += 1;
    }
    tracing::info!(
        endpoints = moved,
        "storage migrated from format 8 to format 9 (endpoints' secrets in rows of their own)"
    );
    Ok(())
}

/// Format 9 to 10: the charts' minute rows were keyed by endpoint id, a NUL and the minute, so
/// trimming the past day scanned every row; now by hour first ([`super::minutes`]), so it is a
/// key range. Rows are re-keyed [`BATCH`] at a time, each batch adding the new rows and removing
/// the old ones, which sled applies all or nothing, so a migration cut short goes on where it
/// stopped (old keys sort below every new one). A key of neither kind is dropped (the rows only
/// feed the charts).
/// Format 10 to 11: the `applications` and `api_answers` trees (new and empty), an event row's
/// flag for channels and tags, and attempt rows of layout 3 (with the URL). Rows of format 10
/// read as they are: an event without the flag has neither, an attempt of layout 2 no URL. The
/// step only records the format, so that an older herald refuses the data directory instead of
/// misreading what it does not know.
pub(super) fn from_format_10() {
    tracing::info!(
        "storage migrated from format 10 to format 11 (applications, event labels, attempt URLs)"
    );
}

/// Format 11 → 12: endpoints' last successful attempts are kept (the `successes` tree, which
/// sled makes empty); nothing to convert. The step records the format, so that an older herald
/// refuses the data directory instead of dropping what it does not know.
pub(super) fn from_format_11() {
    tracing::info!("storage migrated from format 11 to format 12 (endpoints' last successes)");
}

/// Format 12 → 13: attempt rows of layout 4 keep the response's headers; rows of layout 3
/// read as having none, so nothing is converted. The step records the format, so that an older
/// herald refuses the data directory instead of misreading rows it does not know.
pub(super) fn from_format_12() {
    tracing::info!("storage migrated from format 12 to format 13 (attempts' response headers)");
}

/// Format 13 → 14: chart rows keep sent attempts by latency bucket (rows of format 13 read as
/// having none), and endpoints' hours are kept for the week's chart (the `hours` tree): the
/// step sums the minutes kept (the last day) into it.
pub(super) fn from_format_13(trees: &Trees) -> Result<(), StoreError> {
    let hours = super::minutes::hours_from_minutes(&trees.minutes, &trees.hours)?;
    tracing::info!(
        hours,
        "storage migrated from format 13 to format 14 (hourly chart rows, latency buckets)"
    );
    Ok(())
}

/// Format 14 → 15: an event row may keep its request's trace context (a flag and its bytes
/// after the request key); rows of format 14 have none, so nothing is converted. The step
/// records the format, so that an older herald refuses the data directory instead of
/// misreading event rows it does not know.
pub(super) fn from_format_14() {
    tracing::info!("storage migrated from format 14 to format 15 (events' trace contexts)");
}

pub(super) fn from_format_9(trees: &Trees) -> Result<(), StoreError> {
    let tree = &trees.minutes;
    let (mut moved, mut dropped) = (0usize, 0usize);
    loop {
        let mut batch = sled::Batch::default();
        let mut rows = 0;
        for item in tree.range(..super::minutes::OLD_KEYS_END).take(BATCH) {
            let (k, v) = item?;
            match super::minutes::rekey(&k) {
                Some(new) => {
                    batch.insert(new, v);
                    moved += 1;
                }
                None => dropped += 1,
            }
            batch.remove(k);
            rows += 1;
        }
        if rows == 0 {
            break;
        }
        tree.apply_batch(batch)?;
    }
    tracing::info!(
        minutes = moved,
        dropped,
        "storage migrated from format 9 to format 10 (chart minutes keyed by time first)"
    );
    Ok(())
}
/// Format 7 to 8: debounce windows get an index by account ([`key::ACCOUNT_WINDOW`]), so an
/// account's purge finds its windows whatever their key, and each window's value names its
/// account's digest ([`codec::encode_window_of`]). A format-7 window names no account: a
/// trailing one's candidate event gives it; for a leading one (or a candidate gone), the events
/// that could have opened it are tried, newest first: its key is the digest of (account, type,
/// the request's `debounce_key` or a top-level field of the payload), which only its own key
/// matches. A window none of them opened (its events folded or pruned) is left as it was: it
/// closes at its end as before. Safe to run again after a crash: a window already naming its
/// account is skipped, and each batch writes windows and rows together.
pub(super) fn from_format_7(trees: &Trees) -> Result<(), StoreError> {
    let log = &trees.log;
    let mut unknown: HashMap<[u8; 17], sled::IVec> = HashMap::new();
    let mut found: Vec<([u8; 17], sled::IVec, [u8; 16])> = Vec::new();
    for item in log.scan_prefix([key::WINDOW]) {
        let (k, v) = item?;
        if codec::window_account(&v).is_some() {
            continue;
        }
        let wk: [u8; 17] = k
            .as_ref()
            .try_into()
            .map_err(|_| StoreError::Corrupt("debounce window key".into()))?;
        let candidate = codec::decode_window(&v)?.candidate;
        let account = match candidate {
            Some(c) => match log.get(key::event(c.event))? {
                Some(ev) => Some(codec::decode_event(c.event, &ev)?.0.meta.account_id),
                None => None,
            },
            None => None,
        };
        match account {
            Some(a) => found.push((wk, v, key::account_digest(&a))),
            None => {
                unknown.insert(wk, v);
            }
        }
    }
    let (operator, operator_folded) = index_operator_events(trees)?;
    let (mut scanned, leading) = (0usize, unknown.len());
    let events = log.range(key::event(0)..key::end(key::EVENT)).rev();
    for item in events {
        if unknown.is_empty() {
            break;
        }
        let (k, v) = item?;
        let Some(event) = key::ulid(&k) else {
            continue;
        };
        scanned += 1;
        let (rec, inline) = codec::decode_event(event, &v)?;
        let payload = hot_payload(log, event, inline, rec.payload_len)?;
        let m = &rec.meta;
        for k in opener_keys(m.debounce_key.as_deref(), &payload) {
            let wk = key::window(&format!("{}\0{}\0{k}", m.account_id, m.event_type));
            if let Some(v) = unknown.remove(&wk) {
                found.push((wk, v, key::account_digest(&m.account_id)));
            }
        }
    }
    for chunk in found.chunks(BATCH) {
        let mut batch = sled::Batch::default();
        for (wk, v, account) in chunk {
            let w = codec::decode_window(v)?;
            batch.insert(&wk[..], &codec::encode_window_of(&w, account)[..]);
            batch.insert(&key::account_window(account, wk)[..], &[][..]);
        }
        log.apply_batch(batch)?;
    }
    tracing::info!(
        debounce_windows = found.len(),
        events_read = scanned,
        windows_of_unknown_account = unknown.len(),
        operator_events = operator,
        operator_events_folded = operator_folded,
        "storage migrated from format 7 to format 8 (debounce windows and operator events by account)"
    );
    if leading > 0 && !unknown.is_empty() {
        tracing::warn!(
            windows = unknown.len(),
            "debounce windows whose opening event is no longer in the log close at their end \
             without an account index row; a purge meanwhile leaves them until then"
        );
    }
    Ok(())
}

/// A hot event's payload: inline, or from its chunk rows.
fn hot_payload(
    log: &sled::Tree,
    event: u128,
    inline: Option<&[u8]>,
    len: usize,
) -> Result<Vec<u8>, StoreError> {
    if let Some(p) = inline {
        return Ok(p.to_vec());
    }
    let mut p = Vec::with_capacity(len);
    for chunk in log.scan_prefix(key::of(key::CHUNK, event)).values() {
        p.extend_from_slice(&chunk?);
    }
    Ok(p)
}

/// Format 8's index of operator events by the account they are about ([`key::ABOUT`]), for
/// every operator event in the log, hot or folded (operator events are few: a fold is decoded
/// for each folded one): (indexed, of which folded).
fn index_operator_events(trees: &Trees) -> Result<(usize, usize), StoreError> {
    let log = &trees.log;
    let operator = herald_core::model::OPERATOR_ACCOUNT;
    let (mut indexed, mut folded) = (0, 0);
    let mut batch = sled::Batch::default();
    for row in log.scan_prefix(key::account_events(operator)).values() {
        let mut events = Vec::new();
        codec::decode_targets(&row?, &mut events)?;
        for event in events {
            let payload = match log.get(key::event(event))? {
                Some(v) => {
                    let (rec, inline) = codec::decode_event(event, &v)?;
                    hot_payload(log, event, inline, rec.payload_len)?
                }
                None => match super::fold::folded_payload(log, event)? {
                    Some(p) => {
                        folded += 1;
                        p
                    }
                    // Pruned since its index row was written.
                    None => continue,
                },
            };
            if let Some(about) = super::purge::operator_subject(operator, &payload) {
                batch.insert(&key::about(&about, event)[..], &[][..]);
                indexed += 1;
            }
        }
    }
    log.apply_batch(batch)?;
    Ok((indexed, folded))
}

/// The keys a stored event could have opened a window under: its request's `debounce_key`,
/// else each top-level field of its payload that makes a key
/// ([`herald_core::policy::debounce::key_of`]).
fn opener_keys(debounce_key: Option<&str>, payload: &[u8]) -> Vec<String> {
    if let Some(k) = debounce_key {
        return vec![k.to_string()];
    }
    let Ok(fields) =
        serde_json::from_slice::<HashMap<String, &serde_json::value::RawValue>>(payload)
    else {
        return Vec::new();
    };
    fields
        .keys()
        .filter_map(|f| herald_core::policy::debounce::key_of(None, payload, f))
        .collect()
}
