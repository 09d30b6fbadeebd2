//! Probe packets and the parsing of their answers (no I/O, so it is unit tested).
//!
//! Flow stability (Paris traceroute, Augustin et al., IMC 2006): per-flow load balancers
//! hash the addresses, the protocol and the first four bytes of the transport header
//! (ports; for ICMP type, code and checksum). Probes therefore carry their sequence
//! number where no balancer looks (UDP payload, ICMP sequence field, TCP sequence
//! number) and, for ICMP and UDP, a payload word `!seq` next to it: the one's-complement
//! sum `seq + !seq` is 0xffff whatever `seq` is, so the checksum stays constant too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use vantage_model::trace::ReplyKind;

use crate::latency::{echo_packet, internet_checksum};

/// Payload bytes of every UDP and ICMP probe (a fixed size keeps the length fields constant).
pub(super) const PAYLOAD_BYTES: usize = 32;
/// Marks our probes' payload after the sequence words.
const MAGIC: &[u8; 8] = b"vantage.";
const ICMP_HEADER_BYTES: usize = 8;
const IPV6_HEADER_BYTES: usize = 40;

pub(super) const ECHO_REQUEST_V4: u8 = 8;
pub(super) const ECHO_REPLY_V4: u8 = 0;
pub(super) const ECHO_REQUEST_V6: u8 = 128;
pub(super) const ECHO_REPLY_V6: u8 = 129;
const TIME_EXCEEDED_V4: u8 = 11;
const UNREACHABLE_V4: u8 = 3;
const PORT_UNREACHABLE_V4: u8 = 3;
const TIME_EXCEEDED_V6: u8 = 3;
const UNREACHABLE_V6: u8 = 1;
const PORT_UNREACHABLE_V6: u8 = 4;

const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;

fn fill_pattern(bytes: &mut [u8]) {
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = MAGIC[i % MAGIC.len()];
    }
}

/// UDP probe payload: `seq`, `!seq`, then the pattern.
pub(super) fn udp_payload(seq: u16) -> Vec<u8> {
    let mut payload = vec![0u8; PAYLOAD_BYTES];
    payload[0..2].copy_from_slice(&seq.to_be_bytes());
    payload[2..4].copy_from_slice(&(!seq).to_be_bytes());
    fill_pattern(&mut payload[4..]);
    payload
}

/// The sequence number of a quoted UDP probe payload, if it is ours. Routers quote at
/// least 8 bytes past the IP header (RFC 792), usually much more (RFC 1812 §4.3.2.3);
/// with only the UDP header quoted there is nothing to read and the answer is matched
/// to the one probe outstanding.
pub(super) fn udp_quoted_seq(quoted: &[u8]) -> Option<u16> {
    let seq = u16::from_be_bytes([*quoted.first()?, *quoted.get(1)?]);
    let check = u16::from_be_bytes([*quoted.get(2)?, *quoted.get(3)?]);
    (check == !seq && quoted.get(4..8).is_none_or(|m| m == &MAGIC[..4])).then_some(seq)
}

/// ICMP echo request whose checksum does not depend on `seq`: the first payload word
/// is `!seq`. For ICMPv6 the kernel computes the checksum (it covers a pseudo-header).
pub(super) fn echo_request(ipv6: bool, identifier: u16, seq: u16) -> Vec<u8> {
    let mut payload = vec![0u8; PAYLOAD_BYTES];
    payload[0..2].copy_from_slice(&(!seq).to_be_bytes());
    fill_pattern(&mut payload[2..]);
    echo_packet(ipv6, identifier, seq, &payload)
}

/// The checksum every IPv4 echo probe with `identifier` carries.
pub(super) fn echo_checksum_v4(identifier: u16) -> u16 {
    let packet = echo_request(false, identifier, 0);
    u16::from_be_bytes([packet[2], packet[3]])
}

/// The (identifier, sequence) of an echo message of `expected_type` at the start of `icmp`.
pub(super) fn echo_fields(icmp: &[u8], expected_type: u8) -> Option<(u16, u16)> {
    if icmp.len() < ICMP_HEADER_BYTES || icmp[0] != expected_type {
        return None;
    }
    Some((
        u16::from_be_bytes([icmp[4], icmp[5]]),
        u16::from_be_bytes([icmp[6], icmp[7]]),
    ))
}

