//! `vantage counters [IFACE…]`: this host's interface counters each interval, with
//! deltas and rates across counter wraps and resets (the `counters` test kind run
//! once, here; Narada Metrics' passive counters).

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use serde_json::{Map, Value};
use vantage_model::config::ConfigError;
use vantage_model::counters::{CounterInterval, CountersResult};
use vantage_model::kinds::{self, Spec, TestKind};
use vantage_probe::counters::{run_counters, SYSFS_NET};

use crate::cmd_latency::{print_json, print_stdout};

#[derive(Args)]
pub struct CountersArgs {
    /// Interfaces to sample (default: every interface but lo).
    #[arg(value_name = "IFACE")]
    interfaces: Vec<String>,
    /// Time between samples (DUR, e.g. 1s; Narada Metrics sampled every 10 s).
    #[arg(long, short = 'i', value_name = "DUR", default_value = kinds::counters::DEFAULT_INTERVAL)]
    interval: String,
    /// Intervals to report (COUNT + 1 samples).
    #[arg(long, short = 'c', value_name = "N", default_value = kinds::counters::DEFAULT_COUNT)]
    count: u64,
    /// Counter width, where the counters wrap: 64 (Linux sysfs on 64-bit kernels) or 32.
    #[arg(long, value_name = "BITS", default_value = kinds::counters::DEFAULT_COUNTER_BITS)]
    counter_bits: String,
    /// Print one JSON document (docs/json-schema.md) instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: CountersArgs) -> ExitCode {
    let mut given = Map::new();
    if !args.interfaces.is_empty() {
        given.insert("interfaces".into(), Value::from(args.interfaces.join(",")));
    }
    given.insert("interval".into(), Value::from(args.interval));
    given.insert("count".into(), Value::from(args.count));
    given.insert("counter_bits".into(), Value::from(args.counter_bits));
    let Some(spec) = options_spec(&kinds::counters::KIND, &given, kinds::counters::engine_spec)
    else {
        return ExitCode::FAILURE;
    };
    match run_counters(Path::new(SYSFS_NET), &spec, &mut |_| {}) {
        Ok(result) if args.json => print_json("counters", &result),
        Ok(result) => print_stdout("counters", &table(&result)),
        Err(error) => {
            eprintln!("vantage counters: {error}");
            ExitCode::FAILURE
        }
    }
}

/// A command's options read as the kind's parameters, checked by the kind as a task's
/// would be, into the engine's spec; on an invalid option says which on stderr.
pub(crate) fn options_spec<T>(
    kind: &'static TestKind,
    given: &Map<String, Value>,
    engine_spec: impl Fn(&Spec<'_>) -> Result<T, ConfigError>,
) -> Option<T> {
    kind.normalise("option", given)
        .map_err(|errors| errors[0].to_string())
        .and_then(|values| engine_spec(&Spec::new(kind, &values)).map_err(|e| e.to_string()))
        .map_err(|error| eprintln!("vantage {}: invalid {error}", kind.name))
        .ok()
}

fn cell(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_string(), |value| value.to_string())
}

fn rate_cell(rate_bps: Option<f64>) -> String {
    rate_bps.map_or_else(|| "-".to_string(), |rate| format!("{rate:.0}"))
}

fn row(out: &mut String, interface: &str, interval: &CounterInterval) {
    let _ = write!(
        out,
        "{interface:<15} {} {:>7.3} {:>13} {:>13} {:>10} {:>10} {:>6} {:>6} {:>7} {:>7} {:>14} {:>14}",
        interval.end.format("%H:%M:%S%.3f"),
        interval.interval_s,
        cell(interval.deltas.rx_bytes),
        cell(interval.deltas.tx_bytes),
        cell(interval.deltas.rx_packets),
        cell(interval.deltas.tx_packets),
        cell(interval.deltas.rx_errors),
        cell(interval.deltas.tx_errors),
        cell(interval.deltas.rx_dropped),
        cell(interval.deltas.tx_dropped),
        rate_cell(interval.rx_rate_bps),
        rate_cell(interval.tx_rate_bps),
    );
    // A reset counter has no delta: say so rather than print a number.
    if !interval.counter_reset.is_empty() {
        let _ = write!(
            out,
            "  counter reset ({})",
            interval.counter_reset.join(", ")
        );
    }
    if !interval.wrapped.is_empty() {
        let _ = write!(out, "  wrapped ({})", interval.wrapped.join(", "));
    }
    out.push('\n');
}

fn table(result: &CountersResult) -> String {
    let mut out = format!(
        "--- interface counters every {} s, {}-bit counters ---\n",
        result.interval_s,
        result.counter_bits.bits()
    );
    let _ = writeln!(
        out,
        "{:<15} {:<12} {:>7} {:>13} {:>13} {:>10} {:>10} {:>6} {:>6} {:>7} {:>7} {:>14} {:>14}",
        "interface",
        "end",
        "s",
        "rx_bytes",
        "tx_bytes",
        "rx_packets",
        "tx_packets",
        "rx_err",
        "tx_err",
        "rx_drop",
        "tx_drop",
        "rx_rate_bps",
        "tx_rate_bps"
    );
    for interface in &result.interfaces {
        for interval in &interface.intervals {
            row(&mut out, &interface.interface, interval);
        }
    }
    for interface in &result.interfaces {
        let totals = &interface.totals;
        let _ = writeln!(
            out,
            "{}: {} intervals ({} with a counter reset, {} wrapped), rx {} B {} packets, tx {} B {} packets, errors rx {} tx {}, dropped rx {} tx {}, mean rx {} b/s tx {} b/s",
            interface.interface,
            totals.intervals,
            totals.reset_intervals,
            totals.wrapped_intervals,
            totals.counts.rx_bytes,
            totals.counts.rx_packets,
            totals.counts.tx_bytes,
            totals.counts.tx_packets,
            totals.counts.rx_errors,
            totals.counts.tx_errors,
            totals.counts.rx_dropped,
            totals.counts.tx_dropped,
            rate_cell(totals.rx_rate_bps),
            rate_cell(totals.tx_rate_bps),
        );
    }
    out
}
