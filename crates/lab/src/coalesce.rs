//! Coalescing of released UDP datagrams into segmentation-offloaded frames.
//!
//! When the forwarder writes a batch of due frames, a run of consecutive UDP datagrams of one
//! flow with equal payload sizes (the last may be shorter) is written as one frame that the
//! kernel carries whole through the next hops and splits back into the same datagrams at the
//! receiving host (UDP segmentation offload, `UDP_SEGMENT`). Every datagram keeps its own
//! release time: only datagrams already due together are joined. This is what lets UDP senders
//! that write one datagram per system call cross a five-hop lab at line rate: without it each
//! hop's routing and veth work is paid per datagram.
//!
//! Frames here start with the 10-byte virtio-net header of `PACKET_VNET_HDR`.

use std::borrow::Cow;

/// Bytes of the virtio-net header (`PACKET_VNET_HDR`) before every frame the forwarder reads
/// and writes: it carries the segmentation offload of a frame that stands for several packets.
pub(crate) const VNET_HEADER_BYTES: usize = 10;
pub(crate) const ETHERNET_HEADER_BYTES: usize = 14;
pub(crate) const UDP_HEADER_BYTES: usize = 8;
const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
const ETHERTYPE_IPV6: [u8; 2] = [0x86, 0xdd];
const PROTOCOL_UDP: u8 = 17;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
pub(crate) const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
pub(crate) const VIRTIO_NET_HDR_GSO_UDP_L4: u8 = 5;
/// Datagrams per coalesced frame (the kernel accepts up to 128 segments).
const MAX_SEGMENTS: usize = 64;
/// Largest coalesced frame: an IPv4 total length is 16 bits.
const MAX_IP_BYTES: usize = 65_535;

/// A plain (not offloaded) UDP datagram in a frame.
struct Datagram<'a> {
    frame: &'a [u8],
    /// Offset of the IP header in `frame` and of the UDP header.
    ip_start: usize,
    udp_start: usize,
    ipv6: bool,
}

impl<'a> Datagram<'a> {
    /// The datagram in `frame`, when it is one this module may join: its checksum left to
    /// offload (a datagram with a full checksum, maybe corrupted on purpose, keeps it), IPv4
    /// without options and not a fragment, or IPv6 with UDP as the first next header, lengths
    /// consistent.
    fn parse(frame: &'a [u8]) -> Option<Self> {
        let vnet = frame.get(..VNET_HEADER_BYTES)?;
        if vnet[0] & VIRTIO_NET_HDR_F_NEEDS_CSUM == 0 || vnet[1] != VIRTIO_NET_HDR_GSO_NONE {
            return None;
        }
        let ip_start = VNET_HEADER_BYTES + ETHERNET_HEADER_BYTES;
        let ethertype = frame.get(ip_start - 2..ip_start)?;
        let ip = frame.get(ip_start..)?;
        let (ipv6, udp_start, ip_bytes) = if ethertype == ETHERTYPE_IPV4 {
            let header = ip.get(..20)?;
            let fragment = u16::from_be_bytes([header[6], header[7]]) & 0x3fff;
            if header[0] != 0x45 || header[9] != PROTOCOL_UDP || fragment != 0 {
                return None;
            }
            (
                false,
                ip_start + 20,
                u16::from_be_bytes([header[2], header[3]]) as usize,
            )
        } else if ethertype == ETHERTYPE_IPV6 {
            let header = ip.get(..40)?;
            if header[0] >> 4 != 6 || header[6] != PROTOCOL_UDP {
                return None;
            }
            (
                true,
                ip_start + 40,
                40 + u16::from_be_bytes([header[4], header[5]]) as usize,
            )
        } else {
            return None;
        };
        let udp = frame.get(udp_start..udp_start + UDP_HEADER_BYTES)?;
        let udp_bytes = u16::from_be_bytes([udp[4], udp[5]]) as usize;
        if ip_start + ip_bytes != frame.len()
            || udp_start + udp_bytes != frame.len()
            || udp_bytes <= UDP_HEADER_BYTES
        {
            return None;
        }
        Some(Datagram {
            frame,
            ip_start,
            udp_start,
            ipv6,
        })
    }

