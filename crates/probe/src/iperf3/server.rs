//! The endpoint's iperf3-compatible listener (TCP and UDP, default port 5201): a stock
//! `iperf3 -c` runs TCP or UDP tests, `-P`, `-R`, against it (`-J` is client-side).
//!
//! Tests share the endpoint's exclusive [`ThroughputService`] claim: while any
//! throughput test runs, a new iperf3 client gets `ACCESS_DENIED` (iperf3 prints "the
//! server is busy running a test"). The endpoint's caps answer with `SERVER_ERROR`.
//! Not served: `--bidir`, `-n`/`-k` (byte or block counts), which answer "not
//! implemented".

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::{errors, read_json, results_json, state, stream_id, write_json, COOKIE_BYTES};
use crate::throughput::engine::{run_streams, DataSocket, DataStream, EngineSettings, UdpSettings};
use crate::throughput::server::{
    accept_until_stopped, pacing_per_stream, ThroughputService, MAX_STREAMS, RECEIVE_GRACE,
};
use crate::throughput::SocketOptions;

const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The data connections a test in its CREATE_STREAMS phase waits for.
struct Pending {
    cookie: [u8; COOKIE_BYTES],
    streams: mpsc::Sender<TcpStream>,
}

pub struct Iperf3Server {
    service: Arc<ThroughputService>,
    tcp: TcpListener,
    udp: Arc<UdpSocket>,
    pending: Mutex<Option<Pending>>,
}

fn reusable_socket(addr: SocketAddr, kind: Type, protocol: Protocol) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), kind, Some(protocol))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        // Dual-stack like the rest of the endpoint when bound to `::`.
        let _ = socket.set_only_v6(false);
    }
    socket.bind(&SockAddr::from(addr))?;
    Ok(socket)
}