/// What an ICMP error (type, code) means for a trace.
pub(super) fn classify_error(ipv6: bool, icmp_type: u8, code: u8) -> Option<ReplyKind> {
    match (ipv6, icmp_type, code) {
        (false, TIME_EXCEEDED_V4, 0) | (true, TIME_EXCEEDED_V6, 0) => Some(ReplyKind::TimeExceeded),
        (false, UNREACHABLE_V4, PORT_UNREACHABLE_V4)
        | (true, UNREACHABLE_V6, PORT_UNREACHABLE_V6) => Some(ReplyKind::PortUnreachable),
        (false, UNREACHABLE_V4, _) | (true, UNREACHABLE_V6, _) => Some(ReplyKind::Unreachable),
        _ => None,
    }
}

/// An ICMP message read from a raw socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawIcmp<'a> {
    /// Sender (from the IPv4 header; for IPv6 the caller supplies the socket's peer).
    pub source: Option<IpAddr>,
    pub icmp_type: u8,
    pub code: u8,
    /// The ICMP message itself (header included).
    pub icmp: &'a [u8],
}

/// Splits what a raw ICMP socket delivers: IPv4 sockets include the IP header, IPv6 ones do not.
pub(super) fn raw_icmp(bytes: &[u8], ipv6: bool) -> Option<RawIcmp<'_>> {
    let (source, icmp) = if ipv6 {
        (None, bytes)
    } else {
        let header_len = usize::from(*bytes.first()? & 0x0f) * 4;
        if bytes.first()? >> 4 != 4 || header_len < 20 {
            return None;
        }
        let src: [u8; 4] = bytes.get(12..16)?.try_into().ok()?;
        (
            Some(IpAddr::V4(Ipv4Addr::from(src))),
            bytes.get(header_len..)?,
        )
    };
    if icmp.len() < ICMP_HEADER_BYTES {
        return None;
    }
    Some(RawIcmp {
        source,
        icmp_type: icmp[0],
        code: icmp[1],
        icmp,
    })
}

/// The packet an ICMP error quotes: (protocol, destination, transport bytes).
pub(super) fn quoted_packet(icmp: &[u8], ipv6: bool) -> Option<(u8, IpAddr, &[u8])> {
    let inner = icmp.get(ICMP_HEADER_BYTES..)?;
    if ipv6 {
        if inner.first()? >> 4 != 6 {
            return None;
        }
        let dst: [u8; 16] = inner.get(24..40)?.try_into().ok()?;
        // Extension headers are not walked: probes are sent without them.
        Some((
            *inner.get(6)?,
            IpAddr::V6(Ipv6Addr::from(dst)),
            inner.get(IPV6_HEADER_BYTES..)?,
        ))
    } else {
        let header_len = usize::from(*inner.first()? & 0x0f) * 4;
        if inner.first()? >> 4 != 4 || header_len < 20 {
            return None;
        }
        let dst: [u8; 4] = inner.get(16..20)?.try_into().ok()?;
        Some((
            *inner.get(9)?,
            IpAddr::V4(Ipv4Addr::from(dst)),
            inner.get(header_len..)?,
        ))
    }
}

/// TCP SYN probe (20-byte header, no options) with a correct checksum.
pub(super) fn tcp_syn(
    source: Ipv4Addr,
    destination: Ipv4Addr,
    source_port: u16,
    destination_port: u16,
    sequence: u32,
) -> Vec<u8> {
    tcp_segment(
        source,
        destination,
        (source_port, destination_port),
        sequence,
        TCP_SYN,
    )
}

/// TCP RST closing the half-open connection a SYN-ACK opened (`sequence` = its
/// acknowledgement number).
pub(super) fn tcp_rst(
    source: Ipv4Addr,
    destination: Ipv4Addr,
    source_port: u16,
    destination_port: u16,
    sequence: u32,
) -> Vec<u8> {
    tcp_segment(
        source,
        destination,
        (source_port, destination_port),
        sequence,
        TCP_RST,
    )
}

