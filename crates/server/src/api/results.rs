//! Results: uploads (through the ingest pipeline), queries, series, runs, the
//! Prometheus exposition.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use vantage_model::control::{BatchAck, BatchItemAck, ResultAck, ResultUpload, Role};

use super::common::{
    parse_body, parse_query, parse_time, ApiError, ApiResult, AppState, Caller, IngestSlot,
    MAX_BATCH,
};
use crate::archive::{from_us, now_us, Ingest, IngestRefusal, ResultFilter};
use crate::exposition;
use crate::imports::{self, CaptureImport, ImportRefusal};

fn refusal(error: IngestRefusal) -> ApiError {
    match error {
        IngestRefusal::Archive(error) => error.into(),
        IngestRefusal::UnknownRun(_) => ApiError::new(StatusCode::NOT_FOUND, error.to_string()),
        other => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, other.to_string()),
    }
}

pub(super) async fn upload_result(
    State(state): State<AppState>,
    caller: Caller,
    _slot: IngestSlot,
    body: Bytes,
) -> ApiResult<Json<ResultAck>> {
    // An agent uploads as itself only; admins may upload on an agent's behalf
    // (replays, imports).
    let upload: ResultUpload = parse_body(&body)?;
    caller.require_agent(&upload.agent)?;
    let (ingest, _) = state
        .ingest
        .ingest(std::slice::from_ref(&upload))
        .await?
        .pop()
        .expect("one outcome per upload")
        .map_err(refusal)?;
    Ok(Json(ResultAck {
        run_id: upload.run_id,
        duplicate: ingest == Ingest::Duplicate,
    }))
}

pub(super) async fn upload_batch(
    State(state): State<AppState>,
    caller: Caller,
    _slot: IngestSlot,
    body: Bytes,
) -> ApiResult<Json<BatchAck>> {
    caller.require(&[Role::Agent])?;
    let uploads: Vec<ResultUpload> = parse_body(&body)?;
    for upload in &uploads {
        caller.require_agent(&upload.agent)?;
    }
    if uploads.len() > MAX_BATCH {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "batch of {} results exceeds the limit of {MAX_BATCH}",
                uploads.len()
            ),
        ));
    }
    let outcomes = state.ingest.ingest(&uploads).await?;
    let results = uploads
        .iter()
        .zip(outcomes)
        .map(|(upload, outcome)| match outcome {
            Ok((ingest, _)) => BatchItemAck::Stored(ResultAck {
                run_id: upload.run_id.clone(),
                duplicate: ingest == Ingest::Duplicate,
            }),
            Err(error) => BatchItemAck::Refused {
                run_id: upload.run_id.clone(),
                error: error.to_string(),
            },
        })
        .collect();
    Ok(Json(BatchAck {
        results,
        next_round_ms: state
            .ingest
            .upload_round()
            .map(|round| round.as_millis() as u64),
    }))
}

/// A capture analysed elsewhere (`vantage pcap FILE --server`), stored as a completed
/// capture run of the host that took it.
pub(super) async fn import_capture(
    State(state): State<AppState>,
    caller: Caller,
    _slot: IngestSlot,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    let import: CaptureImport = parse_body(&body)?;
    // An agent imports its own captures; admins import any host's.
    caller.require_agent(&import.agent)?;
    let (ingest, run) =
        imports::store_capture(&state.archive, &state.ingest, &import, &caller.name)
            .await
            .map_err(|error| match error {
                ImportRefusal::Archive(error) => error.into(),
                ImportRefusal::Ingest(error) => refusal(error),
                invalid => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, invalid.to_string()),
            })?;
    Ok(Json(serde_json::json!({
        "run_id": run.id,
        "duplicate": ingest == Ingest::Duplicate,
        "flows": import.report.flows.len(),
    })))
}

#[derive(Deserialize)]
struct PacketsQuery {
    run_id: String,
}

