//! The simulations' one error type.

use thiserror::Error;

/// A simulation parameter outside what the model can run.
#[derive(Debug, Error, PartialEq)]
pub enum SimError {
    #[error("{name}: {value} is not allowed: {rule}")]
    Parameter {
        name: &'static str,
        value: f64,
        rule: &'static str,
    },
    #[error("the M/G/1 model needs a load under 1: λ·E[S] = {load_ratio:.3} of the headroom, so the number of flows grows without bound")]
    Unstable { load_ratio: f64 },
    #[error("no path from {from} to {to}")]
    NoPath { from: String, to: String },
}

/// `Ok` when `ok` holds, else the parameter's name, value and rule.
pub(crate) fn check(
    name: &'static str,
    value: f64,
    ok: bool,
    rule: &'static str,
) -> Result<(), SimError> {
    if ok {
        Ok(())
    } else {
        Err(SimError::Parameter { name, value, rule })
    }
}

/// A finite value above 0.
pub(crate) fn positive(name: &'static str, value: f64) -> Result<(), SimError> {
    check(
        name,
        value,
        value.is_finite() && value > 0.0,
        "a finite value above 0",
    )
}
