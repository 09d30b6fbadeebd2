//! Forward step-wise variable selection by AIC over ordinary least squares, to
//! refit the weights of the health score (Chard, Bubendorfer and Ng, "Network
//! health and e-Science in commercial clouds", FGCS 2015: Table 1 lists a
//! forward step analysis with AIC and p-value per step, Fig. 6 the adjusted R²
//! of every subset of metrics). Pure functions, no I/O.
//!
//! Every model has an intercept. With `n` observations, `p` regressors and
//! `k = p + 1` coefficients:
//!
//! - **AIC** is R's `extractAIC` for linear models, `n·ln(RSS/n) + 2·k`, the
//!   number R's `step` reports, so results compare with such tables; the
//!   constants it drops from the log-likelihood are the same for every model of
//!   one target, and selection only uses differences.
//! - **R²** = 1 − RSS/TSS and **adjusted R²** = 1 − (1 − R²)(n − 1)/(n − p − 1),
//!   the latter penalising regressors that explain little (Fig. 6).
//! - **p-value** of a coefficient β: t = β/se(β) with se from σ̂²·(X'X)⁻¹,
//!   σ̂² = RSS/(n − k), two-sided against Student's t with n − k degrees of
//!   freedom, evaluated through the regularised incomplete beta function
//!   (continued fraction), so no statistics dependency is needed.
//! - **Perfect fit**: the data are centred before fitting, and a residual norm
//!   below 1e-12 of the centred fit's scale (‖y − ȳ‖ plus Σ|βⱼ|·‖xⱼ − x̄ⱼ‖,
//!   what rounding in the residual is proportional to; observed rounding is
//!   ~1e-16 of it) is rounding, not signal, so RSS is taken as exactly 0: AIC
//!   is −∞ (JSON `null`), R² and adjusted R² are 1 and the p-values of non-zero
//!   coefficients are 0. Without this, residuals of pure rounding would let any
//!   extra candidate "lower" AIC by an arbitrary amount. No candidate lowers an
//!   AIC of −∞, so selection stops there.
//! - **Collinearity**: the centred design matrix is factorised by modified
//!   Gram–Schmidt (with re-orthogonalisation). A column whose remainder, after
//!   removing what the columns before it explain, is below 1e-7 of its own
//!   (centred) norm (R's `lm` tolerance) is collinear, and so is a column whose centred norm is
//!   below 1e-7 of its raw norm (constant: collinear with the intercept). Forward
//!   selection skips such a candidate at that step; [`subsets_adjusted_r2`]
//!   leaves that subset out (a smaller subset already has the same fit).
//! - **Inputs**: every value must be finite and every candidate as long as the
//!   target; names must be distinct (they identify the selected columns). At
//!   least `candidates + 3` observations are required, so that even with every
//!   candidate in, two residual degrees of freedom remain: σ̂² and the t-test
//!   then have df ≥ 2 and adjusted R² is defined (n > p + 1). A constant
//!   target (all values equal) has nothing to explain: an error.

use serde::Serialize;

/// One candidate regressor: its name and one value per observation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate<'a> {
    pub name: &'a str,
    pub values: &'a [f64],
}

/// Why a fit could not be made. Messages say what and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    #[error("no candidate regressors")]
    NoCandidates,
    #[error("{candidates} candidates: all-subsets regression takes at most {max} (2^m − 1 fits)")]
    TooManyCandidates { candidates: usize, max: usize },
    #[error("candidate `{name}` appears more than once")]
    DuplicateName { name: String },
    #[error("candidate `{name}` has {got} values, the target has {expected}")]
    LengthMismatch {
        name: String,
        expected: usize,
        got: usize,
    },
    #[error(
        "{observations} observations: need at least {needed} (number of candidates + 3, \
         so two residual degrees of freedom remain with every candidate in)"
    )]
    TooFewObservations { observations: usize, needed: usize },
    #[error("target value at index {index} is not finite")]
    NonFiniteTarget { index: usize },
    #[error("candidate `{name}` value at index {index} is not finite")]
    NonFinite { name: String, index: usize },
    #[error("the target is constant: there is nothing to explain")]
    ConstantTarget,
}

/// One accepted step of forward selection.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// 1-based.
    pub step: usize,
    /// The candidate entered at this step.
    pub added: String,
    /// AIC of the model after adding it (−∞, JSON `null`, for a perfect fit).
    pub aic: f64,
    /// Two-sided t-test p-value of the added regressor's coefficient in that model.
    pub p_value: f64,
    pub adjusted_r2: f64,
    pub r2: f64,
}

/// The result of [`forward_select`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    pub observations: usize,
    /// AIC of the intercept-only model.
    pub null_aic: f64,
    /// Accepted steps only, in order.
    pub steps: Vec<Step>,
    /// Names in the order they entered.
    pub selected: Vec<String>,
    pub intercept: f64,
    /// Coefficients of the final model, in entry order.
    pub coefficients: Vec<(String, f64)>,
    pub adjusted_r2: f64,
    pub r2: f64,
}

/// [`subsets_adjusted_r2`] fits 2^m − 1 models; beyond this it is refused.
pub const MAX_SUBSET_CANDIDATES: usize = 8;

