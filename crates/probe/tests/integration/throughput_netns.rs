//! Throughput and capacity on shaped paths in network namespaces this test builds
//! (client ns — router ns with `tbf` both ways — server ns), iperf3 interop rate
//! agreement, the receive-window verdict, and a CPU-starved sender.
//! Needs root (CI runs as root); fails with the reason otherwise.

use crate::common;

use std::fs::File;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::sh;
use serde_json::Value;
use vantage_model::kinds::{capacity::default_spec, Target};
use vantage_model::throughput::{
    LimitedBy, ThroughputProtocol, ThroughputResult, ThroughputSpec, ThroughputTool,
};
use vantage_probe::capacity::run_capacity;
use vantage_probe::iperf3::client::run_iperf3;
use vantage_probe::iperf3::server::Iperf3Server;
use vantage_probe::throughput::client::{run_native, ThroughputError};
use vantage_probe::throughput::server::{ServiceLimits, ThroughputService};

const CLIENT_IP: &str = "10.77.1.1";
const SERVER_IP: &str = "10.77.2.1";

/// Three namespaces, client — router — server, `tbf` on the router's egress both ways
/// (a remote shaper: the sender sees loss, not socket back-pressure). Removed on drop.
struct ShapedPath {
    client: String,
    router: String,
    server: String,
}

impl ShapedPath {
    /// `rate_mbit` both ways.
    fn new(rate_mbit: u32) -> Self {
        Self::asymmetric(rate_mbit, rate_mbit)
    }

    /// `up_mbit` from client to server, `down_mbit` from server to client.
    fn asymmetric(up_mbit: u32, down_mbit: u32) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let prefix = format!(
            "vtput{}n{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = ShapedPath {
            client: format!("{prefix}c"),
            router: format!("{prefix}r"),
            server: format!("{prefix}s"),
        };
        for ns in [&path.client, &path.router, &path.server] {
            sh(&["ip", "netns", "add", ns]);
        }
        let (c, r, s) = (
            path.client.as_str(),
            path.router.as_str(),
            path.server.as_str(),
        );
        sh(&[
            "ip", "-n", c, "link", "add", "vc", "type", "veth", "peer", "name", "rc", "netns", r,
        ]);
        sh(&[
            "ip", "-n", s, "link", "add", "vs", "type", "veth", "peer", "name", "rs", "netns", r,
        ]);
        sh(&[
            "ip",
            "-n",
            c,
            "addr",
            "add",
            &format!("{CLIENT_IP}/24"),
            "dev",
            "vc",
        ]);
        sh(&["ip", "-n", r, "addr", "add", "10.77.1.2/24", "dev", "rc"]);
        sh(&[
            "ip",
            "-n",
            s,
            "addr",
            "add",
            &format!("{SERVER_IP}/24"),
            "dev",
            "vs",
        ]);
        sh(&["ip", "-n", r, "addr", "add", "10.77.2.2/24", "dev", "rs"]);
        for (ns, dev) in [
            (c, "vc"),
            (c, "lo"),
            (r, "rc"),
            (r, "rs"),
            (r, "lo"),
            (s, "vs"),
            (s, "lo"),
        ] {
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        sh(&["ip", "-n", c, "route", "add", "default", "via", "10.77.1.2"]);
        sh(&["ip", "-n", s, "route", "add", "default", "via", "10.77.2.2"]);
        sh(&[
            "ip",
            "netns",
            "exec",
            r,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ]);
        // "rs" leads to the server (uplink), "rc" back to the client (downlink).
        for (dev, rate_mbit) in [("rs", up_mbit), ("rc", down_mbit)] {
            // Burst: enough for the timer granularity at the rate, as tc-tbf(8) advises.
            let burst = if rate_mbit > 100 { "128kb" } else { "64kb" };
            sh(&[
                "tc",
                "-n",
                r,
                "qdisc",
                "add",
                "dev",
                dev,
                "root",
                "tbf",
                "rate",
                &format!("{rate_mbit}mbit"),
                "burst",
                burst,
                "latency",
                "50ms",
            ]);
        }
        path
    }

    /// Runs `work` on a thread inside namespace `ns` (threads it spawns stay there).
    fn in_ns<T: Send + 'static>(
        ns: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let file = File::open(format!("/run/netns/{ns}")).expect("namespace file");
        std::thread::spawn(move || {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("setns (needs root)");
            work()
        })
    }

    fn exec(&self, ns: &str, args: &[&str]) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", ns]).args(args);
        command
    }
}

