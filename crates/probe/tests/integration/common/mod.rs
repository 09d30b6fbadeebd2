//! Shared test harness: an in-process endpoint on a background thread, stopped on Drop.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use vantage_model::latency::{LatencyProtocol, LatencyResult, LatencySpec, TransmitStamp, UdpMode};
use vantage_probe::endpoint::{Endpoint, EndpointConfig, EndpointCounters, EndpointStats};

pub struct TestEndpoint {
    pub addr: SocketAddr,
    /// The iperf3-compatible listener, when the test turned it on.
    pub iperf3: Option<SocketAddr>,
    pub counters: Arc<EndpointCounters>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<EndpointStats>>,
}

impl TestEndpoint {
    /// Binds on `listen` (None = dual-stack) at an ephemeral port and serves.
    pub fn start(listen: Option<IpAddr>, tweak: impl FnOnce(&mut EndpointConfig)) -> Self {
        let mut config = EndpointConfig {
            listen,
            port: 0,
            ..EndpointConfig::default()
        };
        tweak(&mut config);
        let endpoint = Endpoint::bind(config).expect("endpoint binds");
        let addr = endpoint.local_addr();
        let iperf3 = endpoint.iperf3_addr();
        let counters = endpoint.counters();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime
                .block_on(endpoint.run(async {
                    let _ = stopped.await;
                }))
                .expect("endpoint runs")
        });
        Self {
            addr,
            iperf3,
            counters,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The endpoint's port on a given loopback address.
    pub fn at(&self, ip: &str) -> String {
        SocketAddr::new(ip.parse().unwrap(), self.addr.port()).to_string()
    }

    pub fn stop(mut self) -> EndpointStats {
        self.shutdown().expect("endpoint thread finished")
    }

    fn shutdown(&mut self) -> Option<EndpointStats> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl Drop for TestEndpoint {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A quick spec: `count` probes 5 ms apart, 1 s timeout, 64 B.
pub fn spec(target: String, protocol: LatencyProtocol, count: u32) -> LatencySpec {
    LatencySpec {
        target,
        port: 0,
        protocol,
        count,
        interval_us: 5_000,
        timeout_us: 1_000_000,
        size_bytes: 64,
        dscp: 0,
        allow_fragmentation: false,
        tx_timestamp: TransmitStamp::Kernel,
        udp_mode: Default::default(),
    }
}

/// Ignores engine progress reports.
pub fn no_progress(_: vantage_probe::latency::Progress) {}

/// Runs a setup command (ip, tc, …), failing the test with its stderr.
pub fn sh(args: &[&str]) {
    let output = std::process::Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        output.status.success(),
        "{args:?} failed (this test needs root and iproute2 with tbf): {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Seconds from 1900-01-01 to 1970-01-01 (RFC 868 / NTP).
pub const NTP_UNIX_OFFSET_S: u64 = 2_208_988_800;

/// Now as an NTP 64-bit timestamp (RFC 5905 §6), written independently of
/// `vantage_probe::twamp` for the interop tests' reflectors and senders.
pub fn ntp_now() -> [u8; 8] {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let seconds = (now.as_secs() + NTP_UNIX_OFFSET_S) as u32;
    let fraction = ((u64::from(now.subsec_nanos()) << 32) / 1_000_000_000) as u32;
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&seconds.to_be_bytes());
    out[4..].copy_from_slice(&fraction.to_be_bytes());
    out
}

pub fn be16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes(bytes[..2].try_into().unwrap())
}

pub fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().unwrap())
}

/// Runs `spec` (its target replaced) against `reflector`, which gets a loopback
/// socket and a stop flag and runs on its own thread until the run ends.
pub fn probe_reflector(
    mut spec: LatencySpec,
    reflector: impl FnOnce(UdpSocket, Arc<AtomicBool>) + Send + 'static,
) -> LatencyResult {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    spec.target = socket.local_addr().unwrap().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || reflector(socket, stop))
    };
    let result = vantage_probe::latency::run_latency(&spec, &mut |_| {});
    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap();
    result.unwrap()
}

/// [`spec`] for 10 UDP probes in `mode` (target filled in by [`probe_reflector`]).
pub fn udp_spec(mode: UdpMode) -> LatencySpec {
    let mut spec = spec(String::new(), LatencyProtocol::Udp, 10);
    spec.udp_mode = mode;
    spec
}

/// The receive loop of the interop tests' independent reflectors: until `stop`, each
/// datagram of at least `min_len` bytes is stamped on arrival (NTP) and handed to
/// `answer` with the socket, the sender, and the reflector's own counter (0, 1, …
/// over the answered requests: a stateful reflector).
pub fn serve_requests(
    socket: UdpSocket,
    stop: Arc<AtomicBool>,
    min_len: usize,
    mut answer: impl FnMut(&UdpSocket, SocketAddr, &[u8], [u8; 8], u32),
) {
    socket
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut counter = 0u32;
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let Ok((len, peer)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let receive_ts = ntp_now();
        if len < min_len {
            continue;
        }
        answer(&socket, peer, &buf[..len], receive_ts, counter);
        counter += 1;
    }
}

/// Every one of a 10-probe run's probes answered, numbered 1..=10 by a stateful
/// reflector (0 and 11 are the bracketing probes), with an RTT.
pub fn assert_all_ten_answered(result: &LatencyResult) {
    let s = &result.summary;
    assert_eq!(
        (s.sent, s.received, s.forward_lost, s.reverse_lost),
        (10, 10, 0, 0)
    );
    let reflector_seqs: Vec<u32> = result
        .samples
        .iter()
        .map(|p| p.reflector_seq.unwrap())
        .collect();
    assert_eq!(reflector_seqs, (1..=10).collect::<Vec<u32>>());
    assert!(s.rtt_us.unwrap().min > 0.0);
}

/// An endpoint on 127.0.0.1 and a UDP socket connected to it (2 s receive timeout),
/// for tests that talk to the reflector byte by byte.
pub fn endpoint_and_socket() -> (TestEndpoint, UdpSocket) {
    let endpoint = TestEndpoint::start(Some("127.0.0.1".parse().unwrap()), |_| {});
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(endpoint.addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    (endpoint, socket)
}
