//! Shared test harness: an in-process endpoint on a background thread, stopped on Drop.

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;

use vantage_model::latency::{LatencyProtocol, LatencySpec, TransmitStamp};
use vantage_probe::endpoint::{Endpoint, EndpointConfig, EndpointCounters, EndpointStats};

pub struct TestEndpoint {
    pub addr: SocketAddr,
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
