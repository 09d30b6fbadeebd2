//! The health probe bundle (Chard, Bubendorfer and Ng, FGCS 2015): runs the latency,
//! sandwich and throughput engines towards one peer and keeps what the health
//! system needs of each, the indicators of [`HealthResult`].
//!
//! Order: the light parts (ICMP and UDP at every size, TCP) together, so a round
//! stays short; then the sandwich alone, because its large packet must find the
//! path otherwise quiet; then the throughput test, which would disturb everything
//! else. A part that cannot run records why and the others still run; a peer that
//! refuses or cannot be reached counts as not answering.

use chrono::Utc;
use vantage_model::health::{
    HealthResult, HealthSpec, RttIndicator, SandwichIndicator, TcpIndicator, ThroughputIndicator,
};
use vantage_model::latency::{
    LatencyProtocol, LatencyResult, LatencySpec, SandwichSpec, TransmitStamp, UdpMode,
};
use vantage_model::throughput::ThroughputSpec;
use vantage_model::ticket::TestTicket;

use crate::latency::LatencyError;

/// Gap d between the two small packets of a sandwich (the `sandwich` kind's default).
const SANDWICH_GAP_US: u64 = 1_000;
/// Size of the TCP part's request.
const TCP_REQUEST_BYTES: u32 = 64;

fn latency_spec(spec: &HealthSpec, protocol: LatencyProtocol, size_bytes: u32) -> LatencySpec {
    LatencySpec {
        target: spec.target.clone(),
        port: if protocol == LatencyProtocol::Icmp {
            0
        } else {
            spec.port
        },
        protocol,
        count: spec.count,
        interval_us: spec.interval_us,
        timeout_us: spec.timeout_us,
        size_bytes,
        dscp: 0,
        // The paper's 4096-byte echo is fragmented on an ordinary 1500-byte path.
        allow_fragmentation: true,
        tx_timestamp: TransmitStamp::Kernel,
        udp_mode: UdpMode::TwampLight,
    }
}

/// Probes a failed part counts as sent: all of them when the peer refused or could
/// not be reached (it did not answer: the timeout marker counts that), none when the
/// part could not start here (no permission for ICMP, a bad size).
fn attempted(spec: &HealthSpec, error: &LatencyError) -> u64 {
    match error {
        LatencyError::Refused { .. } | LatencyError::Unreachable { .. } => u64::from(spec.count),
        _ => 0,
    }
}

fn answered_rtts(result: &LatencyResult) -> Vec<f64> {
    result
        .samples
        .iter()
        .filter_map(|sample| sample.rtt_us)
        .collect()
}

fn rtt_part(spec: &HealthSpec, protocol: LatencyProtocol, size_bytes: u32) -> RttIndicator {
    match crate::latency::run_latency(&latency_spec(spec, protocol, size_bytes), &mut |_| {}) {
        Ok(result) => RttIndicator {
            size_bytes,
            sent: result.summary.sent,
            rtt_us: answered_rtts(&result),
            error: None,
        },
        Err(error) => RttIndicator {
            size_bytes,
            sent: attempted(spec, &error),
            rtt_us: Vec::new(),
            error: Some(error.to_string()),
        },
    }
}

fn tcp_part(spec: &HealthSpec) -> TcpIndicator {
    let latency = latency_spec(spec, LatencyProtocol::Tcp, TCP_REQUEST_BYTES);
    match crate::latency::run_latency(&latency, &mut |_| {}) {
        Ok(result) => TcpIndicator {
            sent: result.summary.sent,
            connect_us: result.samples.iter().filter_map(|s| s.connect_us).collect(),
            rtt_us: answered_rtts(&result),
            error: None,
        },
        Err(error) => TcpIndicator {
            sent: attempted(spec, &error),
            connect_us: Vec::new(),
            rtt_us: Vec::new(),
            error: Some(error.to_string()),
        },
    }
}

fn sandwich_part(spec: &HealthSpec) -> SandwichIndicator {
    let sandwich = SandwichSpec {
        target: spec.target.clone(),
        port: spec.port,
        count: spec.count,
        gap_us: SANDWICH_GAP_US,
        interval_us: spec.interval_us,
        timeout_us: spec.timeout_us,
        small_size_bytes: 64,
        large_size_bytes: None,
        dscp: 0,
        allow_fragmentation: false,
    };
    match crate::sandwich::run_sandwich(&sandwich, &mut |_| {}) {
        Ok(result) => SandwichIndicator {
            rounds: result.summary.rounds,
            large_size_bytes: result.summary.large_size_bytes,
            delay_us: result
                .rounds
                .iter()
                .filter_map(|round| round.queuing_delay_us)
                .collect(),
            error: None,
        },
        Err(error) => SandwichIndicator {
            rounds: attempted(spec, &error),
            large_size_bytes: 0,
            delay_us: Vec::new(),
            error: Some(error.to_string()),
        },
    }
}

fn throughput_part(
    spec: &HealthSpec,
    duration_us: u64,
    ticket: Option<TestTicket>,
) -> ThroughputIndicator {
    let mut throughput = ThroughputSpec::new(&spec.target, spec.port);
    throughput.duration_us = Some(duration_us);
    throughput.ticket = ticket;
    match crate::throughput::client::run_native(&throughput) {
        Ok(result) => {
            let duration_s = result.summary.duration_s;
            let received_bytes = result.summary.received_bytes;
            ThroughputIndicator {
                duration_s,
                received_bytes,
                mean_bps: if duration_s > 0.0 {
                    received_bytes as f64 * 8.0 / duration_s
                } else {
                    0.0
                },
                per_second_bps: result
                    .intervals
                    .iter()
                    .filter(|interval| !interval.omitted)
                    .map(|interval| interval.bps)
                    .collect(),
                error: None,
            }
        }
        Err(error) => ThroughputIndicator {
            duration_s: 0.0,
            received_bytes: 0,
            mean_bps: 0.0,
            per_second_bps: Vec::new(),
            error: Some(error.to_string()),
        },
    }
}

/// Runs one bundle (blocking, for tens of seconds with throughput).
pub fn run_health(spec: &HealthSpec, ticket: Option<TestTicket>) -> HealthResult {
    let start_time = Utc::now();
    let (icmp, udp, tcp) = std::thread::scope(|scope| {
        let icmp: Vec<_> = spec
            .icmp_sizes
            .iter()
            .map(|&size| scope.spawn(move || rtt_part(spec, LatencyProtocol::Icmp, size)))
            .collect();
        let udp: Vec<_> = spec
            .udp_sizes
            .iter()
            .map(|&size| scope.spawn(move || rtt_part(spec, LatencyProtocol::Udp, size)))
            .collect();
        let tcp = spec.tcp.then(|| scope.spawn(|| tcp_part(spec)));
        let join = |handle: std::thread::ScopedJoinHandle<'_, _>| {
            handle.join().expect("a health part panicked")
        };
        (
            icmp.into_iter().map(join).collect(),
            udp.into_iter().map(join).collect(),
            tcp.map(|handle| handle.join().expect("the TCP part panicked")),
        )
    });
    let sandwich = spec.sandwich.then(|| sandwich_part(spec));
    let throughput = spec
        .throughput_duration_us
        .map(|duration_us| throughput_part(spec, duration_us, ticket));
    HealthResult {
        test: "health".to_string(),
        target: spec.target.clone(),
        start_time,
        end_time: Utc::now(),
        timeout_us: spec.timeout_us,
        icmp,
        udp,
        sandwich,
        tcp,
        throughput,
    }
}
