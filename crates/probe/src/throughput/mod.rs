//! Throughput engines (`vantage throughput`): native TCP and UDP against the vantage
//! endpoint, and (in [`crate::iperf3`]) the iperf3 protocol both ways.
//!
//! - [`engine`]: the data plane (a thread per stream, interval sampling, TCP_INFO,
//!   UDP pacing and receiver accounting).
//! - [`run`]: what one side measured, as the engine produces it and the native protocol
//!   reports it.
//! - [`wire`]: the native control protocol; [`client`] and [`server`] speak it.
//! - [`report`]: turns both sides' measurements into a [`ThroughputResult`] and the
//!   `limited_by` verdict (pure functions).
//!
//! [`ThroughputResult`]: vantage_model::throughput::ThroughputResult

pub mod client;
pub mod engine;
pub mod report;
pub mod run;
pub mod server;
pub mod wire;

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use socket2::SockRef;

/// Default UDP socket buffer (send and receive) when no window is requested.
pub const UDP_SOCKET_BUFFER_BYTES: u64 = 4 << 20;

/// Socket options both ends apply to their data sockets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SocketOptions {
    pub window_bytes: Option<u64>,
    pub congestion: Option<String>,
    pub pacing_rate_bps: Option<u64>,
    pub dscp: u8,
    pub mss_bytes: Option<u32>,
}

impl SocketOptions {
    /// Applies the options; `peer` decides between IPv4 TOS and IPv6 traffic class.
    /// Window and MSS must be set before connect to shape the handshake.
    pub fn apply(&self, socket: &impl AsRawFd, peer: SocketAddr, tcp: bool) -> io::Result<()> {
        let fd = socket.as_raw_fd();
        // SAFETY: SockRef borrows the fd for this call only.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let sock = SockRef::from(&borrowed);
        // UDP has no flow control: a receiver briefly without CPU must not overflow
        // its socket buffer and report loss the path did not cause. The kernel caps
        // the request at net.core.rmem_max / wmem_max.
        let window = self
            .window_bytes
            .or((!tcp).then_some(UDP_SOCKET_BUFFER_BYTES));
        if let Some(window) = window {
            let window = usize::try_from(window).unwrap_or(usize::MAX);
            sock.set_send_buffer_size(window)
                .and_then(|_| sock.set_recv_buffer_size(window))
                .map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot set window {window} B: {e}"))
                })?;
        }
        if self.dscp > 0 {
            let tos = u32::from(self.dscp) << 2;
            let result = if peer.is_ipv4() {
                sock.set_tos(tos)
            } else {
                sock.set_tclass_v6(tos)
            };
            result.map_err(|e| {
                io::Error::new(e.kind(), format!("cannot set DSCP {}: {e}", self.dscp))
            })?;
        }
        if !tcp {
            return report_send_drops(fd, peer.is_ipv4());
        }
        if let Some(algorithm) = &self.congestion {
            sock.set_tcp_congestion(algorithm.as_bytes()).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("congestion control '{algorithm}' unavailable: {e}"),
                )
            })?;
        }
        if let Some(mss) = self.mss_bytes {
            sock.set_mss(mss)
                .map_err(|e| io::Error::new(e.kind(), format!("cannot set MSS {mss}: {e}")))?;
        }
        if let Some(rate) = self.pacing_rate_bps {
            set_max_pacing_rate(fd, rate)?;
        }
        Ok(())
    }
}

/// Makes a datagram the sending host itself drops (its egress queue or the veth ring to the
/// next hop full) fail its send with ENOBUFS: without IP_RECVERR the kernel only counts it in
/// `Udp: SndbufErrors` and reports it sent, so a sender without CPU to spare reported as
/// path loss what never left it (a loaded 2-core lab: 56 616 of 94 110 datagrams, and a
/// capacity of 354 Mbit/s on a 1 Gbit/s line). The send loop retries such datagrams.
fn report_send_drops(fd: i32, ipv4: bool) -> io::Result<()> {
    let (level, name) = if ipv4 {
        (libc::SOL_IP, libc::IP_RECVERR)
    } else {
        (libc::SOL_IPV6, libc::IPV6_RECVERR)
    };
    crate::timestamp::set_int_option(fd, level, name, 1).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot ask for send errors (IP_RECVERR): {e}"),
        )
    })
}

/// SO_MAX_PACING_RATE takes bytes per second.
pub fn set_max_pacing_rate(fd: i32, rate_bps: u64) -> io::Result<()> {
    let bytes_per_s: u64 = (rate_bps / 8).max(1);
    // SAFETY: passes a u64 we own; the kernel copies it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            &bytes_per_s as *const u64 as *const libc::c_void,
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("cannot set pacing rate {rate_bps} bit/s: {err}"),
        ));
    }
    Ok(())
}

/// Stream ids and who sends on each: forward streams first (client sends), then reverse.
pub fn stream_roles(streams: u32, client_sends: bool, server_sends: bool) -> Vec<(u32, bool)> {
    let mut roles = Vec::new();
    let mut next_id = 1;
    for (enabled, client_sending) in [(client_sends, true), (server_sends, false)] {
        if enabled {
            for _ in 0..streams {
                roles.push((next_id, client_sending));
                next_id += 1;
            }
        }
    }
    roles
}

/// Largest UDP payload that fits the path MTU of a connected socket, at most the
/// Ethernet-sized 1472 B (IPv4) so loopback's 64 KiB MTU does not change the test.
pub fn default_udp_payload(socket: &std::net::UdpSocket, peer: SocketAddr) -> u32 {
    let header = crate::mtu::ip_header_bytes(peer.ip()) + crate::mtu::UDP_HEADER_BYTES;
    let mtu = crate::mtu::path_mtu(socket, peer.is_ipv6()).unwrap_or(1500);
    mtu.min(1500).saturating_sub(header).max(64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidir_streams_get_distinct_ids() {
        assert_eq!(
            stream_roles(2, true, true),
            vec![(1, true), (2, true), (3, false), (4, false)]
        );
        assert_eq!(stream_roles(1, false, true), vec![(1, false)]);
    }
}
