//! Test harness: one archive per test on SQLite (temp file) or PostgreSQL (a unique
//! schema in database `test` at 127.0.0.1:5432, dropped afterwards), and a running server.

use std::process::Command;

use vantage_server::planner::PlannerOptions;
use vantage_server::service::{self, RunningServer, ServerOptions};

pub const POSTGRES_BASE: &str = "postgres://postgres@127.0.0.1:5432/test";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// A fresh, empty database; removed on drop (even when the test fails).
pub struct TestDb {
    pub url: String,
    schema: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub async fn new(kind: Kind, label: &str) -> TestDb {
        match kind {
            Kind::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite://{}", dir.path().join("archive.db").display());
                TestDb {
                    url,
                    schema: None,
                    _dir: Some(dir),
                }
            }
            Kind::Postgres => {
                let schema = format!(
                    "vt_{label}_{}_{}",
                    std::process::id(),
                    rand::random::<u32>()
                );
                let created = psql(&format!("CREATE SCHEMA {schema}"));
                assert!(
                    created.status.success(),
                    "PostgreSQL at 127.0.0.1:5432 (db test, trust auth) is required: {}",
                    String::from_utf8_lossy(&created.stderr)
                );
                TestDb {
                    url: format!("{POSTGRES_BASE}?options=-c%20search_path%3D{schema}"),
                    schema: Some(schema),
                    _dir: None,
                }
            }
        }
    }

    /// The value of a one-value query on a PostgreSQL database, as psql prints it.
    pub fn postgres_value(&self, query: &str) -> String {
        let schema = self.schema.as_ref().expect("a PostgreSQL database");
        let output = psql(&format!("SET search_path TO {schema}; {query}"));
        assert!(
            output.status.success(),
            "psql failed on '{query}': {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }
}

/// Runs `sql` in database `test` (unaligned, tuples only, stopping at the first error).
fn psql(sql: &str) -> std::process::Output {
    Command::new("psql")
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "test"])
        .args(["-v", "ON_ERROR_STOP=1", "-qAtc", sql])
        .output()
        .expect("psql must be installed (scripts/install-deps installs postgresql)")
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(schema) = &self.schema {
            let _ = psql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
        }
    }
}

pub fn options(db: &TestDb, planner: PlannerOptions) -> ServerOptions {
    ServerOptions {
        database_url: db.url.clone(),
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_token: Some("admin-secret".into()),
        planner,
        http: vantage_server::http::HttpLimits::default(),
        tls: None,
        transfers: Default::default(),
    }
}

pub async fn start(db: &TestDb, planner: PlannerOptions) -> RunningServer {
    service::start(options(db, planner))
        .await
        .expect("server starts")
}

/// A server whose planner ticks fast and plans `horizon` ahead, and its admin client
/// (which mints each agent its own token): how the end-to-end fleet tests start.
pub async fn start_fleet_server(
    db: &TestDb,
    horizon: std::time::Duration,
    miss_grace: std::time::Duration,
) -> (RunningServer, Api) {
    let server = start(
        db,
        PlannerOptions {
            tick: std::time::Duration::from_millis(500),
            horizon,
            miss_grace,
            ..PlannerOptions::default()
        },
    )
    .await;
    let admin = Api::new(&server.url(), &server.admin_token);
    (server, admin)
}

/// A small JSON client for the API.
pub struct Api {
    pub base: String,
    pub token: String,
    pub http: reqwest::Client,
}

impl Api {
    pub fn new(base: &str, token: &str) -> Api {
        Api {
            base: base.to_string(),
            token: token.to_string(),
            http: reqwest::Client::new(),
        }
    }

    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        let value = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        (status, value)
    }

    pub async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        self.call("GET", path, None).await
    }

    pub async fn post(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.call("POST", path, Some(body)).await
    }

    /// Creates a token with `role` using this (admin) client.
    pub async fn token(&self, name: &str, role: &str) -> String {
        let (status, body) = self
            .post(
                "/api/v1/tokens",
                serde_json::json!({"name": name, "role": role}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["token"].as_str().unwrap().to_string()
    }
}

/// Runs an in-process agent `name`, with its own token and a spool under `spools`, its
/// endpoint on 127.0.0.1, until `stopped` turns true; `adjust` sets other options.
pub async fn spawn_agent(
    admin: &Api,
    url: &str,
    name: &str,
    spools: &std::path::Path,
    stopped: &tokio::sync::watch::Receiver<bool>,
    adjust: impl FnOnce(&mut vantage_agent::AgentOptions),
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    let mut options = vantage_agent::AgentOptions::new(
        url,
        &admin.token(name, "agent").await,
        name,
        spools.join(name),
    );
    options.endpoint_listen = Some(std::net::Ipv4Addr::LOCALHOST.into());
    adjust(&mut options);
    let mut stopped = stopped.clone();
    tokio::spawn(vantage_agent::run(options, async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    }))
}

/// What each registered agent registered with (addresses, ports, tags).
pub async fn registrations(
    server: &RunningServer,
) -> Vec<vantage_model::control::AgentRegistration> {
    server
        .state
        .archive
        .agents()
        .await
        .unwrap()
        .into_iter()
        .map(|agent| agent.registration)
        .collect()
}

/// What agent `name` registered with.
pub async fn registration(
    server: &RunningServer,
    name: &str,
) -> vantage_model::control::AgentRegistration {
    registrations(server)
        .await
        .into_iter()
        .find(|registration| registration.name == name)
        .unwrap_or_else(|| panic!("agent '{name}' registered"))
}

/// Polls `check` every half second until it gives a value, for at most `limit`.
pub async fn wait_for<T>(
    limit: std::time::Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// Waits (up to 20 s) until every agent of `names` has registered, so that a
/// configuration applied next is planned once, for all of them, rather than first
/// for some and then again as the others join.
pub async fn wait_for_registrations(server: &RunningServer, names: &[&str]) {
    let what = format!("agents {names:?} to register");
    wait_for(std::time::Duration::from_secs(20), &what, async || {
        let registered = registrations(server).await;
        names
            .iter()
            .all(|name| registered.iter().any(|known| known.name == *name))
            .then_some(())
    })
    .await;
}

/// Shows agent and server logs in the output of a failing test.
pub fn show_logs(filter: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_test_writer()
        .try_init();
}

/// Stops the agents (each watching one of these senders) even when a test fails half-way.
pub struct AgentsGuard(pub Vec<tokio::sync::watch::Sender<bool>>);

impl Drop for AgentsGuard {
    fn drop(&mut self) {
        for stop in &self.0 {
            let _ = stop.send(true);
        }
    }
}

/// The samples a Prometheus exposition's reference parsers read from `text`
/// (`scripts/check-exposition FORMAT`), one JSON object each; fails with their message
/// when they refuse it.
pub fn exposition_samples(format: &str, text: &str) -> Vec<serde_json::Value> {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/check-exposition");
    let mut child = Command::new(&script)
        .arg(format)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run {}: {error}", script.display()));
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the {format} parsers refused the exposition: {}{}\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON sample"))
        .collect()
}
