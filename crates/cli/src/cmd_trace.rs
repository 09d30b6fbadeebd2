//! `vantage trace HOST`: the hops to a host with flow-stable probes (Paris traceroute,
//! Augustin et al., IMC 2006).

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;
use vantage_model::kinds;

use clap::{Args, ValueEnum};
use vantage_model::trace::{
    ReplyKind, TraceHop, TraceMethod, TraceProtocol, TraceResult, TraceSpec, TraceStop,
    MAX_QUERIES, MAX_TIMEOUT_US, MAX_TTL_LIMIT, MIN_TIMEOUT_US,
};
use vantage_probe::trace::run_trace_with_progress;

use crate::cmd_latency::{duration_arg, micros_u64, print_json, print_stdout};

/// A probe timeout within the engine's bounds (1 ms ..= 10 s).
fn timeout_arg(input: &str) -> Result<Duration, String> {
    let timeout = duration_arg(input)?;
    let bounds = Duration::from_micros(MIN_TIMEOUT_US)..=Duration::from_micros(MAX_TIMEOUT_US);
    if bounds.contains(&timeout) {
        Ok(timeout)
    } else {
        Err(format!("{input} is outside 1ms..=10s"))
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum ProtocolArg {
    Udp,
    Icmp,
    Tcp,
}

#[derive(Args)]
pub struct TraceArgs {
    /// Host name or IPv4 / IPv6 address to trace towards.
    host: String,
    /// Probe protocol: udp (unprivileged), icmp (ping socket where
    /// net.ipv4.ping_group_range allows, else raw: root), tcp (SYN, raw: root, IPv4).
    #[arg(long, short = 'P', value_enum, default_value = "udp")]
    protocol: ProtocolArg,
    /// Destination port (default 33434 for UDP, 80 for TCP; ICMP has none).
    #[arg(long, short, value_name = "P")]
    port: Option<u16>,
    /// Last TTL probed (at most 64).
    #[arg(long, short = 'm', value_name = "N", default_value = kinds::trace::DEFAULT_MAX_TTL,
          value_parser = clap::value_parser!(u8).range(1..=i64::from(MAX_TTL_LIMIT)))]
    max_ttl: u8,
    /// First TTL probed.
    #[arg(long, short = 'f', value_name = "N", default_value = kinds::trace::DEFAULT_FIRST_TTL,
          value_parser = clap::value_parser!(u8).range(1..=i64::from(MAX_TTL_LIMIT)))]
    first_ttl: u8,
    /// Probes per hop (1..=10).
    #[arg(long, short = 'q', value_name = "N", default_value = kinds::trace::DEFAULT_QUERIES,
          value_parser = clap::value_parser!(u8).range(1..=i64::from(MAX_QUERIES)))]
    queries: u8,
    /// A probe without an answer after this long is lost (DUR, e.g. 500ms, 2s; at most 10s).
    #[arg(long, short = 'w', value_name = "DUR", default_value = kinds::trace::DEFAULT_TIMEOUT, value_parser = timeout_arg)]
    timeout: Duration,
    /// Flow identifier every probe keeps: source port (UDP, TCP) or echo identifier (ICMP).
    #[arg(long, value_name = "ID")]
    flow_id: Option<u16>,
    /// Print one JSON document (docs/json-schema.md) instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: TraceArgs) -> ExitCode {
    let spec = TraceSpec {
        target: args.host.clone(),
        port: args.port,
        protocol: match args.protocol {
            ProtocolArg::Udp => TraceProtocol::Udp,
            ProtocolArg::Icmp => TraceProtocol::Icmp,
            ProtocolArg::Tcp => TraceProtocol::Tcp,
        },
        first_ttl: args.first_ttl,
        max_ttl: args.max_ttl,
        queries: args.queries,
        timeout_us: micros_u64(args.timeout),
        flow_id: args.flow_id,
    };
    if let Err(err) = spec.validate() {
        eprintln!("vantage trace: invalid option {err}");
        return ExitCode::FAILURE;
    }
    if !args.json {
        let port = spec
            .destination_port()
            .map_or(String::new(), |port| format!(" to port {port}"));
        println!(
            "trace to {}, {}{port}, {} hops max, {} per hop",
            spec.target,
            protocol_name(spec.protocol),
            spec.max_ttl,
            if spec.queries == 1 {
                "1 probe".to_string()
            } else {
                format!("{} probes", spec.queries)
            }
        );
    }
    let json = args.json;
    // Hops print as they complete, as traceroute does.
    let result = run_trace_with_progress(&spec, &mut |hop| {
        if !json {
            print!("{}", hop_line(hop));
        }
    });
    match result {
        Ok(result) if json => print_json("trace", &result),
        Ok(result) => print_stdout("trace", &footer(&result)),
        Err(err) => {
            eprintln!("vantage trace: {err}");
            ExitCode::FAILURE
        }
    }
}

