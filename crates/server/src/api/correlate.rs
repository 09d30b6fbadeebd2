//! App–network correlation: `GET /api/v1/correlate`, and the parameters the event
//! stream's `correlate=` shares with it.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::Json;
use serde::Deserialize;
use vantage_analysis::correlation::CorrelationSettings;
use vantage_model::control::Role;

use super::common::{
    parse_duration_field, parse_query, parse_time, positive_us, ApiError, ApiResult, AppState,
    Caller,
};
use crate::archive::now_us;
use crate::correlation::{
    self, CorrelateError, CorrelationAnswer, CorrelationQuery, DEFAULT_WINDOW_US,
};

impl From<CorrelateError> for ApiError {
    fn from(error: CorrelateError) -> ApiError {
        match error {
            CorrelateError::Archive(error) => error.into(),
            CorrelateError::Settings(error) => ApiError::bad_request(error.to_string()),
        }
    }
}

/// The network side of a correlation and how it is binned.
#[derive(Debug, Default, Deserialize)]
pub(super) struct SeriesParams {
    pub client: Option<String>,
    pub server: Option<String>,
    pub test: Option<String>,
    pub bin: Option<String>,
    pub max_lag: Option<String>,
    pub min_pairs: Option<String>,
}

impl SeriesParams {
    pub(super) fn query(
        &self,
        app_metric: &str,
        metric: &str,
        app_tags: BTreeMap<String, String>,
    ) -> ApiResult<CorrelationQuery> {
        let required = |name: &str, value: &Option<String>| {
            value.clone().filter(|v| !v.is_empty()).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "query parameter '{name}' (an agent name) is required to correlate"
                ))
            })
        };
        let defaults = CorrelationSettings::default();
        let bin_us = self
            .bin
            .as_deref()
            .map_or(Ok(defaults.bin_us), |text| positive_us("bin", text))?;
        // No lag (0) is a valid window: only the coefficients at lag 0.
        let max_lag_us = self
            .max_lag
            .as_deref()
            .map_or(Ok(defaults.max_lag_us), |text| {
                i64::try_from(parse_duration_field("max_lag", text)?.as_micros()).map_err(|_| {
                    ApiError::bad_request("query parameter 'max_lag': must be under 290 000 years")
                })
            })?;
        Ok(CorrelationQuery {
            app_metric: app_metric.to_string(),
            app_tags,
            client: required("client", &self.client)?,
            server: required("server", &self.server)?,
            test: self.test.clone(),
            metric: metric.to_string(),
            settings: CorrelationSettings {
                bin_us,
                max_lag_us,
                min_pairs: match &self.min_pairs {
                    None => defaults.min_pairs,
                    Some(text) => text.parse().map_err(|_| {
                        ApiError::bad_request(format!(
                            "query parameter 'min_pairs': '{text}' is not a count"
                        ))
                    })?,
                },
            },
        })
    }
}

pub(super) async fn correlate(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<CorrelationAnswer>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let mut params: BTreeMap<String, String> = parse_query(&uri)?;
    let mut take = |name: &str| params.remove(name);
    let app_metric = take("app_metric")
        .ok_or_else(|| ApiError::bad_request("query parameter 'app_metric' is required"))?;
    let metric = take("metric").ok_or_else(|| {
        ApiError::bad_request(
            "query parameter 'metric' (a kind metric such as received_bps) is required",
        )
    })?;
    let (from, to) = (take("from"), take("to"));
    let series = SeriesParams {
        client: take("client"),
        server: take("server"),
        test: take("test"),
        bin: take("bin"),
        max_lag: take("max_lag"),
        min_pairs: take("min_pairs"),
    };
    let mut app_tags = BTreeMap::new();
    for (key, value) in params {
        match key.strip_prefix("tag.") {
            Some(tag) => {
                app_tags.insert(tag.to_string(), value);
            }
            None => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter '{key}' (app_metric, metric, client, server, test, \
                     from, to, bin, max_lag, min_pairs, tag.KEY)"
                )))
            }
        }
    }
    let query = series.query(&app_metric, &metric, app_tags)?;
    let to_us = parse_time("to", to.as_deref())?.unwrap_or_else(now_us);
    let from_us = parse_time("from", from.as_deref())?.unwrap_or(to_us - DEFAULT_WINDOW_US);
    if from_us >= to_us {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "query parameters 'from' and 'to': from must be before to",
        ));
    }
    Ok(Json(
        correlation::correlate(&state.archive, &query, from_us, to_us).await?,
    ))
}