impl Iperf3Server {
    /// Binds TCP and UDP `ip:port` (port 0: a free TCP port, and UDP on the same number).
    pub fn bind(ip: IpAddr, port: u16, service: Arc<ThroughputService>) -> io::Result<Arc<Self>> {
        let tcp = reusable_socket(SocketAddr::new(ip, port), Type::STREAM, Protocol::TCP)?;
        tcp.listen(64)?;
        let tcp: TcpListener = tcp.into();
        let port = tcp.local_addr()?.port();
        let udp: UdpSocket =
            reusable_socket(SocketAddr::new(ip, port), Type::DGRAM, Protocol::UDP)?.into();
        Ok(Arc::new(Self {
            service,
            tcp,
            udp: Arc::new(udp),
            pending: Mutex::new(None),
        }))
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    /// Serves until `stop` is set.
    pub fn serve(self: Arc<Self>, stop: Arc<AtomicBool>) -> io::Result<()> {
        let server = Arc::clone(&self);
        accept_until_stopped(&self.tcp, &stop, "iperf3", move |stream| {
            server.connection(stream)
        })
    }

    fn connection(self: &Arc<Self>, mut stream: TcpStream) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(SETUP_TIMEOUT))?;
        let mut cookie = [0u8; COOKIE_BYTES];
        stream.read_exact(&mut cookie)?;
        {
            let pending = self
                .pending
                .lock()
                .map_err(|_| io::Error::other("state poisoned"))?;
            if let Some(pending) = pending.as_ref().filter(|p| p.cookie == cookie) {
                let _ = pending.streams.send(stream);
                return Ok(());
            }
        }
        let Ok(_claim) = self
            .service
            .claim_exclusive(self.service.limits.max_duration)
        else {
            return stream.write_all(&[state::ACCESS_DENIED]);
        };
        self.session(stream, cookie)
    }

    fn refuse(control: &mut TcpStream, iperf_errno: i32, why: &str) -> io::Result<()> {
        tracing::info!("iperf3 test refused: {why}");
        let mut message = vec![state::SERVER_ERROR];
        message.extend_from_slice(&iperf_errno.to_be_bytes());
        message.extend_from_slice(&0i32.to_be_bytes());
        control.write_all(&message)
    }

    fn session(
        self: &Arc<Self>,
        mut control: TcpStream,
        cookie: [u8; COOKIE_BYTES],
    ) -> io::Result<()> {
        control.set_nodelay(true)?;
        control.write_all(&[state::PARAM_EXCHANGE])?;
        let params = read_json(&mut control)?;
        let flag = |key: &str| params.get(key).and_then(Value::as_bool).unwrap_or(false);
        let number = |key: &str| params.get(key).and_then(Value::as_u64);
        let udp = flag("udp");
        let reverse = flag("reverse");
        let time_s = number("time").unwrap_or(10);
        let parallel = number("parallel").unwrap_or(1).max(1);
        let limits = self.service.limits;
        if Duration::from_secs(time_s) > limits.max_duration || time_s == 0 {
            return Self::refuse(
                &mut control,
                errors::DURATION,
                "duration over the endpoint's limit",
            );
        }
        if parallel > u64::from(MAX_STREAMS) {
            return Self::refuse(&mut control, errors::NUM_STREAMS, "too many streams");
        }
        if flag("bidirectional")
            || number("num").unwrap_or(0) > 0
            || number("blockcount").unwrap_or(0) > 0
        {
            return Self::refuse(
                &mut control,
                errors::UNIMPLEMENTED,
                "bidirectional or byte/block-count test",
            );
        }
        let bandwidth = number("bandwidth").unwrap_or(if udp { 1_000_000 } else { 0 });
        if let Some(max) = limits.max_rate_bps {
            if udp && bandwidth.saturating_mul(parallel) > max {
                return Self::refuse(
                    &mut control,
                    errors::UNIMPLEMENTED,
                    "rate over the endpoint's cap",
                );
            }
        }
        let length = number("len").unwrap_or(if udp { 1460 } else { 131_072 }) as usize;
        if udp && !(16..=65_507).contains(&length) {
            return Self::refuse(
                &mut control,
                errors::UNIMPLEMENTED,
                "UDP length out of range",
            );
        }
        let options = SocketOptions {
            window_bytes: number("window"),
            congestion: params
                .get("congestion")
                .and_then(Value::as_str)
                .map(str::to_string),
            pacing_rate_bps: pacing_per_stream(
                number("fqrate").or((!udp && bandwidth > 0).then_some(bandwidth)),
                limits.max_rate_bps,
                parallel as u32,
            ),
            dscp: number("TOS").map_or(0, |tos| (tos >> 2) as u8),
            mss_bytes: None,
        };

        self.service
            .plan_active(Duration::from_secs(time_s) + SETUP_TIMEOUT);
        let (sender, receiver) = mpsc::channel();
        if !udp {
            *self
                .pending
                .lock()
                .map_err(|_| io::Error::other("state poisoned"))? = Some(Pending {
                cookie,
                streams: sender,
            });
        }
        let _clear_pending = ClearPending(self);
        control.write_all(&[state::CREATE_STREAMS])?;
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let peer = control.peer_addr()?;
        let mut streams = Vec::new();
        // Closed when the session ends, after the results exchange, not when the
        // engine stops (unread data would reset the client's sockets).
        let mut kept_open = Vec::new();
        for index in 0..parallel as usize {
            let socket = if udp {
                DataSocket::Udp(self.accept_udp(deadline)?)
            } else {
                let stream = receiver
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                    .map_err(|_| {
                        io::Error::new(
                            io::ErrorKind::TimedOut,
                            "iperf3 client did not open its streams",
                        )
                    })?;
                stream.set_read_timeout(None)?;
                DataSocket::Tcp(stream)
            };
            match &socket {
                DataSocket::Tcp(tcp) => options.apply(tcp, peer, true)?,
                DataSocket::Udp(udp_socket) => options.apply(udp_socket, peer, false)?,
            }
            // Only receiving streams: a stock client waits for the sender's close.
            if !reverse {
                kept_open.push(socket.keep_open()?);
            }
            streams.push(DataStream {
                id: stream_id(index),
                sending: reverse,
                socket,
            });
        }
        control.write_all(&[state::TEST_START, state::TEST_RUNNING])?;

        // The client ends the test (TEST_END); a safety bound covers clients that vanish.
        let planned = Duration::from_secs(time_s) + RECEIVE_GRACE;
        let settings = EngineSettings {
            send_duration: Some(planned),
            send_bytes_per_stream: None,
            receive_duration: planned,
            interval: Duration::from_secs(1),
            shutdown_after_send: false,
            udp: udp.then(|| UdpSettings {
                rate_bps_per_stream: bandwidth as f64,
                payload_bytes: length,
                counter_64bit: number("udp_counters_64bit").unwrap_or(0) > 0
                    || flag("udp_counters_64bit"),
            }),
            affinity: Vec::new(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let (ended_tx, ended_rx) = mpsc::channel();
        let mut watcher = control.try_clone()?;
        watcher.set_read_timeout(None)?;
        let watcher_stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            let ended = watcher.read_exact(&mut byte).is_ok() && byte[0] == state::TEST_END;
            watcher_stop.store(true, Ordering::Relaxed);
            let _ = ended_tx.send(ended);
        });
        let run = run_streams(streams, &settings, &stop);
        if !ended_rx
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or(false)
        {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "iperf3 client ended without TEST_END",
            ));
        }
        control.set_read_timeout(Some(SETUP_TIMEOUT))?;
        control.write_all(&[state::EXCHANGE_RESULTS])?;
        let _client_results = read_json(&mut control)?;
        write_json(&mut control, &results_json(&run, reverse, udp))?;
        control.write_all(&[state::DISPLAY_RESULTS])?;
        // IPERF_DONE; a client that just closes is fine too.
        let mut done = [0u8; 1];
        let _ = control.read(&mut done);
        Ok(())
    }

    /// One UDP stream: the connect datagram on the shared port, answered from a new
    /// socket on the same port connected to the client (which then gets its packets).
    fn accept_udp(&self, deadline: Instant) -> io::Result<UdpSocket> {
        let mut buf = [0u8; 64];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no UDP connect datagram from the iperf3 client",
                ));
            }
            self.udp.set_read_timeout(Some(left))?;
            let (len, from) = match self.udp.recv_from(&mut buf) {
                Ok(received) => received,
                Err(err)
                    if matches!(
                        err.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(err) => return Err(err),
            };
            let reply = match &buf[..len] {
                msg if msg == super::UDP_CONNECT_MSG || msg == super::UDP_CONNECT_REPLY => {
                    super::UDP_CONNECT_REPLY
                }
                msg if msg == super::LEGACY_UDP_CONNECT_MSG => super::LEGACY_UDP_CONNECT_REPLY,
                _ => continue,
            };
            let local = self.udp.local_addr()?;
            let socket: UdpSocket = reusable_socket(local, Type::DGRAM, Protocol::UDP)?.into();
            let sock = socket2::SockRef::from(&socket);
            let _ = sock.set_recv_buffer_size(4 << 20);
            let _ = sock.set_send_buffer_size(4 << 20);
            socket.connect(from)?;
            socket.send(&reply)?;
            return Ok(socket);
        }
    }
}

struct ClearPending<'a>(&'a Iperf3Server);

impl Drop for ClearPending<'_> {
    fn drop(&mut self) {
        if let Ok(mut pending) = self.0.pending.lock() {
            *pending = None;
        }
    }
}
