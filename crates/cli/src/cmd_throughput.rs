//! `vantage throughput TARGET`: TCP or UDP throughput against a vantage endpoint
//! (native protocol) or any iperf3 server (`--tool iperf3`).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use vantage_model::kinds::throughput;
use vantage_model::throughput::{
    Direction, ThroughputProtocol, ThroughputResult, ThroughputSpec, ThroughputSummary,
    ThroughputTool,
};
use vantage_model::ticket::TestTicket;
use vantage_model::units::{format_rate_bps, parse_bytes, parse_rate_bps};
use vantage_probe::endpoint::DEFAULT_PORT;
use vantage_probe::iperf3::IPERF3_DEFAULT_PORT;

use crate::cmd_latency::{duration_arg, micros_u64, progress_bar, size_arg};
use crate::repeat::{RepeatArgs, Repeated};

#[derive(Clone, Copy, ValueEnum)]
enum ToolArg {
    Native,
    Iperf3,
}

#[derive(Args)]
pub struct ThroughputArgs {
    /// Host name, host:port, or address of a vantage endpoint (or an iperf3 server).
    target: String,
    /// Port (default 7862 for the native tool, 5201 for iperf3).
    #[arg(long, short, value_name = "P")]
    port: Option<u16>,
    /// Sending time (DUR, e.g. 10s; a bare number is seconds, as in iperf3).
    #[arg(long, short = 't', value_name = "DUR", default_value = throughput::DEFAULT_DURATION, value_parser = seconds_or_duration_arg)]
    duration: Duration,
    /// Send this many bytes (over all streams) instead of for a duration (e.g. 100M).
    #[arg(long, short = 'n', value_name = "BYTES", value_parser = bytes_arg, conflicts_with = "duration")]
    bytes: Option<u64>,
    /// Parallel streams, each on its own thread.
    #[arg(long, short = 'P', value_name = "N", default_value = throughput::DEFAULT_STREAMS, value_parser = clap::value_parser!(u32).range(1..=128))]
    streams: u32,
    /// The target sends (download).
    #[arg(long, short = 'R', conflicts_with = "bidir")]
    reverse: bool,
    /// Both directions at once.
    #[arg(long)]
    bidir: bool,
    /// Reporting interval (DUR; a bare number is seconds, as in iperf3).
    #[arg(long, short = 'i', value_name = "DUR", default_value = throughput::DEFAULT_INTERVAL, value_parser = seconds_or_duration_arg)]
    interval: Duration,
    /// Leading time left out of the summary (slow start), DUR; a bare number is seconds.
    #[arg(long, short = 'O', value_name = "DUR", default_value = "0s", value_parser = seconds_or_duration_arg)]
    omit: Duration,
    /// Socket buffer size on both ends (BYTES, e.g. 64K): bounds the TCP window.
    #[arg(long, short = 'w', value_name = "BYTES", value_parser = bytes_arg)]
    window: Option<u64>,
    /// TCP congestion control algorithm (e.g. cubic, bbr).
    #[arg(long, short = 'C', value_name = "ALG")]
    congestion: Option<String>,
    /// TCP maximum segment size.
    #[arg(long, short = 'M', value_name = "N")]
    mss: Option<u32>,
    /// Per-stream TCP pacing rate (SO_MAX_PACING_RATE), BPS.
    #[arg(long, value_name = "BPS", value_parser = rate_arg)]
    pacing_rate: Option<u64>,
    /// DSCP code point (0..=63).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=63))]
    dscp: u8,
    /// Pin the stream threads to these cores, round-robin (e.g. 0,1).
    #[arg(long, short = 'A', value_name = "CPUS", value_delimiter = ',')]
    affinity: Vec<usize>,
    /// UDP at `--rate` instead of TCP.
    #[arg(long, short = 'u', requires = "rate")]
    udp: bool,
    /// UDP sending rate over all streams of a direction (BPS, e.g. 100M).
    #[arg(long, short = 'b', value_name = "BPS", value_parser = rate_arg)]
    rate: Option<u64>,
    /// UDP payload bytes (default: the largest that does not fragment, ≤ 1472).
    #[arg(long, short = 'l', value_name = "BYTES", value_parser = size_arg)]
    packet_size: Option<u32>,
    /// Protocol spoken to the target.
    #[arg(long, value_enum, default_value = "native")]
    tool: ToolArg,
    /// Ticket for an endpoint that requires one (`vantage endpoint --authorized-keys`),
    /// as `vantage ticket issue` wrote it. With --tool iperf3 it is presented to the
    /// endpoint's vantage port (--ticket-port) before the test.
    #[arg(long, value_name = "FILE", value_parser = crate::cmd_ticket::ticket_file_arg)]
    ticket: Option<TestTicket>,
    /// The endpoint's vantage port, where --ticket is presented for an iperf3 test.
    #[arg(long, value_name = "P", default_value_t = DEFAULT_PORT, requires = "ticket")]
    ticket_port: u16,
    /// Print one JSON document (docs/json-schema.md) instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    repeat: RepeatArgs,
}

