//! TWAMP-Light (RFC 5357 unauthenticated mode) and STAMP (RFC 8762 unauthenticated
//! mode, with RFC 8972's SSID and TLVs) test packets. Pure codec: no sockets, no
//! allocation (encoders write into caller-provided buffers).
//!
//! TWAMP sender test packet (RFC 5357 §4.1.2, unauthenticated), byte offsets:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | Sequence Number |
//! | 4 | 8 | Timestamp (NTP 64-bit) |
//! | 12 | 2 | Error Estimate |
//! | 14 | … | Packet Padding |
//!
//! STAMP Session-Sender test packet (RFC 8762 §4.2.1; SSID from RFC 8972 §3): the
//! same first 14 bytes, then SSID (2), MBZ (28) — 44 bytes — then RFC 8972 §4 TLVs.
//!
//! Reflector test packet (RFC 5357 §4.2.1, unauthenticated; RFC 8762 §4.3.1 is the
//! same layout with the SSID at 14 and three more MBZ bytes, 44 in all):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | Sequence Number (the reflector's own counter) |
//! | 4 | 8 | Timestamp (when the reply is sent) |
//! | 12 | 2 | Error Estimate |
//! | 14 | 2 | MBZ (STAMP: SSID, copied from the request) |
//! | 16 | 8 | Receive Timestamp (when the request arrived) |
//! | 24 | 4 | Sender Sequence Number |
//! | 28 | 8 | Sender Timestamp |
//! | 36 | 2 | Sender Error Estimate |
//! | 38 | 2 | MBZ |
//! | 40 | 1 | Sender TTL (IP TTL / hop limit of the request as received) |
//! | 41 | … | Packet Padding (STAMP: 3 MBZ bytes, then the request's TLVs) |
//!
//! **Short replies**: some widely used TWAMP-Light responders send the first 38 bytes
//! (up to the Sender Error Estimate) and then their own padding, without the MBZ and
//! Sender TTL. Everything the RTT needs is in those 38 bytes, so [`parse_reflector`]
//! accepts any reply from [`REFLECTOR_MIN_LEN`] bytes on and reports the TTL as
//! absent when the reply is shorter than 41 bytes or the TTL byte is 0 (no packet
//! that arrived can have had TTL 0, so 0 means "not filled in").
//!
//! **Reply size** (our choice, after RFC 6038's symmetrical-size idea and what common
//! TWAMP-Light reflectors do; STAMP requires it, RFC 8762 §4.3): the reply is exactly
//! as long as the request, so both directions carry the same size; a request shorter
//! than the 41-byte reflector header gets a 41-byte reply. The reply's padding is the
//! request's bytes from offset 41 on, i.e. the reflector header overwrites the first
//! 41 bytes of the request in place — the sender's padding loses its first 27 octets,
//! as RFC 5357 §4.2.1 anticipates when it asks senders to pad by at least 27 octets.
//! Senders that want equal sizes in both directions therefore send at least
//! [`REFLECTOR_HEADER_LEN`] bytes.
//!
//! **TWAMP-Light or STAMP?** A request is answered as STAMP ([`stamp_request`]) when it
//! is at least 44 bytes, its MBZ bytes 16..44 are zero, and either its SSID is
//! non-zero or the bytes after 44 are a well-formed RFC 8972 TLV list (or nothing).
//! A zero-padded TWAMP-Light request of 44 bytes is then answered byte for byte as
//! TWAMP-Light would answer it; longer zero padding reads as TLV type 0, which is
//! reserved, so it stays TWAMP-Light and its padding is copied unchanged.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Length of the unauthenticated sender test-packet header.
pub const SENDER_HEADER_LEN: usize = 14;
/// Length of the unauthenticated reflector test-packet header.
pub const REFLECTOR_HEADER_LEN: usize = 41;
/// The shortest reply we accept: every field up to the Sender Error Estimate, which
/// is all the RTT and the loss split need (see the module docs on short replies).
pub const REFLECTOR_MIN_LEN: usize = 38;
/// Length of the STAMP base packet, sender and reflector alike (RFC 8762 §4.2.1,
/// §4.3.1); RFC 8972 TLVs follow it.
pub const STAMP_BASE_LEN: usize = 44;
/// Length of an RFC 8972 §4 TLV header: Flags (1), Type (1), Length (2).
pub const TLV_HEADER_LEN: usize = 4;
/// RFC 8972 §4.1 Extra Padding TLV type.
pub const TLV_EXTRA_PADDING: u8 = 1;
/// RFC 8972 §4 TLV flags: U (unrecognised), M (malformed), I (integrity failed).
pub const TLV_FLAG_U: u8 = 0x80;
pub const TLV_FLAG_M: u8 = 0x40;
/// Largest UDP payload over IPv4 (65535 - 20 IP - 8 UDP); anything longer is not a
/// datagram we could have received or can send.
pub const MAX_PACKET_LEN: usize = 65_507;
/// RFC 8545 assigns UDP port 862 as the well-known TWAMP-Test receiver port.
pub const WELL_KNOWN_TEST_PORT: u16 = 862;

