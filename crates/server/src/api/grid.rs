//! The dashboard's mesh grid of one metric: each pair's state against thresholds and
//! its own baseline, with hysteresis (`crate::grid`).

use axum::extract::State;
use axum::http::Uri;
use axum::Json;
use serde::Deserialize;
use vantage_analysis::grid::{self, MAX_HYSTERESIS, SCALES};
use vantage_model::control::Role;

use super::common::{parse_query, positive_us, ApiError, ApiResult, AppState, Caller};
use crate::grid::{GridAnswer, GridQuery, MAX_WINDOW_US};

/// Default window: an hour of a pair's values makes its baseline.
const DEFAULT_WINDOW_US: i64 = 3_600_000_000;
/// Default consecutive results before a cell changes state (MaDDash used 3).
const DEFAULT_HYSTERESIS: usize = 3;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GridParams {
    metric: Option<String>,
    test: Option<String>,
    window: Option<String>,
    hysteresis: Option<usize>,
    warning: Option<f64>,
    critical: Option<f64>,
}

pub(super) async fn grid(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<GridAnswer>> {
    caller.require(&[Role::Reader, Role::Publisher])?;
    let params: GridParams = parse_query(&uri)?;
    let metric = params.metric.as_deref().unwrap_or("rtt_median_us");
    let mut scale = *grid::scale(metric).ok_or_else(|| {
        let known: Vec<&str> = SCALES.iter().map(|scale| scale.metric).collect();
        ApiError::bad_request(format!(
            "query parameter 'metric': a grid cannot be coloured by '{metric}'; use one of {}",
            known.join(", ")
        ))
    })?;
    for (name, value, slot) in [
        ("warning", params.warning, &mut scale.warning),
        ("critical", params.critical, &mut scale.critical),
    ] {
        if let Some(value) = value {
            if !value.is_finite() || value < 0.0 {
                return Err(ApiError::bad_request(format!(
                    "query parameter '{name}': must be a non-negative number in the metric's unit"
                )));
            }
            *slot = Some(value);
        }
    }
    let window_us = match params.window.as_deref() {
        Some(text) => positive_us("window", text)?,
        None => DEFAULT_WINDOW_US,
    };
    if window_us > MAX_WINDOW_US {
        return Err(ApiError::bad_request(
            "query parameter 'window': at most 24h",
        ));
    }
    let hysteresis = params.hysteresis.unwrap_or(DEFAULT_HYSTERESIS);
    if !(1..=MAX_HYSTERESIS).contains(&hysteresis) {
        return Err(ApiError::bad_request(format!(
            "query parameter 'hysteresis': must be 1 to {MAX_HYSTERESIS} results"
        )));
    }
    let query = GridQuery {
        scale,
        test: params.test,
        window_us,
        hysteresis,
    };
    Ok(Json(
        crate::grid::grid(&state.archive, &state.recent, &query).await?,
    ))
}