/// Remainder below this fraction of a column's norm: collinear (R's `lm` tolerance).
const COLLINEAR_TOLERANCE: f64 = 1e-7;
/// Residual norm below this fraction of the fit's scale: rounding, a perfect fit.
const PERFECT_FIT_TOLERANCE: f64 = 1e-12;

/// Forward selection: start from the intercept-only model; at each step add the
/// candidate that lowers AIC most (the first in `candidates` order on a tie);
/// stop when no candidate lowers AIC (or all are in). Collinear candidates are
/// skipped at the step where they are collinear.
pub fn forward_select(target: &[f64], candidates: &[Candidate<'_>]) -> Result<Fit, FitError> {
    let null = validate(target, candidates)?;
    let n = target.len();
    let tss = null.rss;
    let null_aic = aic(n, null.rss, 1);

    let mut in_model: Vec<usize> = Vec::new();
    let mut current = null;
    let mut current_aic = null_aic;
    let mut steps = Vec::new();
    while in_model.len() < candidates.len() {
        let mut best: Option<(usize, Ols, f64)> = None;
        for j in (0..candidates.len()).filter(|j| !in_model.contains(j)) {
            let columns: Vec<&[f64]> = in_model
                .iter()
                .chain(std::iter::once(&j))
                .map(|&i| candidates[i].values)
                .collect();
            let Some(fit) = ols(target, &columns) else {
                continue; // collinear with those already in
            };
            let fit_aic = aic(n, fit.rss, fit.coefficients.len());
            let threshold = best.as_ref().map_or(current_aic, |b| b.2);
            if fit_aic < threshold {
                best = Some((j, fit, fit_aic));
            }
        }
        let Some((j, fit, fit_aic)) = best else {
            break;
        };
        in_model.push(j);
        let p = in_model.len();
        let r2 = r_squared(fit.rss, tss);
        steps.push(Step {
            step: p,
            added: candidates[j].name.to_string(),
            aic: fit_aic,
            p_value: fit.p_value(p),
            adjusted_r2: adjusted_r_squared(r2, n, p),
            r2,
        });
        current = fit;
        current_aic = fit_aic;
    }

    let r2 = r_squared(current.rss, tss);
    Ok(Fit {
        observations: n,
        null_aic,
        steps,
        selected: in_model
            .iter()
            .map(|&i| candidates[i].name.to_string())
            .collect(),
        intercept: current.coefficients[0],
        coefficients: in_model
            .iter()
            .zip(&current.coefficients[1..])
            .map(|(&i, &beta)| (candidates[i].name.to_string(), beta))
            .collect(),
        adjusted_r2: adjusted_r_squared(r2, n, in_model.len()),
        r2,
    })
}

/// Every non-empty subset's adjusted R² (like the paper's Fig. 6), sorted best
/// first (ties: fewer regressors first, then candidate order). Names within a
/// subset are in `candidates` order. Subsets with collinear columns are left
/// out, so without collinearity there are exactly 2^m − 1 entries. At most
/// [`MAX_SUBSET_CANDIDATES`] candidates.
pub fn subsets_adjusted_r2(
    target: &[f64],
    candidates: &[Candidate<'_>],
) -> Result<Vec<(Vec<String>, f64)>, FitError> {
    if candidates.len() > MAX_SUBSET_CANDIDATES {
        return Err(FitError::TooManyCandidates {
            candidates: candidates.len(),
            max: MAX_SUBSET_CANDIDATES,
        });
    }
    let null = validate(target, candidates)?;
    let n = target.len();
    let mut out: Vec<(Vec<String>, f64)> = Vec::new();
    for mask in 1u32..(1 << candidates.len()) {
        let members: Vec<&Candidate<'_>> = candidates
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, c)| c)
            .collect();
        let columns: Vec<&[f64]> = members.iter().map(|c| c.values).collect();
        let Some(fit) = ols(target, &columns) else {
            continue;
        };
        let adjusted = adjusted_r_squared(r_squared(fit.rss, null.rss), n, members.len());
        out.push((
            members.iter().map(|c| c.name.to_string()).collect(),
            adjusted,
        ));
    }
    // Stable: equal keys keep mask order, i.e. candidate order.
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.len().cmp(&b.0.len())));
    Ok(out)
}

/// Weights proposed from a fit: the final model's coefficients of the named
/// metrics, negative ones set to 0 (a metric oriented higher = healthier must not
/// lower the score), scaled to sum to 1; metrics not selected get 0. Returns
/// `(name, weight)` for every name in `names`, in that order; `None` when no
/// selected coefficient of a named metric is positive. Coefficients are only
/// comparable as weights when the metrics share a scale (the health metrics are
/// normalised to [0, 1]).
pub fn proposed_weights(fit: &Fit, names: &[&str]) -> Option<Vec<(String, f64)>> {
    let raw: Vec<f64> = names
        .iter()
        .map(|name| {
            fit.coefficients
                .iter()
                .find(|(selected, _)| selected == name)
                .map_or(0.0, |&(_, beta)| {
                    if beta.is_finite() && beta > 0.0 {
                        beta
                    } else {
                        0.0
                    }
                })
        })
        .collect();
    let total: f64 = raw.iter().sum();
    if !(total > 0.0 && total.is_finite()) {
        return None;
    }
    Some(
        names
            .iter()
            .zip(raw)
            .map(|(name, w)| (name.to_string(), w / total))
            .collect(),
    )
}