fn bytes_arg(input: &str) -> Result<u64, String> {
    parse_bytes(input).map_err(|e| e.to_string())
}

pub(crate) fn rate_arg(input: &str) -> Result<u64, String> {
    parse_rate_bps(input).map_err(|e| e.to_string())
}

fn spec_from(args: &ThroughputArgs) -> ThroughputSpec {
    let tool = match args.tool {
        ToolArg::Native => ThroughputTool::Native,
        ToolArg::Iperf3 => ThroughputTool::Iperf3,
    };
    let default_port = if tool == ThroughputTool::Iperf3 {
        IPERF3_DEFAULT_PORT
    } else {
        DEFAULT_PORT
    };
    ThroughputSpec {
        target: args.target.clone(),
        port: args.port.unwrap_or(default_port),
        tool,
        protocol: if args.udp {
            ThroughputProtocol::Udp
        } else {
            ThroughputProtocol::Tcp
        },
        direction: if args.bidir {
            Direction::Bidir
        } else if args.reverse {
            Direction::Reverse
        } else {
            Direction::Forward
        },
        streams: args.streams,
        duration_us: args.bytes.is_none().then(|| micros_u64(args.duration)),
        bytes: args.bytes,
        interval_us: micros_u64(args.interval),
        omit_us: micros_u64(args.omit),
        window_bytes: args.window,
        congestion: args.congestion.clone(),
        mss_bytes: args.mss,
        pacing_rate_bps: args.pacing_rate,
        dscp: args.dscp,
        rate_bps: args.rate,
        packet_size_bytes: args.packet_size,
        affinity: args.affinity.clone(),
        // iperf3 has no field for it: it is presented first (run).
        ticket: args
            .ticket
            .clone()
            .filter(|_| tool == ThroughputTool::Native),
    }
}

/// `-t`, `-i` and `-O` mirror iperf3's flags, whose values are seconds: a bare number
/// (`-t 10`, `-i 0.5`) is read as seconds; anything else as a DUR (`10s`, `500ms`).
fn seconds_or_duration_arg(input: &str) -> Result<Duration, String> {
    match input.trim().parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds >= 0.0 => {
            Ok(Duration::from_secs_f64(seconds))
        }
        Ok(_) => Err(format!("'{input}' is not a non-negative number of seconds")),
        Err(_) => duration_arg(input),
    }
}

pub fn run(args: ThroughputArgs) -> ExitCode {
    if args.interval < Duration::from_millis(10) {
        eprintln!("vantage throughput: --interval must be at least 10ms");
        return ExitCode::FAILURE;
    }
    let spec = spec_from(&args);
    let repeated = Repeated {
        command: "throughput",
        kind: "throughput",
        json: args.json,
        args: &args.repeat,
    };
    repeated.run(|| run_once(&args, &spec), human_report)
}

