//! How the agent's uploader treats a server that refuses results: 401 (bad or revoked
//! token), 403 (another agent's token) and 413 (body over the server's limit) keep the
//! result spooled and retried until the operator fixes the cause; any other 4xx parks
//! it under `rejected/`. Nothing is lost, nothing is uploaded twice. The server is a
//! small stand-in on loopback that refuses the first uploads with a chosen status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::Utc;
use serde_json::json;
use vantage_agent::spool::Spool;
use vantage_agent::AgentOptions;
use vantage_model::control::{ResultUpload, RunOutcome};

#[derive(Default)]
struct StandIn {
    /// Status to answer uploads with, and how many more times.
    refuse: Mutex<(u16, u32)>,
    /// Accepted uploads per run id.
    accepted: Mutex<HashMap<String, u32>>,
    refused: Mutex<u32>,
}

async fn upload(
    State(stand_in): State<Arc<StandIn>>,
    Json(upload): Json<ResultUpload>,
) -> (StatusCode, Json<serde_json::Value>) {
    {
        let mut refuse = stand_in.refuse.lock().unwrap();
        if refuse.1 > 0 {
            refuse.1 -= 1;
            *stand_in.refused.lock().unwrap() += 1;
            let status = StatusCode::from_u16(refuse.0).unwrap();
            return (
                status,
                Json(json!({"error": format!("refused with {status}")})),
            );
        }
    }
    *stand_in
        .accepted
        .lock()
        .unwrap()
        .entry(upload.run_id.clone())
        .or_default() += 1;
    (
        StatusCode::OK,
        Json(json!({"run_id": upload.run_id, "duplicate": false})),
    )
}

async fn start_stand_in(status: u16, times: u32) -> (String, Arc<StandIn>) {
    let stand_in = Arc::new(StandIn::default());
    *stand_in.refuse.lock().unwrap() = (status, times);
    let app = Router::new()
        .route(
            "/api/v1/agents",
            post(|| async {
                let key = vantage_model::ticket::TicketSigner::from_secret([5; 32]);
                Json(json!({"name": "a", "registered": true, "ticket_key": key.public_key_hex()}))
            }),
        )
        .route(
            "/api/v1/agents/{name}/heartbeat",
            post(|| async {
                Json(json!({"name": "a", "time": chrono::Utc::now(), "ticket_keys": []}))
            }),
        )
        .route(
            "/api/v1/agents/{name}/runs",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Json(json!({"runs": []}))
            }),
        )
        .route("/api/v1/results", post(upload))
        .with_state(stand_in.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, stand_in)
}

fn result(run_id: &str) -> ResultUpload {
    ResultUpload {
        run_id: run_id.into(),
        agent: "uploader".into(),
        outcome: RunOutcome::Failed,
        actual_start: Utc::now(),
        actual_end: Utc::now(),
        result: None,
        error: Some("a result waiting in the spool".into()),
    }
}

/// Runs an agent on a spool holding one result against a stand-in that refuses the
/// first `times` uploads with `status`; returns once `done` holds (bounded).
async fn scenario(
    status: u16,
    times: u32,
    done: impl Fn(&StandIn, &Spool) -> bool,
) -> (Arc<StandIn>, tempfile::TempDir) {
    let (url, stand_in) = start_stand_in(status, times).await;
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    Spool::open(&spool_dir)
        .unwrap()
        .store(&result("run-1"))
        .unwrap();
    let mut options = AgentOptions::new(&url, "token", "uploader", spool_dir.clone());
    options.endpoint_listen = Some("127.0.0.1".parse().unwrap());
    options.endpoint_port = 0;
    options.iperf3_port = None;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let agent = tokio::spawn(vantage_agent::run(options, async {
        let _ = stopped.await;
    }));
    let spool = Spool::open(&spool_dir).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(&stand_in, &spool) {
        assert!(
            Instant::now() < deadline,
            "the uploader did not get there in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(());
    agent.await.unwrap().unwrap();
    (stand_in, dir)
}

fn accepted(stand_in: &StandIn, run_id: &str) -> u32 {
    stand_in
        .accepted
        .lock()
        .unwrap()
        .get(run_id)
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn results_refused_with_401_403_or_413_stay_spooled_and_are_delivered_once() {
    for status in [401, 403, 413] {
        let (stand_in, dir) = scenario(status, 2, |stand_in, spool| {
            accepted(stand_in, "run-1") == 1 && spool.pending().unwrap().is_empty()
        })
        .await;
        assert_eq!(*stand_in.refused.lock().unwrap(), 2, "status {status}");
        assert_eq!(
            accepted(&stand_in, "run-1"),
            1,
            "status {status}: delivered once"
        );
        assert!(
            !dir.path().join("spool").join("rejected").exists(),
            "status {status}: nothing parked"
        );
    }
}

#[tokio::test]
async fn a_result_refused_as_invalid_is_parked_with_the_reason() {
    let (stand_in, dir) = scenario(422, 1, |stand_in, spool| {
        *stand_in.refused.lock().unwrap() == 1 && spool.pending().unwrap().is_empty()
    })
    .await;
    assert_eq!(accepted(&stand_in, "run-1"), 0);
    let rejected = dir.path().join("spool").join("rejected");
    let reasons: Vec<String> = std::fs::read_dir(&rejected)
        .unwrap()
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "reason"))
        .map(|entry| std::fs::read_to_string(entry.path()).unwrap())
        .collect();
    assert_eq!(reasons.len(), 1);
    assert!(reasons[0].starts_with("422"), "{reasons:?}");
}
