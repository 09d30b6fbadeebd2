//! A simulated fleet for `bench/scale`: N agents that speak the agent API as
//! `vantage agent` does — register, heartbeat, long-poll for runs with the agent's
//! horizon, upload results in the agent's rounds and batch size — but measure nothing:
//! each run's result is a synthetic document, uploaded once the run's planned end has
//! passed. So one process puts a 1 000-agent fleet's control-plane load on a real server.
//!
//! Usage: fleet --server URL --admin-token TOKEN --agents N --config FILE.json
//!              [--warm-up-s S] [--measure-s S] [--prefix NAME]
//! Creates an agent token per agent (admin API), registers them, applies the
//! configuration, runs for the warm-up and then the measured window, and prints one
//! JSON report (what the fleet saw in the window) on stdout. Progress goes to stderr.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use vantage_agent::client::{CallError, ServerClient};
use vantage_agent::{upload_round, AgentOptions, FETCH_WAIT, UPLOAD_BATCH};
use vantage_model::control::{
    AgentRegistration, AssignedRun, BatchItemAck, ResultUpload, RunOutcome,
};

// The simulator's thousand agents allocate as the server does; with the C library's
// allocator a fifth of its CPU went to malloc and free (arena locks, consolidation).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Options {
    server: String,
    admin_token: String,
    agents: usize,
    config: std::path::PathBuf,
    warm_up: Duration,
    measure: Duration,
    prefix: String,
}

fn parse_options() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let (mut server, mut admin_token, mut agents, mut config) = (None, None, None, None);
    let (mut warm_up_s, mut measure_s, mut prefix) = (60u64, 120u64, "sim".to_string());
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: '{value}' is not a non-negative integer"))
        };
        match flag.as_str() {
            "--server" => server = Some(value.clone()),
            "--admin-token" => admin_token = Some(value.clone()),
            "--agents" => agents = Some(number()? as usize),
            "--config" => config = Some(std::path::PathBuf::from(&value)),
            "--warm-up-s" => warm_up_s = number()?,
            "--measure-s" => measure_s = number()?,
            "--prefix" => prefix = value.clone(),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    let options = Options {
        server: server.ok_or("--server is required")?,
        admin_token: admin_token.ok_or("--admin-token is required")?,
        agents: agents.ok_or("--agents is required")?,
        config: config.ok_or("--config is required")?,
        warm_up: Duration::from_secs(warm_up_s),
        measure: Duration::from_secs(measure_s),
        prefix,
    };
    if options.agents < 2 || options.measure.is_zero() {
        return Err("--agents must be at least 2 and --measure-s positive".into());
    }
    Ok(options)
}

/// What the fleet saw during the measured window.
#[derive(Default)]
struct Window {
    runs_fetched: u64,
    /// Results whose planned end fell in the window (what the fleet offered).
    results_due: u64,
    results_stored: u64,
    duplicates: u64,
    refused: u64,
    fetch_errors: u64,
    upload_errors: u64,
    /// How long before its planned start each run reached its agent.
    dispatch_lead_s: Vec<f64>,
    /// Runs that reached their agent after their planned start.
    late_dispatches: u64,
    upload_ms: Vec<f64>,
    /// Results per upload request.
    upload_results: Vec<f64>,
    /// Uploads answered with the server's pace (`next_round_ms`).
    paced_uploads: u64,
    /// From a run's planned end to the server's acknowledgement of its result.
    result_lag_s: Vec<f64>,
    first_error: Option<String>,
}

struct Clock {
    measure_from: Instant,
    measure_to: Instant,
}

impl Clock {
    fn in_window(&self, at: Instant) -> bool {
        at >= self.measure_from && at < self.measure_to
    }
}

struct Fleet {
    clock: Clock,
    window: Mutex<Window>,
}

impl Fleet {
    fn record(&self, at: Instant, update: impl FnOnce(&mut Window)) {
        if self.clock.in_window(at) {
            update(&mut self.window.lock().expect("window lock"));
        }
    }

