//! The network health system end to end (Chard et al., FGCS 2015): three agents on
//! loopback run the health bundle as a mesh (and one pair with its throughput part,
//! ticketed like any throughput test); the matrix fills with known scores, markers are
//! stored for every round that has a previous one, selection answers, and when one
//! agent stops, the rounds towards it fire the timeout marker as a critical alert and
//! their pairs score 0. Run against SQLite and PostgreSQL.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{AgentsGuard, Api, Kind, TestDb};
use serde_json::{json, Value};
use vantage_server::archive::ResultFilter;
use vantage_server::events::Event;

fn pair<'a>(matrix: &'a Value, client: &str, server: &str) -> &'a Value {
    matrix["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["client"] == client && p["server"] == server)
        .unwrap_or_else(|| panic!("pair {client} -> {server} in {matrix}"))
}

async fn health_scenario(kind: Kind) {
    common::show_logs("vantage_agent=info,vantage_server=info");
    let db = TestDb::new(kind, "health").await;
    let (server, admin) =
        common::start_fleet_server(&db, Duration::from_secs(12), Duration::from_secs(10)).await;
    let spool = tempfile::tempdir().unwrap();
    let mut guard = AgentsGuard(Vec::new());
    let mut agents = BTreeMap::new();
    for (name, zone) in [("h1", "a"), ("h2", "a"), ("h3", "b")] {
        // Each agent its own stop, so one can leave while the others go on.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        guard.0.push(stop.clone());
        let handle = common::spawn_agent(
            &admin,
            &server.url(),
            name,
            spool.path(),
            &stopped,
            |options| {
                options.tags = BTreeMap::from([("zone".to_string(), zone.to_string())]);
            },
        )
        .await;
        agents.insert(name, (stop, handle));
    }
    let probes = json!({"count": 3, "interval": "20ms", "timeout": "1s"});
    let mut full = probes.clone();
    full["throughput_duration"] = json!("1s");
    let mut light = probes;
    light["throughput"] = json!(false);
    let config = json!({
        "groups": [
            {"name": "all", "kind": "mesh", "members": ["*"]},
            {"name": "one-pair", "kind": "list", "pairs": [["h1", "h2"]]}
        ],
        "tests": [
            {"name": "health-light", "type": "health", "spec": light},
            {"name": "health-full", "type": "health", "spec": full}
        ],
        "tasks": [
            {"name": "rounds", "test": "health-light", "group": "all", "every": "4s", "slip": "3s", "directions": "both"},
            {"name": "with-throughput", "test": "health-full", "group": "one-pair", "every": "8s", "slip": "6s", "directions": "one"}
        ]
    });
    let (status, body) = admin.call("PUT", "/api/v1/config", Some(config)).await;
    assert_eq!(status, 200, "{body}");
    let reader = Api::new(&server.url(), &admin.token("viewer", "reader").await);

    // Every pair known, each with a round that had a previous one (markers evaluated).
    let archive = &server.state.archive;
    let matrix = common::wait_for(
        Duration::from_secs(60),
        "two rounds of every pair",
        async || {
            let (status, matrix) = reader.get("/api/v1/health/matrix").await;
            assert_eq!(status, 200, "{matrix}");
            let pairs = matrix["pairs"].as_array().unwrap();
            let evaluated = archive
                .latest_of_test("health", 0)
                .await
                .unwrap()
                .iter()
                .filter(|stored| stored.metrics.contains_key("health_marker_icmp"))
                .count();
            (pairs.len() == 6 && pairs.iter().all(|p| p["score"].is_number()) && evaluated == 6)
                .then_some(matrix)
        },
    )
    .await;
    for entry in matrix["pairs"].as_array().unwrap() {
        let score = entry["score"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&score), "{entry}");
        assert_ne!(entry["state"], "unknown", "{entry}");
        assert!(
            !entry["markers"]
                .as_array()
                .unwrap()
                .contains(&json!("timeout")),
            "{entry}"
        );
        assert_eq!(entry["peers"], 2, "{entry}");
        for part in ["icmp", "udp", "tcp"] {
            assert!(entry["parts"][part].is_number(), "{part} in {entry}");
        }
    }
    let zones: BTreeMap<&str, &str> = matrix["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["name"].as_str().unwrap(), h["zone"].as_str().unwrap()))
        .collect();
    assert_eq!(
        zones,
        BTreeMap::from([("h1", "a"), ("h2", "a"), ("h3", "b")])
    );

    // The throughput part ran with the run's ticket and is a metric of its own.
    let with_throughput = common::wait_for(
        Duration::from_secs(30),
        "a round with throughput",
        async || {
            archive
                .results(&ResultFilter {
                    client: Some("h1".into()),
                    server: Some("h2".into()),
                    test: Some("health".into()),
                    from_us: None,
                    to_us: None,
                    limit: 100,
                    include_raw: true,
                })
                .await
                .unwrap()
                .into_iter()
                .find(|stored| stored.result.as_ref().unwrap()["throughput"].is_object())
        },
    )
    .await;
    let part = &with_throughput.result.as_ref().unwrap()["throughput"];
    assert!(part["error"].is_null(), "{part}");
    assert!(with_throughput.metrics["health_throughput_bps"] > 0.0);

    // Selection relative to a reference, and its refusals.
    let (status, selection) = reader.get("/api/v1/health/select?reference=h1&k=1").await;
    assert_eq!(status, 200, "{selection}");
    assert_eq!(
        selection["selected"].as_array().unwrap().len(),
        1,
        "{selection}"
    );
    let (status, body) = reader.get("/api/v1/health/select?k=1").await;
    assert_eq!(
        (
            status,
            body["error"].as_str().unwrap().contains("reference")
        ),
        (400, true),
        "{body}"
    );
    let (status, body) = reader
        .get("/api/v1/health/select?reference=nobody&k=1")
        .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = reader.get("/api/v1/health/matrix?group=nosuch").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = reader.get("/api/v1/health/matrix?weights=1,2").await;
    assert_eq!(
        (
            status,
            body["error"].as_str().unwrap().contains("four weights")
        ),
        (400, true),
        "{body}"
    );
    let (status, body) = reader.get("/api/v1/health/matrix?group=one-pair").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["pairs"].as_array().unwrap().len(),
        2,
        "h1 and h2 only: {body}"
    );
    // Too few rounds to refit on: a clear refusal, not a made-up fit.
    let (status, body) = reader.get("/api/v1/health/fit").await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"].as_str().unwrap().starts_with("cannot refit"),
        "{body}"
    );

    // h3 leaves: rounds towards it time out on every indicator but ICMP (loopback still
    // answers echo), which fires the timeout marker as a critical alert.
    let mut events = server.state.events.subscribe();
    let (stop, handle) = agents.remove("h3").unwrap();
    let _ = stop.send(true);
    handle.await.unwrap().expect("h3 stopped cleanly");
    let alert = common::wait_for(
        Duration::from_secs(40),
        "a timeout alert towards h3",
        async || {
            while let Ok(event) = events.try_recv() {
                if let Event::Alert(alert) = event {
                    if alert.tags.get("marker").map(String::as_str) == Some("timeout")
                        && alert.agents.last().map(String::as_str) == Some("h3")
                    {
                        return Some(alert);
                    }
                }
            }
            None
        },
    )
    .await;
    assert_eq!(alert.severity, "critical");
    assert!(
        alert.message.contains("udp, sandwich, tcp"),
        "{}",
        alert.message
    );
    let client = alert.agents[0].clone();
    let (_, matrix) = reader.get("/api/v1/health/matrix").await;
    let towards = pair(&matrix, &client, "h3");
    assert_eq!(
        (towards["score"].as_f64(), towards["state"].as_str()),
        (Some(0.0), Some("degraded")),
        "{towards}"
    );
    assert!(towards["markers"]
        .as_array()
        .unwrap()
        .contains(&json!("timeout")));
    // The columns layout says the same of that pair, naming hosts by index.
    let (status, columns) = reader.get("/api/v1/health/matrix?layout=columns").await;
    assert_eq!(status, 200, "{columns}");
    let hosts: Vec<&str> = columns["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|host| host["name"].as_str().unwrap())
        .collect();
    let cells = &columns["pairs"];
    let towards = (0..cells["client"].as_array().unwrap().len())
        .find(|&i| {
            hosts[cells["client"][i].as_u64().unwrap() as usize] == client
                && hosts[cells["server"][i].as_u64().unwrap() as usize] == "h3"
        })
        .expect("the pair towards h3 is in the columns");
    assert_eq!(cells["score"][towards], 0.0, "{columns}");
    assert_eq!(cells["state"][towards], "degraded", "{columns}");
    assert!(cells["markers"][towards]
        .as_array()
        .unwrap()
        .contains(&json!("timeout")));
    for (query, message) in [
        ("layout=grid", "'layout': 'grid' is not a layout"),
        ("max_age=721h", "'max_age': at most 720h"),
    ] {
        let (status, body) = reader.get(&format!("/api/v1/health/matrix?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(message),
            "{query}: {body}"
        );
    }

    for (_, (stop, handle)) in agents {
        let _ = stop.send(true);
        handle.await.unwrap().expect("agent ran without error");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_on_sqlite() {
    health_scenario(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_on_postgres() {
    health_scenario(Kind::Postgres).await;
}
