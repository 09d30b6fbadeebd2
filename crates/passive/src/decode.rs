//! From a link-layer frame to the transport fields flow analysis needs. Lengths come from
//! the IP header, not from the bytes captured, so a frame cut by a short snapshot length
//! still counts its whole payload.

use std::net::{IpAddr, SocketAddr};

use etherparse::{
    EtherType, LaxNetSlice, LaxSlicedPacket, TcpHeader, TcpOptionElement, UdpHeaderSlice,
};

/// pcap link types this reader understands (tcpdump.org's LINKTYPE_ values).
pub mod link {
    pub const NULL: i32 = 0;
    pub const ETHERNET: i32 = 1;
    pub const RAW: i32 = 101;
    pub const LINUX_SLL: i32 = 113;
    pub const IPV4: i32 = 228;
    pub const IPV6: i32 = 229;
    pub const LINUX_SLL2: i32 = 276;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transport {
    Tcp,
    Udp,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpFlags {
    pub syn: bool,
    pub ack: bool,
    pub fin: bool,
    pub rst: bool,
    pub psh: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSegment {
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
    /// The raw window field (before scaling).
    pub window: u16,
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    /// TCP timestamps option (RFC 7323): (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
}

/// A TCP or UDP packet, as far as flow analysis cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    pub transport: Transport,
    pub source: SocketAddr,
    pub destination: SocketAddr,
    /// Transport payload bytes as the IP header declares them.
    pub payload_len: u32,
    pub tcp: Option<TcpSegment>,
    /// The capture holds fewer bytes than the frame had (snapshot length).
    pub truncated: bool,
    /// The IP header gave no length (0), as captures of TSO super-segments do; the
    /// payload length is then what was captured.
    pub length_from_capture: bool,
}

/// Why a frame yields no packet; counted, never fatal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Skipped {
    UnknownLinkType,
    NotIp,
    NotTcpOrUdp,
    /// A fragment other than the first: ports are in the first.
    Fragment,
    /// The capture cut the frame before the end of the transport header.
    HeaderTruncated,
    Malformed,
}

pub fn decode(link_type: i32, data: &[u8], original_len: u32) -> Result<Packet, Skipped> {
    let sliced = match link_type {
        link::ETHERNET => LaxSlicedPacket::from_ethernet(data).map_err(|_| Skipped::Malformed)?,
        link::LINUX_SLL => ether_typed(data, 16, 14)?,
        link::LINUX_SLL2 => ether_typed(data, 20, 0)?,
        link::NULL => {
            // The address family, in the capturing host's byte order.
            let family = data.get(..4).ok_or(Skipped::Malformed)?;
            let family = u32::from_le_bytes(family.try_into().expect("4 bytes"))
                .min(u32::from_be_bytes(family.try_into().expect("4 bytes")));
            match family {
                2 => LaxSlicedPacket::from_ether_type(EtherType::IPV4, &data[4..]),
                // BSDs disagree on AF_INET6: 24, 28 or 30.
                24 | 28 | 30 => LaxSlicedPacket::from_ether_type(EtherType::IPV6, &data[4..]),
                _ => return Err(Skipped::NotIp),
            }
        }
        link::RAW | link::IPV4 | link::IPV6 | 12 | 14 => {
            LaxSlicedPacket::from_ip(data).map_err(|_| Skipped::NotIp)?
        }
        _ => return Err(Skipped::UnknownLinkType),
    };
    let truncated = (data.len() as u64) < original_len as u64;
    let (source_ip, destination_ip, declared_len, payload) = match &sliced.net {
        Some(LaxNetSlice::Ipv4(ipv4)) => {
            let header = ipv4.header();
            let payload = ipv4.payload();
            if payload.fragmented && header.fragments_offset().value() != 0 {
                return Err(Skipped::Fragment);
            }
            let header_len = u32::from(header.ihl()) * 4;
            let total_len = u32::from(header.total_len());
            let declared = total_len.checked_sub(header_len).filter(|_| total_len > 0);
            (
                IpAddr::from(header.source_addr()),
                IpAddr::from(header.destination_addr()),
                declared,
                payload,
            )
        }
        Some(LaxNetSlice::Ipv6(ipv6)) => {
            let header = ipv6.header();
            let payload = ipv6.payload();
            if payload.fragmented {
                return Err(Skipped::Fragment);
            }
            let extensions_len = ipv6.extensions().slice().len() as u32;
            let payload_length = u32::from(header.payload_length());
            let declared = payload_length
                .checked_sub(extensions_len)
                .filter(|_| payload_length > 0);
            (
                IpAddr::from(header.source_addr()),
                IpAddr::from(header.destination_addr()),
                declared,
                payload,
            )
        }
        _ => return Err(Skipped::NotIp),
    };
    let transport_bytes = payload.payload;
    let transport_len = declared_len.unwrap_or(transport_bytes.len() as u32);
    let length_from_capture = declared_len.is_none();
    match payload.ip_number {
        etherparse::IpNumber::TCP => {
            let (header, header_len) = tcp_header(transport_bytes, truncated)?;
            let mut segment = TcpSegment {
                seq: header.sequence_number,
                ack: header.acknowledgment_number,
                flags: TcpFlags {
                    syn: header.syn,
                    ack: header.ack,
                    fin: header.fin,
                    rst: header.rst,
                    psh: header.psh,
                },
                window: header.window_size,
                mss: None,
                window_scale: None,
                timestamps: None,
            };
            for option in header.options_iterator().flatten() {
                match option {
                    TcpOptionElement::MaximumSegmentSize(mss) => segment.mss = Some(mss),
                    TcpOptionElement::WindowScale(shift) => segment.window_scale = Some(shift),
                    TcpOptionElement::Timestamp(value, echo) => {
                        segment.timestamps = Some((value, echo))
                    }
                    _ => {}
                }
            }
            Ok(Packet {
                transport: Transport::Tcp,
                source: SocketAddr::new(source_ip, header.source_port),
                destination: SocketAddr::new(destination_ip, header.destination_port),
                payload_len: transport_len.saturating_sub(header_len),
                tcp: Some(segment),
                truncated,
                length_from_capture,
            })
        }
        etherparse::IpNumber::UDP => {
            let header = UdpHeaderSlice::from_slice(transport_bytes).map_err(|_| {
                if truncated {
                    Skipped::HeaderTruncated
                } else {
                    Skipped::Malformed
                }
            })?;
            Ok(Packet {
                transport: Transport::Udp,
                source: SocketAddr::new(source_ip, header.source_port()),
                destination: SocketAddr::new(destination_ip, header.destination_port()),
                payload_len: transport_len.saturating_sub(8),
                tcp: None,
                truncated,
                length_from_capture,
            })
        }
        _ => Err(Skipped::NotTcpOrUdp),
    }
}

/// The TCP header and its length. A snapshot length that cuts into the options (long
/// SACK blocks, say) still leaves the fixed 20 bytes, which are read alone: the options
/// are lost, the sequence analysis is not.
fn tcp_header(bytes: &[u8], truncated: bool) -> Result<(TcpHeader, u32), Skipped> {
    const FIXED_LEN: usize = 20;
    match TcpHeader::from_slice(bytes) {
        Ok((header, _)) => {
            let header_len = header.header_len() as u32;
            Ok((header, header_len))
        }
        Err(etherparse::err::tcp::HeaderSliceError::Len(_)) if truncated => {
            let fixed = bytes.get(..FIXED_LEN).ok_or(Skipped::HeaderTruncated)?;
            let header_len = u32::from(fixed[12] >> 4) * 4;
            let mut without_options = [0u8; FIXED_LEN];
            without_options.copy_from_slice(fixed);
            // Data offset 5 words: the header ends where the capture does.
            without_options[12] = (5 << 4) | (fixed[12] & 0x0f);
            let (header, _) =
                TcpHeader::from_slice(&without_options).map_err(|_| Skipped::Malformed)?;
            Ok((header, header_len))
        }
        Err(_) => Err(Skipped::Malformed),
    }
}

/// Linux cooked captures: the protocol type at `type_offset`, the network layer after
/// `header_len` bytes.
fn ether_typed(
    data: &[u8],
    header_len: usize,
    type_offset: usize,
) -> Result<LaxSlicedPacket<'_>, Skipped> {
    let protocol = data
        .get(type_offset..type_offset + 2)
        .ok_or(Skipped::Malformed)?;
    let payload = data.get(header_len..).ok_or(Skipped::Malformed)?;
    let ether_type = EtherType(u16::from_be_bytes([protocol[0], protocol[1]]));
    Ok(LaxSlicedPacket::from_ether_type(ether_type, payload))
}
