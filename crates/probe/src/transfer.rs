//! Deadline transfers over the vantage TCP service (kind `b'D'`): the source agent sends
//! a fixed number of bytes to the destination's endpoint, paced with
//! `SO_MAX_PACING_RATE` at the rate its server allocates, changed while the transfer
//! runs (Calibers' edge pacing, Alali, PhD dissertation, University of Virginia, 2019,
//! ch. 4).
//!
//! After the preamble the client sends a hello (u32 big-endian length, then that many
//! bytes of JSON [`TransferHello`], at most [`MAX_HELLO_BYTES`]); the endpoint answers
//! with a status (a refusal names its reason), then the client sends the bytes. The
//! endpoint reports how many it has received as u64 big-endian counts, every
//! [`REPORT_EVERY`] and once more when all have arrived; those counts are the
//! transfer's progress. The ticket bounds the connection: it ends at the ticket's expiry.

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use vantage_model::ticket::TestTicket;

use crate::endpoint::tcp::{
    encode_preamble, encode_status, parse_header, refuse, Status, MAX_MESSAGE_BYTES, PREAMBLE_LEN,
};
use crate::throughput::set_max_pacing_rate;
use crate::tickets::TicketGate;

/// Service kind: deadline transfer.
pub const KIND_TRANSFER: u8 = b'D';
pub const MAX_HELLO_BYTES: u32 = 16 * 1024;
/// How often the receiver reports its count.
pub const REPORT_EVERY: Duration = Duration::from_millis(250);
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest write; small enough that the count of bytes handed to the kernel is
/// never far ahead of what the pacing lets out.
const CHUNK_BYTES: usize = 64 * 1024;
/// TCP and IP headers with the timestamp option: what the pacing rate counts beyond
/// the payload (the allocation is goodput).
const HEADER_BYTES: u64 = 52;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferHello {
    pub ticket: TestTicket,
    pub bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("cannot reach {peer}: {reason}")]
    Connect { peer: SocketAddr, reason: String },
    #[error("{peer} refused the transfer: {reason}")]
    Refused { peer: SocketAddr, reason: String },
    #[error("transfer to {peer} broke after {delivered_bytes} bytes delivered: {reason}")]
    Broken {
        peer: SocketAddr,
        delivered_bytes: u64,
        reason: String,
    },
}

/// The pacing rate (bytes/s on the wire) that carries `goodput_bps` of payload in
/// segments of `mss_bytes`.
fn wire_rate_bps(goodput_bps: f64, mss_bytes: u32) -> u64 {
    let mss = f64::from(mss_bytes.max(536));
    (goodput_bps.max(1000.0) * (mss + HEADER_BYTES as f64) / mss) as u64
}

fn pace(stream: &TcpStream, goodput_bps: f64) -> std::io::Result<()> {
    let mss = crate::tcp_info::read(stream)
        .map(|info| info.snd_mss_bytes)
        .unwrap_or(1448);
    set_max_pacing_rate(stream.as_raw_fd(), wire_rate_bps(goodput_bps, mss))
}

