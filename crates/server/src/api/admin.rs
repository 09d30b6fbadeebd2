//! Administration: tokens and retention.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use vantage_model::control::Role;
use vantage_model::units::parse_duration;

use super::common::{parse_body, ApiError, ApiResult, AppState, Caller};
use crate::archive::{from_us, now_us};

#[derive(Deserialize)]
struct NewToken {
    name: String,
    role: String,
}

pub(super) async fn create_token(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[])?;
    let request: NewToken = parse_body(&body)?;
    let role = Role::parse(&request.role).ok_or_else(|| {
        ApiError::bad_request(format!(
            "field 'role': '{}' is not one of admin, agent, publisher, reader",
            request.role
        ))
    })?;
    let token = crate::new_token();
    state.archive.add_token(&token, &request.name, role).await?;
    Ok(Json(
        serde_json::json!({ "token": token, "name": request.name, "role": role }),
    ))
}

#[derive(Deserialize)]
struct RetentionRequest {
    /// Keep data newer than this duration (e.g. `720h`).
    keep: String,
}

pub(super) async fn retention(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[])?;
    let request: RetentionRequest = parse_body(&body)?;
    let keep = parse_duration(&request.keep)
        .map_err(|error| ApiError::bad_request(format!("field 'keep': {error}")))?;
    let cutoff_us = now_us() - i64::try_from(keep.as_micros()).unwrap_or(i64::MAX);
    let report = state.archive.apply_retention(cutoff_us).await?;
    Ok(Json(
        serde_json::json!({ "deleted": report, "cutoff": from_us(cutoff_us) }),
    ))
}
