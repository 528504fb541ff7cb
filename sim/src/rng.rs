//! The one source of workload and fault randomness: a `ChaCha8Rng` seeded from the seed. (madsim's own
//! scheduler and network draw from madsim's RNG, seeded from the same seed.)

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub struct SimRng(ChaCha8Rng);

impl SimRng {
    pub fn new(seed: u64) -> Self {
        SimRng(ChaCha8Rng::seed_from_u64(seed))
    }

    pub fn u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `[0, 1)`.
    pub fn f64(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.f64() < p
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "empty range {lo}..={hi}");
        let span = hi - lo + 1;
        lo + self.0.next_u64() % span
    }

    pub fn range_f64(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.f64()
    }

    /// An index below `n` (`n > 0`).
    pub fn index(&mut self, n: usize) -> usize {
        assert!(n > 0, "index into nothing");
        (self.0.next_u64() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }
}
