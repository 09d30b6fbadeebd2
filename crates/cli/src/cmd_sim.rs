//! `vantage sim`: flow-level simulations of the deadline-transfer and headroom services
//! (Alali, PhD dissertation, University of Virginia, 2019, ch. 3 and 4): the Calibers
//! scheduler's policies on Google's G-scale WAN, and the static and dynamic headroom
//! services with their M/G/1 model.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use indicatif::ProgressBar;
use plotters::prelude::*;
use serde::Serialize;
use vantage_model::units::parse_duration;
use vantage_sim::calibers::{simulate_calibers, CalibersConfig, Policy};
use vantage_sim::headroom::{
    mg1, simulate_headroom, HeadroomSimConfig, Mg1, Mg1Input, ServiceThroughput,
};
use vantage_sim::topology::Topology;

use crate::cmd_latency::{print_json, print_stdout, styled_progress_bar};

#[derive(Args, Debug)]
pub struct SimArgs {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(Subcommand, Debug)]
enum SimCommand {
    /// Calibers deadline transfers on G-scale: reject ratio, utilisation and performance
    /// index per scheduling policy and arrival rate (defaults: the dissertation's Fig. 4.2).
    Calibers(CalibersArgs),
    /// Headroom services for elephant flows: the M/G/1 model of one link's headroom and the
    /// six-router flow simulation of static (SH) against dynamic (DH) headroom.
    Headroom(HeadroomArgs),
}

#[derive(Args, Debug)]
struct CalibersArgs {
    /// Requests per second over the network (comma-separated list).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0.05,0.15,0.25,0.35,0.45,0.55,0.65,0.75,0.85,0.95,1.05,1.15,1.25,1.35,1.45,1.55"
    )]
    lambda: Vec<f64>,
    /// Scheduling epochs (comma-separated durations; the dissertation's sensitivity run is 1s).
    #[arg(long, value_delimiter = ',', default_value = "3m")]
    epoch: Vec<String>,
    /// Policies (comma-separated): fixed, global-sjf, global-ljf, local-sjf, local-ljf.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fixed,global-sjf,global-ljf,local-sjf,local-ljf"
    )]
    policy: Vec<String>,
    /// Transfer requests per run.
    #[arg(long, default_value_t = 30_000)]
    requests: usize,
    /// Runs per point, each with its own requests (the same for every policy).
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// Seed of the first run; the same seed gives the same figures.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where to write the chart (SVG): reject ratio, utilisation and performance index
    /// against λ, one line per policy, one row per epoch.
    #[arg(long, value_name = "FILE", default_value = "calibers.svg")]
    svg: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct HeadroomArgs {
    /// M/G/1 model: elephant flows arriving per second.
    #[arg(long, default_value_t = Mg1Input::CHECK_CASE.arrival_rate_per_s)]
    lambda: f64,
    /// Pareto shape α of flow sizes (above 2 for the model).
    #[arg(long, default_value_t = Mg1Input::CHECK_CASE.pareto_shape)]
    alpha: f64,
    /// Pareto scale x_m, the smallest flow, in GB (10⁹ bytes).
    #[arg(long, default_value_t = Mg1Input::CHECK_CASE.pareto_scale_bytes / 1e9)]
    scale_gb: f64,
    /// The headroom C_hr flows share, in Mbit/s.
    #[arg(long, default_value_t = Mg1Input::CHECK_CASE.headroom_bps / 1e6)]
    headroom_mbps: f64,
    /// Simulation: elephant flows per second over the six routers.
    #[arg(long, default_value_t = HeadroomSimConfig::default().arrival_rate_per_s)]
    sim_lambda: f64,
    /// Simulation: traffic concentration w from 0 (uniform) to 1 (all B↔C), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,1")]
    concentration: Vec<f64>,
    /// Simulation: Pareto shape of flow sizes.
    #[arg(long, default_value_t = HeadroomSimConfig::default().pareto_shape)]
    sim_alpha: f64,
    /// Simulation: Pareto scale in GB (15 GB: a 20 GB mean at α = 4).
    #[arg(long, default_value_t = HeadroomSimConfig::default().pareto_scale_bytes / 1e9)]
    sim_scale_gb: f64,
    /// Simulation: flows per run.
    #[arg(long, default_value_t = HeadroomSimConfig::default().flows)]
    flows: usize,
    /// Simulation: runs (0: the model only).
    #[arg(long, default_value_t = HeadroomSimConfig::default().runs)]
    runs: usize,
    /// Simulation: seed; the same seed gives the same figures.
    #[arg(long, default_value_t = HeadroomSimConfig::default().seed)]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: SimArgs) -> ExitCode {
    let outcome = match args.command {
        SimCommand::Calibers(args) => calibers(args),
        SimCommand::Headroom(args) => headroom(args),
    };
    outcome.unwrap_or_else(|message| {
        eprintln!("vantage sim: {message}");
        ExitCode::from(2)
    })
}

