//! Apps: published metrics and alerts, and the live event stream.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::Json;
use futures_util::stream::BoxStream;
use futures_util::Stream;
use serde::Deserialize;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::StreamExt;
use vantage_model::control::{AppMetric, Role};

use super::common::{
    limit_param, parse_body, parse_query, parse_time, positive_us, ApiError, ApiResult, AppState,
    Caller, MAX_BATCH,
};
use super::correlate::SeriesParams;
use crate::archive::AlertFilter;
use crate::correlation;
use crate::events::{Alert, Event, Subscription};

/// An alert's severities, least first.
const SEVERITIES: [&str; 3] = ["info", "warning", "critical"];

#[derive(Deserialize)]
struct AppMetricsBatch {
    metrics: Vec<AppMetric>,
}

pub(super) async fn publish_app_metrics(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Publisher])?;
    let batch: AppMetricsBatch = parse_body(&body)?;
    if batch.metrics.len() > MAX_BATCH {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "batch of {} metrics exceeds the limit of {MAX_BATCH}",
                batch.metrics.len()
            ),
        ));
    }
    for (index, metric) in batch.metrics.iter().enumerate() {
        if metric.name.trim().is_empty() {
            return Err(ApiError::bad_request(format!(
                "metrics[{index}].name: must not be empty"
            )));
        }
        if !metric.value.is_finite() {
            return Err(ApiError::bad_request(format!(
                "metrics[{index}].value: must be a finite number"
            )));
        }
    }
    state
        .archive
        .add_app_metrics(&batch.metrics, &caller.name)
        .await?;
    for metric in batch.metrics.iter().cloned() {
        state.publish(Event::AppMetric {
            metric,
            publisher: caller.name.clone(),
        });
    }
    Ok(Json(serde_json::json!({ "stored": batch.metrics.len() })))
}

pub(super) async fn query_app_metrics(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let params: BTreeMap<String, String> = parse_query(&uri)?;
    let mut tags = BTreeMap::new();
    for (key, value) in &params {
        match key.as_str() {
            "name" | "from" | "to" | "limit" => {}
            _ => match key.strip_prefix("tag.") {
                Some(tag) => {
                    tags.insert(tag.to_string(), value.clone());
                }
                None => {
                    return Err(ApiError::bad_request(format!(
                        "unknown query parameter '{key}' (name, from, to, limit, tag.KEY)"
                    )))
                }
            },
        }
    }
    let from_us = parse_time("from", params.get("from").map(String::as_str))?.unwrap_or(0);
    let to_us = parse_time("to", params.get("to").map(String::as_str))?.unwrap_or(i64::MAX);
    let limit = match params.get("limit") {
        Some(text) => text.parse::<i64>().map_err(|_| {
            ApiError::bad_request(format!(
                "query parameter 'limit': '{text}' is not an integer"
            ))
        })?,
        None => 10_000,
    };
    let metrics = state
        .archive
        .app_metrics(
            params.get("name").map(String::as_str),
            from_us,
            to_us,
            &tags,
            limit.clamp(1, 100_000),
        )
        .await?;
    Ok(Json(serde_json::json!({ "metrics": metrics })))
}

pub(super) async fn publish_alert(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Publisher])?;
    let alert: Alert = parse_body(&body)?;
    if !SEVERITIES.contains(&alert.severity.as_str()) {
        return Err(ApiError::bad_request(format!(
            "field 'severity': '{}' is not one of {}",
            alert.severity,
            SEVERITIES.join(", ")
        )));
    }
    crate::alerts::raise(&state.archive, &state.events, alert).await?;
    Ok(Json(serde_json::json!({ "published": true })))
}

/// Most alerts one `GET /api/v1/alerts` answer holds.
const MAX_ALERTS: i64 = 10_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AlertsQuery {
    agent: Option<String>,
    severity: Option<String>,
    from: Option<String>,
    to: Option<String>,
    limit: Option<i64>,
}