    fn payload(&self) -> &'a [u8] {
        &self.frame[self.udp_start + UDP_HEADER_BYTES..]
    }

    /// Same Ethernet addresses, IP addresses, protocol fields and ports: the same flow, which
    /// segmentation rebuilds from one header. Lengths, IPv4 identification and checksums
    /// differ per datagram and are rebuilt.
    fn same_flow(&self, other: &Datagram) -> bool {
        if self.ipv6 != other.ipv6 {
            return false;
        }
        let same =
            |range: std::ops::Range<usize>| self.frame.get(range.clone()) == other.frame.get(range);
        let ip = self.ip_start;
        let addresses_and_fields = if self.ipv6 {
            same(ip..ip + 4) && same(ip + 6..ip + 40)
        } else {
            same(ip..ip + 2) && same(ip + 6..ip + 10) && same(ip + 12..ip + 20)
        };
        same(VNET_HEADER_BYTES..ip)
            && addresses_and_fields
            && same(self.udp_start..self.udp_start + 4)
    }
}

/// One's-complement sum of `bytes` as 16-bit big-endian words, not folded.
fn sum_words(bytes: &[u8]) -> u32 {
    bytes
        .chunks(2)
        .map(|pair| u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]) as u32)
        .sum()
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// One frame standing for `first` and `rest` (same flow; every payload but the last as long
/// as the first's), with the virtio-net header asking the kernel to segment it.
fn join(first: &Datagram, rest: &[Datagram]) -> Vec<u8> {
    let segment_bytes = first.payload().len();
    let payload_bytes: usize =
        segment_bytes + rest.iter().map(|d| d.payload().len()).sum::<usize>();
    let udp_start = first.udp_start;
    let mut frame = Vec::with_capacity(udp_start + UDP_HEADER_BYTES + payload_bytes);
    frame.extend_from_slice(&first.frame[..udp_start + UDP_HEADER_BYTES]);
    frame.extend_from_slice(first.payload());
    for datagram in rest {
        frame.extend_from_slice(datagram.payload());
    }
    let udp_bytes = (UDP_HEADER_BYTES + payload_bytes) as u16;
    let ip = first.ip_start;
    let (addresses, ip_header_bytes) = if first.ipv6 {
        frame[ip + 4..ip + 6].copy_from_slice(&udp_bytes.to_be_bytes());
        (ip + 8..ip + 40, 40)
    } else {
        let total = (20 + UDP_HEADER_BYTES + payload_bytes) as u16;
        frame[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
        frame[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
        let checksum = !fold(sum_words(&frame[ip..ip + 20]));
        frame[ip + 10..ip + 12].copy_from_slice(&checksum.to_be_bytes());
        (ip + 12..ip + 20, 20)
    };
    frame[udp_start + 4..udp_start + 6].copy_from_slice(&udp_bytes.to_be_bytes());
    // A checksum left to offload holds the pseudo-header sum (not complemented); the kernel
    // adjusts it to each segment's length and the payload is summed where it is needed.
    let pseudo_header = sum_words(&frame[addresses]) + PROTOCOL_UDP as u32 + udp_bytes as u32;
    frame[udp_start + 6..udp_start + 8].copy_from_slice(&fold(pseudo_header).to_be_bytes());
    let header_bytes = (udp_start - VNET_HEADER_BYTES + UDP_HEADER_BYTES) as u16;
    let checksum_start = (ETHERNET_HEADER_BYTES + ip_header_bytes) as u16;
    let vnet = &mut frame[..VNET_HEADER_BYTES];
    vnet[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    vnet[1] = VIRTIO_NET_HDR_GSO_UDP_L4;
    vnet[2..4].copy_from_slice(&header_bytes.to_ne_bytes());
    vnet[4..6].copy_from_slice(&(segment_bytes as u16).to_ne_bytes());
    vnet[6..8].copy_from_slice(&checksum_start.to_ne_bytes());
    vnet[8..10].copy_from_slice(&6u16.to_ne_bytes());
    frame
}

/// The frames to write for `frames` (each with the packets it carries), in order: runs of
/// joinable UDP datagrams become one frame carrying all of them; everything else is as given.
pub fn coalesce_udp<'a>(frames: &[(&'a [u8], u64)]) -> Vec<(Cow<'a, [u8]>, u64)> {
    let mut out = Vec::with_capacity(frames.len());
    let mut index = 0;
    while index < frames.len() {
        let (frame, segments) = frames[index];
        index += 1;
        let Some(first) = Datagram::parse(frame) else {
            out.push((Cow::Borrowed(frame), segments));
            continue;
        };
        let segment_bytes = first.payload().len();
        let mut rest: Vec<Datagram> = Vec::new();
        let mut ip_bytes = frame.len() - first.ip_start;
        while let Some(next) = frames.get(index).and_then(|(f, _)| Datagram::parse(f)) {
            let payload_bytes = next.payload().len();
            if rest.len() + 1 >= MAX_SEGMENTS
                || !first.same_flow(&next)
                || payload_bytes > segment_bytes
                || ip_bytes + payload_bytes > MAX_IP_BYTES
            {
                break;
            }
            ip_bytes += payload_bytes;
            rest.push(next);
            index += 1;
            if payload_bytes < segment_bytes {
                break; // a shorter datagram can only be the last segment
            }
        }
        if rest.is_empty() {
            out.push((Cow::Borrowed(frame), segments));
        } else {
            out.push((Cow::Owned(join(&first, &rest)), 1 + rest.len() as u64));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame with one UDP datagram of `payload`, its checksum left to offload.
    fn datagram(ipv6: bool, source_port: u16, payload: &[u8], id: u16) -> Vec<u8> {
        let mut frame = vec![0u8; VNET_HEADER_BYTES];
        frame[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
        frame.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
        let udp_bytes = (UDP_HEADER_BYTES + payload.len()) as u16;
        if ipv6 {
            frame.extend_from_slice(&ETHERTYPE_IPV6);
            frame.extend_from_slice(&[0x60, 0, 0, 0]);
            frame.extend_from_slice(&udp_bytes.to_be_bytes());
            frame.extend_from_slice(&[PROTOCOL_UDP, 64]);
            frame.extend_from_slice(&[0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            frame.extend_from_slice(&[0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        } else {
            frame.extend_from_slice(&ETHERTYPE_IPV4);
            let total = 20 + udp_bytes;
            frame.extend_from_slice(&[0x45, 0]);
            frame.extend_from_slice(&total.to_be_bytes());
            frame.extend_from_slice(&id.to_be_bytes());
            frame.extend_from_slice(&[0x40, 0, 64, PROTOCOL_UDP, 0, 0]);
            frame.extend_from_slice(&[10, 77, 0, 1, 10, 77, 4, 2]);
        }
        frame.extend_from_slice(&source_port.to_be_bytes());
        frame.extend_from_slice(&5201u16.to_be_bytes());
        frame.extend_from_slice(&udp_bytes.to_be_bytes());
        frame.extend_from_slice(&[0, 0]);
        frame.extend_from_slice(payload);
        frame
    }

    fn joined(frames: &[Vec<u8>]) -> Vec<(Vec<u8>, u64)> {
        let input: Vec<(&[u8], u64)> = frames.iter().map(|f| (f.as_slice(), 1)).collect();
        coalesce_udp(&input)
            .into_iter()
            .map(|(frame, segments)| (frame.into_owned(), segments))
            .collect()
    }

    #[test]
    fn a_run_of_one_flow_becomes_one_offloaded_frame_with_every_payload() {
        let payloads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 1000]).collect();
        let mut frames: Vec<Vec<u8>> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| datagram(false, 4000, p, i as u16))
            .collect();
        frames.push(datagram(false, 4000, &[9; 300], 5)); // shorter: the last segment
        let out = joined(&frames);
        assert_eq!(out.len(), 1);
        let (frame, segments) = &out[0];
        assert_eq!(*segments, 6);
        let vnet = &frame[..VNET_HEADER_BYTES];
        assert_eq!((vnet[0], vnet[1]), (1, VIRTIO_NET_HDR_GSO_UDP_L4));
        assert_eq!(u16::from_ne_bytes([vnet[4], vnet[5]]), 1000, "gso_size");
        assert_eq!(
            u16::from_ne_bytes([vnet[6], vnet[7]]),
            14 + 20,
            "csum_start"
        );
        assert_eq!(
            u16::from_ne_bytes([vnet[2], vnet[3]]),
            14 + 20 + 8,
            "hdr_len"
        );
        let ip = &frame[VNET_HEADER_BYTES + 14..];
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, 20 + 8 + 5300);
        assert_eq!(fold(sum_words(&ip[..20])), 0xffff, "IPv4 header checksum");
        assert_eq!(u16::from_be_bytes([ip[24], ip[25]]) as usize, 8 + 5300);
        // Pseudo-header: addresses 10.77.0.1 and 10.77.4.2, protocol 17, UDP length 5308.
        let expected = fold(0x0a4d + 0x0001 + 0x0a4d + 0x0402 + 17 + 5308);
        assert_eq!(u16::from_be_bytes([ip[26], ip[27]]), expected);
        let payload: Vec<u8> = payloads.concat().into_iter().chain([9; 300]).collect();
        assert_eq!(&ip[28..], payload.as_slice());
    }

    #[test]
    fn flows_sizes_and_non_udp_frames_break_runs() {
        let frames = vec![
            datagram(true, 4000, &[1; 500], 0),
            datagram(true, 4000, &[2; 500], 0),
            datagram(true, 4001, &[3; 500], 0), // another flow
            datagram(true, 4001, &[4; 600], 0), // longer than the run's segments
            datagram(false, 4001, &[5; 600], 0),
        ];
        let mut tcp = datagram(false, 4000, &[6; 100], 0);
        tcp[VNET_HEADER_BYTES + 14 + 9] = 6;
        let mut checksummed = datagram(false, 4000, &[7; 100], 0);
        checksummed[0] = 0;
        let mut with_others = frames.clone();
        with_others.extend([tcp.clone(), checksummed.clone(), checksummed.clone()]);
        let out = joined(&with_others);
        let segments: Vec<u64> = out.iter().map(|(_, s)| *s).collect();
        assert_eq!(segments, vec![2, 1, 1, 1, 1, 1, 1]);
        assert_eq!(out[6].0, checksummed, "a full checksum is kept");
        assert_eq!(out[1].0, frames[2], "a lone datagram is written as it came");
        assert_eq!(out[4].0, tcp);
        let ip = &out[0].0[VNET_HEADER_BYTES + 14..];
        assert_eq!(
            u16::from_be_bytes([ip[4], ip[5]]),
            8 + 1000,
            "IPv6 payload length"
        );
        assert_eq!(u16::from_ne_bytes([out[0].0[6], out[0].0[7]]), 14 + 40);
    }

    #[test]
    fn runs_stop_at_the_segment_and_size_limits() {
        let frames: Vec<Vec<u8>> = (0..130).map(|i| datagram(false, 1, &[0; 64], i)).collect();
        let segments: Vec<u64> = joined(&frames).iter().map(|(_, s)| *s).collect();
        assert_eq!(segments, vec![64, 64, 2]);
        let big: Vec<Vec<u8>> = (0..50).map(|i| datagram(false, 1, &[0; 1472], i)).collect();
        let out = joined(&big);
        assert!(out
            .iter()
            .all(|(f, _)| f.len() - VNET_HEADER_BYTES - 14 <= MAX_IP_BYTES));
        assert_eq!(out.iter().map(|(_, s)| s).sum::<u64>(), 50);
    }
}
