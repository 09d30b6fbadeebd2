//! Latency engines against an in-process endpoint on loopback (IPv4 and IPv6).

use crate::common;

use std::net::UdpSocket;

use common::{no_progress, spec, TestEndpoint};
use vantage_model::latency::{
    LatencyProtocol, ProbeStatus, SandwichSpec, TimestampSource, TransmitStamp,
};
use vantage_probe::endpoint::FaultInjection;
use vantage_probe::latency::{run_latency, LatencyError};
use vantage_probe::sandwich::run_sandwich;

#[test]
fn udp_probes_all_return_over_ipv4_and_ipv6_with_kernel_stamps() {
    // Dual-stack endpoint: one socket answers both families.
    let endpoint = TestEndpoint::start(None, |_| {});
    for ip in ["127.0.0.1", "::1"] {
        let result = run_latency(
            &spec(endpoint.at(ip), LatencyProtocol::Udp, 20),
            &mut no_progress,
        )
        .unwrap_or_else(|e| panic!("{ip}: {e}"));
        let s = &result.summary;
        assert_eq!((s.sent, s.received, s.lost), (20, 20, 0), "{ip}");
        assert_eq!(
            (s.forward_lost, s.reverse_lost, s.unknown_direction_lost),
            (0, 0, 0)
        );
        let rtt = s.rtt_us.expect("rtt distribution");
        assert!(rtt.min > 0.0 && rtt.min <= rtt.median && rtt.median <= rtt.max);
        assert!(s.jitter_us.is_some() && s.ipdv_us.is_some());
        assert_eq!(
            result.timestamping.transmit,
            TimestampSource::Kernel,
            "{ip}"
        );
        assert_eq!(result.timestamping.receive, TimestampSource::Kernel, "{ip}");
        // Reflector numbers: the opening bracket probe took 0.
        let reflector: Vec<u32> = result
            .samples
            .iter()
            .map(|p| p.reflector_seq.unwrap())
            .collect();
        assert_eq!(reflector, (1..=20).collect::<Vec<u32>>());
        let one_way = s.one_way.as_ref().expect("one-way block");
        assert_eq!(one_way.valid, one_way.forward_delay_us.is_some());
        if !one_way.valid {
            assert!(one_way.reason.is_some());
            assert!(result.samples.iter().all(|p| p.forward_us.is_none()));
        }
    }
    assert!(endpoint.stop().udp_reflected >= 44);
}

#[test]
fn user_transmit_stamps_are_used_and_reported_when_asked() {
    let endpoint = TestEndpoint::start(Some("127.0.0.1".parse().unwrap()), |_| {});
    for protocol in [LatencyProtocol::Udp, LatencyProtocol::Icmp] {
        let mut asked = spec(endpoint.at("127.0.0.1"), protocol, 10);
        asked.tx_timestamp = TransmitStamp::User;
        // ICMP needs ping sockets or root; without them this fails with the reason.
        let result =
            run_latency(&asked, &mut no_progress).unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        assert_eq!(result.summary.received, 10, "{protocol:?}");
        assert_eq!(
            result.timestamping.transmit,
            TimestampSource::User,
            "{protocol:?}"
        );
        assert_eq!(result.spec.tx_timestamp, TransmitStamp::User);
    }
    endpoint.stop();
}

#[test]
fn every_fifth_request_dropped_is_exact_forward_loss() {
    let endpoint = TestEndpoint::start(Some("127.0.0.1".parse().unwrap()), |c| {
        c.fault_injection = Some(FaultInjection::DropEveryKthRequest(5))
    });
    let mut probe_spec = spec(endpoint.at("127.0.0.1"), LatencyProtocol::Udp, 20);
    probe_spec.timeout_us = 300_000;
    let s = run_latency(&probe_spec, &mut no_progress).unwrap().summary;
    // The reflector sees 22 requests (opening bracket, 20 probes, closing bracket);
    // requests 5, 10, 15, 20 are probes 3, 8, 13, 18 (0-based).
    assert_eq!(
        (
            s.received,
            s.forward_lost,
            s.reverse_lost,
            s.unknown_direction_lost
        ),
        (16, 4, 0, 0)
    );
    assert_eq!(s.forward_loss_ratio, 0.2);
}

#[test]
fn every_fifth_reply_dropped_is_exact_reverse_loss() {
    let endpoint = TestEndpoint::start(Some("::1".parse().unwrap()), |c| {
        c.fault_injection = Some(FaultInjection::DropEveryKthReply(5))
    });
    let mut probe_spec = spec(endpoint.at("::1"), LatencyProtocol::Udp, 20);
    probe_spec.timeout_us = 300_000;
    let result = run_latency(&probe_spec, &mut no_progress).unwrap();
    let s = &result.summary;
    assert_eq!(
        (
            s.received,
            s.forward_lost,
            s.reverse_lost,
            s.unknown_direction_lost
        ),
        (16, 0, 4, 0)
    );
    let reverse: Vec<u32> = result
        .samples
        .iter()
        .filter(|p| p.status == ProbeStatus::ReverseLost)
        .map(|p| p.seq)
        .collect();
    assert_eq!(reverse, vec![3, 8, 13, 18]);
    assert_eq!(endpoint.stop().udp_fault_dropped, 4);
}

