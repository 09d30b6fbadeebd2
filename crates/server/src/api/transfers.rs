//! `/api/v1/transfers`: deadline transfers (crate `transfers` plans them); the source
//! agent's side: its assignments (long-poll) and progress reports.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::Json;
use serde::Deserialize;
use vantage_model::control::Role;
use vantage_model::transfers::{
    TransferAsk, TransferAssignments, TransferProgress, TransferRecord,
};

use super::common::{
    current_config, parse_body, parse_query, ApiError, ApiResult, AppState, Caller, MAX_LONG_POLL_S,
};
use crate::archive::now_us;
use crate::transfers::TransferRefusal;

impl From<TransferRefusal> for ApiError {
    fn from(refusal: TransferRefusal) -> ApiError {
        let status = match refusal {
            TransferRefusal::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            TransferRefusal::UnknownAgent(_) => StatusCode::UNPROCESSABLE_ENTITY,
            TransferRefusal::NoCapacity(_) => StatusCode::CONFLICT,
            TransferRefusal::NotFound(_) => StatusCode::NOT_FOUND,
        };
        ApiError::new(status, refusal.to_string())
    }
}

/// Admits a transfer (201 with its record) or refuses it: 409 with the link that cannot
/// carry it, 422 for a bad request.
pub(super) async fn create(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<TransferRecord>)> {
    caller.require(&[Role::Publisher])?;
    let ask: TransferAsk = parse_body(&body)?;
    let segments = current_config(&state)
        .await?
        .map(|config| config.segments)
        .unwrap_or_default();
    let agents = state.archive.agents().await?;
    let keyring = state.keyring().await?;
    let now = now_us();
    let record = state
        .transfers
        .admit(&ask, &segments, &agents, keyring.signer(now), now)?;
    tracing::info!(transfer = %record.id, source = %record.source, destination = %record.destination, bytes = record.bytes, rate_bps = record.rate_bps, "transfer admitted");
    Ok((StatusCode::CREATED, Json(record)))
}

pub(super) async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher])?;
    Ok(Json(
        serde_json::json!({ "transfers": state.transfers.list() }),
    ))
}

pub(super) async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<TransferRecord>> {
    caller.require(&[Role::Reader, Role::Publisher])?;
    state.transfers.get(&id).map(Json).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no transfer '{id}' (POST /api/v1/transfers asks for one)"),
        )
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AssignmentsQuery {
    /// Answer at once unless the plan is still at this version.
    version: Option<u64>,
    /// Long-poll: wait up to this many seconds for a change.
    #[serde(default)]
    wait_s: u64,
}

/// The transfers the agent sends and their rates, when the plan is newer than the
/// version it has.
pub(super) async fn assignments(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    uri: Uri,
) -> ApiResult<Json<TransferAssignments>> {
    caller.require_agent(&name)?;
    let query: AssignmentsQuery = parse_query(&uri)?;
    let mut version = state.transfers.subscribe();
    if query.version == Some(*version.borrow_and_update()) {
        let wait = Duration::from_secs(query.wait_s.min(MAX_LONG_POLL_S));
        let mut stopping = state.stopping.subscribe();
        tokio::select! {
            _ = version.changed() => {}
            _ = tokio::time::sleep(wait) => {}
            _ = stopping.wait_for(|stop| *stop) => {}
        }
    }
    Ok(Json(state.transfers.assignments(&name)))
}

pub(super) async fn progress(
    State(state): State<AppState>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<TransferRecord>> {
    caller.require_agent(&name)?;
    let progress: TransferProgress = parse_body(&body)?;
    let record = state.transfers.progress(&name, &id, &progress, now_us())?;
    if !record.state.is_active() {
        tracing::info!(transfer = %record.id, state = ?record.state, "transfer ended");
    }
    Ok(Json(record))
}
