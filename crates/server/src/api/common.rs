//! What every handler shares: the state type, errors as JSON, the authenticated
//! caller, and body/query parsing that names the bad field.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use vantage_model::control::Role;

use crate::archive::{from_us, now_us, to_us, ArchiveError};
use crate::state::ServerState;

/// Largest batch one call may carry (results, app metrics).
pub(super) const MAX_BATCH: usize = 10_000;

/// Longest long-poll a client may ask for (`wait_s`).
pub(super) const MAX_LONG_POLL_S: u64 = 60;

pub(super) type AppState = Arc<ServerState>;

/// An API error: its status and a message naming the problem.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub(super) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}

impl From<ArchiveError> for ApiError {
    fn from(error: ArchiveError) -> ApiError {
        tracing::error!("{error}");
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, error.to_string())
    }
}

pub(super) type ApiResult<T> = Result<T, ApiError>;

/// The caller, authenticated by `Authorization: Bearer TOKEN`.
pub struct Caller {
    pub name: String,
    pub role: Role,
}

impl Caller {
    pub(super) fn require(&self, allowed: &[Role]) -> ApiResult<()> {
        if self.role == Role::Admin || allowed.contains(&self.role) {
            Ok(())
        } else {
            // Admin may do everything, so it is always among the roles named.
            let names: Vec<&str> = allowed
                .iter()
                .chain([&Role::Admin])
                .map(|role| role.as_str())
                .collect();
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "token '{}' has role '{}'; this call needs role {}",
                    self.name,
                    self.role.as_str(),
                    names.join(" or ")
                ),
            ))
        }
    }
}

impl Caller {
    /// Allows agent-role callers to act only as the agent their token is named for
    /// (one token per agent; admins may act for any agent).
    pub(super) fn require_agent(&self, agent: &str) -> ApiResult<()> {
        self.require(&[Role::Agent])?;
        if self.role == Role::Agent && self.name != agent {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "token '{}' belongs to agent '{}' and cannot act as agent '{agent}'; \
                     create one token per agent (POST /api/v1/tokens with the agent's name)",
                    self.name, self.name
                ),
            ));
        }
        Ok(())
    }
}

/// The caller a token names: unknown, revoked and expired tokens are refused. Also
/// returns when the token expires.
pub(super) async fn authenticate(
    state: &AppState,
    token: &str,
) -> ApiResult<(Caller, Option<i64>)> {
    let grant = state.authenticate(token).await?.ok_or_else(|| {
        ApiError::new(StatusCode::UNAUTHORIZED, "unknown or revoked bearer token")
    })?;
    if let Some(expires_us) = grant
        .expires_us
        .filter(|expires_us| now_us() >= *expires_us)
    {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            format!(
                "token '{}' expired at {}; ask an admin for a new one",
                grant.name,
                from_us(expires_us).to_rfc3339()
            ),
        ));
    }
    Ok((
        Caller {
            name: grant.name,
            role: grant.role,
        },
        grant.expires_us,
    ))
}

/// One of the uploads the ingest pipeline reads and stores at once
/// ([`crate::ingest::IngestPipeline::admit`]): an upload handler takes it before its body,
/// as the extractor before the body's.
pub struct IngestSlot {
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl FromRequestParts<AppState> for IngestSlot {
    type Rejection = ApiError;

    async fn from_request_parts(_parts: &mut Parts, state: &AppState) -> ApiResult<IngestSlot> {
        Ok(IngestSlot {
            _permit: state.ingest.admit().await,
        })
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    /// `Authorization: Bearer TOKEN`, or else the dashboard's session cookie.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> ApiResult<Caller> {
        let Some(header) = parts.headers.get(header::AUTHORIZATION) else {
            let token = super::dashboard::session_token(&parts.headers).ok_or_else(|| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "missing 'Authorization: Bearer TOKEN' header (or a dashboard session: sign in at /)",
                )
            })?;
            // SameSite=Strict keeps other sites' pages from sending the cookie; a
            // header they cannot set without a preflight guards changes once more.
            if !parts.method.is_safe()
                && !parts
                    .headers
                    .contains_key(super::dashboard::DASHBOARD_HEADER)
            {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "a change made with a dashboard session must carry the '{}' header",
                        super::dashboard::DASHBOARD_HEADER
                    ),
                ));
            }
            return Ok(authenticate(state, &token).await?.0);
        };
        let token = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "Authorization header is not 'Bearer TOKEN'",
                )
            })?;
        Ok(authenticate(state, token).await?.0)
    }
}

/// Parses a JSON body, naming the path of a bad field.
///
/// A good body is parsed once, plainly: tracking the path costs every field of every
/// body (a fleet's uploads and fetches are most of the server's parsing), and only a
/// bad body needs it, so that one is parsed again to name where it went wrong.
pub(super) fn parse_body<T: DeserializeOwned>(body: &Bytes) -> ApiResult<T> {
    if let Ok(parsed) = serde_json::from_slice(body) {
        return Ok(parsed);
    }
    let deserializer = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(deserializer).map_err(|error| {
        let path = error.path().to_string();
        ApiError::bad_request(format!("invalid JSON body at '{path}': {}", error.inner()))
    })
}

pub(super) fn parse_query<T: DeserializeOwned>(uri: &Uri) -> ApiResult<T> {
    let query = uri.query().unwrap_or("");
    serde_urlencoded::from_str(query)
        .map_err(|error| ApiError::bad_request(format!("invalid query string: {error}")))
}

/// A duration field of a request body (`30s`, `720h`); the error names the field.
pub(super) fn parse_duration_field(name: &str, text: &str) -> ApiResult<std::time::Duration> {
    vantage_model::units::parse_duration(text)
        .map_err(|error| ApiError::bad_request(format!("field '{name}': {error}")))
}

pub(super) fn parse_time(name: &str, text: Option<&str>) -> ApiResult<Option<i64>> {
    text.map(|text| {
        chrono::DateTime::parse_from_rfc3339(text)
            .map(|time| to_us(time.with_timezone(&chrono::Utc)))
            .map_err(|error| {
                ApiError::bad_request(format!(
                    "query parameter '{name}': '{text}' is not RFC 3339 ({error})"
                ))
            })
    })
    .transpose()
}

/// The applied configuration, validated; `None` before one is applied.
pub(super) async fn current_config(
    state: &AppState,
) -> ApiResult<Option<vantage_model::config::ValidatedConfig>> {
    Ok(crate::config_store::current(&state.archive)
        .await?
        .map(|(_, config)| config))
}

/// A `limit` query parameter: `default` when absent, refused outside 1..=`max`.
pub(super) fn limit_param(limit: Option<i64>, default: i64, max: i64) -> ApiResult<i64> {
    let limit = limit.unwrap_or(default);
    if (1..=max).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::bad_request(format!(
            "query parameter 'limit': must be 1 to {max} (got {limit})"
        )))
    }
}

/// A positive duration query parameter, in microseconds.
pub(super) fn positive_us(name: &str, text: &str) -> ApiResult<i64> {
    i64::try_from(parse_duration_field(name, text)?.as_micros())
        .ok()
        .filter(|us| *us > 0)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "query parameter '{name}': must be positive and under 290 000 years"
            ))
        })
}