#[test]
fn tcp_mode_measures_connect_and_echo_rtt() {
    let endpoint = TestEndpoint::start(None, |_| {});
    for ip in ["127.0.0.1", "::1"] {
        let result = run_latency(
            &spec(endpoint.at(ip), LatencyProtocol::Tcp, 5),
            &mut no_progress,
        )
        .unwrap();
        let s = &result.summary;
        assert_eq!((s.sent, s.received), (5, 5), "{ip}");
        assert!(s.connect_us.unwrap().min > 0.0);
        assert!(s.rtt_us.unwrap().min > 0.0);
        assert!(result.samples.iter().all(|p| p.connect_us.is_some()));
    }
    let stats = endpoint.stop();
    assert_eq!(stats.tcp_echoed_frames, 10);
    assert_eq!(stats.tcp_bad_preamble, 0);
}

#[test]
fn icmp_mode_pings_loopback_both_families() {
    // Runs as root in CI (raw socket); an unprivileged user needs ping_group_range.
    for ip in ["127.0.0.1", "::1"] {
        let result = run_latency(
            &spec(ip.to_string(), LatencyProtocol::Icmp, 5),
            &mut no_progress,
        )
        .unwrap_or_else(|e| panic!("ICMP to {ip} failed: {e}"));
        assert_eq!(
            (result.summary.sent, result.summary.received),
            (5, 5),
            "{ip}"
        );
        assert!(result.summary.rtt_us.unwrap().min > 0.0);
        assert_eq!(result.summary.forward_lost + result.summary.reverse_lost, 0);
    }
}

#[test]
fn closed_udp_port_is_refused_not_a_result() {
    let closed_port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut probe_spec = spec(format!("127.0.0.1:{closed_port}"), LatencyProtocol::Udp, 3);
    probe_spec.timeout_us = 500_000;
    match run_latency(&probe_spec, &mut no_progress) {
        Err(LatencyError::Refused { .. }) => {}
        other => panic!("expected refused, got {other:?}"),
    }
}

#[test]
fn silent_target_is_a_completed_run_with_full_loss() {
    // A bound socket that never answers: no ICMP error, just silence.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut probe_spec = spec(
        silent.local_addr().unwrap().to_string(),
        LatencyProtocol::Udp,
        3,
    );
    probe_spec.timeout_us = 200_000;
    let s = run_latency(&probe_spec, &mut no_progress).unwrap().summary;
    assert_eq!((s.sent, s.received, s.loss_ratio), (3, 0, 1.0));
    assert_eq!(s.unknown_direction_lost, 3);
    assert!(s.rtt_us.is_none() && s.jitter_us.is_none());
}

#[test]
fn udp_size_below_twamp_header_is_refused() {
    let mut probe_spec = spec("127.0.0.1:9".into(), LatencyProtocol::Udp, 1);
    probe_spec.size_bytes = 13;
    let err = run_latency(&probe_spec, &mut no_progress).unwrap_err();
    assert!(err.to_string().contains("--size 13"), "{err}");
}

#[test]
fn sandwich_rounds_complete_against_the_endpoint() {
    let endpoint = TestEndpoint::start(None, |_| {});
    for ip in ["127.0.0.1", "::1"] {
        let spec = SandwichSpec {
            target: endpoint.at(ip),
            port: 0,
            count: 5,
            gap_us: 1_000,
            interval_us: 20_000,
            timeout_us: 1_000_000,
            small_size_bytes: 64,
            large_size_bytes: None,
            dscp: 0,
            allow_fragmentation: false,
        };
        let result = run_sandwich(&spec, &mut no_progress).unwrap_or_else(|e| panic!("{ip}: {e}"));
        let s = &result.summary;
        assert_eq!(
            (s.rounds, s.completed_rounds, s.lost_rounds),
            (5, 5, 0),
            "{ip}"
        );
        // Loopback MTU 65536: the large packet is capped at the largest UDP payload.
        assert!(s.large_size_bytes > 60_000, "large {}", s.large_size_bytes);
        assert!(s.queuing_delay_us.is_some());
        for round in &result.rounds {
            let (d, d_prime, delay) = (
                round.sent_gap_us.unwrap(),
                round.arrival_gap_us.unwrap(),
                round.queuing_delay_us.unwrap(),
            );
            assert!(d > 0.0 && d_prime > 0.0);
            assert!((d_prime - d - delay).abs() < 1e-6);
        }
    }
}

#[test]
fn dscp_out_of_range_is_refused() {
    let mut probe_spec = spec("127.0.0.1:9".into(), LatencyProtocol::Udp, 1);
    probe_spec.dscp = 64;
    assert!(run_latency(&probe_spec, &mut no_progress)
        .unwrap_err()
        .to_string()
        .contains("dscp"));
}