fn tcp_segment(
    source: Ipv4Addr,
    destination: Ipv4Addr,
    (source_port, destination_port): (u16, u16),
    sequence: u32,
    flags: u8,
) -> Vec<u8> {
    let mut segment = vec![0u8; 20];
    segment[0..2].copy_from_slice(&source_port.to_be_bytes());
    segment[2..4].copy_from_slice(&destination_port.to_be_bytes());
    segment[4..8].copy_from_slice(&sequence.to_be_bytes());
    segment[12] = 5 << 4; // data offset: 5 words
    segment[13] = flags;
    if flags & TCP_SYN != 0 {
        segment[14..16].copy_from_slice(&64_240u16.to_be_bytes()); // window
    }
    let mut pseudo = Vec::with_capacity(12 + segment.len());
    pseudo.extend_from_slice(&source.octets());
    pseudo.extend_from_slice(&destination.octets());
    pseudo.extend_from_slice(&[0, libc::IPPROTO_TCP as u8]);
    pseudo.extend_from_slice(&(segment.len() as u16).to_be_bytes());
    pseudo.extend_from_slice(&segment);
    let checksum = internet_checksum(&pseudo);
    segment[16..18].copy_from_slice(&checksum.to_be_bytes());
    segment
}

/// A TCP segment read from a raw IPv4 TCP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TcpReply {
    pub source: Ipv4Addr,
    pub source_port: u16,
    pub destination_port: u16,
    pub acknowledgement: u32,
    pub kind: ReplyKind,
}

