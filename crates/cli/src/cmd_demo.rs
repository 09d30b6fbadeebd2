//! `vantage demo`: everything on one machine. A server on SQLite in a temporary
//! directory, three agents on loopback, a mesh of latency (every few seconds) and
//! throughput (every minute), the URLs to try, and a live per-pair summary.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use vantage_agent::AgentOptions;
use vantage_model::control::Role;
use vantage_model::units::{format_rate_bps, format_us, parse_duration};
use vantage_server::archive::{now_us, RunState, StoredResult};
use vantage_server::planner::PlannerOptions;
use vantage_server::service::{self, RunningServer, ServerOptions};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Stop after this long (DUR); runs until Ctrl-C when absent.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// API address (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:8470")]
    pub listen: std::net::SocketAddr,
    /// Number of agents.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(2..=16))]
    pub agents: u16,
    /// Period of the latency mesh (DUR).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub latency_every: Duration,
    /// Period of the throughput mesh (DUR).
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub throughput_every: Duration,
    /// Seconds between summaries (DUR).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub summary_every: Duration,
    /// Run the demo in an emulated network instead (as root): a lab scenario (a
    /// topology file, or access-line, cloud-zones, gigabit-app, two-hosts) with an agent in each
    /// measurement point and the health bundle (Chard et al., FGCS 2015) as a mesh.
    #[arg(long, value_name = "SCENARIO")]
    pub lab: Option<String>,
    /// With --lab: period of the health rounds (DUR).
    #[arg(long, default_value = "1m", value_parser = parse_duration, requires = "lab")]
    pub health_every: Duration,
}

