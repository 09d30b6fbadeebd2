//! The `vantage endpoint` service: what latency (and later throughput) clients talk to.
//!
//! One port (default [`DEFAULT_PORT`]) serves two things:
//! - **UDP**: a TWAMP-Light reflector (RFC 5357 unauthenticated test packets, see
//!   [`udp`]) that answers any RFC 5357 light sender, ours or third-party.
//! - **TCP**: the vantage TCP service (see [`tcp`]): connections start with an 8-byte
//!   preamble naming the service kind (latency echo, throughput, …).
//!
//! Malformed, truncated or oversized input is answered with nothing and counted in
//! [`EndpointCounters`]; per-sender state is bounded so floods cannot grow memory.
//! Library use (the agent runs it in-process): [`Endpoint::bind`] then
//! [`Endpoint::run`] with a shutdown future, or [`run_endpoint`].

pub mod tcp;
pub mod udp;

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};

/// The endpoint's default UDP and TCP port (vantage's own; not IANA-assigned).
/// TWAMP-Light senders that default to 862 (RFC 8545) need `--port 7862` or the
/// endpoint started with `--port 862`.
pub const DEFAULT_PORT: u16 = 7862;

/// Deliberate misbehaviour of the reflector, for tests of loss accounting only.
/// The CLI never sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultInjection {
    /// Ignore every k-th request of each sender before numbering it (looks like
    /// forward loss to the sender).
    DropEveryKthRequest(u32),
    /// Number every request but do not send every k-th reply (reverse loss).
    DropEveryKthReply(u32),
}

#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// Address to listen on; `None` = dual-stack `::`, falling back to `0.0.0.0`
    /// where IPv6 is unavailable.
    pub listen: Option<IpAddr>,
    /// UDP and TCP port; 0 picks a free port (the same for both).
    pub port: u16,
    /// Most senders the reflector keeps a sequence counter for; beyond it the
    /// least recently seen is evicted.
    pub max_udp_senders: usize,
    /// Senders silent this long lose their state (their counter restarts at 0).
    pub udp_sender_idle: Duration,
    /// Most TCP connections served at once; more are closed on accept and counted.
    pub max_tcp_connections: usize,
    /// Test hook; `None` in the product.
    pub fault_injection: Option<FaultInjection>,
    /// TCP and UDP port of the iperf3-compatible listener, on the same address;
    /// `None` = no listener (the CLI's default is 5201; `--no-iperf3` disables it).
    pub iperf3_port: Option<u16>,
    /// Caps on throughput tests, native and iperf3 (one test at a time).
    pub throughput_limits: crate::throughput::server::ServiceLimits,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        Self {
            listen: None,
            port: DEFAULT_PORT,
            max_udp_senders: 10_000,
            udp_sender_idle: Duration::from_secs(60),
            max_tcp_connections: 1024,
            fault_injection: None,
            iperf3_port: None,
            throughput_limits: crate::throughput::server::ServiceLimits::default(),
        }
    }
}

/// Live counters, shared between the service tasks and whoever watches them.
#[derive(Debug, Default)]
pub struct EndpointCounters {
    pub udp_reflected: AtomicU64,
    /// Datagrams shorter than the TWAMP sender header (14 bytes).
    pub udp_truncated: AtomicU64,
    /// Datagrams longer than a TWAMP packet may be.
    pub udp_oversized: AtomicU64,
    pub udp_receive_errors: AtomicU64,
    pub udp_send_errors: AtomicU64,
    pub udp_senders_evicted: AtomicU64,
    /// Requests or replies dropped on purpose by [`FaultInjection`].
    pub udp_fault_dropped: AtomicU64,
    pub tcp_connections: AtomicU64,
    /// Connections closed at once because `max_tcp_connections` were being served.
    pub tcp_rejected_busy: AtomicU64,
    /// Connections whose first 8 bytes were not a vantage preamble (or never came).
    pub tcp_bad_preamble: AtomicU64,
    pub tcp_unsupported_version: AtomicU64,
    pub tcp_unknown_kind: AtomicU64,
    /// Latency-echo frames that were oversized or cut off mid-frame.
    pub tcp_bad_frames: AtomicU64,
    pub tcp_echoed_frames: AtomicU64,
}

