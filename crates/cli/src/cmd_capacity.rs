//! `vantage capacity TARGET`: the SLA method of Rufini et al., Fotonica 2014 (TCP B_t, UDP over-rate B_c,
//! verification at B_c − ε, the window bound) against a vantage endpoint.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use vantage_model::capacity::CapacityResult;
use vantage_model::kinds::{capacity, Target};
use vantage_model::units::format_rate_bps;
use vantage_probe::capacity::run_capacity;
use vantage_probe::endpoint::DEFAULT_PORT;

use crate::cmd_latency::{duration_arg, micros_u64, print_json, print_stdout, size_arg};

#[derive(Args)]
pub struct CapacityArgs {
    /// Host name, host:port, or address of a vantage endpoint.
    target: String,
    #[arg(long, short, value_name = "P", default_value_t = DEFAULT_PORT)]
    port: u16,
    /// ε as a fraction of B_c: verification runs at B_c · (1 − ε).
    #[arg(long, value_name = "RATIO", default_value = capacity::DEFAULT_EPSILON)]
    epsilon: f64,
    /// Largest loss ratio accepted at the verification rate (0.001 = 0.1 %).
    #[arg(long, value_name = "RATIO", default_value = capacity::DEFAULT_LOSS_THRESHOLD)]
    loss_threshold: f64,
    /// Length of each TCP run (DUR).
    #[arg(long, value_name = "DUR", default_value = capacity::DEFAULT_TCP_DURATION, value_parser = duration_arg)]
    tcp_duration: Duration,
    /// Length of each UDP probe (DUR).
    #[arg(long, value_name = "DUR", default_value = capacity::DEFAULT_PROBE_DURATION, value_parser = duration_arg)]
    probe_duration: Duration,
    /// Streams of the parallel TCP run.
    #[arg(long, value_name = "N", default_value = capacity::DEFAULT_TCP_STREAMS, value_parser = clap::value_parser!(u32).range(1..=128))]
    streams: u32,
    /// UDP payload bytes (default: a 1500-byte IPv4 packet).
    #[arg(long, value_name = "BYTES", default_value = capacity::DEFAULT_PACKET_SIZE, value_parser = size_arg)]
    packet_size: u32,
    /// Measure the downlink: the target sends every TCP run and UDP probe.
    #[arg(long, short = 'R')]
    reverse: bool,
    /// Ticket for an endpoint that requires one (`vantage endpoint --authorized-keys`),
    /// as `vantage ticket issue` wrote it; it must cover every run of the method.
    #[arg(long, value_name = "FILE", value_parser = crate::cmd_ticket::ticket_file_arg)]
    ticket: Option<vantage_model::ticket::TestTicket>,
    /// Print one JSON document (docs/json-schema.md) instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: CapacityArgs) -> ExitCode {
    let ratio_ok = |r: f64| r.is_finite() && (0.0..1.0).contains(&r);
    if !ratio_ok(args.epsilon) || !ratio_ok(args.loss_threshold) {
        eprintln!("vantage capacity: --epsilon and --loss-threshold must be in [0, 1)");
        return ExitCode::FAILURE;
    }
    let mut spec = capacity::default_spec(&Target {
        host: args.target.clone(),
        port: args.port,
    });
    spec.epsilon_ratio = args.epsilon;
    spec.loss_threshold_ratio = args.loss_threshold;
    spec.tcp_duration_us = micros_u64(args.tcp_duration);
    spec.udp_probe_duration_us = micros_u64(args.probe_duration);
    spec.tcp_streams = args.streams;
    spec.packet_size_bytes = args.packet_size;
    spec.reverse = args.reverse;
    spec.ticket = args.ticket.clone();
    let quiet = args.json;
    let result = run_capacity(&spec, &mut |step: &str| {
        if !quiet {
            eprintln!("… {step}");
        }
    });
    match result {
        Ok(result) if args.json => print_json("capacity", &result),
        Ok(result) => print_stdout("capacity", &human_report(&result)),
        Err(err) => {
            eprintln!("vantage capacity: {err}");
            ExitCode::FAILURE
        }
    }
}

fn human_report(result: &CapacityResult) -> String {
    use std::fmt::Write;
    let s = &result.summary;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "--- {}:{} capacity (SLA method, Rufini et al., Fotonica 2014) ---",
        result.spec.target, result.spec.port
    );
    let rtt = s.rtt_us.map_or("n/a".to_string(), |r| format!("{r:.0} µs"));
    let _ = writeln!(
        out,
        "TCP: 1 stream {} (rtt {rtt}, limited by {}), {} streams {}",
        format_rate_bps(s.tcp_bps),
        result.tcp_single.limited_by.as_str(),
        result.tcp_parallel.streams,
        format_rate_bps(s.tcp_parallel_bps)
    );
    for probe in &result.probes {
        let _ = writeln!(
            out,
            "UDP {:9} target {:>14}: sent {:>14}, received {:>14}, loss {:.3} %",
            probe.purpose,
            format_rate_bps(probe.target_rate_bps),
            format_rate_bps(probe.sent_bps),
            format_rate_bps(probe.received_bps),
            probe.loss_ratio * 100.0
        );
    }
    let _ = writeln!(
        out,
        "B_c = {} from B_c' = {}; capacity {} {} (loss {:.3} %)",
        format_rate_bps(s.estimated_capacity_bps),
        format_rate_bps(s.over_rate_bps),
        format_rate_bps(s.capacity_bps),
        if s.verified {
            "verified"
        } else {
            "NOT verified"
        },
        s.verified_loss_ratio * 100.0
    );
    if !s.over_capacity_reached {
        let _ = writeln!(
            out,
            "warning: the UDP sender reached only {} without loss: the path was not saturated, \
             so capacity is at least {} (a lower bound, not a measurement of the path)",
            format_rate_bps(s.over_rate_bps),
            format_rate_bps(s.capacity_bps)
        );
    }
    let bound = &result.bound;
    let _ = writeln!(
        out,
        "bound B_t ≤ min(cwnd,rwnd)/RTT ≤ min(B_c, rwnd/RTT): {} — binding: {} ({})",
        match bound.holds {
            Some(true) => "holds",
            Some(false) => "violated",
            None => "not computable",
        },
        bound.binding,
        bound.explanation
    );
    if let Some(calibration) = &result.calibration {
        let _ = writeln!(
            out,
            "calibration, 1 then {} streams (Miravalls-Sierra et al., 2018): {}{}",
            calibration.streams,
            if calibration.probe_limited {
                "PROBE-LIMITED — "
            } else {
                ""
            },
            calibration.reason
        );
    }
    out
}
