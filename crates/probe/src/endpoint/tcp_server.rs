//! Serves the vantage TCP service (wire format in [`super::tcp`]): accepts connections up to
//! the configured limit, checks each preamble and hands the connection to its service kind.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::config::EndpointConfig;
use super::counters::{bump, EndpointCounters};
use super::tcp::{
    encode_status, parse_header, refuse, Status, KIND_LATENCY_ECHO, MAX_ECHO_FRAME_BYTES,
    PREAMBLE_LEN, PROTOCOL_VERSION,
};
use crate::throughput::server::{ThroughputService, MAX_CONNECTION_THREADS};
use crate::throughput::wire::KIND_THROUGHPUT;
use crate::transfer::KIND_TRANSFER;

/// How long a client may take to send its preamble, and stay idle between frames.
const PREAMBLE_TIMEOUT: Duration = Duration::from_secs(10);
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Accepts connections until `shutdown` completes.
pub(super) async fn serve(
    listener: std::net::TcpListener,
    config: &EndpointConfig,
    counters: Arc<EndpointCounters>,
    throughput: Arc<ThroughputService>,
    shutdown: impl std::future::Future<Output = ()>,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let slots = Arc::new(Semaphore::new(config.max_tcp_connections.max(1)));
    // Throughput connections run on blocking threads: a bound of their own keeps them
    // from taking every thread of the runtime's blocking pool (the agent's work).
    let throughput_threads = Arc::new(Semaphore::new(MAX_CONNECTION_THREADS));
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
        let admitted = match throughput.sources.admit(peer.ip()) {
            Ok(admitted) => admitted,
            Err(refused) => {
                tracing::debug!("{refused}; closing the connection");
                bump(&counters.tcp_refused_source);
                drop(stream);
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            bump(&counters.tcp_rejected_busy);
            drop(stream);
            continue;
        };
        let counters = Arc::clone(&counters);
        let throughput = Arc::clone(&throughput);
        let throughput_threads = Arc::clone(&throughput_threads);
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            if let Err(err) =
                serve_connection(stream, &counters, throughput, &throughput_threads).await
            {
                tracing::debug!(%peer, "connection ended: {err}");
            }
            drop(slot);
            drop(admitted);
        });
    }
}

async fn serve_connection(
    mut stream: TcpStream,
    counters: &EndpointCounters,
    throughput: Arc<ThroughputService>,
    throughput_threads: &Arc<Semaphore>,
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
        KIND_THROUGHPUT => {
            let Ok(thread) = Arc::clone(throughput_threads).try_acquire_owned() else {
                bump(&counters.tcp_rejected_busy);
                let message = format!(
                    "{MAX_CONNECTION_THREADS} throughput connections are being served; retry later"
                );
                return refuse(&mut stream, Status::Busy, &message).await;
            };
            stream.write_all(&encode_status(Status::Ok)).await?;
            let stream = stream.into_std()?;
            stream.set_nonblocking(false)?;
            tokio::task::spawn_blocking(move || {
                let served = throughput.handle(stream);
                drop(thread);
                served
            })
            .await
            .map_err(io::Error::other)?
        }
        KIND_TRANSFER => crate::transfer::serve(stream, throughput.tickets.as_deref()).await,
        // Further services are added as arms here.
        other => {
            bump(&counters.tcp_unknown_kind);
            let message = format!("unknown service kind 0x{other:02x}");
            refuse(&mut stream, Status::UnknownKind, &message).await
        }
    }
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
