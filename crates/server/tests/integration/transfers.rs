//! Deadline transfers end to end on loopback: admitted over HTTP, carried by an
//! in-process agent to another's endpoint, paced at the allocated rate, reported and
//! completed; refusals name the field or the link; each agent sees only its own plan.

use crate::common;

use std::time::{Duration, Instant};

use common::{Api, Kind, TestDb};
use serde_json::json;
use vantage_server::planner::PlannerOptions;

/// What transfers may use into `dst`: small enough that an unpaced loopback transfer
/// (several Gbit/s) would finish far sooner than a paced one.
const CAPACITY_BPS: f64 = 100e6;

#[tokio::test]
async fn a_transfer_is_admitted_paced_delivered_and_refusals_say_why() {
    let db = TestDb::new(Kind::Sqlite, "transfers").await;
    let server = common::start(&db, PlannerOptions::default()).await;
    let admin = Api::new(&server.url(), &server.admin_token);
    let config = json!({"segments": [
        {"name": "wan", "kind": "uplink", "members": ["dst"], "capacity": "100M"}
    ]});
    let (status, body) = admin.call("PUT", "/api/v1/config", Some(config)).await;
    assert_eq!(status, 200, "{body}");
    let spools = tempfile::tempdir().unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut agents = Vec::new();
    for name in ["src", "dst"] {
        agents.push(
            common::spawn_agent(&admin, &server.url(), name, spools.path(), &stopped, |_| {}).await,
        );
    }
    let until = Instant::now() + Duration::from_secs(20);
    while admin.get("/api/v1/agents").await.1["agents"]
        .as_array()
        .map(Vec::len)
        != Some(2)
    {
        assert!(Instant::now() < until, "the agents did not register");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Refusals: a bad field (422), more than the link can carry by the deadline (409).
    let ask = |bytes: u64, window_s: f64| json!({"source": "src", "destination": "dst", "bytes": bytes, "window_s": window_s});
    let (status, body) = admin
        .post(
            "/api/v1/transfers",
            json!({"source": "src", "destination": "nobody", "bytes": 1, "window_s": 1}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("no agent 'nobody'"),
        "{body}"
    );
    let (status, body) = admin
        .post("/api/v1/transfers", json!({"source": "src", "bytes": 1}))
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = admin.post("/api/v1/transfers", ask(100_000_000, 1.0)).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("wan (in)"),
        "{body}"
    );

    // 12.5 MB within 30 s: admitted at the whole 100 Mbit/s, so 1 s at least when paced.
    let bytes = 12_500_000u64;
    let started = Instant::now();
    let (status, transfer) = admin.post("/api/v1/transfers", ask(bytes, 30.0)).await;
    assert_eq!(status, 201, "{transfer}");
    assert_eq!(transfer["rate_bps"], CAPACITY_BPS);
    assert_eq!(transfer["links"], json!(["wan (in)"]));
    let id = transfer["id"].as_str().unwrap().to_string();

    // The destination's token cannot read the source's plan.
    let dst = Api::new(&server.url(), &admin.token("dst-reader", "agent").await);
    let (status, _) = dst.get("/api/v1/agents/src/transfers").await;
    assert_eq!(status, 403);

    let done = loop {
        let (_, now) = admin.get(&format!("/api/v1/transfers/{id}")).await;
        if !matches!(now["state"].as_str(), Some("admitted" | "running")) {
            break now;
        }
        assert!(
            Instant::now() < until + Duration::from_secs(30),
            "still running: {now}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let elapsed_s = started.elapsed().as_secs_f64();
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["delivered_bytes"], bytes, "{done}");
    assert_eq!(done["rate_bps"], 0.0);
    let paced_s = bytes as f64 * 8.0 / CAPACITY_BPS;
    assert!(
        elapsed_s >= 0.9 * paced_s,
        "{elapsed_s} s: not paced at {CAPACITY_BPS} bit/s"
    );
    let (_, listed) = admin.get("/api/v1/transfers").await;
    assert_eq!(listed["transfers"][0]["id"], id.as_str());

    let _ = stop.send(true);
    for agent in agents {
        agent.await.unwrap().unwrap();
    }
    server.shutdown().await.unwrap();
}
