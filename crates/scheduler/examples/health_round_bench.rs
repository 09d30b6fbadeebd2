//! How long one round of the network health bundle (Chard et al., FGCS 2015) takes
//! over N simulated agents: a full mesh, both directions, one period planned (1 h, a
//! 1-minute slip, unless given), with
//! and without the bundle's throughput part. The paper's serial round-robin took
//! about 20 minutes per round for 100 instances and grew with N.
//!
//! `cargo run --release -p vantage-scheduler --example health_round_bench -- [--agents N] [--every-min M] [--slip-min S]`

use std::collections::BTreeMap;
use std::process::ExitCode;

use chrono::DateTime;
use vantage_model::config::load_config;
use vantage_scheduler::{find_overlaps, plan, AgentInfo, Occupancy, PlanWindow};

fn config_text(spec: &str, every_min: usize, slip_min: usize) -> String {
    format!(
        r#"
[[groups]]
name = "all"
kind = "mesh"
members = ["*"]

[[tests]]
name = "bundle"
type = "health"
spec = {spec}

[[tasks]]
name = "health-rounds"
test = "bundle"
group = "all"
every = "{every_min}m"
slip = "{slip_min}m"
directions = "both"
"#
    )
}

fn main() -> ExitCode {
    let (mut agents_wanted, mut every_min, mut slip_min) = (100usize, 60usize, 1usize);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next().map(|v| v.parse::<usize>())) {
            ("--agents", Some(Ok(n))) if n >= 2 => agents_wanted = n,
            ("--every-min", Some(Ok(n))) if n >= 2 => every_min = n,
            ("--slip-min", Some(Ok(n))) => slip_min = n,
            _ => {
                eprintln!(
                    "health_round_bench: usage: [--agents N] (N >= 2) [--every-min M] (M >= 2) [--slip-min S]"
                );
                return ExitCode::from(2);
            }
        }
    }
    let agents: Vec<AgentInfo> = (0..agents_wanted)
        .map(|index| AgentInfo {
            name: format!("agent-{index:03}"),
            tags: BTreeMap::new(),
            accepts_inbound: true,
            capabilities: None,
            iperf3_listener: true,
        })
        .collect();
    let start = DateTime::from_timestamp(1_800_000_000 / 86_400 * 86_400, 0).expect("valid");
    let window = PlanWindow {
        start,
        end: start + chrono::Duration::minutes(every_min as i64),
    };
    println!(
        "health_round_bench: {agents_wanted} agents, full mesh both directions ({} runs per round), every {every_min} min, slip {slip_min} min",
        agents_wanted * (agents_wanted - 1)
    );
    for (label, spec) in [
        ("bundle without throughput", "{ throughput = false }"),
        ("bundle with 10 s throughput", "{}"),
    ] {
        let config = match load_config("bench.toml", &config_text(spec, every_min, slip_min)) {
            Ok((_, config)) => config,
            Err(errors) => {
                eprintln!("health_round_bench: invalid built-in config: {errors:?}");
                return ExitCode::FAILURE;
            }
        };
        let reserve = config.test("bundle").expect("defined").reserve;
        let planned = plan(&config, &agents, window, &[], 2026);
        let occupancies: Vec<Occupancy> = planned.runs.iter().map(Occupancy::from).collect();
        let overlaps = find_overlaps(&occupancies).len();
        let first = planned.runs.iter().map(|run| run.start).min();
        let last = planned.runs.iter().map(|run| run.end).max();
        let span_min = match (first, last) {
            (Some(first), Some(last)) => (last - first).num_milliseconds() as f64 / 60_000.0,
            _ => 0.0,
        };
        // Most runs one agent takes part in at the same time.
        let mut busiest = 0usize;
        for agent in &agents {
            let mut edges: Vec<(DateTime<chrono::Utc>, i32)> = planned
                .runs
                .iter()
                .filter(|run| run.client == agent.name || run.server == agent.name)
                .flat_map(|run| [(run.start, 1), (run.end, -1)])
                .collect();
            edges.sort();
            let mut now = 0i32;
            for (_, step) in edges {
                now += step;
                busiest = busiest.max(now as usize);
            }
        }
        let serial_min = (agents_wanted - 1) as f64 * reserve.as_secs_f64() / 60.0;
        println!(
            "  {label}: reservation {:.0} s per run",
            reserve.as_secs_f64()
        );
        println!(
            "    planned {} runs, {} non-starts, round spans {span_min:.1} min; at most {busiest} runs at once per agent; {overlaps} conflicting overlaps",
            planned.runs.len(),
            planned.non_starts.len()
        );
        if let Some(campaign) = planned.campaigns.first() {
            println!(
                "    campaign: {} rounds of parallel pairs (lower bound {})",
                campaign.rounds, campaign.min_rounds
            );
        }
        println!(
            "    one host probing its {} peers one after another: {serial_min:.1} min (the paper's round-robin)",
            agents_wanted - 1
        );
        if overlaps > 0 {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