/// Sends `bytes` to the endpoint at `peer` under `ticket`, paced at the rate `rate_bps`
/// holds (goodput, bit/s) and re-paced whenever it changes. `delivered` follows the
/// receiver's counts. Gives up at `give_up_at`. Returns the bytes delivered (all).
pub async fn send(
    peer: SocketAddr,
    ticket: TestTicket,
    bytes: u64,
    mut rate_bps: watch::Receiver<f64>,
    delivered: watch::Sender<u64>,
    give_up_at: Instant,
) -> Result<u64, TransferError> {
    let broken = |delivered_bytes: u64, reason: String| TransferError::Broken {
        peer,
        delivered_bytes,
        reason,
    };
    let mut stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(peer))
        .await
        .map_err(|_| TransferError::Connect {
            peer,
            reason: format!("no connection within {CONNECT_TIMEOUT:?}"),
        })?
        .map_err(|error| TransferError::Connect {
            peer,
            reason: error.to_string(),
        })?;
    let hello = serde_json::to_vec(&TransferHello { ticket, bytes }).expect("hello is JSON");
    let mut opening = encode_preamble(KIND_TRANSFER).to_vec();
    opening.extend_from_slice(&(hello.len() as u32).to_be_bytes());
    opening.extend_from_slice(&hello);
    let status = tokio::time::timeout(HELLO_TIMEOUT, async {
        stream.write_all(&opening).await?;
        let mut status = [0u8; PREAMBLE_LEN];
        stream.read_exact(&mut status).await?;
        Ok::<_, std::io::Error>(status)
    })
    .await
    .map_err(|_| "no answer to the hello".to_string())
    .and_then(|read| read.map_err(|error| error.to_string()))
    .map_err(|reason| TransferError::Connect { peer, reason })?;
    match parse_header(&status) {
        Some((_, code)) if code == Status::Ok as u8 => {}
        Some(_) => {
            let reason = read_refusal(&mut stream).await;
            return Err(TransferError::Refused { peer, reason });
        }
        None => {
            return Err(TransferError::Refused {
                peer,
                reason: "not a vantage endpoint".into(),
            })
        }
    }
    pace(&stream, *rate_bps.borrow_and_update()).map_err(|error| broken(0, error.to_string()))?;
    let (mut reader, mut writer) = stream.split();
    let counting = async {
        let mut count = [0u8; 8];
        loop {
            reader.read_exact(&mut count).await?;
            let received = u64::from_be_bytes(count);
            delivered.send_replace(received);
            if received >= bytes {
                return Ok::<u64, std::io::Error>(received);
            }
        }
    };
    let sending = async {
        let chunk = vec![0u8; CHUNK_BYTES];
        let mut written = 0u64;
        while written < bytes {
            let size = (bytes - written).min(CHUNK_BYTES as u64) as usize;
            // `write`, not `write_all`: a rate change may cancel it, and a cancelled
            // `write` has written nothing, where `write_all` may have written part.
            tokio::select! {
                result = writer.write(&chunk[..size]) => {
                    written += result? as u64;
                }
                changed = rate_bps.changed() => {
                    if changed.is_ok() {
                        let rate = *rate_bps.borrow_and_update();
                        // The pacing applies to what the socket still holds as well.
                        pace(writer.as_ref(), rate)?;
                    }
                }
            }
        }
        // Keep following rate changes until the receiver has everything.
        while rate_bps.changed().await.is_ok() {
            let rate = *rate_bps.borrow_and_update();
            pace(writer.as_ref(), rate)?;
        }
        std::future::pending::<std::io::Result<()>>().await
    };
    let outcome = tokio::time::timeout_at(give_up_at, async {
        tokio::select! {
            counted = counting => counted,
            Err(error) = sending => Err(error),
        }
    })
    .await;
    let so_far = *delivered.borrow();
    match outcome {
        Ok(Ok(received)) => Ok(received),
        Ok(Err(error)) => Err(broken(so_far, error.to_string())),
        Err(_) => Err(broken(so_far, "the transfer's time ran out".into())),
    }
}

async fn read_refusal(stream: &mut TcpStream) -> String {
    let mut len = [0u8; 4];
    if stream.read_exact(&mut len).await.is_err() {
        return "refused without a reason".into();
    }
    let len = u32::from_be_bytes(len).min(MAX_MESSAGE_BYTES) as usize;
    let mut text = vec![0u8; len];
    let _ = stream.read_exact(&mut text).await;
    String::from_utf8_lossy(&text).into_owned()
}

/// Serves one transfer to this endpoint (the preamble already read): checks the hello's
/// ticket, receives at most the bytes it announces until the ticket expires, and
/// reports the count as it goes.
pub async fn serve(mut stream: TcpStream, tickets: Option<&TicketGate>) -> std::io::Result<()> {
    let hello = tokio::time::timeout(HELLO_TIMEOUT, read_hello(&mut stream)).await;
    let hello = match hello {
        Ok(Ok(hello)) => hello,
        Ok(Err(reason)) => return refuse(&mut stream, Status::Refused, &reason).await,
        Err(_) => return Ok(()),
    };
    let Some(tickets) = tickets else {
        let reason = "this endpoint has no server to issue tickets; it takes no transfers";
        return refuse(&mut stream, Status::Refused, reason).await;
    };
    let claims = match tickets.check_transfer(&hello.ticket) {
        Ok(claims) => claims,
        Err(reason) => return refuse(&mut stream, Status::Refused, &reason).await,
    };
    if hello.bytes == 0 {
        return refuse(&mut stream, Status::Refused, "a transfer of 0 bytes").await;
    }
    stream.write_all(&encode_status(Status::Ok)).await?;
    let now_us = chrono::Utc::now().timestamp_micros();
    let left = Duration::from_micros(u64::try_from(claims.not_after_us - now_us).unwrap_or(0));
    let ends_at = Instant::now() + left;
    let mut buffer = vec![0u8; CHUNK_BYTES];
    let mut received = 0u64;
    let mut next_report = Instant::now() + REPORT_EVERY;
    while received < hello.bytes {
        let read =
            tokio::time::timeout_at(ends_at.min(next_report), stream.read(&mut buffer)).await;
        match read {
            Ok(Ok(0)) => return Ok(()),
            Ok(Ok(read)) => {
                received += read as u64;
                if received > hello.bytes {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("sent more than the {} bytes announced", hello.bytes),
                    ));
                }
            }
            Ok(Err(error)) => return Err(error),
            Err(_) if Instant::now() >= ends_at => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("transfer '{}' outlived its ticket", claims.run_id),
                ))
            }
            Err(_) => {}
        }
        if Instant::now() >= next_report || received == hello.bytes {
            stream.write_all(&received.to_be_bytes()).await?;
            next_report = Instant::now() + REPORT_EVERY;
        }
    }
    // The client closes once it has read the last count.
    let mut rest = [0u8; 1];
    let _ = tokio::time::timeout(HELLO_TIMEOUT, stream.read(&mut rest)).await;
    Ok(())
}