fn protocol_name(protocol: TraceProtocol) -> &'static str {
    match protocol {
        TraceProtocol::Udp => "UDP",
        TraceProtocol::Icmp => "ICMP echo",
        TraceProtocol::Tcp => "TCP SYN",
    }
}

/// `ttl  address  rtt rtt rtt` with `*` for a lost probe and a note when a probe was
/// answered by someone else than the hop's first address.
fn hop_line(hop: &TraceHop) -> String {
    let mut line = format!("{:>2}  ", hop.ttl);
    let mut shown: Option<&str> = None;
    for probe in &hop.probes {
        match (&probe.address, probe.rtt_us) {
            (Some(address), Some(rtt_us)) => {
                if shown != Some(address.as_str()) {
                    let _ = write!(line, "{address}  ");
                    shown = Some(address.as_str());
                }
                let _ = write!(line, "{:.3} ms", rtt_us / 1000.0);
                if let Some(mark) = probe.reply.and_then(reply_mark) {
                    let _ = write!(line, " {mark}");
                }
                line.push_str("  ");
            }
            _ => line.push_str("*  "),
        }
    }
    line.truncate(line.trim_end().len());
    line.push('\n');
    line
}

/// traceroute's marks for answers that are not time-exceeded.
fn reply_mark(kind: ReplyKind) -> Option<&'static str> {
    match kind {
        ReplyKind::Unreachable => Some("!U"),
        ReplyKind::SynAck => Some("[open]"),
        ReplyKind::Reset => Some("[closed]"),
        _ => None,
    }
}

fn footer(result: &TraceResult) -> String {
    let method = match result.method {
        TraceMethod::UdpDatagram => "UDP socket, ICMP errors from its error queue",
        TraceMethod::IcmpDatagram => "ICMP ping socket",
        TraceMethod::IcmpRaw => "raw ICMP socket",
        TraceMethod::TcpRaw => "raw TCP and ICMP sockets",
    };
    let flow = &result.flow;
    let mut flow_text = Vec::new();
    if let Some(port) = flow.source_port {
        flow_text.push(format!("source port {port}"));
    }
    if let Some(port) = flow.destination_port {
        flow_text.push(format!("destination port {port}"));
    }
    if let Some(id) = flow.icmp_identifier {
        flow_text.push(format!("echo identifier {id}"));
    }
    if let Some(sum) = flow.icmp_checksum {
        flow_text.push(format!("checksum 0x{sum:04x}"));
    }
    let outcome = match result.stop_reason {
        TraceStop::DestinationReached => format!(
            "destination {} reached in {} {}",
            result.target_addr,
            result.hop_count,
            if result.hop_count == 1 { "hop" } else { "hops" }
        ),
        TraceStop::Unreachable => format!(
            "destination {} not reached: unreachable reported at hop {}",
            result.target_addr, result.hop_count
        ),
        TraceStop::MaxTtl => format!(
            "destination {} not reached within {} hops",
            result.target_addr, result.spec.max_ttl
        ),
    };
    format!("{outcome}; {method}; one flow: {}\n", flow_text.join(", "))
}
