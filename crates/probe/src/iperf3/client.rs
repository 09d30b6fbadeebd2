//! `vantage throughput --tool iperf3`: the iperf3 protocol against any iperf3 server.
//!
//! iperf3 counts time in whole seconds: the duration is rounded up (at least 1 s).
//! `-b` is per stream in iperf3; vantage's `--rate` is the total, so it is divided.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use vantage_model::throughput::{Direction, ThroughputProtocol, ThroughputResult, ThroughputSpec};

use super::{
    make_cookie, read_json, read_state, results_json, run_from_results, state, stream_id,
    write_json,
};
use crate::throughput::client::{
    connect_tcp, resolve, socket_options, udp_settings, ThroughputError,
};
use crate::throughput::engine::{
    run_streams, DataSocket, DataStream, EngineSettings, TCP_BLOCK_BYTES,
};
use crate::throughput::report::assemble;
use crate::throughput::{default_udp_payload, SocketOptions};

const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a refused or reset control connection is retried (see `open_control`).
const LISTENER_GAP: Duration = Duration::from_secs(2);
const LISTENER_RETRY_STEP: Duration = Duration::from_millis(50);
/// How long receiving streams keep reading after TEST_END was sent.
const RECEIVE_DRAIN: Duration = Duration::from_millis(250);

/// The parameters object of the PARAM_EXCHANGE step.
pub fn params_json(spec: &ThroughputSpec, time_s: u64, udp_payload: u32) -> Value {
    let udp = spec.protocol == ThroughputProtocol::Udp;
    let mut params = json!({
        "omit": spec.omit_us.div_ceil(1_000_000),
        "time": time_s,
        "num": 0,
        "blockcount": 0,
        "parallel": spec.streams,
        "len": if udp { udp_payload as usize } else { TCP_BLOCK_BYTES },
        "pacing_timer": 1000,
        "client_version": "3.12",
    });
    let object = params.as_object_mut().expect("params is an object");
    object.insert(if udp { "udp" } else { "tcp" }.to_string(), json!(true));
    if spec.direction == Direction::Reverse {
        object.insert("reverse".into(), json!(true));
    }
    if udp {
        let per_stream = spec.rate_bps.unwrap_or(1_000_000) / u64::from(spec.streams.max(1));
        object.insert("bandwidth".into(), json!(per_stream));
    }
    if let Some(window) = spec.window_bytes {
        object.insert("window".into(), json!(window));
    }
    if let Some(mss) = spec.mss_bytes {
        object.insert("MSS".into(), json!(mss));
    }
    if let Some(congestion) = &spec.congestion {
        object.insert("congestion".into(), json!(congestion));
    }
    if let Some(rate) = spec.pacing_rate_bps {
        object.insert("fqrate".into(), json!(rate));
    }
    if spec.dscp > 0 {
        object.insert("TOS".into(), json!(u32::from(spec.dscp) << 2));
    }
    params
}

/// Opens the control connection, sends the cookie and reads the server's first state.
///
/// A persistent `iperf3 -s` closes and re-creates its listening socket after every
/// test (esnet/iperf pull request 2066), so a test started right after another one
/// can be refused, or reset while queued on the closing listener. Those two errors
/// are retried for `LISTENER_GAP`; anything else, or a server that stays away, is
/// reported as it is.
fn open_control(peer: SocketAddr, cookie: &[u8]) -> io::Result<(TcpStream, u8)> {
    let deadline = Instant::now() + LISTENER_GAP;
    loop {
        let attempt = connect_tcp(peer, &SocketOptions::default()).and_then(|mut control| {
            control.set_nodelay(true)?;
            control.set_read_timeout(Some(SETUP_TIMEOUT))?;
            control.write_all(cookie)?;
            let first_state = read_state(&mut control)?;
            Ok((control, first_state))
        });
        match attempt {
            Err(e) if is_listener_gap(&e) && Instant::now() < deadline => {
                std::thread::sleep(LISTENER_RETRY_STEP);
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("iperf3 server closed the control connection: {e}"),
                ))
            }
            other => return other,
        }
    }
}

