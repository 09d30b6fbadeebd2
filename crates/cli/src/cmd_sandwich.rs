//! `vantage sandwich TARGET`: sandwich probing (Chard et al., FGCS 2015), d' - d per round.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use vantage_model::kinds::{latency, sandwich};
use vantage_model::latency::{SandwichResult, SandwichSpec};
use vantage_probe::endpoint::DEFAULT_PORT;
use vantage_probe::sandwich::run_sandwich;

use crate::cmd_latency::{duration_arg, format_distribution, micros_u64, size_arg, ProbeOutput};
use crate::repeat::RepeatArgs;

#[derive(Args)]
pub struct SandwichArgs {
    /// Host, host:port or address of a vantage endpoint or TWAMP-Light reflector.
    target: String,
    #[arg(long, short, value_name = "P", default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Rounds (sandwiches) to send.
    #[arg(long, short, value_name = "N", default_value = sandwich::DEFAULT_COUNT)]
    count: u32,
    /// Gap d between the sends of the two small packets (DUR).
    #[arg(long, value_name = "DUR", default_value = sandwich::DEFAULT_GAP, value_parser = duration_arg)]
    gap: Duration,
    /// Time between the starts of rounds (DUR).
    #[arg(long, short, value_name = "DUR", default_value = sandwich::DEFAULT_INTERVAL, value_parser = duration_arg)]
    interval: Duration,
    /// A packet without an answer after this long is lost (DUR).
    #[arg(long, short = 'W', value_name = "DUR", default_value = latency::DEFAULT_TIMEOUT, value_parser = duration_arg)]
    timeout: Duration,
    /// Size of the two small packets (UDP payload; Chard et al., FGCS 2015: 64).
    #[arg(long, value_name = "BYTES", default_value = sandwich::DEFAULT_SMALL_SIZE, value_parser = size_arg)]
    small_size: u32,
    /// Size of the large packet (UDP payload); default: path MTU minus headers.
    #[arg(long, value_name = "BYTES", value_parser = size_arg)]
    large_size: Option<u32>,
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=63))]
    dscp: u8,
    /// Allow a large packet beyond the path MTU (it will be fragmented).
    #[arg(long)]
    allow_fragmentation: bool,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    repeat: RepeatArgs,
}

pub fn run(args: SandwichArgs) -> ExitCode {
    let spec = SandwichSpec {
        target: args.target,
        port: args.port,
        count: args.count,
        gap_us: micros_u64(args.gap),
        interval_us: micros_u64(args.interval),
        timeout_us: micros_u64(args.timeout),
        small_size_bytes: args.small_size,
        large_size_bytes: args.large_size,
        dscp: args.dscp,
        allow_fragmentation: args.allow_fragmentation,
    };
    let output = ProbeOutput {
        command: "sandwich",
        json: args.json,
        count: args.count,
        answered_word: "complete",
        repeat: &args.repeat,
    };
    output.run(|progress| run_sandwich(&spec, progress), human_report)
}

fn human_report(result: &SandwichResult) -> String {
    let s = &result.summary;
    let mut out = format!(
        "--- {} ({}) sandwich, small {} B, large {} B (path MTU {} B), gap {} µs ---\n\
         {} rounds, {} complete, {} lost\n",
        result.spec.target,
        result.target_addr,
        result.spec.small_size_bytes,
        s.large_size_bytes,
        s.path_mtu_bytes,
        result.spec.gap_us,
        s.rounds,
        s.completed_rounds,
        s.lost_rounds
    );
    if let Some(gaps) = &s.sent_gap_us {
        out.push_str(&format!("sent gap d {}\n", format_distribution(gaps)));
    }
    match &s.queuing_delay_us {
        Some(delay) => out.push_str(&format!("d' - d {}\n", format_distribution(delay))),
        None => out.push_str("d' - d: no complete round\n"),
    }
    out
}
