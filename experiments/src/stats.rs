//! The experiments' statistics: the Student's t quantile behind every 95 %
//! interval in the reproductions, taken from `statrs` (a maintained
//! implementation, exact for fractional degrees of freedom, which Welch's
//! intervals need).

use statrs::distribution::{ContinuousCDF, StudentsT};

/// The two-sided 95 % critical value of Student's t with `df` degrees of
/// freedom (any df > 0): P(|T| ≤ q) = 0.95. Infinite for df ≤ 0, where no
/// interval exists.
pub fn t975(df: f64) -> f64 {
    if df.is_nan() || df <= 0.0 {
        return f64::INFINITY;
    }
    StudentsT::new(0.0, 1.0, df)
        .expect("location 0, scale 1 and df > 0 are valid")
        .inverse_cdf(0.975)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn critical_values_match_the_tables() {
        for (df, t) in [
            (1.0, 12.706),
            (2.0, 4.303),
            (5.0, 2.571),
            (10.0, 2.228),
            (30.0, 2.042),
            (60.0, 2.000),
            (120.0, 1.980),
            (1e6, 1.960),
        ] {
            assert!((t975(df) - t).abs() < 1e-3, "df {df}: {} vs {t}", t975(df));
        }
        // Fractional df (Welch) lie between their neighbours.
        assert!(t975(2.5) < t975(2.0) && t975(2.5) > t975(3.0));
        assert!(t975(0.0).is_infinite());
    }
}