/// `GET /api/v1/alerts`: stored alerts, newest first.
pub(super) async fn query_alerts(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher])?;
    let query: AlertsQuery = parse_query(&uri)?;
    let limit = limit_param(query.limit, 1000, MAX_ALERTS)?;
    if let Some(severity) = query.severity.as_deref() {
        if !SEVERITIES.contains(&severity) {
            return Err(ApiError::bad_request(format!(
                "query parameter 'severity': '{severity}' is not one of {}",
                SEVERITIES.join(", ")
            )));
        }
    }
    let alerts = state
        .archive
        .alerts(&AlertFilter {
            agent: query.agent,
            severity: query.severity,
            from_us: parse_time("from", query.from.as_deref())?,
            to_us: parse_time("to", query.to.as_deref())?,
            limit,
        })
        .await?;
    Ok(Json(serde_json::json!({ "alerts": alerts })))
}

#[derive(Deserialize)]
struct SubscribeQuery {
    kinds: Option<String>,
    agents: Option<String>,
    tags: Option<String>,
    /// `APP_METRIC,METRIC`: also stream their correlation over the pair `client` →
    /// `server` (the app metrics restricted by `tags`), recomputed as data arrives.
    correlate: Option<String>,
    /// The trailing window a streamed correlation covers (default 1h).
    window: Option<String>,
    #[serde(flatten)]
    series: SeriesParams,
}

/// Default trailing window of a streamed correlation.
const DEFAULT_STREAM_WINDOW_US: i64 = 3_600_000_000;

pub(super) async fn subscribe(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: SubscribeQuery = parse_query(&uri)?;
    let subscription = Subscription::parse(
        query.kinds.as_deref(),
        query.agents.as_deref(),
        query.tags.as_deref(),
    )
    .map_err(ApiError::bad_request)?;
    let correlations = correlation_stream(&state, &query)?;
    let mut stopping = state.stopping.subscribe();
    let stream =
        BroadcastStream::new(state.events.subscribe()).filter_map(move |received| match received {
            Ok(event) if subscription.matches(&event) => {
                let data = serde_json::to_string(&event).expect("events serialise");
                Some(Ok(SseEvent::default().event(event.kind()).data(data)))
            }
            Ok(_) => None,
            // A slow subscriber skipped events; tell it rather than pretend nothing happened.
            Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(skipped)) => {
                Some(Ok(SseEvent::default().event("lagged").data(
                    serde_json::json!({ "skipped_events": skipped }).to_string(),
                )))
            }
        });
    let stream = futures_util::stream::select(stream, correlations);
    // End the stream when the server stops, so graceful shutdown does not wait on it.
    let stream = futures_util::StreamExt::take_until(stream, async move {
        let _ = stopping.wait_for(|stop| *stop).await;
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// The `correlation` events a subscription asked for with `correlate=`, or none.
fn correlation_stream(
    state: &AppState,
    query: &SubscribeQuery,
) -> ApiResult<BoxStream<'static, Result<SseEvent, Infallible>>> {
    let Some(pair) = query.correlate.as_deref() else {
        if query.window.is_some() {
            return Err(ApiError::bad_request(
                "query parameter 'window' applies only with 'correlate'",
            ));
        }
        return Ok(Box::pin(futures_util::stream::empty()));
    };
    let Some((app_metric, metric)) = pair
        .split_once(',')
        .filter(|(app, metric)| !app.trim().is_empty() && !metric.trim().is_empty())
    else {
        return Err(ApiError::bad_request(format!(
            "query parameter 'correlate': '{pair}' is not APP_METRIC,METRIC"
        )));
    };
    let subscription =
        Subscription::parse(None, None, query.tags.as_deref()).map_err(ApiError::bad_request)?;
    let correlation_query =
        query
            .series
            .query(app_metric.trim(), metric.trim(), subscription.tags)?;
    let window_us = query
        .window
        .as_deref()
        .map_or(Ok(DEFAULT_STREAM_WINDOW_US), |text| {
            positive_us("window", text)
        })?;
    Ok(Box::pin(
        correlation::watch(
            state.archive.clone(),
            Arc::clone(&state.events),
            correlation_query,
            window_us,
        )
        .map(|answer| {
            Ok(match answer {
                Ok(answer) => SseEvent::default()
                    .event("correlation")
                    .data(serde_json::to_string(&answer).expect("correlations serialise")),
                Err(error) => SseEvent::default()
                    .event("correlation_error")
                    .data(serde_json::json!({ "error": error }).to_string()),
            })
        }),
    ))
}
