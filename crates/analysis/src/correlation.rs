//! Correlation between an application metric and a network metric of the same
//! path — say a video app's bitrate or MOS ratings against the path's
//! `received_bps` or `rtt_median_us` — so an app that publishes its metrics
//! alongside the network measurements gets back how the two move together.
//!
//! Both series arrive at irregular times, so each is first averaged into bins of
//! `bin_us`, aligned to multiples of `bin_us` (bin index = ⌊time / bin_us⌋, also
//! for negative times). Over the bins both series have, at every lag of the
//! window, this computes
//!
//! - Pearson's product-moment correlation (Pearson, "Notes on regression and
//!   inheritance in the case of two parents", Proc. R. Soc. Lond. 58, 1895), which
//!   measures a linear relation, and
//! - Spearman's rank correlation (Spearman, "The proof and measurement of
//!   association between two things", Am. J. Psychol. 15, 1904): Pearson over the
//!   ranks, ties given their average rank, which measures any monotone relation,
//!
//! i.e. a lagged cross-correlation over binned series (cf. the cross-correlation
//! function of Box and Jenkins, *Time Series Analysis*, 1970), each lag's
//! coefficients taken over the bins that overlap at that lag.
//!
//! Lag convention: a positive lag L pairs the app bin at time t with the network
//! bin at time t − L, i.e. the network metric leads the app metric by L. A network
//! dip followed L later by an app dip correlates best at +L; a negative lag means
//! the app metric moves first.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Default bin width: one minute.
pub const DEFAULT_BIN_US: i64 = 60_000_000;
/// Default lag window: ten minutes either way.
pub const DEFAULT_MAX_LAG_US: i64 = 600_000_000;
/// Default least number of paired bins for a coefficient.
pub const DEFAULT_MIN_PAIRS: usize = 5;
/// Most lag steps tried on each side of zero. The settings can come from an HTTP
/// request, and each step costs a pass over the bins, so the window is bounded.
pub const MAX_LAG_STEPS: i64 = 1_000;
/// |Pearson| values this close count as tied for the best lag, so that a periodic
/// series, equally strong at several lags, is settled by the documented rule
/// rather than by rounding noise.
const BEST_TIE_TOLERANCE: f64 = 1e-9;

/// One observation of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When, in microseconds (any epoch, the same for both series).
    pub time_us: i64,
    pub value: f64,
}

/// How the series are binned and paired. Fields left out when deserialising
/// take their defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CorrelationSettings {
    /// Width of the bins both series are averaged into; bins start at multiples
    /// of it. Must be > 0.
    pub bin_us: i64,
    /// Lags tried: −`max_lag_us` ..= +`max_lag_us` in steps of `bin_us`, after
    /// rounding `max_lag_us` down to a multiple of `bin_us`. Must be ≥ 0, and at
    /// most [`MAX_LAG_STEPS`] × `bin_us` once rounded down.
    pub max_lag_us: i64,
    /// A lag with fewer paired bins than this gets no coefficients. Values
    /// below 2 act as 2, the least a correlation needs.
    pub min_pairs: usize,
}

impl Default for CorrelationSettings {
    fn default() -> Self {
        CorrelationSettings {
            bin_us: DEFAULT_BIN_US,
            max_lag_us: DEFAULT_MAX_LAG_US,
            min_pairs: DEFAULT_MIN_PAIRS,
        }
    }
}

/// The coefficients at one lag (see the module doc for the lag's sign).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LagCorrelation {
    /// Positive: the network metric leads the app metric by this much.
    pub lag_us: i64,
    /// Bins where both series have a value at this lag.
    pub pairs: usize,
    /// `None` with fewer than `min_pairs` pairs or a constant series.
    pub pearson: Option<f64>,
    /// `None` like `pearson`.
    pub spearman: Option<f64>,
}

/// How an app metric and a network metric correlate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Correlation {
    pub app_samples: usize,
    pub network_samples: usize,
    pub bin_us: i64,
    /// The series side by side, no lag.
    pub at_zero: LagCorrelation,
    /// The lag with the largest |Pearson| among those that have one. Ties (|r|
    /// within 1e-9 of the largest) go to the smaller |lag|, then to the positive
    /// lag (the network leading, the direction in which the network would
    /// explain the app). `None` when no lag has a coefficient.
    pub best: Option<LagCorrelation>,
    /// Every lag tried, ascending.
    pub lags: Vec<LagCorrelation>,
}