/// The pcapng file a capture run uploaded (`upload_packets = true`).
pub(super) async fn capture_packets(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Response> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let PacketsQuery { run_id } = parse_query(&uri)?;
    let Some(pcapng) = state.archive.capture_packets(&run_id).await? else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "run '{run_id}' has no packets: a capture run uploads them only when its test sets upload_packets = true"
            ),
        ));
    };
    // Only characters that need no quoting reach the header.
    let file = format!(
        "{}.pcapng",
        run_id.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_")
    );
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-pcapng".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}\""),
            ),
        ],
        pcapng,
    )
        .into_response())
}

#[derive(Deserialize)]
struct ResultsQuery {
    client: Option<String>,
    server: Option<String>,
    test: Option<String>,
    from: Option<String>,
    to: Option<String>,
    metric: Option<String>,
    buckets: Option<i64>,
    limit: Option<i64>,
    #[serde(default)]
    raw: bool,
}

impl ResultsQuery {
    fn filter(&self) -> ApiResult<ResultFilter> {
        Ok(ResultFilter {
            client: self.client.clone(),
            server: self.server.clone(),
            test: self.test.clone(),
            from_us: parse_time("from", self.from.as_deref())?,
            to_us: parse_time("to", self.to.as_deref())?,
            limit: self.limit.unwrap_or(1000).clamp(1, 100_000),
            include_raw: self.raw,
        })
    }
}

pub(super) async fn query_results(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: ResultsQuery = parse_query(&uri)?;
    let results = state.archive.results(&query.filter()?).await?;
    Ok(Json(serde_json::json!({ "results": results })))
}

pub(super) async fn query_series(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: ResultsQuery = parse_query(&uri)?;
    let known = || {
        vantage_model::kinds::metrics()
            .iter()
            .map(|metric| metric.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let metric = query.metric.as_deref().ok_or_else(|| {
        ApiError::bad_request(format!(
            "query parameter 'metric' is required (one of {})",
            known()
        ))
    })?;
    if vantage_model::kinds::metric(metric).is_none() {
        return Err(ApiError::bad_request(format!(
            "query parameter 'metric': unknown metric '{metric}' (one of {})",
            known()
        )));
    }
    let mut filter = query.filter()?;
    let to_us = filter.to_us.unwrap_or_else(now_us);
    let from_us = filter.from_us.unwrap_or(to_us - 86_400_000_000);
    if from_us >= to_us {
        return Err(ApiError::bad_request(
            "query parameters 'from'/'to': 'from' must be before 'to'",
        ));
    }
    filter.from_us = Some(from_us);
    filter.to_us = Some(to_us);
    let buckets = query.buckets.unwrap_or(200).clamp(1, 10_000);
    let bucket_us = ((to_us - from_us) + buckets - 1) / buckets;
    let series = state.archive.series(&filter, metric, bucket_us).await?;
    Ok(Json(serde_json::json!({
        "metric": metric,
        "from": from_us_json(from_us),
        "to": from_us_json(to_us),
        "bucket_us": bucket_us,
        "buckets": series,
    })))
}

fn from_us_json(time_us: i64) -> serde_json::Value {
    serde_json::json!(from_us(time_us))
}

#[derive(Deserialize)]
struct RunsRange {
    from: Option<String>,
    to: Option<String>,
}

pub(super) async fn query_runs(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let query: RunsRange = parse_query(&uri)?;
    let to_us = parse_time("to", query.to.as_deref())?.unwrap_or(i64::MAX);
    let from_us = parse_time("from", query.from.as_deref())?.unwrap_or(0);
    let runs = state.archive.runs_between(from_us, to_us).await?;
    Ok(Json(serde_json::json!({ "runs": runs })))
}

pub(super) async fn metrics(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    let format = exposition::Format::negotiate(accept);
    let latest = state.archive.latest_per_pair().await?;
    Ok((
        [
            (header::CONTENT_TYPE, format.content_type()),
            (header::VARY, "accept"),
        ],
        exposition::render(&latest, &state.archivers.counts(), format),
    )
        .into_response())
}
