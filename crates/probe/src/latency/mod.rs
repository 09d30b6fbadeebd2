//! The latency engines behind `vantage latency`: UDP (TWAMP-Light sender), TCP
//! (connect time + one echo round trip per connection) and ICMP echo.
//!
//! The engines are blocking (a `poll(2)` loop on one socket): that keeps the
//! distance between the packet and the clock short and needs no runtime. Async
//! callers run them with `tokio::task::spawn_blocking`.
//!
//! Loss rules (documented in docs/latency.md): a probe whose reply does not come back
//! within `timeout` of its send is lost, and a late reply is ignored. A run whose
//! target actively refused (ICMP port unreachable on the connected UDP socket, TCP
//! RST) before anything was answered is an error, not a result; plain silence is a
//! completed run with loss ratio 1.

mod engine;
mod icmp;
pub(crate) use icmp::{echo_packet, internet_checksum, open_echo_socket};
mod shared;
mod tcp;
pub(crate) mod udp;

pub use engine::{LatencyError, Progress};
pub use shared::SharedProber;

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use vantage_model::latency::{
    LatencyProtocol, LatencyResult, LatencySpec, LatencySummary, ProbeCpu, ProbeSample, ProbeStatus,
};
use vantage_stats::{distribution, ipdv, jitter, ProbeFate};

use crate::cpu::{HostCpuMark, ThreadCpuMark};

use engine::EngineRun;

/// Resolves `host`, `host:port`, `[v6]:port`, an IPv4 or a bare IPv6 literal;
/// `default_port` applies when none is given. The first address returned wins.
pub fn resolve_target(target: &str, default_port: u16) -> Result<SocketAddr, LatencyError> {
    let resolve_error = |reason: String| LatencyError::Resolve {
        target: target.to_string(),
        reason,
    };
    if target.is_empty() {
        return Err(resolve_error("empty target".into()));
    }
    if let Ok(addr) = target.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(ip) = target
        .trim_matches(|c| c == '[' || c == ']')
        .parse::<IpAddr>()
    {
        return Ok(SocketAddr::new(ip, default_port));
    }
    let (host, port) = match target.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => {
            let port = port
                .parse::<u16>()
                .map_err(|_| resolve_error(format!("'{port}' is not a port number")))?;
            (host, port)
        }
        _ => (target, default_port),
    };
    (host, port)
        .to_socket_addrs()
        .map_err(|err| resolve_error(err.to_string()))?
        .next()
        .ok_or_else(|| resolve_error("no address found".into()))
}

/// Runs the latency test `spec` describes, reporting progress as it goes.
pub fn run_latency(
    spec: &LatencySpec,
    progress: &mut dyn FnMut(Progress),
) -> Result<LatencyResult, LatencyError> {
    let target = prepare(spec)?;
    let started = RunStart::now();
    let run = match spec.protocol {
        LatencyProtocol::Udp => udp::run(spec, target, progress)?,
        LatencyProtocol::Tcp => tcp::run(spec, target, progress)?,
        LatencyProtocol::Icmp => icmp::run(spec, target, progress)?,
    };
    Ok(started.result(spec, target, &run))
}

/// Checks `spec` and resolves its target (a host name's lookup blocks).
fn prepare(spec: &LatencySpec) -> Result<SocketAddr, LatencyError> {
    validate(spec)?;
    resolve_target(&spec.target, spec.port)
}

/// When a run began, with the CPU counters of the thread that probes and of the host:
/// their use over the run says whether the probes' timing could be trusted.
struct RunStart {
    start_time: chrono::DateTime<chrono::Utc>,
    thread_mark: ThreadCpuMark,
    host_mark: Option<HostCpuMark>,
}

impl RunStart {
    /// Call on the thread that probes.
    fn now() -> Self {
        Self {
            start_time: chrono::Utc::now(),
            thread_mark: ThreadCpuMark::now(),
            host_mark: HostCpuMark::now(),
        }
    }

