//! The reflector tried as an attacker would on loopback: one spoofed datagram between
//! two reflectors (the "loop DoS" of UDP services), requests from reflector ports,
//! a flood from one source, and broadcast-addressed requests. Spoofing needs a raw
//! socket, so these tests need root (CAP_NET_RAW) and fail saying so without it.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use common::TestEndpoint;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use vantage_probe::endpoint::{EndpointCounters, EndpointStats};

/// How long the tests watch for a loop that should not happen. A running loop on
/// loopback makes tens of thousands of exchanges a second, so any loop shows at once.
const OBSERVE: Duration = Duration::from_millis(500);

/// Sends one UDP datagram with a forged source through a raw IPv4 socket.
fn send_spoofed(source: SocketAddrV4, destination: SocketAddrV4, payload: &[u8]) {
    let socket = Socket::new(
        Domain::IPV4,
        Type::RAW,
        Some(Protocol::from(libc::IPPROTO_RAW)),
    )
    .unwrap_or_else(|error| {
        panic!("a raw socket (root / CAP_NET_RAW) is needed to forge a source address: {error}")
    });
    socket.set_broadcast(true).expect("SO_BROADCAST");
    let udp_len = 8 + payload.len();
    let mut packet = Vec::with_capacity(20 + udp_len);
    // IPv4 header; Linux fills in the checksum and total length of IP_HDRINCL packets.
    packet.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    packet.extend_from_slice(&source.ip().octets());
    packet.extend_from_slice(&destination.ip().octets());
    packet.extend_from_slice(&source.port().to_be_bytes());
    packet.extend_from_slice(&destination.port().to_be_bytes());
    packet.extend_from_slice(&(udp_len as u16).to_be_bytes());
    packet.extend_from_slice(&[0, 0]); // no UDP checksum (allowed over IPv4)
    packet.extend_from_slice(payload);
    let target = SockAddr::from(std::net::SocketAddr::V4(SocketAddrV4::new(
        *destination.ip(),
        0,
    )));
    socket
        .send_to(&packet, &target)
        .expect("spoofed datagram sent");
}

fn v4(endpoint: &TestEndpoint) -> SocketAddrV4 {
    match endpoint.addr {
        std::net::SocketAddr::V4(addr) => addr,
        other => panic!("expected an IPv4 endpoint, got {other}"),
    }
}

/// Datagrams the reflector has dealt with: answered or refused.
fn handled(stats: &EndpointStats) -> u64 {
    stats.udp_reflected
        + stats.udp_refused_port
        + stats.udp_refused_not_unicast
        + stats.udp_refused_short
        + stats.udp_refused_reflected
        + stats.udp_rate_limited
}

