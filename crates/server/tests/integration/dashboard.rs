//! The dashboard's server side over HTTP, on SQLite and PostgreSQL alike: the page
//! and assets, the cookie session (and what it refuses), and the mesh grid's states
//! (thresholds, the pair's baseline, hysteresis, staleness).

use crate::common;

use common::{Api, Kind, TestDb};
use serde_json::json;
use vantage_scheduler::{agent_resource, Claim, ClaimMode};
use vantage_server::archive::{from_us, now_us, Archive, RunRecord, RunState};
use vantage_server::planner::PlannerOptions;

/// Stores a completed latency result of `client` → `server` with median RTT
/// `median_us`, started at `start_us`.
async fn latency_at(
    archive: &Archive,
    id: &str,
    client: &str,
    server: &str,
    start_us: i64,
    median_us: f64,
) {
    let run = RunRecord {
        id: id.into(),
        task: "mesh".into(),
        test: "latency".into(),
        test_name: "rtt".into(),
        client: client.into(),
        server: server.into(),
        target: None,
        spec: json!({}).into(),
        exclusive: false,
        reverse: false,
        priority: 0,
        claims: [client, server]
            .map(|agent| Claim {
                resource: agent_resource(agent),
                mode: ClaimMode::Shared,
            })
            .to_vec(),
        planned_start_us: start_us,
        planned_end_us: start_us + 1_000_000,
        actual_start_us: None,
        actual_end_us: None,
        state: RunState::Scheduled,
        reason: None,
    };
    archive.insert_runs(&[run]).await.unwrap();
    let upload: vantage_model::control::ResultUpload = serde_json::from_value(json!({
        "run_id": id, "agent": client, "outcome": "completed",
        "actual_start": from_us(start_us), "actual_end": from_us(start_us + 1_000_000),
        "result": {"test": "latency", "summary": {
            "sent": 10, "received": 10, "loss_ratio": 0.0,
            "rtt_us": {"min": median_us, "median": median_us, "mean": median_us, "p95": median_us,
                       "p99": median_us, "max": median_us, "stddev": 0.0},
            "jitter_us": {"rfc3550": 1.0, "mean_abs_delta": 1.0, "median_abs_delta": 1.0}}}
    }))
    .unwrap();
    archive.ingest(&upload).await.unwrap();
}

fn set_cookie(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("set-cookie")
        .expect("a Set-Cookie header")
        .to_str()
        .unwrap()
        .to_string()
}

