//! ICMP echo latency (the ICMP indicator of Chard et al., FGCS 2015; the method of ping(8)).
//!
//! Socket choice: an unprivileged ICMP datagram socket (`SOCK_DGRAM`, `IPPROTO_ICMP`
//! / `IPPROTO_ICMPV6`; allowed when the caller's group is in
//! `net.ipv4.ping_group_range`; the kernel picks the echo identifier and filters
//! replies), else a raw socket (root / `CAP_NET_RAW`; we pick the identifier and
//! filter). Replies are matched by identifier and sequence number; RTT = t4 - t1 on
//! kernel stamps where the kernel gives them.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use vantage_model::latency::{LatencySpec, TimestampSource, Timestamping, TransmitStamp};
use vantage_stats::SequenceTracker;

use super::engine::{EngineRun, LatencyError, ProbeOutcome, Progress};
use super::udp::{set_dscp, SentPacket};
use crate::mtu::{check_fragmentation, ip_header_bytes, path_mtu, ICMP_ECHO_HEADER_BYTES};
use crate::pacing::sleep_until;
use crate::timestamp::{
    drain_tx_stamps, enable_timestamping, now_unix_ns, poll_readable, recv_with_meta,
};

pub(super) const MIN_PAYLOAD_BYTES: u32 = 0;
pub(super) const MAX_PAYLOAD_BYTES: u32 = 65_507 - ICMP_ECHO_HEADER_BYTES;

const ECHO_REQUEST_V4: u8 = 8;
const ECHO_REPLY_V4: u8 = 0;
const ECHO_REQUEST_V6: u8 = 128;
const ECHO_REPLY_V6: u8 = 129;

struct EchoSocket {
    socket: Socket,
    /// Datagram (kernel-managed identifier) or raw.
    datagram: bool,
    ipv6: bool,
    identifier: u16,
}

/// An ICMP echo socket for `ipv6` or IPv4: an unprivileged datagram ("ping") socket
/// where `net.ipv4.ping_group_range` allows (`true`), else a raw one (`false`). The
/// error names both refusals and what would lift them.
pub(crate) fn open_echo_socket(ipv6: bool) -> Result<(Socket, bool), String> {
    let (domain, protocol) = if ipv6 {
        (Domain::IPV6, Protocol::ICMPV6)
    } else {
        (Domain::IPV4, Protocol::ICMPV4)
    };
    match Socket::new(domain, Type::DGRAM, Some(protocol)) {
        Ok(socket) => Ok((socket, true)),
        Err(dgram_err) => match Socket::new(domain, Type::RAW, Some(protocol)) {
            Ok(socket) => Ok((socket, false)),
            Err(raw_err) => Err(format!(
                "ICMP echo needs an unprivileged ping socket (refused: {dgram_err}; \
                 allow your group with sysctl net.ipv4.ping_group_range) or a raw socket \
                 (refused: {raw_err}; needs root or CAP_NET_RAW)"
            )),
        },
    }
}

fn open(target: SocketAddr) -> Result<EchoSocket, LatencyError> {
    let ipv6 = target.is_ipv6();
    let (socket, datagram) = open_echo_socket(ipv6).map_err(LatencyError::Permission)?;
    Ok(EchoSocket {
        socket,
        datagram,
        ipv6,
        identifier: rand::random(),
    })
}

/// RFC 1071 Internet checksum.
pub(crate) fn internet_checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Echo request: header (type, code, checksum, identifier, sequence) + payload.
fn echo_request(ipv6: bool, identifier: u16, seq: u16, payload_bytes: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..payload_bytes).map(|i| i as u8).collect();
    echo_packet(ipv6, identifier, seq, &payload)
}

/// Echo request carrying `payload`. ICMPv6 checksums cover a pseudo-header, so the
/// kernel fills them in; IPv4 ones are computed here.
pub(crate) fn echo_packet(ipv6: bool, identifier: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut packet = vec![0u8; ICMP_ECHO_HEADER_BYTES as usize];
    packet[0] = if ipv6 {
        ECHO_REQUEST_V6
    } else {
        ECHO_REQUEST_V4
    };
    packet[4..6].copy_from_slice(&identifier.to_be_bytes());
    packet[6..8].copy_from_slice(&seq.to_be_bytes());
    packet.extend_from_slice(payload);
    if !ipv6 {
        let checksum = internet_checksum(&packet);
        packet[2..4].copy_from_slice(&checksum.to_be_bytes());
    }
    packet
}

