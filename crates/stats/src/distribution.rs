//! Order statistics (percentiles), summaries of a sample set.

use vantage_model::latency::Distribution;

/// The `percent`-th percentile (0..=100) of ascending-sorted, finite samples.
///
/// Definition: linear interpolation between closest ranks, Hyndman & Fan (1996)
/// type 7 — the default of numpy, R and Excel's PERCENTILE.INC. With n samples,
/// h = (n - 1) * percent / 100, and the result is
/// `x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])`.
/// Chosen because it is continuous in `percent`, returns the minimum at 0 and the
/// maximum at 100, and anyone can check our figures with numpy.
///
/// Returns `None` for an empty slice or a `percent` that is NaN; `percent` outside
/// 0..=100 is clamped. The caller must pass sorted, NaN-free samples (as
/// [`distribution`] does); unsorted input gives a meaningless (but finite) value,
/// never a panic.
pub fn percentile(sorted_samples: &[f64], percent: f64) -> Option<f64> {
    if sorted_samples.is_empty() || percent.is_nan() {
        return None;
    }
    let fraction = percent.clamp(0.0, 100.0) / 100.0;
    let rank = (sorted_samples.len() - 1) as f64 * fraction;
    let lower = rank.floor() as usize;
    let upper = (lower + 1).min(sorted_samples.len() - 1);
    let weight = rank - lower as f64;
    let (low, high) = (sorted_samples[lower], sorted_samples[upper]);
    // Rounding (or overflow to inf/NaN for huge spans) must not step outside the
    // segment: that keeps the result monotone in `percent` and within [min, max].
    Some((low + weight * (high - low)).max(low).min(high))
}

/// Arithmetic mean and population standard deviation (divide by n, like ping's
/// `mdev` and numpy's default), of non-empty finite samples.
fn mean_and_population_stddev(samples: &[f64]) -> (f64, f64) {
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n;
    let variance = samples.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, variance.sqrt())
}

/// min, median, mean, p95, p99, max and the **population** standard deviation
/// (divide by n: the samples are the whole run being described, not an estimate of
/// a wider population; it matches ping's `mdev`). Percentiles per [`percentile`].
///
/// Non-finite samples are ignored. `None` when no finite sample remains.
pub fn distribution(samples: &[f64]) -> Option<Distribution> {
    let sorted = finite_sorted(samples);
    if sorted.is_empty() {
        return None;
    }
    let (mean, stddev) = mean_and_population_stddev(&sorted);
    Some(Distribution {
        min: sorted[0],
        median: percentile(&sorted, 50.0)?,
        mean,
        p95: percentile(&sorted, 95.0)?,
        p99: percentile(&sorted, 99.0)?,
        max: sorted[sorted.len() - 1],
        stddev,
    })
}

/// Location and spread of per-interval samples (e.g. throughput per second), the
/// pair of pairs Miravalls-Sierra et al. (2018) ask to report: mean ± stddev and median with IQR.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Spread {
    pub mean: f64,
    /// Population standard deviation (see [`distribution`]).
    pub stddev: f64,
    pub median: f64,
    /// Interquartile range: p75 - p25, percentiles per [`percentile`].
    pub iqr: f64,
    pub min: f64,
    pub max: f64,
}

/// [`Spread`] of the finite samples; `None` when there are none.
pub fn spread(samples: &[f64]) -> Option<Spread> {
    let sorted = finite_sorted(samples);
    if sorted.is_empty() {
        return None;
    }
    let (mean, stddev) = mean_and_population_stddev(&sorted);
    Some(Spread {
        mean,
        stddev,
        median: percentile(&sorted, 50.0)?,
        iqr: percentile(&sorted, 75.0)? - percentile(&sorted, 25.0)?,
        min: sorted[0],
        max: sorted[sorted.len() - 1],
    })
}

/// The finite values of `samples`, sorted ascending.
pub(crate) fn finite_sorted(samples: &[f64]) -> Vec<f64> {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_type7_hand_worked() {
        // x = [10, 20, 30, 40], n = 4.
        // p50: h = 3 * 0.5 = 1.5 -> 20 + 0.5 * (30 - 20) = 25.
        // p95: h = 3 * 0.95 = 2.85 -> 30 + 0.85 * 10 = 38.5.
        // p25: h = 0.75 -> 10 + 0.75 * 10 = 17.5.
        let x = [10.0, 20.0, 30.0, 40.0];
        assert_eq!(percentile(&x, 0.0), Some(10.0));
        assert_eq!(percentile(&x, 25.0), Some(17.5));
        assert_eq!(percentile(&x, 50.0), Some(25.0));
        assert!((percentile(&x, 95.0).unwrap() - 38.5).abs() < 1e-9);
        assert_eq!(percentile(&x, 100.0), Some(40.0));
    }

    #[test]
    fn percentile_edges() {
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[1.0, 2.0], f64::NAN), None);
        // Out-of-range percent is clamped.
        assert_eq!(percentile(&[1.0, 2.0], -5.0), Some(1.0));
        assert_eq!(percentile(&[1.0, 2.0], 150.0), Some(2.0));
    }

    #[test]
    fn distribution_hand_worked() {
        // Unsorted input 4, 1, 3, 2, 5 -> sorted 1..=5, n = 5.
        // mean = 15 / 5 = 3; squared deviations 4+1+0+1+4 = 10; population var = 2.
        // median: h = 4 * 0.5 = 2 -> 3. p95: h = 3.8 -> 4 + 0.8 = 4.8.
        // p99: h = 3.96 -> 4.96.
        let d = distribution(&[4.0, 1.0, 3.0, 2.0, 5.0]).unwrap();
        assert_eq!(d.min, 1.0);
        assert_eq!(d.max, 5.0);
        assert_eq!(d.mean, 3.0);
        assert_eq!(d.median, 3.0);
        assert!((d.p95 - 4.8).abs() < 1e-9);
        assert!((d.p99 - 4.96).abs() < 1e-9);
        assert!((d.stddev - 2f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn distribution_ignores_non_finite_and_rejects_empty() {
        assert_eq!(distribution(&[]), None);
        assert_eq!(distribution(&[f64::NAN, f64::INFINITY]), None);
        let d = distribution(&[f64::NAN, 2.0, f64::NEG_INFINITY, 4.0]).unwrap();
        assert_eq!((d.min, d.max, d.mean, d.stddev), (2.0, 4.0, 3.0, 1.0));
    }

    #[test]
    fn spread_hand_worked() {
        // 1..=8: mean 4.5; squared deviations 12.25+6.25+2.25+0.25 (twice) = 42,
        // population var = 42 / 8 = 5.25. median: h = 3.5 -> 4.5.
        // p25: h = 1.75 -> 2.75; p75: h = 5.25 -> 6.25; IQR = 3.5.
        let s = spread(&[8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]).unwrap();
        assert_eq!(s.mean, 4.5);
        assert!((s.stddev - 5.25f64.sqrt()).abs() < 1e-12);
        assert_eq!(s.median, 4.5);
        assert!((s.iqr - 3.5).abs() < 1e-12);
        assert_eq!((s.min, s.max), (1.0, 8.0));
        assert_eq!(spread(&[f64::NAN]), None);
    }
}
