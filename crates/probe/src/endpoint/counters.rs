//! The endpoint's live counters ([`EndpointCounters`]), bumped by its services, and their
//! point-in-time copy ([`EndpointStats`]).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

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
    /// Requests from a privileged, well-known reflector or our own source port (loop defence).
    pub udp_refused_port: AtomicU64,
    /// Requests from a non-unicast source or to a broadcast / multicast destination.
    pub udp_refused_not_unicast: AtomicU64,
    /// Requests shorter than their reply (answering would amplify).
    pub udp_refused_short: AtomicU64,
    /// Datagrams that were another reflector's reply.
    pub udp_refused_reflected: AtomicU64,
    /// Requests over their source address's rate limit.
    pub udp_rate_limited: AtomicU64,
    /// Requests from an address outside the `--allow` list.
    pub udp_refused_not_allowed: AtomicU64,
    /// Requests or replies dropped on purpose by [`FaultInjection`](crate::endpoint::FaultInjection).
    pub udp_fault_dropped: AtomicU64,
    pub tcp_connections: AtomicU64,
    /// Connections closed at once because `max_tcp_connections` were being served.
    pub tcp_rejected_busy: AtomicU64,
    /// Connections closed at once: the address is outside the `--allow` list or
    /// already holds its share of connections.
    pub tcp_refused_source: AtomicU64,
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
    pub udp_refused_port: u64,
    pub udp_refused_not_unicast: u64,
    pub udp_refused_short: u64,
    pub udp_refused_reflected: u64,
    pub udp_rate_limited: u64,
    pub udp_refused_not_allowed: u64,
    pub udp_fault_dropped: u64,
    pub tcp_connections: u64,
    pub tcp_rejected_busy: u64,
    pub tcp_refused_source: u64,
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
            udp_refused_port: get(&self.udp_refused_port),
            udp_refused_not_unicast: get(&self.udp_refused_not_unicast),
            udp_refused_short: get(&self.udp_refused_short),
            udp_refused_reflected: get(&self.udp_refused_reflected),
            udp_rate_limited: get(&self.udp_rate_limited),
            udp_refused_not_allowed: get(&self.udp_refused_not_allowed),
            udp_fault_dropped: get(&self.udp_fault_dropped),
            tcp_connections: get(&self.tcp_connections),
            tcp_rejected_busy: get(&self.tcp_rejected_busy),
            tcp_refused_source: get(&self.tcp_refused_source),
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
             {} senders evicted, refused: {} source port, {} not unicast, {} shorter than reply, \
             {} reflected, {} rate limited, {} not allowed; tcp: {} connections, {} rejected busy, \
             {} refused by source limits, {} bad preamble, \
             {} unsupported version, {} unknown kind, {} bad frames, {} echoed frames",
            self.udp_reflected,
            self.udp_truncated,
            self.udp_oversized,
            self.udp_receive_errors,
            self.udp_send_errors,
            self.udp_senders_evicted,
            self.udp_refused_port,
            self.udp_refused_not_unicast,
            self.udp_refused_short,
            self.udp_refused_reflected,
            self.udp_rate_limited,
            self.udp_refused_not_allowed,
            self.tcp_connections,
            self.tcp_rejected_busy,
            self.tcp_refused_source,
            self.tcp_bad_preamble,
            self.tcp_unsupported_version,
            self.tcp_unknown_kind,
            self.tcp_bad_frames,
            self.tcp_echoed_frames
        )
    }
}