#[derive(Debug, Clone, PartialEq, Error)]
pub enum CorrelationError {
    #[error("bin_us must be > 0 (got {bin_us})")]
    NonPositiveBin { bin_us: i64 },
    #[error("max_lag_us must be ≥ 0 (got {max_lag_us})")]
    NegativeMaxLag { max_lag_us: i64 },
    #[error(
        "max_lag_us / bin_us gives {steps} lag steps each side; at most {max} are allowed \
         (widen bin_us or narrow max_lag_us)"
    )]
    TooManyLagSteps { steps: i64, max: i64 },
    #[error("{series} sample {index}: value must be a finite number (got {value})")]
    NonFiniteValue {
        /// `"app"` or `"network"`.
        series: &'static str,
        index: usize,
        value: f64,
    },
}

/// Correlates `app` with `network` at every lag of the window (see the module doc
/// for the lag convention). Samples need not be sorted.
pub fn correlate(
    app: &[Sample],
    network: &[Sample],
    settings: &CorrelationSettings,
) -> Result<Correlation, CorrelationError> {
    let bin_us = settings.bin_us;
    if bin_us <= 0 {
        return Err(CorrelationError::NonPositiveBin { bin_us });
    }
    if settings.max_lag_us < 0 {
        return Err(CorrelationError::NegativeMaxLag {
            max_lag_us: settings.max_lag_us,
        });
    }
    // Both are non-negative, so this rounds down; and steps × bin_us ≤
    // max_lag_us, so no lag below overflows.
    let lag_steps = settings.max_lag_us / bin_us;
    if lag_steps > MAX_LAG_STEPS {
        return Err(CorrelationError::TooManyLagSteps {
            steps: lag_steps,
            max: MAX_LAG_STEPS,
        });
    }
    let app_bins = bin_means("app", app, bin_us)?;
    let network_bins = bin_means("network", network, bin_us)?;

    let lags: Vec<LagCorrelation> = (-lag_steps..=lag_steps)
        .map(|step| at_lag(&app_bins, &network_bins, step, bin_us, settings.min_pairs))
        .collect();
    // The range is symmetric, so lag 0 sits in the middle.
    let at_zero = lags[lags.len() / 2];
    let strongest = lags
        .iter()
        .filter_map(|lag| lag.pearson.map(f64::abs))
        .reduce(f64::max);
    let best = strongest.and_then(|strongest| {
        lags.iter()
            .filter(|lag| {
                lag.pearson
                    .is_some_and(|r| r.abs() >= strongest - BEST_TIE_TOLERANCE)
            })
            // The smaller |lag|, then the positive one (false sorts first).
            .min_by_key(|lag| (lag.lag_us.abs(), lag.lag_us < 0))
            .copied()
    });
    Ok(Correlation {
        app_samples: app.len(),
        network_samples: network.len(),
        bin_us,
        at_zero,
        best,
        lags,
    })
}

/// Pearson's product-moment correlation of paired values, clamped to [−1, 1]
/// against rounding. `None` when there are fewer than two pairs, the lengths
/// differ, a value is not finite, either side is constant, or the sums overflow.
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() < 2 || x.len() != y.len() {
        return None;
    }
    if x.iter().chain(y).any(|v| !v.is_finite()) || is_constant(x) || is_constant(y) {
        return None;
    }
    let n = x.len() as f64;
    let mean_x = x.iter().sum::<f64>() / n;
    let mean_y = y.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (xi, yi) in x.iter().zip(y) {
        let (dx, dy) = (xi - mean_x, yi - mean_y);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    // An infinite sum of squares would turn r into a silent 0, so it is refused
    // like any other overflow.
    if !(sxy.is_finite() && sxx.is_finite() && syy.is_finite()) || sxx == 0.0 || syy == 0.0 {
        return None;
    }
    let r = sxy / (sxx.sqrt() * syy.sqrt());
    r.is_finite().then(|| r.clamp(-1.0, 1.0))
}

