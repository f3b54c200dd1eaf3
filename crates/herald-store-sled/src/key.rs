//! Keys of the `log` tree: a kind byte, then a ULID (big-endian, so keys of a kind sort by
//! creation time) and maybe a number. A delivery's ULID follows its event's, so one event's rows
//! of each kind sit together, in the order of the events.

use sha2::{Digest, Sha256};

use herald_core::clock::Millis;

pub const EVENT: u8 = b'e';
pub const CHUNK: u8 = b'c';
/// An event's targets beyond [`super::codec::INLINE_TARGETS`]: (event ULID, row number).
pub const TARGETS: u8 = b't';
pub const ATTEMPT: u8 = b'a';
pub const PENDING: u8 = b'p';
/// Folded history: the first event's ULID → the rows of consecutive ended events, compressed
/// ([`super::fold`]).
pub const FOLD: u8 = b'h';
/// Storage format 3's idempotency keys: this byte, then an [`idempotency`] key; read only by
/// the migration, which moves them to their own database ([`super::keys`]).
pub const IDEMPOTENCY: u8 = b'k';
/// Debounce windows by the digest of (account, type, key) ([`window`]).
pub const WINDOW: u8 = b'd';
/// Debounce windows by their end, so closed ones expire in time order ([`window_end`]).
pub const WINDOW_END: u8 = b'D';
/// Events by account: (digest of the account, first event ULID of the row) → the ULIDs of up
/// to [`super::codec::INDEX_PER_ROW`] of the account's events, in order ([`account_event`]).
/// The committer writes one row per account per commit cycle, so the index costs a row per
/// account and cycle rather than per event; rows of an account never overlap (event ids grow
/// in commit order), so an account's log is a key range.
pub const ACCOUNT_EVENT: u8 = b'x';
/// Debounce windows by account: (digest of the account, digest of the window's key) → nothing
/// ([`account_window`]): a purge finds an account's windows whatever their key (storage
/// format 8; the window's value names the account's digest, so the row goes with it).
pub const ACCOUNT_WINDOW: u8 = b'y';
/// Operator events by the account they are about (their payload's `data.account_id`):
/// (digest of that account, event ULID) → nothing ([`about`]), so a purge finds them
/// (storage format 8).
pub const ABOUT: u8 = b'o';
/// Storage format 2's idempotency keys (account, NUL, key → JSON) and debounce windows
/// (the (account, type, key) string → JSON), read only by the migration.
pub const OLD_IDEMPOTENCY: u8 = b'i';
pub const OLD_WINDOW: u8 = b'w';

/// The first 16 bytes of SHA-256 over the parts, each followed by a NUL: a fixed-size key
/// for text of any length.
pub fn digest(parts: &[&[u8]]) -> [u8; 16] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
        h.update([0]);
    }
    let full = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

pub fn of(kind: u8, ulid: u128) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = kind;
    k[1..].copy_from_slice(&ulid.to_be_bytes());
    k
}

pub fn numbered(kind: u8, ulid: u128, n: u32) -> [u8; 21] {
    let mut k = [0u8; 21];
    k[..17].copy_from_slice(&of(kind, ulid));
    k[17..].copy_from_slice(&n.to_be_bytes());
    k
}

pub fn event(ulid: u128) -> [u8; 17] {
    of(EVENT, ulid)
}

/// A delivery's attempt by number: a prefix scan of [`attempts`] lists them in order.
pub fn attempt(delivery: u128, number: u32) -> [u8; 21] {
    numbered(ATTEMPT, delivery, number)
}

pub fn attempts(delivery: u128) -> [u8; 17] {
    of(ATTEMPT, delivery)
}

pub fn pending(delivery: u128) -> [u8; 17] {
    of(PENDING, delivery)
}

pub fn fold(first: u128) -> [u8; 17] {
    of(FOLD, first)
}

pub fn chunk(event: u128, index: u32) -> [u8; 21] {
    numbered(CHUNK, event, index)
}

/// The end (exclusive) of a ULID kind's keys.
pub fn end(kind: u8) -> [u8; 17] {
    of(kind + 1, 0)
}

/// The ULID of a key of the ULID kinds.
pub fn ulid(k: &[u8]) -> Option<u128> {
    Some(u128::from_be_bytes(k.get(1..17)?.try_into().ok()?))
}

