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

fn iperf3_client(port: u16, extra: &[&str]) -> (bool, Value, String) {
    let output = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port.to_string(), "-t", "1", "-J"])
        .args(extra)
        .output()
        .expect("iperf3 must be installed");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let json: Value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (output.status.success(), json, stdout)
}

#[test]
fn iperf3_client_against_vantage_listener_tcp_udp_parallel_reverse() {
    let listener = Listener::start(ServiceLimits::default());
    for extra in [
        &[][..],
        &["-P", "2"],
        &["-R"],
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