    fn error(&self, at: Instant, error: &CallError, upload: bool) {
        self.record(at, |window| {
            if upload {
                window.upload_errors += 1;
            } else {
                window.fetch_errors += 1;
            }
            window.first_error.get_or_insert_with(|| error.to_string());
        });
    }
}

/// What the fleet keeps of a fetched run until it uploads its result: a thousand agents
/// hold a few million runs between fetch and upload, and whole assigned runs (spec,
/// addresses, ticket) took the simulator past 5 GiB.
struct Pending {
    run_id: String,
    test: String,
    planned_start: DateTime<Utc>,
    planned_end: DateTime<Utc>,
}

impl From<AssignedRun> for Pending {
    fn from(run: AssignedRun) -> Pending {
        Pending {
            run_id: run.run_id,
            test: run.test,
            planned_start: run.planned_start,
            planned_end: run.planned_end,
        }
    }
}

/// A synthetic result document of the run's kind, with the summary fields the archive
/// indexes (varied a little per run).
fn result_document(run: &Pending) -> serde_json::Value {
    let spread = (run.run_id.bytes().map(u64::from).sum::<u64>() % 50) as f64;
    match run.test.as_str() {
        "throughput" => serde_json::json!({"test": "throughput", "summary": {
            "sent_bps": 9.0e8 + spread * 1.0e6, "received_bps": 8.9e8 + spread * 1.0e6,
            "retransmits": 0}}),
        _ => {
            let median_us = 100.0 + spread;
            serde_json::json!({"test": run.test, "summary": {
                "sent": 10, "received": 10, "loss_ratio": 0.0,
                "rtt_us": {"min": median_us - 5.0, "median": median_us, "mean": median_us,
                           "p95": median_us + 9.0, "p99": median_us + 11.0,
                           "max": median_us + 20.0, "stddev": 3.1},
                "jitter_us": {"rfc3550": 2.0, "mean_abs_delta": 2.4, "median_abs_delta": 2.0}}})
        }
    }
}

/// A fetched run waiting for its planned end; ordered by that end.
struct Due {
    end: DateTime<Utc>,
    run: Pending,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.end == other.end && self.run.run_id == other.run.run_id
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.end, &self.run.run_id).cmp(&(other.end, &other.run.run_id))
    }
}

/// When `at` (a wall-clock time) falls, on the monotonic clock.
fn instant_of(at: DateTime<Utc>) -> Instant {
    let now = Utc::now();
    match (at - now).to_std() {
        Ok(ahead) => Instant::now() + ahead,
        Err(_) => Instant::now() - (now - at).to_std().unwrap_or_default(),
    }
}

async fn heartbeats(client: ServerClient, name: String, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        // A missed heartbeat is harmless here: fetches also mark the agent alive.
        let _ = client.heartbeat(&name).await;
    }
}