impl Drop for ShapedPath {
    fn drop(&mut self) {
        for ns in [&self.client, &self.router, &self.server] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// vantage's native service and iperf3 listener inside the server namespace.
struct Servers {
    native_port: u16,
    iperf3_port: u16,
    stop: Arc<AtomicBool>,
}

impl Servers {
    fn start(path: &ShapedPath) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let ports = ShapedPath::in_ns(&path.server, move || {
            let service = ThroughputService::new(ServiceLimits::default());
            let listener = TcpListener::bind((SERVER_IP, 0)).unwrap();
            let native_port = listener.local_addr().unwrap().port();
            let iperf3 = Iperf3Server::bind(
                SERVER_IP.parse::<IpAddr>().unwrap(),
                0,
                Arc::clone(&service),
            )
            .unwrap();
            let iperf3_port = iperf3.local_addr().unwrap().port();
            let (native_stop, iperf3_stop) = (Arc::clone(&thread_stop), Arc::clone(&thread_stop));
            std::thread::spawn(move || service.serve_blocking(listener, native_stop));
            std::thread::spawn(move || iperf3.serve(iperf3_stop));
            (native_port, iperf3_port)
        })
        .join()
        .unwrap();
        Self {
            native_port: ports.0,
            iperf3_port: ports.1,
            stop,
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Kills the child on drop.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spec(port: u16, seconds: u64) -> ThroughputSpec {
    let mut spec = ThroughputSpec::new(SERVER_IP, port);
    spec.duration_us = Some(seconds * 1_000_000);
    spec.omit_us = 500_000;
    spec
}

/// Runs `spec` from the client namespace. A stock `iperf3 -s` answers `ACCESS_DENIED`
/// (busy) for a moment after its previous test while it tears that test down, so a
/// busy answer is retried (briefly); any other error fails the test.
fn client_run(path: &ShapedPath, spec: ThroughputSpec) -> ThroughputResult {
    ShapedPath::in_ns(&path.client, move || {
        let mut attempts_left = 20;
        loop {
            let result = match spec.tool {
                ThroughputTool::Native => run_native(&spec),
                ThroughputTool::Iperf3 => run_iperf3(&spec),
            };
            match result {
                Err(ThroughputError::Busy { .. }) if attempts_left > 0 => {
                    attempts_left -= 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                other => break other,
            }
        }
    })
    .join()
    .unwrap()
    .unwrap_or_else(|e| panic!("client run failed: {e}"))
}

/// Stock `iperf3 -c` in the client namespace; the receiver's rate (`-J`) and, over
/// TCP, the sender's retransmits.
///
/// A stock `iperf3 -s` re-creates its listener after every test, so a refused or
/// reset control connection right after the previous test is retried (briefly).
fn stock_client(path: &ShapedPath, port: u16, extra: &[&str]) -> Measured {
    let port = port.to_string();
    let mut args = vec![
        "iperf3", "-c", SERVER_IP, "-p", &port, "-t", "3", "-O", "1", "-J",
    ];
    args.extend_from_slice(extra);
    let mut attempts_left = 20;
    let json = loop {
        let output = path
            .exec(&path.client, &args)
            .output()
            .expect("iperf3 installed");
        let json: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
            panic!(
                "iperf3 -c {extra:?}: {}",
                String::from_utf8_lossy(&output.stdout)
            )
        });
        let error = json["error"].as_str().unwrap_or_default().to_string();
        let listener_gap = error.contains("refused") || error.contains("reset");
        if listener_gap && attempts_left > 0 {
            attempts_left -= 1;
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        assert!(error.is_empty(), "iperf3 -c {extra:?}: {error}");
        break json;
    };
    let end = &json["end"];
    let bps = if extra.contains(&"-u") {
        // UDP: what arrived = sent rate × (1 − loss).
        end["sum"]["bits_per_second"].as_f64().unwrap()
            * (1.0 - end["sum"]["lost_percent"].as_f64().unwrap() / 100.0)
    } else {
        end["sum_received"]["bits_per_second"].as_f64().unwrap()
    };
    assert!(bps > 0.0, "iperf3 -c {extra:?}: {json}");
    Measured {
        rate_bps: bps,
        retransmits: end["sum_sent"]["retransmits"].as_u64(),
    }
}

/// One stock iperf3 run's delivered rate and, over TCP, how many segments its sender
/// retransmitted.
#[derive(Debug)]
struct Measured {
    rate_bps: f64,
    retransmits: Option<u64>,
}

/// A TCP run through the shaped path, as far as [`undisturbed_tcp`] needs it.
trait TcpRun {
    fn retransmits(&self) -> Option<u64>;
}

impl TcpRun for Measured {
    fn retransmits(&self) -> Option<u64> {
        self.retransmits
    }
}

impl TcpRun for ThroughputResult {
    fn retransmits(&self) -> Option<u64> {
        self.summary.retransmits
    }
}

/// A TCP run through the shaped path, made once more when the first retransmitted.
/// One flow never fills the shaper's 50 ms queue (it runs at 5–6 ms), so the path
/// itself loses nothing: a run that lost segments was disturbed by the host (on a
/// shared 2-core VM, a receiver or the router starved of CPU long enough to drop and
/// then stall the flow; seen once in CI: 109 retransmits and 11 % below the
/// reference). Comparing tools needs runs of the path, not of the host's hiccups.
fn undisturbed_tcp<T: TcpRun>(what: &str, mut run: impl FnMut() -> T) -> T {
    let first = run();
    match first.retransmits() {
        None | Some(0) => first,
        Some(retransmits) => {
            eprintln!("{what}: {retransmits} retransmits on a loss-free path; measured once more");
            run()
        }
    }
}

fn stock_server(path: &ShapedPath) -> (Reaped, u16) {
    let port = 25_201 + (std::process::id() % 1000) as u16;
    let child = path
        .exec(
            &path.server,
            &["iperf3", "-s", "-B", SERVER_IP, "-p", &port.to_string()],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 installed");
    let server = Reaped(child);
    let ns = path.client.clone();
    ShapedPath::in_ns(&ns, move || {
        let deadline = Instant::now() + Duration::from_secs(5);
        let addr = SocketAddr::new(SERVER_IP.parse().unwrap(), port);
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(Instant::now() < deadline, "iperf3 -s did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    (server, port)
}

fn within(a: f64, b: f64, tolerance: f64) -> bool {
    (a - b).abs() / b <= tolerance
}

/// The method needs a UDP sender that over-drives the path by at least 3 % (its
/// over-rate probe starts at 1.25 × the TCP rate). Through three namespaces on a 2-core
/// VM, where the sender's system calls also carry the router's forwarding, a sender
/// reached only 200–207 Mbit/s: at a 200 Mbit/s shaper the probe then rightly reports
/// `over_capacity_reached: false`. Rates stay where this machine over-drives them.
const CAPACITY_TEST_RATES_MBIT: [u32; 2] = [50, 120];

#[test]
fn capacity_is_within_3_percent_of_the_shaped_rate() {
    for rate_mbit in CAPACITY_TEST_RATES_MBIT {
        let path = ShapedPath::new(rate_mbit);
        let servers = Servers::start(&path);
        let mut spec = default_spec(&Target {
            host: SERVER_IP.to_string(),
            port: servers.native_port,
        });
        spec.tcp_duration_us = 2_000_000;
        let result = ShapedPath::in_ns(&path.client, move || run_capacity(&spec, &mut |_| {}))
            .join()
            .unwrap()
            .unwrap();
        let rate = f64::from(rate_mbit) * 1e6;
        let s = &result.summary;
        assert!(
            within(s.capacity_bps, rate, 0.03),
            "{rate_mbit} Mbit/s: capacity {} ({result:#?})",
            s.capacity_bps
        );
        assert!(
            s.verified,
            "{rate_mbit} Mbit/s: not verified: {:#?}",
            result.probes
        );
        assert!(
            s.verified_loss_ratio < 0.001,
            "{rate_mbit} Mbit/s: loss {}",
            s.verified_loss_ratio
        );
        assert!(
            s.rtt_us.is_some() && s.tcp_bps > 0.5 * rate && s.tcp_parallel_bps > 0.5 * rate,
            "{s:?}"
        );
        assert!(result.probes.iter().any(|p| p.purpose == "over_rate"));
    }
}

/// `reverse` measures the other direction (the downlink, the target sending): on a
/// 50/120 Mbit/s asymmetric path, forward finds the uplink and reverse the downlink.
#[test]
fn capacity_reverse_measures_the_downlink() {
    let [up_mbit, down_mbit] = CAPACITY_TEST_RATES_MBIT;
    let path = ShapedPath::asymmetric(up_mbit, down_mbit);
    let servers = Servers::start(&path);
    for (reverse, rate_mbit) in [(false, up_mbit), (true, down_mbit)] {
        let mut spec = default_spec(&Target {
            host: SERVER_IP.to_string(),
            port: servers.native_port,
        });
        spec.tcp_duration_us = 2_000_000;
        spec.reverse = reverse;
        let result = ShapedPath::in_ns(&path.client, move || run_capacity(&spec, &mut |_| {}))
            .join()
            .unwrap()
            .unwrap();
        let s = &result.summary;
        assert!(
            within(s.capacity_bps, f64::from(rate_mbit) * 1e6, 0.03),
            "reverse {reverse}: capacity {} for {rate_mbit} Mbit/s ({result:#?})",
            s.capacity_bps
        );
        assert!(s.verified, "reverse {reverse}: {:#?}", result.probes);
        assert_eq!(result.spec.reverse, reverse);
    }
}

#[test]
fn iperf3_interop_rates_agree_within_10_percent_on_a_shaped_path() {
    let path = ShapedPath::new(100);
    let servers = Servers::start(&path);
    let (_stock, stock_port) = stock_server(&path);
    // Reference: Debian's iperf3 against itself.
    let reference_tcp =
        undisturbed_tcp("reference TCP", || stock_client(&path, stock_port, &[])).rate_bps;
    let reference_udp = stock_client(&path, stock_port, &["-u", "-b", "80M"]).rate_bps;
    assert!(
        within(reference_tcp, 95e6, 0.1),
        "reference TCP {reference_tcp}"
    );

    // vantage client (iperf3 protocol) → stock iperf3 server.
    let mut tcp = spec(stock_port, 3);
    tcp.tool = ThroughputTool::Iperf3;
    let ours = undisturbed_tcp("vantage→iperf3 TCP", || client_run(&path, tcp.clone())).summary;
    assert!(
        within(ours.received_bps, reference_tcp, 0.1),
        "vantage→iperf3 TCP {ours:?} vs {reference_tcp}"
    );
    let mut udp = tcp.clone();
    udp.protocol = ThroughputProtocol::Udp;
    udp.rate_bps = Some(80_000_000);
    let ours = client_run(&path, udp).summary.received_bps;
    assert!(
        within(ours, reference_udp, 0.1),
        "vantage→iperf3 UDP {ours} vs {reference_udp}"
    );

    // stock iperf3 client → vantage's iperf3 listener.
    let theirs = undisturbed_tcp("iperf3→vantage TCP", || {
        stock_client(&path, servers.iperf3_port, &[])
    });
    assert!(
        within(theirs.rate_bps, reference_tcp, 0.1),
        "iperf3→vantage TCP {theirs:?} vs {reference_tcp}"
    );
    let theirs = stock_client(&path, servers.iperf3_port, &["-u", "-b", "80M"]).rate_bps;
    assert!(
        within(theirs, reference_udp, 0.1),
        "iperf3→vantage UDP {theirs} vs {reference_udp}"
    );

    // And the native protocol on the same path.
    let native = undisturbed_tcp("native TCP", || {
        client_run(&path, spec(servers.native_port, 3))
    });
    assert!(
        within(native.summary.received_bps, reference_tcp, 0.1),
        "native TCP {:?} vs {reference_tcp}",
        native.summary
    );
    assert_eq!(
        native.limited_by,
        LimitedBy::Network,
        "{:?}",
        native.evidence
    );
}

#[test]
fn tiny_receive_buffer_is_flagged_receive_window_with_evidence() {
    let path = ShapedPath::new(200);
    let servers = Servers::start(&path);
    let mut small = spec(servers.native_port, 3);
    small.window_bytes = Some(4096);
    let result = client_run(&path, small);
    let evidence = &result.evidence;
    assert_eq!(result.limited_by, LimitedBy::ReceiveWindow, "{evidence:?}");
    assert!(evidence.rwnd_limited_ratio.unwrap() > 0.3, "{evidence:?}");
    let window_rate = evidence.window_rate_bps.expect("rwnd/RTT evidence");
    // Without a delay emulator (no netem here) the path's RTT is a few hundred µs, so
    // even a tiny window nearly fills the line; what shows the window as the limit is
    // the kernel's rwnd-limited time and the window/RTT rate matching what arrived.
    assert!(window_rate > 0.0, "{evidence:?}");
    assert!(
        evidence.peer_window_bytes.unwrap() < 16_384.0,
        "{evidence:?}"
    );
}

#[test]
fn cpu_starved_sender_is_flagged_cpu() {
    // Loopback; the sender is pinned to core 0 where a busy thread also runs.
    let service = ThroughputService::new(ServiceLimits::default());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let service_stop = Arc::clone(&stop);
    std::thread::spawn(move || service.serve_blocking(listener, service_stop));
    // Two busy threads share core 0 with the sender: it gets about a third of it.
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let busy_stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                vantage_probe::cpu::pin_current_thread(0).expect("pin the busy loop");
                let until = Instant::now() + Duration::from_secs(8);
                let mut spins = 0u64;
                while !busy_stop.load(Ordering::Relaxed) && Instant::now() < until {
                    spins = std::hint::black_box(spins.wrapping_add(1));
                }
            })
        })
        .collect();
    let mut starved = ThroughputSpec::new("127.0.0.1", port);
    starved.duration_us = Some(2_000_000);
    starved.affinity = vec![0];
    let result = run_native(&starved);
    stop.store(true, Ordering::Relaxed);
    for thread in busy {
        thread.join().unwrap();
    }
    let result = result.unwrap();
    assert_eq!(
        result.limited_by,
        LimitedBy::Cpu,
        "{:?} {:?}",
        result.evidence,
        result.host
    );
    // Starved, not merely busy: the sender waited for its core a good part of the time.
    let waited = result.host.max_thread_runqueue_wait_ratio.sender.unwrap();
    assert!(waited >= 0.25, "sender waited {waited} ({:?})", result.host);
}
