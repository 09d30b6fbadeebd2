//! `vantage capture [IFACE]`: captures on this host's interface for a bounded time
//! with Wireshark's dumpcap and prints the flow records (the `capture` test kind run
//! once, here; the analysis is `vantage pcap`'s).

use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use serde_json::{Map, Value};
use vantage_model::kinds;
use vantage_probe::capture::{run_capture, DUMPCAP};

use crate::cmd_counters::options_spec;
use crate::cmd_latency::{print_json, print_stdout};

#[derive(Args)]
pub struct CaptureArgs {
    /// Interface to capture on (`any`: every interface, as Linux cooked frames).
    #[arg(value_name = "IFACE", default_value = kinds::capture::DEFAULT_INTERFACE)]
    interface: String,
    /// BPF capture filter, as tcpdump takes it, in one argument (e.g. "tcp port 5201").
    #[arg(long, short = 'f', value_name = "FILTER")]
    filter: Option<String>,
    /// How long to capture, in whole seconds (DUR, at most 10 min).
    #[arg(long, short = 'd', value_name = "DUR", default_value = kinds::capture::DEFAULT_DURATION)]
    duration: String,
    /// Bytes kept of each frame; headers are enough for flow records.
    #[arg(long, short = 's', value_name = "BYTES", default_value = kinds::capture::DEFAULT_SNAPLEN)]
    snaplen: u64,
    /// Stop after this many packets.
    #[arg(long, short = 'c', value_name = "N", default_value = kinds::capture::DEFAULT_MAX_PACKETS)]
    max_packets: u64,
    /// Where the capture is taken, for the handshake RTT (Miravalls-Sierra et al., 2018):
    /// auto, client or server.
    #[arg(long, value_name = "SIDE", default_value = kinds::capture::DEFAULT_SIDE)]
    side: String,
    /// The capture program (Wireshark's dumpcap).
    #[arg(long, value_name = "PATH", default_value = DUMPCAP)]
    dumpcap: String,
    /// Print one JSON document (docs/json-schema.md) instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: CaptureArgs) -> ExitCode {
    let mut given = Map::new();
    given.insert("interface".into(), Value::from(args.interface));
    if let Some(filter) = args.filter {
        given.insert("filter".into(), Value::from(filter));
    }
    given.insert("duration".into(), Value::from(args.duration));
    given.insert("snaplen".into(), Value::from(args.snaplen));
    given.insert("max_packets".into(), Value::from(args.max_packets));
    given.insert("side".into(), Value::from(args.side));
    let kind = &kinds::capture::KIND;
    let Some(spec) = options_spec(kind, &given, kinds::capture::engine_spec) else {
        return ExitCode::FAILURE;
    };
    let label = match &spec.filter {
        Some(filter) => format!("{} ({filter})", spec.interface),
        None => spec.interface.clone(),
    };
    if !args.json {
        eprintln!("capturing on {label} for {} s", spec.duration_s);
    }
    match run_capture(Path::new(&args.dumpcap), &spec) {
        Ok(result) if args.json => print_json("capture", &result),
        Ok(result) => print_stdout("capture", &crate::cmd_pcap::render(&label, &result.report)),
        Err(error) => {
            eprintln!("vantage capture: {error}");
            ExitCode::FAILURE
        }
    }
}
