//! Administration: tokens, ticket keys and retention.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use vantage_model::control::Role;

use super::common::{parse_body, parse_duration_field, ApiError, ApiResult, AppState, Caller};
use crate::archive::{from_us, now_us, token_id, TOKEN_ID_LEN};
use crate::ticket_keys::{
    DEFAULT_ACTIVATE_IN, DEFAULT_RETIRE_PREVIOUS_IN, MAX_ROTATION_DELAY, MAX_TRUSTED_KEYS,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewToken {
    name: String,
    role: String,
    /// Lifetime (e.g. `720h`); the token never expires when absent.
    expires_in: Option<String>,
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
    let expires_us = match &request.expires_in {
        None => None,
        Some(text) => {
            let lifetime = parse_duration_field("expires_in", text)?;
            if lifetime.is_zero() {
                return Err(ApiError::bad_request(
                    "field 'expires_in': a token must live longer than 0 s",
                ));
            }
            Some(now_us().saturating_add(i64::try_from(lifetime.as_micros()).unwrap_or(i64::MAX)))
        }
    };
    let token = crate::new_token();
    state
        .archive
        .add_expiring_token(&token, &request.name, role, expires_us)
        .await?;
    Ok(Json(serde_json::json!({
        "token": token,
        "id": token_id(&token),
        "name": request.name,
        "role": role,
        "expires": expires_us.map(from_us),
    })))
}

pub(super) async fn list_tokens(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[])?;
    let tokens = state.archive.tokens().await?;
    Ok(Json(serde_json::json!({ "tokens": tokens })))
}

/// Revokes a token by its id; it is refused from the next request on.
pub(super) async fn revoke_token(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[])?;
    if !state.archive.revoke_token(&id).await? {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "no live token has id '{id}' (ids are the {TOKEN_ID_LEN} hex digits GET /api/v1/tokens lists)"
            ),
        ));
    }
    state.forget_tokens();
    Ok(Json(serde_json::json!({ "revoked": id })))
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
    let keep = parse_duration_field("keep", &request.keep)?;
    let cutoff_us = now_us() - i64::try_from(keep.as_micros()).unwrap_or(i64::MAX);
    let report = state.archive.apply_retention(cutoff_us).await?;
    Ok(Json(
        serde_json::json!({ "deleted": report, "cutoff": from_us(cutoff_us) }),
    ))
}

pub(super) async fn list_ticket_keys(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[])?;
    let keyring = state.keyring().await?;
    Ok(Json(
        serde_json::json!({ "keys": keyring.describe(now_us()) }),
    ))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Rotation {
    /// When the new key starts signing (default 60s): agents learn it before.
    activate_in: Option<String>,
    /// When the older keys stop being trusted (default 24h).
    retire_previous_in: Option<String>,
}

/// Rotates the ticket key: a new key signs after `activate_in`, the older ones retire
/// after `retire_previous_in`; agents learn both from their heartbeats.
pub(super) async fn rotate_ticket_key(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> ApiResult<Json<serde_json::Value>> {
    caller.require(&[])?;
    let rotation: Rotation = if body.is_empty() {
        Rotation::default()
    } else {
        parse_body(&body)?
    };
    let delay = |field: &str, text: &Option<String>, default| {
        let Some(text) = text else {
            return Ok(default);
        };
        let delay = parse_duration_field(field, text)?;
        if delay > MAX_ROTATION_DELAY {
            return Err(ApiError::bad_request(format!(
                "field '{field}': at most {} days",
                MAX_ROTATION_DELAY.as_secs() / 86_400
            )));
        }
        Ok(delay)
    };
    let activate_in = delay("activate_in", &rotation.activate_in, DEFAULT_ACTIVATE_IN)?;
    let retire_previous_in = delay(
        "retire_previous_in",
        &rotation.retire_previous_in,
        DEFAULT_RETIRE_PREVIOUS_IN,
    )?;
    if retire_previous_in < activate_in {
        return Err(ApiError::bad_request(
            "field 'retire_previous_in': must not be shorter than 'activate_in', \
             or no trusted key would sign in between",
        ));
    }
    let trusted = state.keyring().await?.trusted_public_keys(now_us()).len();
    if trusted >= MAX_TRUSTED_KEYS {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "{trusted} ticket keys are trusted already, the most there may be; \
                 rotate again once older keys retire (GET /api/v1/ticket-keys lists when)"
            ),
        ));
    }
    let (generation, keyring) = state
        .rotate_ticket_key(activate_in, retire_previous_in)
        .await?;
    tracing::warn!(
        generation,
        activate_in_s = activate_in.as_secs_f64(),
        retire_previous_in_s = retire_previous_in.as_secs_f64(),
        "ticket key rotated"
    );
    Ok(Json(serde_json::json!({
        "generation": generation,
        "keys": keyring.describe(now_us()),
    })))
}
