//! The API's HTTP bounds, tried as a hostile client would: headers sent a byte at a
//! time (slowloris), a body over the limit, and error answers that must be JSON.

use crate::common;

use std::time::{Duration, Instant};

use common::{Kind, TestDb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vantage_server::http::HttpLimits;
use vantage_server::planner::PlannerOptions;

async fn start_with(limits: HttpLimits) -> (vantage_server::service::RunningServer, TestDb) {
    let db = TestDb::new(Kind::Sqlite, "http-limits").await;
    let mut options = common::options(&db, PlannerOptions::default());
    options.http = limits;
    let server = vantage_server::service::start(options).await.unwrap();
    (server, db)
}

#[tokio::test]
async fn a_client_trickling_its_headers_is_cut_off_and_others_are_served() {
    let limits = HttpLimits {
        header_timeout: Duration::from_secs(2),
        ..HttpLimits::default()
    };
    let (server, _db) = start_with(limits).await;
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    let started = Instant::now();
    let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    let mut closed_after = None;
    // One byte every 500 ms: the whole header would take far longer than the limit.
    // Bounded: at most 40 bytes (20 s).
    for byte in request
        .iter()
        .chain(b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter())
        .take(40)
    {
        if slow.write_all(&[*byte]).await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        // A closed connection shows as EOF (or a reset) on read.
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(500), slow.read(&mut buf)).await {
            Ok(Ok(_)) | Ok(Err(_)) => {
                closed_after = Some(started.elapsed());
                break;
            }
            Err(_) => {}
        }
    }
    let closed_after = closed_after.expect("the server never closed the trickling connection");
    assert!(
        closed_after < Duration::from_secs(10),
        "cut off after {closed_after:?}, not by the 2 s header timeout"
    );
    // The server still answers everyone else.
    let answer = reqwest::get(format!("{}/healthz", server.url()))
        .await
        .unwrap();
    assert!(answer.status().is_success());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_body_over_the_limit_gets_a_json_413_and_other_errors_are_json() {
    let limits = HttpLimits {
        max_body_bytes: 64 * 1024,
        ..HttpLimits::default()
    };
    let (server, _db) = start_with(limits).await;
    let http = reqwest::Client::new();
    let big = format!("{{\"padding\": \"{}\"}}", "x".repeat(128 * 1024));
    let answer = http
        .post(format!("{}/api/v1/results", server.url()))
        .bearer_auth(&server.admin_token)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 413);
    let body: serde_json::Value = answer.json().await.expect("413 answered in JSON");
    let message = body["error"].as_str().expect("an error message");
    assert!(message.starts_with("Payload Too Large"), "{message}");
    // axum's own rejection of a path segment that is not UTF-8 is JSON too.
    let answer = http
        .post(format!("{}/api/v1/agents/%FF/heartbeat", server.url()))
        .bearer_auth(&server.admin_token)
        .send()
        .await
        .unwrap();
    assert!(answer.status().is_client_error(), "{}", answer.status());
    let body: serde_json::Value = answer.json().await.expect("error answered in JSON");
    assert!(body["error"].is_string(), "{body}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn restarts_without_an_admin_token_replace_the_generated_one() {
    let db = TestDb::new(Kind::Sqlite, "generated-admin").await;
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let mut options = common::options(&db, PlannerOptions::default());
        options.admin_token = None;
        let server = vantage_server::service::start(options).await.unwrap();
        tokens.push(server.admin_token.clone());
        let archive = server.state.archive.clone();
        let generated = archive
            .count_tokens_named(vantage_server::service::GENERATED_ADMIN)
            .await
            .unwrap();
        assert_eq!(generated, 1, "one generated admin token at a time");
        // Only the newest generated token is accepted.
        let http = reqwest::Client::new();
        for (index, token) in tokens.iter().enumerate() {
            let status = http
                .get(format!("{}/api/v1/agents", server.url()))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status();
            let newest = index + 1 == tokens.len();
            assert_eq!(status.is_success(), newest, "token {index}: {status}");
        }
        server.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn an_upload_beyond_the_ingest_slots_waits_until_one_is_free() {
    let (server, _db) = start_with(HttpLimits::default()).await;
    let mut held = Vec::new();
    for _ in 0..vantage_server::ingest::INGEST_SLOTS {
        held.push(server.state.ingest.admit().await);
    }
    let http = reqwest::Client::new();
    let upload = http
        .post(format!("{}/api/v1/results/batch", server.url()))
        .bearer_auth(&server.admin_token)
        .header("content-type", "application/json")
        .body("[{\"run_id\": ")
        .send();
    let mut upload = tokio::spawn(upload);
    // Every slot is held: the upload is not read, so not even its broken body answered.
    assert!(
        tokio::time::timeout(Duration::from_secs(1), &mut upload)
            .await
            .is_err(),
        "an upload was answered while every ingest slot was held"
    );
    held.pop();
    let answer = tokio::time::timeout(Duration::from_secs(30), upload)
        .await
        .expect("the upload is answered once a slot is free")
        .unwrap()
        .unwrap();
    assert_eq!(answer.status(), 400);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn agents_whose_uploads_queue_are_asked_for_longer_upload_rounds() {
    use vantage_model::control::{BatchAck, BatchItemAck};
    let (server, _db) = start_with(HttpLimits::default()).await;
    let http = reqwest::Client::new();
    let upload = || async {
        let answer = http
            .post(format!("{}/api/v1/results/batch", server.url()))
            .bearer_auth(&server.admin_token)
            .json(&serde_json::json!([{
                "run_id": "no-such-run", "agent": "a", "outcome": "failed",
                "actual_start": "2026-12-01T00:00:00Z", "actual_end": "2026-12-01T00:00:01Z",
                "error": "refused for its run, answered all the same"
            }]))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let ack: BatchAck = answer.json().await.unwrap();
        assert!(matches!(ack.results[..], [BatchItemAck::Refused { .. }]));
        ack.next_round_ms
    };
    assert_eq!(
        upload().await,
        None,
        "a server with free slots paces nobody"
    );
    // Every slot but the upload's own is taken: its batch is stored with uploads
    // queueing, which a moment's burst of a fleet's rounds does too: no pace yet.
    let mut held = Vec::new();
    for _ in 1..vantage_server::ingest::INGEST_SLOTS {
        held.push(server.state.ingest.admit().await);
    }
    assert_eq!(upload().await, None);
    // Still queueing over 5 s later: now agents are paced.
    tokio::time::sleep(Duration::from_millis(5_100)).await;
    let queued_round_ms = vantage_server::ingest::QUEUED_UPLOAD_ROUND.as_millis() as u64;
    assert_eq!(upload().await, Some(queued_round_ms));
    // Slots free again: the pace holds for a while rather than ending at once.
    held.clear();
    assert_eq!(upload().await, Some(queued_round_ms));
    server.shutdown().await.unwrap();
}
