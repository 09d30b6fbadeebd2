//! Scheduling benchmark: N simulated agents, a full mesh of latency
//! every 60 s and of throughput every hour; plans a day in one-hour windows
//! and prints the figures.
//!
//! `cargo run --release -p vantage-scheduler --example schedule_bench -- [--agents N] [--hours H] [--sites K] [--everything 1]`
//! `--sites K` puts the agents behind K uplink segments (round-robin), so
//! throughput runs between sites also contend for the uplinks.
//!
//! By default it plans as the server does: only exclusive runs are reserved ahead
//! (`plan_reserved`) and each agent's light runs (the latency mesh) are placed when
//! it fetches them (`LightTasks::runs_for`), timed here for one minute of every
//! agent. `--everything 1` plans every run ahead with `plan`, for comparison.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use chrono::{DateTime, Utc};
use vantage_model::config::load_config;
use vantage_scheduler::{
    find_overlaps, plan, plan_reserved, AgentInfo, LightTasks, Occupancy, Plan, PlanWindow,
    PlannedRun,
};

struct Options {
    agents: usize,
    hours: i64,
    sites: usize,
    everything: bool,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        agents: 100,
        hours: 24,
        sites: 0,
        everything: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number: usize = value
            .parse()
            .map_err(|_| format!("{flag}: '{value}' is not a non-negative integer"))?;
        match flag.as_str() {
            "--agents" if number >= 2 => options.agents = number,
            "--hours" if number >= 1 => options.hours = number as i64,
            "--sites" => options.sites = number,
            "--everything" => options.everything = number != 0,
            _ => {
                return Err(format!(
                    "unknown flag or out-of-range value: {flag} {value}"
                ))
            }
        }
    }
    Ok(options)
}

