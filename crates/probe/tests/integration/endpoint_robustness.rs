//! Malformed, truncated, oversized and random input thrown at a live endpoint:
//! nothing panics, the counters count it, and a valid probe is still answered.

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{no_progress, spec, TestEndpoint};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use vantage_model::latency::LatencyProtocol;
use vantage_probe::endpoint::tcp::{
    encode_preamble, parse_header, Status, KIND_LATENCY_ECHO, PREAMBLE_LEN,
};
use vantage_probe::endpoint::EndpointCounters;
use vantage_probe::latency::run_latency;
use vantage_probe::throughput::server::MAX_CONNECTION_THREADS;
use vantage_probe::throughput::wire::{CONNECTION_CONTROL, KIND_THROUGHPUT};
use vantage_probe::twamp::{self, REFLECTOR_HEADER_LEN, SENDER_HEADER_LEN};

/// Waits (bounded) until `done` holds for the endpoint's counters.
fn wait_for(counters: &EndpointCounters, what: &str, done: impl Fn(&EndpointCounters) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done(counters) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {:?}",
            counters.snapshot()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Datagrams the reflector has dealt with, answered or not.
fn handled(counters: &EndpointCounters) -> u64 {
    [
        &counters.udp_truncated,
        &counters.udp_reflected,
        &counters.udp_oversized,
        &counters.udp_refused_short,
        &counters.udp_refused_reflected,
    ]
    .iter()
    .map(|counter| counter.load(Ordering::Relaxed))
    .sum()
}

fn assert_still_answers(endpoint: &TestEndpoint, ip: &str) {
    for protocol in [LatencyProtocol::Udp, LatencyProtocol::Tcp] {
        let result = run_latency(&spec(endpoint.at(ip), protocol, 2), &mut no_progress).unwrap();
        assert_eq!(result.summary.received, 2, "{protocol:?} after the flood");
    }
}

#[test]
fn random_datagrams_are_counted_and_reflector_keeps_answering() {
    // Unlimited rate: this test is about content, not volume.
    let endpoint = TestEndpoint::start(None, |c| c.udp_rate_limit_pps = 0);
    let socket = UdpSocket::bind("[::1]:0").unwrap();
    socket.connect(endpoint.at("::1")).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let (mut short, mut shorter_than_reply, mut valid) = (0u64, 0u64, 0u64);
    // Bounded: 2000 datagrams of 0..200 bytes, random content.
    for _ in 0..2000 {
        let len = rng.gen_range(0..200usize);
        let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        socket.send(&bytes).unwrap();
        if len < SENDER_HEADER_LEN {
            short += 1;
        } else if len < REFLECTOR_HEADER_LEN {
            shorter_than_reply += 1;
        } else {
            valid += 1;
        }
        // Every 100 datagrams let the reflector catch up, so its socket buffer never
        // overflows (the kernel would drop the excess before the endpoint sees it).
        let sent = short + shorter_than_reply + valid;
        if sent.is_multiple_of(100) {
            wait_for(&endpoint.counters, "a batch", |c| handled(c) == sent);
        }
    }
    // Over IPv6 a datagram can exceed the largest TWAMP packet (65507 B).
    socket.send(&vec![0u8; 65_527]).unwrap();
    wait_for(&endpoint.counters, "the flood", |c| {
        handled(c) > short + shorter_than_reply + valid
    });
    let stats = endpoint.counters.snapshot();
    assert_eq!(stats.udp_truncated, short);
    assert_eq!(
        stats.udp_refused_short, shorter_than_reply,
        "a request shorter than the 41-byte reply is not answered (no amplification)"
    );
    assert_eq!(
        stats.udp_reflected, valid,
        "any 41+ bytes of random content are a valid unauthenticated request"
    );
    assert_eq!(stats.udp_refused_reflected, 0);
    assert_eq!(stats.udp_oversized, 1);
    // Every reply parses as a reflector packet no shorter than its header.
    let mut buf = [0u8; 65_536];
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut replies = 0;
    while let Ok(n) = socket.recv(&mut buf) {
        let reply = twamp::parse_reflector(&buf[..n]).expect("reply parses");
        assert!(reply.len >= REFLECTOR_HEADER_LEN);
        assert!(n <= 200, "no reply is longer than the longest request");
        replies += 1;
    }
    assert!(replies > 0);
    assert_still_answers(&endpoint, "::1");
}

#[test]
fn sender_state_is_bounded_by_eviction() {
    let endpoint = TestEndpoint::start(Some("127.0.0.1".parse().unwrap()), |c| {
        c.max_udp_senders = 4
    });
    let request = [0u8; 64];
    let sockets: Vec<UdpSocket> = (0..10)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    for socket in &sockets {
        socket.send_to(&request, endpoint.addr).unwrap();
    }
    wait_for(&endpoint.counters, "10 replies", |c| {
        c.udp_reflected.load(Ordering::Relaxed) == 10
    });
    assert_eq!(endpoint.counters.snapshot().udp_senders_evicted, 6);
    // An evicted sender starts over at reflector sequence 0.
    let mut buf = [0u8; 128];
    sockets[0].recv(&mut buf).unwrap();
    sockets[0].send_to(&request, endpoint.addr).unwrap();
    let n = sockets[0].recv(&mut buf).unwrap();
    assert_eq!(twamp::parse_reflector(&buf[..n]).unwrap().seq, 0);
}

fn connect(endpoint: &TestEndpoint) -> TcpStream {
    let stream = TcpStream::connect(endpoint.at("127.0.0.1")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
}

/// Reads until the server closes; returns what it sent.
fn read_to_close(mut stream: TcpStream) -> Vec<u8> {
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

#[test]
fn tcp_service_counts_bad_preambles_kinds_and_frames() {
    let endpoint = TestEndpoint::start(None, |_| {});

    // Garbage preamble: closed without a word.
    let mut garbage = connect(&endpoint);
    garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    assert!(read_to_close(garbage).is_empty());

    // Truncated preamble, then close.
    let mut truncated = connect(&endpoint);
    truncated.write_all(b"VNT").unwrap();
    truncated.shutdown(Shutdown::Write).unwrap();
    assert!(read_to_close(truncated).is_empty());

    // Unknown kind: a status and a message naming it.
    let mut unknown = connect(&endpoint);
    unknown.write_all(&encode_preamble(b'?')).unwrap();
    let answer = read_to_close(unknown);
    let header: [u8; PREAMBLE_LEN] = answer[..PREAMBLE_LEN].try_into().unwrap();
    assert_eq!(
        parse_header(&header).map(|(_, s)| Status::from_byte(s)),
        Some(Some(Status::UnknownKind))
    );
    assert!(
        String::from_utf8_lossy(&answer[PREAMBLE_LEN + 4..]).contains("unknown service kind 0x3f")
    );

    // Wrong version.
    let mut version = connect(&endpoint);
    let mut preamble = encode_preamble(KIND_LATENCY_ECHO);
    preamble[4] = 9;
    version.write_all(&preamble).unwrap();
    let answer = read_to_close(version);
    assert_eq!(answer[5], Status::UnsupportedVersion as u8);

    // Oversized frame length.
    let mut oversized = connect(&endpoint);
    oversized
        .write_all(&encode_preamble(KIND_LATENCY_ECHO))
        .unwrap();
    oversized.write_all(&u32::MAX.to_be_bytes()).unwrap();
    assert_eq!(
        read_to_close(oversized),
        encode_preamble(Status::Ok as u8).to_vec()
    );

    // Frame cut off mid-body.
    let mut cut = connect(&endpoint);
    cut.write_all(&encode_preamble(KIND_LATENCY_ECHO)).unwrap();
    cut.write_all(&100u32.to_be_bytes()).unwrap();
    cut.write_all(&[1, 2, 3]).unwrap();
    cut.shutdown(Shutdown::Write).unwrap();
    read_to_close(cut);

    wait_for(&endpoint.counters, "all six connections", |c| {
        c.tcp_bad_preamble.load(Ordering::Relaxed) == 2
            && c.tcp_unknown_kind.load(Ordering::Relaxed) == 1
            && c.tcp_unsupported_version.load(Ordering::Relaxed) == 1
            && c.tcp_bad_frames.load(Ordering::Relaxed) == 2
    });
    assert_still_answers(&endpoint, "127.0.0.1");
}

/// A client that opens a throughput control connection and trickles its request a
/// byte at a time (each byte well within any per-read timeout) is cut off at the setup
/// deadline, and the service then runs a real test.
#[test]
fn a_trickling_throughput_client_is_cut_off_at_the_setup_deadline() {
    let endpoint = TestEndpoint::start(None, |_| {});
    let mut trickler = connect(&endpoint);
    trickler
        .write_all(&encode_preamble(KIND_THROUGHPUT))
        .unwrap();
    let mut status = [0u8; PREAMBLE_LEN];
    trickler.read_exact(&mut status).unwrap();
    assert_eq!(status[5], Status::Ok as u8);
    trickler.write_all(&[CONNECTION_CONTROL]).unwrap();
    trickler.write_all(&1_000u32.to_be_bytes()).unwrap();
    // 1 000 bytes at one per 100 ms would take 100 s; stop at the first failed write
    // (the server closed), or after 300 bytes (30 s) at most.
    let mut sent = 0;
    while sent < 300 {
        std::thread::sleep(Duration::from_millis(100));
        if trickler.write_all(b" ").is_err() {
            break;
        }
        sent += 1;
        let mut probe = [0u8; 1];
        trickler.set_nonblocking(true).unwrap();
        let closed = matches!(trickler.read(&mut probe), Ok(0));
        trickler.set_nonblocking(false).unwrap();
        if closed {
            break;
        }
    }
    assert!(
        sent < 300,
        "the endpoint still waited for the request after {sent} trickled bytes"
    );
    // The service is free: a real test runs.
    let mut spec =
        vantage_model::throughput::ThroughputSpec::new("127.0.0.1", endpoint_port(&endpoint));
    spec.duration_us = Some(500_000);
    let result = vantage_probe::throughput::client::run_native(&spec).unwrap();
    assert!(result.summary.received_bytes > 0, "{:?}", result.summary);
}

/// Throughput connections hold blocking threads; the service takes at most
/// `MAX_CONNECTION_THREADS` of them and answers the next connection `busy`.
#[test]
fn throughput_connections_beyond_the_thread_bound_are_refused_busy() {
    // All from one address: the per-source cap (also 160) is lifted to reach the bound.
    let endpoint = TestEndpoint::start(None, |config| {
        config.sources.connections_per_source = 0;
    });
    // Each held connection is released at the 5 s setup deadline; opening them all
    // must finish well before that for the bound to be observable. A machine too
    // loaded to open 161 loopback connections in 4 s retries (bounded).
    for attempt in 1..=3 {
        let started = Instant::now();
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTION_THREADS {
            let mut stream = connect(&endpoint);
            stream.write_all(&encode_preamble(KIND_THROUGHPUT)).unwrap();
            let mut status = [0u8; PREAMBLE_LEN];
            stream.read_exact(&mut status).unwrap();
            assert_eq!(status[5], Status::Ok as u8, "within the bound");
            held.push(stream);
        }
        let mut extra = connect(&endpoint);
        extra.write_all(&encode_preamble(KIND_THROUGHPUT)).unwrap();
        let mut status = [0u8; PREAMBLE_LEN];
        extra.read_exact(&mut status).unwrap();
        if started.elapsed() > Duration::from_secs(4) {
            eprintln!(
                "attempt {attempt}: opening took {:?}; retrying",
                started.elapsed()
            );
            continue;
        }
        assert_eq!(status[5], Status::Busy as u8, "beyond the bound");
        wait_for(&endpoint.counters, "the busy refusal", |c| {
            c.tcp_rejected_busy.load(Ordering::Relaxed) >= 1
        });
        drop(held);
        // Once they are gone, throughput connections are served again.
        let mut again = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut stream = connect(&endpoint);
            stream.write_all(&encode_preamble(KIND_THROUGHPUT)).unwrap();
            stream.read_exact(&mut status).unwrap();
            if status[5] == Status::Ok as u8 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "still busy after the connections closed"
            );
            again.push(stream);
            std::thread::sleep(Duration::from_millis(50));
        }
        return;
    }
    panic!("could not open {MAX_CONNECTION_THREADS} connections within 4 s in 3 attempts");
}

fn endpoint_port(endpoint: &TestEndpoint) -> u16 {
    endpoint
        .at("127.0.0.1")
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Whether the endpoint closed `stream` without a word (read returns end of stream
/// or a reset) rather than answering its preamble.
fn closed_unanswered(mut stream: TcpStream) -> bool {
    let _ = stream.write_all(&encode_preamble(KIND_THROUGHPUT));
    let mut status = [0u8; PREAMBLE_LEN];
    matches!(stream.read(&mut status), Ok(0) | Err(_))
}

/// `--allow`, the per-source connection cap, the hourly test-time quota and the
/// interval-sample cap, each tried against a running endpoint.
#[test]
fn source_limits_refuse_outsiders_and_spent_quotas() {
    // Allow-list: only 127.0.0.2 is served, over UDP and TCP.
    let endpoint = TestEndpoint::start(Some("0.0.0.0".parse().unwrap()), |config| {
        config.sources.allow = vec!["127.0.0.2/32".parse().unwrap()];
    });
    let target = endpoint.at("127.0.0.1");
    let outsider = UdpSocket::bind("127.0.0.1:0").unwrap();
    outsider.send_to(&[0u8; 64], &target).unwrap();
    wait_for(&endpoint.counters, "the outsider's datagram", |c| {
        c.udp_refused_not_allowed.load(Ordering::Relaxed) == 1
    });
    let insider = UdpSocket::bind("127.0.0.2:0").unwrap();
    insider
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    insider.send_to(&[0u8; 64], &target).unwrap();
    let mut reply = [0u8; 128];
    assert!(insider.recv(&mut reply).unwrap() >= REFLECTOR_HEADER_LEN);
    assert!(
        closed_unanswered(connect(&endpoint)),
        "127.0.0.1 was served"
    );
    wait_for(&endpoint.counters, "the outsider's connection", |c| {
        c.tcp_refused_source.load(Ordering::Relaxed) == 1
    });
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(
            &"127.0.0.2:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    socket
        .connect(&target.parse::<std::net::SocketAddr>().unwrap().into())
        .unwrap();
    let mut allowed: TcpStream = socket.into();
    allowed
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    allowed
        .write_all(&encode_preamble(KIND_THROUGHPUT))
        .unwrap();
    let mut status = [0u8; PREAMBLE_LEN];
    allowed.read_exact(&mut status).unwrap();
    assert_eq!(status[5], Status::Ok as u8, "127.0.0.2 is served");
    drop(endpoint);

    // Test time per hour: 3 s; a 2 s test runs, the next is refused with the wait.
    let endpoint = TestEndpoint::start(None, |config| {
        config.sources.test_time_per_hour = Some(Duration::from_secs(3));
    });
    let mut spec =
        vantage_model::throughput::ThroughputSpec::new("127.0.0.1", endpoint_port(&endpoint));
    spec.duration_us = Some(2_000_000);
    let first = vantage_probe::throughput::client::run_native(&spec).unwrap();
    assert!(first.summary.received_bytes > 0);
    let refused = vantage_probe::throughput::client::run_native(&spec)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("has used 2 s of its 3 s of test time per hour; retry in"),
        "{refused}"
    );
    drop(endpoint);

    // Connections per source: three held (silent), the fourth closed unanswered.
    let endpoint = TestEndpoint::start(None, |config| {
        config.sources.connections_per_source = 3;
    });
    let held: Vec<_> = (0..3).map(|_| connect(&endpoint)).collect();
    assert!(
        closed_unanswered(connect(&endpoint)),
        "a fourth connection was served"
    );
    assert_eq!(
        endpoint.counters.tcp_refused_source.load(Ordering::Relaxed),
        1
    );
    drop(held);
    drop(endpoint);

    // Interval samples: 128 streams every 10 ms for 60 s would be 768 000.
    let endpoint = TestEndpoint::start(None, |_| {});
    let mut spec =
        vantage_model::throughput::ThroughputSpec::new("127.0.0.1", endpoint_port(&endpoint));
    spec.duration_us = Some(60_000_000);
    spec.streams = 128;
    spec.interval_us = 10_000;
    let refused = vantage_probe::throughput::client::run_native(&spec)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("768000 interval samples, more than this endpoint keeps (200000)"),
        "{refused}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Arbitrary bytes on a fresh TCP connection never take the service down.
    #[test]
    fn arbitrary_tcp_streams_never_break_the_service(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        thread_local! {
            static ENDPOINT: TestEndpoint = TestEndpoint::start(Some("127.0.0.1".parse().unwrap()), |_| {});
        }
        ENDPOINT.with(|endpoint| {
            let mut stream = connect(endpoint);
            let _ = stream.write_all(&bytes);
            let _ = stream.shutdown(Shutdown::Write);
            read_to_close(stream);
            let result = run_latency(&spec(endpoint.at("127.0.0.1"), LatencyProtocol::Tcp, 1), &mut no_progress).unwrap();
            prop_assert_eq!(result.summary.received, 1);
            Ok(())
        })?;
    }
}
