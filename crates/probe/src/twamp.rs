//! TWAMP-Light test packets, RFC 5357 unauthenticated mode. Pure codec: no sockets,
//! no allocation (encoders write into caller-provided buffers).
//!
//! Sender test packet (RFC 5357 §4.1.2, unauthenticated), byte offsets:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | Sequence Number |
//! | 4 | 8 | Timestamp (NTP 64-bit) |
//! | 12 | 2 | Error Estimate |
//! | 14 | … | Packet Padding |
//!
//! Reflector test packet (RFC 5357 §4.2.1, unauthenticated):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | Sequence Number (the reflector's own counter) |
//! | 4 | 8 | Timestamp (when the reply is sent) |
//! | 12 | 2 | Error Estimate |
//! | 14 | 2 | MBZ |
//! | 16 | 8 | Receive Timestamp (when the request arrived) |
//! | 24 | 4 | Sender Sequence Number |
//! | 28 | 8 | Sender Timestamp |
//! | 36 | 2 | Sender Error Estimate |
//! | 38 | 2 | MBZ |
//! | 40 | 1 | Sender TTL (IP TTL / hop limit of the request as received) |
//! | 41 | … | Packet Padding |
//!
//! **Reply size** (our choice, after RFC 6038's symmetrical-size idea and what common
//! TWAMP-Light reflectors do): the reply is exactly as long as the request, so both
//! directions carry the same size; a request shorter than the 41-byte reflector header
//! gets a 41-byte reply. The reply's padding is the request's bytes from offset 41 on,
//! i.e. the reflector header overwrites the first 41 bytes of the request in place —
//! the sender's padding loses its first 27 octets, as RFC 5357 §4.2.1 anticipates
//! when it asks senders to pad by at least 27 octets. Senders that want equal sizes in
//! both directions therefore send at least [`REFLECTOR_HEADER_LEN`] bytes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Length of the unauthenticated sender test-packet header.
pub const SENDER_HEADER_LEN: usize = 14;
/// Length of the unauthenticated reflector test-packet header.
pub const REFLECTOR_HEADER_LEN: usize = 41;
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
    /// IP TTL / hop limit of the request as the reflector received it.
    pub sender_ttl: u8,
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

/// Parses a reply. MBZ fields are not checked: RFC 5357 reflectors must zero them,
/// but a non-zero value changes nothing we read, and rejecting it would lose replies.
pub fn parse_reflector(bytes: &[u8]) -> Result<ReflectorPacket, TwampError> {
    check_len(REFLECTOR, bytes.len(), REFLECTOR_HEADER_LEN)?;
    Ok(ReflectorPacket {
        seq: read_u32(&bytes[0..4]),
        timestamp: NtpTimestamp::read(&bytes[4..12]),
        error_estimate: ErrorEstimate::from_bits(read_u16(&bytes[12..14])),
        receive_timestamp: NtpTimestamp::read(&bytes[16..24]),
        sender_seq: read_u32(&bytes[24..28]),
        sender_timestamp: NtpTimestamp::read(&bytes[28..36]),
        sender_error_estimate: ErrorEstimate::from_bits(read_u16(&bytes[36..38])),
        sender_ttl: bytes[40],
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
/// fields zeroed) and returns that length; padding is left as in [`encode_sender`].
pub fn encode_reflector(packet: &ReflectorPacket, out: &mut [u8]) -> Result<usize, TwampError> {
    check_len(REFLECTOR, packet.len, REFLECTOR_HEADER_LEN)?;
    check_buffer(REFLECTOR, packet.len, out)?;
    out[0..4].copy_from_slice(&packet.seq.to_be_bytes());
    packet.timestamp.write(&mut out[4..12]);
    out[12..14].copy_from_slice(&packet.error_estimate.to_bits().to_be_bytes());
    out[14..16].fill(0);
    packet.receive_timestamp.write(&mut out[16..24]);
    out[24..28].copy_from_slice(&packet.sender_seq.to_be_bytes());
    packet.sender_timestamp.write(&mut out[28..36]);
    out[36..38].copy_from_slice(&packet.sender_error_estimate.to_bits().to_be_bytes());
    out[38..40].fill(0);
    out[40] = packet.sender_ttl;
    Ok(packet.len)
}

/// The reply length for a request of `request_len` bytes (see the module docs).
pub fn reply_len(request_len: usize) -> usize {
    request_len.max(REFLECTOR_HEADER_LEN)
}

/// Builds the reply to `request` in `out` and returns its length
/// ([`reply_len`] of the request). The reply's padding is `request[41..]`.
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
    if request.len() > REFLECTOR_HEADER_LEN {
        out[REFLECTOR_HEADER_LEN..len].copy_from_slice(&request[REFLECTOR_HEADER_LEN..]);
    }
    let reply = ReflectorPacket {
        seq: stamp.seq,
        timestamp: stamp.send_timestamp,
        error_estimate: stamp.error_estimate,
        receive_timestamp: stamp.receive_timestamp,
        sender_seq: sender.seq,
        sender_timestamp: sender.timestamp,
        sender_error_estimate: sender.error_estimate,
        sender_ttl: stamp.request_ttl,
        len,
    };
    encode_reflector(&reply, out)
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
        assert_eq!(parsed.sender_ttl, 64);
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
            parse_reflector(&[0; 40]),
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
            prop_assert_eq!(parse_reflector(&bytes).is_ok(), bytes.len() >= REFLECTOR_HEADER_LEN);
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
