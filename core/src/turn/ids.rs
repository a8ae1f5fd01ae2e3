//! The call ids a run has seen, as fixed-size fingerprints (`SPEC E`: call ids
//! over the whole run).
//!
//! A tool call id seen earlier in the run is refused `duplicate-call-id`, in
//! every response, not only within one. Keeping the ids themselves would take
//! 64 bytes each, so the gate keeps a 64-bit SipHash-1-3 fingerprint of each
//! (fixed keys: the same on the desktop and the device) in an open-addressing
//! table of `N` slots:
//!
//! * **A collision can only refuse.** Equal ids always have equal
//!   fingerprints, so a reused id is always found; two different ids that
//!   collide make the later one look reused, which refuses a fresh call
//!   (stricter, never looser). At 64 bits that is about `n²/2⁶⁵` for `n` ids.
//! * **Nothing is ever forgotten.** The table holds at most
//!   [`CallIds::CAPACITY`] ids (three quarters of its slots, so a look-up
//!   stays a few probes long); a new id past that is refused
//!   (`call-id-capacity`), never stored by evicting another, since eviction
//!   would let a reused id through.

use core::hash::Hasher as _;

use siphasher::sip::SipHasher13;

/// Fixed SipHash keys: "budgetgate-ids-1" split into two little-endian words.
const KEY0: u64 = u64::from_le_bytes(*b"budgetga");
const KEY1: u64 = u64::from_le_bytes(*b"te-ids-1");

/// An empty slot. A fingerprint of 0 is stored as 1 (one more merged pair,
/// which can only refuse).
const EMPTY: u64 = 0;

/// What [`CallIds::try_insert`] found (`SPEC E`): the engine's [`Seen`].
pub(super) use crate::engine::Seen;

/// The fingerprints of the call ids seen in a run, in `N` fixed slots (`SPEC E`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CallIds<const N: usize> {
    slots: [u64; N],
    len: usize,
}

impl<const N: usize> CallIds<N> {
    /// Most ids remembered: three quarters of the slots.
    pub(super) const CAPACITY: usize = N - N / 4;

    /// No ids seen.
    pub(super) const fn new() -> Self {
        Self {
            slots: [EMPTY; N],
            len: 0,
        }
    }

    fn fingerprint(id: &str) -> u64 {
        let mut h = SipHasher13::new_with_keys(KEY0, KEY1);
        h.write(id.as_bytes());
        match h.finish() {
            EMPTY => 1,
            f => f,
        }
    }

    /// Looks `id` up and remembers it if it is new and there is room.
    pub(super) fn try_insert(&mut self, id: &str) -> Seen {
        if N == 0 {
            return Seen::Full;
        }
        let key = Self::fingerprint(id);
        // N fits in u64 on every target this builds for, and the remainder
        // is below N, so the casts are lossless.
        let mut at = (key % N as u64) as usize;
        // At most N probes; at three-quarters load an absent key ends in a
        // few, since at least a quarter of the slots stay empty.
        for _ in 0..N {
            match self.slots.get_mut(at) {
                Some(slot) if *slot == key => return Seen::Again,
                Some(slot) if *slot == EMPTY => {
                    if self.len >= Self::CAPACITY {
                        return Seen::Full;
                    }
                    *slot = key;
                    self.len += 1;
                    return Seen::New;
                }
                _ => at = (at + 1) % N,
            }
        }
        Seen::Full
    }

    /// Ids remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_seen_once_is_seen_again_and_a_full_table_refuses_new_ids() {
        let mut ids = CallIds::<8>::new();
        assert_eq!(CallIds::<8>::CAPACITY, 6);
        for i in 0..6 {
            let id = std::format!("toolu_{i}");
            assert_eq!(ids.try_insert(&id), Seen::New);
            assert_eq!(ids.try_insert(&id), Seen::Again);
        }
        assert_eq!(ids.len(), 6);
        // Full: a new id is refused, never stored over an old one.
        assert_eq!(ids.try_insert("toolu_new"), Seen::Full);
        assert_eq!(ids.len(), 6);
        for i in 0..6 {
            assert_eq!(ids.try_insert(&std::format!("toolu_{i}")), Seen::Again);
        }
        assert_eq!(CallIds::<0>::new().try_insert("a"), Seen::Full);
        assert_eq!(CallIds::<1>::new().try_insert("a"), Seen::New);
    }

    /// `SPEC E`: a table of any size takes exactly [`CallIds::CAPACITY`]
    /// new ids wherever their fingerprints fall (a probe that meets a taken
    /// slot goes on to the next, from the last slot back to the first),
    /// finds each of them again, and refuses the next new one. Tables of one
    /// to three slots have no slot left empty, so the last id's probe passes
    /// through all of them.
    #[test]
    fn a_table_of_any_size_takes_its_capacity_of_ids() {
        fn fill<const N: usize>(capacity: usize) {
            assert_eq!(CallIds::<N>::CAPACITY, capacity, "{N} slots");
            let mut ids = CallIds::<N>::new();
            let id = |i: usize| std::format!("toolu_{i}");
            for i in 0..capacity {
                assert_eq!(ids.try_insert(&id(i)), Seen::New, "{N} slots, id {i}");
            }
            for i in 0..capacity {
                assert_eq!(ids.try_insert(&id(i)), Seen::Again, "{N} slots, id {i}");
            }
            assert_eq!(ids.try_insert("toolu_new"), Seen::Full, "{N} slots");
            assert_eq!(ids.len(), capacity);
        }
        fill::<1>(1);
        fill::<2>(2);
        fill::<3>(3);
        fill::<5>(4);
        fill::<7>(6);
        fill::<12>(9);
        fill::<128>(96);
    }
}
