//! Inference over small samples, as opinion studies report them (ITU-T P.800 MOS with
//! confidence intervals, pairwise t-tests, Pearson r against an objective metric,
//! least-squares slopes; the pipeline of Alali, PhD dissertation, University of
//! Virginia, 2019, ch. 5). Student's t distribution comes from `statrs`.
//!
//! Every function refuses non-finite samples (a rating is a number or an error in the
//! data, not a value to skip silently) and too few of them.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};
use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum InferenceError {
    #[error("{what} needs at least {needed} values (got {got})")]
    TooFew {
        what: &'static str,
        needed: usize,
        got: usize,
    },
    #[error("value {index} is not a finite number ({value})")]
    NotFinite { index: usize, value: f64 },
    #[error("the two series differ in length ({x} and {y})")]
    LengthMismatch { x: usize, y: usize },
    #[error("{0}: the values do not vary")]
    NoVariance(&'static str),
    #[error("the confidence level must be between 0 and 1 (got {0})")]
    InvalidLevel(f64),
}

fn check(samples: &[f64], what: &'static str, needed: usize) -> Result<(), InferenceError> {
    if samples.len() < needed {
        return Err(InferenceError::TooFew {
            what,
            needed,
            got: samples.len(),
        });
    }
    match samples.iter().position(|v| !v.is_finite()) {
        Some(index) => Err(InferenceError::NotFinite {
            index,
            value: samples[index],
        }),
        None => Ok(()),
    }
}

fn mean(samples: &[f64]) -> f64 {
    samples.iter().sum::<f64>() / samples.len() as f64
}

/// The sample variance (divide by n − 1) of at least two values.
fn sample_variance(samples: &[f64]) -> f64 {
    let m = mean(samples);
    samples.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (samples.len() - 1) as f64
}

fn students_t(df: f64) -> StudentsT {
    // Location 0, scale 1 and df > 0 (checked by the callers) are always accepted.
    StudentsT::new(0.0, 1.0, df).expect("Student's t with df > 0")
}

/// Two-sided p-value of `t` under Student's t with `df` degrees of freedom.
fn two_sided_p(t: f64, df: f64) -> f64 {
    (2.0 * students_t(df).sf(t.abs())).min(1.0)
}

/// A mean with its confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MeanCi {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (divide by n − 1).
    pub stddev: f64,
    pub level: f64,
    /// `t(1 − (1 − level)/2, n − 1) · stddev / √n`.
    pub half_width: f64,
    pub low: f64,
    pub high: f64,
}

/// The mean of `samples` with its Student-t confidence interval at `level` (0.95 for
/// the usual 95 %).
pub fn mean_ci(samples: &[f64], level: f64) -> Result<MeanCi, InferenceError> {
    if !(level > 0.0 && level < 1.0) {
        return Err(InferenceError::InvalidLevel(level));
    }
    check(samples, "a confidence interval", 2)?;
    let n = samples.len();
    let mean = mean(samples);
    let stddev = sample_variance(samples).sqrt();
    let quantile = students_t((n - 1) as f64).inverse_cdf(1.0 - (1.0 - level) / 2.0);
    let half_width = quantile * stddev / (n as f64).sqrt();
    Ok(MeanCi {
        n,
        mean,
        stddev,
        level,
        half_width,
        low: mean - half_width,
        high: mean + half_width,
    })
}

/// Which two-sample t-test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TTestKind {
    /// Unequal variances, Welch–Satterthwaite degrees of freedom.
    Welch,
    /// Student's test with a pooled variance (assumes equal variances).
    Pooled,
}

/// A two-sample t-test of equal means.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TTest {
    pub kind: TTestKind,
    /// mean(a) − mean(b).
    pub mean_difference: f64,
    pub t: f64,
    pub df: f64,
    /// Two-sided.
    pub p_value: f64,
}

