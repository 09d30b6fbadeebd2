//! Agents: registration, heartbeats, and the runs they fetch (long-poll).

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::Json;
use serde::Deserialize;
use vantage_model::control::{
    AgentRegistration, AssignedRuns, HeartbeatAck, RegistrationAck, Role, MAX_VERSION_LEN,
};

use super::common::{
    parse_body, parse_query, ApiError, ApiResult, AppState, Caller, MAX_LONG_POLL_S,
};
use crate::archive::now_us;
use crate::dispatch::assign;
use crate::poll_hints::Freshness;

pub(super) async fn list_agents(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[Role::Reader, Role::Publisher, Role::Agent])?;
    let agents = state.archive.agents().await?;
    Ok(Json(serde_json::json!({ "agents": agents })))
}

pub(super) async fn register_agent(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<RegistrationAck>> {
    let registration: AgentRegistration = parse_body(&body)?;
    caller.require_agent(&registration.name)?;
    if registration.name.trim().is_empty() {
        return Err(ApiError::bad_request("field 'name': must not be empty"));
    }
    if registration
        .version
        .as_ref()
        .is_some_and(|version| version.len() > MAX_VERSION_LEN)
    {
        return Err(ApiError::bad_request(format!(
            "field 'version': at most {MAX_VERSION_LEN} bytes"
        )));
    }
    if registration.addresses.is_empty() {
        return Err(ApiError::bad_request(
            "field 'addresses': at least one address is needed",
        ));
    }
    state.archive.register_agent(&registration).await?;
    state.refresh_agent_tags().await?;
    tracing::info!(agent = %registration.name, "agent registered");
    let keyring = state.keyring().await?;
    let now = now_us();
    Ok(Json(RegistrationAck {
        name: registration.name,
        registered: true,
        ticket_key: keyring.signer(now).public_key_hex(),
        ticket_keys: keyring.trusted_public_keys(now),
    }))
}

/// How stale an agent's last-seen time may get before a fetch records it again (the
/// agent's heartbeat interval; heartbeats always record it).
const SEEN_RESOLUTION_US: i64 = 5_000_000;

pub(super) async fn heartbeat(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<HeartbeatAck>> {
    caller.require_agent(&name)?;
    if !state.archive.touch_agent(&name).await? {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("agent '{name}' is not registered"),
        ));
    }
    let keyring = state.keyring().await?;
    Ok(Json(HeartbeatAck {
        name,
        time: chrono::Utc::now(),
        ticket_keys: keyring.trusted_public_keys(now_us()),
    }))
}

#[derive(Deserialize)]
struct RunsQuery {
    /// Long-poll: wait up to this many seconds for a run.
    #[serde(default)]
    wait_s: u64,
    /// Hand out runs starting within this many seconds.
    #[serde(default = "default_horizon_s")]
    horizon_s: u64,
    /// Also return runs already handed out (an agent asks this after a restart).
    #[serde(default)]
    include_dispatched: bool,
}

fn default_horizon_s() -> u64 {
    60
}

pub(super) async fn assigned_runs(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    uri: Uri,
) -> ApiResult<Json<AssignedRuns>> {
    caller.require_agent(&name)?;
    let query: RunsQuery = parse_query(&uri)?;
    let Some(caller_agent) = state.archive.agents_named(&[&name]).await?.pop() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("agent '{name}' is not registered"),
        ));
    };
    // Last seen is kept to the heartbeats' resolution: a fleet's fetches every few
    // seconds would otherwise each queue a write for the archive's one writer.
    if now_us() - caller_agent.last_seen_at.timestamp_micros() >= SEEN_RESOLUTION_US {
        state.archive.touch_agent(&name).await?;
    }
    let deadline =
        tokio::time::Instant::now() + Duration::from_secs(query.wait_s.min(MAX_LONG_POLL_S));
    let mut stopping = state.stopping.subscribe();
    // Most long polls find nothing waiting, which the fleet's hints tell without a read.
    let freshness = if query.wait_s == 0 || query.include_dispatched {
        Freshness::Exact
    } else {
        Freshness::Hinted
    };
    loop {
        let horizon_us =
            now_us() + i64::try_from(query.horizon_s.min(3600)).unwrap_or(60) * 1_000_000;
        let mut runs = if state
            .poll_hints
            .may_have_waiting(&state.archive, &name, horizon_us, freshness)
            .await?
        {
            let claimed = state
                .archive
                .take_runs_for(&name, horizon_us, query.include_dispatched)
                .await?;
            state.poll_hints.waiting_claimed(&name);
            claimed
        } else {
            Vec::new()
        };
        runs.extend(crate::planner::place_light_runs(&state, &name, horizon_us, freshness).await?);
        if !runs.is_empty() || tokio::time::Instant::now() >= deadline || *stopping.borrow() {
            let agents = state.registrations().await?;
            let keyring = state.keyring().await?;
            let signer = keyring.signer(now_us());
            let assigned = runs
                .into_iter()
                .filter_map(|run| assign(run, &agents, signer))
                .collect();
            return Ok(Json(AssignedRuns { runs: assigned }));
        }
        // Re-check every second as well: another replica may have stored the runs.
        tokio::select! {
            _ = state.runs_stored.notified() => {}
            _ = stopping.changed() => {}
            _ = tokio::time::sleep(Duration::from_secs(1).min(deadline - tokio::time::Instant::now())) => {}
        }
    }
}
