//! How the agent's uploader treats a server that refuses results: 401 (bad or revoked
//! token), 403 (another agent's token) and 413 (body over the server's limit) keep the
//! result spooled and retried until the operator fixes the cause; any other 4xx parks
//! it under `rejected/`. Nothing is lost, nothing is uploaded twice. A backlog goes in
//! batches, each upload answered on its own. The server is a small stand-in on
//! loopback that refuses the first uploads with a chosen status.

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
    /// Batch requests still to refuse with 413.
    refuse_batches: Mutex<u32>,
    /// Sizes of the batch requests answered.
    batches: Mutex<Vec<usize>>,
}

impl StandIn {
    fn accept(&self, run_id: &str) {
        *self
            .accepted
            .lock()
            .unwrap()
            .entry(run_id.to_string())
            .or_default() += 1;
    }
}

/// Batches: a run whose id starts with "bad" is refused, the others stored.
async fn upload_batch(
    State(stand_in): State<Arc<StandIn>>,
    Json(uploads): Json<Vec<ResultUpload>>,
) -> (StatusCode, Json<serde_json::Value>) {
    {
        let mut refuse = stand_in.refuse_batches.lock().unwrap();
        if *refuse > 0 {
            *refuse -= 1;
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                Json(json!({"error": "batch too large"})),
            );
        }
    }
    stand_in.batches.lock().unwrap().push(uploads.len());
    let mut answers = Vec::new();
    for upload in uploads {
        if upload.run_id.starts_with("bad") {
            answers.push(json!({"run_id": upload.run_id, "error": format!("run '{}' does not exist", upload.run_id)}));
        } else {
            stand_in.accept(&upload.run_id);
            answers.push(json!({"run_id": upload.run_id, "duplicate": false}));
        }
    }
    (StatusCode::OK, Json(json!({ "results": answers })))
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
    stand_in.accept(&upload.run_id);
    (
        StatusCode::OK,
        Json(json!({"run_id": upload.run_id, "duplicate": false})),
    )
}

async fn start_stand_in(status: u16, times: u32, refuse_batches: u32) -> (String, Arc<StandIn>) {
    let stand_in = Arc::new(StandIn::default());
    *stand_in.refuse.lock().unwrap() = (status, times);
    *stand_in.refuse_batches.lock().unwrap() = refuse_batches;
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
        .route("/api/v1/results/batch", post(upload_batch))
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
    backlog_scenario(&["run-1"], (status, times), 0, done).await
}

/// Runs an agent on a spool holding `runs` against a stand-in that refuses the first
/// single uploads as `refuse` says and the first `refuse_batches` batches with 413.
async fn backlog_scenario(
    runs: &[&str],
    refuse: (u16, u32),
    refuse_batches: u32,
    done: impl Fn(&StandIn, &Spool) -> bool,
) -> (Arc<StandIn>, tempfile::TempDir) {
    let (url, stand_in) = start_stand_in(refuse.0, refuse.1, refuse_batches).await;
    let dir = tempfile::tempdir().unwrap();
    let spool_dir = dir.path().join("spool");
    let spool = Spool::open(&spool_dir).unwrap();
    for run in runs {
        spool.store(&result(run)).unwrap();
    }
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
    let reasons = parked_reasons(&dir);
    assert_eq!(reasons.len(), 1);
    assert!(reasons[0].starts_with("422"), "{reasons:?}");
}

/// The rejected results' reasons.
fn parked_reasons(dir: &tempfile::TempDir) -> Vec<String> {
    let mut reasons: Vec<String> = std::fs::read_dir(dir.path().join("spool").join("rejected"))
        .unwrap()
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "reason"))
        .map(|entry| std::fs::read_to_string(entry.path()).unwrap())
        .collect();
    reasons.sort();
    reasons
}

#[tokio::test]
async fn a_backlog_goes_in_one_batch_and_each_upload_is_answered_on_its_own() {
    let runs = ["run-1", "run-2", "bad-3", "run-4", "run-5"];
    let (stand_in, dir) = backlog_scenario(&runs, (0, 0), 0, |_, spool| {
        spool.pending().unwrap().is_empty()
    })
    .await;
    assert_eq!(*stand_in.batches.lock().unwrap(), [5], "one request");
    for run in ["run-1", "run-2", "run-4", "run-5"] {
        assert_eq!(accepted(&stand_in, run), 1, "{run} delivered once");
    }
    assert_eq!(parked_reasons(&dir), ["run 'bad-3' does not exist"]);
}

#[tokio::test]
async fn a_refused_batch_is_sent_again_one_result_at_a_time() {
    let runs = ["run-1", "run-2", "run-3"];
    let (stand_in, dir) = backlog_scenario(&runs, (0, 0), 1, |_, spool| {
        spool.pending().unwrap().is_empty()
    })
    .await;
    assert!(
        stand_in.batches.lock().unwrap().is_empty(),
        "the one batch was refused"
    );
    for run in runs {
        assert_eq!(
            accepted(&stand_in, run),
            1,
            "{run} delivered once, on its own"
        );
    }
    assert!(!dir.path().join("spool").join("rejected").exists());
}
