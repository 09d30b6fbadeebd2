//! `vantage ib`: InfiniBand congestion as the forced idle time fraction from
//! PortXmitWait (Alali, PhD dissertation, University of Virginia, 2019, ch. 2), from a
//! CSV of reads or sampled live from this host's ports.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde::Serialize;
use vantage_analysis::fitf::{self, Boxplot, ClassStats, XmitWaitRead, FDR_TICK_NS};
use vantage_probe::infiniband::{self, IbPort, SamplePlan};

use crate::cmd_latency::{duration_arg, print_json, print_stdout, read_input};

#[derive(Args, Debug)]
pub struct IbArgs {
    #[command(subcommand)]
    command: IbCommand,
}

#[derive(Subcommand, Debug)]
enum IbCommand {
    /// Class statistics of the forced idle time fraction from a CSV of PortXmitWait reads
    /// (columns round, switch, port, class, t_query_ns, t_turnaround_ns, xmit_wait).
    Fitf(FitfArgs),
    /// Read this host's InfiniBand ports' PortXmitWait, and switch ports' through
    /// perfquery, in rounds (never resetting it) and print the forced idle time
    /// fraction's statistics.
    Sample(SampleArgs),
}

#[derive(Args, Debug)]
struct FitfArgs {
    /// The reads (`-` reads stdin).
    #[arg(value_name = "FILE")]
    reads: PathBuf,
    /// One PortXmitWait tick in ns (22 on 4x FDR, the dissertation's; other speeds'
    /// ticks are the switch's own: give them).
    #[arg(long, value_name = "NS", default_value_t = FDR_TICK_NS)]
    tick_ns: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct SampleArgs {
    /// Where the InfiniBand devices are listed.
    #[arg(long, value_name = "DIR", default_value = infiniband::SYSFS_ROOT)]
    sysfs_root: PathBuf,
    /// Reads of each port per round.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u64).range(2..))]
    reads: u64,
    /// Pause after each read (DUR).
    #[arg(long, value_name = "DUR", value_parser = duration_arg, default_value = "100ms")]
    interval: Duration,
    /// Rounds to take.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Also read this switch port with `perfquery -x LID PORT` (repeatable); `=CLASS`
    /// names its class in the statistics, e.g. `417:3=Leaf,down`.
    #[arg(long, value_name = "LID:PORT[=CLASS]", value_parser = switch_port_arg)]
    switch_port: Vec<SwitchPort>,
    /// The perfquery program (infiniband-diags) that reads switch ports.
    #[arg(long, value_name = "PATH", default_value = "perfquery")]
    perfquery: PathBuf,
    /// One PortXmitWait tick in ns (default: 22 when every port is FDR; required otherwise,
    /// and with switch ports, whose speed is not read).
    #[arg(long, value_name = "NS")]
    tick_ns: Option<f64>,
    /// Write the reads as CSV to this file (`-`: stdout, the statistics then go to stderr).
    #[arg(long, value_name = "OUT")]
    csv: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct FitfReport {
    tick_ns: f64,
    reads: usize,
    rounds: usize,
    classes: Vec<ClassStats>,
}

fn report(reads: &[XmitWaitRead], tick_ns: f64) -> Result<FitfReport, String> {
    let rounds = fitf::fitf_rounds(reads, tick_ns).map_err(|e| e.to_string())?;
    Ok(FitfReport {
        tick_ns,
        reads: reads.len(),
        rounds: rounds.len(),
        classes: fitf::class_stats(&rounds),
    })
}

fn boxplot_row(label: &str, plot: Option<&Boxplot>) -> String {
    match plot {
        None => format!("  {label:<15} no non-zero round\n"),
        Some(p) => format!(
            "  {label:<15} {:>6} {:>7.3} {:>7.3} {:>7.3} {:>7.3}–{:<7.3} {:>8} {}\n",
            p.n,
            p.q1,
            p.median,
            p.q3,
            p.whisker_low,
            p.whisker_high,
            p.outliers,
            match (p.outlier_min, p.outlier_max) {
                (Some(min), Some(max)) => format!("{min:.3}–{max:.3}"),
                _ => "-".to_string(),
            },
        ),
    }
}

fn human(report: &FitfReport) -> String {
    let mut text = format!(
        "forced idle time fraction from PortXmitWait (Alali 2019, ch. 2), tick {} ns: \
         {} reads, {} rounds\n\n",
        report.tick_ns, report.reads, report.rounds
    );
    text += &format!(
        "{:<16} {:>7} {:>10} {:>9} {:>10} {:>7} {:>8} {:>9} {:>6}\n",
        "class",
        "rounds",
        "intervals",
        "non-zero",
        "nz-rounds",
        "max≥1",
        "wrapped",
        "saturated",
        "reset"
    );
    for class in &report.classes {
        let share = class.nonzero_share.map_or_else(
            || "-".to_string(),
            |share| format!("{:.1} %", share * 100.0),
        );
        text += &format!(
            "{:<16} {:>7} {:>10} {:>9} {:>10} {:>7} {:>8} {:>9} {:>6}\n",
            class.class,
            class.rounds,
            class.intervals,
            share,
            class.nonzero_rounds,
            class.rounds_max_at_least_one,
            class.wrapped_intervals,
            class.saturated_intervals,
            class.reset_intervals
        );
    }
    text += &format!(
        "\nper non-zero round (boxplots, outliers beyond 1.5 × IQR)\n  {:<15} {:>6} {:>7} {:>7} {:>7} {:>15} {:>8} {}\n",
        "", "rounds", "q1", "median", "q3", "whiskers", "outliers", "min–max"
    );
    for class in &report.classes {
        text += &format!("{}\n", class.class);
        text += &boxplot_row("max", class.round_max.as_ref());
        text += &boxplot_row("non-zero mean", class.round_nonzero_mean.as_ref());
    }
    let dropped: usize = report.classes.iter().map(|c| c.reset_intervals).sum();
    let saturated: usize = report.classes.iter().map(|c| c.saturated_intervals).sum();
    if dropped > 0 {
        text += &format!("\n{dropped} interval(s) dropped: the counter was reset between reads\n");
    }
    if saturated > 0 {
        text += &format!(
            "{saturated} interval(s) end on a saturated 32-bit counter (0xFFFFFFFF): their FITF is unknown\n"
        );
    }
    text
}

fn fitf_report(args: &FitfArgs) -> Result<FitfReport, String> {
    let text = read_input(&args.reads)?;
    let reads = fitf::parse_csv(&text).map_err(|e| format!("{}: {e}", args.reads.display()))?;
    report(&reads, args.tick_ns)
}

/// A switch port read through `perfquery`.
#[derive(Debug, Clone, PartialEq)]
struct SwitchPort {
    lid: u32,
    port: u32,
    class: Option<String>,
}

fn switch_port_arg(input: &str) -> Result<SwitchPort, String> {
    let (address, class) = match input.split_once('=') {
        Some((address, class)) if !class.is_empty() => (address, Some(class.to_string())),
        Some(_) => return Err("the class after '=' is empty".to_string()),
        None => (input, None),
    };
    let (lid, port) = address
        .split_once(':')
        .ok_or_else(|| format!("'{address}' is not LID:PORT"))?;
    let number = |text: &str, what: &str| {
        text.parse::<u32>()
            .map_err(|_| format!("{what} '{text}' is not a number"))
    };
    Ok(SwitchPort {
        lid: number(lid, "LID")?,
        port: number(port, "port")?,
        class,
    })
}

/// A port being sampled: one of this host's, read from sysfs, or a switch's.
enum SampledPort {
    Host(IbPort),
    Switch(SwitchPort),
}

/// The tick of the sampled ports: `--tick-ns`, else FDR's when every port is FDR.
fn sample_tick_ns(ports: &[SampledPort], tick_ns: Option<f64>) -> Result<f64, String> {
    if let Some(tick_ns) = tick_ns {
        return Ok(tick_ns);
    }
    for port in ports {
        let port = match port {
            SampledPort::Host(port) => port,
            SampledPort::Switch(switch) => {
                return Err(format!(
                    "the speed of switch LID {} port {} is not read, so neither is its \
                     PortXmitWait tick: give --tick-ns (22 on 4x FDR)",
                    switch.lid, switch.port
                ))
            }
        };
        let rate = port.rate.as_deref();
        if rate.and_then(fitf::tick_ns_for_rate).is_none() {
            return Err(format!(
                "{} port {} runs at {}: its PortXmitWait tick is known only for FDR (22 ns); \
                 give --tick-ns",
                port.device,
                port.port,
                rate.unwrap_or("an unknown rate")
            ));
        }
    }
    Ok(FDR_TICK_NS)
}

/// `PortXmitWait` of a switch port now, from `perfquery -x`.
fn read_switch_port(program: &Path, switch: &SwitchPort) -> Result<u64, String> {
    let output =
        infiniband::perfquery(program, switch.lid, switch.port).map_err(|e| e.to_string())?;
    let read = fitf::parse_perfquery(&output)
        .map_err(|e| format!("perfquery -x {} {}: {e}", switch.lid, switch.port))?;
    match (read.lid, read.port) {
        (Some(lid), Some(port)) if (lid, port) != (switch.lid, switch.port) => Err(format!(
            "perfquery -x {} {} answered for LID {lid} port {port}",
            switch.lid, switch.port
        )),
        _ => Ok(read.xmit_wait),
    }
}

fn sample(args: &SampleArgs) -> Result<(Vec<XmitWaitRead>, f64), String> {
    // With switch ports given, this host's own ports are read where it has any.
    let host_ports = match infiniband::discover(&args.sysfs_root) {
        Ok(ports) => ports,
        Err(error) if args.switch_port.is_empty() => return Err(error.to_string()),
        Err(_) => Vec::new(),
    };
    let ports: Vec<SampledPort> = host_ports
        .into_iter()
        .map(SampledPort::Host)
        .chain(args.switch_port.iter().cloned().map(SampledPort::Switch))
        .collect();
    let tick_ns = sample_tick_ns(&ports, args.tick_ns)?;
    let plan = SamplePlan {
        rounds: args.rounds,
        reads: args.reads as usize,
        interval: args.interval,
    };
    let reads = infiniband::sample(&ports, &plan, |port| match port {
        SampledPort::Host(port) => infiniband::read_counter(port).map_err(|e| e.to_string()),
        SampledPort::Switch(switch) => read_switch_port(&args.perfquery, switch),
    })?;
    let reads = reads
        .into_iter()
        .map(|read| {
            let (switch, port, class) = match &ports[read.port_index] {
                SampledPort::Host(port) => (port.device.clone(), port.port, None),
                SampledPort::Switch(switch) => {
                    (switch.lid.to_string(), switch.port, switch.class.clone())
                }
            };
            XmitWaitRead {
                round: read.round,
                switch,
                port,
                class,
                t_query_ns: read.t_query_ns,
                t_turnaround_ns: read.t_turnaround_ns,
                xmit_wait: read.value,
            }
        })
        .collect();
    Ok((reads, tick_ns))
}

fn fail(error: String) -> ExitCode {
    eprintln!("vantage ib: {error}");
    ExitCode::FAILURE
}

pub fn run(args: IbArgs) -> ExitCode {
    match args.command {
        IbCommand::Fitf(args) => match fitf_report(&args) {
            Ok(report) if args.json => print_json("ib", &report),
            Ok(report) => print_stdout("ib", &human(&report)),
            Err(error) => fail(error),
        },
        IbCommand::Sample(args) => {
            let csv_on_stdout = args.csv.as_deref() == Some(Path::new("-"));
            if csv_on_stdout && args.json {
                return fail("--json and --csv - both want stdout".to_string());
            }
            let (reads, tick_ns) = match sample(&args) {
                Ok(sampled) => sampled,
                Err(error) => return fail(error),
            };
            let report = match report(&reads, tick_ns) {
                Ok(report) => report,
                Err(error) => return fail(error),
            };
            match &args.csv {
                Some(_) if csv_on_stdout => {
                    let code = print_stdout("ib", &fitf::to_csv(&reads));
                    eprint!("{}", human(&report));
                    return code;
                }
                Some(path) => {
                    if let Err(e) = std::fs::write(path, fitf::to_csv(&reads)) {
                        return fail(format!("cannot write {}: {e}", path.display()));
                    }
                }
                None => {}
            }
            if args.json {
                print_json("ib", &report)
            } else {
                print_stdout("ib", &human(&report))
            }
        }
    }
}
