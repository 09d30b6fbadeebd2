//! Fault tests of the control plane with real processes: `vantage server` and three
//! `vantage agent`s measure a mesh; one agent is killed with SIGKILL mid-mesh and
//! restarted on the same spool, and the server is killed with SIGKILL, left down for
//! several seconds and restarted on the same database. Afterwards the archive must hold
//! every completed result exactly once, every run must have a result or a recorded
//! reason, and the spools must be empty. Against SQLite and PostgreSQL, and once more
//! on a PostgreSQL cluster of the test's own that crashes (immediate shutdown) and
//! restarts while the mesh runs. And with two replicas of the server on one PostgreSQL
//! database, one killed with SIGKILL for good while the agents, given both, measure.

use crate::common;

use crate::support;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Kind, TestDb};
use serde_json::json;
use support::vantage_bin;

/// A child process killed (SIGKILL) and reaped on drop, so a failing test leaves none behind.
struct Proc(Child);

impl Proc {
    fn spawn(args: &[&str], log: &Path) -> Proc {
        let mut command = Command::new(vantage_bin());
        command.args(args);
        Proc::spawn_command(command, log)
    }

    fn spawn_command(mut command: Command, log: &Path) -> Proc {
        let log = std::fs::File::create(log).unwrap();
        let child = command
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

fn start_server(database_url: &str, listen: &str, dir: &Path, generation: u32) -> Proc {
    Proc::spawn(
        &[
            "server",
            "--listen",
            listen,
            "--database",
            database_url,
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

/// `vantage agent` of the server at `urls` (replicas of one server when several).
fn agent_args<'a>(urls: &[&'a str], token: &'a str, name: &'a str, spool: &'a str) -> Vec<&'a str> {
    let mut args = vec!["agent"];
    for url in urls {
        args.extend(["--server", url]);
    }
    args.extend([
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
        spool,
    ]);
    args
}

fn start_agent(urls: &[&str], token: &str, name: &str, dir: &Path, generation: u32) -> Proc {
    let spool = dir.join(format!("spool-{name}"));
    Proc::spawn(
        &agent_args(urls, token, name, spool.to_str().unwrap()),
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

/// A new agent token named like the agent.
async fn agent_token(http: &reqwest::Client, url: &str, name: &str) -> String {
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
    token["token"].as_str().unwrap().to_string()
}

/// `vantage config apply` of `config` as the first version.
fn apply_config(url: &str, dir: &Path, config: serde_json::Value) {
    let config_path = dir.join("mesh.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let applied = Command::new(vantage_bin())
        .args(["config", "apply", config_path.to_str().unwrap()])
        .args(["--server", url, "--token", ADMIN])
        .output()
        .unwrap();
    assert!(
        applied.status.success(),
        "config apply: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert!(String::from_utf8_lossy(&applied.stdout).contains("applied as version 1"));
}

/// The last lines of every log in `dir`, for failure messages.
fn log_tails(dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
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
}

/// A run that has not ended yet: planned, or fetched by its agent.
fn is_open(run: &serde_json::Value) -> bool {
    run["state"] == "scheduled" || run["state"] == "dispatched"
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

/// The mesh the fault tests measure: latency every 3 s, throughput every 15 s.
fn mesh_config() -> serde_json::Value {
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
}

/// Waits (bounded) until the runs planned before `window_end` have ended and the
/// agents' spools hold none of their results; returns those runs and every result.
async fn settle(
    http: &reqwest::Client,
    url: &str,
    dir: &Path,
    names: &[&str],
    window_end: chrono::DateTime<chrono::Utc>,
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let runs = get(
            http,
            &format!(
                "{url}/api/v1/runs?to={}",
                window_end.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            ),
            ADMIN,
        )
        .await;
        let runs = runs["runs"].as_array().unwrap().clone();
        let open = runs.iter().filter(|run| is_open(run)).count();
        let window_ids: HashSet<&str> = runs.iter().filter_map(|run| run["id"].as_str()).collect();
        let spooled = names
            .iter()
            .flat_map(|name| spooled_runs(&dir.join(format!("spool-{name}"))))
            .filter(|run_id| window_ids.contains(run_id.as_str()))
            .count();
        if (open == 0 && spooled == 0) || Instant::now() > deadline {
            let results = get(http, &format!("{url}/api/v1/results?limit=100000"), ADMIN).await;
            return (runs, results["results"].as_array().unwrap().clone());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What no fault may cause: every run of the window ended, with a reason unless it
/// completed; every result stored once; every completed run with its result; no result
/// of the window left in a spool (runs planned after it may be: the agents were stopped
/// while measuring).
fn assert_nothing_lost(
    runs: &[serde_json::Value],
    results: &[serde_json::Value],
    dir: &Path,
    names: &[&str],
) {
    let logs = || log_tails(dir);
    assert!(
        runs.len() >= 20,
        "the window planned many runs: {}",
        runs.len()
    );
    for run in runs {
        let state = run["state"].as_str().unwrap();
        assert!(!is_open(run), "run left open: {run}\n{}", logs());
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
    let window_ids: HashSet<&str> = runs.iter().filter_map(|run| run["id"].as_str()).collect();
    for name in names {
        let stuck: Vec<String> = spooled_runs(&dir.join(format!("spool-{name}")))
            .into_iter()
            .filter(|run_id| window_ids.contains(run_id.as_str()))
            .collect();
        assert!(
            stuck.is_empty(),
            "{name} still spools results of the window: {stuck:?}"
        );
    }
}

/// The mesh with its faults on the database at `database_url`; `crashing`, when given,
/// is that database's own cluster, crashed and restarted after the server's restart.
async fn faults_scenario(database_url: &str, crashing: Option<&OwnPostgres>) {
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let url = format!("http://{listen}");
    let http = reqwest::Client::new();

    let mut server = start_server(database_url, &listen, dir.path(), 0);
    wait_until_up(&http, &url).await;
    let names = ["f1", "f2", "f3"];
    let mut tokens = Vec::new();
    for name in names {
        tokens.push(agent_token(&http, &url, name).await);
    }
    let mut agents: Vec<Proc> = names
        .iter()
        .zip(&tokens)
        .map(|(name, token)| start_agent(&[&url], token, name, dir.path(), 0))
        .collect();

    apply_config(&url, dir.path(), mesh_config());

    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(7)).await;
    // SIGKILL an agent (its 0.5 s latency runs make "mid-run" likely) and restart it.
    agents[0].kill_hard();
    tokio::time::sleep(Duration::from_secs(2)).await;
    agents[0] = start_agent(&[&url], &tokens[0], names[0], dir.path(), 1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Kill the server and leave it down for a while; agents keep measuring prefetched
    // runs and spool.
    server.kill_hard();
    let outage_start = chrono::Utc::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let outage_end = chrono::Utc::now();
    server = start_server(database_url, &listen, dir.path(), 1);
    wait_until_up(&http, &url).await;
    if let Some(cluster) = crashing {
        // The database goes away under a running server: connections drop, uploads
        // and planning fail until it is back.
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster.crash_and_restart(Duration::from_secs(4));
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    let window_end = chrono::Utc::now();

    let (runs, results) = settle(&http, &url, dir.path(), &names, window_end).await;
    for agent in &mut agents {
        agent.stop();
    }
    server.stop();
    assert!(started.elapsed() < Duration::from_secs(120));

    assert_nothing_lost(&runs, &results, dir.path(), &names);
    let logs = || log_tails(dir.path());
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
        runs.iter()
            .any(|run| run["state"] == "completed" && run["client"] == "f1"),
        "the restarted agent measured"
    );
}

/// Two replicas of one server on one PostgreSQL database, and three agents given both
/// URLs. The replica they talk to (the first) is killed with SIGKILL mid-mesh and stays
/// down: the agents fail over to the second, which takes over planning when the first's
/// lease expires. Nothing is lost or stored twice, and every agent takes part in runs
/// that start after everything the first replica planned (its 20 s horizon).
#[tokio::test]
async fn a_replica_killed_mid_mesh_its_agents_fail_over_on_postgres() {
    let db = TestDb::new(Kind::Postgres, "replicas").await;
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let listens = [0, 1].map(|_| format!("127.0.0.1:{}", free_port()));
    let urls = listens.each_ref().map(|listen| format!("http://{listen}"));
    // One after the other: the first creates the schema.
    let mut first = start_server(&db.url, &listens[0], dir.path(), 0);
    wait_until_up(&http, &urls[0]).await;
    let mut second = start_server(&db.url, &listens[1], dir.path(), 1);
    wait_until_up(&http, &urls[1]).await;
    // A subscriber of the replica that survives: it must see every result, those the
    // other stored before it was killed too, each once.
    let subscription = subscribe_results(&http, &urls[1]).await;
    let names = ["r1", "r2", "r3"];
    let mut agents = Vec::new();
    for name in names {
        let token = agent_token(&http, &urls[0], name).await;
        agents.push(start_agent(
            &[&urls[0], &urls[1]],
            &token,
            name,
            dir.path(),
            0,
        ));
    }
    apply_config(&urls[0], dir.path(), mesh_config());

    tokio::time::sleep(Duration::from_secs(7)).await;
    first.kill_hard();
    let killed = chrono::Utc::now();
    // Past everything the first replica planned (20 s ahead), and some more.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let window_end = chrono::Utc::now();

    let (runs, results) = settle(&http, &urls[1], dir.path(), &names, window_end).await;
    for agent in &mut agents {
        agent.stop();
    }
    // Every result stored by either replica, and what the subscriber was told: each
    // result's event is published before its upload is answered, so nothing is to come.
    let all_results = get(
        &http,
        &format!("{}/api/v1/results?limit=100000", urls[1]),
        ADMIN,
    )
    .await;
    let mut stored: Vec<String> = all_results["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|result| result["run_id"].as_str().unwrap().to_string())
        .collect();
    stored.sort_unstable();
    let deadline = Instant::now() + Duration::from_secs(10);
    let told = loop {
        let mut told = subscription.lock().unwrap().clone();
        told.sort_unstable();
        if told == stored || Instant::now() > deadline {
            break told;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    second.stop();

    assert_nothing_lost(&runs, &results, dir.path(), &names);
    let logs = || log_tails(dir.path());
    assert_eq!(
        told, stored,
        "the surviving replica's subscriber saw every stored result once"
    );
    let planned_by_second = killed + chrono::Duration::seconds(22);
    let takes_part =
        |run: &serde_json::Value, name: &str| run["client"] == name || run["server"] == name;
    for name in names {
        let measured_after = results
            .iter()
            .filter(|result| {
                let start: chrono::DateTime<chrono::Utc> =
                    result["start_time"].as_str().unwrap().parse().unwrap();
                takes_part(result, name)
                    && result["outcome"] == "completed"
                    && start > planned_by_second
            })
            .count();
        let runs_after: Vec<String> = runs
            .iter()
            .filter(|run| {
                takes_part(run, name)
                    && run["planned_start_us"]
                        .as_i64()
                        .is_some_and(|start_us| start_us > planned_by_second.timestamp_micros())
            })
            .map(|run| format!("{} {} {}", run["id"], run["state"], run["reason"]))
            .collect();
        assert!(
            measured_after > 0,
            "{name} took part in nothing the second replica planned; its runs then: {runs_after:#?}\n{}",
            logs()
        );
        let log = std::fs::read_to_string(dir.path().join(format!("agent-{name}-0.log"))).unwrap();
        assert!(
            log.contains(&format!("using {} from now on", urls[1])),
            "{name} did not say it failed over:\n{log}"
        );
    }
}

/// Subscribes to `url`'s result events: the run ids they carried so far, in arrival order.
async fn subscribe_results(
    http: &reqwest::Client,
    url: &str,
) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let mut stream = http
        .get(format!("{url}/api/v1/subscribe?kinds=result"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = std::sync::Arc::clone(&told);
    tokio::spawn(async move {
        let mut pending = String::new();
        while let Ok(Some(chunk)) = stream.chunk().await {
            pending.push_str(&String::from_utf8_lossy(&chunk));
            // Whole events only: one may straddle chunks.
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                let run_id = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data: "))
                    .filter_map(|data| serde_json::from_str::<serde_json::Value>(data).ok())
                    .find_map(|data| Some(data["run_id"].as_str()?.to_string()));
                into.lock().unwrap().extend(run_id);
            }
        }
    });
    told
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
    let db = TestDb::new(Kind::Sqlite, "faults").await;
    faults_scenario(&db.url, None).await;
}

#[tokio::test]
async fn faults_on_postgres() {
    let db = TestDb::new(Kind::Postgres, "faults").await;
    faults_scenario(&db.url, None).await;
}

/// An agent whose spool's file system is full uploads each result directly instead: with
/// the server up, every run it measured has its result in the archive, exactly once.
#[tokio::test]
async fn a_full_spool_disk_loses_no_result_even_while_the_server_is_down() {
    let db = TestDb::new(Kind::Sqlite, "full_spool").await;
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let url = format!("http://{listen}");
    let http = reqwest::Client::new();
    let mut server = start_server(&db.url, &listen, dir.path(), 0);
    wait_until_up(&http, &url).await;

    // d1's spool is a small tmpfs mounted in a mount namespace of its own, so it goes
    // away with the process whatever happens to the test.
    let spool = dir.path().join("spool-d1");
    std::fs::create_dir(&spool).unwrap();
    let spool = spool.to_str().unwrap().to_string();
    let token = agent_token(&http, &url, "d1").await;
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount -t tmpfs -o size=256k vantage-test-spool "$1" && shift && exec "$@""#)
        .args(["sh", &spool])
        .arg(vantage_bin())
        .args(agent_args(&[&url], &token, "d1", &spool));
    let mut full_agent = Proc::spawn_command(command, &dir.path().join("agent-d1-0.log"));
    let token = agent_token(&http, &url, "d2").await;
    let mut other_agent = start_agent(&[&url], &token, "d2", dir.path(), 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&http, &format!("{url}/api/v1/agents"), ADMIN).await["agents"]
        .as_array()
        .map_or(0, Vec::len)
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "both agents register (the full-disk agent needs root for its mount namespace)\n{}",
            log_tails(dir.path())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Fill d1's spool file system from inside its mount namespace.
    let filled = Command::new("nsenter")
        .args(["--target", &full_agent.0.id().to_string(), "--mount", "--"])
        .args([
            "sh",
            "-c",
            r#"cat /dev/zero > "$1/filler" 2>/dev/null; test -s "$1/filler""#,
        ])
        .args(["sh", &spool])
        .status()
        .unwrap();
    assert!(filled.success(), "the spool's file system was filled");

    apply_config(
        &url,
        dir.path(),
        json!({
            "groups": [{"name": "all", "kind": "mesh", "members": ["mesh=yes"]}],
            "tests": [{"name": "rtt", "type": "latency", "spec": {"count": 5, "interval": "50ms", "timeout": "300ms"}}],
            "tasks": [{"name": "lat", "test": "rtt", "group": "all", "every": "2s", "slip": "1s"}]
        }),
    );
    // Wait for d1 to have ended three runs (the planner's first window can start late
    // on a loaded machine): they went straight to the server.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let runs = get(&http, &format!("{url}/api/v1/runs"), ADMIN).await;
        let ended = runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|run| run["client"] == "d1")
            .filter(|run| !is_open(run))
            .count();
        if ended >= 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the full-disk agent ended {ended} runs in 60 s\n{}",
            log_tails(dir.path())
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Then the server goes away too: d1 measures prefetched runs it can neither spool
    // nor upload, and holds their results in memory until the server is back.
    server.kill_hard();
    let outage_start = chrono::Utc::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let outage_end = chrono::Utc::now();
    server = start_server(&db.url, &listen, dir.path(), 1);
    wait_until_up(&http, &url).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let window_end = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    // Settle: runs of the window close and held results arrive (uploads back off up
    // to 30 s while the server is down).
    let deadline = Instant::now() + Duration::from_secs(60);
    let runs = loop {
        let runs = get(&http, &format!("{url}/api/v1/runs?to={window_end}"), ADMIN).await;
        let runs = runs["runs"].as_array().unwrap().clone();
        let open = runs.iter().any(is_open);
        if !open || Instant::now() > deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let results = get(&http, &format!("{url}/api/v1/results?limit=100000"), ADMIN).await;
    full_agent.stop();
    other_agent.stop();
    server.stop();

    let full_agent_runs: Vec<&serde_json::Value> =
        runs.iter().filter(|run| run["client"] == "d1").collect();
    assert!(
        full_agent_runs.len() >= 3,
        "the full-disk agent had runs: {}",
        full_agent_runs.len()
    );
    let results = results["results"].as_array().unwrap();
    let stored = |run: &serde_json::Value| {
        results
            .iter()
            .filter(|result| result["run_id"] == run["id"])
            .count()
    };
    for run in &full_agent_runs {
        assert!(
            !is_open(run),
            "run left open: {run}\n{}",
            log_tails(dir.path())
        );
        if run["state"] == "completed" {
            assert_eq!(stored(run), 1, "results stored for {run}");
        } else {
            // Runs planned in the outage were never handed out; they close with a reason.
            assert!(
                run["reason"].as_str().is_some_and(|r| !r.is_empty()),
                "{run}"
            );
            assert_eq!(
                stored(run),
                0,
                "a result for a run that did not complete: {run}"
            );
        }
    }
    let measured_in_outage = results
        .iter()
        .filter(|result| result["client"] == "d1" && result["outcome"] == "completed")
        .filter(|result| {
            let start: chrono::DateTime<chrono::Utc> =
                result["start_time"].as_str().unwrap().parse().unwrap();
            start > outage_start && start < outage_end
        })
        .count();
    let log = std::fs::read_to_string(dir.path().join("agent-d1-0.log")).unwrap();
    assert!(
        measured_in_outage > 0,
        "no result d1 measured while the server was down arrived\n{log}"
    );
    assert!(
        log.contains("cannot spool result, uploading it directly"),
        "the agent said its spool is full:\n{log}"
    );
    assert!(
        log.contains("result held in memory until the spool has room or the server answers")
            && log.contains("result held in memory uploaded"),
        "the agent held results in memory and delivered them:\n{log}"
    );
    assert!(!log.contains("RESULT LOST"), "{log}");
}

#[tokio::test]
async fn faults_with_a_database_crash_on_postgres() {
    let cluster = OwnPostgres::start();
    faults_scenario(&cluster.url(), Some(&cluster)).await;
}

/// A PostgreSQL cluster of the test's own (initdb in a temporary directory, run as the
/// `postgres` user on a free port), so crashing it disturbs no other test. Stopped on
/// drop, even when the test fails.
struct OwnPostgres {
    dir: tempfile::TempDir,
    port: u16,
    bin: PathBuf,
}

impl OwnPostgres {
    fn start() -> OwnPostgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .into_iter()
            .flatten()
            .flatten()
            .map(|version| version.path().join("bin"))
            .filter(|bin| bin.join("initdb").exists())
            .max()
            .expect(
                "PostgreSQL's server programs (initdb, pg_ctl) are required in \
                 /usr/lib/postgresql/*/bin: scripts/install-deps installs them",
            );
        let dir = tempfile::tempdir().unwrap();
        let owned = Command::new("chown")
            .args(["postgres:postgres", dir.path().to_str().unwrap()])
            .status()
            .unwrap();
        assert!(
            owned.success(),
            "this test runs its own PostgreSQL as the 'postgres' user, which needs root \
             (chown of its data directory failed)"
        );
        let cluster = OwnPostgres {
            dir,
            port: free_port(),
            bin,
        };
        cluster.as_postgres(
            "initdb",
            &[
                "--auth=trust",
                "--username=postgres",
                "--no-sync",
                "-D",
                &cluster.data_dir(),
            ],
        );
        cluster.pg_ctl_start();
        cluster
    }

    fn data_dir(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// One of PostgreSQL's programs, to run as the `postgres` user.
    fn postgres_command(&self, program: &str) -> Command {
        let mut command = Command::new("runuser");
        command
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join(program));
        command
    }

    /// Runs one of PostgreSQL's programs as the `postgres` user; panics with its output
    /// when it fails.
    fn as_postgres(&self, program: &str, args: &[&str]) {
        let output = self
            .postgres_command(program)
            .args(args)
            .output()
            .expect("runuser (util-linux) runs programs as the postgres user");
        assert!(
            output.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn pg_ctl_start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("postgres.log").display().to_string();
        self.as_postgres(
            "pg_ctl",
            &[
                "start",
                "--wait",
                "--timeout=60",
                "-D",
                &self.data_dir(),
                "-l",
                &log,
                "-o",
                &options,
            ],
        );
    }

    /// Immediate shutdown (what a crash looks like to clients: every connection drops,
    /// recovery runs on the next start), down for `down`, then started again.
    fn crash_and_restart(&self, down: Duration) {
        self.as_postgres(
            "pg_ctl",
            &["stop", "--mode=immediate", "-D", &self.data_dir()],
        );
        std::thread::sleep(down);
        self.pg_ctl_start();
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = self
            .postgres_command("pg_ctl")
            .args(["stop", "--mode=immediate", "-D", &self.data_dir()])
            .output();
    }
}
