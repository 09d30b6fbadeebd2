//! Fault tests of the control plane with real processes: `vantage server` and three
//! `vantage agent`s measure a mesh; one agent is killed with SIGKILL mid-mesh and
//! restarted on the same spool, and the server is stopped for several seconds and
//! restarted on the same database. Afterwards the archive must hold every completed
//! result exactly once, every run must have a result or a recorded reason, and the
//! spools must be empty. Against SQLite and PostgreSQL.

#[path = "../../server/tests/common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Kind, TestDb};
use serde_json::json;

fn vantage_bin() -> PathBuf {
    std::env::var_os("VANTAGE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_vantage")))
}

/// A child process killed (SIGKILL) and reaped on drop, so a failing test leaves none behind.
struct Proc(Child);

impl Proc {
    fn spawn(args: &[&str], log: &Path) -> Proc {
        let log = std::fs::File::create(log).unwrap();
        let child = Command::new(vantage_bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("vantage binary runs");
        Proc(child)
    }

    fn kill_hard(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// SIGTERM, then wait (bounded) for a clean exit.
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kill_hard();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill_hard();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

const ADMIN: &str = "fault-admin-token";

fn start_server(db: &TestDb, listen: &str, dir: &Path, generation: u32) -> Proc {
    Proc::spawn(
        &[
            "server",
            "--listen",
            listen,
            "--database",
            &db.url,
            "--admin-token",
            ADMIN,
            "--horizon",
            "20s",
            "--miss-grace",
            "15s",
        ],
        &dir.join(format!("server-{generation}.log")),
    )
}

fn start_agent(url: &str, token: &str, name: &str, dir: &Path, generation: u32) -> Proc {
    let spool = dir.join(format!("spool-{name}"));
    Proc::spawn(
        &[
            "agent",
            "--server",
            url,
            "--token",
            token,
            "--name",
            name,
            "--endpoint-port",
            "0",
            "--listen",
            "127.0.0.1",
            "--tag",
            "mesh=yes",
            "--spool",
            spool.to_str().unwrap(),
        ],
        &dir.join(format!("agent-{name}-{generation}.log")),
    )
}

async fn wait_until_up(client: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if client
            .get(format!("{url}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("server at {url} did not come up");
}

async fn get(client: &reqwest::Client, url: &str, token: &str) -> serde_json::Value {
    let response = client.get(url).bearer_auth(token).send().await.unwrap();
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

async fn faults_scenario(kind: Kind) {
    let db = TestDb::new(kind, "faults").await;
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let url = format!("http://{listen}");
    let http = reqwest::Client::new();

    let mut server = start_server(&db, &listen, dir.path(), 0);
    wait_until_up(&http, &url).await;
    let names = ["f1", "f2", "f3"];
    // One token per agent, named like it.
    let mut tokens = Vec::new();
    for name in names {
        let token: serde_json::Value = http
            .post(format!("{url}/api/v1/tokens"))
            .bearer_auth(ADMIN)
            .json(&json!({"name": name, "role": "agent"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        tokens.push(token["token"].as_str().unwrap().to_string());
    }
    let mut agents: Vec<Proc> = names
        .iter()
        .zip(&tokens)
        .map(|(name, token)| start_agent(&url, token, name, dir.path(), 0))
        .collect();

    let config_path = dir.path().join("mesh.json");
    std::fs::write(
        &config_path,
        json!({
            "groups": [{"name": "all", "kind": "mesh", "members": ["mesh=yes"]}],
            "tests": [
                {"name": "rtt", "type": "latency", "spec": {"count": 10, "interval": "50ms", "timeout": "300ms"}},
                {"name": "bulk", "type": "throughput", "spec": {"duration": "1s"}}
            ],
            "tasks": [
                {"name": "lat", "test": "rtt", "group": "all", "every": "3s", "slip": "1s"},
                {"name": "tput", "test": "bulk", "group": "all", "every": "15s", "directions": "one"}
            ]
        })
        .to_string(),
    )
    .unwrap();
    let applied = Command::new(vantage_bin())
        .args([
            "config",
            "apply",
            config_path.to_str().unwrap(),
            "--server",
            &url,
            "--token",
            ADMIN,
        ])
        .output()
        .unwrap();
    assert!(
        applied.status.success(),
        "config apply: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert!(String::from_utf8_lossy(&applied.stdout).contains("applied as version 1"));

    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(7)).await;
    // SIGKILL an agent (its 0.5 s latency runs make "mid-run" likely) and restart it.
    agents[0].kill_hard();
    tokio::time::sleep(Duration::from_secs(2)).await;
    agents[0] = start_agent(&url, &tokens[0], names[0], dir.path(), 1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Stop the server for a while; agents keep measuring prefetched runs and spool.
    server.stop();
    let outage_start = chrono::Utc::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let outage_end = chrono::Utc::now();
    server = start_server(&db, &listen, dir.path(), 1);
    wait_until_up(&http, &url).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let window_end = chrono::Utc::now();

    // Settle: runs of the window finish, spools drain (bounded).
    let deadline = Instant::now() + Duration::from_secs(45);
    let (runs, results) = loop {
        let runs = get(
            &http,
            &format!(
                "{url}/api/v1/runs?to={}",
                window_end.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            ),
            ADMIN,
        )
        .await;
        let runs = runs["runs"].as_array().unwrap().clone();
        let open = runs
            .iter()
            .filter(|run| run["state"] == "scheduled" || run["state"] == "dispatched")
            .count();
        let window_ids: HashSet<&str> = runs.iter().filter_map(|run| run["id"].as_str()).collect();
        let spooled = names
            .iter()
            .flat_map(|name| spooled_runs(&dir.path().join(format!("spool-{name}"))))
            .filter(|run_id| window_ids.contains(run_id.as_str()))
            .count();
        if (open == 0 && spooled == 0) || Instant::now() > deadline {
            let results = get(&http, &format!("{url}/api/v1/results?limit=100000"), ADMIN).await;
            break (runs, results["results"].as_array().unwrap().clone());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for agent in &mut agents {
        agent.stop();
    }
    server.stop();
    assert!(started.elapsed() < Duration::from_secs(120));

    let logs = || {
        let mut text = String::new();
        for entry in std::fs::read_dir(dir.path()).unwrap().flatten() {
            if entry.path().extension().is_some_and(|ext| ext == "log") {
                let content = std::fs::read_to_string(entry.path()).unwrap_or_default();
                let tail: Vec<&str> = content.lines().rev().take(5).collect();
                text.push_str(&format!(
                    "--- {}\n{}\n",
                    entry.path().display(),
                    tail.join("\n")
                ));
            }
        }
        text
    };
    assert!(
        runs.len() >= 20,
        "the window planned many runs: {}",
        runs.len()
    );
    for run in &runs {
        let state = run["state"].as_str().unwrap();
        assert!(
            !matches!(state, "scheduled" | "dispatched"),
            "run left open: {run}\n{}",
            logs()
        );
        if state != "completed" {
            assert!(
                run["reason"].as_str().is_some_and(|r| !r.is_empty()),
                "{state} run without reason: {run}"
            );
        }
    }
    // Exactly once: results are unique per run, and every completed run has its result.
    let result_ids: Vec<&str> = results
        .iter()
        .map(|result| result["run_id"].as_str().unwrap())
        .collect();
    let unique: HashSet<&str> = result_ids.iter().copied().collect();
    assert_eq!(unique.len(), result_ids.len(), "a result was stored twice");
    let completed: Vec<&serde_json::Value> = runs
        .iter()
        .filter(|run| run["state"] == "completed")
        .collect();
    for run in &completed {
        assert!(
            unique.contains(run["id"].as_str().unwrap()),
            "completed run without result: {run}"
        );
    }
    // Results measured while the server was down reached the archive afterwards.
    let during_outage = results
        .iter()
        .filter(|result| {
            let start: chrono::DateTime<chrono::Utc> =
                result["start_time"].as_str().unwrap().parse().unwrap();
            start > outage_start && start < outage_end && result["outcome"] == "completed"
        })
        .count();
    assert!(
        during_outage > 0,
        "no result measured during the outage was delivered\n{}",
        logs()
    );
    assert!(
        completed.iter().any(|run| run["client"] == "f1"),
        "the restarted agent measured"
    );
    // Nothing of the window is left in a spool (runs planned after it may be: the
    // agents were stopped while measuring).
    let window_ids: HashSet<&str> = runs.iter().filter_map(|run| run["id"].as_str()).collect();
    for name in names {
        let stuck: Vec<String> = spooled_runs(&dir.path().join(format!("spool-{name}")))
            .into_iter()
            .filter(|run_id| window_ids.contains(run_id.as_str()))
            .collect();
        assert!(
            stuck.is_empty(),
            "{name} still spools results of the window: {stuck:?}"
        );
    }
}

/// Run ids of the results waiting in an agent's spool.
fn spooled_runs(dir: &Path) -> Vec<String> {
    vantage_agent::spool::Spool::open(dir)
        .and_then(|spool| spool.pending())
        .map(|pending| pending.into_iter().map(|upload| upload.run_id).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn faults_on_sqlite() {
    faults_scenario(Kind::Sqlite).await;
}

#[tokio::test]
async fn faults_on_postgres() {
    faults_scenario(Kind::Postgres).await;
}
