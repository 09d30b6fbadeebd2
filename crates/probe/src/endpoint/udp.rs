//! The TWAMP-Light reflector (RFC 5357 §4.2, unauthenticated mode, no control session)
//! that also answers STAMP Session-Sender packets as a stateful STAMP
//! Session-Reflector (RFC 8762 §4.3, unauthenticated; SSID and TLVs per RFC 8972):
//! `twamp::stamp_request` tells the two apart per packet, `twamp::reflect` builds
//! either reply.
//!
//! For each request: the receive timestamp is the kernel's (`SO_TIMESTAMPING` /
//! `SO_TIMESTAMPNS`, user clock if refused), the reply's own timestamp is taken right
//! before `sendto`, the request's TTL / hop limit goes into "Sender TTL", and the
//! reflector's sequence number counts the requests of *that sender* (source address
//! and port, plus the SSID for STAMP, RFC 8972 §3), so the sender can tell forward
//! from reverse loss. The error estimate
//! carries our clock's sync state (adjtimex), refreshed once a second.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::config::{EndpointConfig, FaultInjection};
use super::counters::{bump, EndpointCounters};
use super::reflector_guard::{interface_broadcast_addresses, ReflectorGuard, Refusal};
use crate::clock::local_clock_sync;
use crate::timestamp::{
    enable_packet_info, enable_receive_ttl, enable_timestamping, now_unix_ns, poll_readable,
    recv_with_meta, send_from, Received,
};
use crate::twamp::{self, ErrorEstimate, NtpTimestamp, ReflectorStamp, TwampError};

/// How often the stop flag is checked while no packet arrives.
const STOP_POLL_MS: i32 = 100;
const CLOCK_REFRESH_NS: i64 = 1_000_000_000;
/// Interfaces (and their broadcast addresses) change rarely; re-read this often.
const INTERFACES_REFRESH_NS: i64 = 10_000_000_000;

struct SenderState {
    next_seq: u32,
    requests_seen: u64,
    last_seen_ns: i64,
}

pub(super) struct Reflector {
    socket: UdpSocket,
    counters: Arc<EndpointCounters>,
    fault: Option<FaultInjection>,
    max_senders: usize,
    sender_idle_ns: i64,
    /// Keyed by source address and port, and the SSID for STAMP (0 for TWAMP-Light,
    /// whose bytes 14..16 are padding).
    senders: HashMap<(SocketAddr, u16), SenderState>,
    error_estimate: ErrorEstimate,
    error_estimate_read_ns: i64,
    guard: ReflectorGuard,
    interfaces_read_ns: i64,
}

impl Reflector {
    pub(super) fn new(
        socket: UdpSocket,
        config: &EndpointConfig,
        counters: Arc<EndpointCounters>,
    ) -> io::Result<Self> {
        socket.set_nonblocking(true)?;
        let ipv6 = socket.local_addr()?.is_ipv6();
        enable_timestamping(&socket, false);
        enable_receive_ttl(&socket, ipv6)?;
        enable_packet_info(&socket, ipv6)?;
        let mut guard = ReflectorGuard::new(
            socket.local_addr()?.port(),
            config.udp_rate_limit_pps,
            config.max_udp_senders.max(1),
        );
        guard.set_broadcast_addresses(interface_broadcast_addresses());
        guard.allow_only(config.sources.allow.clone());
        Ok(Self {
            socket,
            counters,
            fault: config.fault_injection,
            max_senders: config.max_udp_senders.max(1),
            sender_idle_ns: i64::try_from(config.udp_sender_idle.as_nanos()).unwrap_or(i64::MAX),
            senders: HashMap::new(),
            error_estimate: clock_error_estimate(),
            error_estimate_read_ns: now_unix_ns(),
            guard,
            interfaces_read_ns: now_unix_ns(),
        })
    }