/// The (identifier, sequence) of an echo reply in `bytes`, or `None` for anything else.
/// Raw IPv4 sockets deliver the IP header too.
fn parse_echo_reply(bytes: &[u8], ipv6: bool, raw: bool) -> Option<(u16, u16)> {
    let icmp = if raw && !ipv6 {
        let header_len = usize::from(*bytes.first()? & 0x0f) * 4;
        bytes.get(header_len..)?
    } else {
        bytes
    };
    let reply_type = if ipv6 { ECHO_REPLY_V6 } else { ECHO_REPLY_V4 };
    if icmp.len() < ICMP_ECHO_HEADER_BYTES as usize || icmp[0] != reply_type || icmp[1] != 0 {
        return None;
    }
    Some((
        u16::from_be_bytes([icmp[4], icmp[5]]),
        u16::from_be_bytes([icmp[6], icmp[7]]),
    ))
}

/// The probe index a 16-bit sequence number refers to: the latest one sent.
fn probe_index(seq: u16, sent: usize) -> Option<usize> {
    let seq = usize::from(seq);
    if seq >= sent {
        return None;
    }
    Some(seq + (sent - 1 - seq) / 65_536 * 65_536)
}

pub(super) fn run(
    spec: &LatencySpec,
    target: SocketAddr,
    progress: &mut dyn FnMut(Progress),
) -> Result<EngineRun, LatencyError> {
    // ICMP has no port; keep only the address.
    let peer = SocketAddr::new(target.ip(), 0);
    let echo = open(peer)?;
    let io = |what: &'static str| move |e| LatencyError::io(what, e);
    set_dscp(&echo.socket, peer, spec.dscp).map_err(io("setting DSCP"))?;
    echo.socket
        .connect(&peer.into())
        .map_err(|e| LatencyError::from_send(peer, e))?;
    echo.socket
        .set_nonblocking(true)
        .map_err(io("setting non-blocking"))?;
    let mtu = path_mtu(&echo.socket, echo.ipv6).map_err(io("reading the path MTU"))?;
    check_fragmentation(
        spec.size_bytes,
        ip_header_bytes(peer.ip()) + ICMP_ECHO_HEADER_BYTES,
        mtu,
        spec.allow_fragmentation,
    )?;
    enable_timestamping(&echo.socket, spec.tx_timestamp == TransmitStamp::Kernel);

    let fd = echo.socket.as_raw_fd();
    let count = spec.count as usize;
    let interval = Duration::from_micros(spec.interval_us);
    let timeout = Duration::from_micros(spec.timeout_us);
    let mut sent: Vec<SentPacket> = Vec::with_capacity(count);
    // (rx_ns, kernel stamp?, arrival instant) per probe.
    let mut replies: Vec<Option<(i64, bool, Instant)>> = vec![None; count];
    let mut arrivals = SequenceTracker::new();
    let mut duplicates = 0u64;
    let mut buf = vec![0u8; 65_536];
    let start = Instant::now();
    let start_ns = now_unix_ns();

    let mut receive_until = |deadline: Instant,
                             sent: &mut Vec<SentPacket>,
                             replies: &mut Vec<Option<(i64, bool, Instant)>>,
                             stop_when_all: bool|
     -> Result<(), LatencyError> {
        loop {
            let now = Instant::now();
            let all_in = sent.len() == count && replies.iter().all(Option::is_some);
            if now >= deadline || (stop_when_all && all_in) {
                return Ok(());
            }
            let wait_ms = (deadline - now)
                .as_micros()
                .div_ceil(1000)
                .min(i32::MAX as u128) as i32;
            let revents = poll_readable(fd, wait_ms).map_err(io("waiting for echo replies"))?;
            if revents & libc::POLLERR != 0 {
                for stamp in drain_tx_stamps(fd) {
                    if let Some(s) = sent.get_mut(stamp.send_index as usize) {
                        s.kernel_tx_ns = Some(stamp.kernel_tx_ns);
                    }
                }
            }
            if revents & libc::POLLIN == 0 {
                continue;
            }
            loop {
                let received = match recv_with_meta(fd, &mut buf, libc::MSG_DONTWAIT) {
                    Ok(received) => received,
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                    // ICMP errors (unreachable…) for our probes: they stay lost.
                    Err(err) if err.raw_os_error().is_some_and(|e| e != libc::EBADF) => break,
                    Err(err) => return Err(LatencyError::io("receiving echo replies", err)),
                };
                let rx_ns = received.kernel_rx_ns.unwrap_or_else(now_unix_ns);
                let Some((identifier, seq)) =
                    parse_echo_reply(&buf[..received.len], echo.ipv6, !echo.datagram)
                else {
                    continue;
                };
                if !echo.datagram && identifier != echo.identifier {
                    continue; // someone else's ping
                }
                let Some(index) = probe_index(seq, sent.len()) else {
                    continue;
                };
                if replies[index].is_some() {
                    duplicates += 1;
                    continue;
                }
                replies[index] = Some((rx_ns, received.kernel_rx_ns.is_some(), Instant::now()));
                arrivals.observe(index as u64);
            }
        }
    };

    for i in 0..count {
        let due = start + interval * i as u32;
        receive_until(due, &mut sent, &mut replies, false)?;
        sleep_until(due);
        let packet = echo_request(
            echo.ipv6,
            echo.identifier,
            i as u16,
            spec.size_bytes as usize,
        );
        let user_tx_ns = now_unix_ns();
        let sent_at = Instant::now();
        match echo.socket.send(&packet) {
            Ok(_) => {}
            Err(err) if replies.iter().all(Option::is_none) => {
                return Err(LatencyError::from_send(peer, err))
            }
            Err(_) => {} // stays lost
        }
        sent.push(SentPacket {
            sender_seq: i as u32,
            user_tx_ns,
            kernel_tx_ns: None,
            sent_at,
        });
        progress(Progress {
            sent: i as u32 + 1,
            answered: replies.iter().flatten().count() as u32,
            total: spec.count,
        });
    }
    let last_deadline = sent.last().map_or(start, |s| s.sent_at) + timeout;
    receive_until(last_deadline, &mut sent, &mut replies, true)?;
    std::thread::sleep(Duration::from_millis(2));
    for stamp in drain_tx_stamps(fd) {
        if let Some(s) = sent.get_mut(stamp.send_index as usize) {
            s.kernel_tx_ns = Some(stamp.kernel_tx_ns);
        }
    }

    let mut all_tx_kernel = !sent.is_empty();
    let mut all_rx_kernel = true;
    let probes = sent
        .iter()
        .zip(&replies)
        .map(|(s, reply)| {
            let in_time =
                reply.filter(|(_, _, at)| at.saturating_duration_since(s.sent_at) <= timeout);
            let (t1, kernel_tx) = s.tx_ns(in_time.map(|(rx, _, _)| rx));
            all_tx_kernel &= kernel_tx;
            ProbeOutcome {
                sent_offset_us: (s.user_tx_ns - start_ns) as f64 / 1e3,
                rtt_us: in_time.map(|(rx_ns, kernel_rx, _)| {
                    all_rx_kernel &= kernel_rx;
                    (rx_ns - t1) as f64 / 1e3
                }),
                ..ProbeOutcome::default()
            }
        })
        .collect();
    let source = |kernel: bool| {
        if kernel {
            TimestampSource::Kernel
        } else {
            TimestampSource::User
        }
    };
    Ok(EngineRun {
        probes,
        loss_split: None,
        duplicates,
        reordered: arrivals.finish(count as u64).reordered,
        timestamping: Timestamping {
            transmit: source(all_tx_kernel),
            receive: source(all_rx_kernel),
        },
        one_way: None,
        reflector: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_matches_rfc1071_example() {
        // RFC 1071 §3 example bytes sum to 0xddf2 (one's complement 0x220d).
        assert_eq!(
            internet_checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0x220d
        );
        let request = echo_request(false, 0x1234, 7, 5);
        assert_eq!(
            internet_checksum(&request),
            0,
            "a packet with its checksum sums to zero"
        );
    }

    #[test]
    fn replies_parse_and_garbage_does_not() {
        let mut reply = echo_request(false, 0xbeef, 3, 4);
        reply[0] = ECHO_REPLY_V4;
        assert_eq!(parse_echo_reply(&reply, false, false), Some((0xbeef, 3)));
        let mut with_ip = vec![0x45u8; 20];
        with_ip.extend_from_slice(&reply);
        assert_eq!(parse_echo_reply(&with_ip, false, true), Some((0xbeef, 3)));
        assert_eq!(parse_echo_reply(&[0x4f], false, true), None);
        assert_eq!(parse_echo_reply(&[], false, true), None);
        assert_eq!(parse_echo_reply(&reply[..7], false, false), None);
        let request = echo_request(true, 1, 1, 0);
        assert_eq!(parse_echo_reply(&request, true, false), None);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_reply_parser(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..128),
            ipv6: bool,
            raw: bool,
        ) {
            if let Some((_, seq)) = parse_echo_reply(&bytes, ipv6, raw) {
                proptest::prop_assert!(probe_index(seq, 10).is_none_or(|i| i < 10));
            }
        }
    }

    #[test]
    fn sixteen_bit_sequence_maps_to_latest_probe() {
        assert_eq!(probe_index(3, 10), Some(3));
        assert_eq!(probe_index(10, 10), None);
        assert_eq!(probe_index(1, 65_540), Some(65_537));
        assert_eq!(probe_index(5, 65_540), Some(5));
    }
}
