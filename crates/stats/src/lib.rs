//! KPI mathematics over measurement samples. Pure functions, no I/O.
//!
//! - [`percentile`], [`distribution`], [`spread`]: order statistics and moments.
//! - [`jitter_rfc3550`], [`mean_abs_delta`], [`median_abs_delta`], [`jitter`], [`ipdv`]:
//!   delay variation (RFC 3550, Miravalls-Sierra et al. 2018, RFC 3393 / RFC 5481).
//! - [`SequenceTracker`]: received / lost / duplicate / reordered accounting (RFC 4737).
//! - [`split_loss`]: forward vs reverse loss of TWAMP-style exchanges from the
//!   reflector's own sequence numbers.
//! - [`mean_ci`], [`t_test`], [`pearson`], [`least_squares`]: the inference of opinion
//!   studies (MOS with Student-t intervals, Welch or pooled t-tests, Pearson r, slopes).
//!
//! Sample values are in whatever unit the caller uses (the result types carry the
//! unit in their field names, e.g. `rtt_us`). Non-finite samples (NaN, ±inf) are
//! not measurements: every function here ignores them, documented per function.
//! Details and sources: `docs/methods.md`.

mod distribution;
mod inference;
mod jitter;
mod loss;
mod sequence;

pub use distribution::{distribution, percentile, spread, Spread};
pub use inference::{
    least_squares, mean_ci, pearson, t_test, InferenceError, LinearFit, MeanCi, Pearson, TTest,
    TTestKind,
};
pub use jitter::{ipdv, jitter, jitter_rfc3550, mean_abs_delta, median_abs_delta};
pub use loss::{split_loss, Bracket, LossSplit, ProbeFate};
pub use sequence::{Arrival, SequenceCounts, SequenceTracker};
