//! `vantage demo --lab SCENARIO`: the demo inside an emulated network. Brings the lab
//! up, gives its measurement points a management path to a server on the host, runs
//! one `vantage agent` inside each (named after the node, tagged from the scenario),
//! measures the health bundle of Chard et al. (FGCS 2015) as a mesh, prints a live
//! health summary, and removes everything on exit or Ctrl-C.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

use vantage_lab::lab;
use vantage_lab::management::Management;
use vantage_lab::topology::Topology;
use vantage_model::control::Role;
use vantage_server::archive::now_us;
use vantage_server::health::{health_matrix, HealthQuery, DEFAULT_MAX_AGE_US, ZONE_TAG};
use vantage_server::service::RunningServer;

use crate::cmd_demo::{
    apply_config, clock, mint_token, run_counts, start_server, summaries_until_stopped, DemoArgs,
};

/// Scenarios built into the binary, by name.
const SCENARIOS: &[(&str, &str)] = &[
    (
        "access-line",
        include_str!("../../../lab/scenarios/access-line.toml"),
    ),
    (
        "cloud-zones",
        include_str!("../../../lab/scenarios/cloud-zones.toml"),
    ),
    (
        "gigabit-app",
        include_str!("../../../lab/scenarios/gigabit-app.toml"),
    ),
    (
        "two-hosts",
        include_str!("../../../lab/scenarios/two-hosts.toml"),
    ),
];

