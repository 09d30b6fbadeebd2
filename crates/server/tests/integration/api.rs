//! The REST API end to end over HTTP, against SQLite and PostgreSQL alike.

use crate::common;
use crate::fixtures;

use std::time::Duration;

use chrono::Utc;
use common::{Api, Kind, TestDb};
use fixtures::{latency_result, run_record, upload};
use serde_json::json;
use vantage_model::control::ResultUpload;
use vantage_scheduler::{AgentInfo, ClaimMode};
use vantage_server::archive::{now_us, to_us, Archive, Ingest, RunRecord, RunState};
use vantage_server::planner::PlannerOptions;
use vantage_server::poll_hints::Freshness;

async fn api_scenario(kind: Kind) {
    let db = TestDb::new(kind, "api").await;
    let server = common::start(&db, PlannerOptions::default()).await;
    let admin = Api::new(&server.url(), &server.admin_token);

    // Authentication and roles.
    let anonymous = Api::new(&server.url(), "nope");
    let (status, body) = anonymous.get("/api/v1/agents").await;
    assert_eq!(
        (status, body["error"].as_str().unwrap()),
        (401, "unknown or revoked bearer token")
    );
    // One token per agent: "a" acts as agent a only.
    let agent = Api::new(&server.url(), &admin.token("a", "agent").await);
    let agent_b = Api::new(&server.url(), &admin.token("b", "agent").await);
    let publisher = Api::new(&server.url(), &admin.token("app", "publisher").await);
    let reader = Api::new(&server.url(), &admin.token("grafana", "reader").await);
    // A refused call names the caller's role and every role that would do (admin always).
    for (caller, path, body, message) in [
        (
            &reader,
            "/api/v1/app-metrics",
            json!({"metrics": []}),
            "token 'grafana' has role 'reader'; this call needs role publisher or admin",
        ),
        (
            &publisher,
            "/api/v1/tokens",
            json!({"name": "x", "role": "reader"}),
            "token 'app' has role 'publisher'; this call needs role admin",
        ),
        (
            &reader,
            "/api/v1/results",
            upload("r-none", "a", 100.0),
            "token 'grafana' has role 'reader'; this call needs role agent or admin",
        ),
    ] {
        let (status, body) = caller.post(path, body).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (403, Some(message)),
            "{path}"
        );
    }
    let (status, body) = admin
        .post("/api/v1/tokens", json!({"name": "x", "role": "root"}))
        .await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("'root'"), "{body}");

    // Registration with a bad body names the field.
    let (status, body) = agent.post("/api/v1/agents", json!({"name": "a", "addresses": ["127.0.0.1"], "endpoint_port": "x", "accepts_inbound": true})).await;
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("endpoint_port"),
        "{body}"
    );
    for (caller, name, site) in [(&agent, "a", "north"), (&agent_b, "b", "south")] {
        let (status, body) = caller
            .post("/api/v1/agents", json!({"name": name, "addresses": ["127.0.0.1"], "endpoint_port": 9, "tags": {"site": site}, "accepts_inbound": true}))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    // One agent's token cannot register, heartbeat or fetch runs as another.
    let (status, body) = agent
        .post("/api/v1/agents", json!({"name": "b", "addresses": ["127.0.0.9"], "endpoint_port": 9, "accepts_inbound": true}))
        .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body["error"].as_str().unwrap(),
        "token 'a' belongs to agent 'a' and cannot act as agent 'b'; create one token per agent (POST /api/v1/tokens with the agent's name)"
    );
    assert_eq!(
        agent.post("/api/v1/agents/b/heartbeat", json!({})).await.0,
        403
    );
    assert_eq!(agent.get("/api/v1/agents/b/runs").await.0, 403);
    let (_, agents) = reader.get("/api/v1/agents").await;
    assert_eq!(agents["agents"].as_array().unwrap().len(), 2);
    assert_eq!(
        agent.post("/api/v1/agents/a/heartbeat", json!({})).await.0,
        200
    );
    assert_eq!(
        admin.post("/api/v1/agents/zz/heartbeat", json!({})).await.0,
        404
    );

    // A bad configuration is refused with the path of the bad field.
    let bad = json!({"tests": [{"name": "lat", "type": "latency", "spec": {"count": 0}}]});
    let (status, body) = admin.call("PUT", "/api/v1/config", Some(bad)).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("tests[0].spec.count"),
        "{body}"
    );

    // Runs are handed to their client; results are stored exactly once.
    let start = now_us() + 1_000_000;
    server
        .state
        .archive
        .insert_runs(&[
            run_record("r1", "a", "b", start),
            run_record("r2", "b", "a", start),
        ])
        .await
        .unwrap();
    let (status, runs) = agent
        .get("/api/v1/agents/a/runs?wait_s=0&horizon_s=60")
        .await;
    assert_eq!(status, 200, "{runs}");
    let runs = runs["runs"].as_array().unwrap().clone();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0]["run_id"].as_str(), runs[0]["server_port"].as_u64()),
        (Some("r1"), Some(9))
    );

    let mut subscription = reader
        .http
        .get(format!(
            "{}/api/v1/subscribe?kinds=result,app_metric&agents=a",
            server.url()
        ))
        .bearer_auth(&reader.token)
        .send()
        .await
        .unwrap();
    assert_eq!(subscription.status(), 200);

    let (status, ack) = agent
        .post("/api/v1/results", upload("r1", "a", 150.0))
        .await;
    assert_eq!(
        (status, ack["duplicate"].as_bool()),
        (200, Some(false)),
        "{ack}"
    );
    let (status, ack) = agent
        .post("/api/v1/results", upload("r1", "a", 999.0))
        .await;
    assert_eq!(
        (status, ack["duplicate"].as_bool()),
        (200, Some(true)),
        "{ack}"
    );
    let (status, body) = agent
        .post("/api/v1/results", upload("r2", "a", 150.0))
        .await;
    assert_eq!(status, 422, "{body}");
    let (status, body) = agent
        .post("/api/v1/results", upload("nope", "a", 150.0))
        .await;
    assert_eq!(status, 404, "{body}");
    // Nor upload as another: the first upload does not win.
    let (status, body) = agent
        .post("/api/v1/results", upload("r2", "b", 170.0))
        .await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = agent
        .post("/api/v1/results/batch", json!([upload("r2", "b", 170.0)]))
        .await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = agent_b
        .post(
            "/api/v1/results/batch",
            json!([
                upload("r2", "b", 170.0),
                upload("r2", "b", 170.0),
                upload("nope", "b", 1.0)
            ]),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let acks = body["results"].as_array().unwrap();
    assert_eq!(acks[0]["duplicate"], false);
    assert_eq!(acks[1]["duplicate"], true);
    assert!(acks[2]["error"]
        .as_str()
        .unwrap()
        .contains("does not exist"));

    let (_, results) = reader
        .get("/api/v1/results?client=a&server=b&test=latency&raw=true")
        .await;
    let results = results["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "stored once");
    assert_eq!(results[0]["metrics"]["rtt_median_us"], 150.0);
    assert_eq!(results[0]["result"]["summary"]["rtt_us"]["median"], 150.0);
    let (_, runs) = reader.get("/api/v1/runs").await;
    assert!(
        runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|run| run["state"] == "completed"),
        "{runs}"
    );

    // App metrics with tags, and the live stream.
    let metric = json!({"metrics": [
        {"name": "stream_rate", "value": 8.5e7, "unit": "bps", "timestamp": Utc::now(), "tags": {"session": "s1", "stream": "depth"}},
        {"name": "stream_rate", "value": 1.0e6, "unit": "bps", "timestamp": Utc::now(), "tags": {"session": "s2"}}
    ]});
    assert_eq!(publisher.post("/api/v1/app-metrics", metric).await.0, 200);
    let (status, body) = publisher
        .post(
            "/api/v1/app-metrics",
            json!({"metrics": [{"name": "x", "value": 1}]}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("metrics[0]"),
        "{body}"
    );
    let (_, stored) = reader
        .get("/api/v1/app-metrics?name=stream_rate&tag.session=s1")
        .await;
    let stored = stored["metrics"].as_array().unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(
        (stored[0]["value"].as_f64(), stored[0]["publisher"].as_str()),
        (Some(8.5e7), Some("app"))
    );

    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(seen.contains("event: result") && seen.contains("event: app_metric")) {
        let chunk = tokio::time::timeout_at(deadline, subscription.chunk())
            .await
            .expect("events arrive in time");
        seen.push_str(&String::from_utf8_lossy(
            &chunk.unwrap().expect("stream open"),
        ));
    }
    assert!(seen.contains("\"rtt_median_us\":150.0"), "{seen}");
    assert!(
        seen.contains("\"site\":\"north\""),
        "result events carry agent tags: {seen}"
    );

    // Series, OpenMetrics, retention.
    let (status, series) = reader
        .get("/api/v1/series?client=a&server=b&test=latency&metric=rtt_median_us&buckets=10")
        .await;
    assert_eq!(status, 200, "{series}");
    let buckets = series["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 1);
    assert_eq!(
        (buckets[0]["count"].as_i64(), buckets[0]["avg"].as_f64()),
        (Some(1), Some(150.0))
    );
    let (status, body) = reader.get("/api/v1/series?metric=rtt_avg").await;
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("rtt_avg"),
        "{body}"
    );
    // The classic text format unless OpenMetrics is asked for (Prometheus asks); each
    // as the format's reference parsers read it.
    for (accept, content_type, format) in [
        (None, "text/plain; version=0.0.4; charset=utf-8", "classic"),
        (
            Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            "openmetrics",
        ),
    ] {
        let mut request = reader
            .http
            .get(format!("{}/metrics", server.url()))
            .bearer_auth(&reader.token);
        if let Some(accept) = accept {
            request = request.header("accept", accept);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.headers()["content-type"], content_type);
        assert_eq!(response.headers()["vary"], "accept");
        let metrics = response.text().await.unwrap();
        assert!(
            metrics.contains(
                "vantage_rtt_median_seconds{client=\"a\",server=\"b\",test=\"latency\"} 0.00015"
            ),
            "{metrics}"
        );
        let samples = common::exposition_samples(format, &metrics);
        assert!(
            samples
                .iter()
                .any(|sample| sample["name"] == "vantage_rtt_median_seconds"
                    && sample["value"].as_f64() == Some(0.00015)),
            "{samples:?}"
        );
    }
    let (status, body) = admin.post("/api/v1/retention", json!({"keep": "1h"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["deleted"]["results"], 0);
    let (status, body) = admin
        .post("/api/v1/retention", json!({"keep": "1 week"}))
        .await;
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().starts_with("field 'keep'"),
        "{body}"
    );

    // A diagnosis names its target by application profile, or is refused saying which.
    let (status, body) = publisher
        .post(
            "/api/v1/diagnose",
            json!({"source": "a", "destination": "b", "app": "4k"}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("field 'app': unknown application profile '4k' (known: youtube-360p"),
        "{body}"
    );
    let (status, body) = publisher
        .post(
            "/api/v1/diagnose",
            json!({"source": "a", "destination": "nobody", "app": "youtube-1080p"}),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (
            400,
            Some("field 'destination': agent 'nobody' is not registered")
        )
    );

    // Unknown routes and methods answer JSON errors.
    let (status, body) = reader.get("/api/v1/nothing").await;
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains("/api/v1/nothing"));

    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn api_on_sqlite() {
    api_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn api_on_postgres() {
    api_scenario(Kind::Postgres).await;
}

/// Every documented route is served (answers something other than 404/405).
#[tokio::test]
async fn every_documented_route_is_served() {
    let db = TestDb::new(Kind::Sqlite, "routes").await;
    let server = common::start(&db, PlannerOptions::default()).await;
    let admin = Api::new(&server.url(), &server.admin_token);
    for (method, path) in vantage_server::api::ROUTES {
        if *path == "/api/v1/subscribe" {
            continue; // a stream: covered by api_scenario
        }
        let path = path
            .replace("{name}", "nobody")
            .replace("{id}", "0123456789abcdef");
        let (status, body) = admin
            .call(&method.to_uppercase(), &path, Some(json!({})))
            .await;
        assert!(
            status != 405 && !(status == 404 && body.to_string().contains("no route")),
            "{method} {path}: {status} {body}"
        );
    }
    server.shutdown().await.unwrap();
}

async fn lease_scenario(kind: Kind) {
    let db = TestDb::new(kind, "lease").await;
    let archive = vantage_server::archive::Archive::open(&db.url)
        .await
        .unwrap();
    assert!(archive
        .acquire_lease("scheduler", "one", 60_000_000)
        .await
        .unwrap());
    assert!(!archive
        .acquire_lease("scheduler", "two", 60_000_000)
        .await
        .unwrap());
    assert!(archive
        .acquire_lease("scheduler", "one", 60_000_000)
        .await
        .unwrap());
    // An expired lease is taken over.
    assert!(archive.acquire_lease("other", "one", -1).await.unwrap());
    assert!(archive
        .acquire_lease("other", "two", 60_000_000)
        .await
        .unwrap());
    archive.close().await;
}

#[tokio::test]
async fn single_scheduler_leader_on_sqlite() {
    lease_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn single_scheduler_leader_on_postgres() {
    lease_scenario(Kind::Postgres).await;
}

#[tokio::test]
async fn sqlite_archive_uses_wal() {
    let db = TestDb::new(Kind::Sqlite, "wal").await;
    let archive = vantage_server::archive::Archive::open(&db.url)
        .await
        .unwrap();
    let row: (String,) = sqlx::query_as("PRAGMA journal_mode")
        .fetch_one(archive.pool())
        .await
        .unwrap();
    assert_eq!(row.0, "wal");
    archive.close().await;
}

/// Writes dropped part-way (an agent hanging up on a slow answer drops its request's
/// future) leave the archive's writer usable: SQLite's one writing connection had been
/// left inside a transaction for good when a caller was dropped just after its BEGIN.
async fn dropped_writes_scenario(kind: Kind) {
    let db = TestDb::new(kind, "dropped").await;
    let archive = vantage_server::archive::Archive::open(&db.url)
        .await
        .unwrap();
    for round in 0..1_500u64 {
        let writing = archive.clone();
        let write = tokio::spawn(async move {
            writing
                .set_planner_marks(&[("dropped", round as i64), ("other", 1)])
                .await
        });
        // Dropped at a different point of the transaction each round.
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_micros(round % 400) {
            std::hint::spin_loop();
        }
        write.abort();
        let _ = write.await;
    }
    archive
        .set_planner_marks(&[("dropped", -1), ("other", 2)])
        .await
        .expect("the writer still writes after dropped writes");
    assert_eq!(archive.planner_mark("dropped").await.unwrap(), Some(-1));
    archive.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_dropped_part_way_leave_the_writer_usable_on_sqlite() {
    dropped_writes_scenario(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_dropped_part_way_leave_the_writer_usable_on_postgres() {
    dropped_writes_scenario(Kind::Postgres).await;
}

/// How often PostgreSQL has vacuumed the archive's `runs` table (by hand, not
/// autovacuum).
async fn runs_vacuum_count(archive: &vantage_server::archive::Archive) -> i64 {
    sqlx::query_scalar(
        "SELECT vacuum_count FROM pg_stat_user_tables \
         WHERE relname = 'runs' AND schemaname = current_schema()",
    )
    .fetch_one(archive.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn an_archive_vacuums_itself_only_when_postgres_autovacuum_is_off() {
    let db = TestDb::new(Kind::Postgres, "vacuum").await;
    let archive = vantage_server::archive::Archive::open(&db.url)
        .await
        .unwrap();
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(archive.pool())
        .await
        .unwrap();
    assert_eq!(runs_vacuum_count(&archive).await, 0);
    let vacuumed = archive.vacuum_when_autovacuum_is_off().await.unwrap();
    assert_eq!(vacuumed, autovacuum == "off", "autovacuum = {autovacuum}");
    // Not again until its interval has passed.
    assert!(!archive.vacuum_when_autovacuum_is_off().await.unwrap());
    let expected = i64::from(vacuumed);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while runs_vacuum_count(&archive).await != expected && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(runs_vacuum_count(&archive).await, expected);
    archive.close().await;
}

async fn missed_scenario(kind: Kind) {
    let db = TestDb::new(kind, "missed").await;
    let server = common::start(&db, PlannerOptions::default()).await;
    let mut alerts = server.state.events.subscribe();
    let long_ago = now_us() - 120_000_000;
    let mut fetched = run_record("fetched", "a", "b", long_ago);
    fetched.state = RunState::Dispatched;
    server
        .state
        .archive
        .insert_runs(&[
            run_record("never-fetched", "a", "b", long_ago),
            fetched,
            run_record("future", "a", "b", now_us() + 60_000_000),
        ])
        .await
        .unwrap();
    // The server's scheduler loop (2 s ticks, 30 s grace) records them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let runs = server
            .state
            .archive
            .runs_between(0, i64::MAX)
            .await
            .unwrap();
        let missed = runs
            .iter()
            .filter(|run| run.state == RunState::Missed)
            .count();
        if missed == 2 || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let runs = server
        .state
        .archive
        .runs_between(0, i64::MAX)
        .await
        .unwrap();
    let state_of = |id: &str| runs.iter().find(|run| run.id == id).unwrap().clone();
    let never = state_of("never-fetched");
    assert_eq!(never.state, RunState::Missed);
    assert!(never.reason.unwrap().contains("never fetched"));
    let fetched = state_of("fetched");
    assert_eq!(fetched.state, RunState::Missed);
    assert!(fetched.reason.unwrap().contains("reported no result"));
    assert_eq!(state_of("future").state, RunState::Scheduled);
    let alert = tokio::time::timeout(Duration::from_secs(10), alerts.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(serde_json::to_string(&alert).unwrap().contains("missed"));
    // A late result still completes a missed run, once.
    let agent = Api::new(
        &server.url(),
        &Api::new(&server.url(), &server.admin_token)
            .token("a", "agent")
            .await,
    );
    let (status, ack) = agent
        .post("/api/v1/results", upload("fetched", "a", 200.0))
        .await;
    assert_eq!(
        (status, ack["duplicate"].as_bool()),
        (200, Some(false)),
        "{ack}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn overdue_runs_are_recorded_missed_on_sqlite() {
    missed_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn overdue_runs_are_recorded_missed_on_postgres() {
    missed_scenario(Kind::Postgres).await;
}

/// Latency results (no throughput metrics) and throughput results (no RTT metrics)
/// alternate on the same pooled connections without type clashes.
async fn mixed_metrics_scenario(kind: Kind) {
    let db = TestDb::new(kind, "mixed").await;
    let archive = vantage_server::archive::Archive::open(&db.url)
        .await
        .unwrap();
    let start = now_us();
    let ids: Vec<String> = (0..12).map(|index| format!("mixed-{index}")).collect();
    let runs: Vec<RunRecord> = ids
        .iter()
        .enumerate()
        .map(|(index, id)| {
            let mut run = run_record(id, "a", "b", start);
            if index % 2 == 1 {
                run.test = "throughput".into();
            }
            run
        })
        .collect();
    archive.insert_runs(&runs).await.unwrap();
    for (index, id) in ids.iter().enumerate() {
        let result = if index % 2 == 0 {
            latency_result(100.0, 0.0)
        } else {
            json!({"test": "throughput", "summary": {"sent_bps": 9.5e8, "received_bps": 9.4e8, "retransmits": 3}})
        };
        let upload: vantage_model::control::ResultUpload = serde_json::from_value(json!({
            "run_id": id, "agent": "a", "outcome": "completed",
            "actual_start": Utc::now(), "actual_end": Utc::now(), "result": result
        }))
        .unwrap();
        archive.ingest(&upload).await.unwrap();
    }
    let stored = archive
        .results(&vantage_server::archive::ResultFilter {
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(stored.len(), 12);
    assert_eq!(
        stored
            .iter()
            .filter(|r| r.metrics.get("received_bps") == Some(&9.4e8))
            .count(),
        6
    );
    // Each result carries exactly its kind's metrics.
    assert!(stored.iter().all(|r| if r.test == "throughput" {
        r.metrics.len() == 3 && !r.metrics.contains_key("rtt_median_us")
    } else {
        r.metrics.contains_key("rtt_median_us") && !r.metrics.contains_key("sent_bps")
    }));
    archive.close().await;
}

#[tokio::test]
async fn mixed_metrics_on_sqlite() {
    mixed_metrics_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn mixed_metrics_on_postgres() {
    mixed_metrics_scenario(Kind::Postgres).await;
}

/// A batch is stored as sets (one statement per table): every upload still gets its
/// own answer, a document comes back byte for byte whatever characters it holds, and
/// each run takes its own state, times and reason.
async fn batch_scenario(kind: Kind) {
    let db = TestDb::new(kind, "batch").await;
    let archive = vantage_server::archive::Archive::open(&db.url)
        .await
        .unwrap();
    let start = now_us();
    let runs: Vec<RunRecord> = ["b1", "b2", "b3", "b4"]
        .iter()
        .map(|id| run_record(id, "a", "b", start))
        .collect();
    archive.insert_runs(&runs).await.unwrap();
    let upload =
        |value: serde_json::Value| -> ResultUpload { serde_json::from_value(value).unwrap() };
    let mut awkward = latency_result(120.0, 0.0);
    awkward["note"] =
        json!("quotes \" and \\ backslashes, 'single', ünïcödé ✓, tab\t, newline\n, $1");
    let first = upload(json!({"run_id": "b1", "agent": "a", "outcome": "completed",
        "actual_start": "2026-01-02T03:04:05.000001Z", "actual_end": "2026-01-02T03:04:06Z", "result": awkward}));
    assert!(matches!(
        archive
            .ingest_batch(std::slice::from_ref(&first))
            .await
            .unwrap()[0],
        Ok((Ingest::Stored(_), _))
    ));

    let reason = "could not reach \"b\": ünïcödé \\ reason";
    let batch = vec![
        first.clone(),
        upload(
            json!({"run_id": "b2", "agent": "a", "outcome": "failed", "error": reason,
            "actual_start": "2026-01-02T03:05:00Z", "actual_end": "2026-01-02T03:05:01Z"}),
        ),
        upload(json!({"run_id": "b3", "agent": "a", "outcome": "completed",
            "actual_start": "2026-01-02T03:06:00Z", "actual_end": "2026-01-02T03:06:01Z",
            "result": latency_result(300.0, 0.25)})),
        upload(json!({"run_id": "b4", "agent": "b", "outcome": "completed",
            "actual_start": "2026-01-02T03:06:00Z", "actual_end": "2026-01-02T03:06:01Z",
            "result": latency_result(300.0, 0.0)})),
        upload(json!({"run_id": "b3", "agent": "a", "outcome": "completed",
            "actual_start": "2026-01-02T03:07:00Z", "actual_end": "2026-01-02T03:07:01Z",
            "result": latency_result(999.0, 0.0)})),
        upload(json!({"run_id": "b4", "agent": "a", "outcome": "completed",
            "actual_start": "2026-01-02T03:08:00Z", "actual_end": "2026-01-02T03:08:01Z"})),
    ];
    let outcomes = archive.ingest_batch(&batch).await.unwrap();
    let answers: Vec<String> = outcomes
        .iter()
        .map(|outcome| match outcome {
            Ok((Ingest::Stored(metrics), run)) => {
                format!("stored {} ({} metrics)", run.id, metrics.len())
            }
            Ok((Ingest::Duplicate, run)) => format!("duplicate {}", run.id),
            Err(refusal) => format!("refused: {refusal}"),
        })
        .collect();
    assert_eq!(
        answers,
        [
            "duplicate b1",
            "stored b2 (0 metrics)",
            "stored b3 (5 metrics)",
            "refused: run 'b4' belongs to client 'a', not to agent 'b'",
            "duplicate b3",
            "refused: upload for run 'b4' says completed but has no result document",
        ]
    );

    let b1 = archive.stored_result("b1").await.unwrap().unwrap();
    assert_eq!(
        b1.result.as_ref(),
        first.result.as_ref(),
        "the document comes back as sent"
    );
    assert_eq!(b1.metrics.len(), 5, "a duplicate adds no metrics");
    let b3 = archive.stored_result("b3").await.unwrap().unwrap();
    assert_eq!(
        (b3.metrics["rtt_median_us"], b3.metrics["loss_ratio"]),
        (300.0, 0.25),
        "the first upload of a run in a batch is the one stored"
    );
    let b2 = archive.stored_result("b2").await.unwrap().unwrap();
    assert_eq!(
        (b2.outcome.as_str(), b2.error.as_deref()),
        ("failed", Some(reason))
    );

    let state = |id: &'static str| {
        let archive = archive.clone();
        async move {
            let run = archive.run(id).await.unwrap().unwrap();
            (
                run.state,
                run.actual_start_us,
                run.actual_end_us,
                run.reason,
            )
        }
    };
    assert_eq!(
        state("b1").await,
        (
            RunState::Completed,
            Some(1_767_323_045_000_001),
            Some(1_767_323_046_000_000),
            None
        )
    );
    assert_eq!(
        state("b2").await,
        (
            RunState::Failed,
            Some(1_767_323_100_000_000),
            Some(1_767_323_101_000_000),
            Some(reason.to_string())
        )
    );
    assert_eq!(state("b3").await.0, RunState::Completed);
    assert_eq!(
        state("b4").await.0,
        RunState::Scheduled,
        "a refused upload leaves its run as it was"
    );
    archive.close().await;
}

#[tokio::test]
async fn batch_on_sqlite() {
    batch_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn batch_on_postgres() {
    batch_scenario(Kind::Postgres).await;
}

/// Batches stored concurrently (on SQLite, several in one group commit) each get the
/// answers of their own uploads, in order: every run is stored exactly once, a run
/// two batches both carry is stored for one and a duplicate for the other, and a
/// refusal stays with the batch that sent it.
async fn concurrent_batches_scenario(kind: Kind) {
    let db = TestDb::new(kind, "concurrent").await;
    let archive = vantage_server::archive::Archive::open(&db.url)
        .await
        .unwrap();
    const BATCHES: usize = 40;
    const PER_BATCH: usize = 10;
    let runs: Vec<RunRecord> = (0..BATCHES * PER_BATCH)
        .map(|n| run_record(&format!("c{n}"), "a", "b", now_us()))
        .collect();
    archive.insert_runs(&runs).await.unwrap();
    let batch_of = |batch: usize| -> Vec<ResultUpload> {
        let mut uploads: Vec<ResultUpload> = (0..PER_BATCH)
            .map(|i| {
                let n = batch * PER_BATCH + i;
                serde_json::from_value(upload(&format!("c{n}"), "a", n as f64)).unwrap()
            })
            .collect();
        // Also the first run of the next batch, and one upload as the wrong agent.
        let shared = ((batch + 1) % BATCHES) * PER_BATCH;
        uploads.push(serde_json::from_value(upload(&format!("c{shared}"), "a", 1.0)).unwrap());
        uploads.push(
            serde_json::from_value(upload(&format!("c{}", batch * PER_BATCH + 1), "b", 1.0))
                .unwrap(),
        );
        uploads
    };
    let calls = (0..BATCHES).map(|batch| {
        let archive = archive.clone();
        let uploads = batch_of(batch);
        tokio::spawn(async move {
            (
                uploads.clone(),
                archive.ingest_batch(&uploads).await.unwrap(),
            )
        })
    });
    let mut stored = std::collections::HashSet::new();
    for call in calls.collect::<Vec<_>>() {
        let (uploads, outcomes) = call.await.unwrap();
        assert_eq!(outcomes.len(), uploads.len(), "one answer per upload");
        for (upload, outcome) in uploads.iter().zip(&outcomes) {
            match outcome {
                Ok((ingest, run)) => {
                    assert_eq!(run.id, upload.run_id, "answers keep the batch's order");
                    if let Ingest::Stored(metrics) = ingest {
                        assert_eq!(metrics.len(), 5);
                        assert!(stored.insert(run.id.clone()), "{} stored twice", run.id);
                    }
                }
                Err(refusal) => {
                    assert_eq!(
                        upload.agent, "b",
                        "only the wrong agent is refused: {refusal}"
                    );
                    assert!(refusal.to_string().contains(&upload.run_id), "{refusal}");
                }
            }
        }
    }
    assert_eq!(stored.len(), BATCHES * PER_BATCH, "every run stored once");
    for n in (0..BATCHES * PER_BATCH).step_by(37) {
        let stored = archive
            .stored_result(&format!("c{n}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.metrics.len(), 5);
    }
    archive.close().await;
}

#[tokio::test]
async fn concurrent_batches_on_sqlite() {
    concurrent_batches_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn concurrent_batches_on_postgres() {
    concurrent_batches_scenario(Kind::Postgres).await;
}

/// A batch the database refuses part of fails as a whole: none of it is stored, and
/// the next batch is stored as usual. A trigger stands in for the refusal: on SQLite
/// it skips the row (what a conflict does to the writer's statements, which skip a
/// conflicting row rather than keep a statement journal, so the writer counts the rows
/// each insert wrote); on PostgreSQL it raises an error.
async fn conflicting_batch_scenario(kind: Kind) {
    let db = TestDb::new(kind, "conflict").await;
    let archive = vantage_server::archive::Archive::open(&db.url)
        .await
        .unwrap();
    let start = now_us();
    let runs: Vec<RunRecord> = ["k1", "k2", "k3"]
        .iter()
        .map(|id| run_record(id, "a", "b", start))
        .collect();
    archive.insert_runs(&runs).await.unwrap();
    let refusal: &[&str] = match kind {
        Kind::Sqlite => &["CREATE TRIGGER refuse_k2 BEFORE INSERT ON results WHEN NEW.run_id = 'k2' \
             BEGIN SELECT RAISE(IGNORE); END"],
        Kind::Postgres => &[
            "CREATE FUNCTION refuse_k2() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF NEW.run_id = 'k2' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$",
            "CREATE TRIGGER refuse_k2 BEFORE INSERT ON results FOR EACH ROW EXECUTE FUNCTION refuse_k2()",
        ],
    };
    for statement in refusal {
        sqlx::query(statement)
            .execute(archive.pool())
            .await
            .unwrap();
    }
    let batch: Vec<ResultUpload> = ["k1", "k2"]
        .iter()
        .map(|id| serde_json::from_value(upload(id, "a", 100.0)).unwrap())
        .collect();
    let refused = archive.ingest_batch(&batch).await;
    assert!(
        refused.is_err(),
        "a conflicting batch was stored: {refused:?}"
    );
    for id in ["k1", "k2"] {
        assert!(
            archive.stored_result(id).await.unwrap().is_none(),
            "{id} stored from a failed batch"
        );
    }
    let lifted = match kind {
        Kind::Sqlite => "DROP TRIGGER refuse_k2",
        Kind::Postgres => "DROP TRIGGER refuse_k2 ON results",
    };
    sqlx::query(lifted).execute(archive.pool()).await.unwrap();
    let next: ResultUpload = serde_json::from_value(upload("k3", "a", 100.0)).unwrap();
    let outcomes = archive.ingest_batch(&[next]).await.unwrap();
    assert!(
        matches!(outcomes[0], Ok((Ingest::Stored(_), _))),
        "{:?}",
        outcomes[0]
    );
    assert_eq!(
        archive
            .stored_result("k3")
            .await
            .unwrap()
            .unwrap()
            .metrics
            .len(),
        5
    );
    archive.close().await;
}

#[tokio::test]
async fn conflicting_batch_on_sqlite() {
    conflicting_batch_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn conflicting_batch_on_postgres() {
    conflicting_batch_scenario(Kind::Postgres).await;
}

/// A server with agents a and b registered; its admin client and agent a's client.
async fn server_with_pair(db: &TestDb) -> (vantage_server::service::RunningServer, Api, Api) {
    let server = common::start(db, PlannerOptions::default()).await;
    let admin = Api::new(&server.url(), &server.admin_token);
    let agent = Api::new(&server.url(), &admin.token("a", "agent").await);
    for name in ["a", "b"] {
        let own = Api::new(&server.url(), &admin.token(name, "agent").await);
        let (status, body) = own
            .post("/api/v1/agents", json!({"name": name, "addresses": ["127.0.0.1"], "endpoint_port": 9, "accepts_inbound": true}))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    (server, admin, agent)
}

/// An HTTP receiver at `url` that keeps what it is sent while `up` is true and
/// answers 503 otherwise.
struct HookReceiver {
    url: String,
    received: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl HookReceiver {
    async fn start(up: bool) -> HookReceiver {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let up = Arc::new(AtomicBool::new(up));
        let received: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
        let (sink, is_up) = (Arc::clone(&received), Arc::clone(&up));
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |axum::Json(body): axum::Json<serde_json::Value>| {
                let (sink, is_up) = (Arc::clone(&sink), Arc::clone(&is_up));
                async move {
                    if !is_up.load(Ordering::SeqCst) {
                        return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                    }
                    sink.lock().unwrap().push(body);
                    axum::http::StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let task = tokio::spawn(async move { axum::serve(listener, app).await });
        HookReceiver {
            url,
            received,
            up,
            task,
        }
    }

    fn received(&self) -> Vec<serde_json::Value> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for HookReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `vantage_archiver_deliveries_total` counter of `archiver` and `outcome` in the
/// `/metrics` exposition (0 when absent).
fn deliveries(metrics: &str, archiver: &str, outcome: &str) -> u64 {
    let series = format!(
        "vantage_archiver_deliveries_total{{archiver=\"{archiver}\",outcome=\"{outcome}\"}} "
    );
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |value| value.trim().parse().expect("a counter value"))
}

/// Each newly stored result reaches its task's file and HTTP archivers once; a receiver
/// that never answers counts failed attempts in /metrics (and is retried).
async fn archivers_scenario(kind: Kind) {
    let db = TestDb::new(kind, "archivers").await;
    let (server, admin, agent) = server_with_pair(&db).await;
    let hook = HookReceiver::start(true).await;
    let hook_url = hook.url.clone();
    // A port nobody listens on (bound, then released).
    let dead_url = {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/", closed.local_addr().unwrap())
    };
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("results.jsonl");

    let config = json!({
        "groups": [{"name": "pair", "kind": "list", "pairs": [["a", "b"]]}],
        "tests": [{"name": "lat", "type": "latency", "spec": {"count": 3}}],
        "tasks": [{"name": "t", "test": "lat", "group": "pair", "every": "1h",
                   "archivers": ["db", "log", "hook", "dead"]}],
        "archivers": [
            {"name": "db", "kind": "database"},
            {"name": "log", "kind": "file", "path": log_path.to_str().unwrap()},
            {"name": "hook", "kind": "http", "url": hook_url},
            {"name": "dead", "kind": "http", "url": dead_url},
        ],
    });
    let (status, body) = admin.call("PUT", "/api/v1/config", Some(config)).await;
    assert_eq!(status, 200, "{body}");

    let start = now_us() + 1_000_000;
    server
        .state
        .archive
        .insert_runs(&[run_record("arch1", "a", "b", start)])
        .await
        .unwrap();
    for _ in 0..2 {
        // The second upload is a duplicate: stored once, delivered once.
        let (status, ack) = agent
            .post("/api/v1/results", upload("arch1", "a", 321.0))
            .await;
        assert_eq!(status, 200, "{ack}");
    }

    let reader = Api::new(&server.url(), &admin.token("prom", "reader").await);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let metrics = loop {
        let response = reader
            .http
            .get(format!("{}/metrics", server.url()))
            .bearer_auth(&reader.token)
            .send()
            .await
            .unwrap();
        let text = response.text().await.unwrap();
        // Each archiver delivers on its own: wait for all three to have reported.
        let reported = [
            ("dead", "failed"),
            ("log", "delivered"),
            ("hook", "delivered"),
        ]
        .iter()
        .all(|(archiver, outcome)| deliveries(&text, archiver, outcome) >= 1);
        if reported {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the dead receiver was never counted as failed, or a working one never \
             delivered:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for archiver in ["log", "hook"] {
        assert!(
            metrics.contains(&format!(
                "archiver=\"{archiver}\",outcome=\"delivered\"}} 1\n"
            )),
            "{metrics}"
        );
    }
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log_path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON document per line"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["run_id"], "arch1");
    assert_eq!(lines[0]["result"]["summary"]["rtt_us"]["median"], 321.0);
    assert_eq!(
        hook.received(),
        lines,
        "the file and the HTTP receiver got the same document"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn archivers_on_sqlite() {
    archivers_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn archivers_on_postgres() {
    archivers_scenario(Kind::Postgres).await;
}

/// An HTTP receiver that is down (answers 503) while results arrive, across a server
/// restart: the deliveries wait in the outbox, are retried by the restarted server once
/// the receiver is back, and arrive exactly once each.
async fn outbox_scenario(kind: Kind) {
    use std::sync::atomic::Ordering;

    let db = TestDb::new(kind, "outbox").await;
    let (server, admin, agent) = server_with_pair(&db).await;
    let hook = HookReceiver::start(false).await;
    let hook_url = hook.url.clone();
    let config = json!({
        "groups": [{"name": "pair", "kind": "list", "pairs": [["a", "b"]]}],
        "tests": [{"name": "lat", "type": "latency", "spec": {"count": 3}}],
        "tasks": [{"name": "t", "test": "lat", "group": "pair", "every": "1h", "archivers": ["hook"]}],
        "archivers": [{"name": "hook", "kind": "http", "url": hook_url}],
    });
    let (status, body) = admin.call("PUT", "/api/v1/config", Some(config)).await;
    assert_eq!(status, 200, "{body}");
    let start = now_us() + 1_000_000;
    let runs = ["outbox1", "outbox2"];
    server
        .state
        .archive
        .insert_runs(&runs.map(|id| run_record(id, "a", "b", start)))
        .await
        .unwrap();
    for run_id in runs {
        let (status, ack) = agent
            .post("/api/v1/results", upload(run_id, "a", 100.0))
            .await;
        assert_eq!(status, 200, "{ack}");
    }
    // Both deliveries tried and failed (503) before the server stops.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while server
        .state
        .archivers
        .counts()
        .get("hook")
        .map_or(0, |c| c.failed)
        < 2
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            server.state.archivers.counts()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(server.state.archive.outbox_len().await.unwrap(), 2);
    server.shutdown().await.unwrap();

    // The receiver comes back; a new server on the same archive delivers.
    hook.up.store(true, Ordering::SeqCst);
    let server = common::start(&db, PlannerOptions::default()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while server.state.archive.outbox_len().await.unwrap() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still queued: {:?}",
            server.state.archivers.counts()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Nothing more arrives later (the pass after a delivery finds the outbox empty).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut delivered: Vec<String> = hook
        .received()
        .iter()
        .map(|document| document["run_id"].as_str().unwrap().to_string())
        .collect();
    delivered.sort();
    assert_eq!(delivered, runs, "each result exactly once");
    assert_eq!(server.state.archivers.counts()["hook"].delivered, 2);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn archiver_deliveries_survive_a_receiver_outage_and_a_restart_on_sqlite() {
    outbox_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn archiver_deliveries_survive_a_receiver_outage_and_a_restart_on_postgres() {
    outbox_scenario(Kind::Postgres).await;
}

/// An archive written before metrics were stored per name (fixed metric columns)
/// is migrated in place, through one row per metric (migration 0002) into one object
/// in the result's row (0014): its results keep their metrics and series still answer.
async fn metric_columns_migrate_scenario(kind: Kind) {
    let db = TestDb::new(kind, "migrate").await;
    let url = if kind == Kind::Sqlite {
        format!("{}?mode=rwc", db.url)
    } else {
        db.url.clone()
    };
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    let mut first_only = match kind {
        Kind::Sqlite => sqlx::migrate!("migrations/sqlite"),
        Kind::Postgres => sqlx::migrate!("migrations/postgres"),
    };
    first_only.migrations = first_only
        .migrations
        .iter()
        .filter(|migration| migration.version == 1)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    first_only.run(&pool).await.unwrap();
    let start = now_us();
    // Absent metrics were NULL columns; literals keep the two backends' NULL typing out of it.
    for (run_id, test, rtt, sent) in [
        ("old-latency", "latency", "1234.5", "NULL"),
        ("old-throughput", "throughput", "NULL", "950000000.0"),
    ] {
        sqlx::query(&format!(
            "INSERT INTO results (run_id, test, client, server, start_us, end_us, received_us, outcome, error, raw, \
             rtt_median_us, sent_bps) VALUES ($1, $2, 'a', 'b', $3, $3, $3, 'completed', NULL, '{{}}', {rtt}, {sent})"
        ))
        .bind(run_id)
        .bind(test)
        .bind(start)
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;

    let archive = vantage_server::archive::Archive::open(&db.url)
        .await
        .unwrap();
    let stored = archive
        .results(&vantage_server::archive::ResultFilter {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let metrics_of = |run_id: &str| {
        stored
            .iter()
            .find(|result| result.run_id == run_id)
            .map(|result| result.metrics.clone())
            .unwrap()
    };
    assert_eq!(
        metrics_of("old-latency").into_iter().collect::<Vec<_>>(),
        vec![("rtt_median_us".to_string(), 1234.5)]
    );
    assert_eq!(
        metrics_of("old-throughput").into_iter().collect::<Vec<_>>(),
        vec![("sent_bps".to_string(), 9.5e8)]
    );
    let series = archive
        .series(
            &vantage_server::archive::ResultFilter {
                from_us: Some(start - 1),
                to_us: Some(start + 1),
                limit: 10,
                ..Default::default()
            },
            "rtt_median_us",
            2,
        )
        .await
        .unwrap();
    assert_eq!(series.len(), 1);
    assert_eq!((series[0].count, series[0].avg), (1, 1234.5));
    archive.close().await;
}

#[tokio::test]
async fn metric_columns_migrate_on_sqlite() {
    metric_columns_migrate_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn metric_columns_migrate_on_postgres() {
    metric_columns_migrate_scenario(Kind::Postgres).await;
}

/// A trace result (`vantage trace --json`) whose hops answered from `routers`, then
/// the destination `10.0.9.9` one hop further.
fn trace_result(routers: &[&str], start: chrono::DateTime<Utc>) -> serde_json::Value {
    let hop = |ttl: usize, address: &str, reply: &str| {
        json!({"ttl": ttl, "address": address, "addresses": [address], "sent": 1, "answered": 1, "rtt_us": null,
               "probes": [{"address": address, "rtt_us": 100.0 * ttl as f64, "lost": false, "reply": reply}]})
    };
    let mut hops: Vec<serde_json::Value> = routers
        .iter()
        .enumerate()
        .map(|(index, router)| hop(index + 1, router, "time_exceeded"))
        .collect();
    hops.push(hop(routers.len() + 1, "10.0.9.9", "port_unreachable"));
    json!({
        "test": "trace", "spec": {"target": "10.0.9.9"}, "target": "10.0.9.9", "target_addr": "10.0.9.9",
        "protocol": "udp", "method": "udp_datagram", "flow": {},
        "start_time": start, "end_time": start, "hops": hops,
        "destination_reached": true, "stop_reason": "destination_reached", "hop_count": routers.len() + 1
    })
}

/// Each stored trace is compared with the pair's previous one: `path_changed` is 0
/// for the same path, 1 (with a warning alert naming the new hop) for a detour, and
/// absent for the first trace; the series API and OpenMetrics serve it.
async fn path_change_scenario(kind: Kind) {
    let db = TestDb::new(kind, "paths").await;
    let server = common::start(&db, PlannerOptions::default()).await;
    let mut events = server.state.events.subscribe();
    let admin = Api::new(&server.url(), &server.admin_token);
    let agent = Api::new(&server.url(), &admin.token("a", "agent").await);
    let start_us = now_us() - 60_000_000;
    let paths: [&[&str]; 3] = [
        &["10.0.1.1", "10.0.2.1"],
        &["10.0.1.1", "10.0.2.1"],
        &["10.0.1.1", "10.0.5.1", "10.0.2.1"],
    ];
    for (index, routers) in paths.iter().enumerate() {
        let run_id = format!("trace-{index}");
        let run_start_us = start_us + index as i64 * 10_000_000;
        let mut run = run_record(&run_id, "a", "b", run_start_us);
        run.test = "trace".into();
        server.state.archive.insert_runs(&[run]).await.unwrap();
        let at = vantage_server::archive::from_us(run_start_us);
        let (status, body) = agent
            .post(
                "/api/v1/results",
                json!({"run_id": run_id, "agent": "a", "outcome": "completed",
                       "actual_start": at, "actual_end": at, "result": trace_result(routers, at)}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = agent.get("/api/v1/results?test=trace").await;
    assert_eq!(status, 200, "{body}");
    let changed = |run_id: &str| {
        body["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|result| result["run_id"] == run_id)
            .unwrap()["metrics"]
            .get("path_changed")
            .cloned()
    };
    assert_eq!(changed("trace-0"), None, "{body}");
    assert_eq!(changed("trace-1"), Some(json!(0.0)), "{body}");
    assert_eq!(changed("trace-2"), Some(json!(1.0)), "{body}");
    assert_eq!(
        body["results"][0]["metrics"]["hop_count"],
        json!(4.0),
        "{body}"
    );
    let (status, series) = agent
        .get("/api/v1/series?client=a&server=b&test=trace&metric=path_changed&buckets=1")
        .await;
    assert_eq!(status, 200, "{series}");
    assert_eq!(series["buckets"][0]["count"], 2, "{series}");
    assert_eq!(series["buckets"][0]["max"], 1.0, "{series}");
    let alert = loop {
        match tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .expect("an alert within 5 s")
            .unwrap()
        {
            // Runs placed in the past also raise missed-run alerts; skip those.
            vantage_server::events::Event::Alert(alert) if alert.message.starts_with("path ") => {
                break alert
            }
            _ => continue,
        }
    };
    assert!(
        alert.message.contains("changed at hop 2")
            && alert.message.contains("added 10.0.5.1")
            && alert.message.contains("destination at hop 4 (was 3)"),
        "{}",
        alert.message
    );
    let (status, text) = agent.get("/metrics").await;
    assert_eq!(status, 200);
    assert!(
        text.as_str()
            .unwrap()
            .contains("vantage_trace_path_changed{client=\"a\",server=\"b\",test=\"trace\"} 1"),
        "{text}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn path_changes_on_sqlite() {
    path_change_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn path_changes_on_postgres() {
    path_change_scenario(Kind::Postgres).await;
}

/// An agent fetching its runs while a replan discards the forecast: every run handed out
/// must survive the discard as dispatched (the replan then plans around it). A run handed
/// out and deleted would be planned again elsewhere, and the agent would run both.
async fn fetch_during_replan_scenario(kind: Kind) {
    let db = TestDb::new(kind, "fetchrace").await;
    let archive = std::sync::Arc::new(
        vantage_server::archive::Archive::open(&db.url)
            .await
            .unwrap(),
    );
    let (rounds, runs_per_round) = (60, 30);
    let mut handed_out = 0;
    for round in 0..rounds {
        // Each round's runs have their own time range, so earlier rounds' runs stay out of it.
        let start = now_us() + 60_000_000 + round * 1_000;
        let runs: Vec<RunRecord> = (0..runs_per_round)
            .map(|index| run_record(&format!("race-{round}-{index}"), "a", "b", start + index))
            .collect();
        archive.insert_runs(&runs).await.unwrap();
        let (fetcher, replanner) = (archive.clone(), archive.clone());
        let fetch = tokio::spawn(async move { fetcher.take_runs_for("a", i64::MAX, false).await });
        let discard = tokio::spawn(async move { replanner.discard_forecast(0).await });
        let taken = fetch.await.unwrap().unwrap();
        let discarded = discard.await.unwrap().unwrap();
        let kept = archive
            .runs_between(start, start + runs_per_round)
            .await
            .unwrap();
        for run in &taken {
            let stored = kept.iter().find(|stored| stored.id == run.id);
            assert!(
                stored.is_some_and(|stored| stored.state == RunState::Dispatched),
                "round {round}: {} was handed out but the replan deleted it ({} taken, {discarded} discarded)",
                run.id,
                taken.len()
            );
        }
        assert_eq!(
            taken.len() as u64 + discarded,
            runs_per_round as u64,
            "round {round}: each run is either handed out or discarded"
        );
        handed_out += taken.len();
    }
    println!(
        "{handed_out} of {} runs handed out, the rest discarded",
        rounds * runs_per_round
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_fetched_during_a_replan_are_kept_on_sqlite() {
    fetch_during_replan_scenario(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_fetched_during_a_replan_are_kept_on_postgres() {
    fetch_during_replan_scenario(Kind::Postgres).await;
}

/// An archive and server state (without HTTP) for driving the planner's ticks, with
/// `agents` registered, reachable on loopback and accepting inbound tests.
async fn planner_scenario(
    kind: Kind,
    db_name: &str,
    agents: &[&str],
) -> (
    TestDb,
    vantage_server::archive::Archive,
    std::sync::Arc<vantage_server::state::ServerState>,
) {
    let db = TestDb::new(kind, db_name).await;
    let archive = vantage_server::archive::Archive::open(&db.url)
        .await
        .unwrap();
    let state = vantage_server::state::ServerState::new(archive.clone(), Default::default())
        .await
        .unwrap();
    for name in agents {
        register_agent(&archive, name).await;
    }
    (db, archive, state)
}

async fn register_agent(archive: &vantage_server::archive::Archive, name: &str) {
    archive
        .register_agent(&vantage_model::control::AgentRegistration {
            name: name.into(),
            addresses: vec!["127.0.0.1".into()],
            endpoint_port: 9,
            iperf3_port: None,
            tags: Default::default(),
            capabilities: Vec::new(),
            accepts_inbound: true,
            version: None,
        })
        .await
        .unwrap();
}

/// The registered agents as the scheduler sees them.
async fn fleet_of(archive: &vantage_server::archive::Archive) -> Vec<AgentInfo> {
    archive
        .agents()
        .await
        .unwrap()
        .iter()
        .map(|agent| AgentInfo::from(&agent.registration))
        .collect()
}

/// A throughput run holding both its agents exclusively for `duration_us`.
fn exclusive_run(
    id: &str,
    (client, server): (&str, &str),
    start_us: i64,
    duration_us: i64,
) -> RunRecord {
    let mut run = run_record(id, client, server, start_us);
    run.planned_end_us = start_us + duration_us;
    run.exclusive = true;
    run.test = "throughput".into();
    for claim in &mut run.claims {
        claim.mode = ClaimMode::Exclusive;
    }
    run
}

/// Conflicting overlaps among stored runs' planned times (non-starts hold nothing).
fn stored_overlaps(runs: &[RunRecord]) -> Vec<vantage_scheduler::Overlap> {
    let occupancy: Vec<vantage_scheduler::Occupancy> = runs
        .iter()
        .filter(|run| run.state != RunState::NonStart)
        .map(|run| vantage_scheduler::Occupancy {
            run_id: run.id.clone(),
            start: vantage_server::archive::from_us(run.planned_start_us),
            end: vantage_server::archive::from_us(run.planned_end_us),
            claims: run.claims.clone(),
        })
        .collect();
    vantage_scheduler::find_overlaps(&occupancy)
}

/// A pass places runs beyond its window's end (here the last occurrences, whose
/// reservation outlasts the window); a run an agent already holds there must be in its way
/// even though it starts after the window.
async fn runs_after_the_window_scenario(kind: Kind) {
    let (_db, archive, state) = planner_scenario(kind, "beyond", &["m1", "m2"]).await;
    // The window about to be planned is [now + 2 s, now + 20 s). One occurrence falls
    // 0.5 s before its end and reserves 4 s (1 s probe, 2 s timeout, 1 s setup guard),
    // without slip; a run the agents already hold starts 0.5 s after the window's end.
    let now = now_us();
    let every_ms = 4_000;
    let offset_ms = (now / 1_000 + 19_500).rem_euclid(every_ms);
    vantage_server::config_store::apply(
        &archive,
        &json!({
            "groups": [{"name": "all", "kind": "mesh", "members": ["*"]}],
            "tests": [{"name": "rtt", "type": "latency", "spec": {"count": 1, "timeout": "2s"}}],
            "tasks": [{"name": "lat", "test": "rtt", "group": "all", "every": "4s",
                       "offset": format!("{offset_ms}ms"), "slip": "0s", "directions": "one"}]
        }),
    )
    .await
    .unwrap();
    let options = PlannerOptions {
        horizon: Duration::from_secs(20),
        ..PlannerOptions::default()
    };
    let mut held = exclusive_run("held", ("m1", "m2"), now + 20_500_000, 60_000_000);
    held.state = RunState::Dispatched;
    archive.insert_runs(&[held]).await.unwrap();
    assert!(vantage_server::planner::tick(&state, &options)
        .await
        .unwrap());
    // Latency runs are light: each is placed when its client fetches it.
    let fleet = fleet_of(&archive).await;
    for agent in &fleet {
        vantage_server::planner::place_light_runs(&state, &agent.name, i64::MAX, Freshness::Exact)
            .await
            .unwrap();
    }

    let runs = archive.runs_between(0, i64::MAX).await.unwrap();
    let overlaps = stored_overlaps(&runs);
    assert!(
        overlaps.is_empty(),
        "planned on top of a held run: {overlaps:#?}"
    );
    assert!(
        runs.iter().any(|run| run.state == RunState::NonStart
            && run.reason.as_deref().unwrap_or_default().contains("held")),
        "the runs reaching into the held run are non-starts naming it: {runs:#?}"
    );
}

#[tokio::test]
async fn runs_placed_after_the_window_are_respected_on_sqlite() {
    runs_after_the_window_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn runs_placed_after_the_window_are_respected_on_postgres() {
    runs_after_the_window_scenario(Kind::Postgres).await;
}

/// An agent joining replans from the planner's lead time on: the exclusive runs of the
/// replanned stretch are placed, not pushed past their period by how far the previous
/// plan (made without the agent) reached.
async fn replan_after_a_join_scenario(kind: Kind) {
    let (_db, archive, state) = planner_scenario(kind, "rejoin", &["m1"]).await;
    vantage_server::config_store::apply(
        &archive,
        &json!({
            "groups": [{"name": "pair", "kind": "list", "pairs": [["m1", "m2"]]}],
            "tests": [{"name": "bulk", "type": "throughput", "spec": {"duration": "500ms"}}],
            "tasks": [{"name": "tp", "test": "bulk", "group": "pair", "every": "2s",
                       "directions": "one"}]
        }),
    )
    .await
    .unwrap();
    let options = PlannerOptions {
        horizon: Duration::from_secs(20),
        ..PlannerOptions::default()
    };
    assert!(vantage_server::planner::tick(&state, &options)
        .await
        .unwrap());
    register_agent(&archive, "m2").await;
    let joined_us = now_us();
    assert!(vantage_server::planner::tick(&state, &options)
        .await
        .unwrap());
    let ticked_us = now_us();
    let runs: Vec<RunRecord> = archive
        .runs_between(joined_us, i64::MAX)
        .await
        .unwrap()
        .into_iter()
        .filter(|run| run.planned_start_us >= joined_us)
        .collect();
    // Occurrences every 2 s from the pass's lead time (2 s) up to 20 s ahead. Those
    // within the lead time stay as the first pass planned them (non-starts), so only
    // runs starting 2 s after the pass ended are all from the replan.
    let scheduled = runs
        .iter()
        .filter(|run| run.state == RunState::Scheduled)
        .count();
    assert!(scheduled >= 8, "{runs:#?}");
    let replanned = |run: &&RunRecord| run.planned_start_us >= ticked_us + 2_000_000;
    assert!(
        runs.iter()
            .filter(replanned)
            .all(|run| run.state == RunState::Scheduled),
        "{:#?}",
        runs.iter()
            .filter(replanned)
            .find(|run| run.state != RunState::Scheduled)
    );
}

#[tokio::test]
async fn a_replan_after_a_join_places_the_whole_stretch_on_sqlite() {
    replan_after_a_join_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn a_replan_after_a_join_places_the_whole_stretch_on_postgres() {
    replan_after_a_join_scenario(Kind::Postgres).await;
}

/// Latency runs (light) are stored only once their client fetches them, placed around
/// the exclusive runs the planner reserved; an agent that fetches nothing still has
/// its light runs recorded as missed.
async fn light_runs_scenario(kind: Kind) {
    let (_db, archive, state) = planner_scenario(kind, "light", &["m1", "m2", "m3", "m4"]).await;
    vantage_server::config_store::apply(
        &archive,
        &json!({
            "groups": [{"name": "all", "kind": "mesh", "members": ["*"]},
                       {"name": "pair", "kind": "mesh", "members": ["m1", "m2"]}],
            "tests": [{"name": "rtt", "type": "latency", "spec": {"count": 1, "timeout": "1s"}},
                      {"name": "bulk", "type": "throughput", "spec": {"duration": "1s"}}],
            "tasks": [{"name": "lat", "test": "rtt", "group": "all", "every": "4s", "slip": "1s",
                       "directions": "one"},
                      {"name": "tp", "test": "bulk", "group": "pair", "every": "10s",
                       "directions": "both"}]
        }),
    )
    .await
    .unwrap();
    let options = PlannerOptions {
        horizon: Duration::from_secs(20),
        miss_grace: Duration::from_secs(1),
        ..PlannerOptions::default()
    };
    assert!(vantage_server::planner::tick(&state, &options)
        .await
        .unwrap());
    let runs = archive.runs_between(0, i64::MAX).await.unwrap();
    assert!(runs.iter().any(|run| run.task == "tp"), "{runs:#?}");
    assert!(runs.iter().all(|run| run.task == "tp"), "{runs:#?}");

    // Each run placed is handed out.
    let placed =
        vantage_server::planner::place_light_runs(&state, "m1", i64::MAX, Freshness::Exact)
            .await
            .unwrap();
    assert!(!placed.is_empty());
    assert!(placed.iter().all(|run| run.state == RunState::Dispatched));
    // Fetching again places nothing new.
    assert!(
        vantage_server::planner::place_light_runs(&state, "m1", i64::MAX, Freshness::Exact)
            .await
            .unwrap()
            .is_empty()
    );
    let runs = archive.runs_between(0, i64::MAX).await.unwrap();
    let light: Vec<&RunRecord> = runs.iter().filter(|run| run.task == "lat").collect();
    let handed_out = light
        .iter()
        .filter(|run| run.state == RunState::Dispatched)
        .count();
    assert_eq!(handed_out, placed.len());
    assert!(light
        .iter()
        .all(|run| matches!(run.state, RunState::Dispatched | RunState::NonStart)));
    assert!(light.iter().all(|run| run.client == "m1"), "{light:#?}");
    let overlaps = stored_overlaps(&runs);
    assert!(overlaps.is_empty(), "{overlaps:#?}");

    // m2, m3 and m4 fetch nothing: once overdue, their light runs are recorded as
    // missed (m3's runs, to m4, meet no throughput run, so they are never non-starts).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let missed = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        vantage_server::planner::tick(&state, &options)
            .await
            .unwrap();
        vantage_server::planner::record_overdue(&state, &options)
            .await
            .unwrap();
        let runs = archive.runs_between(0, i64::MAX).await.unwrap();
        let missed: Vec<RunRecord> = runs
            .into_iter()
            .filter(|run| run.task == "lat" && run.state == RunState::Missed && run.client == "m3")
            .collect();
        if !missed.is_empty() || tokio::time::Instant::now() > deadline {
            break missed;
        }
    };
    assert!(
        !missed.is_empty(),
        "no light run of an agent that fetched nothing was recorded as missed"
    );
    assert!(missed.iter().all(|run| run
        .reason
        .as_deref()
        .unwrap_or_default()
        .contains("never fetched")));
}

#[tokio::test]
async fn light_runs_are_placed_when_fetched_on_sqlite() {
    light_runs_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn light_runs_are_placed_when_fetched_on_postgres() {
    light_runs_scenario(Kind::Postgres).await;
}

/// A latency mesh of every agent every 4 s without slip (one probe, a 1 s timeout),
/// measured in `directions` ("one" or "both").
async fn apply_latency_mesh(archive: &vantage_server::archive::Archive, directions: &str) {
    vantage_server::config_store::apply(
        archive,
        &json!({
            "groups": [{"name": "all", "kind": "mesh", "members": ["*"]}],
            "tests": [{"name": "rtt", "type": "latency", "spec": {"count": 1, "timeout": "1s"}}],
            "tasks": [{"name": "lat", "test": "rtt", "group": "all", "every": "4s", "slip": "0s",
                       "directions": directions}]
        }),
    )
    .await
    .unwrap();
}

/// Light runs handed out at a fetch are one hand-out, not a row each: they are read from
/// it (the runs API, an agent's resynchronisation, an upload's check), a run that
/// reports is read from it with its result's state and times (it gets no row), and once
/// they are all overdue the planner records the rest missed and keeps the hand-out.
async fn handed_out_runs_scenario(kind: Kind) {
    let (_db, archive, state) = planner_scenario(kind, "handout", &["m1", "m2", "m3"]).await;
    apply_latency_mesh(&archive, "one").await;
    let options = PlannerOptions {
        horizon: Duration::from_secs(6),
        miss_grace: Duration::from_secs(1),
        ..PlannerOptions::default()
    };
    assert!(vantage_server::planner::tick(&state, &options)
        .await
        .unwrap());
    let mut placed = vantage_server::planner::place_light_runs(
        &state,
        "m1",
        now_us() + 6_000_000,
        Freshness::Exact,
    )
    .await
    .unwrap();
    placed.sort_by(|a, b| (a.planned_start_us, &a.id).cmp(&(b.planned_start_us, &b.id)));
    assert!(placed.len() >= 2, "{placed:#?}");
    assert!(placed.iter().all(|run| run.state == RunState::Dispatched));
    let ids =
        |runs: &[RunRecord]| -> Vec<String> { runs.iter().map(|run| run.id.clone()).collect() };

    // Read back from the hand-out as they were handed out.
    let listed: Vec<RunRecord> = archive
        .runs_between(0, i64::MAX)
        .await
        .unwrap()
        .into_iter()
        .filter(|run| run.client == "m1")
        .collect();
    assert_eq!(listed, placed);
    let resynchronised = archive.take_runs_for("m1", now_us(), true).await.unwrap();
    let not_ended: Vec<RunRecord> = placed
        .iter()
        .filter(|run| run.planned_end_us > now_us() + 500_000)
        .cloned()
        .collect();
    assert!(!not_ended.is_empty());
    for run in &not_ended {
        assert!(resynchronised.contains(run), "{} not given again", run.id);
    }

    // An upload is checked against its handed-out run, and completes it: no row of its
    // own, read from its hand-out with its result.
    let first = &placed[0];
    let upload_of = |run: &RunRecord, agent: &str| -> ResultUpload {
        serde_json::from_value(upload(&run.id, agent, 250.0)).unwrap()
    };
    // Measured ten minutes from its plan (an agent whose clock is off): found past the
    // hand-outs around its measured times.
    let mut far_off = upload_of(first, "m1");
    far_off.actual_start += chrono::Duration::minutes(10);
    far_off.actual_end += chrono::Duration::minutes(10);
    let outcome = archive.ingest(&far_off).await.unwrap();
    assert!(matches!(outcome.0, Ingest::Stored(_)), "{outcome:?}");
    assert_eq!(outcome.1.state, RunState::Completed);
    assert!(matches!(
        archive.ingest(&upload_of(first, "m1")).await.unwrap().0,
        Ingest::Duplicate
    ));
    let refusal = archive
        .ingest(&upload_of(&placed[1], "m2"))
        .await
        .unwrap_err();
    assert!(refusal.to_string().contains(&placed[1].id), "{refusal}");
    let stored = archive
        .run(&first.id)
        .await
        .unwrap()
        .expect("the run, from its hand-out");
    assert_eq!(stored.state, RunState::Completed);
    assert_eq!(
        (stored.planned_start_us, stored.spec.clone()),
        (first.planned_start_us, first.spec.clone())
    );
    assert_eq!(
        (stored.actual_start_us, stored.actual_end_us),
        (
            Some(to_us(far_off.actual_start)),
            Some(to_us(far_off.actual_end))
        )
    );
    assert_eq!(
        archive
            .runs_between(0, i64::MAX)
            .await
            .unwrap()
            .iter()
            .find(|run| run.id == first.id),
        Some(&stored)
    );
    assert_eq!(
        rows_of_run(&archive, &first.id).await,
        0,
        "a handed-out run that reported has no row"
    );
    assert!(
        !archive
            .take_runs_for("m1", now_us(), true)
            .await
            .unwrap()
            .iter()
            .any(|run| run.id == first.id),
        "a run with its result is not given again"
    );

    // Once every run handed out is overdue, the pass records those without a result
    // missed, and a late result still completes one.
    let last_end_us = placed.iter().map(|run| run.planned_end_us).max().unwrap();
    let wait_us = (last_end_us + 1_500_000 - now_us()).max(0);
    tokio::time::sleep(Duration::from_micros(wait_us as u64)).await;
    vantage_server::planner::record_overdue(&state, &options)
        .await
        .unwrap();
    let by_id: std::collections::HashMap<String, RunRecord> = archive
        .runs_between(0, i64::MAX)
        .await
        .unwrap()
        .into_iter()
        .map(|run| (run.id.clone(), run))
        .collect();
    assert_eq!(by_id[&first.id].state, RunState::Completed);
    for id in &ids(&placed)[1..] {
        let run = &by_id[id];
        assert_eq!(run.state, RunState::Missed, "{run:#?}");
        assert!(run
            .reason
            .as_deref()
            .unwrap_or_default()
            .contains("fetched the run but reported no result"));
    }
    // And warns of them, stored with the pass's other warnings.
    let warnings: Vec<String> = archive
        .alerts(&vantage_server::archive::AlertFilter {
            agent: Some("m1".into()),
            severity: None,
            from_us: None,
            to_us: None,
            limit: 100,
        })
        .await
        .unwrap()
        .into_iter()
        .map(|stored| stored.alert.message)
        .collect();
    assert!(
        warnings.iter().any(|message| message.contains("missed")
            && message.contains("fetched the run but reported no result")),
        "{warnings:#?}"
    );
    let late = archive.ingest(&upload_of(&placed[1], "m1")).await.unwrap();
    assert!(matches!(late.0, Ingest::Stored(_)), "{late:?}");
    assert_eq!(
        archive.run(&placed[1].id).await.unwrap().unwrap().state,
        RunState::Completed
    );
    // The swept hand-out is kept: its reported run is still listed as it went; a
    // second sweep finds nothing more to record.
    let listed: std::collections::HashMap<String, RunRecord> = archive
        .runs_between(0, i64::MAX)
        .await
        .unwrap()
        .into_iter()
        .filter(|run| run.client == "m1")
        .map(|run| (run.id.clone(), run))
        .collect();
    assert_eq!(listed.len(), placed.len(), "{listed:#?}");
    assert_eq!(listed[&first.id], stored);
    assert_eq!(listed[&placed[1].id].state, RunState::Completed);
    assert!(archive.sweep_handouts(now_us()).await.unwrap().is_empty());
    // Retention deletes swept hand-outs with the runs of their age.
    let deleted = archive.apply_retention(now_us()).await.unwrap();
    assert_eq!(deleted.light_handouts, 1, "{deleted:?}");
    assert!(!archive
        .runs_between(0, i64::MAX)
        .await
        .unwrap()
        .iter()
        .any(|run| run.id == first.id));
}

/// How many rows of `runs` have the id `run_id`.
async fn rows_of_run(archive: &Archive, run_id: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE id = $1")
        .bind(run_id)
        .fetch_one(archive.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn handed_out_runs_live_in_their_hand_out_until_swept_on_sqlite() {
    handed_out_runs_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn handed_out_runs_live_in_their_hand_out_until_swept_on_postgres() {
    handed_out_runs_scenario(Kind::Postgres).await;
}

/// A replica keeps the registrations it read while none is stored, by it or by another
/// replica sharing the database, and reads them again once one is.
async fn registrations_scenario(kind: Kind) {
    let (db, _archive, state) = planner_scenario(kind, "registrations", &["m1", "m2"]).await;
    let first = state.registrations().await.unwrap();
    assert_eq!(first["m2"].registration.addresses, ["127.0.0.1"]);
    assert!(std::sync::Arc::ptr_eq(
        &first,
        &state.registrations().await.unwrap()
    ));
    let other_replica = vantage_server::archive::Archive::open(&db.url)
        .await
        .unwrap();
    let mut moved = first["m2"].registration.clone();
    moved.addresses = vec!["127.0.0.2".into()];
    other_replica.register_agent(&moved).await.unwrap();
    let again = state.registrations().await.unwrap();
    assert_eq!(again["m2"].registration.addresses, ["127.0.0.2"]);
    assert_eq!(again.len(), 2);
}

#[tokio::test]
async fn registrations_are_read_again_when_one_is_stored_on_sqlite() {
    registrations_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn registrations_are_read_again_when_one_is_stored_on_postgres() {
    registrations_scenario(Kind::Postgres).await;
}

/// A replica reads the exclusive runs in light runs' way once for many fetches; an
/// exclusive run stored after that read (an on-demand test, say) is still in the way of
/// the light runs placed after it.
async fn light_runs_meet_new_exclusive_runs_scenario(kind: Kind) {
    let (_db, archive, state) = planner_scenario(kind, "epoch", &["m1", "m2", "m3"]).await;
    apply_latency_mesh(&archive, "both").await;
    let options = PlannerOptions {
        horizon: Duration::from_secs(20),
        ..PlannerOptions::default()
    };
    assert!(vantage_server::planner::tick(&state, &options)
        .await
        .unwrap());
    // m1's fetch reads the exclusive runs (none yet).
    assert!(
        !vantage_server::planner::place_light_runs(&state, "m1", i64::MAX, Freshness::Exact)
            .await
            .unwrap()
            .is_empty()
    );
    let held = exclusive_run("held", ("m2", "m3"), now_us(), 60_000_000);
    archive.insert_runs(&[held]).await.unwrap();
    vantage_server::planner::place_light_runs(&state, "m2", i64::MAX, Freshness::Exact)
        .await
        .unwrap();

    // m1's runs were placed before the held run was stored (which an on-demand
    // request's placement would have respected); m2's after.
    let runs: Vec<RunRecord> = archive
        .runs_between(0, i64::MAX)
        .await
        .unwrap()
        .into_iter()
        .filter(|run| run.client != "m1")
        .collect();
    let overlaps = stored_overlaps(&runs);
    assert!(
        overlaps.is_empty(),
        "light runs placed on top of an exclusive run stored after the read: {overlaps:#?}"
    );
    let mine: Vec<&RunRecord> = runs
        .iter()
        .filter(|run| run.client == "m2" && run.task == "lat")
        .collect();
    assert!(!mine.is_empty());
    assert!(
        mine.iter().all(|run| run.state == RunState::NonStart
            && run.reason.as_deref().unwrap_or_default().contains("held")),
        "m2's light runs, all during the held run, are non-starts naming it: {mine:#?}"
    );
}

#[tokio::test]
async fn light_runs_meet_exclusive_runs_stored_after_a_read_on_sqlite() {
    light_runs_meet_new_exclusive_runs_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn light_runs_meet_exclusive_runs_stored_after_a_read_on_postgres() {
    light_runs_meet_new_exclusive_runs_scenario(Kind::Postgres).await;
}

/// A throughput mesh that cannot fit its period is sampled and said once: no run
/// falls off the end of a period as a non-start, and one alert gives the numbers
/// however many occurrences and ticks follow, until the configuration changes.
async fn overload_scenario(kind: Kind) {
    let (_db, archive, state) = planner_scenario(kind, "overload", &["m1", "m2", "m3", "m4"]).await;
    // Each agent takes part in 6 runs (3 rounds per direction) of 10 s + 1 s guard:
    // 66 s, more than the 60 s period.
    let tasks = |every: &str| {
        json!({
            "groups": [{"name": "all", "kind": "mesh", "members": ["*"]}],
            "tests": [{"name": "bulk", "type": "throughput", "spec": {"duration": "10s"}}],
            "tasks": [{"name": "tp", "test": "bulk", "group": "all", "every": every}]
        })
    };
    vantage_server::config_store::apply(&archive, &tasks("60s"))
        .await
        .unwrap();
    let overload_alerts = || async {
        archive
            .alerts(&vantage_server::archive::AlertFilter {
                agent: None,
                severity: None,
                from_us: None,
                to_us: None,
                limit: 100,
            })
            .await
            .unwrap()
            .into_iter()
            .filter(|stored| stored.alert.message.contains("does not fit its period"))
            .map(|stored| stored.alert.message)
            .collect::<Vec<String>>()
    };
    // One replica's ticks (each default names a new replica, which the lease would refuse).
    let replica = PlannerOptions::default();
    // Two or three occurrences in the first tick, two more in the second.
    for horizon_s in [150, 270] {
        let options = PlannerOptions {
            horizon: Duration::from_secs(horizon_s),
            ..replica.clone()
        };
        assert!(vantage_server::planner::tick(&state, &options)
            .await
            .unwrap());
    }
    let runs = archive.runs_between(0, i64::MAX).await.unwrap();
    assert!(
        runs.iter().all(|run| run.state == RunState::Scheduled),
        "{:#?}",
        runs.iter().find(|run| run.state != RunState::Scheduled)
    );
    // 6 of the 12 directed runs per occurrence, 4 or 5 occurrences.
    assert!((24..=30).contains(&runs.len()), "{}", runs.len());
    assert_eq!(
        overload_alerts().await,
        vec!["task 'tp' does not fit its period: agent:m1 takes part in 6 of its runs, 0.02 h back to back, \
              but the 1m period leaves 0.02 h after its slip. Each occurrence runs 1 round in 2 \
              (about 3 of 6 rounds), so every agent takes part in every occurrence and every pair is measured once every 2 periods; \
              to measure every pair each time, set every = \"2m\" (or use fewer agents, a shorter test or round gap)"
            .to_string()]
    );
    // At the suggested period the whole campaign fits: nothing more is said.
    vantage_server::config_store::apply(&archive, &tasks("2m"))
        .await
        .unwrap();
    let options = PlannerOptions {
        horizon: Duration::from_secs(400),
        ..replica
    };
    assert!(vantage_server::planner::tick(&state, &options)
        .await
        .unwrap());
    assert_eq!(overload_alerts().await.len(), 1);
}

#[tokio::test]
async fn a_campaign_that_cannot_fit_is_sampled_and_said_once_on_sqlite() {
    overload_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn a_campaign_that_cannot_fit_is_sampled_and_said_once_on_postgres() {
    overload_scenario(Kind::Postgres).await;
}

/// Tokens expire and can be revoked: an expired token is refused with its expiry, a
/// revoked one from the next request on, and listings show ids, never token values.
async fn token_lifecycle_scenario(kind: Kind) {
    let db = TestDb::new(kind, "tokens").await;
    let server = common::start(&db, PlannerOptions::default()).await;
    let admin = Api::new(&server.url(), &server.admin_token);

    // A lifetime is honoured and reported.
    let (status, body) = admin
        .post(
            "/api/v1/tokens",
            json!({"name": "temp", "role": "reader", "expires_in": "1h"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let expires = chrono::DateTime::parse_from_rfc3339(body["expires"].as_str().unwrap())
        .unwrap()
        .timestamp_micros();
    assert!(
        (expires - now_us() - 3_600_000_000).abs() < 60_000_000,
        "{body}"
    );
    let temp = Api::new(&server.url(), body["token"].as_str().unwrap());
    assert_eq!(temp.get("/api/v1/agents").await.0, 200);
    for (bad, message) in [
        (
            json!({"name": "x", "role": "reader", "expires_in": "soon"}),
            "field 'expires_in'",
        ),
        (
            json!({"name": "x", "role": "reader", "expires_in": "0s"}),
            "longer than 0 s",
        ),
        (json!({"name": "x", "role": "reader", "ttl": "1h"}), "ttl"),
    ] {
        let (status, body) = admin.post("/api/v1/tokens", bad).await;
        assert_eq!(status, 400, "{body}");
        assert!(body["error"].as_str().unwrap().contains(message), "{body}");
    }

    // A token past its expiry is refused, naming when it expired.
    server
        .state
        .archive
        .add_expiring_token(
            "expired-secret",
            "old-agent",
            vantage_model::control::Role::Agent,
            Some(now_us() - 1_000_000),
        )
        .await
        .unwrap();
    let expired = Api::new(&server.url(), "expired-secret");
    let (status, body) = expired.get("/api/v1/agents").await;
    assert_eq!(status, 401, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(
        message.starts_with("token 'old-agent' expired at ") && message.contains("ask an admin"),
        "{body}"
    );

    // Revocation: the agent's token works, is revoked by id, and is refused at once.
    let agent_token = admin.token("r1", "agent").await;
    let agent = Api::new(&server.url(), &agent_token);
    let heartbeat = "/api/v1/agents/r1/heartbeat";
    assert_ne!(agent.post(heartbeat, json!({})).await.0, 401);
    let (status, listing) = admin.get("/api/v1/tokens").await;
    assert_eq!(status, 200, "{listing}");
    assert!(
        !listing.to_string().contains(&agent_token),
        "a listing never shows token values"
    );
    let id = listing["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|token| token["name"] == "r1")
        .expect("r1 listed")["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(id, vantage_server::archive::token_id(&agent_token));
    let reader = Api::new(&server.url(), &admin.token("viewer", "reader").await);
    let (status, _) = reader
        .call("DELETE", &format!("/api/v1/tokens/{id}"), None)
        .await;
    assert_eq!(status, 403, "only admins revoke");
    let (status, body) = admin
        .call("DELETE", &format!("/api/v1/tokens/{id}"), None)
        .await;
    assert_eq!(
        (status, body["revoked"].as_str()),
        (200, Some(id.as_str())),
        "{body}"
    );
    let (status, body) = agent.post(heartbeat, json!({})).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unknown or revoked bearer token"))
    );
    let (status, body) = admin
        .call("DELETE", &format!("/api/v1/tokens/{id}"), None)
        .await;
    assert_eq!(status, 404, "{body}");
    let (_, listing) = admin.get("/api/v1/tokens").await;
    let revoked = listing["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|token| token["id"] == id.as_str())
        .unwrap();
    assert!(revoked["revoked"].is_string(), "{revoked}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn tokens_expire_and_are_revoked_on_sqlite() {
    token_lifecycle_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn tokens_expire_and_are_revoked_on_postgres() {
    token_lifecycle_scenario(Kind::Postgres).await;
}

/// What long polls look at comes from the fleet's hints: runs and marks this replica
/// stores are in the next look at once, a claim clears the agent's waiting runs, a hint
/// bounds its runs by start, and an exact look reads the archive past the hints. (Only
/// what holds however old the hints are is asserted.)
async fn poll_hints_scenario(kind: Kind) {
    use vantage_server::poll_hints::PollHints;
    let (_db, archive, _state) = planner_scenario(kind, "hints", &["a", "b"]).await;
    let hints = PollHints::default();
    let waiting = |agent: &'static str, until_us: i64, freshness: Freshness| {
        let (hints, archive) = (&hints, &archive);
        async move {
            hints
                .may_have_waiting(archive, agent, until_us, freshness)
                .await
                .unwrap()
        }
    };
    let start = now_us() + 10_000_000;
    assert!(!waiting("a", i64::MAX, Freshness::Hinted).await);
    archive
        .insert_runs(&[run_record("h1", "a", "b", start)])
        .await
        .unwrap();
    hints.runs_stored();
    assert!(waiting("a", i64::MAX, Freshness::Hinted).await);
    assert!(
        !waiting("a", start, Freshness::Hinted).await,
        "starts at until"
    );
    assert!(
        !waiting("b", i64::MAX, Freshness::Hinted).await,
        "b is its server"
    );
    let claimed = archive.take_runs_for("a", i64::MAX, false).await.unwrap();
    assert_eq!(claimed.len(), 1);
    hints.waiting_claimed("a");
    assert!(!waiting("a", i64::MAX, Freshness::Hinted).await);
    assert!(waiting("b", i64::MAX, Freshness::Exact).await);

    let marks = |freshness| hints.marks(&archive, ["hint-m", "hint-unset"], freshness);
    archive.set_planner_mark("hint-m", 5).await.unwrap();
    hints.runs_stored();
    assert_eq!(marks(Freshness::Hinted).await.unwrap(), [Some(5), None]);
    archive.set_planner_mark("hint-m", 7).await.unwrap();
    hints.mark_set("hint-m", 7);
    assert_eq!(marks(Freshness::Hinted).await.unwrap(), [Some(7), None]);
    // Stored without telling the hints (as another replica would).
    archive.set_planner_mark("hint-m", 9).await.unwrap();
    assert_eq!(marks(Freshness::Exact).await.unwrap(), [Some(9), None]);
    archive.close().await;
}

#[tokio::test]
async fn poll_hints_follow_what_is_stored_on_sqlite() {
    poll_hints_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn poll_hints_follow_what_is_stored_on_postgres() {
    poll_hints_scenario(Kind::Postgres).await;
}

/// Agents seen at once (a fleet's heartbeats) are recorded together: each caller learns
/// whether its agent is registered, and every registered one is marked seen.
async fn agents_seen_scenario(kind: Kind) {
    let names: Vec<String> = (0..600).map(|n| format!("seen-{n}")).collect();
    let registered: Vec<&str> = names[..500].iter().map(String::as_str).collect();
    let (_db, archive, _state) = planner_scenario(kind, "seen", &registered).await;
    // Registration marks an agent seen; older marks show which ones the touches set.
    sqlx::query("UPDATE agents SET last_seen_us = 0")
        .execute(archive.pool())
        .await
        .unwrap();
    let before_us = now_us();
    // Every registered agent twice (a heartbeat and a fetch at once), and 100 unknown.
    let touches = names
        .iter()
        .chain(&names[..500])
        .map(|name| archive.touch_agent(name));
    let known = futures_util::future::join_all(touches).await;
    for (name, known) in names.iter().chain(&names[..500]).zip(known) {
        assert_eq!(
            known.unwrap(),
            registered.contains(&name.as_str()),
            "{name}"
        );
    }
    let agents = archive.agents().await.unwrap();
    assert_eq!(agents.len(), 500);
    for agent in agents {
        assert!(
            agent.last_seen_at.timestamp_micros() >= before_us,
            "{} not marked seen",
            agent.registration.name
        );
    }
    archive.close().await;
}

#[tokio::test]
async fn agents_seen_together_are_each_recorded_on_sqlite() {
    agents_seen_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn agents_seen_together_are_each_recorded_on_postgres() {
    agents_seen_scenario(Kind::Postgres).await;
}