async fn read_hello(stream: &mut TcpStream) -> Result<TransferHello, String> {
    let mut len = [0u8; 4];
    stream
        .read_exact(&mut len)
        .await
        .map_err(|error| format!("no hello: {error}"))?;
    let len = u32::from_be_bytes(len);
    if len > MAX_HELLO_BYTES {
        return Err(format!("a hello of {len} bytes; at most {MAX_HELLO_BYTES}"));
    }
    let mut body = vec![0u8; len as usize];
    stream
        .read_exact(&mut body)
        .await
        .map_err(|error| format!("hello cut short: {error}"))?;
    serde_json::from_slice(&body).map_err(|error| format!("the hello is not valid: {error}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use vantage_model::ticket::{TicketClaims, TicketSigner, TicketVerifier};

    use super::*;

    fn ticket(signer: &TicketSigner, test: &str, server: &str) -> TestTicket {
        let now_us = chrono::Utc::now().timestamp_micros();
        signer.sign(&TicketClaims {
            run_id: "t-1".into(),
            test: test.into(),
            client: "src".into(),
            server: server.into(),
            max_duration_ms: 30_000,
            not_after_us: now_us + 30_000_000,
        })
    }

    /// An endpoint `dst` trusting `signer`'s key, serving transfers on loopback.
    async fn endpoint(signer: &TicketSigner) -> SocketAddr {
        let verifier = TicketVerifier::from_hex_keys([signer.public_key_hex().as_str()]).unwrap();
        let gate = Arc::new(TicketGate::standalone("dst", verifier));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let gate = Arc::clone(&gate);
                tokio::spawn(async move {
                    let mut preamble = [0u8; PREAMBLE_LEN];
                    stream.read_exact(&mut preamble).await.unwrap();
                    assert_eq!(parse_header(&preamble), Some((1, KIND_TRANSFER)));
                    let _ = serve(stream, Some(&gate)).await;
                });
            }
        });
        addr
    }

    async fn transfer(
        addr: SocketAddr,
        ticket: TestTicket,
        bytes: u64,
    ) -> Result<u64, TransferError> {
        let (_rate, rate_bps) = watch::channel(1e9);
        let (delivered, _) = watch::channel(0);
        let give_up_at = Instant::now() + Duration::from_secs(10);
        send(addr, ticket, bytes, rate_bps, delivered, give_up_at).await
    }

    #[tokio::test]
    async fn only_a_transfer_ticket_for_this_endpoint_from_its_server_is_served() {
        let server_key = TicketSigner::from_secret([1; 32]);
        let addr = endpoint(&server_key).await;
        let delivered = transfer(addr, ticket(&server_key, "transfer", "dst"), 3_000_000).await;
        assert_eq!(delivered.unwrap(), 3_000_000);
        let refusals = [
            (
                ticket(&TicketSigner::from_secret([2; 32]), "transfer", "dst"),
                "signature",
            ),
            (ticket(&server_key, "transfer", "elsewhere"), "not for"),
            (
                ticket(&server_key, "throughput", "dst"),
                "not a deadline transfer",
            ),
        ];
        for (ticket, reason) in refusals {
            match transfer(addr, ticket, 1000).await {
                Err(TransferError::Refused { reason: said, .. }) => {
                    assert!(said.contains(reason), "{said}")
                }
                other => panic!("expected a refusal for {reason}: {other:?}"),
            }
        }
    }

    /// 1448-byte segments carry 52 bytes of headers each: 1448 Mbit/s of payload needs
    /// 1500 on the wire.
    #[test]
    fn the_pacing_rate_adds_the_headers() {
        assert_eq!(wire_rate_bps(1448e6, 1448), 1_500_000_000);
    }
}
