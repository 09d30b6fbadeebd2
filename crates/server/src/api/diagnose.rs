//! `/api/v1/diagnose`: start a diagnosis job, read it (crate `diagnose` does the work).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::Json;
use vantage_model::control::Role;
use vantage_model::diagnosis::DiagnoseRequest;

use super::common::{limit_param, parse_body, parse_query, ApiError, ApiResult, AppState, Caller};
use crate::diagnose::{self, DiagnoseRefusal, DiagnosisJob};

/// Starts a job: 202 with the job as first stored; `GET /api/v1/diagnose/{id}` follows it.
pub(super) async fn start(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<DiagnosisJob>)> {
    caller.require(&[Role::Publisher])?;
    let request: DiagnoseRequest = parse_body(&body)?;
    let job = diagnose::start(&state, request)
        .await
        .map_err(|refusal| match refusal {
            DiagnoseRefusal::Archive(error) => error.into(),
            invalid => ApiError::bad_request(invalid.to_string()),
        })?;
    Ok((StatusCode::ACCEPTED, Json(job)))
}

pub(super) async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher])?;
    state
        .archive
        .diagnosis(&id)
        .await?
        .map(Json)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no diagnosis '{id}' (POST /api/v1/diagnose starts one)"),
            )
        })
}

/// Most jobs one `GET /api/v1/diagnose` lists.
const MAX_LISTED: i64 = 1000;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    limit: Option<i64>,
}

/// `GET /api/v1/diagnose?limit=`: the newest jobs, newest first.
pub(super) async fn list(
    State(state): State<AppState>,
    caller: Caller,
    uri: Uri,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher])?;
    let query: ListQuery = parse_query(&uri)?;
    let limit = limit_param(query.limit, 50, MAX_LISTED)?;
    let jobs = state.archive.diagnoses(limit).await?;
    Ok(Json(serde_json::json!({ "jobs": jobs })))
}
