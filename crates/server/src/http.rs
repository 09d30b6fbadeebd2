//! Serving the API over HTTP/1.1 with bounds a client cannot lift: connections served
//! at once, time to send a request's headers (slow-header clients such as slowloris
//! are cut off), time to answer a request (long polls and event streams excepted:
//! they bound themselves), and the body size. Every error answer is JSON, including
//! those axum and hyper produce themselves (413, 404, 405, timeouts).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::Watcher;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::api::ApiError;

/// Limits of the HTTP listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connections served at once; further clients wait in the kernel's backlog.
    pub max_connections: usize,
    /// A request's headers must arrive within this (also ends idle keep-alive connections).
    pub header_timeout: Duration,
    /// A request must be answered within this (long polls and subscriptions excepted).
    pub request_timeout: Duration,
    /// Largest request body.
    pub max_body_bytes: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_connections: 4096,
            header_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(60),
            // The largest result an agent uploads is a throughput run with per-interval
            // samples of every stream; 32 MiB holds 300 s of 1 s intervals of 128 streams
            // many times over (docs/api.md).
            max_body_bytes: 32 * 1024 * 1024,
        }
    }
}

/// Paths whose handlers wait on purpose (bounded by their own parameters).
fn waits_on_purpose(path: &str) -> bool {
    path == "/api/v1/subscribe" || (path.starts_with("/api/v1/agents/") && path.ends_with("/runs"))
}

/// Applies the request timeout, the body limit and JSON error bodies to `app`.
pub fn bounded(app: Router, limits: HttpLimits) -> Router {
    let request_timeout = limits.request_timeout;
    app.layer(axum::middleware::from_fn(json_errors))
        .layer(axum::middleware::from_fn(
            move |request: Request, next: Next| deadline(request, next, request_timeout),
        ))
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
}

async fn deadline(request: Request, next: Next, timeout: Duration) -> Response {
    if waits_on_purpose(request.uri().path()) {
        return next.run(request).await;
    }
    match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the request was not answered within {} s; try again",
                timeout.as_secs()
            ),
        )
        .into_response(),
    }
}

/// Error answers that are not JSON yet (axum's own rejections, such as 413 for a body
/// over the limit or 415 for a wrong content type) become `{"error": "..."}`.
async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    // Rejection texts are short; anything longer is cut rather than buffered whole.
    let text = match axum::body::to_bytes(response.into_body(), 4096).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let reason = status.canonical_reason().unwrap_or("error");
    let message = if text.is_empty() {
        reason.to_string()
    } else {
        format!("{reason}: {text}")
    };
    let mut json = ApiError::new(status, message).into_response();
    json.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    json
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until `stopped` turns
/// true, then lets in-flight requests finish (at most `drain` long) before returning.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    tls: Option<TlsAcceptor>,
    mut stopped: watch::Receiver<bool>,
    drain: Duration,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            _ = stop_requested(&mut stopped) => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, say: back off instead of spinning.
                    tracing::warn!("accepting a connection failed: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop_requested(&mut stopped) => break,
        };
        let (app, watcher, tls) = (app.clone(), graceful.watcher(), tls.clone());
        tokio::spawn(async move {
            let served = match tls {
                None => serve_connection(stream, app, limits, watcher).await,
                // The handshake counts against the header deadline: a client that
                // opens a connection and says nothing is cut off either way.
                Some(tls) => {
                    match tokio::time::timeout(limits.header_timeout, tls.accept(stream)).await {
                        Ok(Ok(stream)) => serve_connection(stream, app, limits, watcher).await,
                        Ok(Err(error)) => Err(format!("TLS handshake failed: {error}")),
                        Err(_) => Err("TLS handshake not completed in time".to_string()),
                    }
                }
            };
            if let Err(error) = served {
                tracing::debug!(%peer, "connection ended: {error}");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still running {} s after the stop; closing",
            drain.as_secs()
        );
    }
    Ok(())
}

/// Serves HTTP/1.1 requests on one connection until it closes.
async fn serve_connection<S>(
    stream: S,
    app: Router,
    limits: HttpLimits,
    watcher: Watcher,
) -> Result<(), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    watcher
        .watch(connection)
        .await
        .map_err(|error| error.to_string())
}

/// Completes once `stopped` turns true (or its sender is gone).
async fn stop_requested(stopped: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns must not live across the caller's awaits.
    let _ = stopped.wait_for(|stop| *stop).await.map(|_| ());
}

#[cfg(test)]
mod tests {
    use super::waits_on_purpose;

    #[test]
    fn only_long_polls_and_subscriptions_wait_past_the_deadline() {
        assert!(waits_on_purpose("/api/v1/subscribe"));
        assert!(waits_on_purpose("/api/v1/agents/a1/runs"));
        assert!(!waits_on_purpose("/api/v1/agents/a1/heartbeat"));
        assert!(!waits_on_purpose("/api/v1/results"));
    }
}
