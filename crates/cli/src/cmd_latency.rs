//! `vantage latency TARGET`: RTT, jitter, loss (split by direction), one-way delay.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use vantage_model::kinds::latency;
use vantage_model::latency::{
    Distribution, LatencyProtocol, LatencyResult, LatencySpec, ProbeCpu, ReflectorReport,
    TransmitStamp, UdpMode,
};
use vantage_model::units::{format_us, parse_bytes, parse_duration};
use vantage_probe::endpoint::DEFAULT_PORT;
use vantage_probe::latency::{run_latency, Progress};

use crate::repeat::{RepeatArgs, Repeated};

#[derive(Clone, Copy, ValueEnum)]
enum ProtocolArg {
    Udp,
    Tcp,
    Icmp,
}

#[derive(Clone, Copy, ValueEnum)]
enum UdpModeArg {
    /// TWAMP-Light (RFC 5357 unauthenticated) sender packets.
    #[value(alias = "twamp")]
    TwampLight,
    /// STAMP (RFC 8762 unauthenticated) Session-Sender packets with an SSID and an
    /// Extra Padding TLV (RFC 8972).
    Stamp,
}

#[derive(Clone, Copy, ValueEnum)]
enum TxStampArg {
    Kernel,
    User,
}

#[derive(Args)]
pub struct LatencyArgs {
    /// Host name, host:port, or IPv4 / IPv6 address of a vantage endpoint (or, for
    /// UDP, any TWAMP-Light or STAMP reflector).
    target: String,
    /// Endpoint port (UDP and TCP); ignored by ICMP.
    #[arg(long, short, value_name = "P", default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Probes to send.
    #[arg(long, short, value_name = "N", default_value = latency::DEFAULT_COUNT)]
    count: u32,
    /// Time between probe sends (DUR, e.g. 10ms, 1s).
    #[arg(long, short, value_name = "DUR", default_value = latency::DEFAULT_INTERVAL, value_parser = duration_arg)]
    interval: Duration,
    /// A probe without an answer after this long is lost (5 s, as Chard et al., FGCS 2015).
    #[arg(long, short = 'W', value_name = "DUR", default_value = latency::DEFAULT_TIMEOUT, value_parser = duration_arg)]
    timeout: Duration,
    /// Probe size in bytes: UDP payload (TWAMP test packet incl. padding, at least
    /// 14; STAMP: 44, or 48 and more), ICMP payload, or TCP echo request body.
    #[arg(long, short, value_name = "BYTES", default_value = latency::DEFAULT_SIZE, value_parser = size_arg)]
    size: u32,
    #[arg(long, value_enum, default_value = "udp")]
    protocol: ProtocolArg,
    /// UDP test packets: `twamp-light` (RFC 5357) or `stamp` (RFC 8762; --size 44 or
    /// at least 48). Either works against a vantage endpoint; a STAMP sender also gets
    /// answers from TWAMP-Light reflectors (RFC 8762 §4.6), and the report says which
    /// kind answered.
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "twamp-light")]
    udp_mode: UdpModeArg,
    /// DSCP code point to mark probes with (0..=63).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=63))]
    dscp: u8,
    /// Send probes larger than the path MTU (they will be fragmented).
    #[arg(long)]
    allow_fragmentation: bool,
    /// Transmit stamp: `kernel` (as the packet leaves the socket layer) or `user`
    /// (before the send call, as ping does; for like-for-like comparisons).
    #[arg(long, value_enum, value_name = "CLOCK", default_value = "kernel")]
    tx_timestamp: TxStampArg,
    /// Print one JSON document (docs/json-schema.md) instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    repeat: RepeatArgs,
}

pub(crate) fn duration_arg(input: &str) -> Result<Duration, String> {
    parse_duration(input).map_err(|e| e.to_string())
}

pub(crate) fn size_arg(input: &str) -> Result<u32, String> {
    let bytes = parse_bytes(input).map_err(|e| e.to_string())?;
    u32::try_from(bytes).map_err(|_| format!("size {bytes} is too large"))
}