/// A progress bar counting `what`, with the time left.
fn progress_bar(json: bool, total: u64, what: &str) -> Option<ProgressBar> {
    styled_progress_bar(
        json,
        total,
        &format!("{{bar:30}} {{pos}}/{{len}} {what} {{eta}}"),
    )
}

#[derive(Serialize)]
struct CalibersReport {
    topology: &'static str,
    requests_per_run: usize,
    runs_per_point: usize,
    seed: u64,
    runs: Vec<CalibersPoint>,
}

/// One policy at one arrival rate and epoch: means over the runs.
#[derive(Serialize)]
struct CalibersPoint {
    policy: &'static str,
    lambda: f64,
    epoch_s: f64,
    performance_index: f64,
    reject_ratio: f64,
    utilisation_ratio: f64,
    success_ratio: f64,
}

fn calibers(args: CalibersArgs) -> Result<ExitCode, String> {
    let policies = args
        .policy
        .iter()
        .map(|name| {
            Policy::from_name(name).ok_or(format!(
                "--policy: '{name}' is not a policy (fixed, global-sjf, global-ljf, local-sjf, local-ljf)"
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let epochs_s = args
        .epoch
        .iter()
        .map(|text| {
            parse_duration(text)
                .map(|d| d.as_secs_f64())
                .map_err(|e| format!("--epoch: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if args.runs == 0 {
        return Err("--runs: at least one run".to_string());
    }
    let topology = Topology::g_scale();
    let points = (args.lambda.len() * epochs_s.len() * policies.len() * args.runs) as u64;
    let bar = progress_bar(args.json, points, "simulations");
    let mut report = CalibersReport {
        topology: "g-scale",
        requests_per_run: args.requests,
        runs_per_point: args.runs,
        seed: args.seed,
        runs: Vec::new(),
    };
    for &epoch_s in &epochs_s {
        for &lambda in &args.lambda {
            let config = CalibersConfig {
                arrival_rate_per_s: lambda,
                epoch_s,
                requests: args.requests,
                ..CalibersConfig::default()
            };
            for &policy in &policies {
                let mut sums = [0.0; 4];
                for run in 0..args.runs {
                    let outcome = simulate_calibers(
                        &topology,
                        &config,
                        policy,
                        args.seed,
                        run as u64,
                        &mut |_| {},
                    )
                    .map_err(|e| e.to_string())?;
                    for (sum, value) in sums.iter_mut().zip([
                        outcome.performance_index,
                        outcome.reject_ratio,
                        outcome.utilisation_ratio,
                        outcome.success_ratio,
                    ]) {
                        *sum += value / args.runs as f64;
                    }
                    if let Some(bar) = &bar {
                        bar.inc(1);
                    }
                }
                report.runs.push(CalibersPoint {
                    policy: policy.name(),
                    lambda,
                    epoch_s,
                    performance_index: sums[0],
                    reject_ratio: sums[1],
                    utilisation_ratio: sums[2],
                    success_ratio: sums[3],
                });
            }
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    calibers_chart(&report, &epochs_s, &policies, &args.svg)
        .map_err(|e| format!("--svg {}: {e}", args.svg.display()))?;
    if args.json {
        return Ok(print_json("sim", &report));
    }
    let mut text = format!(
        "Calibers on G-scale (12 sites, 19 full-duplex links of 10 Gbit/s): {} runs × {} requests per point, seed {}\n\
         {:>8} {:>7}  {:<11} {:>8} {:>12} {:>8}\n",
        args.runs, args.requests, args.seed, "epoch", "λ/s", "policy", "reject", "utilisation", "index"
    );
    for point in &report.runs {
        text += &format!(
            "{:>7}s {:>7.2}  {:<11} {:>8.3} {:>12.3} {:>8.3}\n",
            point.epoch_s,
            point.lambda,
            point.policy,
            point.reject_ratio,
            point.utilisation_ratio,
            point.performance_index
        );
    }
    text += &format!("chart: {}\n", args.svg.display());
    Ok(print_stdout("sim", &text))
}

/// Reads one figure of a point.
type Metric = fn(&CalibersPoint) -> f64;

/// Reject ratio, utilisation and performance index against λ: a row per epoch, a line per policy.
fn calibers_chart(
    report: &CalibersReport,
    epochs_s: &[f64],
    policies: &[Policy],
    path: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1200, 360 * epochs_s.len() as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((epochs_s.len(), 3));
    let lambda_max = report.runs.iter().map(|p| p.lambda).fold(0.0, f64::max) * 1.05;
    let metrics: [(&str, Metric); 3] = [
        ("reject ratio", |p| p.reject_ratio),
        ("utilisation", |p| p.utilisation_ratio),
        ("performance index", |p| p.performance_index),
    ];
    for (index, panel) in panels.iter().enumerate() {
        let epoch_s = epochs_s[index / 3];
        let (name, value) = metrics[index % 3];
        let points: Vec<&CalibersPoint> = report
            .runs
            .iter()
            .filter(|p| p.epoch_s == epoch_s)
            .collect();
        let y_max = points
            .iter()
            .map(|p| value(p))
            .fold(0.0, f64::max)
            .max(1e-9)
            * 1.1;
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{name}, epoch {epoch_s} s"), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(45)
            .build_cartesian_2d(0.0..lambda_max, 0.0..y_max)?;
        chart.configure_mesh().x_desc("λ (requests/s)").draw()?;
        for (colour, policy) in policies.iter().enumerate() {
            let style = Palette99::pick(colour).stroke_width(2);
            let line: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.policy == policy.name())
                .map(|p| (p.lambda, value(p)))
                .collect();
            chart
                .draw_series(LineSeries::new(line, style))?
                .label(policy.name())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        }
        if index % 3 == 2 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
    }
    root.present()?;
    Ok(())
}

#[derive(Serialize)]
struct HeadroomReport {
    mg1: Mg1Report,
    #[serde(skip_serializing_if = "Option::is_none")]
    simulation: Option<SimulationReport>,
}

#[derive(Serialize)]
struct Mg1Report {
    arrival_rate_per_s: f64,
    pareto_shape: f64,
    pareto_scale_bytes: f64,
    headroom_bps: f64,
    #[serde(flatten)]
    model: Mg1,
}

#[derive(Serialize)]
struct SimulationReport {
    topology: &'static str,
    arrival_rate_per_s: f64,
    pareto_shape: f64,
    pareto_scale_bytes: f64,
    flows_per_run: usize,
    runs: usize,
    seed: u64,
    patterns: Vec<PatternReport>,
}

#[derive(Serialize)]
struct PatternReport {
    concentration: f64,
    sh: ServiceThroughput,
    dh: ServiceThroughput,
    /// DH's mean flow throughput over SH's.
    dh_gain_ratio: f64,
}

fn headroom(args: HeadroomArgs) -> Result<ExitCode, String> {
    let input = Mg1Input {
        arrival_rate_per_s: args.lambda,
        pareto_shape: args.alpha,
        pareto_scale_bytes: args.scale_gb * 1e9,
        headroom_bps: args.headroom_mbps * 1e6,
    };
    let model = mg1(&input).map_err(|e| e.to_string())?;
    let mut report = HeadroomReport {
        mg1: Mg1Report {
            arrival_rate_per_s: input.arrival_rate_per_s,
            pareto_shape: input.pareto_shape,
            pareto_scale_bytes: input.pareto_scale_bytes,
            headroom_bps: input.headroom_bps,
            model,
        },
        simulation: None,
    };
    if args.runs > 0 {
        let bar = progress_bar(
            args.json,
            (args.concentration.len() * args.runs * args.flows * 2) as u64,
            "flows",
        );
        let mut patterns = Vec::new();
        for (index, &concentration) in args.concentration.iter().enumerate() {
            let config = HeadroomSimConfig {
                arrival_rate_per_s: args.sim_lambda,
                concentration,
                pareto_shape: args.sim_alpha,
                pareto_scale_bytes: args.sim_scale_gb * 1e9,
                flows: args.flows,
                runs: args.runs,
                seed: args.seed,
            };
            let before = (index * args.runs * args.flows * 2) as u64;
            let [sh, dh] = simulate_headroom(&config, &mut |done| {
                if let Some(bar) = &bar {
                    bar.set_position(before + done as u64);
                }
            })
            .map_err(|e| e.to_string())?;
            patterns.push(PatternReport {
                concentration,
                dh_gain_ratio: dh.mean_flow_bps / sh.mean_flow_bps,
                sh,
                dh,
            });
        }
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        report.simulation = Some(SimulationReport {
            topology: "six-router",
            arrival_rate_per_s: args.sim_lambda,
            pareto_shape: args.sim_alpha,
            pareto_scale_bytes: args.sim_scale_gb * 1e9,
            flows_per_run: args.flows,
            runs: args.runs,
            seed: args.seed,
            patterns,
        });
    }
    if args.json {
        return Ok(print_json("sim", &report));
    }
    let m = &report.mg1;
    let mut text = format!(
        "M/G/1 headroom (Eqs. 3.1–3.3): λ = {}/s, Pareto α = {}, x_m = {} GB, C_hr = {} Mbit/s\n  \
         load ρ = {:.3}, mean service {:.2} s, E[N] = {:.2} elephant flows, {:.1} Mbit/s per flow\n",
        m.arrival_rate_per_s,
        m.pareto_shape,
        m.pareto_scale_bytes / 1e9,
        m.headroom_bps / 1e6,
        m.model.load_ratio,
        m.model.mean_service_s,
        m.model.expected_flows,
        m.model.per_flow_bps / 1e6
    );
    if let Some(sim) = &report.simulation {
        text += &format!(
            "\nSH vs DH on six routers (10 Gbit/s links), λ = {}/s, Pareto α = {}, x_m = {} GB, {} runs × {} flows, seed {}\n\
             {:>4}  {:>16}  {:>16}  {:>8}\n",
            sim.arrival_rate_per_s,
            sim.pareto_shape,
            sim.pareto_scale_bytes / 1e9,
            sim.runs,
            sim.flows_per_run,
            sim.seed,
            "w",
            "SH Gbit/s",
            "DH Gbit/s",
            "DH gain"
        );
        let cell = |s: &ServiceThroughput| match s.ci95_bps {
            Some(ci) => format!("{:.2} ± {:.3}", s.mean_flow_bps / 1e9, ci / 1e9),
            None => format!("{:.2}", s.mean_flow_bps / 1e9),
        };
        for p in &sim.patterns {
            text += &format!(
                "{:>4}  {:>16}  {:>16}  {:>8.2}\n",
                p.concentration,
                cell(&p.sh),
                cell(&p.dh),
                p.dh_gain_ratio
            );
        }
    }
    Ok(print_stdout("sim", &text))
}