/// Spearman's rank correlation: Pearson over the ranks, tied values given the
/// average of the ranks they span. `None` as for [`pearson`].
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() || x.iter().chain(y).any(|v| !v.is_finite()) {
        return None;
    }
    pearson(&average_ranks(x), &average_ranks(y))
}

/// Exact equality on purpose: the mean of a constant series can be off by an
/// ulp, and the tiny variance that leaves would yield a meaningless r.
fn is_constant(values: &[f64]) -> bool {
    values.iter().all(|v| *v == values[0])
}

/// 1-based ranks, each run of equal values given the mean of its positions.
fn average_ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let tied = values[order[start]];
        let end = start
            + order[start..]
                .iter()
                .take_while(|&&i| values[i] == tied)
                .count();
        // Positions start+1 ..= end, whose mean is (start + 1 + end) / 2.
        let rank = (start + 1 + end) as f64 / 2.0;
        for &i in &order[start..end] {
            ranks[i] = rank;
        }
        start = end;
    }
    ranks
}

/// Each bin's mean value, keyed by bin index ⌊time / bin_us⌋.
fn bin_means(
    series: &'static str,
    samples: &[Sample],
    bin_us: i64,
) -> Result<BTreeMap<i64, f64>, CorrelationError> {
    let mut bins: BTreeMap<i64, (f64, usize)> = BTreeMap::new();
    for (index, sample) in samples.iter().enumerate() {
        if !sample.value.is_finite() {
            return Err(CorrelationError::NonFiniteValue {
                series,
                index,
                value: sample.value,
            });
        }
        // Euclidean division floors for negative times too, where `/` would
        // truncate towards zero and merge bins −1 and 0.
        let (sum, count) = bins.entry(sample.time_us.div_euclid(bin_us)).or_default();
        *sum += sample.value;
        *count += 1;
    }
    Ok(bins
        .into_iter()
        .map(|(bin, (sum, count))| (bin, sum / count as f64))
        .collect())
}