/// Seconds from the NTP epoch (1900-01-01) to the Unix epoch (1970-01-01).
const NTP_UNIX_OFFSET_S: i64 = 2_208_988_800;
const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// Why a packet could not be parsed or encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TwampError {
    #[error("{packet} truncated: {len} bytes, need at least {min}")]
    Truncated {
        packet: &'static str,
        len: usize,
        min: usize,
    },
    #[error("{packet} oversized: {len} bytes, at most {max} fit in a UDP datagram")]
    Oversized {
        packet: &'static str,
        len: usize,
        max: usize,
    },
    #[error("output buffer too small for {packet}: need {needed} bytes, have {available}")]
    BufferTooSmall {
        packet: &'static str,
        needed: usize,
        available: usize,
    },
    #[error(
        "STAMP test packets are 44 bytes or at least 48 (44 plus an RFC 8972 Extra Padding TLV), not {len}"
    )]
    StampSize { len: usize },
}

/// NTP 64-bit timestamp: seconds since 1900-01-01 (wrapping every 2^32 s, "eras")
/// and a binary fraction of a second (units of 2^-32 s, ≈ 0.23 ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NtpTimestamp {
    pub seconds: u32,
    pub fraction: u32,
}

impl NtpTimestamp {
    /// From nanoseconds since the Unix epoch. Times outside the representable era
    /// wrap modulo 2^32 seconds, as NTP itself does.
    pub fn from_unix_nanos(unix_nanos: i64) -> Self {
        let unix_seconds = unix_nanos.div_euclid(NANOS_PER_SECOND as i64);
        let nanos = unix_nanos.rem_euclid(NANOS_PER_SECOND as i64) as u64;
        // Round to the nearest 2^-32 s; 999_999_999 ns still rounds below 2^32.
        let fraction = ((nanos << 32) + NANOS_PER_SECOND / 2) / NANOS_PER_SECOND;
        NtpTimestamp {
            seconds: (unix_seconds + NTP_UNIX_OFFSET_S) as u32,
            fraction: fraction as u32,
        }
    }

    /// Nanoseconds since the Unix epoch. The era is chosen by RFC 4330 §3's rule:
    /// with the top bit of `seconds` set the time is in 1968–2036 (era 0), otherwise
    /// in 2036–2104 (era 1). Exact inverse of [`Self::from_unix_nanos`] for whole
    /// nanoseconds in that range.
    pub fn to_unix_nanos(self) -> i64 {
        let era_offset_s: i64 = if self.seconds & 0x8000_0000 != 0 {
            0
        } else {
            1 << 32
        };
        let unix_seconds = i64::from(self.seconds) + era_offset_s - NTP_UNIX_OFFSET_S;
        let nanos = (u64::from(self.fraction) * NANOS_PER_SECOND + (1 << 31)) >> 32;
        unix_seconds * NANOS_PER_SECOND as i64 + nanos as i64
    }

    /// From a wall-clock time; times before 1970 are clamped to the Unix epoch
    /// (our clocks never report them).
    pub fn from_system_time(time: SystemTime) -> Self {
        let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        let unix_nanos = i64::try_from(since_epoch.as_nanos()).unwrap_or(i64::MAX);
        Self::from_unix_nanos(unix_nanos)
    }

    /// The current wall-clock time.
    pub fn now() -> Self {
        Self::from_system_time(SystemTime::now())
    }

    fn read(bytes: &[u8]) -> Self {
        NtpTimestamp {
            seconds: read_u32(&bytes[0..4]),
            fraction: read_u32(&bytes[4..8]),
        }
    }

    fn write(self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.seconds.to_be_bytes());
        out[4..8].copy_from_slice(&self.fraction.to_be_bytes());
    }
}

/// The 16-bit Error Estimate field (RFC 4656 §4.1.2, reused by RFC 5357):
/// `S` (clock synchronised to UTC), `Z` (timestamp format: 0 = NTP, 1 = PTP
/// truncated, RFC 8186; we only produce NTP), `Scale` (6 bits) and `Multiplier`
/// (8 bits). The estimated error is `Multiplier * 2^(Scale - 32)` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorEstimate {
    pub synchronized: bool,
    pub ptp_format: bool,
    /// 0..=63.
    pub scale: u8,
    /// RFC 4656 forbids 0; a received 0 means the error is unknown.
    pub multiplier: u8,
}

impl ErrorEstimate {
    const SYNC_BIT: u16 = 0x8000;
    const Z_BIT: u16 = 0x4000;
    const MAX_SCALE: u8 = 63;

    /// Decodes the field; every bit pattern is a valid field.
    pub fn from_bits(bits: u16) -> Self {
        ErrorEstimate {
            synchronized: bits & Self::SYNC_BIT != 0,
            ptp_format: bits & Self::Z_BIT != 0,
            scale: ((bits >> 8) & 0x3f) as u8,
            multiplier: (bits & 0xff) as u8,
        }
    }