fn is_listener_gap(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset
    )
}

/// Runs a test against an iperf3 server.
pub fn run_iperf3(spec: &ThroughputSpec) -> Result<ThroughputResult, ThroughputError> {
    if spec.direction == Direction::Bidir {
        return Err(ThroughputError::Refused(
            "--bidir is not supported with --tool iperf3".into(),
        ));
    }
    if spec.bytes.is_some() {
        return Err(ThroughputError::Refused(
            "--bytes is not supported with --tool iperf3; use --duration".into(),
        ));
    }
    let started_at = chrono::Utc::now();
    let peer = resolve(&spec.target, spec.port)?;
    let udp = spec.protocol == ThroughputProtocol::Udp;
    let client_sends = spec.direction == Direction::Forward;
    let time_s = spec
        .duration_us
        .unwrap_or(10_000_000)
        .div_ceil(1_000_000)
        .max(1);
    let duration = Duration::from_secs(time_s);
    let options = socket_options(spec);
    let udp_payload = match spec.packet_size_bytes {
        Some(size) => size,
        None if udp => {
            let probe = UdpSocket::bind(unspecified(peer))?;
            probe.connect(peer)?;
            default_udp_payload(&probe, peer)
        }
        None => 0,
    };
    let cookie = make_cookie();
    let (mut control, first_state) = open_control(peer, &cookie)?;
    let mut pending_state = Some(first_state);
    let mut streams = Vec::new();
    // iperf3 ends streams after IPERF_DONE; closing earlier resets a peer still sending.
    let mut kept_open = Vec::new();
    let mut client_run = None;
    let mut server_results = None;
    loop {
        let state_byte = match pending_state.take() {
            Some(state_byte) => state_byte,
            None => read_state(&mut control).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("iperf3 server closed the control connection: {e}"),
                )
            })?,
        };
        match state_byte {
            state::PARAM_EXCHANGE => {
                write_json(&mut control, &params_json(spec, time_s, udp_payload))?
            }
            state::CREATE_STREAMS => {
                for index in 0..spec.streams as usize {
                    let socket = if udp {
                        DataSocket::Udp(open_udp(peer, &options)?)
                    } else {
                        let mut stream = connect_tcp(peer, &options)?;
                        stream.write_all(&cookie)?;
                        DataSocket::Tcp(stream)
                    };
                    kept_open.push(socket.keep_open()?);
                    streams.push(DataStream {
                        id: stream_id(index),
                        sending: client_sends,
                        socket,
                    });
                }
            }
            state::TEST_START => {}
            state::TEST_RUNNING => {
                // Receiving: TEST_END goes out at the planned end from a timer while the
                // streams keep reading what the server sent before it saw TEST_END, so
                // those datagrams are not counted lost.
                let drain = if client_sends {
                    Duration::ZERO
                } else {
                    RECEIVE_DRAIN
                };
                let settings = EngineSettings {
                    send_duration: Some(duration),
                    send_bytes_per_stream: None,
                    receive_duration: duration + drain,
                    interval: Duration::from_micros(spec.interval_us.max(10_000)),
                    shutdown_after_send: false,
                    udp: udp.then(|| udp_settings(spec, udp_payload, false)),
                    affinity: spec.affinity.clone(),
                };
                let stop = Arc::new(AtomicBool::new(false));
                let mut timer_control = control.try_clone()?;
                let timer = std::thread::spawn(move || {
                    std::thread::sleep(duration);
                    timer_control.write_all(&[state::TEST_END])
                });
                client_run = Some(run_streams(std::mem::take(&mut streams), &settings, &stop));
                timer
                    .join()
                    .map_err(|_| io::Error::other("TEST_END timer panicked"))??;
                control.set_read_timeout(Some(SETUP_TIMEOUT))?;
            }
            state::EXCHANGE_RESULTS => {
                let run = client_run
                    .as_ref()
                    .ok_or_else(|| io::Error::other("results requested before the test ran"))?;
                write_json(&mut control, &results_json(run, udp))?;
                server_results = Some(read_json(&mut control)?);
            }
            state::DISPLAY_RESULTS => {
                control.write_all(&[state::IPERF_DONE])?;
                break;
            }
            state::ACCESS_DENIED => {
                return Err(ThroughputError::Busy {
                    retry_after_s: 1,
                    reason:
                        "the iperf3 server is busy running a test (ACCESS_DENIED); try again later"
                            .into(),
                })
            }
            state::SERVER_ERROR => return Err(server_error(&mut control)),
            state::SERVER_TERMINATE => {
                return Err(ThroughputError::Refused(
                    "the iperf3 server terminated the test".into(),
                ))
            }
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unexpected iperf3 state {other}"),
                )
                .into())
            }
        }
    }
    let client_run =
        client_run.ok_or_else(|| io::Error::other("the iperf3 server never started the test"))?;
    let server_results =
        server_results.ok_or_else(|| io::Error::other("the iperf3 server sent no results"))?;
    let server_run = run_from_results(&server_results, !client_sends, udp)?;
    Ok(assemble(spec, started_at, &client_run, &server_run, None))
}

