//! `vantage pcap`: flow records from a packet capture (pcap or pcapng).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use vantage_model::units::format_rate_bps;
use vantage_passive::{analyse, CaptureReport, CaptureSide, FlowRecord, Options, PassiveError};

use crate::cmd_latency::{duration_arg, print_json, print_stdout};

#[derive(Args, Debug)]
pub struct PcapArgs {
    /// The capture: pcap or pcapng, link types Ethernet (VLAN tags included), Linux
    /// cooked (SLL, SLL2), raw IP and BSD loopback; `-` reads stdin.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Where the capture was taken, for the handshake RTT (Miravalls-Sierra et al.,
    /// 2018): `t_ACK − t_SYN` near the server, `t_SYNACK − t_SYN` near the client.
    /// Detected per connection from its handshake when not given.
    #[arg(long, value_enum)]
    side: Option<SideArg>,
    /// Throughput series interval (DUR).
    #[arg(long, value_name = "DUR", value_parser = duration_arg, default_value = "1s")]
    interval: Duration,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SideArg {
    Client,
    Server,
}

pub fn run(args: PcapArgs) -> ExitCode {
    let options = Options {
        interval_ns: args.interval.as_nanos().clamp(1_000_000, i64::MAX as u128) as i64,
        side: args.side.map(|side| match side {
            SideArg::Client => CaptureSide::Client,
            SideArg::Server => CaptureSide::Server,
        }),
        ..Options::default()
    };
    let Some(report) = read_capture("pcap", &args.file, |input| analyse(input, &options)) else {
        return ExitCode::FAILURE;
    };
    if args.json {
        print_json("pcap", &report)
    } else {
        print_stdout("pcap", &render(&args.file.display().to_string(), &report))
    }
}

/// Opens FILE (`-`: stdin) and hands it to `analysis`; on failure says what and where on
/// stderr, as `vantage COMMAND: FILE: reason`, and returns `None`.
pub(crate) fn read_capture<T>(
    command: &str,
    file: &Path,
    analysis: impl FnOnce(Box<dyn Read + Send>) -> Result<T, PassiveError>,
) -> Option<T> {
    let source = file.display();
    let input: Box<dyn Read + Send> = if file.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        match File::open(file) {
            Ok(opened) => Box::new(BufReader::new(opened)),
            Err(error) => {
                eprintln!("vantage {command}: cannot open {source}: {error}");
                return None;
            }
        }
    };
    analysis(input)
        .map_err(|error| eprintln!("vantage {command}: {source}: {error}"))
        .ok()
}

pub(crate) fn render(source: &str, report: &CaptureReport) -> String {
    let capture = &report.capture;
    let mut out = format!(
        "{source}: {}, {} frames, {} TCP/UDP packets in {} flow{} over {:.3} s\n",
        capture.format,
        capture.frames,
        capture.packets,
        report.flows.len(),
        if report.flows.len() == 1 { "" } else { "s" },
        capture.duration_s
    );
    for note in &capture.quality {
        out += &format!("  note: {note}\n");
    }
    if report.flows.is_empty() {
        return out;
    }
    out += &format!(
        "\n{:<4} {:<47} {:>9} {:>12} {:>12} {:>7} {:>10}  {}\n",
        "", "client -> server", "dur (s)", "c->s", "s->c", "retx", "hs RTT", "limited by"
    );
    for flow in &report.flows {
        out += &flow_line(flow);
    }
    out
}

fn flow_line(flow: &FlowRecord) -> String {
    let rate = |bps: Option<f64>| bps.map_or("-".to_string(), format_rate_bps);
    let handshake = flow.handshake_rtt_us.map_or("-".to_string(), |us| {
        if us >= 1000.0 {
            format!("{:.3} ms", us / 1000.0)
        } else {
            format!("{us:.0} µs")
        }
    });
    let limited = flow.limited_by_share.map_or(String::new(), |share| {
        format!(
            "rwnd {:.0} % / cong {:.0} % / app {:.0} %",
            share.receive_window * 100.0,
            share.congestion * 100.0,
            share.application * 100.0
        )
    });
    format!(
        "{:<4} {:<47} {:>9.3} {:>12} {:>12} {:>7} {:>10}  {}\n",
        flow.protocol,
        format!("{} -> {}", flow.client, flow.server),
        flow.duration_s,
        rate(flow.client_to_server.throughput_bps),
        rate(flow.server_to_client.throughput_bps),
        flow.client_to_server.retransmits + flow.server_to_client.retransmits,
        handshake,
        limited
    )
}