    /// The result of `run`, measured since this start (call on the same thread).
    fn result(self, spec: &LatencySpec, target: SocketAddr, run: &EngineRun) -> LatencyResult {
        let thread_use = self.thread_mark.elapsed();
        let host_busy_ratio = self
            .host_mark
            .zip(HostCpuMark::now())
            .and_then(|(before, after)| before.busy_ratio_until(&after));
        let probe_cpu = ProbeCpu::judge(
            host_busy_ratio,
            thread_use.cpu_ratio(),
            thread_use
                .runqueue_wait_s
                .map(|_| thread_use.runqueue_wait_ratio()),
        );
        let (summary, samples) = summarize(run);
        LatencyResult {
            test: "latency".into(),
            tool: "native".into(),
            // The port actually probed (TARGET may carry one).
            spec: LatencySpec {
                port: target.port(),
                ..spec.clone()
            },
            // ICMP has no port.
            target_addr: match spec.protocol {
                LatencyProtocol::Icmp => target.ip().to_string(),
                _ => target.to_string(),
            },
            start_time: self.start_time,
            end_time: chrono::Utc::now(),
            timestamping: run.timestamping,
            summary,
            samples,
            probe_cpu: Some(probe_cpu),
        }
    }
}

/// The longest a run may last: a week.
const MAX_RUN_US: u64 = 7 * 86_400_000_000;

fn validate(spec: &LatencySpec) -> Result<(), LatencyError> {
    let invalid = |m: String| Err(LatencyError::InvalidSpec(m));
    if spec.count == 0 {
        return invalid("--count must be at least 1".into());
    }
    if spec.timeout_us == 0 {
        return invalid("--timeout must be positive".into());
    }
    // Bounded so that no probe's time overflows the clock's arithmetic.
    let run_us = u64::from(spec.count)
        .checked_mul(spec.interval_us)
        .and_then(|probes_us| probes_us.checked_add(spec.timeout_us));
    if run_us.is_none_or(|run_us| run_us > MAX_RUN_US) {
        return invalid(format!(
            "--count {} x --interval {} us + --timeout {} us is longer than a run may last \
             ({} days)",
            spec.count,
            spec.interval_us,
            spec.timeout_us,
            MAX_RUN_US / 86_400_000_000
        ));
    }
    if spec.dscp > 63 {
        return invalid(format!("--dscp {} is out of range 0..=63", spec.dscp));
    }
    let (min, max) = match spec.protocol {
        // A request at least as long as the 41-byte reply (RFC 6038 symmetric size):
        // reflectors, ours included, do not answer shorter ones, which would amplify.
        LatencyProtocol::Udp => (
            crate::twamp::REFLECTOR_HEADER_LEN as u32,
            crate::twamp::MAX_PACKET_LEN as u32,
        ),
        LatencyProtocol::Icmp => (icmp::MIN_PAYLOAD_BYTES, icmp::MAX_PAYLOAD_BYTES),
        LatencyProtocol::Tcp => (1, crate::endpoint::tcp::MAX_ECHO_FRAME_BYTES),
    };
    if spec.size_bytes < min || spec.size_bytes > max {
        return invalid(format!(
            "--size {} is out of range for {:?}: {min}..={max} bytes",
            spec.size_bytes, spec.protocol
        ));
    }
    Ok(())
}

/// Pure: turns per-probe outcomes into the summary and the per-probe samples.
pub(crate) fn summarize(run: &EngineRun) -> (LatencySummary, Vec<ProbeSample>) {
    let sent = run.probes.len() as u64;
    let rtts: Vec<f64> = run.probes.iter().filter_map(|p| p.rtt_us).collect();
    let received = rtts.len() as u64;
    let lost = sent - received;
    let fates: Vec<ProbeFate> = match &run.loss_split {
        Some(split) => split.per_probe.clone(),
        None => run
            .probes
            .iter()
            .map(|p| {
                if p.rtt_us.is_some() {
                    ProbeFate::Received
                } else {
                    ProbeFate::Lost
                }
            })
            .collect(),
    };
    let (forward_lost, reverse_lost, unknown_direction_lost) = match &run.loss_split {
        Some(split) => (
            split.forward_lost,
            split.reverse_lost,
            split.unknown_direction_lost,
        ),
        None => (0, 0, lost),
    };
    let ratio = |n: u64| {
        if sent == 0 {
            0.0
        } else {
            n as f64 / sent as f64
        }
    };
    let connects: Vec<f64> = run.probes.iter().filter_map(|p| p.connect_us).collect();
    let rtt_ipdv = ipdv(&rtts);
    let summary = LatencySummary {
        sent,
        received,
        lost,
        loss_ratio: ratio(lost),
        forward_lost,
        reverse_lost,
        unknown_direction_lost,
        forward_loss_ratio: ratio(forward_lost),
        reverse_loss_ratio: ratio(reverse_lost),
        duplicates: run.duplicates,
        reordered: run.reordered,
        rtt_us: distribution(&rtts),
        jitter_us: jitter(&rtts),
        ipdv_us: distribution(&rtt_ipdv),
        connect_us: distribution(&connects),
        one_way: run.one_way.clone(),
        reflector: run.reflector.clone(),
    };
    let samples = run
        .probes
        .iter()
        .zip(fates)
        .enumerate()
        .map(|(seq, (probe, fate))| ProbeSample {
            seq: seq as u32,
            sent_offset_us: probe.sent_offset_us,
            status: ProbeStatus::from(fate),
            rtt_us: probe.rtt_us,
            forward_us: probe.forward_us,
            reverse_us: probe.reverse_us,
            reflector_seq: probe.reflector_seq,
            connect_us: probe.connect_us,
        })
        .collect();
    (summary, samples)
}

