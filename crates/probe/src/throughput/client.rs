//! The client side of the native throughput protocol (see [`super::wire`]).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use vantage_model::throughput::{Direction, ThroughputProtocol, ThroughputResult, ThroughputSpec};
use vantage_model::ticket::TestTicket;

use crate::endpoint::tcp::{
    encode_preamble, parse_header, Status, MAX_MESSAGE_BYTES, PREAMBLE_LEN,
};

use super::engine::{run_streams, DataSocket, DataStream, EngineSettings, UdpSettings};
use super::report::assemble;
use super::server::{RECEIVE_GRACE, UDP_DRAIN};
use super::wire::{self, Message, TestRequest};
use super::{default_udp_payload, stream_roles, SocketOptions};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const HELLO_RETRY: Duration = Duration::from_millis(100);

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ThroughputError {
    #[error("endpoint busy: {reason}")]
    Busy { retry_after_s: u64, reason: String },
    #[error("endpoint refused the test: {0}")]
    Refused(String),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Resolves `target` with `port` (a target may carry its own `host:port`).
pub fn resolve(target: &str, port: u16) -> io::Result<SocketAddr> {
    let with_port = if target.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("[{target}]:{port}")
    } else if target.contains(':') {
        target.to_string()
    } else {
        format!("{target}:{port}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot resolve '{target}': {e}")))?
        .next()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("'{target}' has no address"),
            )
        })
}

/// Connects a TCP socket with options applied before the handshake.
pub fn connect_tcp(peer: SocketAddr, options: &SocketOptions) -> io::Result<TcpStream> {
    let socket = Socket::new(Domain::for_address(peer), Type::STREAM, Some(Protocol::TCP))?;
    options.apply(&socket, peer, true)?;
    socket
        .connect_timeout(&peer.into(), CONNECT_TIMEOUT)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot connect to {peer}: {e}")))?;
    Ok(socket.into())
}

/// Opens a vantage TCP service connection of kind `T` and reads the endpoint's status.
fn open_service(peer: SocketAddr, options: &SocketOptions) -> Result<TcpStream, ThroughputError> {
    let mut stream = connect_tcp(peer, options)?;
    stream.set_read_timeout(Some(CONNECT_TIMEOUT))?;
    stream.write_all(&encode_preamble(wire::KIND_THROUGHPUT))?;
    let mut status = [0u8; PREAMBLE_LEN];
    stream.read_exact(&mut status).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{peer} is not a vantage endpoint (no status: {e})"),
        )
    })?;
    let Some((_, code)) = parse_header(&status) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{peer} is not a vantage endpoint"),
        )
        .into());
    };
    if code == Status::Ok as u8 {
        return Ok(stream);
    }
    let mut len = [0u8; 4];
    let message = match stream.read_exact(&mut len) {
        Ok(()) => {
            let len = u32::from_be_bytes(len).min(MAX_MESSAGE_BYTES) as usize;
            let mut text = vec![0u8; len];
            stream.read_exact(&mut text).ok();
            String::from_utf8_lossy(&text).into_owned()
        }
        Err(_) => String::new(),
    };
    if code == Status::Busy as u8 {
        return Err(ThroughputError::Busy {
            retry_after_s: 1,
            reason: message,
        });
    }
    Err(ThroughputError::Refused(format!(
        "status {code}: {message}"
    )))
}

pub fn socket_options(spec: &ThroughputSpec) -> SocketOptions {
    SocketOptions {
        window_bytes: spec.window_bytes,
        congestion: spec.congestion.clone(),
        pacing_rate_bps: spec.pacing_rate_bps,
        dscp: spec.dscp,
        mss_bytes: spec.mss_bytes,
    }
}

/// The duration senders use: the spec's, or with `--bytes` a generous upper bound.
pub fn planned_duration(spec: &ThroughputSpec) -> Duration {
    spec.duration_us
        .map(Duration::from_micros)
        .unwrap_or(Duration::from_secs(60))
}

/// Presents `ticket` to the vantage endpoint at `target`:`port` for the iperf3 test
/// that follows against the same agent's iperf3 listener.
pub fn present_ticket(target: &str, port: u16, ticket: &TestTicket) -> Result<(), ThroughputError> {
    let peer = resolve(target, port)?;
    let mut control = open_service(peer, &SocketOptions::default())?;
    control.write_all(&[wire::CONNECTION_CONTROL])?;
    wire::write_message(
        &mut control,
        &Message::Authorize {
            ticket: ticket.clone(),
        },
    )?;
    match wire::read_message(&mut control, wire::MAX_MESSAGE_BYTES)? {
        Message::Authorized => Ok(()),
        Message::Refused { reason } => Err(ThroughputError::Refused(reason)),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected answer to a ticket: {other:?}"),
        )
        .into()),
    }
}