/// Two-sample t-test of H₀ "equal means", two-sided.
pub fn t_test(a: &[f64], b: &[f64], kind: TTestKind) -> Result<TTest, InferenceError> {
    check(a, "a t-test sample", 2)?;
    check(b, "a t-test sample", 2)?;
    let (n_a, n_b) = (a.len() as f64, b.len() as f64);
    let (var_a, var_b) = (sample_variance(a), sample_variance(b));
    let mean_difference = mean(a) - mean(b);
    let (standard_error, df) = match kind {
        TTestKind::Welch => {
            let (share_a, share_b) = (var_a / n_a, var_b / n_b);
            let df = (share_a + share_b).powi(2)
                / (share_a.powi(2) / (n_a - 1.0) + share_b.powi(2) / (n_b - 1.0));
            ((share_a + share_b).sqrt(), df)
        }
        TTestKind::Pooled => {
            let df = n_a + n_b - 2.0;
            let pooled = ((n_a - 1.0) * var_a + (n_b - 1.0) * var_b) / df;
            ((pooled * (1.0 / n_a + 1.0 / n_b)).sqrt(), df)
        }
    };
    // Two constant samples: t is undefined (0/0) or infinite; no test to report.
    if standard_error == 0.0 {
        return Err(InferenceError::NoVariance("a t-test"));
    }
    let t = mean_difference / standard_error;
    Ok(TTest {
        kind,
        mean_difference,
        t,
        df,
        p_value: two_sided_p(t, df),
    })
}

/// Pearson's product-moment correlation with its two-sided p-value (t = r·√((n−2)/(1−r²))).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pearson {
    pub n: usize,
    pub r: f64,
    /// `None` with fewer than three pairs (no degrees of freedom left).
    pub p_value: Option<f64>,
}

fn check_pairs(x: &[f64], y: &[f64], what: &'static str) -> Result<(), InferenceError> {
    if x.len() != y.len() {
        return Err(InferenceError::LengthMismatch {
            x: x.len(),
            y: y.len(),
        });
    }
    check(x, what, 2)?;
    check(y, what, 2)
}

/// Sums of squares and cross products about the means: (Sxx, Syy, Sxy).
fn moments(x: &[f64], y: &[f64]) -> (f64, f64, f64) {
    let (mean_x, mean_y) = (mean(x), mean(y));
    x.iter()
        .zip(y)
        .fold((0.0, 0.0, 0.0), |(sxx, syy, sxy), (xi, yi)| {
            let (dx, dy) = (xi - mean_x, yi - mean_y);
            (sxx + dx * dx, syy + dy * dy, sxy + dx * dy)
        })
}

/// Pearson's r between paired values.
pub fn pearson(x: &[f64], y: &[f64]) -> Result<Pearson, InferenceError> {
    check_pairs(x, y, "a correlation")?;
    let (sxx, syy, sxy) = moments(x, y);
    if sxx == 0.0 || syy == 0.0 {
        return Err(InferenceError::NoVariance("a correlation"));
    }
    let r = (sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0);
    let n = x.len();
    let p_value = (n > 2).then(|| {
        let df = (n - 2) as f64;
        if r.abs() == 1.0 {
            0.0
        } else {
            two_sided_p(r * (df / (1.0 - r * r)).sqrt(), df)
        }
    });
    Ok(Pearson { n, r, p_value })
}

/// A least-squares line `y = intercept + slope · x`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinearFit {
    pub slope: f64,
    pub intercept: f64,
}

