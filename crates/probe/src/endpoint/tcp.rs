//! The vantage TCP service and its wire format.
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

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::{bump, EndpointConfig, EndpointCounters};

pub const PREAMBLE_MAGIC: [u8; 4] = *b"VNTG";
pub const PROTOCOL_VERSION: u8 = 1;
pub const PREAMBLE_LEN: usize = 8;
/// Service kind: latency echo.
pub const KIND_LATENCY_ECHO: u8 = b'L';
/// Largest latency-echo frame body.
pub const MAX_ECHO_FRAME_BYTES: u32 = 64 * 1024;
/// Largest error message after a non-Ok status.
pub const MAX_MESSAGE_BYTES: u32 = 4096;
/// How long a client may take to send its preamble, and stay idle between frames.
const PREAMBLE_TIMEOUT: Duration = Duration::from_secs(10);
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The server's answer to a preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    Ok = 0,
    UnknownKind = 1,
    UnsupportedVersion = 2,
    /// The service is in use (e.g. an exclusive throughput test); retry later.
    Busy = 3,
}

impl Status {
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Self::Ok),
            1 => Some(Self::UnknownKind),
            2 => Some(Self::UnsupportedVersion),
            3 => Some(Self::Busy),
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

/// Accepts connections until `shutdown` completes.
pub(super) async fn serve(
    listener: std::net::TcpListener,
    config: &EndpointConfig,
    counters: Arc<EndpointCounters>,
    throughput: Arc<crate::throughput::server::ThroughputService>,
    shutdown: impl std::future::Future<Output = ()>,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let slots = Arc::new(Semaphore::new(config.max_tcp_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Per-connection failures (e.g. ECONNABORTED, EMFILE) must not stop the service.
                    tracing::debug!("accept failed: {err}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        bump(&counters.tcp_connections);
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            bump(&counters.tcp_rejected_busy);
            drop(stream);
            continue;
        };
        let counters = Arc::clone(&counters);
        let throughput = Arc::clone(&throughput);
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            if let Err(err) = serve_connection(stream, &counters, throughput).await {
                tracing::debug!(%peer, "connection ended: {err}");
            }
            drop(slot);
        });
    }
}

async fn serve_connection(
    mut stream: TcpStream,
    counters: &EndpointCounters,
    throughput: Arc<crate::throughput::server::ThroughputService>,
) -> io::Result<()> {
    let mut preamble = [0u8; PREAMBLE_LEN];
    let read = tokio::time::timeout(PREAMBLE_TIMEOUT, stream.read_exact(&mut preamble)).await;
    let Ok(Ok(_)) = read else {
        bump(&counters.tcp_bad_preamble);
        return Ok(());
    };
    let Some((version, kind)) = parse_header(&preamble) else {
        bump(&counters.tcp_bad_preamble);
        return Ok(());
    };
    if version != PROTOCOL_VERSION {
        bump(&counters.tcp_unsupported_version);
        let message = format!(
            "unsupported protocol version {version}; this endpoint speaks {PROTOCOL_VERSION}"
        );
        return refuse(&mut stream, Status::UnsupportedVersion, &message).await;
    }
    match kind {
        KIND_LATENCY_ECHO => {
            stream.write_all(&encode_status(Status::Ok)).await?;
            serve_latency_echo(stream, counters).await
        }
        // Throughput (control and data connections): blocking sockets on a thread,
        // see crate::throughput::wire.
        crate::throughput::wire::KIND_THROUGHPUT => {
            stream.write_all(&encode_status(Status::Ok)).await?;
            let stream = stream.into_std()?;
            stream.set_nonblocking(false)?;
            tokio::task::spawn_blocking(move || throughput.handle(stream))
                .await
                .map_err(io::Error::other)?
        }
        // Further services are added as arms here.
        other => {
            bump(&counters.tcp_unknown_kind);
            let message = format!("unknown service kind 0x{other:02x}");
            refuse(&mut stream, Status::UnknownKind, &message).await
        }
    }
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

async fn serve_latency_echo(mut stream: TcpStream, counters: &EndpointCounters) -> io::Result<()> {
    let mut frame = Vec::new();
    loop {
        let mut header = [0u8; 4];
        // A clean close between frames ends the session; within a frame it is a bad frame.
        match tokio::time::timeout(IDLE_TIMEOUT, stream.read(&mut header[..1])).await {
            Err(_) | Ok(Ok(0)) => return Ok(()),
            Ok(Err(err)) => return Err(err),
            Ok(Ok(_)) => {}
        }
        let rest = tokio::time::timeout(IDLE_TIMEOUT, async {
            stream.read_exact(&mut header[1..]).await?;
            let len = u32::from_be_bytes(header);
            if len > MAX_ECHO_FRAME_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("frame of {len} bytes exceeds {MAX_ECHO_FRAME_BYTES}"),
                ));
            }
            frame.resize(4 + len as usize, 0);
            frame[..4].copy_from_slice(&header);
            stream.read_exact(&mut frame[4..]).await?;
            Ok(())
        })
        .await;
        match rest {
            Ok(Ok(())) => {
                stream.write_all(&frame).await?;
                bump(&counters.tcp_echoed_frames);
            }
            Ok(Err(err)) => {
                bump(&counters.tcp_bad_frames);
                return Err(err);
            }
            Err(_) => {
                bump(&counters.tcp_bad_frames);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "frame not completed in time",
                ));
            }
        }
    }
}
