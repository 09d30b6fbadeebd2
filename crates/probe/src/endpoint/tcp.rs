//! The wire format of the vantage TCP service: the endpoint serves it, the latency and
//! throughput clients speak it.
//!
//! A connection starts with an 8-byte **preamble** from the client:
//! `b"VNTG"`, version [`PROTOCOL_VERSION`], service kind (one byte), two zero bytes.
//! The server answers with an 8-byte **status** of the same shape whose kind byte is
//! a [`Status`]; a status other than `Ok` is followed by a length-prefixed UTF-8
//! message (u32 big-endian length, at most [`MAX_MESSAGE_BYTES`]) and the close.
//! A connection whose first 8 bytes are not a preamble is closed without a word.
//!
//! Kind `b'L'` (latency echo): the client sends frames (u32 big-endian length, then
//! that many bytes, at most [`MAX_ECHO_FRAME_BYTES`]); the server echoes each frame
//! as soon as it is complete.
//!
//! Kind `b'D'` (deadline transfer): see [`crate::transfer`].

use std::io;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

pub const PREAMBLE_MAGIC: [u8; 4] = *b"VNTG";
pub const PROTOCOL_VERSION: u8 = 1;
pub const PREAMBLE_LEN: usize = 8;
/// Service kind: latency echo.
pub const KIND_LATENCY_ECHO: u8 = b'L';
/// Largest latency-echo frame body.
pub const MAX_ECHO_FRAME_BYTES: u32 = 64 * 1024;
/// Largest error message after a non-Ok status.
pub const MAX_MESSAGE_BYTES: u32 = 4096;

/// The server's answer to a preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    Ok = 0,
    UnknownKind = 1,
    UnsupportedVersion = 2,
    /// The service is in use (e.g. an exclusive throughput test); retry later.
    Busy = 3,
    /// The request was understood and refused (a ticket that does not verify, say).
    Refused = 4,
}

impl Status {
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Self::Ok),
            1 => Some(Self::UnknownKind),
            2 => Some(Self::UnsupportedVersion),
            3 => Some(Self::Busy),
            4 => Some(Self::Refused),
            _ => None,
        }
    }
}

/// The client's opening 8 bytes for service `kind`.
pub fn encode_preamble(kind: u8) -> [u8; PREAMBLE_LEN] {
    let [m0, m1, m2, m3] = PREAMBLE_MAGIC;
    [m0, m1, m2, m3, PROTOCOL_VERSION, kind, 0, 0]
}

/// The server's 8-byte status header.
pub fn encode_status(status: Status) -> [u8; PREAMBLE_LEN] {
    encode_preamble(status as u8)
}

/// Splits an 8-byte header into (version, kind/status byte); `None` if the magic or
/// the reserved bytes are wrong.
pub fn parse_header(bytes: &[u8; PREAMBLE_LEN]) -> Option<(u8, u8)> {
    (bytes[..4] == PREAMBLE_MAGIC && bytes[6] == 0 && bytes[7] == 0).then_some((bytes[4], bytes[5]))
}

/// Sends a non-Ok status with its message; the caller then closes.
pub async fn refuse(stream: &mut TcpStream, status: Status, message: &str) -> io::Result<()> {
    let bytes = message.as_bytes();
    let len = bytes.len().min(MAX_MESSAGE_BYTES as usize);
    let mut out = Vec::with_capacity(PREAMBLE_LEN + 4 + len);
    out.extend_from_slice(&encode_status(status));
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.extend_from_slice(&bytes[..len]);
    stream.write_all(&out).await?;
    stream.shutdown().await
}
