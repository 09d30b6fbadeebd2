//! The agent's client of several server replicas: a call goes to the replica that
//! answered last and fails over to the next one in turn while replicas are unreachable
//! or failing (5xx); a refusal (4xx) is an answer and is not sent elsewhere. The
//! replicas are small stand-ins on loopback; "unreachable" is a port nothing listens on.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;
use vantage_agent::client::{CallError, ServerClient};

/// A replica that answers heartbeats with `status` and counts them.
async fn replica(status: StatusCode) -> (String, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let app = Router::new().route(
        "/api/v1/agents/{name}/heartbeat",
        post(move || {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                if status.is_success() {
                    (
                        status,
                        Json(json!({"name": "a", "time": chrono::Utc::now(), "ticket_keys": []})),
                    )
                } else {
                    (status, Json(json!({"error": format!("answered {status}")})))
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, calls)
}

/// A loopback URL nothing listens on (connections are refused).
fn unreachable_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

fn client(urls: &[&str]) -> ServerClient {
    let urls: Vec<String> = urls.iter().map(|url| url.to_string()).collect();
    ServerClient::new(&urls, "token", None).unwrap()
}

#[tokio::test]
async fn an_unreachable_or_failing_replica_is_passed_over_and_the_answering_one_kept() {
    let dead = unreachable_url();
    let (failing, failing_calls) = replica(StatusCode::SERVICE_UNAVAILABLE).await;
    let (healthy, healthy_calls) = replica(StatusCode::OK).await;
    let client = client(&[&dead, &failing, &healthy]);

    client.heartbeat("a").await.unwrap();
    assert_eq!(failing_calls.load(Ordering::SeqCst), 1);
    assert_eq!(healthy_calls.load(Ordering::SeqCst), 1);
    // The replica that answered is asked first from then on, by clones too.
    client.clone().heartbeat("a").await.unwrap();
    client.heartbeat("a").await.unwrap();
    assert_eq!(failing_calls.load(Ordering::SeqCst), 1);
    assert_eq!(healthy_calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_refusal_is_an_answer_and_is_not_sent_to_another_replica() {
    let (refusing, refusing_calls) = replica(StatusCode::UNAUTHORIZED).await;
    let (healthy, healthy_calls) = replica(StatusCode::OK).await;
    let client = client(&[&refusing, &healthy]);

    match client.heartbeat("a").await {
        Err(CallError::Refused { status, message }) => {
            assert_eq!(status, 401);
            assert_eq!(message, "answered 401 Unauthorized");
        }
        other => panic!("expected the refusal, got {other:?}"),
    }
    assert_eq!(refusing_calls.load(Ordering::SeqCst), 1);
    assert_eq!(healthy_calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn when_every_replica_fails_the_error_names_each() {
    let dead = unreachable_url();
    let (failing, _) = replica(StatusCode::BAD_GATEWAY).await;
    let client = client(&[&dead, &failing]);

    let Err(CallError::Transient(message)) = client.heartbeat("a").await else {
        panic!("expected a transient error");
    };
    assert!(message.starts_with(&format!("{dead}: ")), "{message}");
    assert!(
        message.contains(&format!(
            "; {failing}: 502 Bad Gateway: answered 502 Bad Gateway"
        )),
        "{message}"
    );
}
