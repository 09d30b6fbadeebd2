//! Network health (Chard et al., FGCS 2015): the pair matrix, the healthy subset
//! relative to a reference host, and weight refitting over archived rounds.

use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use vantage_analysis::health::Weights;
use vantage_model::control::Role;

use super::common::{
    current_config, parse_query, parse_time, positive_us, ApiError, ApiResult, AppState, Caller,
};
use crate::health::{
    self, FitAnswer, HealthError, HealthQuery, DEFAULT_MAX_AGE_US, DEFAULT_ROUND_SPAN_US,
    LONGEST_MAX_AGE_US,
};

/// Largest `k` a selection may ask for.
const MAX_SELECT: usize = 10_000;

impl From<HealthError> for ApiError {
    fn from(error: HealthError) -> ApiError {
        match error {
            HealthError::Archive(error) => error.into(),
            HealthError::UnknownGroup(_) | HealthError::UnknownHost(_) => {
                ApiError::new(StatusCode::NOT_FOUND, error.to_string())
            }
            HealthError::Fit(_) | HealthError::NotEnoughData(_) => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, error.to_string())
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MatrixQuery {
    group: Option<String>,
    /// `TP,ICMP,UDP,TCP`, e.g. `0.4,0.2,0.2,0.2`.
    weights: Option<String>,
    max_age: Option<String>,
    reference: Option<String>,
    k: Option<usize>,
    /// `pairs` (default: one object per ordered pair) or `columns`.
    layout: Option<String>,
}

/// Parses `weights=TP,ICMP,UDP,TCP`.
fn parse_weights(text: &str) -> Result<Weights, String> {
    let values: Vec<f64> = text
        .split(',')
        .map(|item| {
            item.trim()
                .parse::<f64>()
                .ok()
                .filter(|value| value.is_finite() && *value >= 0.0)
                .ok_or_else(|| format!("'{}' is not a non-negative number", item.trim()))
        })
        .collect::<Result<_, _>>()?;
    let [throughput, icmp, udp, tcp] = values[..] else {
        return Err(format!(
            "'{text}' must be four weights: throughput, ICMP, UDP, TCP (e.g. 0.4,0.2,0.2,0.2)"
        ));
    };
    if throughput + icmp + udp + tcp <= 0.0 {
        return Err("at least one weight must be positive".to_string());
    }
    Ok(Weights {
        throughput,
        icmp,
        udp,
        tcp,
    })
}

impl MatrixQuery {
    fn health_query<'a>(
        &'a self,
        config: Option<&'a vantage_model::config::ValidatedConfig>,
    ) -> ApiResult<HealthQuery<'a>> {
        Ok(HealthQuery {
            config,
            group: self.group.as_deref(),
            weights: self.weights()?,
            max_age_us: self.max_age_us()?,
        })
    }

    fn weights(&self) -> ApiResult<Weights> {
        self.weights
            .as_deref()
            .map_or(Ok(Weights::default()), |text| {
                parse_weights(text).map_err(|message| {
                    ApiError::bad_request(format!("query parameter 'weights': {message}"))
                })
            })
    }

    fn max_age_us(&self) -> ApiResult<i64> {
        let max_age_us = self
            .max_age
            .as_deref()
            .map_or(Ok(DEFAULT_MAX_AGE_US), |text| positive_us("max_age", text))?;
        if max_age_us > LONGEST_MAX_AGE_US {
            return Err(ApiError::bad_request(
                "query parameter 'max_age': at most 720h (30 days)",
            ));
        }
        Ok(max_age_us)
    }
}

pub(super) async fn matrix(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Response> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: MatrixQuery = parse_query(&uri)?;
    let columns = match query.layout.as_deref() {
        None | Some("pairs") => false,
        Some("columns") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "query parameter 'layout': '{other}' is not a layout (pairs or columns)"
            )))
        }
    };
    let config = current_config(&state).await?;
    let query = query.health_query(config.as_ref())?;
    Ok(if columns {
        let body = health::health_columns(&state.archive, &state.recent, &query).await?;
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
    } else {
        Json(health::health_matrix(&state.archive, &state.recent, &query).await?).into_response()
    })
}

pub(super) async fn select(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<vantage_analysis::health::Selection>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: MatrixQuery = parse_query(&uri)?;
    let reference = query.reference.as_deref().ok_or_else(|| {
        ApiError::bad_request("query parameter 'reference' (a host name) is required")
    })?;
    let k = query
        .k
        .ok_or_else(|| ApiError::bad_request("query parameter 'k' (how many hosts) is required"))?;
    if !(1..=MAX_SELECT).contains(&k) {
        return Err(ApiError::bad_request(format!(
            "query parameter 'k': {k} is out of range 1..={MAX_SELECT}"
        )));
    }
    let config = current_config(&state).await?;
    Ok(Json(
        health::healthy_selection(
            &state.archive,
            &state.recent,
            &query.health_query(config.as_ref())?,
            reference,
            k,
        )
        .await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FitQuery {
    from: Option<String>,
    to: Option<String>,
    round_span: Option<String>,
    target: Option<String>,
}

pub(super) async fn fit(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<FitAnswer>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: FitQuery = parse_query(&uri)?;
    if let Some(target) = query.target.as_deref().filter(|t| *t != "next_throughput") {
        return Err(ApiError::bad_request(format!(
            "query parameter 'target': '{target}' is not a known target (next_throughput)"
        )));
    }
    let round_span_us = query
        .round_span
        .as_deref()
        .map_or(Ok(DEFAULT_ROUND_SPAN_US), |text| {
            positive_us("round_span", text)
        })?;
    Ok(Json(
        health::refit_weights(
            &state.archive,
            parse_time("from", query.from.as_deref())?,
            parse_time("to", query.to.as_deref())?,
            round_span_us,
        )
        .await?,
    ))
}