/// One test, with a progress bar on a terminal.
fn run_once(args: &ThroughputArgs, spec: &ThroughputSpec) -> Result<ThroughputResult, String> {
    let total_ms = spec.duration_us.map_or(0, |us| us / 1000);
    let bar = progress_bar(args.json, total_ms.max(1));
    let ticker = bar.clone().map(|bar| {
        std::thread::spawn(move || {
            let start = Instant::now();
            while !bar.is_finished() {
                bar.set_position(start.elapsed().as_millis() as u64);
                bar.set_message("ms".to_string());
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    });
    let result = match spec.tool {
        ThroughputTool::Native => vantage_probe::throughput::client::run_native(spec),
        ThroughputTool::Iperf3 => args
            .ticket
            .as_ref()
            .map_or(Ok(()), |ticket| {
                vantage_probe::throughput::client::present_ticket(
                    &spec.target,
                    args.ticket_port,
                    ticket,
                )
            })
            .and_then(|()| vantage_probe::iperf3::client::run_iperf3(spec)),
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let Some(ticker) = ticker {
        let _ = ticker.join();
    }
    result.map_err(|error| error.to_string())
}

fn summary_line(summary: &ThroughputSummary) -> String {
    let direction = match summary.direction {
        Direction::Forward => "client → target",
        Direction::Reverse => "target → client",
        Direction::Bidir => "both",
    };
    let mut line = format!(
        "{direction}: sent {} ({} B), received {} ({} B) over {:.2} s",
        format_rate_bps(summary.sent_bps),
        summary.sent_bytes,
        format_rate_bps(summary.received_bps),
        summary.received_bytes,
        summary.duration_s
    );
    if let Some(retransmits) = summary.retransmits {
        line += &format!(", {retransmits} retransmits");
    }
    if let Some(tcp) = &summary.tcp {
        line += &format!(
            ", rtt {:.0} µs, max cwnd {} B",
            tcp.rtt_us, tcp.max_cwnd_bytes
        );
    }
    if let Some(udp) = &summary.udp {
        line += &format!(
            ", {}/{} datagrams lost ({:.3} %), {} duplicates, {} reordered, jitter {}",
            udp.lost_packets,
            udp.sent_packets,
            udp.loss_ratio * 100.0,
            udp.duplicate_packets,
            udp.reordered_packets,
            udp.jitter_us
                .map_or("n/a".to_string(), |j| format!("{j:.1} µs"))
        );
    }
    line
}

fn human_report(result: &ThroughputResult) -> String {
    use std::fmt::Write;
    let spec = &result.spec;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "--- {}:{} throughput, {:?} {:?}, {} stream(s), tool {:?} ---",
        spec.target, spec.port, spec.protocol, spec.direction, spec.streams, spec.tool
    );
    for interval in &result.intervals {
        let streams = if interval.streams.len() > 1 {
            let parts: Vec<String> = interval
                .streams
                .iter()
                .map(|s| format!("#{} {}", s.stream, format_rate_bps(s.bps)))
                .collect();
            format!("  [{}]", parts.join(", "))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{:6.2}-{:6.2} s  {}{}{}",
            interval.start_s,
            interval.end_s,
            format_rate_bps(interval.bps),
            if interval.omitted { " (omitted)" } else { "" },
            streams
        );
    }
    let _ = writeln!(out, "{}", summary_line(&result.summary));
    if let Some(reverse) = &result.reverse_summary {
        let _ = writeln!(out, "{}", summary_line(reverse));
    }
    let ratio = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{:.0} %", v * 100.0));
    let _ = writeln!(
        out,
        "CPU: sender {} of host (busiest thread {}), receiver {} of host (busiest thread {})",
        ratio(result.host.cpu_ratio.sender),
        ratio(result.host.max_thread_cpu_demand_ratio.sender),
        ratio(result.host.cpu_ratio.receiver),
        ratio(result.host.max_thread_cpu_demand_ratio.receiver)
    );
    let _ = writeln!(
        out,
        "limited by: {} — {}",
        result.limited_by.as_str(),
        result.evidence.reason
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_numbers_are_seconds_like_iperf3_and_units_still_work() {
        assert_eq!(seconds_or_duration_arg("10"), Ok(Duration::from_secs(10)));
        assert_eq!(
            seconds_or_duration_arg("0.5"),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(
            seconds_or_duration_arg("250ms"),
            Ok(Duration::from_millis(250))
        );
        assert!(seconds_or_duration_arg("-1")
            .unwrap_err()
            .contains("non-negative"));
        assert!(seconds_or_duration_arg("ten").is_err());
    }
}
