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

mod config;
mod counters;
pub mod reflector_guard;
pub mod tcp;
mod tcp_server;
pub mod udp;

// The endpoint's public face; the services import these from their own modules.
pub use config::{EndpointConfig, FaultInjection, DEFAULT_PORT};
pub use counters::{EndpointCounters, EndpointStats};

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};

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
        let throughput = crate::throughput::server::ThroughputService::guarded(
            config.throughput_limits,
            crate::source_policy::SourcePolicy::new(config.sources.clone()),
            config.tickets.clone(),
        );
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
        let served = tcp_server::serve(
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
