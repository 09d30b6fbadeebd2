//! The control plane's HTTP API with arbitrary request bodies and query strings, served
//! in process by the real router over a real (SQLite) archive, as an admin, so every
//! handler gets past authentication and parses what it was sent.
//!
//! Properties: no input makes a handler fail on the server's side (5xx) or panic; every
//! refusal is a JSON object with an `error` message; the summary metrics of any result
//! document are finite numbers.
//!
//! Input: one byte choosing the route, then the body (or the query string).
#![no_main]

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;
use vantage_model::control::{ResultUpload, Role};
use vantage_model::kinds::KINDS;
use vantage_server::archive::Archive;
use vantage_server::state::ServerState;

const ADMIN_TOKEN: &str = "fuzz-admin-token";
const BODY_ROUTES: [(Method, &str); 13] = [
    (Method::POST, "/api/v1/tokens"),
    (Method::POST, "/api/v1/ticket-keys"),
    (Method::POST, "/api/v1/agents"),
    (Method::POST, "/api/v1/agents/fuzz-agent/heartbeat"),
    (Method::POST, "/api/v1/results"),
    (Method::POST, "/api/v1/results/batch"),
    (Method::PUT, "/api/v1/config"),
    (Method::POST, "/api/v1/requests"),
    (Method::POST, "/api/v1/app-metrics"),
    (Method::POST, "/api/v1/alerts"),
    (Method::POST, "/api/v1/retention"),
    (Method::POST, "/api/v1/transfers"),
    (
        Method::POST,
        "/api/v1/agents/fuzz-agent/transfers/fuzz-transfer/progress",
    ),
];
/// Query routes; the agents' long poll is left out: it rightly waits up to a minute.
const QUERY_ROUTES: [&str; 4] = [
    "/api/v1/results",
    "/api/v1/series",
    "/api/v1/runs",
    "/api/v1/app-metrics",
];
/// Largest response read back (the API caps what it returns well below this).
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

struct Server {
    runtime: tokio::runtime::Runtime,
    router: Router,
    _dir: tempfile::TempDir,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let url = format!("sqlite://{}", dir.path().join("archive.db").display());
        let router = runtime.block_on(async {
            let archive = Archive::open(&url).await.expect("the archive opens");
            archive
                .add_token(ADMIN_TOKEN, "fuzz-admin", Role::Admin)
                .await
                .expect("the admin token is stored");
            vantage_server::api::router(
                ServerState::new(archive, Default::default())
                    .await
                    .expect("server state"),
            )
        });
        Server {
            runtime,
            router,
            _dir: dir,
        }
    })
}

/// The query string as a URI carries it: bytes a query may not hold are percent-encoded.
fn query_text(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for &byte in bytes {
        if byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&byte) {
            text.push(char::from(byte));
        } else {
            text.push_str(&format!("%{byte:02X}"));
        }
    }
    text
}

fn summary_metrics(body: &[u8]) {
    let Ok(upload) = serde_json::from_slice::<ResultUpload>(body) else {
        return;
    };
    let Some(result) = upload.result else {
        return;
    };
    for kind in KINDS {
        for (name, value) in kind.summary(&result) {
            assert!(value.is_finite(), "metric {name} = {value}");
        }
    }
}

fuzz_target!(|bytes: &[u8]| {
    let Some((&selector, rest)) = bytes.split_first() else {
        return;
    };
    let selector = usize::from(selector) % (BODY_ROUTES.len() + QUERY_ROUTES.len());
    let request = match BODY_ROUTES.get(selector) {
        Some((method, path)) => {
            summary_metrics(rest);
            Request::builder()
                .method(method)
                .uri(*path)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(rest.to_vec()))
        }
        None => {
            let path = QUERY_ROUTES[selector - BODY_ROUTES.len()];
            Request::builder()
                .method(Method::GET)
                .uri(format!("{path}?{}", query_text(rest)))
                .body(Body::empty())
        }
    };
    let Ok(mut request) = request else {
        return;
    };
    request.headers_mut().insert(
        header::AUTHORIZATION,
        format!("Bearer {ADMIN_TOKEN}")
            .parse()
            .expect("a header value"),
    );
    let route = format!("{} {}", request.method(), request.uri());

    let server = server();
    let (status, body) = server.runtime.block_on(async {
        let response = server
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), MAX_RESPONSE_BYTES)
            .await
            .expect("the response body");
        (status, body)
    });
    let text = String::from_utf8_lossy(&body);
    assert!(
        !status.is_server_error(),
        "{route} answered {status}: {text}"
    );
    if status.is_client_error() {
        let error: serde_json::Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{route}: {status} body is not JSON ({e}): {text}"));
        assert!(
            error.get("error").is_some_and(serde_json::Value::is_string),
            "{route}: {status} without an error message: {text}"
        );
    }
    assert_ne!(
        status,
        StatusCode::UNAUTHORIZED,
        "{route}: the admin token was refused"
    );
});
