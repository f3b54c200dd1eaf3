//! Prefixed ids that sort by creation time: `evt_`, `ep_`, `dlv_`, `att_` + a ULID.
//!
//! A ULID is 48 bits of Unix milliseconds and 80 random bits in Crockford base32. Ids made in the
//! same millisecond by this process increment the random part, so ids are strictly increasing
//! within a process: sled keys made from them list in creation order and cursors are stable.

use std::sync::Mutex;

use rand::RngCore;

use crate::clock::Millis;

pub const EVENT: &str = "evt_";
pub const ENDPOINT: &str = "ep_";
pub const DELIVERY: &str = "dlv_";
pub const ATTEMPT: &str = "att_";

const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const RANDOM_MASK: u128 = (1 << 80) - 1;

/// The last id made: (milliseconds, random part), to keep ids monotonic.
static LAST: Mutex<(u64, u128)> = Mutex::new((0, 0));

/// A new id with `prefix`, stamped with `now`.
pub fn new_id(prefix: &str, now: Millis) -> String {
    let ms = (now.max(0) as u64) & ((1 << 48) - 1);
    let (ms, random) = {
        let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
        if ms <= last.0 && last.1 < RANDOM_MASK {
            // Same (or an earlier) millisecond: keep the order by counting up.
            last.1 += 1;
        } else {
            let mut bytes = [0u8; 16];
            rand::thread_rng().fill_bytes(&mut bytes);
            *last = (
                ms.max(last.0),
                u128::from_be_bytes(bytes) & (RANDOM_MASK >> 1),
            );
        }
        *last
    };
    let value = (u128::from(ms) << 80) | random;
    let mut out = String::with_capacity(prefix.len() + 26);
    out.push_str(prefix);
    for i in (0..26).rev() {
        out.push(ALPHABET[((value >> (i * 5)) & 31) as usize] as char);
    }
    out
}

/// True if `id` looks like an id made with `prefix` (so bad path ids answer 404 without a lookup).
pub fn is_valid(prefix: &str, id: &str) -> bool {
    id.strip_prefix(prefix)
        .is_some_and(|rest| rest.len() == 26 && rest.bytes().all(|b| ALPHABET.contains(&b)))
}

/// Random lowercase hex, for tokens and challenge nonces.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::thread_rng().fill_bytes(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_valid_and_increasing() {
        let a = new_id(EVENT, 1_700_000_000_000);
        let b = new_id(EVENT, 1_700_000_000_000);
        let c = new_id(EVENT, 1_700_000_000_001);
        assert!(a.starts_with("evt_") && a.len() == 30, "{a}");
        assert!(is_valid(EVENT, &a));
        assert!(a < b && b < c, "{a} {b} {c}");
        assert!(!is_valid(DELIVERY, &a));
        assert!(!is_valid(EVENT, "evt_../../etc"));
    }
}