pub(crate) fn micros_u64(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

pub fn run(args: LatencyArgs) -> ExitCode {
    let spec = LatencySpec {
        target: args.target.clone(),
        port: args.port,
        protocol: match args.protocol {
            ProtocolArg::Udp => LatencyProtocol::Udp,
            ProtocolArg::Tcp => LatencyProtocol::Tcp,
            ProtocolArg::Icmp => LatencyProtocol::Icmp,
        },
        count: args.count,
        interval_us: micros_u64(args.interval),
        timeout_us: micros_u64(args.timeout),
        size_bytes: args.size,
        dscp: args.dscp,
        allow_fragmentation: args.allow_fragmentation,
        tx_timestamp: match args.tx_timestamp {
            TxStampArg::Kernel => TransmitStamp::Kernel,
            TxStampArg::User => TransmitStamp::User,
        },
        udp_mode: match args.udp_mode {
            UdpModeArg::TwampLight => UdpMode::TwampLight,
            UdpModeArg::Stamp => UdpMode::Stamp,
        },
    };
    let output = ProbeOutput {
        command: "latency",
        json: args.json,
        count: args.count,
        answered_word: "answered",
        repeat: &args.repeat,
    };
    // Like ping: a run in which no reply came back at all exits 1 (the report still prints).
    let mut nothing_answered = false;
    let code = output.run(
        |progress| {
            let result = run_latency(&spec, progress);
            if let Ok(result) = &result {
                nothing_answered |= result.summary.received == 0;
            }
            result
        },
        human_report,
    );
    if nothing_answered {
        return ExitCode::FAILURE;
    }
    code
}

/// How a probing command (latency, sandwich) shows progress and prints its result.
pub(crate) struct ProbeOutput<'a> {
    pub command: &'static str,
    pub json: bool,
    pub count: u32,
    /// What the progress bar calls the probes that came back ("answered", "complete").
    pub answered_word: &'static str,
    pub repeat: &'a RepeatArgs,
}

impl ProbeOutput<'_> {
    /// Runs `engine` (`--repeat` times) with a progress bar (terminal only, never with
    /// `--json`), then prints the result(s) as JSON or as `human_report`'s text.
    pub fn run<R: serde::Serialize, E: std::fmt::Display>(
        &self,
        mut engine: impl FnMut(&mut dyn FnMut(Progress)) -> Result<R, E>,
        human_report: impl Fn(&R) -> String,
    ) -> ExitCode {
        let repeated = Repeated {
            command: self.command,
            kind: self.command,
            json: self.json,
            args: self.repeat,
        };
        repeated.run(
            || {
                let bar = progress_bar(self.json, u64::from(self.count));
                let result = engine(&mut |p: Progress| {
                    if let Some(bar) = &bar {
                        bar.set_position(u64::from(p.sent));
                        bar.set_message(format!("{} {}", p.answered, self.answered_word));
                    }
                });
                if let Some(bar) = bar {
                    bar.finish_and_clear();
                }
                result
            },
            human_report,
        )
    }
}

/// Writes `text` to stdout; a closed pipe (e.g. `| head`) ends quietly, not in a panic.
/// The text of `path`, or of stdin when it is `-`.
pub(crate) fn read_input(path: &std::path::Path) -> Result<String, String> {
    if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).map_err(|e| format!("cannot read stdin: {e}"))
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    }
}