    pub fn to_bits(self) -> u16 {
        let mut bits = (u16::from(self.scale & Self::MAX_SCALE) << 8) | u16::from(self.multiplier);
        if self.synchronized {
            bits |= Self::SYNC_BIT;
        }
        if self.ptp_format {
            bits |= Self::Z_BIT;
        }
        bits
    }

    /// The smallest NTP-format estimate that is **not below** `error_s` seconds (we
    /// never understate our error). The representable range is 2^-32 s to
    /// 255 * 2^31 s; NaN, infinite or larger errors saturate at the maximum, which
    /// receivers should read as "unknown"; negative errors count as 0.
    pub fn from_error_seconds(synchronized: bool, error_s: f64) -> Self {
        let error_s = if error_s.is_nan() {
            f64::INFINITY
        } else {
            error_s.max(0.0)
        };
        let (scale, multiplier) = (0..=Self::MAX_SCALE)
            .find_map(|scale| {
                let units = (error_s * 2f64.powi(32 - i32::from(scale))).ceil();
                (units <= 255.0).then(|| (scale, units.max(1.0) as u8))
            })
            .unwrap_or((Self::MAX_SCALE, u8::MAX));
        ErrorEstimate {
            synchronized,
            ptp_format: false,
            scale,
            multiplier,
        }
    }

    /// The estimated error in seconds, `None` when the multiplier is 0 (invalid per
    /// RFC 4656, so unknown).
    pub fn error_seconds(self) -> Option<f64> {
        (self.multiplier != 0).then(|| {
            f64::from(self.multiplier) * 2f64.powi(i32::from(self.scale & Self::MAX_SCALE) - 32)
        })
    }
}

/// A parsed sender (request) test packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderPacket {
    pub seq: u32,
    pub timestamp: NtpTimestamp,
    pub error_estimate: ErrorEstimate,
    /// Length of the whole packet (header + padding) in bytes.
    pub len: usize,
}

/// A parsed reflector (reply) test packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReflectorPacket {
    /// The reflector's own sequence number: it counts the requests it received.
    pub seq: u32,
    /// When the reflector sent this reply.
    pub timestamp: NtpTimestamp,
    pub error_estimate: ErrorEstimate,
    /// When the reflector received the request.
    pub receive_timestamp: NtpTimestamp,
    pub sender_seq: u32,
    pub sender_timestamp: NtpTimestamp,
    pub sender_error_estimate: ErrorEstimate,
    /// IP TTL / hop limit of the request as the reflector received it; `None` when
    /// the reply is shorter than 41 bytes or carries 0 (not filled in).
    pub sender_ttl: Option<u8>,
    /// Bytes 14..16: MBZ in TWAMP-Light, the SSID a STAMP reflector copies back
    /// (RFC 8972 §3).
    pub ssid: u16,
    /// Length of the whole packet (header + padding) in bytes.
    pub len: usize,
}

/// What the reflector adds when it answers a request (see [`reflect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReflectorStamp {
    pub seq: u32,
    pub receive_timestamp: NtpTimestamp,
    pub send_timestamp: NtpTimestamp,
    pub error_estimate: ErrorEstimate,
    /// TTL / hop limit of the received request.
    pub request_ttl: u8,
}

fn read_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

fn read_u16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

fn check_len(packet: &'static str, len: usize, min: usize) -> Result<(), TwampError> {
    if len < min {
        Err(TwampError::Truncated { packet, len, min })
    } else if len > MAX_PACKET_LEN {
        Err(TwampError::Oversized {
            packet,
            len,
            max: MAX_PACKET_LEN,
        })
    } else {
        Ok(())
    }
}

const SENDER: &str = "TWAMP sender test packet";
const REFLECTOR: &str = "TWAMP reflector test packet";

/// Parses a request. Any 14..=65507 bytes are a valid unauthenticated request (the
/// format has no magic or checksum), so only the length can be wrong.
pub fn parse_sender(bytes: &[u8]) -> Result<SenderPacket, TwampError> {
    check_len(SENDER, bytes.len(), SENDER_HEADER_LEN)?;
    Ok(SenderPacket {
        seq: read_u32(&bytes[0..4]),
        timestamp: NtpTimestamp::read(&bytes[4..12]),
        error_estimate: ErrorEstimate::from_bits(read_u16(&bytes[12..14])),
        len: bytes.len(),
    })
}

/// Parses a reply of at least [`REFLECTOR_MIN_LEN`] bytes (TWAMP-Light or STAMP: the
/// layouts agree on every field read here). MBZ fields are not checked: reflectors
/// must zero them, but a non-zero value changes nothing we read, and rejecting it
/// would lose replies.
pub fn parse_reflector(bytes: &[u8]) -> Result<ReflectorPacket, TwampError> {
    check_len(REFLECTOR, bytes.len(), REFLECTOR_MIN_LEN)?;
    Ok(ReflectorPacket {
        seq: read_u32(&bytes[0..4]),
        timestamp: NtpTimestamp::read(&bytes[4..12]),
        error_estimate: ErrorEstimate::from_bits(read_u16(&bytes[12..14])),
        receive_timestamp: NtpTimestamp::read(&bytes[16..24]),
        sender_seq: read_u32(&bytes[24..28]),
        sender_timestamp: NtpTimestamp::read(&bytes[28..36]),
        sender_error_estimate: ErrorEstimate::from_bits(read_u16(&bytes[36..38])),
        sender_ttl: bytes
            .get(REFLECTOR_HEADER_LEN - 1)
            .copied()
            .filter(|&ttl| ttl != 0),
        ssid: read_u16(&bytes[14..16]),
        len: bytes.len(),
    })
}