async fn fetches(
    fleet: Arc<Fleet>,
    client: ServerClient,
    name: String,
    horizon: Duration,
    due: Arc<Mutex<BinaryHeap<Reverse<Due>>>>,
) {
    let mut resync = true;
    loop {
        let began = Instant::now();
        match client.fetch_runs(&name, FETCH_WAIT, horizon, resync).await {
            Ok(runs) => {
                resync = false;
                let now = Utc::now();
                fleet.record(Instant::now(), |window| {
                    for run in &runs {
                        let lead_s = (run.planned_start - now).num_milliseconds() as f64 / 1e3;
                        window.runs_fetched += 1;
                        window.late_dispatches += u64::from(lead_s < 0.0);
                        window.dispatch_lead_s.push(lead_s);
                    }
                });
                let mut due = due.lock().expect("due lock");
                for run in runs {
                    due.push(Reverse(Due {
                        end: run.planned_end,
                        run: Pending::from(run),
                    }));
                }
            }
            Err(error) => {
                resync = true;
                fleet.error(began, &error, false);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

async fn uploads(
    fleet: Arc<Fleet>,
    client: ServerClient,
    name: String,
    due: Arc<Mutex<BinaryHeap<Reverse<Due>>>>,
) {
    let mut ready: Vec<Pending> = Vec::new();
    // The server's pace from its last answer, as the agent keeps it.
    let mut next_round_ms = None;
    loop {
        let round_began = tokio::time::Instant::now();
        let now = Utc::now();
        {
            let mut due = due.lock().expect("due lock");
            while due.peek().is_some_and(|next| next.0.end <= now) {
                let run = due.pop().expect("peeked").0.run;
                let at = instant_of(run.planned_end);
                fleet.record(at, |window| window.results_due += 1);
                ready.push(run);
            }
        }
        while !ready.is_empty() {
            let batch: Vec<Pending> = ready.drain(..ready.len().min(UPLOAD_BATCH)).collect();
            let uploads: Vec<ResultUpload> = batch
                .iter()
                .map(|run| ResultUpload {
                    run_id: run.run_id.clone(),
                    agent: name.clone(),
                    outcome: RunOutcome::Completed,
                    actual_start: run.planned_start,
                    actual_end: run.planned_end,
                    result: Some(result_document(run)),
                    error: None,
                })
                .collect();
            let began = Instant::now();
            match client.upload_batch(&uploads).await {
                Ok(answer) => {
                    next_round_ms = answer.next_round_ms;
                    let acknowledged = Instant::now();
                    let elapsed_ms = (acknowledged - began).as_secs_f64() * 1e3;
                    fleet.record(began, |window| {
                        window.upload_ms.push(elapsed_ms);
                        window.upload_results.push(batch.len() as f64);
                        window.paced_uploads += u64::from(next_round_ms.is_some());
                    });
                    for (run, ack) in batch.iter().zip(answer.results) {
                        let lag_s = (Utc::now() - run.planned_end).num_milliseconds() as f64 / 1e3;
                        fleet.record(acknowledged, |window| match ack {
                            BatchItemAck::Stored(ack) if ack.duplicate => window.duplicates += 1,
                            BatchItemAck::Stored(_) => {
                                window.results_stored += 1;
                                window.result_lag_s.push(lag_s);
                            }
                            BatchItemAck::Refused { error, .. } => {
                                window.refused += 1;
                                window.first_error.get_or_insert(error);
                            }
                        });
                    }
                }
                Err(error) => {
                    // Kept for the next round, as the agent's spool keeps them.
                    fleet.error(began, &error, true);
                    ready.extend(batch);
                    break;
                }
            }
        }
        tokio::time::sleep_until(round_began + upload_round(next_round_ms)).await;
    }
}

fn percentile(values: &mut [f64], quantile: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() - 1) as f64 * quantile).round() as usize;
    Some(values[rank])
}

/// This process's CPU time (user + system), in seconds.
async fn admin_call(
    options: &Options,
    request: reqwest::RequestBuilder,
    what: &str,
) -> Result<serde_json::Value, String> {
    let response = request
        .bearer_auth(&options.admin_token)
        .send()
        .await
        .map_err(|error| format!("{what}: {error}"))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(format!("{what}: {status}: {body}"));
    }
    serde_json::from_str(&body).map_err(|error| format!("{what}: unreadable answer: {error}"))
}

async fn run(options: Options) -> Result<serde_json::Value, String> {
    let http = reqwest::Client::new();
    // The timings `vantage agent` runs with.
    let agent_defaults = AgentOptions::new(&options.server, "", "", std::path::PathBuf::new());
    let names: Vec<String> = (0..options.agents)
        .map(|index| format!("{}-{index:04}", options.prefix))
        .collect();
    eprintln!("fleet: creating and registering {} agents", names.len());
    let began = Instant::now();
    let mut clients = Vec::with_capacity(names.len());
    for name in &names {
        let answer = admin_call(
            &options,
            http.post(format!("{}/api/v1/tokens", options.server))
                .json(&serde_json::json!({"name": name, "role": "agent"})),
            "creating an agent token",
        )
        .await?;
        let token = answer["token"]
            .as_str()
            .ok_or_else(|| format!("token answer without a token: {answer}"))?;
        let client = ServerClient::new(std::slice::from_ref(&options.server), token, None)
            .map_err(|error| error.to_string())?;
        client
            .register(&AgentRegistration {
                name: name.clone(),
                addresses: vec!["127.0.0.1".into()],
                endpoint_port: 9,
                iperf3_port: None,
                tags: Default::default(),
                capabilities: vec!["latency".into(), "throughput".into()],
                accepts_inbound: true,
                version: None,
            })
            .await
            .map_err(|error| format!("registering {name}: {error}"))?;
        clients.push(client);
    }
    eprintln!(
        "fleet: {} agents registered in {:.1} s; applying the configuration",
        names.len(),
        began.elapsed().as_secs_f64()
    );
    let config_text = std::fs::read_to_string(&options.config)
        .map_err(|error| format!("cannot read {}: {error}", options.config.display()))?;
    let config: serde_json::Value = serde_json::from_str(&config_text)
        .map_err(|error| format!("{} is not JSON: {error}", options.config.display()))?;
    admin_call(
        &options,
        http.put(format!("{}/api/v1/config", options.server))
            .json(&config),
        "applying the configuration",
    )
    .await?;

    let started = Instant::now();
    let fleet = Arc::new(Fleet {
        clock: Clock {
            measure_from: started + options.warm_up,
            measure_to: started + options.warm_up + options.measure,
        },
        window: Mutex::new(Window::default()),
    });
    let mut tasks = tokio::task::JoinSet::new();
    for (name, client) in names.iter().zip(clients) {
        let due = Arc::new(Mutex::new(BinaryHeap::new()));
        tasks.spawn(heartbeats(
            client.clone(),
            name.clone(),
            agent_defaults.heartbeat_interval,
        ));
        tasks.spawn(fetches(
            fleet.clone(),
            client.clone(),
            name.clone(),
            agent_defaults.horizon,
            due.clone(),
        ));
        tasks.spawn(uploads(fleet.clone(), client, name.clone(), due));
    }
    eprintln!(
        "fleet: running; warm-up {} s, then {} s measured",
        options.warm_up.as_secs(),
        options.measure.as_secs()
    );
    tokio::time::sleep_until(fleet.clock.measure_from.into()).await;
    // bench/scale reads these two lines to measure the server over the same window.
    eprintln!("fleet: measuring");
    let cpu_from = vantage_probe::cpu::process_cpu_s();
    tokio::time::sleep_until(fleet.clock.measure_to.into()).await;
    let cpu_s = vantage_probe::cpu::process_cpu_s() - cpu_from;
    eprintln!("fleet: window ended");
    tasks.abort_all();

    let mut window = std::mem::take(&mut *fleet.window.lock().expect("window lock"));
    let measure_s = options.measure.as_secs_f64();
    let quantiles = |values: &mut Vec<f64>| serde_json::json!({"p50": percentile(values, 0.5), "p99": percentile(values, 0.99)});
    Ok(serde_json::json!({
        "agents": options.agents,
        "measure_s": measure_s,
        "runs_fetched": window.runs_fetched,
        "results_due": window.results_due,
        "results_stored": window.results_stored,
        "duplicates": window.duplicates,
        "refused": window.refused,
        "fetch_errors": window.fetch_errors,
        "upload_errors": window.upload_errors,
        "first_error": window.first_error,
        "offered_results_per_s": window.results_due as f64 / measure_s,
        "stored_results_per_s": window.results_stored as f64 / measure_s,
        "late_dispatches": window.late_dispatches,
        "dispatch_lead_s": {"p01": percentile(&mut window.dispatch_lead_s, 0.01),
                            "p50": percentile(&mut window.dispatch_lead_s, 0.5)},
        "upload_ms": quantiles(&mut window.upload_ms),
        "uploads_per_s": window.upload_ms.len() as f64 / measure_s,
        "results_per_upload": quantiles(&mut window.upload_results),
        "paced_uploads": window.paced_uploads,
        "result_lag_s": quantiles(&mut window.result_lag_s),
        "fleet_cpu_share": cpu_s / measure_s,
        "cpu_ms_per_agent_minute": cpu_s * 1e3 / options.agents as f64 / (measure_s / 60.0),
    }))
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("fleet: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("fleet: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(options)) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("fleet: {message}");
            ExitCode::FAILURE
        }
    }
}
