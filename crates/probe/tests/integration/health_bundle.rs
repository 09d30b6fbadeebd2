//! The health probe bundle (Chard et al., FGCS 2015) against an in-process endpoint
//! on loopback: every indicator answered; and towards a closed port, the UDP, TCP,
//! sandwich and throughput parts time out while ICMP (the host is up) still answers.

use crate::common;

use common::TestEndpoint;
use vantage_model::health::HealthSpec;
use vantage_probe::health::run_health;

fn spec(port: u16) -> HealthSpec {
    HealthSpec {
        target: "127.0.0.1".into(),
        port,
        icmp_sizes: vec![64, 512, 4096],
        udp_sizes: vec![64, 1024],
        sandwich: true,
        tcp: true,
        throughput_duration_us: Some(1_000_000),
        count: 5,
        interval_us: 20_000,
        timeout_us: 1_000_000,
    }
}

#[test]
fn every_indicator_answers_on_loopback() {
    // ICMP echo needs a ping socket or CAP_NET_RAW: the test suite runs as root.
    let endpoint = TestEndpoint::start(Some("127.0.0.1".parse().unwrap()), |_| {});
    let result = run_health(&spec(endpoint.addr.port()), None);
    assert_eq!(result.test, "health");
    let sizes: Vec<u32> = result.icmp.iter().map(|part| part.size_bytes).collect();
    assert_eq!(sizes, vec![64, 512, 4096]);
    for part in result.icmp.iter().chain(&result.udp) {
        assert_eq!(
            part.error, None,
            "{} B: needs root for ICMP",
            part.size_bytes
        );
        assert_eq!(
            (part.sent, part.rtt_us.len()),
            (5, 5),
            "{} B",
            part.size_bytes
        );
        assert!(part
            .rtt_us
            .iter()
            .all(|rtt| *rtt > 0.0 && *rtt < 1_000_000.0));
    }
    let sandwich = result.sandwich.as_ref().unwrap();
    assert_eq!(
        (sandwich.rounds, sandwich.delay_us.len()),
        (5, 5),
        "{sandwich:?}"
    );
    let tcp = result.tcp.as_ref().unwrap();
    assert_eq!(
        (tcp.sent, tcp.connect_us.len(), tcp.rtt_us.len()),
        (5, 5, 5),
        "{tcp:?}"
    );
    let throughput = result.throughput.as_ref().unwrap();
    assert_eq!(throughput.error, None);
    assert!(throughput.received_bytes > 0 && throughput.mean_bps > 0.0);
    // One sample per one-second interval of the one-second test.
    assert_eq!(throughput.per_second_bps.len(), 1, "{throughput:?}");
    let expected_bps = throughput.received_bytes as f64 * 8.0 / throughput.duration_s;
    assert!((throughput.mean_bps - expected_bps).abs() < 1e-6 * expected_bps);
    assert!(result.timed_out_indicators().is_empty());
}

#[test]
fn a_peer_without_its_endpoint_times_out_on_every_indicator_but_icmp() {
    // A port nobody listens on: bound and dropped.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let result = run_health(&spec(port), None);
    let timed_out = result.timed_out_indicators();
    assert_eq!(
        timed_out,
        vec!["udp", "sandwich", "tcp", "throughput"],
        "{result:#?}"
    );
    assert!(result.icmp.iter().all(|part| part.rtt_us.len() == 5));
}