fn config_text(sites: usize) -> String {
    let mut text = String::from(
        r#"
[[groups]]
name = "all"
kind = "mesh"
members = ["*"]

[[tests]]
name = "rtt"
type = "latency"
spec = { count = 10, interval = "100ms", timeout = "1s" }

[[tests]]
name = "bulk"
type = "throughput"
spec = { duration = "10s" }

[[tasks]]
name = "latency-mesh"
test = "rtt"
group = "all"
every = "60s"
slip = "50s"

[[tasks]]
name = "throughput-mesh"
test = "bulk"
group = "all"
every = "1h"
round_gap = "3s"
"#,
    );
    for site in 0..sites {
        text.push_str(&format!(
            "\n[[segments]]\nname = \"uplink-{site}\"\nmembers = [\"site=s{site}\"]\n"
        ));
    }
    text
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("schedule_bench: {message}");
            return ExitCode::from(2);
        }
    };
    let config = match load_config("bench.toml", &config_text(options.sites)) {
        Ok((_, config)) => config,
        Err(errors) => {
            eprintln!("schedule_bench: invalid built-in config: {errors:?}");
            return ExitCode::FAILURE;
        }
    };
    let agents: Vec<AgentInfo> = (0..options.agents)
        .map(|index| AgentInfo {
            name: format!("agent-{index:03}"),
            tags: if options.sites > 0 {
                [("site".to_string(), format!("s{}", index % options.sites))]
                    .into_iter()
                    .collect()
            } else {
                BTreeMap::new()
            },
            accepts_inbound: true,
            capabilities: None,
            iperf3_listener: true,
        })
        .collect();

    let light_started = Instant::now();
    let light = LightTasks::new(&config, &agents);
    let light_seconds = light_started.elapsed().as_secs_f64();
    // What one planning call places: every run, or only the reserved ones.
    let plan_window = |window: PlanWindow, existing: &[PlannedRun]| -> Plan {
        if options.everything {
            plan(&config, &agents, window, existing, 2026)
        } else {
            plan_reserved(
                &config,
                &agents,
                window,
                existing,
                2026,
                &light,
                window.start,
            )
        }
    };

    let day_start: DateTime<Utc> = DateTime::from_timestamp(1_800_000_000 / 86_400 * 86_400, 0)
        .expect("fixed timestamp is valid");
    let mut carried: Vec<PlannedRun> = Vec::new();
    let mut runs_by_task: BTreeMap<String, usize> = BTreeMap::new();
    let mut segment_crossing_throughput_runs = 0usize;
    let mut non_starts_by_task: BTreeMap<String, usize> = BTreeMap::new();
    let mut first_reason: BTreeMap<String, String> = BTreeMap::new();
    let mut campaigns = Vec::new();
    let mut overlaps_found = 0;
    let mut planning_seconds = 0.0;
    let mut slowest_window_seconds: f64 = 0.0;
    let mut first_hour_runs: Vec<PlannedRun> = Vec::new();

    for hour in 0..options.hours {
        let window = PlanWindow {
            start: day_start + chrono::Duration::hours(hour),
            end: day_start + chrono::Duration::hours(hour + 1),
        };
        let started = Instant::now();
        let plan = plan_window(window, &carried);
        let elapsed = started.elapsed().as_secs_f64();
        planning_seconds += elapsed;
        slowest_window_seconds = slowest_window_seconds.max(elapsed);

        // Independent check of every window, including the runs carried over.
        let occupancies: Vec<Occupancy> = carried
            .iter()
            .chain(&plan.runs)
            .map(Occupancy::from)
            .collect();
        overlaps_found += find_overlaps(&occupancies).len();

        for run in &plan.runs {
            *runs_by_task.entry(run.task.clone()).or_default() += 1;
            if run.task == "throughput-mesh"
                && run
                    .claims
                    .iter()
                    .any(|claim| claim.resource.starts_with("segment:"))
            {
                segment_crossing_throughput_runs += 1;
            }
        }
        for non_start in &plan.non_starts {
            *non_starts_by_task
                .entry(non_start.task.clone())
                .or_default() += 1;
            first_reason
                .entry(non_start.task.clone())
                .or_insert_with(|| non_start.reason.clone());
        }
        campaigns.extend(plan.campaigns);
        if hour == 0 {
            first_hour_runs = plan.runs.clone();
        }
        carried = plan
            .runs
            .into_iter()
            .filter(|run| run.end > window.end)
            .collect();
    }

    // A server loop plans a short window every few seconds, passing the runs
    // already stored around it; time one such tick in the middle of hour 0,
    // with that minute's latency occurrence not yet planned.
    let tick_window = PlanWindow {
        start: day_start + chrono::Duration::minutes(30),
        end: day_start + chrono::Duration::minutes(30) + chrono::Duration::seconds(2),
    };
    let tick_occurrence = format!("/{}", tick_window.start.timestamp() / 60);
    first_hour_runs
        .retain(|run| !(run.task == "latency-mesh" && run.run_id.ends_with(&tick_occurrence)));
    let started = Instant::now();
    let tick = plan_window(tick_window, &first_hour_runs);
    let tick_seconds = started.elapsed().as_secs_f64();
    // The tick in which the hourly campaign falls due, with the runs stored before it.
    let campaign_window = PlanWindow {
        start: day_start + chrono::Duration::hours(1) - chrono::Duration::seconds(1),
        end: day_start + chrono::Duration::hours(1) + chrono::Duration::seconds(1),
    };
    let stored_before: Vec<PlannedRun> = first_hour_runs
        .iter()
        .filter(|run| run.end > campaign_window.start)
        .cloned()
        .collect();
    let started = Instant::now();
    let campaign_tick = plan_window(campaign_window, &stored_before);
    let campaign_tick_seconds = started.elapsed().as_secs_f64();
    let light_minute = (!options.everything).then(|| {
        light_minute(
            &light,
            &agents,
            &first_hour_runs,
            day_start + chrono::Duration::minutes(30),
        )
    });

    let n = options.agents;
    let mesh_rounds_per_direction = if n % 2 == 0 { n - 1 } else { n };
    let total_runs: usize = runs_by_task.values().sum();
    println!(
        "schedule_bench: {n} agents, {} site uplinks, {} h planned in 1 h windows",
        options.sites, options.hours
    );
    println!("  planning time total      {planning_seconds:.2} s ({:.3} s per 1 h window, slowest {slowest_window_seconds:.3} s)",
        planning_seconds / options.hours as f64);
    println!(
        "  runs planned             {total_runs} ({:.0} runs/s of planning)",
        total_runs as f64 / planning_seconds.max(1e-9)
    );
    for (task, runs) in &runs_by_task {
        let non_starts = non_starts_by_task.get(task).copied().unwrap_or(0);
        println!("    {task:<18} planned {runs:>9}  non-starts {non_starts:>7}");
        if let Some(reason) = first_reason.get(task) {
            println!("      first non-start: {reason}");
        }
    }
    if options.sites > 0 {
        println!(
            "  throughput runs crossing an uplink: {segment_crossing_throughput_runs} planned"
        );
    }
    if let Some(minute) = &light_minute {
        println!(
            "  light runs (placed as agents fetch them): {} tasks, {} flows per occurrence, pairs worked out in {:.3} s",
            light.task_names().count(),
            light.flow_count(),
            light_seconds
        );
        println!(
            "    one minute, every agent: {} runs, {} non-starts; per agent p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            minute.runs,
            minute.non_starts,
            minute.p50_ms,
            minute.p99_ms,
            minute.max_ms
        );
        overlaps_found += minute.overlaps;
    }
    println!("  overlapping conflicting runs (independent check): {overlaps_found}");
    println!(
        "  2 s replanning tick      {:.1} ms with {} stored runs of the hour passed in ({} new runs)",
        tick_seconds * 1000.0,
        first_hour_runs.len(),
        tick.runs.len()
    );
    println!(
        "  tick placing the campaign {:.1} ms ({} new runs, {} non-starts)",
        campaign_tick_seconds * 1000.0,
        campaign_tick.runs.len(),
        campaign_tick.non_starts.len()
    );
    if let Some(peak_kib) = peak_rss_kib() {
        println!(
            "  peak RSS                 {:.0} MB",
            peak_kib as f64 / 1024.0
        );
    }
    if let Some(campaign) = campaigns.first() {
        let minutes = (campaign.end - campaign.start).num_milliseconds() as f64 / 60_000.0;
        let reserve_s = config
            .test("bulk")
            .map_or(0.0, |test| test.reserve.as_secs_f64());
        let serial_hours = campaign.runs_planned as f64 * reserve_s / 3600.0;
        println!(
            "  throughput campaign      {} runs in {} rounds (lower bound {}; 2(N-1) = {} for both directions), {minutes:.1} min",
            campaign.runs_planned,
            campaign.rounds,
            campaign.min_rounds,
            2 * mesh_rounds_per_direction
        );
        println!(
            "  rounds per direction     {:.1} vs N-1 = {}",
            campaign.rounds as f64 / 2.0,
            n - 1
        );
        println!(
            "  planned runs one at a time {serial_hours:.1} h (the serial round-robin of Chard et al., FGCS 2015)"
        );
        if let Some(overload) = &campaign.overload {
            println!(
                "  campaign sampled         {}",
                overload.describe(&campaign.task)
            );
        }
        let longest = campaigns.iter().map(|c| c.rounds).max().unwrap_or(0);
        println!(
            "  campaigns                {} (most rounds in one: {longest})",
            campaigns.len()
        );
    }
    if overlaps_found > 0 {
        eprintln!("schedule_bench: the plan has {overlaps_found} conflicting overlaps");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

struct LightMinute {
    runs: usize,
    non_starts: usize,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    overlaps: usize,
}

/// Every agent's light runs of one minute from `start`, placed as each fetches them
/// around the reserved runs that may be in their way, timed per agent; each agent's
/// runs are checked against the reserved ones (light runs only conflict with those).
fn light_minute(
    light: &LightTasks,
    agents: &[AgentInfo],
    reserved: &[PlannedRun],
    start: DateTime<Utc>,
) -> LightMinute {
    let window = PlanWindow {
        start,
        end: start + chrono::Duration::minutes(1),
    };
    let light_end = window.end + chrono::Duration::from_std(light.tail()).unwrap_or_default();
    let in_the_way: Vec<PlannedRun> = reserved
        .iter()
        .filter(|run| run.end > window.start && run.start < light_end)
        .cloned()
        .collect();
    let mut minute = LightMinute {
        runs: 0,
        non_starts: 0,
        p50_ms: 0.0,
        p99_ms: 0.0,
        max_ms: 0.0,
        overlaps: 0,
    };
    let mut times_ms = Vec::with_capacity(agents.len());
    for agent in agents {
        let started = Instant::now();
        let placed = light.runs_for(&agent.name, window, &in_the_way, 2026);
        times_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        minute.runs += placed.runs.len();
        minute.non_starts += placed.non_starts.len();
        let occupancies: Vec<Occupancy> = in_the_way
            .iter()
            .chain(&placed.runs)
            .map(Occupancy::from)
            .collect();
        minute.overlaps += find_overlaps(&occupancies).len();
    }
    times_ms.sort_by(f64::total_cmp);
    let at = |quantile: f64| times_ms[((times_ms.len() - 1) as f64 * quantile).round() as usize];
    minute.p50_ms = at(0.5);
    minute.p99_ms = at(0.99);
    minute.max_ms = at(1.0);
    minute
}

/// The process's peak resident set (VmHWM), where /proc tells it.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
