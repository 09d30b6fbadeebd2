//! The measurement configuration and apps' on-demand run requests.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use vantage_model::control::{Role, RunRequest};

use super::common::{parse_body, ApiError, ApiResult, AppState, Caller};
use crate::config_store;
use crate::planner::{self, RequestRefusal};

pub(super) async fn get_config(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    match state.archive.current_config().await? {
        Some((version, document)) => Ok(Json(
            serde_json::json!({ "version": version, "config": document }),
        )),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no configuration has been applied yet",
        )),
    }
}

pub(super) async fn put_config(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[])?;
    let document: serde_json::Value = parse_body(&body)?;
    let version = config_store::apply(&state.archive, &document)
        .await
        .map_err(|error| match error {
            config_store::ApplyError::Archive(error) => error.into(),
            invalid => ApiError::bad_request(invalid.to_string()),
        })?;
    state.runs_were_stored();
    Ok(Json(serde_json::json!({ "version": version })))
}

pub(super) async fn request_run(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Publisher])?;
    let request: RunRequest = parse_body(&body)?;
    let id = planner::submit_request(&state, &request)
        .await
        .map_err(|error| match error {
            RequestRefusal::Archive(error) => error.into(),
            invalid => ApiError::bad_request(invalid.to_string()),
        })?;
    Ok(Json(
        serde_json::json!({ "request_id": id, "task": vantage_scheduler::ON_DEMAND_TASK, "run_id": id }),
    ))
}