/// The number after the ULID (an attempt's, a chunk's).
pub fn number(k: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(k.get(17..21)?.try_into().ok()?))
}

/// The idempotency window's day of a time: a key claimed within the window is in this
/// day's rows or the day before's, and a day's rows expire together.
pub fn idempotency_day(at: Millis) -> u32 {
    at.div_euclid(super::IDEMPOTENCY_WINDOW_MS).max(0) as u32
}

/// Storage formats 3 to 5's key of an idempotency key: the day, then the whole digest (written
/// only by the migration from format 2).
pub fn idempotency_format_3(day: u32, account_id: &str, key: &str) -> [u8; 20] {
    let mut k = [0u8; 20];
    k[..4].copy_from_slice(&day.to_be_bytes());
    k[4..].copy_from_slice(&digest(&[account_id.as_bytes(), key.as_bytes()]));
    k
}

/// A debounce window by its (account, type, key) string's digest.
pub fn window(key: &str) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = WINDOW;
    k[1..].copy_from_slice(&digest(&[key.as_bytes()]));
    k
}

/// A window's entry in the end index: its end, then its key's digest.
pub fn window_end(end: Millis, window_key: &[u8; 17]) -> [u8; 25] {
    let mut k = [0u8; 25];
    k[0] = WINDOW_END;
    k[1..9].copy_from_slice(&(end.max(0) as u64).to_be_bytes());
    k[9..].copy_from_slice(&window_key[1..]);
    k
}

/// The end-index key of every window ending before `end`.
pub fn window_end_before(end: Millis) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = WINDOW_END;
    k[1..].copy_from_slice(&(end.max(0) as u64).to_be_bytes());
    k
}

/// The account index row that starts with `event`.
pub fn account_event(account_id: &str, event: u128) -> [u8; 33] {
    let mut k = [0u8; 33];
    k[..17].copy_from_slice(&account_events(account_id));
    k[17..].copy_from_slice(&event.to_be_bytes());
    k
}

/// The prefix of an account's index entries.
pub fn account_events(account_id: &str) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = ACCOUNT_EVENT;
    k[1..].copy_from_slice(&digest(&[account_id.as_bytes()]));
    k
}

/// The digest an account's rows are keyed by.
pub fn account_digest(account_id: &str) -> [u8; 16] {
    digest(&[account_id.as_bytes()])
}

/// A debounce window's row in its account's index.
pub fn account_window(account: &[u8; 16], window_key: &[u8; 17]) -> [u8; 33] {
    let mut k = [0u8; 33];
    k[0] = ACCOUNT_WINDOW;
    k[1..17].copy_from_slice(account);
    k[17..].copy_from_slice(&window_key[1..]);
    k
}

/// The prefix of an account's debounce windows' index rows.
pub fn account_windows(account_id: &str) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = ACCOUNT_WINDOW;
    k[1..].copy_from_slice(&account_digest(account_id));
    k
}

/// An operator event's row in the index of the account it is about.
pub fn about(account_id: &str, event: u128) -> [u8; 33] {
    let mut k = [0u8; 33];
    k[0] = ABOUT;
    k[1..17].copy_from_slice(&account_digest(account_id));
    k[17..].copy_from_slice(&event.to_be_bytes());
    k
}

/// The prefix of the operator events about an account.
pub fn abouts(account_id: &str) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[0] = ABOUT;
    k[1..].copy_from_slice(&account_digest(account_id));
    k
}

/// The window key an account index row names.
pub fn window_of_index_row(row: &[u8]) -> Option<[u8; 17]> {
    let mut k = [0u8; 17];
    k[0] = WINDOW;
    k[1..].copy_from_slice(row.get(17..33)?);
    Some(k)
}

/// An event's `index`-th target row.
pub fn targets(event: u128, index: u32) -> [u8; 21] {
    numbered(TARGETS, event, index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_keys_sort_by_delivery_then_number() {
        assert!(attempt(1, 9) < attempt(1, 10));
        assert!(attempt(1, u32::MAX) < attempt(2, 0));
        assert!(attempt(u128::MAX, u32::MAX)[..] < end(ATTEMPT)[..]);
        assert_eq!(ulid(&attempt(77, 1)), Some(77));
        assert_eq!(number(&attempt(77, 1)), Some(1));
    }
}