/// Parses a SYN-ACK or RST (with ACK) from what a raw IPv4 TCP socket delivers.
pub(super) fn tcp_reply(bytes: &[u8]) -> Option<TcpReply> {
    let header_len = usize::from(*bytes.first()? & 0x0f) * 4;
    if bytes.first()? >> 4 != 4 || header_len < 20 || *bytes.get(9)? != libc::IPPROTO_TCP as u8 {
        return None;
    }
    let src: [u8; 4] = bytes.get(12..16)?.try_into().ok()?;
    let tcp = bytes.get(header_len..header_len + 20)?;
    let flags = tcp[13];
    let kind = if flags & (TCP_SYN | TCP_ACK) == TCP_SYN | TCP_ACK {
        ReplyKind::SynAck
    } else if flags & (TCP_RST | TCP_ACK) == TCP_RST | TCP_ACK {
        ReplyKind::Reset
    } else {
        return None;
    };
    Some(TcpReply {
        source: Ipv4Addr::from(src),
        source_port: u16::from_be_bytes([tcp[0], tcp[1]]),
        destination_port: u16::from_be_bytes([tcp[2], tcp[3]]),
        acknowledgement: u32::from_be_bytes([tcp[8], tcp[9], tcp[10], tcp[11]]),
        kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_checksum_is_the_same_for_every_sequence_number() {
        let first = echo_request(false, 0x4242, 0);
        for seq in [1u16, 2, 255, 256, 0x7fff, 0xfffe, 0xffff] {
            let packet = echo_request(false, 0x4242, seq);
            assert_eq!(packet[0..4], first[0..4], "seq {seq}: type, code, checksum");
            assert_eq!(packet[4..6], first[4..6], "identifier");
            assert_eq!(
                internet_checksum(&packet),
                0,
                "valid checksum for seq {seq}"
            );
            assert_eq!(echo_fields(&packet, ECHO_REQUEST_V4), Some((0x4242, seq)));
        }
        assert_eq!(
            echo_checksum_v4(0x4242),
            u16::from_be_bytes([first[2], first[3]])
        );
    }

    #[test]
    fn udp_payload_sums_to_a_constant_and_round_trips() {
        let sum = |p: &[u8]| {
            let mut with_zero_checksum = p.to_vec();
            with_zero_checksum.extend_from_slice(&[0, 0]);
            internet_checksum(&with_zero_checksum)
        };
        let reference = sum(&udp_payload(0));
        for seq in [1u16, 77, 0xffff] {
            let payload = udp_payload(seq);
            assert_eq!(payload.len(), PAYLOAD_BYTES);
            assert_eq!(sum(&payload), reference, "seq {seq}");
            assert_eq!(udp_quoted_seq(&payload), Some(seq));
            assert_eq!(udp_quoted_seq(&payload[..4]), Some(seq), "short quote");
        }
        assert_eq!(udp_quoted_seq(&[]), None);
        assert_eq!(udp_quoted_seq(&[0, 1, 0, 1]), None, "not ours");
    }

    #[test]
    fn raw_time_exceeded_quoting_an_echo_parses() {
        let probe = echo_request(false, 7, 9);
        let mut quoted_ip = vec![0u8; 20];
        quoted_ip[0] = 0x45;
        quoted_ip[9] = 1;
        quoted_ip[16..20].copy_from_slice(&[192, 0, 2, 9]);
        let mut outer = vec![0u8; 20];
        outer[0] = 0x45;
        outer[12..16].copy_from_slice(&[198, 51, 100, 1]);
        outer.extend_from_slice(&[TIME_EXCEEDED_V4, 0, 0, 0, 0, 0, 0, 0]);
        outer.extend_from_slice(&quoted_ip);
        outer.extend_from_slice(&probe[..8]);
        let message = raw_icmp(&outer, false).unwrap();
        assert_eq!(
            message.source,
            Some(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)))
        );
        assert_eq!(
            classify_error(false, message.icmp_type, message.code),
            Some(ReplyKind::TimeExceeded)
        );
        let (protocol, dst, transport) = quoted_packet(message.icmp, false).unwrap();
        assert_eq!(protocol, 1);
        assert_eq!(dst, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)));
        assert_eq!(echo_fields(transport, ECHO_REQUEST_V4), Some((7, 9)));
        // Truncations never panic.
        for len in 0..outer.len() {
            if let Some(m) = raw_icmp(&outer[..len], false) {
                let _ = quoted_packet(m.icmp, false);
            }
        }
    }

    #[test]
    fn icmp_errors_classify() {
        assert_eq!(
            classify_error(false, 3, 3),
            Some(ReplyKind::PortUnreachable)
        );
        assert_eq!(classify_error(false, 3, 1), Some(ReplyKind::Unreachable));
        assert_eq!(classify_error(true, 1, 4), Some(ReplyKind::PortUnreachable));
        assert_eq!(classify_error(true, 3, 0), Some(ReplyKind::TimeExceeded));
        assert_eq!(
            classify_error(false, 11, 1),
            None,
            "reassembly time exceeded"
        );
        assert_eq!(classify_error(false, 0, 0), None);
    }

    #[test]
    fn syn_checksum_verifies_and_replies_parse() {
        let src = Ipv4Addr::new(10, 0, 0, 1);
        let dst = Ipv4Addr::new(10, 0, 0, 2);
        let syn = tcp_syn(src, dst, 40_000, 80, 0x1000_0005);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&src.octets());
        pseudo.extend_from_slice(&dst.octets());
        pseudo.extend_from_slice(&[0, 6, 0, 20]);
        pseudo.extend_from_slice(&syn);
        assert_eq!(internet_checksum(&pseudo), 0);
        let rst = tcp_rst(src, dst, 40_000, 80, 0x1000_0006);
        assert_eq!(rst[13], TCP_RST);
        pseudo.truncate(12);
        pseudo.extend_from_slice(&rst);
        assert_eq!(internet_checksum(&pseudo), 0);

        let mut reply = vec![0u8; 20];
        reply[0] = 0x45;
        reply[9] = 6;
        reply[12..16].copy_from_slice(&dst.octets());
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&80u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&40_000u16.to_be_bytes());
        tcp[8..12].copy_from_slice(&0x1000_0006u32.to_be_bytes());
        tcp[13] = TCP_RST | TCP_ACK;
        reply.extend_from_slice(&tcp);
        let parsed = tcp_reply(&reply).unwrap();
        assert_eq!(parsed.kind, ReplyKind::Reset);
        assert_eq!(parsed.acknowledgement, 0x1000_0006);
        assert_eq!((parsed.source_port, parsed.destination_port), (80, 40_000));
        reply[33] = TCP_SYN;
        assert_eq!(
            tcp_reply(&reply),
            None,
            "a bare SYN is a probe, not a reply"
        );
        reply[33] = TCP_SYN | TCP_ACK;
        assert_eq!(tcp_reply(&reply).unwrap().kind, ReplyKind::SynAck);
        assert_eq!(tcp_reply(&reply[..30]), None);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_answers_never_panic_the_parsers(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..160),
            ipv6: bool,
        ) {
            let _ = udp_quoted_seq(&bytes);
            let _ = echo_fields(&bytes, ECHO_REPLY_V4);
            let _ = tcp_reply(&bytes);
            if let Some(message) = raw_icmp(&bytes, ipv6) {
                let _ = classify_error(ipv6, message.icmp_type, message.code);
                if let Some((_, _, transport)) = quoted_packet(message.icmp, ipv6) {
                    let _ = echo_fields(transport, ECHO_REQUEST_V4);
                }
            }
        }
    }
}
