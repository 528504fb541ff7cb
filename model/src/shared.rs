//! `Shared<T>`: an immutable value behind an `Arc` with its hash computed once. The checker hashes every
//! state it generates (its fingerprint) and clones every state it expands; with engine nodes full of
//! strings, both dominate the run time unless unchanged parts are shared and hashed by digest.

use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// A 64-bit hash with fixed keys (aHash: fast, well mixed; fixed within a build on one machine).
pub fn digest<T: Hash + ?Sized>(value: &T) -> u64 {
    const KEYS: ahash::RandomState = ahash::RandomState::with_seeds(0x7478_6e73, 0x696d_6d6f, 0x6465_6c73, 0x6861_7265);
    KEYS.hash_one(value)
}

/// For maps keyed by a digest: the key is already a hash.
#[derive(Default)]
pub struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub type DigestMap<V> = std::collections::HashMap<u64, V, BuildHasherDefault<DigestHasher>>;

/// Bounds each digest-keyed cache's memory; a full cache starts over.
pub const CACHE_ENTRIES_MAX: usize = 1 << 20;

pub struct Shared<T> {
    value: Arc<T>,
    digest: u64,
}

impl<T: Hash> Shared<T> {
    pub fn new(value: T) -> Self {
        let digest = digest(&value);
        Shared { value: Arc::new(value), digest }
    }
}

impl<T> Shared<T> {
    pub fn digest(&self) -> u64 {
        self.digest
    }
}

impl<T: Clone + Hash> Shared<T> {
    /// Applies `f` to a copy; keeps the original (and its sharing) if nothing changed.
    pub fn update<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R
    where
        T: PartialEq,
    {
        let mut copy = (*self.value).clone();
        let r = f(&mut copy);
        let next = Shared::new(copy);
        if next != *self {
            *self = next;
        }
        r
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared { value: Arc::clone(&self.value), digest: self.digest }
    }
}

impl<T: fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

impl<T> Hash for Shared<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.digest);
    }
}

impl<T: PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest && (Arc::ptr_eq(&self.value, &other.value) || self.value == other.value)
    }
}

impl<T: Eq> Eq for Shared<T> {}

impl<T: Ord> PartialOrd for Shared<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// By content, so actions sort the same in every run (stateright's action index paths rely on it).
impl<T: Ord> Ord for Shared<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.value.cmp(&other.value)
    }
}