#[cfg(test)]
mod tests {
    use super::engine::ProbeOutcome;
    use super::*;
    use vantage_model::latency::Timestamping;

    #[test]
    fn targets_resolve_in_every_documented_form() {
        assert_eq!(
            resolve_target("127.0.0.1", 7862).unwrap(),
            "127.0.0.1:7862".parse().unwrap()
        );
        assert_eq!(
            resolve_target("127.0.0.1:9", 7862).unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        assert_eq!(
            resolve_target("::1", 7862).unwrap(),
            "[::1]:7862".parse().unwrap()
        );
        assert_eq!(
            resolve_target("[::1]:5", 7862).unwrap(),
            "[::1]:5".parse().unwrap()
        );
        assert_eq!(resolve_target("localhost:7", 1).unwrap().port(), 7);
        assert!(resolve_target("localhost:notaport", 1)
            .unwrap_err()
            .to_string()
            .contains("notaport"));
        assert!(resolve_target("no-such-host.invalid", 1).is_err());
    }

    #[test]
    fn a_run_longer_than_a_week_is_refused_before_any_probe() {
        let spec = |count: u32, interval_us: u64| LatencySpec {
            target: "127.0.0.1".into(),
            port: 9,
            protocol: LatencyProtocol::Udp,
            count,
            interval_us,
            timeout_us: 5_000_000,
            size_bytes: 64,
            dscp: 0,
            allow_fragmentation: false,
            tx_timestamp: vantage_model::latency::TransmitStamp::Kernel,
            udp_mode: Default::default(),
        };
        assert!(validate(&spec(600, 1_000_000_000)).is_ok());
        for too_long in [spec(700, 1_000_000_000), spec(3, u64::MAX / 2)] {
            let error = validate(&too_long).unwrap_err().to_string();
            assert!(
                error.contains("longer than a run may last (7 days)"),
                "{error}"
            );
        }
    }

    #[test]
    fn summary_counts_and_ratios_follow_outcomes() {
        let probe = |rtt: Option<f64>| ProbeOutcome {
            rtt_us: rtt,
            ..ProbeOutcome::default()
        };
        let run = EngineRun {
            probes: vec![
                probe(Some(100.0)),
                probe(None),
                probe(Some(300.0)),
                probe(Some(200.0)),
            ],
            loss_split: None,
            duplicates: 1,
            reordered: 0,
            timestamping: Timestamping {
                transmit: vantage_model::latency::TimestampSource::User,
                receive: vantage_model::latency::TimestampSource::User,
            },
            one_way: None,
            reflector: None,
        };
        let (summary, samples) = summarize(&run);
        assert_eq!((summary.sent, summary.received, summary.lost), (4, 3, 1));
        assert_eq!(summary.loss_ratio, 0.25);
        assert_eq!(summary.unknown_direction_lost, 1);
        assert_eq!(summary.rtt_us.unwrap().median, 200.0);
        // |Δ| of 100, 300, 200 = 200, 100: mean 150.
        assert_eq!(summary.jitter_us.unwrap().mean_abs_delta, 150.0);
        assert_eq!(samples[1].status, ProbeStatus::Lost);
        assert_eq!(samples[3].seq, 3);
    }
}
