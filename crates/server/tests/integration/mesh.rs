//! A server and four agents on loopback measure a mesh of latency and throughput;
//! the archive must then show: every run in the window has a result or a recorded
//! reason, no two exclusive runs sharing an agent overlapped (from the recorded
//! actual start/end times), the NAT-flagged agent was only ever a client, and every
//! result is stored exactly once. Run against SQLite and PostgreSQL.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::{AgentsGuard, Api, Kind, TestDb};
use serde_json::json;
use vantage_scheduler::{find_overlaps, Occupancy};
use vantage_server::archive::{from_us, now_us, ResultFilter, RunState};

async fn mesh_scenario(kind: Kind) {
    // Agent and server logs appear in the output of a failing test.
    common::show_logs("vantage_agent=debug,vantage_server=info");
    let db = TestDb::new(kind, "mesh").await;
    let (server, admin) =
        common::start_fleet_server(&db, Duration::from_secs(20), Duration::from_secs(10)).await;
    let spool = tempfile::tempdir().unwrap();

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let _guard = AgentsGuard(vec![stop.clone()]);
    let mut agents = Vec::new();
    for name in ["m1", "m2", "m3", "nat"] {
        agents.push(
            common::spawn_agent(
                &admin,
                &server.url(),
                name,
                spool.path(),
                &stopped,
                |options| {
                    options.accepts_inbound = name != "nat";
                    options.tags = BTreeMap::from([("mesh".to_string(), "yes".to_string())]);
                },
            )
            .await,
        );
    }
    common::wait_for_registrations(&server, &["m1", "m2", "m3", "nat"]).await;
    let config = json!({
        "groups": [{"name": "all", "kind": "mesh", "members": ["mesh=yes"]}],
        "tests": [
            {"name": "rtt", "type": "latency", "spec": {"count": 5, "interval": "10ms", "timeout": "500ms"}},
            {"name": "bulk", "type": "throughput", "spec": {"duration": "1s"}}
        ],
        "tasks": [
            {"name": "lat", "test": "rtt", "group": "all", "every": "3s", "slip": "2s"},
            {"name": "tput", "test": "bulk", "group": "all", "every": "10s", "directions": "one"}
        ]
    });
    let (status, body) = admin.call("PUT", "/api/v1/config", Some(config)).await;
    assert_eq!(status, 200, "{body}");

    let window_start_us = now_us();
    tokio::time::sleep(Duration::from_secs(4)).await;
    // An app asks for a run now (Narada Metrics' programmability); a bad request names its field.
    let publisher = Api::new(&server.url(), &admin.token("app", "publisher").await);
    let (status, body) = publisher
        .post("/api/v1/requests", json!({"test": "latency", "client": "m1", "server": "m2", "spec": {"count": 3, "interval": "10ms", "timeout": "500ms"}, "priority": 5}))
        .await;
    assert_eq!(status, 200, "{body}");
    let request_run = body["run_id"].as_str().unwrap().to_string();
    let (status, body) = publisher
        .post(
            "/api/v1/requests",
            json!({"test": "teleport", "client": "m1", "server": "m2"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("teleport"),
        "{body}"
    );
    tokio::time::sleep(Duration::from_secs(18)).await;
    let window_end_us = now_us();

    // Let runs of the window finish and upload (bounded).
    let settle_deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let runs = loop {
        let runs = server
            .state
            .archive
            .runs_between(0, window_end_us)
            .await
            .unwrap();
        let open = runs
            .iter()
            .filter(|run| matches!(run.state, RunState::Scheduled | RunState::Dispatched))
            .count();
        if open == 0 || tokio::time::Instant::now() > settle_deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let _ = stop.send(true);
    for agent in agents {
        agent.await.unwrap().expect("agent ran without error");
    }

    // Every run of the window has a result or a recorded reason.
    assert!(
        runs.len() >= 10,
        "a 22 s window plans many runs: {}",
        runs.len()
    );
    for run in &runs {
        match run.state {
            RunState::Completed => assert!(
                run.actual_start_us.is_some() && run.actual_end_us.is_some(),
                "{run:?}"
            ),
            RunState::NonStart | RunState::Failed | RunState::Missed => {
                assert!(
                    run.reason
                        .as_deref()
                        .is_some_and(|reason| !reason.is_empty()),
                    "{run:?}"
                )
            }
            RunState::Scheduled | RunState::Dispatched => {
                panic!("run still open after the window: {run:?}")
            }
        }
    }
    let completed: Vec<_> = runs
        .iter()
        .filter(|run| run.state == RunState::Completed)
        .collect();
    let on_demand = runs
        .iter()
        .find(|run| run.id == request_run)
        .expect("the on-demand run was planned");
    assert_eq!(
        (on_demand.state, on_demand.task.as_str()),
        (RunState::Completed, "on-demand"),
        "{on_demand:?}"
    );
    let tests: HashSet<&str> = completed.iter().map(|run| run.test.as_str()).collect();
    assert!(
        tests.contains("latency") && tests.contains("throughput"),
        "both tests completed: {tests:?}"
    );
    // On loopback the only acceptable failure is a start the busy machine delayed past
    // the agent's tolerance (refused to keep the schedule conflict-free); nothing missed.
    let unexpected: Vec<_> = runs
        .iter()
        .filter(|run| match run.state {
            RunState::Missed => true,
            RunState::Failed => !run
                .reason
                .as_deref()
                .unwrap_or_default()
                .contains("after its planned start"),
            _ => false,
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "runs failed or were missed: {unexpected:#?}"
    );
    assert!(
        completed.len() * 10
            >= runs
                .iter()
                .filter(|run| run.state != RunState::NonStart)
                .count()
                * 9,
        "at least 90% of started runs completed"
    );
    assert!(completed
        .iter()
        .all(|run| run.planned_start_us >= window_start_us - 5_000_000));

    // No conflicting overlap, judged from the recorded actual start and end times.
    let occupancy: Vec<Occupancy> = completed
        .iter()
        .map(|run| Occupancy {
            run_id: run.id.clone(),
            start: from_us(run.actual_start_us.unwrap()),
            end: from_us(run.actual_end_us.unwrap()),
            claims: run.claims.clone(),
        })
        .collect();
    let overlaps = find_overlaps(&occupancy);
    // Planned and actual times of the runs involved say whether the plan or the
    // execution put them on top of each other.
    let involved: Vec<String> = completed
        .iter()
        .filter(|run| {
            overlaps
                .iter()
                .any(|overlap| overlap.first_run == run.id || overlap.second_run == run.id)
        })
        .map(|run| {
            format!(
                "{} planned {}..{} ran {}..{}",
                run.id,
                from_us(run.planned_start_us).format("%H:%M:%S%.3f"),
                from_us(run.planned_end_us).format("%H:%M:%S%.3f"),
                from_us(run.actual_start_us.unwrap()).format("%H:%M:%S%.3f"),
                from_us(run.actual_end_us.unwrap()).format("%H:%M:%S%.3f"),
            )
        })
        .collect();
    assert!(
        overlaps.is_empty(),
        "conflicting runs overlapped: {overlaps:#?}\n{}",
        involved.join("\n")
    );
    assert!(
        completed.iter().any(|run| run.exclusive),
        "throughput runs are exclusive"
    );

    // The agent behind NAT is never a server.
    for run in runs.iter().filter(|run| run.state != RunState::NonStart) {
        assert_ne!(
            run.server, "nat",
            "NAT-flagged agent used as server: {run:?}"
        );
    }
    assert!(
        completed.iter().any(|run| run.client == "nat"),
        "the NAT agent still measures, as client"
    );

    // Exactly once: one result per finished run, none without a run.
    let results = server
        .state
        .archive
        .results(&ResultFilter {
            limit: 100_000,
            ..ResultFilter::default()
        })
        .await
        .unwrap();
    let finished: HashSet<&str> = completed.iter().map(|run| run.id.as_str()).collect();
    let result_ids: Vec<&str> = results
        .iter()
        .map(|result| result.run_id.as_str())
        .collect();
    let unique: HashSet<&str> = result_ids.iter().copied().collect();
    assert_eq!(unique.len(), result_ids.len(), "duplicate results");
    assert!(
        finished.is_subset(&unique),
        "a completed run lacks its result"
    );
    // A run cut short when the agents stop at the end of the window is stored as
    // failed, without metrics; completed ones carry them.
    let completed_result = |test: &str| {
        results
            .iter()
            .find(|result| result.test == test && result.outcome == "completed")
            .unwrap_or_else(|| panic!("no completed {test} result"))
    };
    let latency = completed_result("latency");
    assert!(latency.metrics["rtt_median_us"] > 0.0);
    let throughput = completed_result("throughput");
    assert!(throughput.metrics["received_bps"] > 1e6, "{throughput:?}");

    // Nothing of the window is left in a spool: every result of it was acknowledged.
    // (Runs planned after the window may still be spooled: the agents were stopped.)
    let window_ids: HashSet<&str> = runs.iter().map(|run| run.id.as_str()).collect();
    for name in ["m1", "m2", "m3", "nat"] {
        let pending = vantage_agent::spool::Spool::open(spool.path().join(name))
            .unwrap()
            .pending()
            .unwrap();
        let stuck: Vec<&str> = pending
            .iter()
            .map(|upload| upload.run_id.as_str())
            .filter(|run_id| window_ids.contains(run_id))
            .collect();
        assert!(
            stuck.is_empty(),
            "{name} still spools results of the window: {stuck:?}"
        );
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mesh_on_sqlite() {
    mesh_scenario(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mesh_on_postgres() {
    mesh_scenario(Kind::Postgres).await;
}