/// Checks the inputs; returns the intercept-only fit (its RSS is the TSS).
fn validate(target: &[f64], candidates: &[Candidate<'_>]) -> Result<Ols, FitError> {
    if candidates.is_empty() {
        return Err(FitError::NoCandidates);
    }
    for (i, c) in candidates.iter().enumerate() {
        if candidates[..i].iter().any(|d| d.name == c.name) {
            return Err(FitError::DuplicateName {
                name: c.name.to_string(),
            });
        }
    }
    let n = target.len();
    if let Some(c) = candidates.iter().find(|c| c.values.len() != n) {
        return Err(FitError::LengthMismatch {
            name: c.name.to_string(),
            expected: n,
            got: c.values.len(),
        });
    }
    let needed = candidates.len() + 3;
    if n < needed {
        return Err(FitError::TooFewObservations {
            observations: n,
            needed,
        });
    }
    if let Some(index) = target.iter().position(|v| !v.is_finite()) {
        return Err(FitError::NonFiniteTarget { index });
    }
    for c in candidates {
        if let Some(index) = c.values.iter().position(|v| !v.is_finite()) {
            return Err(FitError::NonFinite {
                name: c.name.to_string(),
                index,
            });
        }
    }
    if target.iter().all(|&v| v == target[0]) {
        return Err(FitError::ConstantTarget);
    }
    match ols(target, &[]) {
        Some(null) if null.rss > 0.0 => Ok(null),
        _ => Err(FitError::ConstantTarget), // only if the spread underflows
    }
}

fn aic(n: usize, rss: f64, k: usize) -> f64 {
    if rss == 0.0 {
        return f64::NEG_INFINITY; // perfect fit: see the module docs
    }
    let n = n as f64;
    n * (rss / n).ln() + 2.0 * k as f64
}

fn r_squared(rss: f64, tss: f64) -> f64 {
    1.0 - rss / tss
}

/// Callers guarantee n > p + 1 (see `validate`).
fn adjusted_r_squared(r2: f64, n: usize, p: usize) -> f64 {
    1.0 - (1.0 - r2) * (n - 1) as f64 / (n - p - 1) as f64
}

/// An OLS fit with intercept.
#[derive(Debug)]
struct Ols {
    /// Intercept first, then one per column in the order given.
    coefficients: Vec<f64>,
    /// Standard errors, same order.
    std_errors: Vec<f64>,
    /// 0 for a perfect fit.
    rss: f64,
    /// Residual degrees of freedom, n − k.
    df: usize,
}

impl Ols {
    fn p_value(&self, j: usize) -> f64 {
        let (beta, se) = (self.coefficients[j], self.std_errors[j]);
        if se == 0.0 {
            // Perfect fit: the coefficient is known exactly.
            return if beta == 0.0 { 1.0 } else { 0.0 };
        }
        student_t_two_sided(beta / se, self.df as f64)
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}

/// Removes from `v` its projection on the orthonormal `basis`, twice (one pass of
/// modified Gram–Schmidt loses orthogonality on nearly dependent columns);
/// returns the removed coefficients.
fn orthogonalise(v: &mut [f64], basis: &[Vec<f64>]) -> Vec<f64> {
    let mut coefficients = vec![0.0; basis.len()];
    for _ in 0..2 {
        for (q, c) in basis.iter().zip(coefficients.iter_mut()) {
            let d = dot(q, v);
            *c += d;
            v.iter_mut().zip(q).for_each(|(x, qi)| *x -= d * qi);
        }
    }
    coefficients
}

/// OLS of `y` on an intercept plus `columns` (each as long as `y`, with
/// `y.len()` > number of coefficients), by a QR factorisation of the design
/// matrix. `None` when the columns are collinear.
///
/// Every column and the target are centred first (the intercept column is kept,
/// to absorb the rounding of the means): large offsets then cost no precision,
/// and the fit's rounding is relative to the centred magnitudes, which is what
/// the perfect-fit rule compares against.
fn ols(y: &[f64], columns: &[&[f64]]) -> Option<Ols> {
    let n = y.len();
    let k = columns.len() + 1;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
    let centre = |v: &[f64], m: f64| v.iter().map(|x| x - m).collect::<Vec<f64>>();
    let means: Vec<f64> = columns.iter().map(|x| mean(x)).collect();
    let mut design: Vec<Vec<f64>> = vec![vec![1.0; n]];
    for (x, &m) in columns.iter().zip(&means) {
        let centred = centre(x, m);
        // Constant within rounding: collinear with the intercept (as R's `lm`
        // judges it, relative to the raw column).
        if norm(&centred) <= COLLINEAR_TOLERANCE * norm(x) {
            return None;
        }
        design.push(centred);
    }

    // r[j] is column j of the upper-triangular R (length j + 1).
    let mut q: Vec<Vec<f64>> = Vec::with_capacity(k);
    let mut r: Vec<Vec<f64>> = Vec::with_capacity(k);
    for x in &design {
        let mut v = x.clone();
        let mut column = orthogonalise(&mut v, &q);
        let remainder = norm(&v);
        if remainder.is_nan() || remainder <= COLLINEAR_TOLERANCE * norm(x) {
            return None;
        }
        v.iter_mut().for_each(|x| *x /= remainder);
        column.push(remainder);
        q.push(v);
        r.push(column);
    }

    let y_mean = mean(y);
    let y_centred = centre(y, y_mean);
    let mut residual = y_centred.clone();
    let qty = orthogonalise(&mut residual, &q);
    let mut rss = dot(&residual, &residual);

    // R·b = Qᵀy, back substitution; b[0] is the (tiny) constant of the centred fit.
    let mut b = vec![0.0; k];
    for i in (0..k).rev() {
        let known: f64 = (i + 1..k).map(|j| r[j][i] * b[j]).sum();
        b[i] = (qty[i] - known) / r[i][i];
    }

    let scale = norm(&y_centred)
        + design
            .iter()
            .zip(&b)
            .map(|(x, b)| b.abs() * norm(x))
            .sum::<f64>();
    if rss.sqrt() <= PERFECT_FIT_TOLERANCE * scale {
        rss = 0.0;
    }

    // y = ȳ + b₀ + Σ bⱼ(xⱼ − x̄ⱼ), so intercept = ȳ + b₀ − Σ bⱼx̄ⱼ and the slopes are
    // b₁… Each coefficient is c·b for a vector c, with variance σ̂²·c(DᵀD)⁻¹c =
    // σ̂²·‖R⁻ᵀc‖² (D the centred design): a forward substitution per coefficient.
    let mut coefficients =
        vec![y_mean + b[0] - b[1..].iter().zip(&means).map(|(b, m)| b * m).sum::<f64>()];
    coefficients.extend_from_slice(&b[1..]);
    let df = n - k;
    let sigma2 = rss / df as f64;
    let standard_error = |c: &[f64]| {
        let mut z = vec![0.0; k];
        for j in 0..k {
            let known: f64 = (0..j).map(|i| r[j][i] * z[i]).sum();
            z[j] = (c[j] - known) / r[j][j];
        }
        (sigma2 * dot(&z, &z)).sqrt()
    };
    let mut std_errors = Vec::with_capacity(k);
    std_errors.push(standard_error(
        &std::iter::once(1.0)
            .chain(means.iter().map(|m| -m))
            .collect::<Vec<f64>>(),
    ));
    for j in 1..k {
        let mut c = vec![0.0; k];
        c[j] = 1.0;
        std_errors.push(standard_error(&c));
    }

    Some(Ols {
        coefficients,
        std_errors,
        rss,
        df,
    })
}

/// Two-sided p-value of Student's t statistic with `df` degrees of freedom:
/// P(|T| ≥ |t|) = I_x(df/2, 1/2) with x = df/(df + t²).
fn student_t_two_sided(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    let t2 = t * t;
    if t2.is_infinite() {
        return 0.0;
    }
    // 1 − x computed directly keeps its precision when x is close to 1.
    regularised_incomplete_beta(df / 2.0, 0.5, df / (df + t2), t2 / (df + t2))
}

/// I_x(a, b) for a, b > 0, given x and y = 1 − x (each computed accurately by
/// the caller). The continued fraction converges quickly for
/// x < (a + 1)/(a + b + 2); beyond, I_x(a, b) = 1 − I_y(b, a).
fn regularised_incomplete_beta(a: f64, b: f64, x: f64, y: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if y <= 0.0 {
        return 1.0;
    }
    if x < (a + 1.0) / (a + b + 2.0) {
        incomplete_beta_fraction(a, b, x, y)
    } else {
        1.0 - incomplete_beta_fraction(b, a, y, x)
    }
}

/// I_x(a, b) = x^a·y^b / (a·B(a, b)) · 1/(1 + d₁/(1 + d₂/(1 + …))) with
/// d₂ₘ₊₁ = −(a + m)(a + b + m)x / ((a + 2m)(a + 2m + 1)) and
/// d₂ₘ = m(b − m)x / ((a + 2m − 1)(a + 2m)) (DLMF 8.17.22), the denominator
/// evaluated by the modified Lentz method.
fn incomplete_beta_fraction(a: f64, b: f64, x: f64, y: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPSILON: f64 = 1e-15;
    // Iterations grow like √max(a, b); this covers df far beyond any data set.
    const MAX_TERMS: usize = 1_000_000;

    let ln_x = if x > 0.5 { (-y).ln_1p() } else { x.ln() };
    let ln_y = if y > 0.5 { (-x).ln_1p() } else { y.ln() };
    let front = (a * ln_x + b * ln_y - ln_beta(a, b)).exp() / a;

    // Lentz: value = 1 + d₁/(1 + d₂/(…)), tracked as f = C·D products.
    let mut value = 1.0;
    let mut c = 1.0;
    let mut d = 0.0;
    for j in 1..=MAX_TERMS {
        let term = if j % 2 == 1 {
            let m = ((j - 1) / 2) as f64;
            -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0))
        } else {
            let m = (j / 2) as f64;
            m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m))
        };
        d = 1.0 + term * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + term / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = c * d;
        value *= delta;
        if (delta - 1.0).abs() < EPSILON {
            break;
        }
    }
    front / value
}