/// A point-in-time copy of [`EndpointCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct EndpointStats {
    pub udp_reflected: u64,
    pub udp_truncated: u64,
    pub udp_oversized: u64,
    pub udp_receive_errors: u64,
    pub udp_send_errors: u64,
    pub udp_senders_evicted: u64,
    pub udp_fault_dropped: u64,
    pub tcp_connections: u64,
    pub tcp_rejected_busy: u64,
    pub tcp_bad_preamble: u64,
    pub tcp_unsupported_version: u64,
    pub tcp_unknown_kind: u64,
    pub tcp_bad_frames: u64,
    pub tcp_echoed_frames: u64,
}

impl EndpointCounters {
    pub fn snapshot(&self) -> EndpointStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        EndpointStats {
            udp_reflected: get(&self.udp_reflected),
            udp_truncated: get(&self.udp_truncated),
            udp_oversized: get(&self.udp_oversized),
            udp_receive_errors: get(&self.udp_receive_errors),
            udp_send_errors: get(&self.udp_send_errors),
            udp_senders_evicted: get(&self.udp_senders_evicted),
            udp_fault_dropped: get(&self.udp_fault_dropped),
            tcp_connections: get(&self.tcp_connections),
            tcp_rejected_busy: get(&self.tcp_rejected_busy),
            tcp_bad_preamble: get(&self.tcp_bad_preamble),
            tcp_unsupported_version: get(&self.tcp_unsupported_version),
            tcp_unknown_kind: get(&self.tcp_unknown_kind),
            tcp_bad_frames: get(&self.tcp_bad_frames),
            tcp_echoed_frames: get(&self.tcp_echoed_frames),
        }
    }
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl std::fmt::Display for EndpointStats {
    /// The one-line summary printed on shutdown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "udp: {} reflected, {} truncated, {} oversized, {} receive errors, {} send errors, \
             {} senders evicted; tcp: {} connections, {} rejected busy, {} bad preamble, \
             {} unsupported version, {} unknown kind, {} bad frames, {} echoed frames",
            self.udp_reflected,
            self.udp_truncated,
            self.udp_oversized,
            self.udp_receive_errors,
            self.udp_send_errors,
            self.udp_senders_evicted,
            self.tcp_connections,
            self.tcp_rejected_busy,
            self.tcp_bad_preamble,
            self.tcp_unsupported_version,
            self.tcp_unknown_kind,
            self.tcp_bad_frames,
            self.tcp_echoed_frames
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("endpoint I/O error ({context}): {source}")]
    Io {
        context: &'static str,
        source: io::Error,
    },
}

/// A bound, not yet running endpoint.
pub struct Endpoint {
    config: EndpointConfig,
    udp: std::net::UdpSocket,
    tcp: std::net::TcpListener,
    local_addr: SocketAddr,
    counters: Arc<EndpointCounters>,
    /// Exclusive throughput-test state shared by service kind `T` and the iperf3 listener.
    throughput: Arc<crate::throughput::server::ThroughputService>,
    iperf3: Option<Arc<crate::iperf3::server::Iperf3Server>>,
}

impl Endpoint {
    /// Binds the UDP and TCP sockets (same port) so the caller learns the address
    /// before serving starts.
    pub fn bind(config: EndpointConfig) -> Result<Self, EndpointError> {
        let (udp, tcp) = match config.listen {
            Some(ip) => bind_pair(ip, config.port)?,
            // Dual-stack first; a host without IPv6 gets IPv4 only.
            None => bind_pair(IpAddr::V6(Ipv6Addr::UNSPECIFIED), config.port)
                .or_else(|_| bind_pair(IpAddr::V4(Ipv4Addr::UNSPECIFIED), config.port))?,
        };
        let local_addr = udp.local_addr().map_err(|source| EndpointError::Io {
            context: "reading the bound address",
            source,
        })?;
        // Already here, not only in run(): the kernel turns receive stamping on
        // asynchronously, and requests that arrive before it has get user stamps.
        crate::timestamp::enable_timestamping(&udp, false);
        let throughput =
            crate::throughput::server::ThroughputService::new(config.throughput_limits);
        let iperf3 = match config.iperf3_port {
            Some(port) => Some(
                crate::iperf3::server::Iperf3Server::bind(
                    local_addr.ip(),
                    port,
                    Arc::clone(&throughput),
                )
                .map_err(|source| EndpointError::Bind {
                    addr: SocketAddr::new(local_addr.ip(), port),
                    source,
                })?,
            ),
            None => None,
        };
        Ok(Self {
            config,
            udp,
            tcp,
            local_addr,
            counters: Arc::default(),
            throughput,
            iperf3,
        })
    }