    /// Reflects until `stop` is set.
    pub(super) fn serve(mut self, stop: &AtomicBool) {
        let fd = self.socket.as_raw_fd();
        // One more byte than the largest UDP payload so oversized datagrams show as truncated.
        let mut request = vec![0u8; 65_536];
        let mut reply = vec![0u8; 65_536];
        while !stop.load(Ordering::Relaxed) {
            match poll_readable(fd, STOP_POLL_MS) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(err) => {
                    tracing::debug!("reflector poll failed: {err}");
                    bump(&self.counters.udp_receive_errors);
                    continue;
                }
            }
            // Drain everything queued before polling again.
            loop {
                match recv_with_meta(fd, &mut request, libc::MSG_DONTWAIT) {
                    Ok(received) => {
                        let Some(peer) = received.peer else {
                            bump(&self.counters.udp_receive_errors);
                            continue;
                        };
                        if received.truncated {
                            tracing::debug!(%peer, "oversized datagram dropped");
                            bump(&self.counters.udp_oversized);
                            continue;
                        }
                        self.answer(&request[..received.len], peer, &received, &mut reply);
                    }
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                    Err(err) => {
                        // e.g. ECONNREFUSED left by an ICMP error for an earlier reply.
                        tracing::debug!("reflector receive error: {err}");
                        bump(&self.counters.udp_receive_errors);
                        break;
                    }
                }
            }
        }
    }

    fn answer(&mut self, request: &[u8], peer: SocketAddr, meta: &Received, reply: &mut [u8]) {
        let receive_ns = meta.kernel_rx_ns.unwrap_or_else(now_unix_ns);
        if let Err(err) = twamp::parse_sender(request) {
            tracing::debug!(%peer, "malformed TWAMP request: {err}");
            match err {
                TwampError::Oversized { .. } => bump(&self.counters.udp_oversized),
                _ => bump(&self.counters.udp_truncated),
            }
            return;
        }
        if receive_ns - self.interfaces_read_ns > INTERFACES_REFRESH_NS {
            self.guard
                .set_broadcast_addresses(interface_broadcast_addresses());
            self.interfaces_read_ns = receive_ns;
        }
        if let Err(refusal) = self
            .guard
            .check(request, peer, meta.destination, receive_ns)
        {
            tracing::debug!(%peer, ?refusal, "request not answered");
            let counters = &self.counters;
            bump(match refusal {
                Refusal::SourcePort => &counters.udp_refused_port,
                Refusal::NotUnicast => &counters.udp_refused_not_unicast,
                Refusal::ShorterThanReply => &counters.udp_refused_short,
                Refusal::Reflected => &counters.udp_refused_reflected,
                Refusal::RateLimited => &counters.udp_rate_limited,
                Refusal::NotAllowed => &counters.udp_refused_not_allowed,
            });
            return;
        }
        let ssid = twamp::stamp_request(request).unwrap_or(0);
        let Some(seq) = self.next_sequence((peer, ssid), receive_ns) else {
            bump(&self.counters.udp_fault_dropped);
            return;
        };
        if let Some(FaultInjection::DropEveryKthReply(k)) = self.fault {
            if k > 0 && (u64::from(seq) + 1).is_multiple_of(u64::from(k)) {
                bump(&self.counters.udp_fault_dropped);
                return;
            }
        }
        if receive_ns - self.error_estimate_read_ns > CLOCK_REFRESH_NS {
            self.error_estimate = clock_error_estimate();
            self.error_estimate_read_ns = receive_ns;
        }
        let stamp = ReflectorStamp {
            seq,
            receive_timestamp: NtpTimestamp::from_unix_nanos(receive_ns),
            // As late as possible: after this only the copy into the reply and sendto.
            send_timestamp: NtpTimestamp::from_unix_nanos(now_unix_ns()),
            error_estimate: self.error_estimate,
            // RFC 5357 §4.2: a reflector that cannot read the TTL MUST send 255.
            request_ttl: meta.ttl.unwrap_or(255),
        };
        match twamp::reflect(request, &stamp, reply) {
            Ok(len) => match self.send_reply(&reply[..len], peer, meta.local) {
                Ok(_) => bump(&self.counters.udp_reflected),
                Err(err) => {
                    tracing::debug!(%peer, "reply not sent: {err}");
                    bump(&self.counters.udp_send_errors);
                }
            },
            Err(err) => {
                tracing::debug!(%peer, "cannot reflect: {err}");
                bump(&self.counters.udp_truncated);
            }
        }
    }

    /// Sends from the address the request was sent to; if the kernel refuses that
    /// source (e.g. a broadcast destination), lets routing pick one.
    fn send_reply(
        &self,
        reply: &[u8],
        peer: SocketAddr,
        local: Option<IpAddr>,
    ) -> io::Result<usize> {
        if let Some(local) = local {
            match send_from(self.socket.as_raw_fd(), reply, peer, local) {
                Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {}
                sent => return sent,
            }
        }
        self.socket.send_to(reply, peer)
    }

    /// The reflector sequence number for this request of session `peer` (address and
    /// SSID), or `None` when the fault injection drops it before it is counted.
    fn next_sequence(&mut self, peer: (SocketAddr, u16), now_ns: i64) -> Option<u32> {
        if !self.senders.contains_key(&peer) && self.senders.len() >= self.max_senders {
            self.evict(now_ns);
        }
        let state = self.senders.entry(peer).or_insert(SenderState {
            next_seq: 0,
            requests_seen: 0,
            last_seen_ns: now_ns,
        });
        state.last_seen_ns = now_ns;
        state.requests_seen += 1;
        if let Some(FaultInjection::DropEveryKthRequest(k)) = self.fault {
            if k > 0 && state.requests_seen.is_multiple_of(u64::from(k)) {
                return None;
            }
        }
        let seq = state.next_seq;
        state.next_seq = state.next_seq.wrapping_add(1);
        Some(seq)
    }

    /// Drops idle senders; if that frees nothing, the least recently seen eighth of
    /// the table (at least one). Evicting in batches keeps a flood of new source
    /// addresses from paying a full-table scan on every packet.
    fn evict(&mut self, now_ns: i64) {
        let before = self.senders.len();
        let idle_ns = self.sender_idle_ns;
        self.senders
            .retain(|_, s| now_ns.saturating_sub(s.last_seen_ns) < idle_ns);
        if self.senders.len() >= self.max_senders {
            let batch = (self.max_senders / 8).max(1);
            let mut last_seen: Vec<i64> = self.senders.values().map(|s| s.last_seen_ns).collect();
            let (_, cutoff, _) = last_seen.select_nth_unstable(batch - 1);
            let cutoff = *cutoff;
            let mut budget = batch;
            self.senders.retain(|_, s| {
                let evict = budget > 0 && s.last_seen_ns <= cutoff;
                budget -= usize::from(evict);
                !evict
            });
        }
        let evicted = (before - self.senders.len()) as u64;
        self.counters
            .udp_senders_evicted
            .fetch_add(evicted, Ordering::Relaxed);
    }
}

/// Our clock's state in TWAMP's error-estimate encoding (S bit + estimated error).
fn clock_error_estimate() -> ErrorEstimate {
    let sync = local_clock_sync();
    // Unknown error: claim the kernel's maximum error, else one second.
    let error_us = sync
        .estimated_error_us
        .filter(|_| sync.synchronized)
        .or(sync.max_error_us)
        .unwrap_or(1_000_000);
    ErrorEstimate::from_error_seconds(sync.synchronized, error_us as f64 * 1e-6)
}