fn unspecified(peer: SocketAddr) -> &'static str {
    if peer.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
}

fn server_error(control: &mut TcpStream) -> ThroughputError {
    let mut numbers = [0u8; 8];
    let detail = match std::io::Read::read_exact(control, &mut numbers) {
        Ok(()) => {
            let errno = i32::from_be_bytes(numbers[..4].try_into().unwrap());
            let os_errno = i32::from_be_bytes(numbers[4..].try_into().unwrap());
            match super::errors::message(errno) {
                Some(text) => format!("{text} (iperf3 error {errno}, errno {os_errno})"),
                None => format!("iperf3 error {errno} (errno {os_errno})"),
            }
        }
        Err(_) => "no error number".to_string(),
    };
    ThroughputError::Refused(format!("the iperf3 server reported an error: {detail}"))
}

/// A UDP stream: the connect datagram, then the server's reply.
fn open_udp(peer: SocketAddr, options: &SocketOptions) -> io::Result<UdpSocket> {
    let socket = UdpSocket::bind(unspecified(peer))?;
    options.apply(&socket, peer, false)?;
    // Large buffers: a paced sender still writes batches, and a receiver must absorb bursts.
    let sock = socket2::SockRef::from(&socket);
    let _ = sock.set_recv_buffer_size(4 << 20);
    let _ = sock.set_send_buffer_size(4 << 20);
    socket.connect(peer)?;
    socket.set_read_timeout(Some(SETUP_TIMEOUT))?;
    socket.send(&super::UDP_CONNECT_MSG)?;
    let mut reply = [0u8; 64];
    let len = socket.recv(&mut reply).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("no UDP connect reply from the iperf3 server: {e}"),
        )
    })?;
    let reply = &reply[..len];
    if reply != super::UDP_CONNECT_REPLY && reply != super::LEGACY_UDP_CONNECT_REPLY {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "unexpected UDP connect reply from the iperf3 server",
        ));
    }
    socket.set_read_timeout(None)?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_carry_mode_direction_and_per_stream_rate() {
        let mut spec = ThroughputSpec::new("h", 5201);
        spec.protocol = ThroughputProtocol::Udp;
        spec.direction = Direction::Reverse;
        spec.streams = 4;
        spec.rate_bps = Some(100_000_000);
        let params = params_json(&spec, 3, 1400);
        assert_eq!(params["udp"], json!(true));
        assert_eq!(params["reverse"], json!(true));
        assert_eq!(params["bandwidth"], json!(25_000_000));
        assert_eq!(params["len"], json!(1400));
        assert_eq!(params["parallel"], json!(4));
        assert!(params.get("tcp").is_none());
    }
}