async fn session_scenario(kind: Kind) {
    let db = TestDb::new(kind, "dashboard_session").await;
    let server = common::start(&db, PlannerOptions::default()).await;
    let url = server.url();
    let admin = Api::new(&url, &server.admin_token);
    let reader_token = admin.token("viewer", "reader").await;
    let agent_token = admin.token("a", "agent").await;
    let http = reqwest::Client::new();

    // The page and its assets need no token; the page allows only its own scripts.
    let page = http.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(page.text().await.unwrap().contains("/assets/app.js"));
    for (asset, content_type) in [("app.js", "text/javascript"), ("app.css", "text/css")] {
        let response = http
            .get(format!("{url}/assets/{asset}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{asset}");
        assert!(response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with(content_type));
    }
    let missing = http
        .get(format!("{url}/assets/nope.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(missing
        .text()
        .await
        .unwrap()
        .contains("no dashboard asset 'nope.js'"));

    // Sign-in: a bad token, an agent's token and a malformed body are refused.
    let sign_in = |body: serde_json::Value| {
        http.post(format!("{url}/api/v1/session"))
            .json(&body)
            .send()
    };
    let refused = sign_in(json!({"token": "wrong"})).await.unwrap();
    assert_eq!(refused.status(), 401);
    assert!(refused.headers().get("set-cookie").is_none());
    let refused = sign_in(json!({"token": agent_token})).await.unwrap();
    assert_eq!(refused.status(), 403);
    assert!(refused.text().await.unwrap().contains("is an agent's"));
    let refused = sign_in(json!({"tokn": "x"})).await.unwrap();
    assert_eq!(refused.status(), 400);

    // A reader's session: an HttpOnly, SameSite=Strict cookie that reads but cannot change.
    let signed_in = sign_in(json!({"token": reader_token})).await.unwrap();
    assert_eq!(signed_in.status(), 200);
    let cookie_header = set_cookie(&signed_in);
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(cookie_header.contains(attribute), "{cookie_header}");
    }
    assert!(
        !cookie_header.contains(&reader_token),
        "the token is not sent back as is"
    );
    assert_eq!(
        signed_in.json::<serde_json::Value>().await.unwrap(),
        json!({"name": "viewer", "role": "reader"})
    );
    let cookie = cookie_header.split(';').next().unwrap().to_string();
    let with_cookie = |method: reqwest::Method, path: &str| {
        http.request(method, format!("{url}{path}"))
            .header("cookie", &cookie)
    };
    let whoami = with_cookie(reqwest::Method::GET, "/api/v1/session")
        .send()
        .await
        .unwrap();
    assert_eq!(
        whoami.json::<serde_json::Value>().await.unwrap()["role"],
        "reader"
    );
    let agents = with_cookie(reqwest::Method::GET, "/api/v1/agents")
        .send()
        .await
        .unwrap();
    assert_eq!(agents.status(), 200);
    // A change through the cookie needs the dashboard's header, then the role.
    let body = json!({"source": "a", "destination": "b"});
    let forged = with_cookie(reqwest::Method::POST, "/api/v1/diagnose")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    assert!(forged.text().await.unwrap().contains("x-vantage-dashboard"));
    let read_only = with_cookie(reqwest::Method::POST, "/api/v1/diagnose")
        .header("x-vantage-dashboard", "1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(read_only.status(), 403);
    assert!(read_only
        .text()
        .await
        .unwrap()
        .contains("has role 'reader'"));

    // Signing out clears the cookie; revoking the token ends every session it has.
    let signed_out = http
        .delete(format!("{url}/api/v1/session"))
        .send()
        .await
        .unwrap();
    assert!(set_cookie(&signed_out).contains("Max-Age=0"));
    let (_, tokens) = admin.get("/api/v1/tokens").await;
    let id = tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|token| token["name"] == "viewer")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, _) = admin
        .call("DELETE", &format!("/api/v1/tokens/{id}"), None)
        .await;
    assert_eq!(status, 200);
    let revoked = with_cookie(reqwest::Method::GET, "/api/v1/agents")
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 401);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn session_on_sqlite() {
    session_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn session_on_postgres() {
    session_scenario(Kind::Postgres).await;
}

async fn grid_scenario(kind: Kind) {
    let db = TestDb::new(kind, "dashboard_grid").await;
    let server = common::start(&db, PlannerOptions::default()).await;
    let admin = Api::new(&server.url(), &server.admin_token);
    let archive = &server.state.archive;
    let now = now_us();
    // a → b: five results at 5 ms, then three at 20 ms, every 5 s up to now.
    let medians = [5e3, 5e3, 5e3, 5e3, 5e3, 20e3, 20e3, 20e3];
    for (index, median_us) in medians.iter().enumerate() {
        let start_us = now - (medians.len() - index) as i64 * 5_000_000;
        latency_at(
            archive,
            &format!("ab-{index}"),
            "a",
            "b",
            start_us,
            *median_us,
        )
        .await;
    }
    // b → a: two results 5 s apart, the newest ten minutes ago: overdue.
    for index in 0..2 {
        let start_us = now - 600_000_000 - index * 5_000_000;
        latency_at(
            archive,
            &format!("ba-{index}"),
            "b",
            "a",
            start_us,
            400_000.0,
        )
        .await;
    }

    let (status, grid) = admin
        .get("/api/v1/grid?metric=rtt_median_us&hysteresis=3")
        .await;
    assert_eq!(status, 200, "{grid}");
    let names: Vec<&str> = grid["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|agent| agent["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let cells = &grid["cells"];
    assert_eq!(cells["client"], json!([0, 1]));
    assert_eq!(cells["server"], json!([1, 0]));
    // Three 20 ms results against a 5 ms baseline (4×): critical after three in a row.
    assert_eq!(cells["value"][0], 20e3);
    assert_eq!(cells["baseline"][0], 5e3);
    assert_eq!(cells["state"][0], "critical");
    assert_eq!(cells["stale"][0], false);
    assert_eq!(cells["results"][0], 8);
    // 400 ms is past G.114's critical RTT; two results make no baseline; overdue.
    assert_eq!(cells["state"][1], "critical");
    assert_eq!(cells["baseline"][1], json!(null));
    assert_eq!(cells["stale"][1], true);

    // Four needed: the three 20 ms results have not turned it yet.
    let (_, grid) = admin.get("/api/v1/grid?hysteresis=4").await;
    assert_eq!(grid["cells"]["state"][0], "ok");
    assert_eq!(grid["cells"]["latest_state"][0], "critical");
    // An absolute threshold of the caller's: 10 ms is a warning on its own.
    let (_, grid) = admin
        .get("/api/v1/grid?hysteresis=1&warning=10000&critical=1000000")
        .await;
    assert_eq!(grid["scale"]["warning"], 10000.0);
    assert_eq!(
        grid["cells"]["state"][0], "critical",
        "4× the baseline stays critical"
    );
    // A window that ends before b → a's results leaves only a → b.
    let (_, grid) = admin.get("/api/v1/grid?window=2m").await;
    assert_eq!(grid["cells"]["client"], json!([0]));

    // Results stored after the grid was first read are caught up on the next read
    // (the grid keeps its values in memory and reads only what arrived since, so
    // this holds whichever server sharing the database stored them): three more
    // at 5 ms turn a → b back to ok.
    for index in 0..3 {
        let start_us = now - 4_000_000 + index * 1_000_000;
        latency_at(
            archive,
            &format!("ab-late-{index}"),
            "a",
            "b",
            start_us,
            5e3,
        )
        .await;
    }
    let (_, grid) = admin.get("/api/v1/grid?hysteresis=3").await;
    assert_eq!(grid["cells"]["value"][0], 5e3);
    assert_eq!(grid["cells"]["state"][0], "ok");
    assert_eq!(grid["cells"]["results"][0], 11);

    for (query, message) in [
        ("metric=sent_bps", "a grid cannot be coloured by 'sent_bps'"),
        ("hysteresis=0", "'hysteresis': must be 1 to 10"),
        ("window=48h", "'window': at most 24h"),
        ("warning=-1", "'warning': must be a non-negative number"),
        ("colour=red", "unknown field"),
    ] {
        let (status, body) = admin.get(&format!("/api/v1/grid?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(message),
            "{query}: {body}"
        );
    }
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn grid_on_sqlite() {
    grid_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn grid_on_postgres() {
    grid_scenario(Kind::Postgres).await;
}

async fn alerts_scenario(kind: Kind) {
    let db = TestDb::new(kind, "dashboard_alerts").await;
    let server = common::start(&db, PlannerOptions::default()).await;
    let admin = Api::new(&server.url(), &server.admin_token);
    let reader = Api::new(&server.url(), &admin.token("viewer", "reader").await);
    let now = chrono::Utc::now();
    for (severity, agents, minutes_ago, message) in [
        ("warning", vec!["a", "b"], 1, "newer a-b warning"),
        ("critical", vec!["b", "c"], 2, "b-c critical"),
        ("info", vec!["ab"], 120, "old info for ab"),
    ] {
        let (status, body) = admin
            .post(
                "/api/v1/alerts",
                json!({"severity": severity, "message": message, "agents": agents, "tags": {"k": "v"},
                       "time": now - chrono::Duration::minutes(minutes_ago)}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    // Stored, newest first; an agent filter matches whole names ("a" is not "ab").
    let (status, body) = reader.get("/api/v1/alerts").await;
    assert_eq!(status, 200, "{body}");
    let messages: Vec<&str> = body["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|alert| alert["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        messages,
        ["newer a-b warning", "b-c critical", "old info for ab"]
    );
    assert_eq!(body["alerts"][0]["tags"], json!({"k": "v"}));
    assert!(body["alerts"][0]["id"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));
    let (_, body) = reader.get("/api/v1/alerts?agent=a").await;
    assert_eq!(body["alerts"].as_array().unwrap().len(), 1, "{body}");
    // LIKE's wildcards in a name are literal: "_" is not any one character.
    let (_, body) = reader.get("/api/v1/alerts?agent=_b").await;
    assert_eq!(body["alerts"], json!([]), "{body}");
    let (_, body) = reader.get("/api/v1/alerts?agent=b&severity=critical").await;
    assert_eq!(body["alerts"][0]["message"], "b-c critical");
    let (_, body) = reader.get("/api/v1/alerts?limit=1").await;
    assert_eq!(body["alerts"].as_array().unwrap().len(), 1);
    for (query, message) in [
        (
            "severity=fatal",
            "'fatal' is not one of info, warning, critical",
        ),
        ("limit=0", "'limit': must be 1 to 10000"),
        ("from=yesterday", "from"),
    ] {
        let (status, body) = reader.get(&format!("/api/v1/alerts?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(message),
            "{query}: {body}"
        );
    }
    // Retention deletes alerts older than it keeps.
    let (status, body) = admin.post("/api/v1/retention", json!({"keep": "1h"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["deleted"]["alerts"], 1, "{body}");
    let (_, body) = reader.get("/api/v1/alerts").await;
    assert_eq!(body["alerts"].as_array().unwrap().len(), 2);

    // An agent's version is stored as it registers, and bounded.
    let registration = |version: String| json!({"name": "v1", "addresses": ["127.0.0.1"], "endpoint_port": 9, "accepts_inbound": true, "version": version});
    let (status, body) = admin
        .post("/api/v1/agents", registration("x".repeat(65)))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("'version': at most 64 bytes"));
    let (status, body) = admin
        .post("/api/v1/agents", registration("1.2.3".into()))
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = reader.get("/api/v1/agents").await;
    assert_eq!(body["agents"][0]["version"], "1.2.3", "{body}");

    // The diagnosis jobs list: none yet; its limit is bounded.
    let (status, body) = reader.get("/api/v1/diagnose").await;
    assert_eq!((status, body), (200, json!({"jobs": []})));
    let (status, _) = reader.get("/api/v1/diagnose?limit=5000").await;
    assert_eq!(status, 400);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn alerts_on_sqlite() {
    alerts_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn alerts_on_postgres() {
    alerts_scenario(Kind::Postgres).await;
}