pub fn run(args: DemoArgs) -> ExitCode {
    if let Some(scenario) = args.lab.clone() {
        return crate::demo_lab::run(&scenario, &args);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("vantage demo: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(demo(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("vantage demo: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn seconds(duration: Duration) -> String {
    format!("{}ms", duration.as_millis())
}

/// The demo's measurement configuration: one mesh group, two tasks, and an SLA
/// contract over both that loopback meets with room to spare.
///
/// It is conflict-free by construction at the default periods. A transfer holds its
/// two agents alone for its reservation, T = 2 s (1 s of test and the 1 s setup
/// guard), and the campaign leaves a round gap of 2 s, longer than a latency run's
/// reservation, L = 1.9 s (20 probes 20 ms apart, the 500 ms timeout, the guard).
/// So within any slip of 4 s (of the 5 s period) a latency run finds L free seconds
/// after at most one transfer, as T + L = 3.9 s. Shorter latency periods can leave
/// runs without a start.
fn demo_config(args: &DemoArgs) -> serde_json::Value {
    serde_json::json!({
        "groups": [{"name": "demo-mesh", "kind": "mesh", "members": ["role=demo"]}],
        "tests": [
            {"name": "rtt", "type": "latency", "spec": {"count": 20, "interval": "20ms", "timeout": "500ms"}},
            {"name": "bulk", "type": "throughput", "spec": {"duration": "1s"}}
        ],
        "tasks": [
            {"name": "latency-mesh", "test": "rtt", "group": "demo-mesh", "every": seconds(args.latency_every), "slip": seconds(args.latency_every * 4 / 5)},
            {"name": "throughput-mesh", "test": "bulk", "group": "demo-mesh", "every": seconds(args.throughput_every), "directions": "one", "round_gap": "2s"}
        ],
        "contracts": [
            {"name": "demo-sla", "tasks": ["latency-mesh", "throughput-mesh"], "rate": "100M", "rtt": "10ms", "loss": 0.01}
        ]
    })
}

/// A new token with `role`, named `name` (an agent's token is named after it).
pub(crate) async fn mint_token(
    server: &RunningServer,
    name: &str,
    role: Role,
) -> anyhow::Result<String> {
    let token = vantage_server::new_token();
    server.state.archive.add_token(&token, name, role).await?;
    Ok(token)
}

/// The demo's server: SQLite in `workdir`, a fast planner loop; with the archive's
/// location and a reader token to print.
pub(crate) async fn start_server(
    workdir: &std::path::Path,
    listen: std::net::SocketAddr,
) -> anyhow::Result<(RunningServer, String, String)> {
    let database = format!("sqlite://{}", workdir.join("vantage.db").display());
    let server = service::start(ServerOptions {
        database_url: database.clone(),
        listen,
        admin_token: None,
        planner: PlannerOptions {
            tick: Duration::from_secs(1),
            horizon: Duration::from_secs(30),
            // A diagnose bundle over an impaired lab path can run well past its estimate
            // (each of its connections waits up to 5 s for a lost handshake or control
            // message) and still report: only a run this late is missed.
            miss_grace: Duration::from_secs(60),
            ..PlannerOptions::default()
        },
        http: vantage_server::http::HttpLimits::default(),
        tls: None,
        transfers: Default::default(),
    })
    .await?;
    let reader_token = mint_token(&server, "demo-reader", Role::Reader).await?;
    Ok((server, database, reader_token))
}

/// Applies the demo's configuration through the API, as an operator would.
pub(crate) async fn apply_config(
    server: &RunningServer,
    config: &serde_json::Value,
) -> anyhow::Result<()> {
    let applied = reqwest::Client::new()
        .put(format!("{}/api/v1/config", server.url()))
        .bearer_auth(&server.admin_token)
        .json(config)
        .send()
        .await?;
    if !applied.status().is_success() {
        anyhow::bail!(
            "the demo configuration was refused: {}",
            applied.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

/// The dashboard's sign-in links (read-only, then admin) and the tokens themselves.
pub(crate) fn print_sign_in(url: &str, admin_token: &str, reader_token: &str) {
    println!("  dashboard     {url}/#token={reader_token}");
    println!("  (as admin)    {url}/#token={admin_token}");
    println!("  admin token   {admin_token}");
    println!("  reader token  {reader_token}");
}

/// Waits for the end of the demo (its duration, Ctrl-C or SIGTERM), calling `summary`
/// every `every`.
pub(crate) async fn summaries_until_stopped<F: std::future::Future<Output = ()>>(
    every: Duration,
    duration: Option<Duration>,
    mut summary: impl FnMut() -> F,
) {
    let deadline = duration.map(|duration| tokio::time::Instant::now() + duration);
    let stop_signal = crate::daemon::wait_for_stop_signal();
    tokio::pin!(stop_signal);
    loop {
        let pause = tokio::time::sleep(every);
        let until_deadline = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = pause => summary().await,
            _ = until_deadline => break,
            _ = &mut stop_signal => break,
        }
    }
    summary().await;
}

async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let workdir = tempfile::Builder::new().prefix("vantage-demo-").tempdir()?;
    let (server, database, reader_token) = start_server(workdir.path(), args.listen).await?;

    let (stop_agents, agents_stopped) = tokio::sync::watch::channel(false);
    let mut agent_tasks = Vec::new();
    for index in 1..=args.agents {
        // One token per agent: a token acts only as the agent it is named for.
        let name = format!("agent-{index}");
        let agent_token = mint_token(&server, &name, Role::Agent).await?;
        let mut options = AgentOptions::new(
            &server.url(),
            &agent_token,
            &name,
            workdir.path().join(format!("spool-{index}")),
        );
        options.endpoint_listen = Some("127.0.0.1".parse()?);
        options.tags = BTreeMap::from([("role".to_string(), "demo".to_string())]);
        let mut stopped = agents_stopped.clone();
        agent_tasks.push(tokio::spawn(vantage_agent::run(options, async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        })));
    }
    apply_config(&server, &demo_config(&args)).await?;

    let url = server.url();
    println!(
        "vantage demo: server on {url} (SQLite archive {database}), {} agents on 127.0.0.1",
        args.agents
    );
    print_sign_in(&url, &server.admin_token, &reader_token);
    println!("  API document  {url}/openapi.json");
    println!("  agents        curl -H 'Authorization: Bearer {reader_token}' {url}/api/v1/agents");
    println!("  results       curl -H 'Authorization: Bearer {reader_token}' '{url}/api/v1/results?test=latency&limit=5'");
    println!(
        "  live events   curl -N -H 'Authorization: Bearer {reader_token}' {url}/api/v1/subscribe"
    );
    println!("  Prometheus    curl -H 'Authorization: Bearer {reader_token}' {url}/metrics");
    println!(
        "Latency mesh every {:?}, throughput mesh every {:?}. Ctrl-C stops.",
        args.latency_every, args.throughput_every
    );

    let started_us = now_us();
    summaries_until_stopped(args.summary_every, args.duration, || {
        print_summary(&server, started_us)
    })
    .await;
    let _ = stop_agents.send(true);
    for task in agent_tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("vantage demo: an agent failed: {error:#}"),
            Err(error) => eprintln!("vantage demo: an agent crashed: {error}"),
        }
    }
    server.shutdown().await?;
    Ok(())
}

/// The time of day, for summary headers.
pub(crate) fn clock() -> String {
    chrono::Utc::now().format("%H:%M:%S").to_string()
}

/// How many runs are in each state, as `state count` words.
pub(crate) fn run_counts(runs: &[vantage_server::archive::RunRecord]) -> Vec<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for run in runs {
        *counts.entry(run.state.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(state, count)| format!("{state} {count}"))
        .collect()
}

/// The newest latency and throughput result of one (client, server) pair.
type PairLatest<'a> = (Option<&'a StoredResult>, Option<&'a StoredResult>);

async fn print_summary(server: &RunningServer, started_us: i64) {
    let archive = &server.state.archive;
    let (latest, runs) = match (
        archive.latest_per_pair().await,
        archive
            .runs_between(started_us - 60_000_000, i64::MAX)
            .await,
    ) {
        (Ok(latest), Ok(runs)) => (latest, runs),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("vantage demo: archive query failed: {error}");
            return;
        }
    };
    let counted = run_counts(&runs);
    println!("-- {} -- runs: {}", clock(), counted.join(", "));
    let mut pairs: BTreeMap<(String, String), PairLatest> = BTreeMap::new();
    for result in &latest {
        let entry = pairs
            .entry((result.client.clone(), result.server.clone()))
            .or_default();
        match result.test.as_str() {
            "latency" => entry.0 = Some(result),
            "throughput" => entry.1 = Some(result),
            _ => {}
        }
    }
    for ((client, server), (latency, throughput)) in pairs {
        let rtt = latency
            .and_then(|result| result.metrics.get("rtt_median_us"))
            .map_or("-".to_string(), |rtt_us| format_us(*rtt_us));
        let loss = latency
            .and_then(|result| result.metrics.get("loss_ratio"))
            .map_or("-".to_string(), |ratio| format!("{:.1}%", ratio * 100.0));
        let rate = throughput
            .and_then(|result| result.metrics.get("received_bps"))
            .map_or("-".to_string(), |bps| format_rate_bps(*bps));
        println!(
            "  {client:>9} -> {server:<9} rtt {rtt:>10}  loss {loss:>6}  throughput {rate:>12}"
        );
    }
    print_sla(archive, started_us).await;
    if let Some(problem) = runs.iter().rev().find(|run| {
        matches!(
            run.state,
            RunState::Failed | RunState::Missed | RunState::NonStart
        )
    }) {
        println!(
            "  last problem: {} {} -> {}: {}",
            problem.id,
            problem.client,
            problem.server,
            problem.reason.as_deref().unwrap_or("?")
        );
    }
}

/// One line per SLA contract: how many pairs meet it, and the closest call.
async fn print_sla(archive: &vantage_server::archive::Archive, started_us: i64) {
    let contracts = match vantage_server::config_store::current(archive).await {
        Ok(config) => config
            .map(|(_, config)| config.contracts)
            .unwrap_or_default(),
        Err(error) => {
            eprintln!("vantage demo: cannot read the configuration: {error}");
            return;
        }
    };
    let compliance =
        match vantage_server::sla::compliance(archive, &contracts, Some(started_us), None).await {
            Ok(compliance) => compliance,
            Err(error) => {
                eprintln!("vantage demo: SLA query failed: {error}");
                return;
            }
        };
    for contract in compliance {
        let met = contract.pairs.iter().filter(|pair| pair.pass).count();
        let closest = contract
            .pairs
            .iter()
            .flat_map(|pair| &pair.standing)
            .min_by(|a, b| a.margin.total_cmp(&b.margin));
        println!(
            "  SLA {}: {met} of {} pairs met{}",
            contract.contract.name,
            contract.pairs.len(),
            closest.map_or(String::new(), |clause| format!("; closest: {clause}"))
        );
    }
}
