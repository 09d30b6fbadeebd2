//! Native throughput client against the throughput service, on loopback.

use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use vantage_model::throughput::{Direction, LimitedBy, ThroughputProtocol, ThroughputSpec};
use vantage_probe::throughput::client::{run_native, ThroughputError};
use vantage_probe::throughput::server::{ServiceLimits, ThroughputService};

/// A throughput service on an ephemeral loopback port, stopped on drop.
struct Service {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Service {
    fn start(limits: ServiceLimits) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let service = ThroughputService::new(limits);
        let thread_stop = Arc::clone(&stop);
        std::thread::spawn(move || service.serve_blocking(listener, thread_stop));
        Self { port, stop }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn spec(port: u16) -> ThroughputSpec {
    let mut spec = ThroughputSpec::new("127.0.0.1", port);
    spec.duration_us = Some(1_500_000);
    spec.interval_us = 500_000;
    spec
}

#[test]
fn tcp_forward_two_streams_reports_intervals_tcp_info_and_verdict() {
    let service = Service::start(ServiceLimits::default());
    let mut spec = spec(service.port);
    spec.streams = 2;
    let result = run_native(&spec).unwrap();
    let summary = &result.summary;
    assert_eq!(summary.direction, Direction::Forward);
    assert!(summary.received_bytes > 1_000_000, "{summary:?}");
    // What was sent is what arrived (TCP, whole run counted on both sides).
    assert_eq!(summary.sent_bytes, summary.received_bytes);
    assert!(summary.retransmits.is_some());
    assert!(summary.tcp.unwrap().rtt_us > 0.0);
    assert!(result.intervals.len() >= 3, "{:?}", result.intervals);
    let first = &result.intervals[0];
    assert_eq!(first.streams.len(), 2);
    assert!(
        first.streams[0].tcp.is_some(),
        "sender TCP_INFO missing: {first:?}"
    );
    assert!(result.host.cpu_ratio.sender.unwrap() > 0.0);
    assert!(result.host.max_thread_cpu_ratio.receiver.unwrap() > 0.0);
    assert_ne!(result.limited_by, LimitedBy::RateCap);
    assert!(!result.evidence.reason.is_empty());
    let json = serde_json::to_value(&result).unwrap();
    assert!(json["summary"]["sent_bps"].as_f64().unwrap() > 0.0);
    assert!(json["intervals"][0]["bps"].as_f64().unwrap() > 0.0);
    assert!(json["host"]["cpu_ratio"]["sender"].as_f64().is_some());
}

#[test]
fn tcp_reverse_and_bidir_measure_each_direction() {
    let service = Service::start(ServiceLimits::default());
    let mut spec = spec(service.port);
    spec.direction = Direction::Reverse;
    let reverse = run_native(&spec).unwrap();
    assert_eq!(reverse.summary.direction, Direction::Reverse);
    assert!(reverse.summary.received_bytes > 1_000_000);
    assert!(
        reverse.intervals[0].streams[0].tcp.is_some(),
        "server's TCP_INFO should come back"
    );

    spec.direction = Direction::Bidir;
    let bidir = run_native(&spec).unwrap();
    let back = bidir.reverse_summary.expect("bidir has a reverse summary");
    assert!(bidir.summary.received_bytes > 1_000_000 && back.received_bytes > 1_000_000);
    assert_eq!(bidir.streams.len(), 2);
}

#[test]
fn udp_at_a_rate_is_paced_and_accounted_at_the_receiver() {
    let service = Service::start(ServiceLimits::default());
    let mut spec = spec(service.port);
    spec.protocol = ThroughputProtocol::Udp;
    spec.rate_bps = Some(20_000_000);
    spec.packet_size_bytes = Some(1200);
    let result = run_native(&spec).unwrap();
    let udp = result.summary.udp.unwrap();
    // 20 Mbit/s of 1200 B for 1.5 s = 3125 datagrams (pacing is against the clock).
    assert!((3000..=3200).contains(&udp.sent_packets), "{udp:?}");
    assert_eq!(udp.received_packets + udp.lost_packets, udp.sent_packets);
    assert!(udp.jitter_us.is_some());
    assert!(result.intervals[0].streams[0].udp.is_some());
    let sent_error = (result.summary.sent_bps - 20e6).abs() / 20e6;
    assert!(sent_error < 0.05, "sent {} bit/s", result.summary.sent_bps);

    spec.direction = Direction::Reverse;
    let reverse = run_native(&spec).unwrap();
    assert!(
        reverse.summary.udp.unwrap().received_packets > 2500,
        "{:?}",
        reverse.summary
    );
}

#[test]
fn second_client_is_told_busy_with_retry_after_and_caps_are_enforced() {
    let limits = ServiceLimits {
        max_duration: std::time::Duration::from_secs(5),
        max_rate_bps: Some(50_000_000),
    };
    let service = Service::start(limits);
    // Long enough to outlast the second client's patience for a finishing test.
    let mut first_spec = spec(service.port);
    first_spec.duration_us = Some(4_000_000);
    let first = std::thread::spawn(move || run_native(&first_spec));
    std::thread::sleep(std::time::Duration::from_millis(400));
    match run_native(&spec(service.port)) {
        Err(ThroughputError::Busy {
            retry_after_s,
            reason,
        }) => {
            assert!(retry_after_s >= 1, "{reason}");
            assert!(reason.contains("retry after"), "{reason}");
        }
        other => panic!("expected busy, got {other:?}"),
    }
    first.join().unwrap().unwrap();

    let mut too_long = spec(service.port);
    too_long.duration_us = Some(60_000_000);
    let err = run_native(&too_long).unwrap_err();
    assert!(err.to_string().contains("limit of 5 s"), "{err}");

    let mut too_fast = spec(service.port);
    too_fast.protocol = ThroughputProtocol::Udp;
    too_fast.rate_bps = Some(100_000_000);
    assert!(run_native(&too_fast)
        .unwrap_err()
        .to_string()
        .contains("exceeds"));

    // TCP under the endpoint's 50 Mbit/s cap: paced, and the verdict says so.
    let capped = run_native(&spec(service.port)).unwrap();
    assert!(capped.summary.received_bps < 60e6, "{:?}", capped.summary);
    assert_eq!(
        capped.limited_by,
        LimitedBy::RateCap,
        "{:?}",
        capped.evidence
    );
}

#[test]
fn refused_connection_is_an_error_not_a_panic() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = run_native(&spec(port)).unwrap_err();
    assert!(err.to_string().contains("cannot connect"), "{err}");
}
