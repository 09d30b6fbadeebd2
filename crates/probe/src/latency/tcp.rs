//! TCP latency (the TCP indicator of Chard et al., FGCS 2015): per probe a new connection; its
//! establishment time (SYN sent → `connect` returns, i.e. SYN-ACK received) and the
//! round trip of one echo frame inside it, against the endpoint's latency-echo
//! service (preamble kind `L`). Monotonic user-space clock on both ends of each
//! interval.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use vantage_model::latency::{LatencySpec, TimestampSource, Timestamping};

use super::engine::{EngineRun, LatencyError, ProbeOutcome, Progress};
use super::udp::set_dscp;
use crate::endpoint::tcp::{
    encode_preamble, parse_header, Status, KIND_LATENCY_ECHO, MAX_MESSAGE_BYTES, PREAMBLE_LEN,
};
use crate::pacing::sleep_until;

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// How one probe ended when it did not measure.
enum ProbeFailure {
    /// No answer in time, or the connection broke: counts as loss.
    Lost,
    /// Ends the run.
    Fatal(LatencyError),
}

pub(super) fn run(
    spec: &LatencySpec,
    target: SocketAddr,
    progress: &mut dyn FnMut(Progress),
) -> Result<EngineRun, LatencyError> {
    let interval = Duration::from_micros(spec.interval_us);
    let timeout = Duration::from_micros(spec.timeout_us);
    let start = Instant::now();
    let mut probes = Vec::with_capacity(spec.count as usize);
    let mut answered = 0;
    for i in 0..spec.count {
        sleep_until(start + interval * i);
        let sent_offset_us = micros(start.elapsed());
        let outcome = match probe(target, spec, timeout) {
            Ok((connect_us, rtt_us)) => {
                answered += 1;
                ProbeOutcome {
                    sent_offset_us,
                    rtt_us: Some(rtt_us),
                    connect_us: Some(connect_us),
                    ..ProbeOutcome::default()
                }
            }
            Err(ProbeFailure::Fatal(LatencyError::Refused { .. })) if answered > 0 => {
                ProbeOutcome {
                    sent_offset_us,
                    ..ProbeOutcome::default()
                }
            }
            Err(ProbeFailure::Fatal(err)) => return Err(err),
            Err(ProbeFailure::Lost) => ProbeOutcome {
                sent_offset_us,
                ..ProbeOutcome::default()
            },
        };
        probes.push(outcome);
        progress(Progress {
            sent: i + 1,
            answered,
            total: spec.count,
        });
    }
    Ok(EngineRun {
        probes,
        loss_split: None,
        duplicates: 0,
        reordered: 0,
        timestamping: Timestamping {
            transmit: TimestampSource::User,
            receive: TimestampSource::User,
        },
        one_way: None,
        reflector: None,
    })
}

/// One connection: returns (connect_us, rtt_us).
fn probe(
    target: SocketAddr,
    spec: &LatencySpec,
    timeout: Duration,
) -> Result<(f64, f64), ProbeFailure> {
    let fatal_io = |what: &'static str| move |e| ProbeFailure::Fatal(LatencyError::io(what, e));
    let socket = Socket::new(
        Domain::for_address(target),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .map_err(fatal_io("creating TCP socket"))?;
    set_dscp(&socket, target, spec.dscp).map_err(fatal_io("setting DSCP"))?;
    socket
        .set_nodelay(true)
        .map_err(fatal_io("setting TCP_NODELAY"))?;
    let connect_started = Instant::now();
    if let Err(err) = socket.connect_timeout(&target.into(), timeout) {
        return Err(match err.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ProbeFailure::Lost,
            _ => ProbeFailure::Fatal(LatencyError::from_send(target, err)),
        });
    }
    let connect_us = micros(connect_started.elapsed());
    let mut stream: TcpStream = socket.into();
    let deadline = connect_started + timeout;
    let lost_on_io = |_| ProbeFailure::Lost;

    stream
        .write_all(&encode_preamble(KIND_LATENCY_ECHO))
        .map_err(lost_on_io)?;
    let mut status = [0u8; PREAMBLE_LEN];
    read_exact_by(&mut stream, &mut status, deadline).map_err(lost_on_io)?;
    check_status(&mut stream, &status, target, deadline)?;

    let body_len = spec.size_bytes as usize;
    let mut request = Vec::with_capacity(4 + body_len);
    request.extend_from_slice(&(body_len as u32).to_be_bytes());
    request.resize(4 + body_len, 0x5a);
    let mut echo = vec![0u8; request.len()];
    let rtt_started = Instant::now();
    stream.write_all(&request).map_err(lost_on_io)?;
    read_exact_by(&mut stream, &mut echo, deadline).map_err(lost_on_io)?;
    let rtt_us = micros(rtt_started.elapsed());
    if echo != request {
        return Err(ProbeFailure::Fatal(LatencyError::Protocol {
            addr: target,
            detail: "echo differs from the request".into(),
        }));
    }
    Ok((connect_us, rtt_us))
}

fn check_status(
    stream: &mut TcpStream,
    header: &[u8; PREAMBLE_LEN],
    target: SocketAddr,
    deadline: Instant,
) -> Result<(), ProbeFailure> {
    let protocol = |detail: String| {
        ProbeFailure::Fatal(LatencyError::Protocol {
            addr: target,
            detail,
        })
    };
    let Some((_, status_byte)) = parse_header(header) else {
        return Err(protocol("answer is not a vantage status header".into()));
    };
    match Status::from_byte(status_byte) {
        Some(Status::Ok) => Ok(()),
        status => {
            let mut len = [0u8; 4];
            let mut message = String::from("no message");
            if read_exact_by(stream, &mut len, deadline).is_ok() {
                let len = u32::from_be_bytes(len).min(MAX_MESSAGE_BYTES) as usize;
                let mut text = vec![0u8; len];
                if read_exact_by(stream, &mut text, deadline).is_ok() {
                    message = String::from_utf8_lossy(&text).into_owned();
                }
            }
            Err(protocol(format!(
                "status {status:?} (byte {status_byte}): {message}"
            )))
        }
    }
}

fn read_exact_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}