/// A topology file, or the name of a built-in scenario.
fn scenario_text(scenario: &str) -> Result<(String, String), String> {
    if Path::new(scenario).is_file() {
        let text = std::fs::read_to_string(scenario).map_err(|e| format!("{scenario}: {e}"))?;
        return Ok((scenario.to_string(), text));
    }
    let name = scenario.trim_end_matches(".toml");
    SCENARIOS
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(known, text)| (format!("built-in scenario {known}"), text.to_string()))
        .ok_or_else(|| {
            format!(
                "'{scenario}' is neither a topology file nor a built-in scenario ({})",
                SCENARIOS
                    .iter()
                    .map(|(name, _)| *name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// Everything the demo started, removed in reverse order however it ends.
struct Running {
    lab: String,
    management: Option<Management>,
    agents: Vec<(String, Child)>,
}

impl Running {
    fn stop_agents(&mut self) {
        for (_, child) in &mut self.agents {
            // SIGTERM: the agent finishes its upload and leaves.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        for (name, child) in &mut self.agents {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if std::time::Instant::now() > deadline => {
                        eprintln!("vantage demo: agent {name} did not stop; killing it");
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        self.agents.clear();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop_agents();
        if let Some(mut management) = self.management.take() {
            management.detach();
        }
        if let Err(error) = lab::down(&self.lab) {
            eprintln!("vantage demo: removing lab {}: {error}", self.lab);
        }
    }
}

pub fn run(scenario: &str, args: &DemoArgs) -> ExitCode {
    match demo_lab(scenario, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("vantage demo: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn demo_lab(scenario: &str, args: &DemoArgs) -> anyhow::Result<()> {
    lab::require_root().map_err(|error| anyhow::anyhow!("--lab: {}", error.message))?;
    let (label, text) = scenario_text(scenario).map_err(anyhow::Error::msg)?;
    let topology = Topology::from_toml(&text).map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
    let forwarder = crate::cmd_lab::forwarder_command().map_err(anyhow::Error::msg)?;
    println!("vantage demo: bringing up lab {} ({label})", topology.name);
    let state = lab::up(topology, &label, None, &forwarder).map_err(|e| {
        anyhow::anyhow!(
            "lab up failed at step \"{}\": {} (everything it created was removed)",
            e.step,
            e.message
        )
    })?;
    let mut running = Running {
        lab: state.topology.name.clone(),
        management: None,
        agents: Vec::new(),
    };
    let management = Management::attach(&state.topology)
        .map_err(|e| anyhow::anyhow!("{}: {}", e.step, e.message))?;
    if management.points.is_empty() {
        anyhow::bail!(
            "{label} marks no node as a measurement point (hosts are, routers with measure = true)"
        );
    }
    let points = management.points.clone();
    let server_addr = management.server_addr;
    running.management = Some(management);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(serve(args, server_addr, &points, &mut running))
}

/// The health mesh: the bundle without throughput (the paper's advice for meshes; it
/// then shares hosts), both directions of every pair.
fn lab_config(args: &DemoArgs) -> serde_json::Value {
    let every_ms = args.health_every.as_millis();
    serde_json::json!({
        "groups": [{"name": "lab", "kind": "mesh", "members": ["*"]}],
        "tests": [{"name": "health", "type": "health", "spec": {"throughput": false}}],
        "tasks": [{
            "name": "health-rounds", "test": "health", "group": "lab",
            "every": format!("{every_ms}ms"), "slip": format!("{}ms", every_ms / 2),
            "directions": "both"
        }]
    })
}

async fn serve(
    args: &DemoArgs,
    server_addr: std::net::Ipv4Addr,
    points: &[vantage_lab::management::Point],
    running: &mut Running,
) -> anyhow::Result<()> {
    let workdir = tempfile::Builder::new().prefix("vantage-demo-").tempdir()?;
    let listen = std::net::SocketAddr::from((server_addr, args.listen.port()));
    let (server, database, reader_token) = start_server(workdir.path(), listen).await?;
    let program = std::env::current_exe()?;
    for point in points {
        let token = mint_token(&server, &point.node, Role::Agent).await?;
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &point.netns])
            .arg(&program)
            .args(["agent", "--server", &server.url(), "--name", &point.node])
            .arg("--spool")
            .arg(workdir.path().join(format!("spool-{}", point.node)))
            .env("VANTAGE_TOKEN", &token)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(
                workdir.path().join(format!("agent-{}.log", point.node)),
            )?);
        if let Some(address) = point.lab_addrs.first() {
            // Measured over the emulated links only: the endpoint listens there.
            command.args(["--listen", &address.to_string()]);
            // Every address, so a trace's hops name the measurement points on a path.
            for advertised in &point.lab_addrs {
                command.args(["--advertise", &advertised.to_string()]);
            }
        }
        for (key, value) in &point.tags {
            command.args(["--tag", &format!("{key}={value}")]);
        }
        running.agents.push((point.node.clone(), command.spawn()?));
    }
    apply_config(&server, &lab_config(args)).await?;

    let url = server.url();
    println!(
        "vantage demo: lab {} up; server on {url} (SQLite archive {database}); {} agents in the lab's measurement points: {}",
        running.lab,
        points.len(),
        points.iter().map(|p| p.node.as_str()).collect::<Vec<_>>().join(", ")
    );
    crate::cmd_demo::print_sign_in(&url, &server.admin_token, &reader_token);
    println!("  health        vantage health matrix --server {url} --token {reader_token}");
    println!(
        "  select        vantage health select --server {url} --token {reader_token} --reference {} -k 3",
        points[0].node
    );
    println!(
        "  degrade       vantage lab set --lab {} LINK delay=20ms   (links: vantage lab status {})",
        running.lab, running.lab
    );
    println!(
        "  agent logs    {}",
        workdir.path().join("agent-NODE.log").display()
    );
    println!(
        "Health rounds every {:?} (the bundle without throughput). Ctrl-C stops and removes the lab.",
        args.health_every
    );
    let started_us = now_us();
    summaries_until_stopped(args.summary_every, args.duration, || {
        print_health(&server, started_us)
    })
    .await;
    running.stop_agents();
    server.shutdown().await?;
    Ok(())
}

async fn print_health(server: &RunningServer, started_us: i64) {
    let archive = &server.state.archive;
    let runs = match archive
        .runs_between(started_us - 60_000_000, i64::MAX)
        .await
    {
        Ok(runs) => runs,
        Err(error) => {
            eprintln!("vantage demo: archive query failed: {error}");
            return;
        }
    };
    let query = HealthQuery {
        config: None,
        group: None,
        weights: Default::default(),
        max_age_us: DEFAULT_MAX_AGE_US,
    };
    let answer = match health_matrix(archive, &server.state.recent, &query).await {
        Ok(answer) => answer,
        Err(error) => {
            eprintln!("vantage demo: health query failed: {error}");
            return;
        }
    };
    let matrix = &answer.matrix;
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    for pair in &matrix.pairs {
        *states
            .entry(format!("{:?}", pair.state).to_lowercase())
            .or_default() += 1;
    }
    println!(
        "-- {} -- runs: {}; pairs: {}",
        clock(),
        run_counts(&runs).join(", "),
        states
            .iter()
            .map(|(state, count)| format!("{state} {count}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Mean score from zone to zone (the paper's Fig. 9 in a few lines); without
    // zone tags, from host to host.
    let zone_of: BTreeMap<&str, &str> = matrix
        .hosts
        .iter()
        .map(|host| {
            (
                host.name.as_str(),
                host.zone.as_deref().unwrap_or(host.name.as_str()),
            )
        })
        .collect();
    let mut blocks: BTreeMap<(&str, &str), Vec<f64>> = BTreeMap::new();
    for pair in &matrix.pairs {
        if let Some(score) = pair.score {
            blocks
                .entry((zone_of[pair.client.as_str()], zone_of[pair.server.as_str()]))
                .or_default()
                .push(score);
        }
    }
    let grouped = if matrix.hosts.iter().any(|host| host.zone.is_some()) {
        ZONE_TAG
    } else {
        "host"
    };
    for ((from, to), scores) in &blocks {
        let mean = scores.iter().sum::<f64>() / scores.len() as f64;
        println!(
            "  {grouped} {from:>8} -> {to:<8} mean score {mean:.2} over {} pairs",
            scores.len()
        );
    }
    let fired: Vec<String> = matrix
        .pairs
        .iter()
        .filter(|pair| !pair.markers.is_empty())
        .map(|pair| {
            let names: Vec<&str> = pair.markers.iter().map(|marker| marker.name()).collect();
            format!("{}->{} ({})", pair.client, pair.server, names.join(","))
        })
        .collect();
    if !fired.is_empty() {
        println!("  markers on the latest round: {}", fired.join(" "));
    }
}
