//! How the endpoint is set up ([`EndpointConfig`]); shared by the services it runs.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::source_policy::SourceLimits;
use crate::throughput::server::ServiceLimits;
use crate::tickets::TicketGate;

/// The endpoint's default UDP and TCP port (vantage's own; not IANA-assigned).
/// TWAMP-Light senders that default to 862 (RFC 8545) need `--port 7862` or the
/// endpoint started with `--port 862`.
pub const DEFAULT_PORT: u16 = 7862;

/// Requests per second answered per source address by default: five times the densest
/// schedule vantage's own latency tests use (2 000 probes/s), far below what would
/// make the reflector useful as a traffic source aimed at someone else.
pub const DEFAULT_UDP_RATE_LIMIT_PPS: u32 = 10_000;

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
    /// Requests per second the reflector answers from one source address (a burst of a
    /// tenth of a second is allowed); 0 = unlimited.
    pub udp_rate_limit_pps: u32,
    /// Most TCP connections served at once; more are closed on accept and counted.
    pub max_tcp_connections: usize,
    /// Test hook; `None` in the product.
    pub fault_injection: Option<FaultInjection>,
    /// TCP and UDP port of the iperf3-compatible listener, on the same address;
    /// `None` = no listener (the CLI's default is 5201; `--no-iperf3` disables it).
    pub iperf3_port: Option<u16>,
    /// Caps on throughput tests, native and iperf3 (one test at a time).
    pub throughput_limits: ServiceLimits,
    /// Which source addresses are served, connections per address and test time per
    /// address per hour.
    pub sources: SourceLimits,
    /// An agent's endpoint: throughput tests only under the server's tickets.
    pub tickets: Option<Arc<TicketGate>>,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        Self {
            listen: None,
            port: DEFAULT_PORT,
            max_udp_senders: 10_000,
            udp_sender_idle: Duration::from_secs(60),
            udp_rate_limit_pps: DEFAULT_UDP_RATE_LIMIT_PPS,
            max_tcp_connections: 1024,
            fault_injection: None,
            iperf3_port: None,
            throughput_limits: ServiceLimits::default(),
            sources: SourceLimits::default(),
            tickets: None,
        }
    }
}