    /// The address both services listen on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn counters(&self) -> Arc<EndpointCounters> {
        Arc::clone(&self.counters)
    }

    /// Where the iperf3-compatible listener listens, when enabled.
    pub fn iperf3_addr(&self) -> Option<SocketAddr> {
        self.iperf3
            .as_ref()
            .and_then(|server| server.local_addr().ok())
    }

    /// Serves until `shutdown` completes, then returns the final counters.
    /// The UDP reflector runs on its own OS thread (lowest wake-up latency, no
    /// executor hop between receive and reply); TCP connections are tokio tasks.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<EndpointStats, EndpointError> {
        let stop = Arc::new(AtomicBool::new(false));
        let reflector = udp::Reflector::new(self.udp, &self.config, Arc::clone(&self.counters))
            .map_err(|source| EndpointError::Io {
                context: "setting up the UDP reflector",
                source,
            })?;
        let reflector_stop = Arc::clone(&stop);
        let reflector_thread = std::thread::Builder::new()
            .name("twamp-reflector".into())
            .spawn(move || reflector.serve(&reflector_stop))
            .map_err(|source| EndpointError::Io {
                context: "starting the reflector thread",
                source,
            })?;
        // The iperf3-compatible listener runs on its own thread (blocking sockets, a
        // thread per stream) and stops with the rest.
        let iperf3_thread = match self.iperf3 {
            Some(server) => {
                let iperf3_stop = Arc::clone(&stop);
                Some(
                    std::thread::Builder::new()
                        .name("iperf3-listener".into())
                        .spawn(move || server.serve(iperf3_stop))
                        .map_err(|source| EndpointError::Io {
                            context: "starting the iperf3 listener",
                            source,
                        })?,
                )
            }
            None => None,
        };
        let served = tcp::serve(
            self.tcp,
            &self.config,
            Arc::clone(&self.counters),
            self.throughput,
            shutdown,
        )
        .await;
        stop.store(true, Ordering::Relaxed);
        if let Some(thread) = iperf3_thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        let _ = tokio::task::spawn_blocking(move || reflector_thread.join()).await;
        served.map_err(|source| EndpointError::Io {
            context: "accepting TCP connections",
            source,
        })?;
        Ok(self.counters.snapshot())
    }
}

/// Binds and serves until `shutdown` completes.
pub async fn run_endpoint(
    config: EndpointConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<EndpointStats, EndpointError> {
    Endpoint::bind(config)?.run(shutdown).await
}

/// Binds UDP and TCP on the same port; with port 0 retries until the port the
/// kernel picked for UDP is also free for TCP.
fn bind_pair(
    ip: IpAddr,
    port: u16,
) -> Result<(std::net::UdpSocket, std::net::TcpListener), EndpointError> {
    // With port 0 the UDP port's TCP twin may be taken: retry a bounded number of times.
    let retries = if port == 0 { 19 } else { 0 };
    let mut attempt = 0;
    loop {
        let udp = bind_socket(SocketAddr::new(ip, port), Type::DGRAM)?;
        let udp_addr = udp.local_addr().and_then(|a| {
            a.as_socket()
                .ok_or_else(|| io::Error::other("bound address is not IP"))
        });
        let udp_addr = udp_addr.map_err(|source| EndpointError::Io {
            context: "reading the bound address",
            source,
        })?;
        match bind_socket(udp_addr, Type::STREAM) {
            Ok(tcp) => {
                tcp.listen(1024).map_err(|source| EndpointError::Bind {
                    addr: udp_addr,
                    source,
                })?;
                return Ok((udp.into(), tcp.into()));
            }
            Err(err) if attempt == retries => return Err(err),
            Err(_) => attempt += 1,
        }
    }
}

fn bind_socket(addr: SocketAddr, kind: Type) -> Result<Socket, EndpointError> {
    let bind_error = |source| EndpointError::Bind { addr, source };
    let protocol = if kind == Type::DGRAM {
        Protocol::UDP
    } else {
        Protocol::TCP
    };
    let socket =
        Socket::new(Domain::for_address(addr), kind, Some(protocol)).map_err(bind_error)?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        socket.set_only_v6(false).map_err(bind_error)?;
    }
    if kind == Type::STREAM {
        socket.set_reuse_address(true).map_err(bind_error)?;
    }
    socket.bind(&addr.into()).map_err(bind_error)?;
    Ok(socket)
}
