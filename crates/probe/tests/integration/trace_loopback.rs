//! `run_trace` over loopback: the destination answers at the first hop (loopback never
//! decrements the TTL). Raw-socket methods need root (CI runs as root); without it
//! those tests fail and say why.

use vantage_model::trace::{ReplyKind, TraceProtocol, TraceSpec, TraceStop};
use vantage_probe::trace::{run_trace, TraceError};

fn spec(target: &str, protocol: TraceProtocol) -> TraceSpec {
    TraceSpec {
        protocol,
        timeout_us: 2_000_000,
        max_ttl: 4,
        ..TraceSpec::new(target)
    }
}

fn assert_one_hop(target: &str, protocol: TraceProtocol, reply: ReplyKind) {
    let result =
        run_trace(&spec(target, protocol)).unwrap_or_else(|e| panic!("{target} {protocol:?}: {e}"));
    assert!(result.destination_reached, "{result:#?}");
    assert_eq!(result.stop_reason, TraceStop::DestinationReached);
    assert_eq!(result.hop_count, 1);
    assert_eq!(result.hops.len(), 1);
    let hop = &result.hops[0];
    assert_eq!(hop.ttl, 1);
    assert_eq!(hop.address.as_deref(), Some(target));
    assert_eq!(hop.addresses, vec![target.to_string()]);
    assert_eq!((hop.sent, hop.answered), (3, 3), "{hop:#?}");
    for probe in &hop.probes {
        assert_eq!(probe.reply, Some(reply), "{probe:?}");
        assert!(!probe.lost);
        assert!(probe.rtt_us.is_some_and(|rtt| rtt > 0.0));
    }
    assert!(hop.rtt_us.is_some());
    assert_eq!(result.target_addr, target);
}

/// The TCP tests run one after the other: each one's raw socket sees the other's segments
/// (nextest runs this binary in the `serial-network` group; this lock covers plain `cargo test`).
fn tcp_serial() -> std::sync::MutexGuard<'static, ()> {
    static TCP: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TCP.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn udp_loopback_is_one_hop_answered_by_port_unreachable() {
    assert_one_hop("127.0.0.1", TraceProtocol::Udp, ReplyKind::PortUnreachable);
}

#[test]
fn udp_loopback_ipv6() {
    assert_one_hop("::1", TraceProtocol::Udp, ReplyKind::PortUnreachable);
}

#[test]
fn icmp_loopback_is_one_hop_answered_by_echo_reply() {
    assert_one_hop("127.0.0.1", TraceProtocol::Icmp, ReplyKind::EchoReply);
}

#[test]
fn icmp_loopback_ipv6() {
    assert_one_hop("::1", TraceProtocol::Icmp, ReplyKind::EchoReply);
}

#[test]
fn tcp_loopback_closed_port_answers_reset() {
    let _tcp = tcp_serial();
    let mut spec = spec("127.0.0.1", TraceProtocol::Tcp);
    // A closed port: bound (without SO_REUSEADDR, so nobody else can take it while the
    // test runs) but not listening, so SYNs to it are answered with RST.
    let closed = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    closed
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    let port = closed.local_addr().unwrap().as_socket().unwrap().port();
    spec.port = Some(port);
    let result = run_trace(&spec).unwrap_or_else(|e| panic!("needs root (CAP_NET_RAW): {e}"));
    assert!(result.destination_reached, "{result:#?}");
    assert!(
        result.hops[0]
            .probes
            .iter()
            .all(|p| p.reply == Some(ReplyKind::Reset)),
        "{result:#?}"
    );
    assert_eq!(result.flow.destination_port, Some(port));
}

#[test]
fn tcp_loopback_open_port_answers_syn_ack() {
    let _tcp = tcp_serial();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut spec = spec("127.0.0.1", TraceProtocol::Tcp);
    spec.port = Some(listener.local_addr().unwrap().port());
    let result = run_trace(&spec).unwrap_or_else(|e| panic!("needs root (CAP_NET_RAW): {e}"));
    assert!(result.destination_reached, "{result:#?}");
    assert!(
        result.hops[0]
            .probes
            .iter()
            .all(|p| p.reply == Some(ReplyKind::SynAck)),
        "{result:#?}"
    );
}

#[test]
fn flow_identifier_is_kept() {
    let mut spec = spec("127.0.0.1", TraceProtocol::Udp);
    let free = std::net::UdpSocket::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    spec.flow_id = Some(free);
    let result = run_trace(&spec).unwrap();
    assert_eq!(result.flow.source_port, Some(free));
    assert_eq!(result.flow.destination_port, Some(33_434));
    let mut icmp = spec.clone();
    icmp.protocol = TraceProtocol::Icmp;
    icmp.flow_id = Some(0x5151);
    let result = run_trace(&icmp).unwrap();
    assert_eq!(result.flow.icmp_identifier, Some(0x5151));
    assert!(result.flow.icmp_checksum.is_some());
}

#[test]
fn bad_specs_are_refused_before_sending() {
    let mut spec = spec("127.0.0.1", TraceProtocol::Udp);
    spec.max_ttl = 65;
    let err = run_trace(&spec).unwrap_err();
    assert!(matches!(err, TraceError::InvalidSpec(_)));
    assert!(err.to_string().contains("max_ttl"), "{err}");
    let err = run_trace(&TraceSpec::new("no-such-host.invalid")).unwrap_err();
    assert!(matches!(err, TraceError::Resolve { .. }), "{err}");
}