/// Ordinary least squares of `y` on `x`.
pub fn least_squares(x: &[f64], y: &[f64]) -> Result<LinearFit, InferenceError> {
    check_pairs(x, y, "a line")?;
    let (sxx, _, sxy) = moments(x, y);
    if sxx == 0.0 {
        return Err(InferenceError::NoVariance("a line's x"));
    }
    let slope = sxy / sxx;
    Ok(LinearFit {
        slope,
        intercept: mean(y) - slope * mean(x),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [f64; 8] = [5.0, 4.0, 5.0, 4.0, 4.0, 5.0, 3.0, 5.0];
    const B: [f64; 6] = [2.0, 3.0, 2.0, 1.0, 3.0, 2.0];

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance * b.abs().max(1e-300)
    }

    /// References from scipy 1.17: `scipy.stats.t.ppf(0.975, n-1) * sem(x)`.
    #[test]
    fn confidence_interval_of_a_mean() {
        let ci = mean_ci(&A, 0.95).unwrap();
        assert_eq!(ci.n, 8);
        assert_eq!(ci.mean, 4.375);
        assert!(close(ci.low, 3.7529805293659506, 1e-9), "{ci:?}");
        assert!(close(ci.high, 4.99701947063405, 1e-9), "{ci:?}");
        let ci = mean_ci(&[1.0, 2.0, 1.0, 1.0, 2.0], 0.95).unwrap();
        assert!(close(ci.low, 0.7199126193417443, 1e-9), "{ci:?}");
        assert_eq!(
            mean_ci(&[3.0], 0.95),
            Err(InferenceError::TooFew {
                what: "a confidence interval",
                needed: 2,
                got: 1
            })
        );
        assert_eq!(mean_ci(&A, 1.0), Err(InferenceError::InvalidLevel(1.0)));
    }

    /// References: `scipy.stats.ttest_ind(a, b, equal_var=False / True)`.
    #[test]
    fn welch_and_pooled_t_tests() {
        let welch = t_test(&A, &B, TTestKind::Welch).unwrap();
        assert!(close(welch.t, 5.459070890395133, 1e-9), "{welch:?}");
        assert!(close(welch.df, 10.85034248652185, 1e-9), "{welch:?}");
        assert!(
            close(welch.p_value, 0.00020793667664727338, 1e-6),
            "{welch:?}"
        );
        let pooled = t_test(&A, &B, TTestKind::Pooled).unwrap();
        assert!(close(pooled.t, 5.4689573258963735, 1e-9), "{pooled:?}");
        assert_eq!(pooled.df, 12.0);
        assert!(
            close(pooled.p_value, 0.00014322454995411188, 1e-6),
            "{pooled:?}"
        );
        // Small p-values keep their precision (sf, not 1 − cdf).
        let far = t_test(&A, &[1.0, 2.0, 1.0, 1.0, 2.0], TTestKind::Welch).unwrap();
        assert!(close(far.p_value, 6.24206241328154e-06, 1e-6), "{far:?}");
        assert_eq!(
            t_test(&[4.0, 4.0], &[4.0, 4.0, 4.0], TTestKind::Welch),
            Err(InferenceError::NoVariance("a t-test"))
        );
        assert!(matches!(
            t_test(&[4.0, f64::NAN], &B, TTestKind::Welch),
            Err(InferenceError::NotFinite { index: 1, .. })
        ));
    }

    /// A textbook pair (x = 1..5, y = 2, 4, 5, 4, 5): r = √0.6, slope 0.6, intercept 2.2;
    /// p from `scipy.stats.pearsonr`.
    #[test]
    fn pearson_and_least_squares() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let y = [2.0, 4.0, 5.0, 4.0, 5.0];
        let pearson = pearson(&x, &y).unwrap();
        assert!(close(pearson.r, 0.6f64.sqrt(), 1e-12), "{pearson:?}");
        assert!(close(pearson.p_value.unwrap(), 0.1240270626575546, 1e-9));
        let fit = least_squares(&x, &y).unwrap();
        assert!(close(fit.slope, 0.6, 1e-12) && close(fit.intercept, 2.2, 1e-12));
        assert_eq!(
            super::pearson(&[1.0, 2.0], &[3.0, 5.0]).unwrap().p_value,
            None
        );
        assert_eq!(
            super::pearson(&x, &[1.0; 5]),
            Err(InferenceError::NoVariance("a correlation"))
        );
        assert_eq!(
            least_squares(&x, &y[..3]),
            Err(InferenceError::LengthMismatch { x: 5, y: 3 })
        );
    }
}
