//! vantage's native throughput protocol (service kind `T` of the endpoint's TCP port).
//!
//! After the endpoint preamble and its `Ok` status, the client sends one byte:
//! - `C`: **control** connection. Messages both ways are a u32 big-endian length and a
//!   JSON [`Message`] (at most [`MAX_MESSAGE_BYTES`]). Client: `request`; server:
//!   `accepted` (test id, UDP ports) or `busy` (retry after) or `refused`; client opens
//!   the data streams then sends `ready`; server: `start`; both run; client: `end`
//!   when its side is done; server: `report` (its [`LocalRun`]). Or the client sends
//!   `authorize` with a ticket for a test it then runs against the iperf3 listener;
//!   the server answers `authorized` or `refused` and the connection ends.
//! - `D`: **data** connection: test id (u64 BE) and stream id (u32 BE), then bulk data.
//!
//! UDP streams: the client sends a hello datagram (`VNTH`, test id, stream id) to the
//! port the server named until the server answers `VNTA` (same body) from it; the
//! server's socket is then connected to the client's address and data flows.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use vantage_model::ticket::TestTicket;

use super::run::LocalRun;

pub const KIND_THROUGHPUT: u8 = b'T';
pub const CONNECTION_CONTROL: u8 = b'C';
pub const CONNECTION_DATA: u8 = b'D';
/// Largest message a client accepts (a report with every interval of every stream).
pub const MAX_MESSAGE_BYTES: u32 = 16 * 1024 * 1024;
/// Largest message the endpoint accepts from a client (request, ready, end).
pub const MAX_REQUEST_BYTES: u32 = 64 * 1024;
pub const UDP_HELLO: [u8; 4] = *b"VNTH";
pub const UDP_HELLO_ACK: [u8; 4] = *b"VNTA";
pub const UDP_HELLO_BYTES: usize = 16;

/// What the client asks the endpoint to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestRequest {
    pub udp: bool,
    /// Streams per direction.
    pub streams: u32,
    /// Client sends (forward).
    pub client_sends: bool,
    /// Server sends (reverse).
    pub server_sends: bool,
    /// Sending time; with `bytes` set it is only an upper bound.
    pub duration_ms: u64,
    /// Bytes per direction (split over the streams) instead of a duration.
    pub bytes: Option<u64>,
    pub interval_ms: u64,
    pub window_bytes: Option<u64>,
    pub congestion: Option<String>,
    pub pacing_rate_bps: Option<u64>,
    pub dscp: u8,
    /// UDP: payload bits per second per direction.
    pub rate_bps: Option<u64>,
    pub packet_size_bytes: Option<u32>,
    /// The server's ticket; agents' endpoints serve only ticketed tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<TestTicket>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    Request(TestRequest),
    /// Presents a ticket for a test over another protocol (the iperf3 listener):
    /// answered `authorized` or `refused`.
    Authorize {
        ticket: TestTicket,
    },
    Authorized,
    Accepted {
        test_id: u64,
        /// UDP: the server's port for each stream, in stream order.
        udp_ports: Vec<u16>,
        /// The endpoint's rate cap, applied by whichever side sends (`SO_MAX_PACING_RATE`).
        max_rate_bps: Option<u64>,
    },
    Busy {
        retry_after_s: u64,
        reason: String,
    },
    Refused {
        reason: String,
    },
    Ready,
    Start,
    End,
    Report {
        run: LocalRun,
    },
}

pub fn write_message(stream: &mut impl Write, message: &Message) -> io::Result<()> {
    let body = serde_json::to_vec(message).map_err(io::Error::other)?;
    let mut framed = Vec::with_capacity(4 + body.len());
    framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
    framed.extend_from_slice(&body);
    stream.write_all(&framed)
}

/// Reads one message of at most `max_bytes`; memory grows with the bytes that
/// actually arrive, not with the length a peer announces.
pub fn read_message(stream: &mut impl Read, max_bytes: u32) -> io::Result<Message> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header)?;
    let len = u32::from_be_bytes(header);
    if len > max_bytes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("control message of {len} bytes exceeds {max_bytes}"),
        ));
    }
    let mut body = Vec::new();
    stream.take(u64::from(len)).read_to_end(&mut body)?;
    if body.len() != len as usize {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    serde_json::from_slice(&body).map_err(|err| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad control message: {err}"),
        )
    })
}

pub fn encode_data_header(test_id: u64, stream_id: u32) -> [u8; 13] {
    let mut header = [0u8; 13];
    header[0] = CONNECTION_DATA;
    header[1..9].copy_from_slice(&test_id.to_be_bytes());
    header[9..13].copy_from_slice(&stream_id.to_be_bytes());
    header
}

/// A hello or its ack: magic, test id, stream id.
pub fn encode_udp_hello(magic: [u8; 4], test_id: u64, stream_id: u32) -> [u8; UDP_HELLO_BYTES] {
    let mut packet = [0u8; UDP_HELLO_BYTES];
    packet[..4].copy_from_slice(&magic);
    packet[4..12].copy_from_slice(&test_id.to_be_bytes());
    packet[12..16].copy_from_slice(&stream_id.to_be_bytes());
    packet
}

pub fn parse_udp_hello(packet: &[u8], magic: [u8; 4]) -> Option<(u64, u32)> {
    if packet.len() != UDP_HELLO_BYTES || packet[..4] != magic {
        return None;
    }
    Some((
        u64::from_be_bytes(packet[4..12].try_into().ok()?),
        u32::from_be_bytes(packet[12..16].try_into().ok()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_oversize_is_refused() {
        let mut buf = Vec::new();
        write_message(
            &mut buf,
            &Message::Busy {
                retry_after_s: 7,
                reason: "x".into(),
            },
        )
        .unwrap();
        let back = read_message(&mut buf.as_slice(), MAX_MESSAGE_BYTES).unwrap();
        assert_eq!(
            back,
            Message::Busy {
                retry_after_s: 7,
                reason: "x".into()
            }
        );
        let huge = (MAX_MESSAGE_BYTES + 1).to_be_bytes();
        let err = read_message(&mut huge.as_slice(), MAX_MESSAGE_BYTES).unwrap_err();
        assert!(err.to_string().contains("exceeds"));
        let over_request_cap = (MAX_REQUEST_BYTES + 1).to_be_bytes();
        let err = read_message(&mut over_request_cap.as_slice(), MAX_REQUEST_BYTES).unwrap_err();
        assert!(err.to_string().contains("exceeds 65536"), "{err}");
        // A length announced but never sent allocates nothing and ends in EOF.
        let announced = [0x00, 0x00, 0xff, 0x00, b'{'];
        let err = read_message(&mut announced.as_slice(), MAX_REQUEST_BYTES).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        let garbage = [0, 0, 0, 2, b'{', b'x'];
        let err = read_message(&mut garbage.as_slice(), MAX_MESSAGE_BYTES).unwrap_err();
        assert!(err.to_string().contains("bad control message"));
    }

    #[test]
    fn hello_parses_only_its_own_magic() {
        let hello = encode_udp_hello(UDP_HELLO, 42, 3);
        assert_eq!(parse_udp_hello(&hello, UDP_HELLO), Some((42, 3)));
        assert_eq!(parse_udp_hello(&hello, UDP_HELLO_ACK), None);
        assert_eq!(parse_udp_hello(&hello[..10], UDP_HELLO), None);
    }
}
