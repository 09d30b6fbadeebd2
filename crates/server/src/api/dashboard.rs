//! The dashboard: its page and assets, embedded in the binary, and the sign-in that
//! turns a token into a cookie session (docs/dashboard.md). The browser's
//! EventSource cannot send an Authorization header, so the session is a cookie:
//! HttpOnly (page scripts never see the token), SameSite=Strict (no other site's
//! page sends it) and Secure over HTTPS.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use vantage_model::control::Role;

use super::common::{authenticate, parse_body, ApiError, ApiResult, AppState, Caller};
use crate::archive::now_us;

/// The cookie that carries a dashboard session: the token, hex-encoded so that any
/// token an operator chose is a valid cookie value.
pub(super) const SESSION_COOKIE: &str = "vantage_session";
/// Header a cookie-authenticated change must carry: a page of another origin cannot
/// add it without a CORS preflight, which this server never grants.
pub(super) const DASHBOARD_HEADER: &str = "x-vantage-dashboard";
/// A session lasts at most this long (or until its token expires or is revoked).
const SESSION_MAX_AGE_S: i64 = 12 * 3600;

/// Marks requests that arrived over HTTPS, so the session cookie is `Secure`.
#[derive(Debug, Clone, Copy)]
pub struct Https;

/// Content-Security-Policy of the page: its own scripts, styles and API only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// (file, content type, content) of every asset.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../web/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("../../web/app.css"),
    ),
];

fn page(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            // Embedded in the binary: an upgrade changes them, so always revalidate.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub(super) async fn index() -> Response {
    page(
        "text/html; charset=utf-8",
        include_str!("../../web/index.html"),
    )
}

pub(super) async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, body)) => page(content_type, body),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no dashboard asset '{file}'"),
        )
        .into_response(),
    }
}

/// The session cookie's token in a request's `Cookie` headers, if any.
pub(super) fn session_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .and_then(|(_, value)| hex::decode(value).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
}

fn session_cookie(value: &str, max_age_s: i64, https: bool) -> HeaderValue {
    let secure = if https { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_s}{secure}"
    ))
    .expect("hex and ASCII make a valid header value")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    token: String,
}

/// `POST /api/v1/session {"token"}`: checks the token and sets the session cookie.
pub(super) async fn sign_in(
    State(state): State<AppState>,
    https: Option<Extension<Https>>,
    body: Bytes,
) -> ApiResult<Response> {
    let sign_in: SignIn = parse_body(&body)?;
    let (caller, expires_us) = authenticate(&state, sign_in.token.trim()).await?;
    if caller.role == Role::Agent {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "token '{}' is an agent's: sign in with a reader token (read-only) or an admin token",
                caller.name
            ),
        ));
    }
    let max_age_s = expires_us.map_or(SESSION_MAX_AGE_S, |expires_us| {
        ((expires_us - now_us()) / 1_000_000).clamp(1, SESSION_MAX_AGE_S)
    });
    let cookie = session_cookie(
        &hex::encode(sign_in.token.trim()),
        max_age_s,
        https.is_some(),
    );
    let mut response = Json(session_json(&caller)).into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    Ok(response)
}

fn session_json(caller: &Caller) -> serde_json::Value {
    serde_json::json!({ "name": caller.name, "role": caller.role.as_str() })
}

/// `GET /api/v1/session`: who the cookie (or bearer token) signs in as.
pub(super) async fn whoami(caller: Caller) -> Json<serde_json::Value> {
    Json(session_json(&caller))
}

/// `DELETE /api/v1/session`: clears the cookie (the token itself stays valid).
pub(super) async fn sign_out(https: Option<Extension<Https>>) -> Response {
    let mut response = Json(serde_json::json!({ "signed_out": true })).into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, session_cookie("", 0, https.is_some()));
    response
}