fn check_buffer(packet: &'static str, needed: usize, out: &[u8]) -> Result<(), TwampError> {
    if out.len() < needed {
        return Err(TwampError::BufferTooSmall {
            packet,
            needed,
            available: out.len(),
        });
    }
    Ok(())
}

/// Writes the header of a request of `packet.len` bytes into `out[..packet.len]` and
/// returns that length. The padding bytes `out[14..len]` are left as the caller put
/// them, so a buffer filled once (zeros or random bytes, RFC 4656 allows both) needs
/// no rewrite per probe.
pub fn encode_sender(packet: &SenderPacket, out: &mut [u8]) -> Result<usize, TwampError> {
    check_len(SENDER, packet.len, SENDER_HEADER_LEN)?;
    check_buffer(SENDER, packet.len, out)?;
    out[0..4].copy_from_slice(&packet.seq.to_be_bytes());
    packet.timestamp.write(&mut out[4..12]);
    out[12..14].copy_from_slice(&packet.error_estimate.to_bits().to_be_bytes());
    Ok(packet.len)
}

/// Writes the header of a reply of `packet.len` bytes into `out[..packet.len]` (MBZ
/// fields zeroed, `ssid` at 14..16: keep it 0 for TWAMP-Light) and returns that length; padding is left as in [`encode_sender`].
pub fn encode_reflector(packet: &ReflectorPacket, out: &mut [u8]) -> Result<usize, TwampError> {
    check_len(REFLECTOR, packet.len, REFLECTOR_HEADER_LEN)?;
    check_buffer(REFLECTOR, packet.len, out)?;
    out[0..4].copy_from_slice(&packet.seq.to_be_bytes());
    packet.timestamp.write(&mut out[4..12]);
    out[12..14].copy_from_slice(&packet.error_estimate.to_bits().to_be_bytes());
    out[14..16].copy_from_slice(&packet.ssid.to_be_bytes());
    packet.receive_timestamp.write(&mut out[16..24]);
    out[24..28].copy_from_slice(&packet.sender_seq.to_be_bytes());
    packet.sender_timestamp.write(&mut out[28..36]);
    out[36..38].copy_from_slice(&packet.sender_error_estimate.to_bits().to_be_bytes());
    out[38..40].fill(0);
    out[40] = packet.sender_ttl.unwrap_or(0);
    Ok(packet.len)
}

/// The reply length for a request of `request_len` bytes (see the module docs).
pub fn reply_len(request_len: usize) -> usize {
    request_len.max(REFLECTOR_HEADER_LEN)
}

/// Builds the reply to `request` in `out` and returns its length
/// ([`reply_len`] of the request). A TWAMP-Light reply's padding is `request[41..]`;
/// a STAMP reply ([`stamp_request`]) carries the request's SSID, zeros in 41..44 and
/// the request's TLVs with their flags set as RFC 8972 §4 asks ([`reflect_tlvs`]).
/// Errors (nothing written that the caller may send) on a truncated or oversized
/// request or an `out` shorter than the reply.
pub fn reflect(
    request: &[u8],
    stamp: &ReflectorStamp,
    out: &mut [u8],
) -> Result<usize, TwampError> {
    let sender = parse_sender(request)?;
    let len = reply_len(request.len());
    check_buffer(REFLECTOR, len, out)?;
    let ssid = stamp_request(request);
    match ssid {
        Some(_) => {
            out[REFLECTOR_HEADER_LEN..STAMP_BASE_LEN].fill(0);
            reflect_tlvs(&request[STAMP_BASE_LEN..], &mut out[STAMP_BASE_LEN..len]);
        }
        None if request.len() > REFLECTOR_HEADER_LEN => {
            out[REFLECTOR_HEADER_LEN..len].copy_from_slice(&request[REFLECTOR_HEADER_LEN..]);
        }
        None => {}
    }
    let reply = ReflectorPacket {
        seq: stamp.seq,
        timestamp: stamp.send_timestamp,
        error_estimate: stamp.error_estimate,
        receive_timestamp: stamp.receive_timestamp,
        sender_seq: sender.seq,
        sender_timestamp: sender.timestamp,
        sender_error_estimate: sender.error_estimate,
        sender_ttl: Some(stamp.request_ttl),
        ssid: ssid.unwrap_or(0),
        len,
    };
    encode_reflector(&reply, out)
}