fn ln_beta(a: f64, b: f64) -> f64 {
    ln_gamma(a) + ln_gamma(b) - ln_gamma(a + b)
}

/// ln Γ(x) for x > 0: Stirling's series (Bernoulli terms up to x⁻⁹) at x ≥ 15,
/// where its truncation error is below 3e-16, reached from smaller x by
/// Γ(x) = Γ(x + N) / (x(x + 1)…(x + N − 1)).
fn ln_gamma(x: f64) -> f64 {
    let mut x = x;
    let mut product = 1.0;
    while x < 15.0 {
        product *= x;
        x += 1.0;
    }
    let inv = 1.0 / x;
    let inv2 = inv * inv;
    let series = inv
        * (1.0 / 12.0
            + inv2
                * (-1.0 / 360.0 + inv2 * (1.0 / 1260.0 + inv2 * (-1.0 / 1680.0 + inv2 / 1188.0))));
    (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + series - product.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64, tolerance: f64) {
        assert!(
            (got - want).abs() <= tolerance,
            "got {got}, want {want} ± {tolerance}"
        );
    }

    /// Deterministic pseudo-random values in [-1, 1) from a 64-bit LCG (Knuth's
    /// MMIX constants), so tests need no dependency and never vary.
    fn lcg(seed: u64, n: usize) -> Vec<f64> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            })
            .collect()
    }

    fn candidate<'a>(name: &'a str, values: &'a [f64]) -> Candidate<'a> {
        Candidate { name, values }
    }

    #[test]
    fn ln_gamma_matches_known_values() {
        close(ln_gamma(1.0), 0.0, 1e-14);
        close(ln_gamma(2.0), 0.0, 1e-14);
        close(ln_gamma(0.5), 0.5 * std::f64::consts::PI.ln(), 1e-14);
        close(ln_gamma(10.0), 362_880f64.ln(), 1e-13);
        close(ln_gamma(3.7), 1.428_072_326_665_388, 1e-13);
        close(ln_gamma(0.01), 4.599_479_878_042_022, 1e-13);
        close(ln_gamma(1e6), 12_815_504.569_147_612, 1e-8);
    }

    #[test]
    fn incomplete_beta_matches_closed_forms_and_references() {
        let i = |a: f64, b: f64, x: f64| regularised_incomplete_beta(a, b, x, 1.0 - x);
        for x in [0.0, 0.1, 0.37, 0.5, 0.9, 1.0] {
            close(i(1.0, 1.0, x), x, 1e-14);
            close(i(3.0, 1.0, x), x.powi(3), 1e-14);
            close(i(1.0, 2.5, x), 1.0 - (1.0 - x).powf(2.5), 1e-14);
        }
        close(i(7.5, 7.5, 0.5), 0.5, 1e-14);
        // References from mpmath.betainc(..., regularized=True) at 30 digits.
        close(i(2.5, 3.5, 0.3), 0.296_752_989_295_666_4, 1e-14);
        close(i(0.5, 0.5, 0.2), 0.295_167_235_300_866_6, 1e-14);
        close(i(50.0, 80.0, 0.4), 0.645_065_922_150_550_4, 1e-13);
    }

    #[test]
    fn student_t_p_values() {
        // The brief's reference points.
        close(student_t_two_sided(2.0, 10.0), 0.07339, 1e-5);
        close(student_t_two_sided(2.228, 10.0), 0.05, 1e-4);
        close(student_t_two_sided(1.96, 1e6), 0.05, 1e-4);
        // Closer references (mpmath, 30 digits).
        close(
            student_t_two_sided(2.0, 10.0),
            0.073_388_034_770_740_37,
            1e-13,
        );
        close(
            student_t_two_sided(-2.0, 10.0),
            0.073_388_034_770_740_37,
            1e-13,
        );
        close(
            student_t_two_sided(1.96, 1e6),
            0.049_996_067_585_269_79,
            1e-10,
        );
        close(
            student_t_two_sided(0.5, 30.0),
            0.620_723_004_885_127_3,
            1e-13,
        );
        close(student_t_two_sided(0.1, 1e8), 0.920_344_325_646_403_1, 1e-8);
        close(
            student_t_two_sided(10.0, 5.0),
            1.709_475_757_429_636e-4,
            1e-16,
        );
        let tiny = student_t_two_sided(40.0, 200.0);
        close(tiny / 2.248_739_653_520_250_7e-97, 1.0, 1e-10);
        // Closed forms: df = 1 is Cauchy, df = 2 is 1 − |t|/√(2 + t²).
        for t in [0.0, 0.3, 1.0, 4.0, 100.0] {
            let cauchy = 1.0 - 2.0 / std::f64::consts::PI * f64::atan(t);
            close(student_t_two_sided(t, 1.0), cauchy, 1e-14);
            close(
                student_t_two_sided(t, 2.0),
                1.0 - t / (2.0 + t * t).sqrt(),
                1e-14,
            );
        }
        assert_eq!(student_t_two_sided(f64::INFINITY, 3.0), 0.0);
        assert_eq!(student_t_two_sided(0.0, 3.0), 1.0);
    }

    #[test]
    fn hand_worked_simple_regression() {
        // x̄ = 3, ȳ = 4, Sxx = 10, Sxy = 6: slope 0.6, intercept 2.2; residuals
        // −0.8, 0.6, 1.0, −0.6, −0.2: RSS = 2.4; TSS = 6: R² = 0.6.
        // `noise` is orthogonal to 1, x and the residuals (3u + 4v of the
        // quadratic and cubic orthogonal polynomials): it explains nothing, so
        // adding it raises AIC by exactly 2 and it must not enter.
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let noise = [2.0, 5.0, -6.0, -11.0, 10.0];
        let y = [2.0, 4.0, 5.0, 4.0, 5.0];
        let fit = forward_select(&y, &[candidate("noise", &noise), candidate("x", &x)]).unwrap();

        let aic_x = 5.0 * (2.4f64 / 5.0).ln() + 4.0;
        let null_aic = 5.0 * (6.0f64 / 5.0).ln() + 2.0;
        close(fit.null_aic, null_aic, 1e-12);
        assert_eq!(fit.observations, 5);
        assert_eq!(fit.selected, vec!["x".to_string()]);
        close(fit.intercept, 2.2, 1e-12);
        assert_eq!(fit.coefficients.len(), 1);
        assert_eq!(fit.coefficients[0].0, "x");
        close(fit.coefficients[0].1, 0.6, 1e-12);
        close(fit.r2, 0.6, 1e-12);
        // 1 − 0.4·4/3
        close(fit.adjusted_r2, 1.0 - 0.4 * 4.0 / 3.0, 1e-12);

        assert_eq!(fit.steps.len(), 1);
        let step = &fit.steps[0];
        assert_eq!((step.step, step.added.as_str()), (1, "x"));
        close(step.aic, aic_x, 1e-12);
        close(step.r2, 0.6, 1e-12);
        close(step.adjusted_r2, fit.adjusted_r2, 0.0);
        // σ̂² = 2.4/3 = 0.8, se = √(0.8/10), t = 0.6/se = 3/√2, df = 3, where
        // the two-sided p is 1 − (2/π)(u/(1 + u²) + atan u), u = t/√3.
        let u = (3.0 / 2f64.sqrt()) / 3f64.sqrt();
        let p = 1.0 - 2.0 / std::f64::consts::PI * (u / (1.0 + u * u) + u.atan());
        close(step.p_value, p, 1e-13);
        close(step.p_value, 0.1240, 1e-4);

        // The rejected candidate, checked directly: RSS unchanged, one more coefficient.
        let with_noise = ols(&y, &[&x, &noise]).unwrap();
        close(with_noise.rss, 2.4, 1e-12);
        close(aic(5, with_noise.rss, 3), aic_x + 2.0, 1e-12);
        close(
            with_noise.std_errors[0],
            0.88f64.sqrt() * (3.0f64 / 2.0).sqrt(),
            1e-12,
        );
    }

    #[test]
    fn exact_linear_data_selects_a_and_b_and_stops() {
        let n = 20;
        let a = lcg(1, n);
        let b = lcg(2, n);
        let c = lcg(3, n);
        let y: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(a, b)| 1.0 + 2.0 * a - 3.0 * b)
            .collect();
        let candidates = [candidate("a", &a), candidate("b", &b), candidate("c", &c)];
        let fit = forward_select(&y, &candidates).unwrap();

        // b explains more of y than a (coefficient −3 against 2 on equal spread).
        assert_eq!(fit.selected, vec!["b".to_string(), "a".to_string()]);
        close(fit.intercept, 1.0, 1e-9);
        assert_eq!(fit.coefficients[0].0, "b");
        close(fit.coefficients[0].1, -3.0, 1e-9);
        assert_eq!(fit.coefficients[1].0, "a");
        close(fit.coefficients[1].1, 2.0, 1e-9);
        assert_eq!((fit.r2, fit.adjusted_r2), (1.0, 1.0));

        assert_eq!(fit.steps.len(), 2);
        assert!(fit.steps[0].aic < fit.null_aic && fit.steps[0].aic.is_finite());
        assert!(fit.steps[0].p_value < 1e-3);
        // A perfect fit: AIC −∞, which c cannot lower.
        assert_eq!(fit.steps[1].aic, f64::NEG_INFINITY);
        assert_eq!(fit.steps[1].p_value, 0.0);
        let with_c = ols(&y, &[&b, &a, &c]).unwrap();
        assert_eq!(with_c.rss, 0.0);
        assert!(aic(n, with_c.rss, 4) >= fit.steps[1].aic);
        // −∞ has no JSON number: it is written as null.
        let json = serde_json::to_value(&fit).unwrap();
        assert!(json["steps"][1]["aic"].is_null());
    }

    #[test]
    fn noisy_data_matches_normal_equations() {
        // Two regressors plus noise, checked against the normal equations solved
        // by Cramer's rule on the centred cross products.
        let n = 30;
        let a = lcg(11, n);
        let b: Vec<f64> = lcg(12, n)
            .iter()
            .zip(&a)
            .map(|(v, a)| v + 0.5 * a)
            .collect();
        let e = lcg(13, n);
        let y: Vec<f64> = (0..n)
            .map(|i| 0.5 + a[i] - 2.0 * b[i] + 0.3 * e[i])
            .collect();
        let fit = ols(&y, &[&a, &b]).unwrap();

        let mean = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
        let (ma, mb, my) = (mean(&a), mean(&b), mean(&y));
        let s = |u: &[f64], mu: f64, v: &[f64], mv: f64| -> f64 {
            u.iter().zip(v).map(|(u, v)| (u - mu) * (v - mv)).sum()
        };
        let (saa, sbb, sab) = (s(&a, ma, &a, ma), s(&b, mb, &b, mb), s(&a, ma, &b, mb));
        let (say, sby) = (s(&a, ma, &y, my), s(&b, mb, &y, my));
        let det = saa * sbb - sab * sab;
        let beta_a = (say * sbb - sby * sab) / det;
        let beta_b = (sby * saa - say * sab) / det;
        let intercept = my - beta_a * ma - beta_b * mb;
        close(fit.coefficients[0], intercept, 1e-12);
        close(fit.coefficients[1], beta_a, 1e-12);
        close(fit.coefficients[2], beta_b, 1e-12);

        let rss: f64 = (0..n)
            .map(|i| (y[i] - intercept - beta_a * a[i] - beta_b * b[i]).powi(2))
            .sum();
        close(fit.rss, rss, 1e-12);
        let sigma2 = rss / (n - 3) as f64;
        // Inverse of the centred 2×2 block gives the slopes' variances.
        close(fit.std_errors[1], (sigma2 * sbb / det).sqrt(), 1e-12);
        close(fit.std_errors[2], (sigma2 * saa / det).sqrt(), 1e-12);
        let t_b = beta_b / (sigma2 * saa / det).sqrt();
        close(
            fit.p_value(2),
            student_t_two_sided(t_b, (n - 3) as f64),
            1e-15,
        );
    }

    #[test]
    fn large_offsets_cost_no_precision() {
        // Shifting the target or a regressor by a constant changes only the
        // intercept; centring keeps the rest to rounding of the centred values.
        let n = 40;
        let a = lcg(41, n);
        let b = lcg(42, n);
        let e = lcg(43, n);
        let y: Vec<f64> = (0..n).map(|i| 2.0 * a[i] - b[i] + 0.01 * e[i]).collect();
        let plain = forward_select(&y, &[candidate("a", &a), candidate("b", &b)]).unwrap();

        let y_shifted: Vec<f64> = y.iter().map(|v| v + 1e6).collect();
        let a_shifted: Vec<f64> = a.iter().map(|v| v + 1e3).collect();
        let shifted = forward_select(
            &y_shifted,
            &[candidate("a", &a_shifted), candidate("b", &b)],
        )
        .unwrap();
        assert_eq!(shifted.selected, plain.selected);
        for (s, p) in shifted.coefficients.iter().zip(&plain.coefficients) {
            close(s.1, p.1, 1e-8);
        }
        let slope_a = plain.coefficients.iter().find(|c| c.0 == "a").unwrap().1;
        close(
            shifted.intercept,
            plain.intercept + 1e6 - slope_a * 1e3,
            1e-6,
        );
        close(shifted.r2, plain.r2, 1e-9);
        close(shifted.null_aic, plain.null_aic, 1e-6);
        for (s, p) in shifted.steps.iter().zip(&plain.steps) {
            close(s.aic, p.aic, 1e-5);
            close(s.p_value / p.p_value, 1.0, 1e-4);
        }
    }

    #[test]
    fn collinear_candidates_do_not_panic_and_only_one_enters() {
        let n = 15;
        let a = lcg(21, n);
        let twice_a: Vec<f64> = a.iter().map(|v| 2.0 * v).collect();
        let constant = vec![4.0; n];
        let noise = lcg(22, n);
        let y: Vec<f64> = a.iter().zip(&noise).map(|(a, e)| a + 0.2 * e).collect();
        let candidates = [
            candidate("a", &a),
            candidate("twice_a", &twice_a),
            candidate("constant", &constant),
        ];
        let fit = forward_select(&y, &candidates).unwrap();
        // a and 2a fit equally; the first in order wins, the other is collinear.
        assert_eq!(fit.selected, vec!["a".to_string()]);
        assert!(ols(&y, &[&a, &twice_a]).is_none());
        assert!(ols(&y, &[&constant]).is_none());

        // All subsets: only those without collinearity remain.
        let subsets = subsets_adjusted_r2(&y, &candidates).unwrap();
        let names: Vec<Vec<String>> = subsets.into_iter().map(|(names, _)| names).collect();
        assert_eq!(
            names,
            vec![vec!["a".to_string()], vec!["twice_a".to_string()]]
        );
    }

    #[test]
    fn input_errors_say_what_and_where() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let y = [2.0, 4.0, 5.0, 4.0, 5.0];

        let err = forward_select(&y, &[]).unwrap_err();
        assert_eq!(err, FitError::NoCandidates);

        let short = [1.0, 2.0, 3.0];
        let err =
            forward_select(&y, &[candidate("x", &x), candidate("short", &short)]).unwrap_err();
        assert_eq!(
            err,
            FitError::LengthMismatch {
                name: "short".into(),
                expected: 5,
                got: 3
            }
        );
        assert_eq!(
            err.to_string(),
            "candidate `short` has 3 values, the target has 5"
        );

        let bad = [1.0, 2.0, f64::NAN, 4.0, 5.0];
        let err = forward_select(&y, &[candidate("bad", &bad)]).unwrap_err();
        assert_eq!(
            err,
            FitError::NonFinite {
                name: "bad".into(),
                index: 2
            }
        );
        assert_eq!(
            err.to_string(),
            "candidate `bad` value at index 2 is not finite"
        );

        let bad_y = [2.0, 4.0, 5.0, f64::INFINITY, 5.0];
        let err = forward_select(&bad_y, &[candidate("x", &x)]).unwrap_err();
        assert_eq!(err, FitError::NonFiniteTarget { index: 3 });
        assert_eq!(err.to_string(), "target value at index 3 is not finite");

        let err = forward_select(
            &y,
            &[candidate("x", &x), candidate("y", &y), candidate("z", &x)],
        )
        .unwrap_err();
        assert_eq!(
            err,
            FitError::TooFewObservations {
                observations: 5,
                needed: 6
            }
        );
        assert!(err
            .to_string()
            .starts_with("5 observations: need at least 6"));

        let err = forward_select(&y, &[candidate("x", &x), candidate("x", &y)]).unwrap_err();
        assert_eq!(err, FitError::DuplicateName { name: "x".into() });
        assert_eq!(err.to_string(), "candidate `x` appears more than once");

        for constant in [[3.0; 5], [0.1; 5]] {
            let err = forward_select(&constant, &[candidate("x", &x)]).unwrap_err();
            assert_eq!(err, FitError::ConstantTarget);
            assert_eq!(
                err.to_string(),
                "the target is constant: there is nothing to explain"
            );
        }

        let nine: Vec<String> = (0..9).map(|i| format!("m{i}")).collect();
        let long = lcg(5, 12);
        let many: Vec<Candidate<'_>> = nine.iter().map(|n| candidate(n, &long)).collect();
        let err = subsets_adjusted_r2(&long, &many).unwrap_err();
        assert_eq!(
            err,
            FitError::TooManyCandidates {
                candidates: 9,
                max: 8
            }
        );
        assert!(err.to_string().starts_with("9 candidates"));
        // The same checks guard the subsets too.
        assert_eq!(
            subsets_adjusted_r2(&y, &[candidate("bad", &bad)]).unwrap_err(),
            FitError::NonFinite {
                name: "bad".into(),
                index: 2
            }
        );
    }

    fn fit_with(coefficients: &[(&str, f64)]) -> Fit {
        Fit {
            observations: 10,
            null_aic: 0.0,
            steps: Vec::new(),
            selected: coefficients.iter().map(|(n, _)| n.to_string()).collect(),
            intercept: 0.5,
            coefficients: coefficients
                .iter()
                .map(|&(n, b)| (n.to_string(), b))
                .collect(),
            adjusted_r2: 0.5,
            r2: 0.5,
        }
    }

    #[test]
    fn proposed_weights_clamp_scale_and_fill() {
        let fit = fit_with(&[
            ("loss", 0.3),
            ("jitter", -0.2),
            ("rtt", 0.1),
            ("other", 5.0),
        ]);
        let weights = proposed_weights(&fit, &["rtt", "jitter", "loss", "throughput"]).unwrap();
        let expected = [
            ("rtt", 0.25),
            ("jitter", 0.0),
            ("loss", 0.75),
            ("throughput", 0.0),
        ];
        assert_eq!(weights.len(), expected.len());
        for ((name, w), (want_name, want)) in weights.iter().zip(expected) {
            assert_eq!(name, want_name);
            close(*w, want, 1e-15);
        }
        close(weights.iter().map(|(_, w)| w).sum::<f64>(), 1.0, 1e-15);

        // Nothing positive among the named metrics.
        let fit = fit_with(&[("loss", -0.3), ("other", 1.0)]);
        assert_eq!(proposed_weights(&fit, &["loss", "rtt"]), None);
        assert_eq!(proposed_weights(&fit_with(&[]), &["loss"]), None);
    }

    #[test]
    fn subsets_are_all_listed_best_first() {
        let n = 25;
        let a = lcg(31, n);
        let b = lcg(32, n);
        let c = lcg(33, n);
        let e = lcg(34, n);
        let y: Vec<f64> = (0..n).map(|i| 3.0 * a[i] + b[i] + 0.1 * e[i]).collect();
        let candidates = [candidate("a", &a), candidate("b", &b), candidate("c", &c)];
        let subsets = subsets_adjusted_r2(&y, &candidates).unwrap();
        assert_eq!(subsets.len(), (1 << 3) - 1);
        assert!(subsets.windows(2).all(|w| w[0].1 >= w[1].1));
        let best: Vec<&str> = subsets[0].0.iter().map(String::as_str).collect();
        assert!(best == ["a", "b"] || best == ["a", "b", "c"], "{best:?}");
        // Each entry agrees with a direct fit.
        let tss = ols(&y, &[]).unwrap().rss;
        for (names, adjusted) in &subsets {
            let columns: Vec<&[f64]> = names
                .iter()
                .map(|name| candidates.iter().find(|c| c.name == name).unwrap().values)
                .collect();
            let r2 = 1.0 - ols(&y, &columns).unwrap().rss / tss;
            let want = 1.0 - (1.0 - r2) * (n - 1) as f64 / (n - names.len() - 1) as f64;
            close(*adjusted, want, 1e-12);
        }
        // The lone weak regressor c comes last.
        assert_eq!(subsets.last().unwrap().0, vec!["c".to_string()]);
    }

    #[test]
    fn fit_serialises_for_the_server() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let y = [2.0, 4.0, 5.0, 4.0, 5.0];
        let fit = forward_select(&y, &[candidate("x", &x)]).unwrap();
        let json = serde_json::to_value(&fit).unwrap();
        assert_eq!(json["selected"], serde_json::json!(["x"]));
        assert_eq!(json["steps"][0]["added"], "x");
        assert_eq!(json["coefficients"][0][0], "x");
        assert_eq!(json["observations"], 5);
    }
}