/// Runs a native throughput test against a vantage endpoint.
pub fn run_native(spec: &ThroughputSpec) -> Result<ThroughputResult, ThroughputError> {
    let started_at = chrono::Utc::now();
    let peer = resolve(&spec.target, spec.port)?;
    let mut options = socket_options(spec);
    let duration = planned_duration(spec);
    let (client_sends, server_sends) = match spec.direction {
        Direction::Forward => (true, false),
        Direction::Reverse => (false, true),
        Direction::Bidir => (true, true),
    };
    let udp = spec.protocol == ThroughputProtocol::Udp;
    let mut control = open_service(peer, &SocketOptions::default())?;
    control.set_nodelay(true)?;
    control.write_all(&[wire::CONNECTION_CONTROL])?;

    // UDP payload: what the user asked for, else the largest unfragmented size.
    let mut udp_payload = spec.packet_size_bytes;
    if udp && udp_payload.is_none() {
        let probe = UdpSocket::bind(if peer.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        })?;
        probe.connect(peer)?;
        udp_payload = Some(default_udp_payload(&probe, peer));
    }
    let request = TestRequest {
        udp,
        streams: spec.streams,
        client_sends,
        server_sends,
        duration_ms: duration.as_millis() as u64,
        bytes: spec.bytes,
        interval_ms: (spec.interval_us / 1000).max(1),
        window_bytes: spec.window_bytes,
        congestion: spec.congestion.clone(),
        pacing_rate_bps: spec.pacing_rate_bps,
        dscp: spec.dscp,
        rate_bps: spec.rate_bps,
        packet_size_bytes: udp_payload,
        ticket: spec.ticket.clone(),
    };
    wire::write_message(&mut control, &Message::Request(request.clone()))?;
    let (test_id, udp_ports, max_rate_bps) =
        match wire::read_message(&mut control, wire::MAX_MESSAGE_BYTES)? {
            Message::Accepted {
                test_id,
                udp_ports,
                max_rate_bps,
            } => (test_id, udp_ports, max_rate_bps),
            Message::Busy {
                retry_after_s,
                reason,
            } => {
                return Err(ThroughputError::Busy {
                    retry_after_s,
                    reason,
                })
            }
            Message::Refused { reason } => return Err(ThroughputError::Refused(reason)),
            other => return Err(io::Error::other(format!("unexpected answer {other:?}")).into()),
        };
    options.pacing_rate_bps =
        super::server::pacing_per_stream(spec.pacing_rate_bps, max_rate_bps, spec.streams);

    let roles = stream_roles(spec.streams, client_sends, server_sends);
    let mut streams = Vec::with_capacity(roles.len());
    for (index, (id, client_sending)) in roles.iter().enumerate() {
        let socket = if udp {
            let port = *udp_ports
                .get(index)
                .ok_or_else(|| io::Error::other("endpoint named too few UDP ports"))?;
            DataSocket::Udp(open_udp_stream(
                SocketAddr::new(peer.ip(), port),
                test_id,
                *id,
                &options,
            )?)
        } else {
            let mut stream = open_service(peer, &options)?;
            stream.write_all(&wire::encode_data_header(test_id, *id))?;
            stream.set_read_timeout(None)?;
            DataSocket::Tcp(stream)
        };
        streams.push(DataStream {
            id: *id,
            sending: *client_sending,
            socket,
        });
    }
    wire::write_message(&mut control, &Message::Ready)?;
    control.set_read_timeout(Some(CONNECT_TIMEOUT))?;
    match wire::read_message(&mut control, wire::MAX_MESSAGE_BYTES)? {
        Message::Start => {}
        other => return Err(io::Error::other(format!("expected start, got {other:?}")).into()),
    }
    let mut settings = super::server::engine_settings(&request, duration);
    settings.affinity = spec.affinity.clone();
    if udp {
        // The client's receivers end by themselves: the sender's end plus a drain.
        settings.receive_duration = duration + UDP_DRAIN;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let client_run = run_streams(streams, &settings, &stop);
    wire::write_message(&mut control, &Message::End)?;
    control.set_read_timeout(Some(RECEIVE_GRACE + UDP_DRAIN + Duration::from_secs(5)))?;
    let server_run = match wire::read_message(&mut control, wire::MAX_MESSAGE_BYTES)? {
        Message::Report { run } => run,
        other => {
            return Err(io::Error::other(format!("expected the report, got {other:?}")).into())
        }
    };
    let rate_cap = max_rate_bps.map(|r| r as f64);
    Ok(assemble(
        spec,
        started_at,
        &client_run,
        &server_run,
        rate_cap,
    ))
}

/// Opens a UDP stream to `server`: hello until acknowledged.
pub fn open_udp_stream(
    server: SocketAddr,
    test_id: u64,
    stream_id: u32,
    options: &SocketOptions,
) -> io::Result<UdpSocket> {
    let socket = UdpSocket::bind(if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })?;
    options.apply(&socket, server, false)?;
    socket.connect(server)?;
    socket.set_read_timeout(Some(HELLO_RETRY))?;
    let hello = wire::encode_udp_hello(wire::UDP_HELLO, test_id, stream_id);
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let mut buf = [0u8; 64];
    while Instant::now() < deadline {
        socket.send(&hello)?;
        match socket.recv(&mut buf) {
            Ok(len)
                if wire::parse_udp_hello(&buf[..len], wire::UDP_HELLO_ACK)
                    == Some((test_id, stream_id)) =>
            {
                return Ok(socket);
            }
            Ok(_) => {}
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::ConnectionRefused
                ) => {}
            Err(err) => return Err(err),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("UDP stream {stream_id}: no answer from {server}"),
    ))
}

/// Settings for a run whose peer is not vantage (iperf3 tool): no EOF from the peer,
/// so receivers stop at the planned end.
pub fn foreign_peer_settings(base: EngineSettings, duration: Duration) -> EngineSettings {
    EngineSettings {
        receive_duration: duration,
        shutdown_after_send: false,
        ..base
    }
}

/// Helper for UDP settings from a spec, shared with the iperf3 client.
pub fn udp_settings(spec: &ThroughputSpec, payload_bytes: u32, counter_64bit: bool) -> UdpSettings {
    UdpSettings {
        rate_bps_per_stream: spec.rate_bps.unwrap_or(1_000_000) as f64
            / f64::from(spec.streams.max(1)),
        payload_bytes: payload_bytes as usize,
        counter_64bit,
    }
}