/// The SSID (possibly 0) when `request` is to be answered as a STAMP Session-Sender
/// packet, `None` for TWAMP-Light (the rule is in the module docs).
pub fn stamp_request(request: &[u8]) -> Option<u16> {
    if request.len() < STAMP_BASE_LEN || request.len() > MAX_PACKET_LEN {
        return None;
    }
    if request[16..STAMP_BASE_LEN].iter().any(|&b| b != 0) {
        return None;
    }
    let ssid = read_u16(&request[14..16]);
    (ssid != 0 || tlvs_well_formed(&request[STAMP_BASE_LEN..])).then_some(ssid)
}

/// True when `tlvs` is a sequence of whole RFC 8972 TLVs, none of the reserved type 0.
fn tlvs_well_formed(mut tlvs: &[u8]) -> bool {
    while !tlvs.is_empty() {
        let Some(value_len) = tlv_value_len(tlvs) else {
            return false;
        };
        if tlvs[1] == 0 {
            return false;
        }
        tlvs = &tlvs[TLV_HEADER_LEN + value_len..];
    }
    true
}

/// The value length of the TLV at the start of `tlvs`, `None` if its header or value
/// does not fit.
fn tlv_value_len(tlvs: &[u8]) -> Option<usize> {
    let header = tlvs.get(..TLV_HEADER_LEN)?;
    let value_len = usize::from(read_u16(&header[2..4]));
    (tlvs.len() - TLV_HEADER_LEN >= value_len).then_some(value_len)
}

/// Copies the request's TLVs (`request`, from offset 44) into the reply (`out`, same
/// length), setting each TLV's flags as a Session-Reflector must (RFC 8972 §4): Extra
/// Padding (type 1) is understood (flags 0); any other type is returned with the U
/// flag; a TLV whose length runs past the packet (or a 1..3-byte tail) gets the M
/// flag where there is a flags byte, and the rest is copied unchanged.
pub fn reflect_tlvs(request: &[u8], out: &mut [u8]) {
    out.copy_from_slice(request);
    let mut at = 0;
    while at < out.len() {
        match tlv_value_len(&request[at..]) {
            Some(value_len) => {
                out[at] = if request[at + 1] == TLV_EXTRA_PADDING {
                    0
                } else {
                    TLV_FLAG_U
                };
                at += TLV_HEADER_LEN + value_len;
            }
            None => {
                out[at] = TLV_FLAG_M;
                return;
            }
        }
    }
}

/// Whether `len` bytes can be a STAMP Session-Sender packet we send: the 44-byte base
/// alone, or the base plus one Extra Padding TLV (4-byte header, so at least 48).
pub fn stamp_len_ok(len: usize) -> bool {
    len == STAMP_BASE_LEN || (STAMP_BASE_LEN + TLV_HEADER_LEN..=MAX_PACKET_LEN).contains(&len)
}

