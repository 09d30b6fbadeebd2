//! iperf3 interoperability on loopback: vantage's iperf3 client against Debian's
//! `iperf3 -s`, and Debian's `iperf3 -c` against vantage's iperf3 listener.
//! Rate comparisons on a shaped path are in `throughput_netns.rs`.

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use vantage_model::throughput::{Direction, ThroughputProtocol, ThroughputSpec, ThroughputTool};
use vantage_probe::iperf3::client::run_iperf3;
use vantage_probe::iperf3::server::Iperf3Server;
use vantage_probe::throughput::client::ThroughputError;
use vantage_probe::throughput::server::{ServiceLimits, ThroughputService};

/// Kills the child on drop, even when an assertion fails.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `iperf3 -s` and waits until it accepts connections.
fn iperf3_server(port: u16) -> Reaped {
    let child = Command::new("iperf3")
        .args(["-s", "-B", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 must be installed (Debian package iperf3)");
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "iperf3 -s did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The probe connection above counts as a client for `-1` in some versions; give
    // the server a moment to go back to listening.
    std::thread::sleep(Duration::from_millis(200));
    Reaped(child)
}

fn iperf3_spec(port: u16) -> ThroughputSpec {
    let mut spec = ThroughputSpec::new("127.0.0.1", port);
    spec.tool = ThroughputTool::Iperf3;
    spec.duration_us = Some(1_000_000);
    spec.interval_us = 250_000;
    spec
}

#[test]
fn vantage_client_against_iperf3_server_tcp_udp_parallel_reverse() {
    use Direction::{Forward, Reverse};
    use ThroughputProtocol::{Tcp, Udp};
    let cases = [
        ("tcp", Tcp, Forward, 1),
        ("tcp -P 2 -R", Tcp, Reverse, 2),
        ("udp 50M", Udp, Forward, 1),
        ("udp 50M -R -P 2", Udp, Reverse, 2),
    ];
    for (name, protocol, direction, streams) in cases {
        let port = free_port();
        let _server = iperf3_server(port);
        let mut spec = iperf3_spec(port);
        spec.protocol = protocol;
        spec.direction = direction;
        spec.streams = streams;
        if protocol == Udp {
            spec.rate_bps = Some(50_000_000);
        }
        let result = run_iperf3(&spec).unwrap_or_else(|e| panic!("{name}: {e}"));
        let summary = &result.summary;
        assert!(summary.received_bytes > 0, "{name}: {summary:?}");
        assert_eq!(result.streams.len(), spec.streams as usize, "{name}");
        if let Some(udp) = summary.udp {
            // 50 Mbit/s for 1 s, loopback: nearly everything arrives.
            assert!(udp.sent_packets > 3000, "{name}: {udp:?}");
            assert!(udp.loss_ratio < 0.05, "{name}: {udp:?}");
            let error = (summary.received_bps - 50e6).abs() / 50e6;
            assert!(
                error < 0.1,
                "{name}: received {} bit/s",
                summary.received_bps
            );
        } else {
            assert!(
                summary.retransmits.is_some(),
                "{name}: the sender's retransmits are reported"
            );
        }
    }
}

/// vantage's iperf3 listener on an ephemeral port, stopped on drop.
struct Listener {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Listener {
    fn start(limits: ServiceLimits) -> Self {
        let service = ThroughputService::new(limits);
        let server = Iperf3Server::bind(IpAddr::V4(Ipv4Addr::LOCALHOST), 0, service).unwrap();
        let port = server.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        std::thread::spawn(move || server.serve(thread_stop));
        Self { port, stop }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// How long one stock `iperf3 -c` may take before the test kills it and fails.
const CLIENT_LIMIT: Duration = Duration::from_secs(60);

/// Runs `iperf3 -c` with `args` (no `-t`: count tests must not have one), killed after
/// [`CLIENT_LIMIT`]. Returns success, the parsed `-J` output and the raw text.
fn iperf3_run(port: u16, args: &[&str]) -> (bool, Value, String) {
    let child = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port.to_string(), "-J"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("iperf3 must be installed");
    let mut child = Reaped(child);
    let mut stdout = child.0.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let deadline = Instant::now() + CLIENT_LIMIT;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "iperf3 -c {args:?} still running after {CLIENT_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = reader.join().unwrap();
    let json: Value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (status.success(), json, stdout)
}

/// A timed one-second test.
fn iperf3_client(port: u16, extra: &[&str]) -> (bool, Value, String) {
    let mut args = vec!["-t", "1"];
    args.extend_from_slice(extra);
    iperf3_run(port, &args)
}

#[test]
fn iperf3_client_against_vantage_listener_tcp_udp_parallel_reverse() {
    let listener = Listener::start(ServiceLimits::default());
    for extra in [
        &[][..],
        &["-P", "2"],
        &["-R"],
        // iperf3 leaves the omitted second out on both sides.
        &["-O", "1"],
        &["-O", "1", "-R"],
        &["-u", "-b", "40M"],
        &["-u", "-b", "20M", "-R", "-P", "2"],
    ] {
        let (ok, json, text) = iperf3_client(listener.port, extra);
        assert!(
            ok && json["error"].is_null(),
            "iperf3 -c {extra:?} failed: {text}"
        );
        let end = &json["end"];
        if extra.contains(&"-u") {
            let sum = &end["sum"];
            let lost = sum["lost_percent"].as_f64().unwrap();
            assert!(lost < 5.0, "{extra:?}: {sum}");
            let bps = sum["bits_per_second"].as_f64().unwrap();
            // 40M for one stream, or 2 × 20M.
            let target = 40e6;
            assert!(
                (bps - target).abs() / target < 0.15,
                "{extra:?}: {bps} bit/s"
            );
        } else {
            let received = end["sum_received"]["bytes"].as_f64().unwrap();
            let sent = end["sum_sent"]["bytes"].as_f64().unwrap();
            assert!(received > 1e6, "{extra:?}: {end}");
            // Bytes in flight at the end are the only difference.
            assert!(
                (sent - received).abs() / sent < 0.1,
                "{extra:?}: sent {sent} received {received}"
            );
        }
    }
}

#[test]
fn busy_listener_denies_iperf3_and_refuses_over_cap() {
    let limits = ServiceLimits {
        max_duration: Duration::from_secs(30),
        max_rate_bps: Some(10_000_000),
    };
    let listener = Listener::start(limits);
    let port = listener.port;
    let first = std::thread::spawn(move || iperf3_client(port, &["-t", "6"]));
    std::thread::sleep(Duration::from_millis(500));
    // iperf3 3.12 exits 0 after ACCESS_DENIED; its JSON carries the error.
    let (_, json, text) = iperf3_client(listener.port, &[]);
    assert!(
        json["error"].as_str().unwrap_or("").contains("busy"),
        "{text}"
    );
    // vantage's own iperf3 client maps ACCESS_DENIED to Busy.
    let err = run_iperf3(&iperf3_spec(listener.port)).unwrap_err();
    assert!(matches!(err, ThroughputError::Busy { .. }), "{err}");
    assert!(first.join().unwrap().0);

    let (_, json, text) = iperf3_client(listener.port, &["-u", "-b", "50M"]);
    assert!(
        json["error"].is_string(),
        "over-cap UDP should be refused: {text}"
    );
    assert!(
        json["end"]["sum"].is_null() || json["end"].as_object().is_none_or(|o| o.is_empty()),
        "{text}"
    );
}

fn bytes_of(summary: &Value) -> f64 {
    summary["bytes"].as_f64().unwrap_or(-1.0)
}

#[test]
fn iperf3_client_bidir_against_vantage_listener() {
    let listener = Listener::start(ServiceLimits::default());
    for extra in [&["--bidir"][..], &["--bidir", "-P", "2"]] {
        let (ok, json, text) = iperf3_client(listener.port, extra);
        assert!(ok && json["error"].is_null(), "iperf3 -c {extra:?}: {text}");
        let end = &json["end"];
        // Client → endpoint, then endpoint → client.
        let streams = end["streams"].as_array().unwrap();
        let parallel = if extra.contains(&"-P") { 2.0 } else { 1.0 };
        assert_eq!(streams.len() as f64, 2.0 * parallel, "{extra:?}: {end}");
        for (sent_key, received_key) in [
            ("sum_sent", "sum_received"),
            ("sum_sent_bidir_reverse", "sum_received_bidir_reverse"),
        ] {
            let sent = bytes_of(&end[sent_key]);
            let received = bytes_of(&end[received_key]);
            assert!(received > 1e6, "{extra:?} {received_key}: {end}");
            // Both sides stop counting at TEST_END: what was still in the socket
            // buffers then (a few MiB per loopback stream) is sent but not received.
            // iperf3's client favours its sending direction, so the other one can be
            // slow enough for that to exceed a tenth.
            let in_flight = 0.1 * sent + parallel * 16.0 * 1024.0 * 1024.0;
            assert!(
                received <= sent && sent - received < in_flight,
                "{extra:?}: {sent_key} {sent}, {received_key} {received}"
            );
        }
    }

    // UDP both ways at 20 Mbit/s each.
    let (ok, json, text) = iperf3_client(listener.port, &["--bidir", "-u", "-b", "20M"]);
    assert!(
        ok && json["error"].is_null(),
        "iperf3 -c --bidir -u: {text}"
    );
    for key in ["sum", "sum_bidir_reverse"] {
        let sum = &json["end"][key];
        let bps = sum["bits_per_second"].as_f64().unwrap_or(0.0);
        assert!((bps - 20e6).abs() / 20e6 < 0.15, "{key}: {sum}");
        let lost = sum["lost_percent"].as_f64().unwrap_or(100.0);
        assert!(lost < 5.0, "{key}: {sum}");
    }
}

#[test]
fn iperf3_client_byte_and_block_counts_against_vantage_listener() {
    // A short maximum duration: a test that failed to end at its count is cut off
    // soon rather than running for the default 300 s.
    let listener = Listener::start(ServiceLimits {
        max_duration: Duration::from_secs(20),
        max_rate_bps: None,
    });
    const COUNT: f64 = 100.0 * 1024.0 * 1024.0;
    const BLOCK: f64 = 128.0 * 1024.0;
    let cases: [(&[&str], f64, f64); 5] = [
        // args, expected count in bytes, block size
        (&["-n", "100M"], COUNT, BLOCK),
        (&["-n", "100M", "-R"], COUNT, BLOCK),
        (&["-n", "100M", "-P", "2"], COUNT, BLOCK),
        (&["-n", "100M", "-R", "-P", "3"], COUNT, BLOCK),
        (&["-k", "1000", "-l", "64K"], 1000.0 * 65536.0, 65536.0),
    ];
    for (args, count, block) in cases {
        let (ok, json, text) = iperf3_run(listener.port, args);
        assert!(ok && json["error"].is_null(), "iperf3 -c {args:?}: {text}");
        let end = &json["end"];
        let streams = end["streams"].as_array().unwrap().len() as f64;
        let sent = bytes_of(&end["sum_sent"]);
        let received = bytes_of(&end["sum_received"]);
        // iperf3 stops at the first block that reaches the count: at most one block
        // per stream over it (the endpoint, sending, splits it evenly, rounded up).
        assert!(
            sent >= count && sent <= count + streams * block,
            "{args:?}: sent {sent}, count {count}: {end}"
        );
        assert!(
            received > 0.5 * count && received <= sent,
            "{args:?}: received {received} of {sent}"
        );
    }
    // Receiving, iperf3's client counts its reads as blocks, and a read can return
    // less than a block: it ends the test at 1000 reads, at most 1000 blocks in. The
    // endpoint stops sending at 1000 blocks or at TEST_END, whichever is first.
    let (ok, json, text) = iperf3_run(listener.port, &["-k", "1000", "-R"]);
    assert!(
        ok && json["error"].is_null(),
        "iperf3 -c -k 1000 -R: {text}"
    );
    let end = &json["end"];
    let sent = bytes_of(&end["sum_sent"]);
    let received = bytes_of(&end["sum_received"]);
    assert!(
        received > 0.0 && received <= sent && sent <= 1000.0 * BLOCK,
        "-k 1000 -R: sent {sent}, received {received}: {end}"
    );

    // UDP: 2000 datagrams of 1000 bytes at 100 Mbit/s, both directions.
    for args in [
        &["-u", "-b", "100M", "-l", "1000", "-k", "2000"][..],
        &["-u", "-b", "100M", "-l", "1000", "-k", "2000", "-R"],
    ] {
        let (ok, json, text) = iperf3_run(listener.port, args);
        assert!(ok && json["error"].is_null(), "iperf3 -c {args:?}: {text}");
        let sum = &json["end"]["sum"];
        let packets = sum["packets"].as_f64().unwrap_or(0.0);
        assert!(packets >= 2000.0, "{args:?}: {sum}");
        assert!(
            sum["lost_percent"].as_f64().unwrap_or(100.0) < 5.0,
            "{args:?}: {sum}"
        );
    }
}

#[test]
fn refused_iperf3_tests_show_the_reason() {
    let listener = Listener::start(ServiceLimits {
        max_duration: Duration::from_secs(30),
        max_rate_bps: Some(100_000_000),
    });
    // iperf3 3.12's texts for the numbers the endpoint sends (iperf3 3.20 and later
    // get "client's requested duration exceeds the server's maximum permitted limit").
    let cases: [(&[&str], &str); 6] = [
        (&["-t", "60"], "test duration too long"),
        // 30 s at 100 Mbit/s is 375 MB.
        (&["-n", "1G"], "test duration too long"),
        (&["-k", "100000"], "test duration too long"),
        (
            &["-t", "1", "-u", "-b", "60M", "-P", "2"],
            "total required bandwidth is larger than server limit",
        ),
        (
            &["-t", "1", "--bidir", "-P", "65"],
            "number of parallel streams too large",
        ),
        (&["-n", "10M", "-O", "1"], "not implemented yet"),
    ];
    for (args, message) in cases {
        let (_, json, text) = iperf3_run(listener.port, args);
        let error = json["error"].as_str().unwrap_or("");
        assert!(error.contains(message), "{args:?}: {text}");
    }
    // The same count within the cap runs (the listener was not left busy).
    let (ok, json, text) = iperf3_run(listener.port, &["-n", "10M"]);
    assert!(ok && json["error"].is_null(), "{text}");
}

#[test]
fn a_count_test_still_running_at_the_maximum_duration_is_ended_with_the_reason() {
    // 2 s at 8 Mbit/s bounds counts at 2 MB; 1.9 MB sent by the endpoint paced at the
    // client's 1 Mbit/s would take 15 s, so the endpoint ends the test after 2 s (and a
    // second's slack). (A sending iperf3 client counts what its socket took, so it
    // would end a forward test as soon as the bytes fit in the socket buffer.)
    let listener = Listener::start(ServiceLimits {
        max_duration: Duration::from_secs(2),
        max_rate_bps: Some(8_000_000),
    });
    let (_, json, text) = iperf3_run(listener.port, &["-n", "1900K", "--fq-rate", "1M", "-R"]);
    let error = json["error"].as_str().unwrap_or("");
    assert!(error.contains("test duration too long"), "{text}");
    // The endpoint is free again.
    let (ok, json, text) = iperf3_run(listener.port, &["-n", "1M"]);
    assert!(ok && json["error"].is_null(), "{text}");
}

fn process_threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Many silent connections and one that trickles its cookie: threads stay bounded
/// (no thread per connection beyond the cap), the trickler is cut off by the setup
/// deadline, and once the silent ones go a stock `iperf3 -c` is served again.
#[test]
fn silent_and_trickling_connections_neither_exhaust_nor_stop_the_listener() {
    use std::io::{Read, Write};
    let listener = Listener::start(ServiceLimits::default());
    let before = process_threads();
    // Bounded: 400 connections, more than the listener's thread cap.
    let silent: Vec<std::net::TcpStream> = (0..400)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", listener.port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let during = process_threads();
    // The cap (one test's streams plus slack) and some room for this process's
    // other threads; a thread per connection would be 400 more.
    assert!(
        during <= before + 128 + 32 + 40,
        "{during} threads with 400 silent connections (was {before})"
    );
    drop(silent);

    let mut trickler = std::net::TcpStream::connect(("127.0.0.1", listener.port)).unwrap();
    // Each read waits a second for the server to close: one byte a second, so a
    // 37-byte cookie would take 37 s. Bounded at 30 bytes.
    trickler
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let started = Instant::now();
    let mut cut_off = None;
    for _ in 0..30 {
        let mut buf = [0u8; 8];
        let closed = trickler.write_all(b"x").is_err()
            || match trickler.read(&mut buf) {
                Ok(0) => true,
                Ok(_) => false,
                Err(error) => !matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
            };
        if closed {
            cut_off = Some(started.elapsed());
            break;
        }
    }
    let cut_off = cut_off.expect("the trickling connection was never closed");
    assert!(
        cut_off < Duration::from_secs(20),
        "closed after {cut_off:?}, not by the 10 s setup deadline"
    );

    let (ok, json, text) = iperf3_client(listener.port, &[]);
    assert!(
        ok && json["error"].is_null(),
        "iperf3 after the flood: {text}"
    );
}