/// The coefficients with app bin i paired with network bin i − `step`.
fn at_lag(
    app_bins: &BTreeMap<i64, f64>,
    network_bins: &BTreeMap<i64, f64>,
    step: i64,
    bin_us: i64,
    min_pairs: usize,
) -> LagCorrelation {
    // Walk the series with fewer bins and look its partners up in the other.
    // Either way the pairs come in ascending bin order, so the result does not
    // depend on which is walked. Bin indices near i64's ends have no partner
    // rather than overflowing.
    let (app_values, network_values): (Vec<f64>, Vec<f64>) = if app_bins.len() <= network_bins.len()
    {
        app_bins
            .iter()
            .filter_map(|(&bin, &app)| {
                let partner = network_bins.get(&bin.checked_sub(step)?)?;
                Some((app, *partner))
            })
            .unzip()
    } else {
        network_bins
            .iter()
            .filter_map(|(&bin, &network)| {
                let partner = app_bins.get(&bin.checked_add(step)?)?;
                Some((*partner, network))
            })
            .unzip()
    };
    let pairs = app_values.len();
    let enough = pairs >= min_pairs;
    LagCorrelation {
        lag_us: step * bin_us,
        pairs,
        pearson: enough
            .then(|| pearson(&app_values, &network_values))
            .flatten(),
        spearman: enough
            .then(|| spearman(&app_values, &network_values))
            .flatten(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE_US: i64 = 60_000_000;

    fn close(actual: Option<f64>, expected: f64) -> bool {
        actual.is_some_and(|r| (r - expected).abs() < 1e-12)
    }

    #[test]
    fn pearson_on_a_hand_worked_example() {
        // x = 1..5: mean 3, deviations −2 −1 0 1 2, Σdx² = 10.
        // y = 2 4 5 4 5: mean 4, deviations −2 0 1 0 1, Σdy² = 6.
        // Σdx·dy = 4 + 0 + 0 + 0 + 2 = 6, r = 6 / √(10·6) = 0.7745966692414834.
        let r = pearson(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 4.0, 5.0, 4.0, 5.0]);
        assert!(close(r, 6.0 / 60f64.sqrt()), "{r:?}");
        assert!(close(r, 0.7745966692414834), "{r:?}");
    }

    #[test]
    fn pearson_is_one_or_minus_one_on_exact_lines() {
        let x = [0.1, 0.7, 1.3, 2.9, 4.4];
        let rising: Vec<f64> = x.iter().map(|v| 2.0 * v + 1.0).collect();
        let falling: Vec<f64> = x.iter().map(|v| 10.0 - 3.0 * v).collect();
        assert!(close(pearson(&x, &rising), 1.0));
        assert!(close(pearson(&x, &falling), -1.0));
    }

    #[test]
    fn pearson_has_no_answer_for_constant_short_or_mismatched_series() {
        assert_eq!(pearson(&[0.1, 0.1, 0.1], &[1.0, 2.0, 3.0]), None);
        assert_eq!(pearson(&[1.0, 2.0, 3.0], &[7.0, 7.0, 7.0]), None);
        assert_eq!(pearson(&[1.0], &[2.0]), None);
        assert_eq!(pearson(&[1.0, 2.0, 3.0], &[1.0, 2.0]), None);
        assert_eq!(pearson(&[1.0, f64::NAN, 3.0], &[1.0, 2.0, 3.0]), None);
        // Σdx² overflows: refused rather than reported as r = 0.
        assert_eq!(pearson(&[-1e200, 1e200, 0.0], &[1.0, 3.0, 2.0]), None);
    }

    #[test]
    fn spearman_gives_ties_their_average_rank() {
        // y = 2 4 5 4 5 ranks 1, 2.5, 4.5, 2.5, 4.5 (the 4s share places 2 and 3,
        // the 5s places 4 and 5). Against x ranks 1..5: ȳ = 3, deviations
        // −2 −0.5 1.5 −0.5 1.5, Σdy² = 9, Σdx·dy = 4 + 0.5 + 0 − 0.5 + 3 = 7,
        // ρ = 7 / √(10·9) = 0.7378647873726218.
        assert_eq!(
            average_ranks(&[2.0, 4.0, 5.0, 4.0, 5.0]),
            vec![1.0, 2.5, 4.5, 2.5, 4.5]
        );
        let rho = spearman(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 4.0, 5.0, 4.0, 5.0]);
        assert!(close(rho, 7.0 / 90f64.sqrt()), "{rho:?}");
    }

    #[test]
    fn spearman_is_one_on_a_monotone_curve_that_pearson_finds_imperfect() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let cubes: Vec<f64> = x.iter().map(|v: &f64| v.powi(3)).collect();
        assert!(close(spearman(&x, &cubes), 1.0));
        // Cubes 1 8 27 64 125: mean 45, deviations −44 −37 −18 19 80, Σdy² = 10390,
        // Σdx·dy = 88 + 37 + 0 + 19 + 160 = 304, r = 304 / √(10·10390) ≈ 0.943.
        let r = pearson(&x, &cubes);
        assert!(close(r, 304.0 / 103_900f64.sqrt()), "{r:?}");
        assert_eq!(spearman(&x, &[4.0, 4.0, 4.0, 4.0, 4.0]), None);
    }

    /// A network metric with no periodicity (digits of π), one sample per bin at
    /// an irregular offset inside it, starting in negative time.
    fn network_series(bins: i64) -> Vec<Sample> {
        let digits = [
            3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0, 8.0, 9.0, 7.0, 9.0, 3.0, 2.0,
            3.0, 8.0, 4.0, 6.0, 2.0, 6.0, 4.0,
        ];
        (0..bins)
            .map(|bin| Sample {
                time_us: (bin - 5) * MINUTE_US + (bin * 7_919_000) % MINUTE_US,
                value: digits[bin as usize % digits.len()],
            })
            .collect()
    }

    /// `series` moved `bins` bins later in time, its values put through a line.
    fn delayed(series: &[Sample], bins: i64, scale: f64, offset: f64) -> Vec<Sample> {
        series
            .iter()
            .map(|s| Sample {
                // A different offset inside the bin than the source's.
                time_us: s.time_us.div_euclid(MINUTE_US) * MINUTE_US
                    + bins * MINUTE_US
                    + 41_000_000,
                value: scale * s.value + offset,
            })
            .collect()
    }

    fn window_of(bins: i64) -> CorrelationSettings {
        CorrelationSettings {
            bin_us: MINUTE_US,
            // Half a bin over, to check the rounding down.
            max_lag_us: bins * MINUTE_US + MINUTE_US / 2,
            min_pairs: 5,
        }
    }

    #[test]
    fn an_app_metric_following_the_network_by_three_bins_peaks_at_plus_three() {
        let network = network_series(24);
        // app(t) = 0.5 · network(t − 3 bins) + 100.
        let app = delayed(&network, 3, 0.5, 100.0);
        let result = correlate(&app, &network, &window_of(5)).unwrap();

        let lags: Vec<i64> = result.lags.iter().map(|l| l.lag_us / MINUTE_US).collect();
        assert_eq!(lags, (-5..=5).collect::<Vec<_>>());
        assert_eq!((result.app_samples, result.network_samples), (24, 24));

        let best = result.best.unwrap();
        assert_eq!(best.lag_us, 3 * MINUTE_US);
        // Every app bin has its network partner three bins earlier.
        assert_eq!(best.pairs, 24);
        assert!(close(best.pearson, 1.0), "{best:?}");
        assert!(close(best.spearman, 1.0), "{best:?}");
        assert_eq!(result.at_zero.lag_us, 0);
        assert_eq!(result.at_zero.pairs, 21);
        let at_zero = result.at_zero.pearson.unwrap();
        assert!(at_zero.abs() < 0.5, "{at_zero}");
    }

    #[test]
    fn an_app_metric_leading_the_network_by_two_bins_peaks_at_minus_two() {
        let app = network_series(24);
        // network(t) = 1000 − 4 · app(t − 2 bins): app moves first, and the
        // relation is inverse (an app value up, the network value down).
        let network = delayed(&app, 2, -4.0, 1000.0);
        let result = correlate(&app, &network, &window_of(4)).unwrap();
        let best = result.best.unwrap();
        assert_eq!(best.lag_us, -2 * MINUTE_US);
        assert!(close(best.pearson, -1.0), "{best:?}");
        assert!(result.at_zero.pearson.unwrap().abs() < 0.5, "{result:?}");
    }

    #[test]
    fn swapping_the_series_mirrors_the_lags() {
        // Unequal bin counts, so one call walks the app bins and the other the
        // network bins; the pairs, and so the coefficients, must be the same.
        let long = network_series(24);
        let short = delayed(&long[..10], 3, 0.5, 100.0);
        let settings = window_of(5);
        let forward = correlate(&short, &long, &settings).unwrap();
        let swapped = correlate(&long, &short, &settings).unwrap();
        let mirrored: Vec<LagCorrelation> = swapped
            .lags
            .iter()
            .rev()
            .map(|lag| LagCorrelation {
                lag_us: -lag.lag_us,
                ..*lag
            })
            .collect();
        assert_eq!(forward.lags, mirrored);
        assert_eq!(
            forward.best.map(|b| (b.lag_us, b.pairs)),
            Some((3 * MINUTE_US, 10))
        );
    }

    #[test]
    fn equally_strong_lags_go_to_the_smallest_then_the_positive() {
        // A period-4 wave 0 1 0 −1, one sample per bin from bin 0.
        let wave = |bins: i64, phase: i64| -> Vec<Sample> {
            (0..bins)
                .map(|bin| Sample {
                    time_us: bin * MINUTE_US,
                    value: [0.0, 1.0, 0.0, -1.0][((bin + phase) % 4) as usize],
                })
                .collect()
        };
        let settings = window_of(4);
        // The same wave: |r| = 1 at lags 0, ±2 and ±4; zero wins.
        let result = correlate(&wave(16, 0), &wave(16, 0), &settings).unwrap();
        assert!(close(result.lags[2].pearson, -1.0), "{result:?}");
        assert_eq!(result.best.map(|b| b.lag_us), Some(0));
        // The app a quarter period ahead: r = +1 at −1 bin and −1 at +1 bin (the
        // wave half a period off), about 0 at lag 0; the positive lag wins.
        let result = correlate(&wave(16, 1), &wave(16, 0), &settings).unwrap();
        let at = |bins: i64| result.lags[(bins + 4) as usize].pearson;
        assert!(close(at(-1), 1.0) && close(at(1), -1.0), "{result:?}");
        assert!(at(0).is_some_and(|r| r.abs() < 0.5), "{result:?}");
        assert_eq!(result.best.map(|b| b.lag_us), Some(MINUTE_US));
    }

    #[test]
    fn samples_in_one_bin_are_averaged_and_bins_floor_in_negative_time() {
        // App bin means 1 2 3 4 5 and network 2 4 5 4 5 over bins −2..=2 give the
        // hand-worked r = 6/√60 of pearson_on_a_hand_worked_example — but only if
        // bin 0's samples 2 and 4 average to 3, and the app sample at −30 s lands
        // in bin −1 (⌊−0.5⌋), not bin 0 as truncation would put it. Input unsorted.
        let at = |seconds: i64, value: f64| Sample {
            time_us: seconds * 1_000_000,
            value,
        };
        let app = [
            at(55, 4.0),
            at(-110, 1.0),
            at(179, 5.0),
            at(-30, 2.0),
            at(5, 2.0),
            at(61, 4.0),
        ];
        let network = [
            at(150, 5.0),
            at(-90, 2.0),
            at(30, 5.0),
            at(-30, 4.0),
            at(90, 4.0),
        ];
        let settings = CorrelationSettings {
            max_lag_us: 0,
            ..CorrelationSettings::default()
        };
        let result = correlate(&app, &network, &settings).unwrap();
        assert_eq!(result.lags.len(), 1);
        assert_eq!(result.at_zero.pairs, 5);
        assert!(
            close(result.at_zero.pearson, 0.7745966692414834),
            "{result:?}"
        );
        assert!(
            close(result.at_zero.spearman, 7.0 / 90f64.sqrt()),
            "{result:?}"
        );
        assert_eq!(result.best, Some(result.at_zero));
    }

    #[test]
    fn too_few_pairs_give_no_coefficients() {
        // Four overlapping bins against the default minimum of five.
        let network = network_series(4);
        let app = delayed(&network, 0, 2.0, 0.0);
        let settings = CorrelationSettings {
            max_lag_us: MINUTE_US,
            ..CorrelationSettings::default()
        };
        let result = correlate(&app, &network, &settings).unwrap();
        assert_eq!(result.at_zero.pairs, 4);
        assert!(result
            .lags
            .iter()
            .all(|l| l.pearson.is_none() && l.spearman.is_none()));
        assert_eq!(result.best, None);
    }

    #[test]
    fn settings_out_of_bounds_are_refused() {
        let refused = |bin_us, max_lag_us| {
            let settings = CorrelationSettings {
                bin_us,
                max_lag_us,
                min_pairs: 5,
            };
            correlate(&[], &[], &settings).unwrap_err()
        };
        assert_eq!(
            refused(0, 0),
            CorrelationError::NonPositiveBin { bin_us: 0 }
        );
        assert_eq!(
            refused(1, -1),
            CorrelationError::NegativeMaxLag { max_lag_us: -1 }
        );
        let too_many = refused(10, 10_019);
        assert_eq!(
            too_many,
            CorrelationError::TooManyLagSteps {
                steps: 1_001,
                max: 1_000
            }
        );
        assert!(too_many.to_string().contains("at most 1000"), "{too_many}");
        // Exactly the limit is allowed.
        let settings = CorrelationSettings {
            bin_us: 10,
            max_lag_us: 10_009,
            min_pairs: 5,
        };
        assert_eq!(correlate(&[], &[], &settings).unwrap().lags.len(), 2_001);
    }

    #[test]
    fn a_non_finite_value_names_its_series_and_index() {
        let fine = network_series(3);
        let mut broken = fine.clone();
        broken[2].value = f64::NAN;
        let settings = CorrelationSettings::default();
        let error = correlate(&fine, &broken, &settings).unwrap_err();
        assert!(
            matches!(
                error,
                CorrelationError::NonFiniteValue {
                    series: "network",
                    index: 2,
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "network sample 2: value must be a finite number (got NaN)"
        );
        broken[2].value = f64::INFINITY;
        let error = correlate(&broken, &fine, &settings).unwrap_err();
        assert!(error.to_string().starts_with("app sample 2:"), "{error}");
    }
}
