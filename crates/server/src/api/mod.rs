//! REST + JSON API (docs/api.md) and the dashboard that uses it. Every error is
//! `{"error": "..."}` with a status that says whose fault it was; every route but
//! `/healthz`, `/openapi.json`, the dashboard's page and assets and its sign-in
//! needs a bearer token (or a dashboard session) whose role allows it.

mod admin;
mod agents;
mod app;
mod common;
mod config;
mod correlate;
mod dashboard;
mod diagnose;
mod grid;
mod health;
mod results;
mod sla;
mod transfers;

use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::routing::{delete, get, post};
use axum::{Json, Router};

use crate::openapi;
use common::AppState;
pub use common::{ApiError, Caller};
pub use dashboard::Https;

/// Every route as (method, path); `/openapi.json` documents exactly these (tested).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/"),
    ("get", "/assets/{file}"),
    ("get", "/healthz"),
    ("get", "/openapi.json"),
    ("get", "/metrics"),
    ("post", "/api/v1/tokens"),
    ("get", "/api/v1/tokens"),
    ("delete", "/api/v1/tokens/{id}"),
    ("get", "/api/v1/ticket-keys"),
    ("post", "/api/v1/ticket-keys"),
    ("get", "/api/v1/agents"),
    ("post", "/api/v1/agents"),
    ("post", "/api/v1/agents/{name}/heartbeat"),
    ("get", "/api/v1/agents/{name}/runs"),
    ("post", "/api/v1/results"),
    ("post", "/api/v1/results/batch"),
    ("post", "/api/v1/captures"),
    ("get", "/api/v1/captures/packets"),
    ("get", "/api/v1/results"),
    ("get", "/api/v1/series"),
    ("get", "/api/v1/runs"),
    ("get", "/api/v1/config"),
    ("put", "/api/v1/config"),
    ("post", "/api/v1/requests"),
    ("get", "/api/v1/app-metrics"),
    ("post", "/api/v1/app-metrics"),
    ("post", "/api/v1/alerts"),
    ("get", "/api/v1/alerts"),
    ("get", "/api/v1/subscribe"),
    ("post", "/api/v1/retention"),
    ("get", "/api/v1/health/matrix"),
    ("get", "/api/v1/health/select"),
    ("get", "/api/v1/health/fit"),
    ("post", "/api/v1/diagnose"),
    ("get", "/api/v1/diagnose"),
    ("get", "/api/v1/diagnose/{id}"),
    ("get", "/api/v1/sla"),
    ("get", "/api/v1/sla/verdicts"),
    ("get", "/api/v1/correlate"),
    ("post", "/api/v1/session"),
    ("get", "/api/v1/session"),
    ("delete", "/api/v1/session"),
    ("get", "/api/v1/grid"),
    ("post", "/api/v1/transfers"),
    ("get", "/api/v1/transfers"),
    ("get", "/api/v1/transfers/{id}"),
    ("get", "/api/v1/agents/{name}/transfers"),
    ("post", "/api/v1/agents/{name}/transfers/{id}/progress"),
];

/// Liveness with the background tasks' states: 503 `degraded` while one is not running
/// (it panicked and waits for its restart, or it ended).
async fn healthz(State(state): State<AppState>) -> (StatusCode, Json<serde_json::Value>) {
    let stopping = *state.stopping.borrow();
    let (status, word) = if stopping {
        (StatusCode::SERVICE_UNAVAILABLE, "stopping")
    } else if state.tasks.all_running() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "degraded")
    };
    (
        status,
        Json(serde_json::json!({ "status": word, "tasks": state.tasks.snapshot() })),
    )
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(dashboard::index))
        .route("/assets/{file}", get(dashboard::asset))
        .route("/healthz", get(healthz))
        .route(
            "/openapi.json",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    openapi::DOCUMENT,
                )
            }),
        )
        .route("/metrics", get(results::metrics))
        .route(
            "/api/v1/tokens",
            post(admin::create_token).get(admin::list_tokens),
        )
        .route("/api/v1/tokens/{id}", delete(admin::revoke_token))
        .route(
            "/api/v1/ticket-keys",
            get(admin::list_ticket_keys).post(admin::rotate_ticket_key),
        )
        .route(
            "/api/v1/agents",
            get(agents::list_agents).post(agents::register_agent),
        )
        .route("/api/v1/agents/{name}/heartbeat", post(agents::heartbeat))
        .route("/api/v1/agents/{name}/runs", get(agents::assigned_runs))
        .route(
            "/api/v1/results",
            post(results::upload_result).get(results::query_results),
        )
        .route("/api/v1/results/batch", post(results::upload_batch))
        .route("/api/v1/captures", post(results::import_capture))
        .route("/api/v1/captures/packets", get(results::capture_packets))
        .route("/api/v1/series", get(results::query_series))
        .route("/api/v1/runs", get(results::query_runs))
        .route(
            "/api/v1/config",
            get(config::get_config).put(config::put_config),
        )
        .route("/api/v1/requests", post(config::request_run))
        .route(
            "/api/v1/app-metrics",
            get(app::query_app_metrics).post(app::publish_app_metrics),
        )
        .route(
            "/api/v1/alerts",
            post(app::publish_alert).get(app::query_alerts),
        )
        .route("/api/v1/subscribe", get(app::subscribe))
        .route("/api/v1/retention", post(admin::retention))
        .route("/api/v1/health/matrix", get(health::matrix))
        .route("/api/v1/health/select", get(health::select))
        .route("/api/v1/health/fit", get(health::fit))
        .route(
            "/api/v1/diagnose",
            post(diagnose::start).get(diagnose::list),
        )
        .route("/api/v1/diagnose/{id}", get(diagnose::get))
        .route("/api/v1/sla", get(sla::compliance))
        .route("/api/v1/sla/verdicts", get(sla::verdicts))
        .route("/api/v1/correlate", get(correlate::correlate))
        .route(
            "/api/v1/session",
            post(dashboard::sign_in)
                .get(dashboard::whoami)
                .delete(dashboard::sign_out),
        )
        .route("/api/v1/grid", get(grid::grid))
        .route(
            "/api/v1/transfers",
            post(transfers::create).get(transfers::list),
        )
        .route("/api/v1/transfers/{id}", get(transfers::get))
        .route(
            "/api/v1/agents/{name}/transfers",
            get(transfers::assignments),
        )
        .route(
            "/api/v1/agents/{name}/transfers/{id}/progress",
            post(transfers::progress),
        )
        .fallback(|uri: Uri| async move {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no route for '{}'; see /openapi.json", uri.path()),
            )
        })
        .method_not_allowed_fallback(|uri: Uri| async move {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("method not allowed on '{}'; see /openapi.json", uri.path()),
            )
        })
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::ROUTES;
    use crate::openapi::DOCUMENT;

    #[test]
    fn documents_exactly_the_served_routes() {
        let document: serde_json::Value =
            serde_json::from_str(DOCUMENT).expect("openapi.json is JSON");
        assert_eq!(document["openapi"], "3.0.3");
        let mut documented = BTreeSet::new();
        for (path, methods) in document["paths"].as_object().expect("paths") {
            for method in methods.as_object().expect("methods").keys() {
                documented.insert((method.clone(), path.clone()));
            }
        }
        let served: BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|(method, path)| (method.to_string(), path.to_string()))
            .collect();
        assert_eq!(documented, served);
    }
}
