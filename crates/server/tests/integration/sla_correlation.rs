//! SLA contracts and app–network correlation end to end over HTTP, on SQLite and
//! PostgreSQL: results uploaded for runs of a contract's tasks become verdicts with
//! hand-worked margins, a pair's standing keeps each clause's latest figure (a good
//! latency run does not clear a short capacity run), alerts fire only when a
//! standing changes, `/api/v1/sla` summarises compliance; an app metric that
//! follows the pair's RTT correlates at lag 0 with r = 1, one that trails it by
//! 20 s peaks at +20 s, and a subscription streams the correlation again when a
//! new app metric arrives.

use crate::common;

use std::time::Duration;

use chrono::{DateTime, Utc};
use common::{Api, Kind, TestDb};
use serde_json::{json, Value};
use vantage_scheduler::{agent_resource, Claim, ClaimMode};
use vantage_server::archive::{from_us, now_us, RunRecord, RunState};
use vantage_server::events::Event;
use vantage_server::planner::PlannerOptions;

const SECOND_US: i64 = 1_000_000;

fn run(id: &str, task: &str, test: &str, start_us: i64) -> RunRecord {
    RunRecord {
        id: id.into(),
        task: task.into(),
        test: test.into(),
        test_name: test.into(),
        client: "a".into(),
        server: "b".into(),
        target: None,
        spec: json!({}).into(),
        exclusive: false,
        reverse: false,
        priority: 0,
        claims: vec![
            Claim {
                resource: agent_resource("a"),
                mode: ClaimMode::Shared,
            },
            Claim {
                resource: agent_resource("b"),
                mode: ClaimMode::Shared,
            },
        ],
        planned_start_us: start_us,
        planned_end_us: start_us + 2 * SECOND_US,
        actual_start_us: None,
        actual_end_us: None,
        state: RunState::Scheduled,
        reason: None,
    }
}

fn upload(run_id: &str, start: DateTime<Utc>, result: Value) -> Value {
    json!({
        "run_id": run_id, "agent": "a", "outcome": "completed",
        "actual_start": start, "actual_end": start + chrono::Duration::seconds(1),
        "result": result
    })
}

fn latency(median_us: f64) -> Value {
    json!({"test": "latency", "summary": {
        "sent": 10, "received": 10, "loss_ratio": 0.0,
        "rtt_us": {"min": median_us, "median": median_us, "p95": median_us},
        "jitter_us": {"rfc3550": 100.0}
    }})
}

fn capacity(capacity_bps: f64) -> Value {
    json!({"test": "capacity", "summary": {
        "capacity_bps": capacity_bps, "tcp_bps": capacity_bps * 0.9, "verified_loss_ratio": 0.0
    }})
}

/// Reads Server-Sent Events from `response` until `count` named `name` arrived.
async fn sse_events(response: &mut reqwest::Response, name: &str, count: usize) -> Vec<Value> {
    let mut text = String::new();
    let mut found = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while found.len() < count {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {count} '{name}' events: {text}"))
            .unwrap()
            .expect("stream open");
        text.push_str(&String::from_utf8_lossy(&chunk));
        // Complete events end with a blank line.
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let event = block.lines().find_map(|l| l.strip_prefix("event: "));
            let data = block.lines().find_map(|l| l.strip_prefix("data: "));
            if let (Some(event), Some(data)) = (event, data) {
                if event == name {
                    found.push(serde_json::from_str(data).unwrap());
                }
            }
        }
    }
    found
}

fn close(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() < 1e-9
}

