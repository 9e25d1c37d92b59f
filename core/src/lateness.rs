//! How late something happened against its emulated schedule: a timer an
//! event loop fired, a flit a link read after its release time. A log2
//! histogram, so recording is a few instructions and never allocates, and
//! histograms of many links or runs merge by adding buckets.

use crate::control::LatenessSummary;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatenessHistogram {
    /// `buckets[i]` counts lateness in `[2^(i-1), 2^i)` ns (bucket 0: 0 ns).
    buckets: [u64; 64],
    count: u64,
    sum_ns: u64,
    max_ns: u64,
}

impl Default for LatenessHistogram {
    fn default() -> Self {
        LatenessHistogram {
            buckets: [0; 64],
            count: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }
}

impl LatenessHistogram {
    pub fn record(&mut self, ns: u64) {
        let i = (64 - ns.leading_zeros()) as usize;
        self.buckets[i.min(63)] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Adds `other`'s samples to these.
    pub fn merge(&mut self, other: &LatenessHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// Upper bound of the bucket holding quantile `q` (0..=1), in ns (never
    /// above the largest value recorded).
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let target = ((self.count as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= target {
                return if i == 0 {
                    0
                } else {
                    (1u64 << i).min(self.max_ns)
                };
            }
        }
        self.max_ns
    }

    pub fn summary(&self) -> LatenessSummary {
        LatenessSummary {
            count: self.count,
            mean_ns: self.sum_ns.checked_div(self.count).unwrap_or(0),
            p50_ns: self.quantile_ns(0.5),
            p99_ns: self.quantile_ns(0.99),
            max_ns: self.max_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quantiles_bound_the_recorded_values() {
        let mut l = LatenessHistogram::default();
        assert_eq!(l.quantile_ns(0.5), 0);
        for ns in [0, 1_000, 1_500, 2_000, 3_000, 1_000_000] {
            l.record(ns);
        }
        let p50 = l.quantile_ns(0.5);
        assert!((1_500..=2_048).contains(&p50), "{p50}");
        assert_eq!(l.quantile_ns(1.0), 1_000_000);
        assert_eq!(l.summary().count, 6);
        assert_eq!(l.summary().max_ns, 1_000_000);
    }

    proptest! {
        /// Merging two histograms is recording both sample sets in one.
        #[test]
        fn merging_is_recording_both(
            a in proptest::collection::vec(0u64..1u64 << 40, 0..50),
            b in proptest::collection::vec(0u64..1u64 << 40, 0..50),
        ) {
            let mut ha = LatenessHistogram::default();
            let mut hb = LatenessHistogram::default();
            let mut both = LatenessHistogram::default();
            for &x in &a {
                ha.record(x);
                both.record(x);
            }
            for &x in &b {
                hb.record(x);
                both.record(x);
            }
            ha.merge(&hb);
            prop_assert_eq!(ha, both);
        }

        /// The p50 and p99 bounds are within a factor 2 above the exact
        /// quantile, and never above the maximum.
        #[test]
        fn quantiles_are_within_a_bucket(
            xs in proptest::collection::vec(1u64..1u64 << 40, 1..200),
        ) {
            let mut h = LatenessHistogram::default();
            for &x in &xs { h.record(x); }
            let mut sorted = xs.clone();
            sorted.sort_unstable();
            for q in [0.5, 0.99] {
                let k = ((xs.len() as f64 * q).ceil() as usize).max(1) - 1;
                let exact = sorted[k];
                let bound = h.quantile_ns(q);
                prop_assert!(bound >= exact && bound <= exact.saturating_mul(2).max(1), "q {} exact {} bound {}", q, exact, bound);
                prop_assert!(bound <= h.max_ns());
            }
        }
    }
}
