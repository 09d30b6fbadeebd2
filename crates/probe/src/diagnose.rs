//! The `diagnose` bundle: what a diagnosis needs of one segment, both ways.
//!
//! Order: idle round trips first (TWAMP-Light, so loss splits into forward and
//! reverse), then per direction a TCP transfer with round-trip probes running beside
//! it (the RTT under load, and whether loss rises with load: a half-duplex port's
//! signature), then small UDP datagrams at 1.5 × the TCP rate. A host that spends
//! CPU per packet (a software VPN router) carries far fewer bits in small packets
//! than in full ones; a bit-rate limit carries nearly the same. A part that fails
//! records why and the rest still run.

use std::time::Duration;

use chrono::Utc;
use vantage_model::diagnosis::{DiagnosticDirection, DiagnosticResult, DiagnosticSpec};
use vantage_model::latency::{
    LatencyProtocol, LatencySpec, LatencySummary, TransmitStamp, UdpMode,
};
use vantage_model::throughput::{Direction, ThroughputProtocol, ThroughputResult, ThroughputSpec};

/// Payload of the round-trip probes.
const PROBE_BYTES: u32 = 64;
/// The small-datagram part never sends slower than this.
const SMALL_UDP_MIN_RATE_BPS: f64 = 1e6;

fn probes(spec: &DiagnosticSpec, count: u32) -> LatencySpec {
    LatencySpec {
        target: spec.target.clone(),
        port: spec.port,
        protocol: LatencyProtocol::Udp,
        count: count.max(1),
        interval_us: spec.probe_interval_us,
        timeout_us: spec.probe_timeout_us,
        size_bytes: PROBE_BYTES,
        dscp: 0,
        allow_fragmentation: false,
        tx_timestamp: TransmitStamp::Kernel,
        udp_mode: UdpMode::TwampLight,
    }
}

fn round_trips(spec: &LatencySpec) -> Result<LatencySummary, String> {
    crate::latency::run_latency(spec, &mut |_| {})
        .map(|result| result.summary)
        .map_err(|error| error.to_string())
}

fn transfer(spec: &DiagnosticSpec, direction: Direction) -> ThroughputSpec {
    let mut transfer = ThroughputSpec::new(&spec.target, spec.port);
    transfer.direction = direction;
    transfer.ticket = spec.ticket.clone();
    transfer
}

/// TCP one way with probes beside it, from the end of the omitted start.
fn tcp_under_load(
    spec: &DiagnosticSpec,
    direction: Direction,
) -> (
    Result<ThroughputResult, String>,
    Result<LatencySummary, String>,
) {
    let mut tcp = transfer(spec, direction);
    tcp.duration_us = Some(spec.tcp_duration_us);
    tcp.omit_us = spec.tcp_omit_us;
    tcp.interval_us = (spec.tcp_duration_us / 4).max(100_000);
    let loaded_us = spec
        .tcp_duration_us
        .saturating_sub(spec.tcp_omit_us)
        .saturating_sub(spec.probe_timeout_us);
    let loaded = probes(spec, (loaded_us / spec.probe_interval_us.max(1)) as u32);
    std::thread::scope(|scope| {
        let probing = scope.spawn(|| {
            std::thread::sleep(Duration::from_micros(spec.tcp_omit_us));
            round_trips(&loaded)
        });
        let result = crate::throughput::client::run_native(&tcp).map_err(|e| e.to_string());
        let loaded = probing.join().expect("the probing thread panicked");
        (result, loaded)
    })
}

fn small_udp(spec: &DiagnosticSpec, direction: Direction, tcp_bps: Option<f64>) -> ThroughputSpec {
    let mut udp = transfer(spec, direction);
    udp.protocol = ThroughputProtocol::Udp;
    udp.duration_us = Some(spec.small_udp_duration_us);
    udp.interval_us = spec.small_udp_duration_us.max(100_000);
    udp.packet_size_bytes = Some(spec.small_udp_bytes);
    let max_bps = spec.small_udp_max_rate_bps as f64;
    let rate_bps = tcp_bps.map_or(max_bps, |bps| 1.5 * bps);
    udp.rate_bps = Some(rate_bps.clamp(SMALL_UDP_MIN_RATE_BPS, max_bps) as u64);
    udp
}

fn one_direction(spec: &DiagnosticSpec, direction: Direction) -> DiagnosticDirection {
    let mut checks = DiagnosticDirection::default();
    let (tcp, loaded) = tcp_under_load(spec, direction);
    match tcp {
        Ok(result) => checks.tcp = Some(result),
        Err(error) => checks.errors.push(format!("tcp: {error}")),
    }
    match loaded {
        Ok(summary) => checks.loaded = Some(summary),
        Err(error) => checks.errors.push(format!("probes under load: {error}")),
    }
    let tcp_bps = checks.tcp.as_ref().map(|tcp| tcp.summary.received_bps);
    let udp = small_udp(spec, direction, tcp_bps);
    match crate::throughput::client::run_native(&udp) {
        Ok(result) => checks.small_udp = Some(result),
        Err(error) => checks.errors.push(format!("small udp: {error}")),
    }
    checks
}

/// Runs the bundle (blocking: about 2 × (TCP + small UDP) plus the idle probes).
pub fn run_diagnostic(spec: &DiagnosticSpec) -> DiagnosticResult {
    let start_time = Utc::now();
    let (idle, idle_error) = match round_trips(&probes(spec, spec.probes)) {
        Ok(summary) => (Some(summary), None),
        Err(error) => (None, Some(error)),
    };
    let forward = one_direction(spec, Direction::Forward);
    let reverse = one_direction(spec, Direction::Reverse);
    DiagnosticResult {
        test: "diagnose".to_string(),
        spec: spec.clone(),
        start_time,
        end_time: Utc::now(),
        idle,
        idle_error,
        forward,
        reverse,
    }
}