fn wait_handled(counters: &EndpointCounters, at_least: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while handled(&counters.snapshot()) < at_least {
        assert!(
            Instant::now() < deadline,
            "the reflector never saw the datagram: {:?}",
            counters.snapshot()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn endpoint_on(address: &str, port: u16) -> TestEndpoint {
    TestEndpoint::start(Some(address.parse().unwrap()), |config| config.port = port)
}

#[test]
fn a_spoofed_datagram_between_two_reflectors_on_one_port_is_not_answered() {
    let a = endpoint_on("127.0.0.1", 0);
    let b = endpoint_on("127.0.0.2", a.addr.port());
    // The attacker forges B as the source of a request to A: A's reply would go to B,
    // B's reply back to A, and so on forever.
    send_spoofed(v4(&b), v4(&a), &[0u8; 64]);
    wait_handled(&a.counters, 1);
    std::thread::sleep(OBSERVE);
    let (a, b) = (a.counters.snapshot(), b.counters.snapshot());
    assert_eq!(
        a.udp_refused_port, 1,
        "A refuses a request from its own port: {a:?}"
    );
    assert_eq!(
        a.udp_reflected + b.udp_reflected,
        0,
        "no reply at all: {a:?} {b:?}"
    );
}

#[test]
fn a_loop_between_reflectors_on_different_ports_ends_after_one_reply() {
    let a = endpoint_on("127.0.0.1", 0);
    let b = endpoint_on("127.0.0.2", 0);
    send_spoofed(v4(&b), v4(&a), &[0u8; 64]);
    wait_handled(&b.counters, 1);
    std::thread::sleep(OBSERVE);
    let (a, b) = (a.counters.snapshot(), b.counters.snapshot());
    // A answers the forged request (it cannot know), B recognises A's reply as a
    // reflector's reply and drops it: the loop ends after a single packet.
    assert_eq!(a.udp_reflected, 1, "{a:?}");
    assert_eq!(b.udp_refused_reflected, 1, "{b:?}");
    assert_eq!(b.udp_reflected, 0, "{b:?}");
    assert_eq!(handled(&a) + handled(&b), 2, "{a:?} {b:?}");
}

#[test]
fn requests_from_reflector_and_privileged_ports_are_not_answered() {
    let a = endpoint_on("127.0.0.1", 0);
    let ports = [7u16, 123, 862, 7862];
    for (index, port) in ports.iter().enumerate() {
        let source = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 3), *port);
        send_spoofed(source, v4(&a), &[0u8; 64]);
        wait_handled(&a.counters, index as u64 + 1);
    }
    let stats = a.counters.snapshot();
    assert_eq!(stats.udp_refused_port, ports.len() as u64, "{stats:?}");
    assert_eq!(stats.udp_reflected, 0);
}

#[test]
fn broadcast_addressed_requests_are_not_answered() {
    // Bound to the wildcard address, as the agent's endpoint is, so the kernel hands
    // it datagrams sent to the limited broadcast address.
    let a = TestEndpoint::start(Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), |_| {});
    let port = a.addr.port();
    send_spoofed(
        SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 3), 40_000),
        SocketAddrV4::new(Ipv4Addr::BROADCAST, port),
        &[0u8; 64],
    );
    wait_handled(&a.counters, 1);
    std::thread::sleep(OBSERVE);
    let stats = a.counters.snapshot();
    assert_eq!(stats.udp_refused_not_unicast, 1, "{stats:?}");
    assert_eq!(stats.udp_reflected, 0, "{stats:?}");
}

#[test]
fn a_flood_from_one_source_is_answered_at_the_rate_limit_only() {
    let a = TestEndpoint::start(Some("127.0.0.1".parse().unwrap()), |config| {
        config.udp_rate_limit_pps = 1_000
    });
    let flooder = UdpSocket::bind("127.0.0.1:0").unwrap();
    let other = UdpSocket::bind("127.0.0.5:0").unwrap();
    // 2 000 requests as fast as the socket takes them (bounded), in batches the
    // reflector drains, then one request from another source.
    let started = Instant::now();
    for batch in 0..20u64 {
        for _ in 0..100 {
            flooder.send_to(&[0u8; 64], a.addr).unwrap();
        }
        wait_handled(&a.counters, (batch + 1) * 100);
    }
    let elapsed = started.elapsed();
    other.send_to(&[0u8; 64], a.addr).unwrap();
    wait_handled(&a.counters, 2_001);
    let stats = a.counters.snapshot();
    // A burst of a tenth of a second (100) plus the refill over the flood's duration.
    let allowed = 100 + (elapsed.as_secs_f64() * 1_000.0).ceil() as u64 + 1;
    assert!(
        stats.udp_reflected <= allowed,
        "{} answered in {elapsed:?}, at most {allowed} allowed: {stats:?}",
        stats.udp_reflected
    );
    assert!(stats.udp_rate_limited >= 2_000 + 1 - allowed, "{stats:?}");
    assert!(
        stats.udp_reflected >= 101,
        "the other source is still answered: {stats:?}"
    );
    let mut buf = [0u8; 128];
    other
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(
        other.recv(&mut buf).is_ok(),
        "the other source got its reply"
    );
}
