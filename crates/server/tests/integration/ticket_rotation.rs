//! Ticket key rotation in a running fleet: the server adds a key that signs a little
//! later and retires the old one later still; agents learn both from heartbeats, so
//! scheduled throughput runs keep completing across the rotation without a restart,
//! and once the old key is retired a ticket it signs is refused; at most 16 keys are
//! trusted at once. Run against SQLite and PostgreSQL (the keys live in the archive).

use crate::common;

use std::time::Duration;

use common::{Kind, TestDb};
use serde_json::json;
use vantage_model::throughput::ThroughputSpec;
use vantage_model::ticket::{TicketClaims, TicketSigner};
use vantage_server::archive::{now_us, RunState};

/// Stops the agents even when the test fails.
struct StopOnDrop(tokio::sync::watch::Sender<bool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

/// A native throughput test of 300 ms to agent k2's endpoint under a ticket `signer`
/// signs; `Err` is the endpoint's refusal.
async fn test_with_key(endpoint_port: u16, signer: TicketSigner) -> Result<(), String> {
    tokio::task::spawn_blocking(move || {
        let mut spec = ThroughputSpec::new("127.0.0.1", endpoint_port);
        spec.duration_us = Some(300_000);
        spec.ticket = Some(signer.sign(&TicketClaims {
            run_id: format!("by-hand-{}", now_us()),
            test: "throughput".into(),
            client: "operator".into(),
            server: "k2".into(),
            max_duration_ms: 10_000,
            not_after_us: now_us() + 60_000_000,
        }));
        vantage_probe::throughput::client::run_native(&spec)
            .map(drop)
            .map_err(|error| error.to_string())
    })
    .await
    .unwrap()
}

/// The `state` of each key a ticket-keys answer lists, oldest first.
fn key_states(body: &serde_json::Value) -> Vec<&str> {
    body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key["state"].as_str().unwrap())
        .collect()
}

async fn rotation_scenario(kind: Kind) {
    let db = TestDb::new(kind, "rotation").await;
    // Runs are handed out at most 8 s ahead of their start.
    let (server, admin) =
        common::start_fleet_server(&db, Duration::from_secs(8), Duration::from_secs(15)).await;
    let spool = tempfile::tempdir().unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let _stop = StopOnDrop(stop.clone());
    let mut agents = Vec::new();
    for name in ["k1", "k2"] {
        agents.push(
            common::spawn_agent(
                &admin,
                &server.url(),
                name,
                spool.path(),
                &stopped,
                |options| {
                    options.heartbeat_interval = Duration::from_secs(1);
                },
            )
            .await,
        );
    }

    common::wait_for_registrations(&server, &["k1", "k2"]).await;

    // Refusals: only admins rotate, and the old key must outlive the new one's start.
    let reader = common::Api::new(&server.url(), &admin.token("viewer", "reader").await);
    let (status, _) = reader.post("/api/v1/ticket-keys", json!({})).await;
    assert_eq!(status, 403);
    let (status, body) = admin
        .post(
            "/api/v1/ticket-keys",
            json!({"activate_in": "10s", "retire_previous_in": "5s"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("retire_previous_in"),
        "{body}"
    );
    let (status, body) = admin
        .post("/api/v1/ticket-keys", json!({"activate_in": "soon"}))
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = admin.get("/api/v1/ticket-keys").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(key_states(&body), ["signing"], "{body}");

    // Throughput from k1 to k2 every 2 s, under the first key.
    let (status, body) = admin
        .call(
            "PUT",
            "/api/v1/config",
            Some(json!({
                "groups": [{"name": "pair", "kind": "list", "pairs": [["k1", "k2"]]}],
                "tests": [{"name": "bulk", "type": "throughput", "spec": {"duration": "500ms"}}],
                "tasks": [{"name": "tput", "test": "bulk", "group": "pair", "every": "2s", "directions": "one"}]
            })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let applied_us = now_us();
    let completed_since = |since_us: i64| {
        let archive = server.state.archive.clone();
        async move {
            archive
                .runs_between(since_us, now_us())
                .await
                .unwrap()
                .into_iter()
                .filter(|run| run.planned_start_us >= since_us && run.state == RunState::Completed)
                .count()
        }
    };
    let wait_for_completed = |since_us: i64, what: &'static str| async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
        while completed_since(since_us).await < 2 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no two throughput runs completed {what}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    };
    wait_for_completed(applied_us, "under the first key").await;
    let first_key = server.state.archive.ticket_keys().await.unwrap()[0]
        .signer
        .clone();

    // Rotate: the new key signs in 3 s, the first retires in 14 s, when every run
    // handed out under it (at most 8 s ahead) has started.
    let rotated_us = now_us();
    let (status, body) = admin
        .post(
            "/api/v1/ticket-keys",
            json!({"activate_in": "3s", "retire_previous_in": "14s"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["generation"], 2, "{body}");
    assert_eq!(key_states(&body), ["signing", "pending"], "{body}");

    // Past the old key's retirement, runs handed out since are signed with the new
    // key only, and they complete: the agents learnt it without a restart.
    let retired_us = rotated_us + 14_000_000;
    tokio::time::sleep(Duration::from_micros(
        u64::try_from(retired_us - now_us()).unwrap_or(0),
    ))
    .await;
    wait_for_completed(retired_us + 2_000_000, "after the old key retired").await;
    let (status, body) = admin.get("/api/v1/ticket-keys").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(key_states(&body), ["retired", "signing"], "{body}");

    // Now k2's endpoint refuses what the retired key signs and accepts the new key's.
    let new_key = server.state.archive.ticket_keys().await.unwrap()[1]
        .signer
        .clone();
    let k2_port = common::registration(&server, "k2").await.endpoint_port;
    let refused = test_with_key(k2_port, first_key)
        .await
        .expect_err("a ticket of the retired key is refused");
    assert!(refused.contains("signature does not verify"), "{refused}");
    test_with_key(k2_port, new_key)
        .await
        .expect("a ticket of the signing key is accepted");

    // Every run across the rotation completed: none was refused for its ticket.
    let runs = server
        .state
        .archive
        .runs_between(applied_us, now_us() - 3_000_000)
        .await
        .unwrap();
    assert!(runs.len() >= 8, "runs across the rotation: {}", runs.len());
    for run in &runs {
        if run.planned_end_us < now_us() - 3_000_000 {
            assert_eq!(run.state, RunState::Completed, "{run:#?}");
        }
    }
    // Rotations are bounded: at most 16 keys are trusted at once.
    let mut rotations = 0;
    let refusal = loop {
        let (status, body) = admin.post("/api/v1/ticket-keys", json!({})).await;
        if status != 200 {
            break (status, body);
        }
        rotations += 1;
        assert!(rotations < 100, "rotations never refused");
    };
    assert_eq!(refusal.0, 409, "{}", refusal.1);
    assert_eq!(rotations, 15, "one key was trusted, 16 may be");
    let (_, body) = admin.get("/api/v1/ticket-keys").await;
    let trusted = key_states(&body)
        .iter()
        .filter(|state| **state != "retired")
        .count();
    assert_eq!(trusted, 16, "{body}");

    let _ = stop.send(true);
    for agent in agents {
        agent.await.unwrap().expect("agent ran without error");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotation_on_sqlite() {
    rotation_scenario(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotation_on_postgres() {
    rotation_scenario(Kind::Postgres).await;
}