/// Writes a STAMP Session-Sender packet of `packet.len` bytes (RFC 8762 §4.2.1 with
/// RFC 8972 §3's SSID) into `out`: header, SSID, 28 MBZ bytes and, beyond 44 bytes,
/// one RFC 8972 §4.1 Extra Padding TLV filling the rest. The padding value bytes are
/// left as the caller put them (as in [`encode_sender`]).
pub fn encode_stamp_sender(
    packet: &SenderPacket,
    ssid: u16,
    out: &mut [u8],
) -> Result<usize, TwampError> {
    if !stamp_len_ok(packet.len) {
        return Err(TwampError::StampSize { len: packet.len });
    }
    encode_sender(packet, out)?;
    out[14..16].copy_from_slice(&ssid.to_be_bytes());
    out[16..STAMP_BASE_LEN].fill(0);
    if packet.len > STAMP_BASE_LEN {
        let value_len = packet.len - STAMP_BASE_LEN - TLV_HEADER_LEN;
        // Fits: `packet.len` <= 65507, so the value is shorter than 2^16.
        let tlv = &mut out[STAMP_BASE_LEN..STAMP_BASE_LEN + TLV_HEADER_LEN];
        tlv[0] = 0;
        tlv[1] = TLV_EXTRA_PADDING;
        tlv[2..4].copy_from_slice(&(value_len as u16).to_be_bytes());
    }
    Ok(packet.len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ntp_conversion_hand_worked() {
        // Unix epoch = NTP 2_208_988_800 s (0x83AA7E80), fraction 0.
        assert_eq!(
            NtpTimestamp::from_unix_nanos(0),
            NtpTimestamp {
                seconds: 0x83AA_7E80,
                fraction: 0
            }
        );
        // Half a second is fraction 2^31.
        let half = NtpTimestamp::from_unix_nanos(500_000_000);
        assert_eq!(half.fraction, 0x8000_0000);
        assert_eq!(half.to_unix_nanos(), 500_000_000);
        // 2036-02-07T06:28:16Z = Unix 2_085_978_496 s is NTP era 1, seconds 0.
        let era1 = NtpTimestamp::from_unix_nanos(2_085_978_496 * 1_000_000_000);
        assert_eq!(
            era1,
            NtpTimestamp {
                seconds: 0,
                fraction: 0
            }
        );
        assert_eq!(era1.to_unix_nanos(), 2_085_978_496 * 1_000_000_000);
        // One nanosecond: 2^32 / 1e9 = 4.29 -> rounds to 4, and back to 1 ns.
        let one_ns = NtpTimestamp::from_unix_nanos(1);
        assert_eq!(one_ns.fraction, 4);
        assert_eq!(one_ns.to_unix_nanos(), 1);
        // Both ends of the two-era window.
        for unix_nanos in [-61_505_152_000_000_000, 4_233_462_143_999_999_999] {
            assert_eq!(
                NtpTimestamp::from_unix_nanos(unix_nanos).to_unix_nanos(),
                unix_nanos
            );
        }
        // 999_999_999 ns must not carry into the seconds.
        let almost = NtpTimestamp::from_unix_nanos(999_999_999);
        assert_eq!(almost.seconds, 0x83AA_7E80);
        assert_eq!(almost.to_unix_nanos(), 999_999_999);
    }

    #[test]
    fn error_estimate_bits_hand_worked() {
        // S=1, Z=0, Scale=0b000010 (2), Multiplier=0x05: 1000_0010_0000_0101 = 0x8205.
        // error = 5 * 2^(2 - 32) s = 5 / 2^30 s ≈ 4.66 ns.
        let e = ErrorEstimate::from_bits(0x8205);
        assert_eq!(
            e,
            ErrorEstimate {
                synchronized: true,
                ptp_format: false,
                scale: 2,
                multiplier: 5
            }
        );
        assert_eq!(e.to_bits(), 0x8205);
        assert_eq!(e.error_seconds(), Some(5.0 / 1_073_741_824.0));
        // Z bit alone.
        assert!(ErrorEstimate::from_bits(0x4000).ptp_format);
        // Multiplier 0 is invalid: unknown.
        assert_eq!(ErrorEstimate::from_bits(0x8000).error_seconds(), None);
    }

    #[test]
    fn error_estimate_from_seconds_never_understates() {
        // 1 ms: the unit at scale s is 2^(s-32) s; we need ceil(1e-3 / unit) <= 255.
        // s = 14: unit 2^-18 s = 3.815 µs -> 262.1 -> 263, too big.
        // s = 15: unit 2^-17 s = 7.629 µs -> 131.07 -> m = 132, error 1.00708 ms.
        let e = ErrorEstimate::from_error_seconds(true, 1e-3);
        assert_eq!((e.scale, e.multiplier, e.synchronized), (15, 132, true));
        assert!(e.error_seconds().unwrap() >= 1e-3);
        // Zero error is not representable: the smallest is 1 * 2^-32 s.
        let zero = ErrorEstimate::from_error_seconds(false, 0.0);
        assert_eq!((zero.scale, zero.multiplier), (0, 1));
        // Unknown saturates at the maximum.
        for unknown in [f64::NAN, f64::INFINITY, 1e300] {
            let e = ErrorEstimate::from_error_seconds(false, unknown);
            assert_eq!((e.scale, e.multiplier), (63, 255));
        }
    }

    fn sample_request(len: usize) -> Vec<u8> {
        let mut request: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let packet = SenderPacket {
            seq: 0x0102_0304,
            timestamp: NtpTimestamp {
                seconds: 0xA0B0_C0D0,
                fraction: 0x1122_3344,
            },
            error_estimate: ErrorEstimate::from_bits(0x8101),
            len,
        };
        assert_eq!(encode_sender(&packet, &mut request), Ok(len));
        request
    }

    #[test]
    fn sender_layout_and_round_trip() {
        let request = sample_request(64);
        assert_eq!(
            &request[..14],
            &[1, 2, 3, 4, 0xA0, 0xB0, 0xC0, 0xD0, 0x11, 0x22, 0x33, 0x44, 0x81, 0x01]
        );
        // Padding untouched by the encoder.
        assert_eq!(request[14], 14);
        let parsed = parse_sender(&request).unwrap();
        assert_eq!(parsed.seq, 0x0102_0304);
        assert_eq!(parsed.len, 64);
        assert_eq!(parsed.error_estimate.to_bits(), 0x8101);
    }

    fn sample_stamp() -> ReflectorStamp {
        ReflectorStamp {
            seq: 7,
            receive_timestamp: NtpTimestamp {
                seconds: 10,
                fraction: 20,
            },
            send_timestamp: NtpTimestamp {
                seconds: 10,
                fraction: 30,
            },
            error_estimate: ErrorEstimate::from_bits(0x0001),
            request_ttl: 64,
        }
    }

    #[test]
    fn reflect_layout_symmetric_size_and_padding() {
        let request = sample_request(100);
        let mut out = [0xEEu8; 200];
        let len = reflect(&request, &sample_stamp(), &mut out).unwrap();
        assert_eq!(len, 100);
        let reply = &out[..len];
        assert_eq!(&reply[0..4], &[0, 0, 0, 7]);
        assert_eq!(&reply[4..12], &[0, 0, 0, 10, 0, 0, 0, 30]);
        assert_eq!(&reply[12..16], &[0, 1, 0, 0]); // error estimate, MBZ
        assert_eq!(&reply[16..24], &[0, 0, 0, 10, 0, 0, 0, 20]);
        assert_eq!(&reply[24..36], &request[0..12]); // sender seq and timestamp
        assert_eq!(&reply[36..38], &request[12..14]); // sender error estimate
        assert_eq!(&reply[38..41], &[0, 0, 64]); // MBZ, TTL
        assert_eq!(&reply[41..], &request[41..]); // padding kept in place
        let parsed = parse_reflector(reply).unwrap();
        assert_eq!(parsed.seq, 7);
        assert_eq!(parsed.sender_seq, 0x0102_0304);
        assert_eq!(parsed.sender_ttl, Some(64));
        assert_eq!(parsed.ssid, 0);
        assert_eq!(parsed.receive_timestamp, sample_stamp().receive_timestamp);
        assert_eq!(parsed.timestamp, sample_stamp().send_timestamp);
    }

    #[test]
    fn short_request_gets_header_sized_reply() {
        let request = sample_request(SENDER_HEADER_LEN);
        let mut out = [0u8; 64];
        assert_eq!(
            reflect(&request, &sample_stamp(), &mut out),
            Ok(REFLECTOR_HEADER_LEN)
        );
    }

    #[test]
    fn bad_lengths_are_errors() {
        assert_eq!(
            parse_sender(&[0; 13]),
            Err(TwampError::Truncated {
                packet: SENDER,
                len: 13,
                min: 14
            })
        );
        assert!(matches!(
            parse_reflector(&[0; REFLECTOR_MIN_LEN - 1]),
            Err(TwampError::Truncated { .. })
        ));
        let oversized = vec![0u8; MAX_PACKET_LEN + 1];
        assert!(matches!(
            parse_sender(&oversized),
            Err(TwampError::Oversized { .. })
        ));
        assert!(matches!(
            parse_reflector(&oversized),
            Err(TwampError::Oversized { .. })
        ));
        let request = sample_request(100);
        let mut small = [0u8; 99];
        assert_eq!(
            reflect(&request, &sample_stamp(), &mut small),
            Err(TwampError::BufferTooSmall {
                packet: REFLECTOR,
                needed: 100,
                available: 99
            })
        );
        let packet = SenderPacket {
            len: 10,
            ..parse_sender(&request).unwrap()
        };
        assert!(matches!(
            encode_sender(&packet, &mut [0; 64]),
            Err(TwampError::Truncated { .. })
        ));
        assert_eq!(
            TwampError::Truncated {
                packet: SENDER,
                len: 13,
                min: 14
            }
            .to_string(),
            "TWAMP sender test packet truncated: 13 bytes, need at least 14"
        );
    }

    #[test]
    fn short_replies_parse_without_ttl() {
        let mut reply = [0u8; 64];
        let request = sample_request(64);
        let len = reflect(&request, &sample_stamp(), &mut reply).unwrap();
        // The 38-byte layout: everything up to the Sender Error Estimate.
        let short = parse_reflector(&reply[..REFLECTOR_MIN_LEN]).unwrap();
        assert_eq!((short.sender_seq, short.sender_ttl), (0x0102_0304, None));
        assert_eq!(short.receive_timestamp, sample_stamp().receive_timestamp);
        // 38 bytes plus zero padding: the TTL byte is 0, i.e. not filled in.
        reply[38..len].fill(0);
        assert_eq!(parse_reflector(&reply[..len]).unwrap().sender_ttl, None);
    }

    fn stamp_request_bytes(len: usize, ssid: u16) -> Vec<u8> {
        let mut request = vec![0x5au8; len];
        let packet = SenderPacket {
            len,
            ..parse_sender(&sample_request(64)).unwrap()
        };
        assert_eq!(encode_stamp_sender(&packet, ssid, &mut request), Ok(len));
        request
    }

    #[test]
    fn stamp_sender_layout() {
        let request = stamp_request_bytes(64, 0xBEEF);
        assert_eq!(&request[..14], &sample_request(64)[..14]);
        assert_eq!(&request[14..16], &[0xBE, 0xEF]);
        assert!(request[16..44].iter().all(|&b| b == 0));
        // Extra Padding TLV: flags 0, type 1, length 64 - 48 = 16, value untouched.
        assert_eq!(&request[44..48], &[0, 1, 0, 16]);
        assert!(request[48..].iter().all(|&b| b == 0x5a));
        assert_eq!(stamp_request(&request), Some(0xBEEF));
        assert_eq!(stamp_request_bytes(44, 1).len(), 44);
        let packet = parse_sender(&request).unwrap();
        for bad in [43, 45, 47] {
            assert_eq!(
                encode_stamp_sender(&SenderPacket { len: bad, ..packet }, 1, &mut [0; 64]),
                Err(TwampError::StampSize { len: bad })
            );
        }
    }

    #[test]
    fn stamp_reflection_layout_and_tlv_flags() {
        let mut request = stamp_request_bytes(44, 0x0102);
        // Extra Padding (understood), an unknown type 200, then a TLV whose length
        // runs past the end.
        request.extend_from_slice(&[0, 1, 0, 2, 0xAA, 0xBB]);
        request.extend_from_slice(&[0, 200, 0, 1, 0xCC]);
        let mut out = [0xEEu8; 128];
        let len = reflect(&request, &sample_stamp(), &mut out).unwrap();
        assert_eq!(len, request.len(), "symmetric size");
        let reply = &out[..len];
        assert_eq!(&reply[14..16], &[0x01, 0x02], "SSID copied");
        assert_eq!(&reply[38..44], &[0, 0, 64, 0, 0, 0], "MBZ, TTL, MBZ");
        assert_eq!(&reply[44..50], &[0, 1, 0, 2, 0xAA, 0xBB]);
        assert_eq!(&reply[50..55], &[TLV_FLAG_U, 200, 0, 1, 0xCC]);
        let parsed = parse_reflector(reply).unwrap();
        assert_eq!((parsed.ssid, parsed.sender_ttl), (0x0102, Some(64)));

        request.extend_from_slice(&[0, 1, 0, 9, 1]);
        let len = reflect(&request, &sample_stamp(), &mut out).unwrap();
        assert_eq!(
            &out[55..len],
            &[TLV_FLAG_M, 1, 0, 9, 1],
            "malformed: M flag"
        );
    }

    #[test]
    fn twamp_and_stamp_requests_are_told_apart() {
        // TWAMP-Light with patterned padding: not STAMP, padding copied.
        assert_eq!(stamp_request(&sample_request(64)), None);
        // Zero padding of 44 bytes: STAMP with SSID 0, and the reply is exactly the
        // TWAMP-Light one.
        let mut zero_padded = sample_request(44);
        zero_padded[14..].fill(0);
        assert_eq!(stamp_request(&zero_padded), Some(0));
        let mut longer = sample_request(64);
        longer[14..].fill(0);
        // Longer zero padding reads as reserved TLV type 0: TWAMP-Light, copied as is.
        assert_eq!(stamp_request(&longer), None);
        let mut out = [0xEEu8; 64];
        reflect(&longer, &sample_stamp(), &mut out).unwrap();
        assert!(out[41..64].iter().all(|&b| b == 0));
        // Shorter than the STAMP base packet: TWAMP-Light.
        assert_eq!(stamp_request(&stamp_request_bytes(44, 7)[..43]), None);
        // A non-zero SSID makes it STAMP even when the TLVs are broken.
        let mut broken = stamp_request_bytes(44, 7);
        broken.extend_from_slice(&[0, 1]);
        assert_eq!(stamp_request(&broken), Some(7));
    }

    proptest! {
        #[test]
        fn ntp_round_trips_nanoseconds(
            // The RFC 4330 two-era window: NTP seconds 2^31 in era 0 (1968-01-20,
            // Unix -61_505_152 s) up to 2^31 in era 1 (2104-02-26, Unix 4_233_462_144 s).
            unix_nanos in -61_505_152_000_000_000i64..4_233_462_144_000_000_000
        ) {
            prop_assert_eq!(NtpTimestamp::from_unix_nanos(unix_nanos).to_unix_nanos(), unix_nanos);
        }

        #[test]
        fn error_estimate_bits_round_trip(bits in any::<u16>()) {
            prop_assert_eq!(ErrorEstimate::from_bits(bits).to_bits(), bits);
        }

        #[test]
        fn error_estimate_bounds_the_error(error_s in 0.0f64..1e9) {
            let e = ErrorEstimate::from_error_seconds(true, error_s);
            let encoded = e.error_seconds().unwrap();
            prop_assert!(encoded >= error_s);
            // Tight: at most twice the error (one scale step) or the smallest unit.
            prop_assert!(encoded <= (2.0 * error_s).max(2f64.powi(-32)) * (1.0 + 1e-12));
        }

        /// Arbitrary bytes: parsers and the reflector return Ok or Err, never panic, and
        /// an Ok reflection parses back with the request's fields.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..1600)) {
            let sender = parse_sender(&bytes);
            prop_assert_eq!(sender.is_ok(), bytes.len() >= SENDER_HEADER_LEN);
            prop_assert_eq!(parse_reflector(&bytes).is_ok(), bytes.len() >= REFLECTOR_MIN_LEN);
            let mut out = vec![0u8; 1600];
            match reflect(&bytes, &sample_stamp(), &mut out) {
                Ok(len) => {
                    let reply = parse_reflector(&out[..len]).unwrap();
                    let request = sender.unwrap();
                    prop_assert_eq!(reply.sender_seq, request.seq);
                    prop_assert_eq!(reply.sender_timestamp, request.timestamp);
                    prop_assert_eq!(len, reply_len(bytes.len()));
                }
                Err(_) => prop_assert!(bytes.len() < SENDER_HEADER_LEN),
            }
        }

        /// Whatever the sizes of request and output buffer, reflect never panics.
        #[test]
        fn reflect_any_buffer_size(request_len in 0usize..200, out_len in 0usize..200) {
            let request = vec![0xA5u8; request_len];
            let mut out = vec![0u8; out_len];
            let _ = reflect(&request, &sample_stamp(), &mut out);
        }
    }
}