pub(crate) fn print_stdout(command: &str, text: &str) -> ExitCode {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("vantage {command}: cannot write the result: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints one JSON document on stdout.
pub(crate) fn print_json(command: &str, value: &impl serde::Serialize) -> ExitCode {
    match serde_json::to_string_pretty(value) {
        Ok(text) => print_stdout(command, &(text + "\n")),
        Err(e) => {
            eprintln!("vantage {command}: cannot encode the result: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A progress bar on stderr when it is a terminal and JSON was not asked for.
pub(crate) fn progress_bar(json: bool, total: u64) -> Option<ProgressBar> {
    styled_progress_bar(json, total, "{bar:30} {pos}/{len} sent, {msg}")
}

/// The same, drawn with an indicatif `template`.
pub(crate) fn styled_progress_bar(json: bool, total: u64, template: &str) -> Option<ProgressBar> {
    if json || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    Some(bar)
}

pub(crate) fn format_distribution(d: &Distribution) -> String {
    format!(
        "min/median/mean/p95/p99/max/stddev = {:.1}/{:.1}/{:.1}/{:.1}/{:.1}/{:.1}/{:.1} µs",
        d.min, d.median, d.mean, d.p95, d.p99, d.max, d.stddev
    )
}

fn human_report(result: &LatencyResult) -> String {
    use std::fmt::Write;
    let s = &result.summary;
    let mut out = String::new();
    let protocol = match (result.spec.protocol, result.spec.udp_mode) {
        (LatencyProtocol::Udp, UdpMode::TwampLight) => "UDP TWAMP-Light",
        (LatencyProtocol::Udp, UdpMode::Stamp) => "UDP STAMP",
        (LatencyProtocol::Tcp, _) => "TCP",
        (LatencyProtocol::Icmp, _) => "ICMP echo",
    };
    let _ = writeln!(
        out,
        "--- {} ({}) latency, {protocol}, {} B probes ---",
        result.spec.target, result.target_addr, result.spec.size_bytes
    );
    let _ = writeln!(
        out,
        "{} sent, {} received, {:.1}% loss (forward {}, reverse {}, direction unknown {}), {} duplicates, {} reordered",
        s.sent,
        s.received,
        s.loss_ratio * 100.0,
        s.forward_lost,
        s.reverse_lost,
        s.unknown_direction_lost,
        s.duplicates,
        s.reordered
    );
    if let Some(connect) = &s.connect_us {
        let _ = writeln!(out, "connect {}", format_distribution(connect));
    }
    match &s.rtt_us {
        Some(rtt) => {
            let _ = writeln!(out, "rtt {}", format_distribution(rtt));
        }
        None => {
            let _ = writeln!(out, "rtt: no probe came back");
        }
    }
    if let Some(j) = &s.jitter_us {
        let _ = writeln!(
            out,
            "jitter: RFC 3550 {}, mean |Δ| {}, median |Δ| {}",
            format_us(j.rfc3550),
            format_us(j.mean_abs_delta),
            format_us(j.median_abs_delta)
        );
    }
    if let Some(one_way) = &s.one_way {
        match (
            &one_way.forward_delay_us,
            &one_way.reverse_delay_us,
            one_way.valid,
        ) {
            (Some(forward), Some(reverse), true) => {
                let bound = one_way
                    .error_bound_us
                    .map_or("unknown".to_string(), |b| format!("±{}", format_us(b)));
                let _ = writeln!(
                    out,
                    "one-way: forward median {}, reverse median {} (error bound {bound})",
                    format_us(forward.median),
                    format_us(reverse.median)
                );
            }
            _ => {
                let _ = writeln!(
                    out,
                    "one-way: not reported ({})",
                    one_way.reason.as_deref().unwrap_or("no samples")
                );
            }
        }
    }
    if let Some(reflector) = &s.reflector {
        out.push_str(&reflector_line(reflector, s.received));
    }
    let source = |s| match s {
        vantage_model::latency::TimestampSource::Kernel => "kernel",
        vantage_model::latency::TimestampSource::User => "user space",
        vantage_model::latency::TimestampSource::Remote => "remote",
    };
    let _ = writeln!(
        out,
        "timestamps: transmit {}, receive {}",
        source(result.timestamping.transmit),
        source(result.timestamping.receive)
    );
    if let Some(cpu) = &result.probe_cpu {
        out.push_str(&probe_cpu_line(cpu));
    }
    out
}

/// The probe's self-check (Miravalls-Sierra et al., 2018) in one line.
fn probe_cpu_line(cpu: &ProbeCpu) -> String {
    let host = cpu
        .host_busy_ratio
        .map_or("host load unknown".to_string(), |busy| {
            format!("host {:.0} % busy", busy * 100.0)
        });
    let wait = cpu
        .thread_runqueue_wait_ratio
        .map_or(String::new(), |wait| {
            format!(", waited for a core {:.1} % of the run", wait * 100.0)
        });
    let verdict = if cpu.saturated {
        "NEAR SATURATION: delays may be over-reported"
    } else {
        "ok"
    };
    format!(
        "probe CPU: {host}, probing thread {:.1} % of a core{wait} — {verdict}\n",
        cpu.thread_cpu_ratio * 100.0
    )
}

/// What the reflector returned besides the timestamps: Sender TTL and, for STAMP,
/// whether it echoed our SSID. Empty when nothing came back.
fn reflector_line(r: &ReflectorReport, received: u64) -> String {
    if received == 0 {
        return String::new();
    }
    let ttl = match (r.sender_ttl_min, r.sender_ttl_max) {
        (Some(min), Some(max)) if min == max => format!("Sender TTL {min}"),
        (Some(min), Some(max)) => format!("Sender TTL {min}..{max}"),
        _ => "did not return the Sender TTL".to_string(),
    };
    let missing = if r.replies_without_ttl == 0 {
        String::new()
    } else {
        format!(
            " ({} of {received} replies without TTL: {} shorter than the 41-byte RFC 5357 layout, {} with TTL 0)",
            r.replies_without_ttl,
            r.short_replies,
            r.replies_without_ttl - r.short_replies
        )
    };
    let ssid = match r.ssid_echoed {
        Some(true) => "; SSID echoed (STAMP reflector, RFC 8972)",
        Some(false) => "; SSID not echoed (a TWAMP-Light or RFC 8762-only reflector answered)",
        None => "",
    };
    format!("reflector: {ttl}{missing}{ssid}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> ReflectorReport {
        ReflectorReport {
            replies_without_ttl: 0,
            short_replies: 0,
            sender_ttl_min: None,
            sender_ttl_max: None,
            ssid_echoed: None,
        }
    }

    #[test]
    fn probe_cpu_line_flags_saturation() {
        let idle = ProbeCpu::judge(Some(0.12), 0.031, Some(0.001));
        assert_eq!(
            probe_cpu_line(&idle),
            "probe CPU: host 12 % busy, probing thread 3.1 % of a core, waited for a core 0.1 % of the run — ok\n"
        );
        let busy = ProbeCpu::judge(Some(0.95), 0.5, None);
        assert!(probe_cpu_line(&busy).ends_with("NEAR SATURATION: delays may be over-reported\n"));
        // A starved thread on a host that is not full: still saturated.
        assert!(ProbeCpu::judge(Some(0.5), 0.2, Some(0.1)).saturated);
        assert!(!ProbeCpu::judge(None, 0.2, None).saturated);
    }

    #[test]
    fn reflector_line_says_when_the_ttl_is_missing() {
        let short = ReflectorReport {
            replies_without_ttl: 10,
            short_replies: 7,
            ..report()
        };
        assert_eq!(
            reflector_line(&short, 10),
            "reflector: did not return the Sender TTL (10 of 10 replies without TTL: \
             7 shorter than the 41-byte RFC 5357 layout, 3 with TTL 0)\n"
        );
        let stamp = ReflectorReport {
            sender_ttl_min: Some(61),
            sender_ttl_max: Some(64),
            ssid_echoed: Some(false),
            ..report()
        };
        assert_eq!(
            reflector_line(&stamp, 3),
            "reflector: Sender TTL 61..64; SSID not echoed \
             (a TWAMP-Light or RFC 8762-only reflector answered)\n"
        );
        assert_eq!(reflector_line(&report(), 0), "");
    }
}