async fn scenario(kind: Kind) {
    let db = TestDb::new(kind, "sla").await;
    let server = common::start(&db, PlannerOptions::default()).await;
    let admin = Api::new(&server.url(), &server.admin_token);
    let agent = Api::new(&server.url(), &admin.token("a", "agent").await);
    let publisher = Api::new(&server.url(), &admin.token("app", "publisher").await);
    let reader = Api::new(&server.url(), &admin.token("viewer", "reader").await);

    let mut config = json!({
        "groups": [{"name": "path", "kind": "list", "pairs": [["a", "b"]]}],
        "tests": [
            {"name": "latency", "type": "latency"},
            {"name": "capacity", "type": "capacity"}
        ],
        // Disabled: the runs are made here, the contracts judge them all the same.
        "tasks": [
            {"name": "pings", "test": "latency", "group": "path", "every": "60s", "enabled": false},
            {"name": "capacity-check", "test": "capacity", "group": "path", "every": "6h", "enabled": false}
        ],
        "contracts": [
            {"name": "gold", "tasks": ["pings", "capacity-check"], "rate": "50M", "rtt": "30ms", "loss": 0.01},
            {"name": "rtt-only", "tasks": ["nope"], "rtt": "10ms"}
        ]
    });
    let (status, body) = admin
        .call("PUT", "/api/v1/config", Some(config.clone()))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string()
            .contains("contracts[1].tasks[0]: no task named 'nope'"),
        "{body}"
    );
    config["contracts"][1]["tasks"] = json!(["pings"]);
    let (status, body) = admin.call("PUT", "/api/v1/config", Some(config)).await;
    assert_eq!(status, 200, "{body}");

    // Latency runs every 10 s and capacity runs between them, ten minutes ago.
    let base_us = (now_us() - 600 * SECOND_US) / SECOND_US * SECOND_US;
    let rtts_us = [12_000.0, 18_000.0, 9_000.0, 25_000.0, 14_000.0, 11_000.0];
    let mut uploads = Vec::new();
    let mut runs = Vec::new();
    for (index, rtt_us) in rtts_us.iter().enumerate() {
        let start_us = base_us + index as i64 * 10 * SECOND_US;
        let id = format!("lat{index}");
        runs.push(run(&id, "pings", "latency", start_us));
        uploads.push((start_us, upload(&id, from_us(start_us), latency(*rtt_us))));
    }
    for (id, offset_s, capacity_bps) in [("cap1", 5, 60e6), ("cap2", 35, 45e6), ("cap3", 65, 52e6)]
    {
        let start_us = base_us + offset_s * SECOND_US;
        runs.push(run(id, "capacity-check", "capacity", start_us));
        uploads.push((
            start_us,
            upload(id, from_us(start_us), capacity(capacity_bps)),
        ));
    }
    // A run that failed measured nothing: no verdict.
    runs.push(run(
        "cap-failed",
        "capacity-check",
        "capacity",
        base_us + 70 * SECOND_US,
    ));
    uploads.push((
        base_us + 70 * SECOND_US,
        json!({"run_id": "cap-failed", "agent": "a", "outcome": "failed",
               "actual_start": from_us(base_us + 70 * SECOND_US),
               "actual_end": from_us(base_us + 71 * SECOND_US), "error": "endpoint refused"}),
    ));
    uploads.sort_by_key(|(start_us, _)| *start_us);
    server.state.archive.insert_runs(&runs).await.unwrap();

    let mut events = server.state.events.subscribe();
    for (_, body) in &uploads {
        let (status, ack) = agent.post("/api/v1/results", body.clone()).await;
        assert_eq!(status, 200, "{ack}");
    }
    // Ingest consumers run before the upload is acknowledged: every event is queued.
    let mut alerts = Vec::new();
    let mut verdict_events = 0;
    while let Ok(event) = events.try_recv() {
        match event {
            Event::Alert(alert) if alert.tags.contains_key("contract") => alerts.push(alert),
            Event::Sla(_) => verdict_events += 1,
            _ => {}
        }
    }
    // gold judges all nine measured runs, rtt-only the six latency runs.
    assert_eq!(verdict_events, 15);
    let described: Vec<(String, String)> = alerts
        .iter()
        .map(|alert| (alert.tags["contract"].clone(), alert.severity.clone()))
        .collect();
    // gold: breached by cap2 (45 of 50 Mbit/s), met again at cap3, not flapping with
    // the passing latency runs between. rtt-only: 12 ms breaches, 9 ms meets, 25 ms breaches.
    let expected: Vec<(String, String)> = [
        ("rtt-only", "warning"),
        ("rtt-only", "info"),
        ("rtt-only", "warning"),
        ("gold", "warning"),
        ("gold", "info"),
    ]
    .iter()
    .map(|(c, s)| (c.to_string(), s.to_string()))
    .collect();
    assert_eq!(described, expected, "{alerts:#?}");
    assert!(
        alerts[3]
            .message
            .contains("SLA contract gold is breached for a -> b (run cap2)")
            && alerts[3]
                .message
                .contains("rate 45.0 Mbit/s, committed at least 50.0 Mbit/s (margin -10.0 %) FAIL"),
        "{}",
        alerts[3].message
    );

    // Verdicts, newest first, with hand-worked margins.
    let (status, body) = reader
        .get("/api/v1/sla/verdicts?contract=gold&limit=3")
        .await;
    assert_eq!(status, 200, "{body}");
    let verdicts = body["verdicts"].as_array().unwrap();
    let ids: Vec<&str> = verdicts
        .iter()
        .map(|v| v["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["cap3", "lat5", "lat4"]);
    let rate = &verdicts[0]["clauses"][0];
    assert_eq!(
        (rate["clause"].as_str(), rate["metric"].as_str()),
        (Some("rate"), Some("capacity_bps"))
    );
    assert!(close(rate["margin"].as_f64().unwrap(), 0.04), "{rate}"); // (52 - 50) / 50
    let lat4: Vec<(&str, f64)> = verdicts[2]["clauses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["clause"].as_str().unwrap(), c["margin"].as_f64().unwrap()))
        .collect();
    assert_eq!(lat4.len(), 2, "{lat4:?}");
    assert_eq!(lat4[0].0, "rtt");
    assert!(close(lat4[0].1, (30_000.0 - 14_000.0) / 30_000.0));
    assert_eq!(lat4[1], ("loss", 1.0));

    // Compliance: gold met now (8 of 9 passed), rtt-only breached (1 of 6), failing first.
    let (status, body) = reader.get("/api/v1/sla").await;
    assert_eq!(status, 200, "{body}");
    let contracts = body["contracts"].as_array().unwrap();
    let names: Vec<&str> = contracts
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["gold", "rtt-only"]);
    assert_eq!(
        contracts[0]["limits"],
        json!({"rate": 50e6, "rtt": 30_000.0, "loss": 0.01})
    );
    let gold = &contracts[0]["pairs"][0];
    assert_eq!(
        (
            gold["client"].as_str(),
            gold["verdicts"].as_u64(),
            gold["passed"].as_u64(),
            gold["pass"].as_bool()
        ),
        (Some("a"), Some(9), Some(8), Some(true)),
        "{gold}"
    );
    assert!(close(gold["compliance_ratio"].as_f64().unwrap(), 8.0 / 9.0));
    assert!(
        close(gold["worst_margin"]["rate"].as_f64().unwrap(), -0.1),
        "{gold}"
    );
    assert!(
        close(
            gold["worst_margin"]["rtt"].as_f64().unwrap(),
            5_000.0 / 30_000.0
        ),
        "{gold}"
    );
    let rtt_only = &contracts[1]["pairs"][0];
    assert_eq!(
        (
            rtt_only["verdicts"].as_u64(),
            rtt_only["passed"].as_u64(),
            rtt_only["pass"].as_bool()
        ),
        (Some(6), Some(1), Some(false)),
        "{rtt_only}"
    );
    assert_eq!(rtt_only["standing"][0]["measured"], 11_000.0);
    let (status, body) = reader.get("/api/v1/sla?contract=silver").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (
            404,
            Some("no contract named 'silver' in the current configuration")
        )
    );

    // App metrics: frame time follows the RTT (2 x RTT + 5 ms) at the same instants;
    // stall ratio falls as the RTT rose 20 s earlier.
    let metrics: Vec<Value> = rtts_us
        .iter()
        .enumerate()
        .flat_map(|(index, rtt_us)| {
            let at_us = base_us + index as i64 * 10 * SECOND_US;
            [
                json!({"name": "frame_ms", "value": 2.0 * rtt_us / 1000.0 + 5.0, "unit": "ms",
                       "timestamp": from_us(at_us), "tags": {"session": "s1"}}),
                json!({"name": "stall_ratio", "value": 1.0 - rtt_us / 100_000.0, "unit": "ratio",
                       "timestamp": from_us(at_us + 20 * SECOND_US), "tags": {"session": "s1"}}),
            ]
        })
        .collect();
    let (status, body) = publisher
        .post("/api/v1/app-metrics", json!({ "metrics": metrics }))
        .await;
    assert_eq!(status, 200, "{body}");
    let window =
        "client=a&server=b&test=latency&metric=rtt_median_us&bin=10s&max_lag=30s&min_pairs=4";
    let (status, body) = reader
        .get(&format!(
            "/api/v1/correlate?app_metric=frame_ms&tag.session=s1&{window}"
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let correlation = &body["correlation"];
    assert_eq!(
        (
            correlation["app_samples"].as_u64(),
            correlation["network_samples"].as_u64()
        ),
        (Some(6), Some(6))
    );
    assert!(
        close(correlation["at_zero"]["pearson"].as_f64().unwrap(), 1.0),
        "{body}"
    );
    assert!(
        close(correlation["at_zero"]["spearman"].as_f64().unwrap(), 1.0),
        "{body}"
    );
    assert_eq!(correlation["best"]["lag_us"], 0, "{body}");
    assert_eq!(correlation["lags"].as_array().unwrap().len(), 7);
    let (_, body) = reader
        .get(&format!(
            "/api/v1/correlate?app_metric=stall_ratio&{window}"
        ))
        .await;
    let best = &body["correlation"]["best"];
    assert_eq!(best["lag_us"], 20 * SECOND_US, "{body}");
    assert!(close(best["pearson"].as_f64().unwrap(), -1.0), "{body}");
    // Another session's metrics are not this one's.
    let (_, body) = reader
        .get(&format!(
            "/api/v1/correlate?app_metric=frame_ms&tag.session=s2&{window}"
        ))
        .await;
    assert_eq!(body["correlation"]["app_samples"], 0, "{body}");
    assert!(body["correlation"]["best"].is_null(), "{body}");
    for (query, message) in [
        (
            "metric=rtt_median_us&client=a&server=b",
            "query parameter 'app_metric' is required",
        ),
        (
            "app_metric=frame_ms&metric=rtt_median_us&client=a&server=b&bin=0s",
            "query parameter 'bin': must be positive",
        ),
        (
            "app_metric=frame_ms&metric=rtt_median_us&client=a",
            "query parameter 'server'",
        ),
        (
            "app_metric=frame_ms&metric=rtt_median_us&client=a&server=b&colour=red",
            "unknown query parameter 'colour'",
        ),
    ] {
        let (status, body) = reader.get(&format!("/api/v1/correlate?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(message),
            "{query}: {body}"
        );
    }

    // A subscription gets the correlation at once and again when the app publishes.
    let mut stream = reader
        .http
        .get(format!(
            "{}/api/v1/subscribe?kinds=alert&tags=session:s1&correlate=frame_ms,rtt_median_us&window=1h&{window}",
            server.url()
        ))
        .bearer_auth(&reader.token)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let first = sse_events(&mut stream, "correlation", 1).await;
    assert_eq!(first[0]["correlation"]["app_samples"], 6, "{}", first[0]);
    let (status, body) = publisher
        .post(
            "/api/v1/app-metrics",
            json!({"metrics": [{"name": "frame_ms", "value": 30.0, "unit": "ms",
                                "timestamp": from_us(base_us + 60 * SECOND_US), "tags": {"session": "s1"}}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let second = sse_events(&mut stream, "correlation", 1).await;
    assert_eq!(second[0]["correlation"]["app_samples"], 7, "{}", second[0]);
    let (status, body) = reader
        .get("/api/v1/subscribe?correlate=frame_ms&client=a&server=b")
        .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("is not APP_METRIC,METRIC"),
        "{body}"
    );

    // Retention removes verdicts with the results they judged.
    let (status, body) = admin.post("/api/v1/retention", json!({"keep": "5m"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["deleted"]["sla_verdicts"], 15, "{body}");
    let (_, body) = reader.get("/api/v1/sla/verdicts").await;
    assert_eq!(body["verdicts"], json!([]), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sla_and_correlation_on_sqlite() {
    scenario(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sla_and_correlation_on_postgres() {
    scenario(Kind::Postgres).await;
}
