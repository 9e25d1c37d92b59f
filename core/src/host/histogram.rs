//! A log-bucketed latency histogram in the style of HdrHistogram: exact below
//! 128, and above that every power-of-two range is split into 128 equal
//! sub-buckets, so a recorded value is known to within 1/128 (< 0.8%) of
//! itself. It covers the whole `u64` range in at most 7 424 counters, grown
//! only as far as the largest value recorded.

use serde::{Deserialize, Serialize};

/// log₂ of the number of sub-buckets per power of two.
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    min: u64,
    max: u64,
    /// Sum of all values (u128: cannot overflow for < 2^64 samples).
    sum: u128,
}

/// The summary a report carries (values in the histogram's unit, ns here).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub min: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// Count, sum and sum of squares of recorded values: the exact mean and
/// sample variance (a [`Histogram`]'s buckets give them only to 1/128),
/// what a confidence interval of a mean needs. Sums are `f64` so reports
/// stay plain JSON numbers (exact up to 2^53 ns summed, about 104 days).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Moments {
    pub count: u64,
    pub sum: f64,
    pub sum_sq: f64,
}

impl Moments {
    pub fn record(&mut self, v: u64) {
        let v = v as f64;
        self.count += 1;
        self.sum += v;
        self.sum_sq += v * v;
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Moments) {
        self.count += other.count;
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    /// The sample variance (n − 1 in the denominator); 0 below 2 samples.
    pub fn variance(&self) -> f64 {
        if self.count < 2 {
            return 0.0;
        }
        let n = self.count as f64;
        ((self.sum_sq - self.sum * self.sum / n) / (n - 1.0)).max(0.0)
    }
}

fn index_of(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    let mantissa = v >> shift; // in [SUB, 2·SUB)
    ((shift as u64 + 1) * SUB + (mantissa - SUB)) as usize
}

/// The largest value that falls in bucket `i`.
fn highest_in(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let shift = i / SUB - 1;
    let mantissa = SUB + i % SUB;
    let lowest = mantissa << shift;
    lowest + ((1u64 << shift) - 1)
}

impl Histogram {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn record(&mut self, v: u64) {
        let i = index_of(v);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += 1;
        if self.total == 0 || v < self.min {
            self.min = v;
        }
        self.max = self.max.max(v);
        self.total += 1;
        self.sum += v as u128;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    pub fn min(&self) -> u64 {
        self.min
    }

    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    /// The value at quantile `q` in [0, 1]: the smallest recorded bucket
    /// whose cumulative count reaches `⌈q·count⌉`, reported as the bucket's
    /// highest value clamped to [min, max]. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let q = q.clamp(0.0, 1.0);
        let rank = ((q * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return highest_in(i).clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        if other.total == 0 {
            return;
        }
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.min = if self.total == 0 {
            other.min
        } else {
            self.min.min(other.min)
        };
        self.max = self.max.max(other.max);
        self.total += other.total;
        self.sum += other.sum;
    }

    pub fn percentiles(&self) -> Percentiles {
        Percentiles {
            count: self.total,
            min: self.min,
            mean: self.mean(),
            p50: self.quantile(0.50),
            p90: self.quantile(0.90),
            p99: self.quantile(0.99),
            p999: self.quantile(0.999),
            max: self.max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::new();
        for v in 1..=100 {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), 50);
        assert_eq!(h.quantile(0.9), 90);
        assert_eq!(h.quantile(0.99), 99);
        assert_eq!(h.quantile(1.0), 100);
        assert_eq!(h.min(), 1);
        assert_eq!(h.mean(), 50.5);
    }

    #[test]
    fn moments_give_the_mean_and_sample_variance_and_merge() {
        let mut a = Moments::default();
        assert_eq!((a.mean(), a.variance()), (0.0, 0.0));
        for v in [2, 4, 4, 4] {
            a.record(v);
        }
        let mut b = Moments::default();
        for v in [5, 5, 7, 9] {
            b.record(v);
        }
        a.merge(&b);
        assert_eq!(a.count, 8);
        assert_eq!(a.mean(), 5.0);
        // Sum of squared deviations 32, over n − 1 = 7.
        assert!((a.variance() - 32.0 / 7.0).abs() < 1e-12);
        // Large values (tens of ms in ns) keep their small spread.
        let mut c = Moments::default();
        for v in [40_000_000, 40_001_000, 40_002_000] {
            c.record(v);
        }
        assert!((c.variance() - 1e6).abs() < 1.0, "{}", c.variance());
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        let p = Histogram::new().percentiles();
        assert_eq!(p, Percentiles::default());
    }

    #[test]
    fn bucket_boundaries_are_contiguous() {
        for i in 1..(58 * SUB as usize) {
            assert_eq!(highest_in(i - 1) + 1, lowest_in(i), "bucket {i}");
            assert_eq!(index_of(lowest_in(i)), i);
            assert_eq!(index_of(highest_in(i)), i);
        }
        assert_eq!(index_of(u64::MAX), 57 * SUB as usize + 127);
        assert_eq!(highest_in(index_of(u64::MAX)), u64::MAX);
    }

    fn lowest_in(i: usize) -> u64 {
        if i < SUB as usize {
            i as u64
        } else {
            (SUB + i as u64 % SUB) << (i as u64 / SUB - 1)
        }
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let (mut a, mut b, mut all) = (Histogram::new(), Histogram::new(), Histogram::new());
        for v in [5u64, 900, 70_000, 3] {
            a.record(v);
            all.record(v);
        }
        for v in [1_000_000u64, 2] {
            b.record(v);
            all.record(v);
        }
        a.merge(&b);
        assert_eq!(a, all);
    }

    proptest! {
        #[test]
        fn quantiles_have_bounded_relative_error(
            mut values in proptest::collection::vec(0u64..1 << 50, 1..300),
            q in 0.0f64..=1.0,
        ) {
            let mut h = Histogram::new();
            for &v in &values {
                h.record(v);
            }
            values.sort_unstable();
            let rank = ((q * values.len() as f64).ceil() as usize).max(1);
            let exact = values[rank - 1];
            let got = h.quantile(q);
            prop_assert!(got >= exact);
            prop_assert!((got - exact) as f64 <= exact as f64 / SUB as f64, "{got} vs {exact}");
            prop_assert_eq!(h.quantile(1.0), *values.last().unwrap());
        }
    }
}
