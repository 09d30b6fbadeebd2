//! The endpoint's iperf3-compatible listener (TCP and UDP, default port 5201): a stock
//! `iperf3 -c` runs TCP or UDP tests, `-P`, `-R`, `--bidir`, and tests that end at a
//! byte count (`-n`) or block count (`-k`) instead of a time, against it (`-J` is
//! client-side).
//!
//! Tests share the endpoint's exclusive [`ThroughputService`] claim: while any
//! throughput test runs, a new iperf3 client gets `ACCESS_DENIED` (iperf3 prints "the
//! server is busy running a test"). A test the endpoint will not run is answered with
//! `SERVER_ERROR` and the iperf3 error number whose message gives the reason (see
//! [`TestPlan::from_params`]); the endpoint logs the precise reason too, since some of
//! iperf3's messages quote iperf3's own limits rather than the endpoint's.
//!
//! Bounds: at most [`MAX_STREAMS`] data streams (both directions together); a timed
//! test's duration plus its `-O` omit time within the endpoint's maximum duration; a
//! byte or block count at most what the endpoint's rate cap (or, uncapped,
//! [`COUNT_RATE_CEILING_BPS`]) moves in the maximum duration ([`max_count_bytes`]),
//! and a count test that has not ended when the maximum duration is up is ended by the
//! endpoint with `SERVER_ERROR`.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::{
    errors, read_json, results_json, state, stream_id, write_json, ClientVersion, COOKIE_BYTES,
};
use crate::deadline::DeadlineReader;
use crate::throughput::engine::{
    run_streams, DataSocket, DataStream, EngineSettings, UdpSettings, UDP_HEADER_BYTES_64,
};
use crate::throughput::run::{LocalInterval, LocalRun};
use crate::throughput::server::{
    accept_until_stopped, pacing_per_stream, same_host, ServiceLimits, ThroughputService,
    MAX_STREAMS, RECEIVE_GRACE,
};
use crate::throughput::SocketOptions;

const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// The rate a byte or block count is bounded with when the endpoint has no rate cap:
/// a count that takes longer than the maximum duration even at 100 Gbit/s is refused.
pub const COUNT_RATE_CEILING_BPS: u64 = 100_000_000_000;
/// iperf3's largest TCP block (its MAX_BLOCKSIZE); its client never sends more.
const MAX_TCP_BLOCK_BYTES: u64 = 1 << 20;
/// iperf3's UDP block limits: its header (with 64-bit counters) up to the largest
/// IPv4 UDP payload.
const MIN_UDP_BLOCK_BYTES: u64 = UDP_HEADER_BYTES_64 as u64;
const MAX_UDP_BLOCK_BYTES: u64 = 65_507;
/// iperf3's defaults when the client sends no `len`.
const DEFAULT_TCP_BLOCK_BYTES: u64 = 128 * 1024;
const DEFAULT_UDP_BLOCK_BYTES: u64 = 1460;
/// iperf3's default UDP rate per stream.
const DEFAULT_UDP_RATE_BPS: u64 = 1_000_000;
/// How long after the time bound the endpoint still waits for the client's TEST_END.
const END_SLACK: Duration = Duration::from_secs(1);
/// How long the endpoint reads, after TEST_END, the TCP bytes the client reports sent
/// that had not arrived yet (see [`drain_in_flight`]).
const DRAIN_LIMIT: Duration = Duration::from_secs(5);
const DRAIN_READ_BYTES: usize = 64 * 1024;

/// The largest byte count (`-n`, or `-k` × block size) the endpoint accepts: what its
/// rate cap, or [`COUNT_RATE_CEILING_BPS`] when it has none, moves in its maximum
/// duration (per direction).
pub fn max_count_bytes(limits: &ServiceLimits) -> u64 {
    let rate_bps = limits.max_rate_bps.unwrap_or(COUNT_RATE_CEILING_BPS);
    (limits.max_duration.as_secs_f64() * rate_bps as f64 / 8.0) as u64
}

/// How a test ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndCondition {
    /// `-t`: the client ends the test after this long (plus the omitted seconds).
    Seconds(u64),
    /// `-n`: the client ends the test when this many bytes were sent or received.
    Bytes(u64),
    /// `-k`: the same, counted in blocks of the test's block size.
    Blocks(u64),
}

/// Why a test is refused: the iperf3 error number for the client and the precise
/// reason for the endpoint's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub iperf_errno: i32,
    pub reason: String,
}

fn refusal(iperf_errno: i32, reason: String) -> Refusal {
    Refusal {
        iperf_errno,
        reason,
    }
}

/// A test as the client's parameters describe it, checked against the endpoint's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestPlan {
    pub udp: bool,
    pub reverse: bool,
    pub bidirectional: bool,
    /// Streams per direction (iperf3's `-P`).
    pub parallel: u32,
    pub end: EndCondition,
    pub omit_s: u64,
    /// Target rate of each UDP stream (iperf3's `-b` is per stream); TCP: 0 = unpaced.
    pub bandwidth_bps: u64,
    /// iperf3's `len`: the UDP payload, or the TCP block `-k` counts in.
    pub block_bytes: u64,
}

/// A number parameter: iperf3 writes numbers past 2^31 in exponent form ("1e+16").
fn param_u64(params: &Value, key: &str) -> Result<Option<u64>, Refusal> {
    let Some(value) = params.get(key).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    value
        .as_u64()
        .or_else(|| {
            value
                .as_f64()
                .filter(|v| v.is_finite() && *v >= 0.0 && v.fract() == 0.0)
                .map(|v| v as u64)
        })
        .map(Some)
        .ok_or_else(|| {
            refusal(
                errors::RECV_PARAMS,
                format!("parameter {key:?} is not a non-negative integer: {value}"),
            )
        })
}

/// iperf3 marks options by the key's presence (`"reverse": true`, `"udp_counters_64bit": 1`).
fn param_flag(params: &Value, key: &str) -> bool {
    !matches!(
        params.get(key),
        None | Some(Value::Null | Value::Bool(false))
    )
}

impl TestPlan {
    /// Reads the PARAM_EXCHANGE object. Refusals carry the iperf3 error whose message
    /// is the reason: SCTP → "no SCTP support"; `-R` with `--bidir` → "cannot be both
    /// reverse and bidirectional"; two end conditions → "only one test end condition";
    /// too many streams → "number of parallel streams too large"; a bad block size →
    /// "block size too large" / "block size invalid"; a duration or count beyond the
    /// endpoint's bounds → "client's requested duration exceeds the server's maximum
    /// permitted limit" (clients before 3.20, which lack that message: "test duration
    /// too long"); a UDP rate over the cap → "total required bandwidth is larger than
    /// server limit".
    pub fn from_params(
        params: &Value,
        limits: &ServiceLimits,
        client: Option<ClientVersion>,
    ) -> Result<Self, Refusal> {
        if param_flag(params, "sctp") {
            return Err(refusal(errors::NO_SCTP, "SCTP test".into()));
        }
        let udp = param_flag(params, "udp");
        let reverse = param_flag(params, "reverse");
        let bidirectional = param_flag(params, "bidirectional");
        if reverse && bidirectional {
            return Err(refusal(
                errors::REVERSE_BIDIR,
                "both reverse and bidirectional".into(),
            ));
        }

        let time_s = param_u64(params, "time")?.unwrap_or(10);
        let bytes = param_u64(params, "num")?.unwrap_or(0);
        let blocks = param_u64(params, "blockcount")?.unwrap_or(0);
        let end = match (time_s, bytes, blocks) {
            (_, 0, 0) => EndCondition::Seconds(time_s),
            (0, bytes, 0) => EndCondition::Bytes(bytes),
            (0, 0, blocks) => EndCondition::Blocks(blocks),
            _ => {
                return Err(refusal(
                    errors::END_CONDITIONS,
                    format!(
                        "several end conditions: time {time_s} s, {bytes} bytes, {blocks} blocks"
                    ),
                ))
            }
        };

        let parallel = param_u64(params, "parallel")?.unwrap_or(1).max(1);
        let directions = if bidirectional { 2 } else { 1 };
        let streams = parallel.saturating_mul(directions);
        if streams > u64::from(MAX_STREAMS) {
            return Err(refusal(
                errors::NUM_STREAMS,
                format!(
                    "{streams} data streams ({parallel} per direction) over the endpoint's {MAX_STREAMS}"
                ),
            ));
        }

        let block_bytes = match param_u64(params, "len")?.filter(|&len| len > 0) {
            Some(len) => len,
            None if udp => DEFAULT_UDP_BLOCK_BYTES,
            None => DEFAULT_TCP_BLOCK_BYTES,
        };
        if udp && !(MIN_UDP_BLOCK_BYTES..=MAX_UDP_BLOCK_BYTES).contains(&block_bytes) {
            return Err(refusal(
                errors::UDP_BLOCK_SIZE,
                format!(
                    "UDP block of {block_bytes} bytes outside {MIN_UDP_BLOCK_BYTES}..={MAX_UDP_BLOCK_BYTES}"
                ),
            ));
        }
        if !udp && block_bytes > MAX_TCP_BLOCK_BYTES {
            return Err(refusal(
                errors::BLOCK_SIZE,
                format!("TCP block of {block_bytes} bytes over {MAX_TCP_BLOCK_BYTES}"),
            ));
        }

        let omit_s = param_u64(params, "omit")?.unwrap_or(0);
        let max_s = limits.max_duration.as_secs();
        let too_long = |reason: String| refusal(ClientVersion::duration_refusal(client), reason);
        match end {
            EndCondition::Seconds(0) => {
                return Err(too_long(
                    "time 0 (no end) is not served: the endpoint bounds every test".into(),
                ))
            }
            EndCondition::Seconds(t) if t.saturating_add(omit_s) > max_s => {
                return Err(too_long(format!(
                    "{t} s plus {omit_s} s omitted over the endpoint's maximum of {max_s} s"
                )))
            }
            EndCondition::Bytes(_) | EndCondition::Blocks(_) => {
                let count = match end {
                    EndCondition::Blocks(blocks) => blocks.saturating_mul(block_bytes),
                    _ => bytes,
                };
                let max_bytes = max_count_bytes(limits);
                if count > max_bytes {
                    let rate = match limits.max_rate_bps {
                        Some(cap) => format!("the rate cap of {cap} bit/s"),
                        None => format!("{COUNT_RATE_CEILING_BPS} bit/s (no rate cap)"),
                    };
                    return Err(too_long(format!(
                        "a count of {count} bytes over the endpoint's {max_bytes} bytes \
                         ({max_s} s at {rate})"
                    )));
                }
                // The client restarts its count when the omitted seconds are over, and
                // such a test usually ends just after: the endpoint has no sample at
                // that moment to leave the omitted bytes out of its own figures.
                if omit_s > 0 {
                    return Err(refusal(
                        errors::UNIMPLEMENTED,
                        format!("-O {omit_s} with a byte or block count"),
                    ));
                }
            }
            EndCondition::Seconds(_) => {}
        }

        let bandwidth_bps =
            param_u64(params, "bandwidth")?.unwrap_or(if udp { DEFAULT_UDP_RATE_BPS } else { 0 });
        if let (true, Some(max)) = (udp, limits.max_rate_bps) {
            // UDP -b 0 is iperf3's "as fast as possible".
            let total = bandwidth_bps.saturating_mul(parallel);
            if bandwidth_bps == 0 || total > max {
                return Err(refusal(
                    errors::TOTAL_RATE,
                    format!(
                        "UDP at {parallel} × {bandwidth_bps} bit/s (0: unlimited) over the endpoint's cap of {max} bit/s per direction"
                    ),
                ));
            }
        }
        Ok(Self {
            udp,
            reverse,
            bidirectional,
            parallel: parallel as u32,
            end,
            omit_s,
            bandwidth_bps,
            block_bytes,
        })
    }

    /// Data streams in the test: `-P` of them each way with `--bidir`.
    pub fn stream_count(&self) -> usize {
        self.parallel as usize * if self.bidirectional { 2 } else { 1 }
    }

    /// Whether the endpoint sends on the `index`-th data stream (in connection order).
    /// With `--bidir` the client connects its sending streams first, so the endpoint
    /// receives on the first `-P` and sends on the rest, as iperf3's server does.
    pub fn server_sends(&self, index: usize) -> bool {
        if self.bidirectional {
            index >= self.parallel as usize
        } else {
            self.reverse
        }
    }

    /// The byte count that ends the test, if it is a count test.
    pub fn count_bytes(&self) -> Option<u64> {
        match self.end {
            EndCondition::Seconds(_) => None,
            EndCondition::Bytes(bytes) => Some(bytes),
            EndCondition::Blocks(blocks) => Some(blocks.saturating_mul(self.block_bytes)),
        }
    }

    /// How long the test may run before the endpoint ends it: a timed test's time, the
    /// omitted seconds and a grace for a client that vanished; a count test the
    /// endpoint's maximum duration.
    pub fn time_bound(&self, limits: &ServiceLimits) -> Duration {
        match self.end {
            EndCondition::Seconds(_) => self.requested_time(limits) + RECEIVE_GRACE,
            EndCondition::Bytes(_) | EndCondition::Blocks(_) => limits.max_duration,
        }
    }

    /// The sending time the client asked for, as charged to quotas and tickets: a
    /// count test may take up to the endpoint's limit.
    pub fn requested_time(&self, limits: &ServiceLimits) -> Duration {
        match self.end {
            EndCondition::Seconds(t) => Duration::from_secs(t + self.omit_s),
            EndCondition::Bytes(_) | EndCondition::Blocks(_) => limits.max_duration,
        }
    }

    /// What each stream the endpoint sends on sends in a count test, when the endpoint
    /// stops there itself: TCP delivers every byte, so the client's received count
    /// reaches the total (split evenly, rounded up). The client still ends the test with
    /// TEST_END, as it does with iperf3's server, which also stops sending at the
    /// count. Not with UDP: a lost datagram would leave the client short of its count,
    /// so the endpoint sends until TEST_END.
    pub fn send_bytes_per_stream(&self) -> Option<u64> {
        let count = self.count_bytes()?;
        (!self.udp).then(|| count.div_ceil(u64::from(self.parallel)))
    }
}

/// The data connections a test in its CREATE_STREAMS phase waits for, each with its
/// accept number (their order gives them their roles).
struct Pending {
    cookie: [u8; COOKIE_BYTES],
    streams: mpsc::Sender<(u64, TcpStream)>,
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

fn send_server_error(control: &mut TcpStream, iperf_errno: i32) -> io::Result<()> {
    let mut message = vec![state::SERVER_ERROR];
    message.extend_from_slice(&iperf_errno.to_be_bytes());
    message.extend_from_slice(&0i32.to_be_bytes());
    control.write_all(&message)
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
        let sources = Arc::clone(&self.service.sources);
        accept_until_stopped(
            &self.tcp,
            &stop,
            "iperf3",
            &sources,
            move |stream, number| server.connection(stream, number),
        )
    }

    fn connection(self: &Arc<Self>, mut stream: TcpStream, number: u64) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        let mut cookie = [0u8; COOKIE_BYTES];
        DeadlineReader::new(&stream, SETUP_TIMEOUT)?.read_exact(&mut cookie)?;
        stream.set_read_timeout(Some(SETUP_TIMEOUT))?;
        {
            let pending = self
                .pending
                .lock()
                .map_err(|_| io::Error::other("state poisoned"))?;
            if let Some(pending) = pending.as_ref().filter(|p| p.cookie == cookie) {
                let _ = pending.streams.send((number, stream));
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

    fn refuse(control: &mut TcpStream, refusal: &Refusal) -> io::Result<()> {
        tracing::info!(
            "iperf3 test refused (iperf3 error {}): {}",
            refusal.iperf_errno,
            refusal.reason
        );
        send_server_error(control, refusal.iperf_errno)
    }

    /// The data streams in connection order: TCP connections carrying the cookie
    /// (sorted by accept number), or UDP connect datagrams (answered one at a time).
    fn collect_streams(
        &self,
        plan: &TestPlan,
        receiver: &mpsc::Receiver<(u64, TcpStream)>,
        client: IpAddr,
    ) -> io::Result<Vec<DataSocket>> {
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let count = plan.stream_count();
        if plan.udp {
            return (0..count)
                .map(|_| self.accept_udp(deadline, client).map(DataSocket::Udp))
                .collect();
        }
        let mut accepted = Vec::with_capacity(count);
        while accepted.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            let (number, stream) = receiver.recv_timeout(left).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "iperf3 client opened {} of its {count} streams",
                        accepted.len()
                    ),
                )
            })?;
            stream.set_read_timeout(None)?;
            accepted.push((number, stream));
        }
        accepted.sort_by_key(|(number, _)| *number);
        Ok(accepted
            .into_iter()
            .map(|(_, stream)| DataSocket::Tcp(stream))
            .collect())
    }

    fn session(
        self: &Arc<Self>,
        mut control: TcpStream,
        cookie: [u8; COOKIE_BYTES],
    ) -> io::Result<()> {
        control.set_nodelay(true)?;
        control.write_all(&[state::PARAM_EXCHANGE])?;
        let params = read_json(&mut DeadlineReader::new(&control, SETUP_TIMEOUT)?)?;
        let client = ClientVersion::of_params(&params);
        let limits = self.service.limits;
        let plan = match TestPlan::from_params(&params, &limits, client) {
            Ok(plan) => plan,
            Err(refusal) => return Self::refuse(&mut control, &refusal),
        };
        let number = |key: &str| params.get(key).and_then(Value::as_u64);
        let options = SocketOptions {
            window_bytes: number("window"),
            congestion: params
                .get("congestion")
                .and_then(Value::as_str)
                .map(str::to_string),
            pacing_rate_bps: pacing_per_stream(
                number("fqrate")
                    .or((!plan.udp && plan.bandwidth_bps > 0).then_some(plan.bandwidth_bps)),
                limits.max_rate_bps,
                plan.parallel,
            ),
            dscp: number("TOS").map_or(0, |tos| (tos >> 2) as u8),
            mss_bytes: None,
        };

        let bound = plan.time_bound(&limits);
        let peer_ip = control.peer_addr()?.ip();
        if let Some(gate) = &self.service.tickets {
            if let Err(reason) = gate.admit_presented(peer_ip, plan.requested_time(&limits)) {
                return Self::refuse(&mut control, &refusal(errors::AUTH_TEST, reason));
            }
        }
        if let Err(refused) = self
            .service
            .sources
            .charge(peer_ip, plan.requested_time(&limits))
        {
            let refused = refusal(ClientVersion::duration_refusal(client), refused.to_string());
            return Self::refuse(&mut control, &refused);
        }
        self.service.plan_active(bound + SETUP_TIMEOUT);
        let (sender, receiver) = mpsc::channel();
        if !plan.udp {
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
        let peer = control.peer_addr()?;
        let mut streams = Vec::new();
        // Closed when the session ends, after the results exchange, not when the
        // engine stops (unread data would reset the client's sockets).
        let mut kept_open = Vec::new();
        for (index, socket) in self
            .collect_streams(&plan, &receiver, peer.ip())?
            .into_iter()
            .enumerate()
        {
            match &socket {
                DataSocket::Tcp(tcp) => options.apply(tcp, peer, true)?,
                DataSocket::Udp(udp_socket) => options.apply(udp_socket, peer, false)?,
            }
            let sending = plan.server_sends(index);
            // Only receiving streams: a stock client waits for the sender's close.
            if !sending {
                kept_open.push((stream_id(index), socket.keep_open()?));
            }
            streams.push(DataStream {
                id: stream_id(index),
                sending,
                socket,
            });
        }
        control.write_all(&[state::TEST_START, state::TEST_RUNNING])?;

        // The client ends the test (TEST_END); `bound` covers clients that vanish.
        let settings = EngineSettings {
            send_duration: Some(bound),
            send_bytes_per_stream: plan.send_bytes_per_stream(),
            receive_duration: bound,
            interval: Duration::from_secs(1),
            shutdown_after_send: false,
            udp: plan.udp.then(|| UdpSettings {
                rate_bps_per_stream: plan.bandwidth_bps as f64,
                payload_bytes: plan.block_bytes as usize,
                counter_64bit: param_flag(&params, "udp_counters_64bit"),
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
            let _ = ended_tx.send(ended.then(Instant::now));
        });
        let started = Instant::now();
        let mut run = run_streams(streams, &settings, &stop);
        // Streams that sent a count to the end finish before the client's TEST_END,
        // which can follow much later on a slow path: wait until the bound.
        let wait = (started + bound).saturating_duration_since(Instant::now()) + END_SLACK;
        let ended_at = match ended_rx.recv_timeout(wait) {
            Ok(Some(at)) => at,
            Ok(None) => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "iperf3 client ended without TEST_END",
                ))
            }
            Err(_) => {
                let iperf_errno = ClientVersion::expiry(client);
                tracing::info!(
                    "iperf3 test ended by the endpoint (iperf3 error {iperf_errno}): \
                     no TEST_END within {:.0} s ({:?})",
                    bound.as_secs_f64(),
                    plan.end
                );
                let sent = send_server_error(&mut control, iperf_errno);
                // Also ends the watcher's read.
                let _ = control.shutdown(Shutdown::Both);
                return sent;
            }
        };
        // A sender's test lasts until TEST_END, also when its count was written earlier
        // (its rate is then over the time the bytes took to arrive).
        let ended_s = ended_at.saturating_duration_since(started).as_secs_f64();
        for stream in run.streams.iter_mut().filter(|s| s.sending) {
            stream.active_s = stream.active_s.max(ended_s);
        }
        control.set_read_timeout(Some(SETUP_TIMEOUT))?;
        control.write_all(&[state::EXCHANGE_RESULTS])?;
        let client_results = read_json(&mut DeadlineReader::new(&control, SETUP_TIMEOUT)?)?;
        if !plan.udp {
            if plan.omit_s == 0 {
                drain_in_flight(&mut run, &kept_open, &client_results, started);
            } else {
                leave_out_omitted(&mut run, plan.omit_s);
            }
        }
        write_json(&mut control, &results_json(&run, plan.udp))?;
        control.write_all(&[state::DISPLAY_RESULTS])?;
        // IPERF_DONE; a client that just closes is fine too.
        let mut done = [0u8; 1];
        let _ = control.read(&mut done);
        drop(kept_open);
        Ok(())
    }

    /// One UDP stream: the connect datagram on the shared port, answered from a new
    /// socket on the same port connected to the client (which then gets its packets).
    /// Answers the first UDP connect datagram from `client` (the control connection's
    /// host); one from anywhere else is ignored, so a reverse test cannot be aimed at a
    /// third party by a forged source address.
    fn accept_udp(&self, deadline: Instant, client: IpAddr) -> io::Result<UdpSocket> {
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
            if !same_host(from.ip(), client) {
                tracing::info!(%from, %client, "iperf3 UDP connect datagram from another host than the control connection ignored");
                continue;
            }
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

/// Both sides stop counting at TEST_END, but on a TCP stream the endpoint receives on,
/// the client's last writes are still in flight or in socket buffers then (a few MiB
/// on loopback, more on a long path); iperf3's own server leaves them out. The
/// client's results, which arrive before the endpoint's, say how many bytes it sent on
/// each stream, so the endpoint reads the rest (for at most [`DRAIN_LIMIT`], never
/// more than the client reports) and its receiver figures cover every byte sent, the
/// receiving time running to the last one. Not with `-O`: the client's figures then
/// leave out the omitted seconds.
fn drain_in_flight(
    run: &mut LocalRun,
    kept_open: &[(u32, DataSocket)],
    client_results: &Value,
    started: Instant,
) {
    let Some(client_streams) = client_results.get("streams").and_then(Value::as_array) else {
        return;
    };
    let deadline = Instant::now() + DRAIN_LIMIT;
    let mut buffer = vec![0u8; DRAIN_READ_BYTES];
    for (id, socket) in kept_open {
        let DataSocket::Tcp(tcp) = socket else {
            continue;
        };
        let Some(outcome) = run.streams.iter_mut().find(|s| s.id == *id && !s.sending) else {
            continue;
        };
        let Some(sent) = client_streams
            .iter()
            .find(|s| s.get("id").and_then(Value::as_u64) == Some(u64::from(*id)))
            .and_then(|s| s.get("bytes").and_then(Value::as_u64))
        else {
            continue;
        };
        let mut missing = sent.saturating_sub(outcome.bytes);
        while missing > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tcp.set_read_timeout(Some(left)).is_err() {
                break;
            }
            let want = missing.min(DRAIN_READ_BYTES as u64) as usize;
            match (&*tcp).read(&mut buffer[..want]) {
                Ok(0) => break,
                Ok(n) => {
                    outcome.bytes += n as u64;
                    missing -= n as u64;
                    outcome.active_s = started.elapsed().as_secs_f64();
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }
}

/// iperf3 leaves the first `-O` seconds out of both sides' figures (the client
/// restarts its counters then). The endpoint subtracts each stream's bytes at that
/// time, read from its interval samples (interpolated within the interval that spans
/// it: the last interval can be longer than one second when the test ended just
/// after a boundary), and shortens the stream's time to match. TCP only: for UDP the
/// loss and jitter counts would need the same treatment, and are left whole.
fn leave_out_omitted(run: &mut LocalRun, omit_s: u64) {
    let omit_s = omit_s as f64;
    let Some(index) = run.intervals.iter().position(|i| i.end_s >= omit_s) else {
        return;
    };
    let interval = &run.intervals[index];
    let previous = index.checked_sub(1).map(|i| &run.intervals[i]);
    let span_s = interval.end_s - interval.start_s;
    let fraction = if span_s > 0.0 {
        ((omit_s - interval.start_s) / span_s).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let cumulative = |samples: Option<&LocalInterval>, id: u32| {
        samples
            .and_then(|i| i.streams.iter().find(|s| s.id == id))
            .map_or(0.0, |s| s.cumulative_bytes as f64)
    };
    for stream in run.streams.iter_mut() {
        let before = cumulative(previous, stream.id);
        let after = cumulative(Some(interval), stream.id);
        let at_omit = before + (after - before) * fraction;
        stream.bytes = stream.bytes.saturating_sub(at_omit as u64);
        stream.active_s = (stream.active_s - omit_s).max(f64::MIN_POSITIVE);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const V3_12: Option<ClientVersion> = Some(ClientVersion(3, 12));
    const V3_21: Option<ClientVersion> = Some(ClientVersion(3, 21));

    fn limits(max_s: u64, max_rate_bps: Option<u64>) -> ServiceLimits {
        ServiceLimits {
            max_duration: Duration::from_secs(max_s),
            max_rate_bps,
        }
    }

    fn refused(params: Value, limits: &ServiceLimits, client: Option<ClientVersion>) -> i32 {
        TestPlan::from_params(&params, limits, client)
            .expect_err("should be refused")
            .iperf_errno
    }

    #[test]
    fn counts_replace_the_time_and_are_bounded_by_duration_and_rate() {
        let limits = limits(30, Some(100_000_000));
        // 30 s at 100 Mbit/s.
        assert_eq!(max_count_bytes(&limits), 375_000_000);
        let plan = TestPlan::from_params(
            &json!({"tcp": true, "time": 0, "num": 104_857_600, "blockcount": 0, "parallel": 3, "reverse": true}),
            &limits,
            V3_12,
        )
        .unwrap();
        assert_eq!(plan.end, EndCondition::Bytes(104_857_600));
        assert_eq!(plan.time_bound(&limits), Duration::from_secs(30));
        // Split over the three sending streams, rounded up: never short of the count.
        assert_eq!(plan.send_bytes_per_stream(), Some(34_952_534));

        let blocks = TestPlan::from_params(
            &json!({"tcp": true, "time": 0, "blockcount": 1000, "len": 65536}),
            &limits,
            V3_12,
        )
        .unwrap();
        assert_eq!(blocks.count_bytes(), Some(65_536_000));

        // iperf3 writes numbers past 2^31 in exponent form.
        let huge = json!({"tcp": true, "time": 0, "num": 1e16});
        assert_eq!(refused(huge.clone(), &limits, V3_12), errors::DURATION);
        assert_eq!(refused(huge, &limits, V3_21), errors::MAX_SERVER_DURATION);
        let blocks_over = json!({"udp": true, "time": 0, "blockcount": 1_000_000, "len": 1460, "bandwidth": 1_000_000});
        assert_eq!(refused(blocks_over, &limits, None), errors::DURATION);
        // Uncapped: the bound is the maximum duration at 100 Gbit/s.
        assert_eq!(
            max_count_bytes(&super::ServiceLimits::default()),
            3_750_000_000_000
        );
    }

    #[test]
    fn each_refusal_carries_the_iperf3_error_that_names_it() {
        let limits = limits(30, Some(100_000_000));
        let cases = [
            (json!({"sctp": true, "time": 5}), errors::NO_SCTP),
            (
                json!({"tcp": true, "time": 5, "reverse": true, "bidirectional": true}),
                errors::REVERSE_BIDIR,
            ),
            (
                json!({"tcp": true, "time": 5, "num": 1000}),
                errors::END_CONDITIONS,
            ),
            (
                json!({"tcp": true, "time": 0, "num": 1000, "blockcount": 2}),
                errors::END_CONDITIONS,
            ),
            (
                json!({"tcp": true, "time": 5, "parallel": 129}),
                errors::NUM_STREAMS,
            ),
            (
                json!({"tcp": true, "time": 5, "parallel": 65, "bidirectional": true}),
                errors::NUM_STREAMS,
            ),
            (
                json!({"tcp": true, "time": 5, "len": 2 << 20}),
                errors::BLOCK_SIZE,
            ),
            (
                json!({"udp": true, "time": 5, "len": 8, "bandwidth": 1000}),
                errors::UDP_BLOCK_SIZE,
            ),
            (
                json!({"udp": true, "time": 5, "len": 70_000, "bandwidth": 1000}),
                errors::UDP_BLOCK_SIZE,
            ),
            (json!({"tcp": true, "time": 31}), errors::DURATION),
            (
                json!({"tcp": true, "time": 20, "omit": 11}),
                errors::DURATION,
            ),
            (json!({"tcp": true, "time": 0}), errors::DURATION),
            (
                json!({"udp": true, "time": 5, "bandwidth": 60_000_000, "parallel": 2}),
                errors::TOTAL_RATE,
            ),
            (
                json!({"udp": true, "time": 5, "bandwidth": 0}),
                errors::TOTAL_RATE,
            ),
            (json!({"tcp": true, "time": -1}), errors::RECV_PARAMS),
            (
                json!({"tcp": true, "time": 0, "num": 1000, "omit": 1}),
                errors::UNIMPLEMENTED,
            ),
        ];
        for (params, errno) in cases {
            assert_eq!(refused(params.clone(), &limits, V3_12), errno, "{params}");
            assert!(errors::message(errno).is_some());
        }
        // Within every limit: UDP at the cap, per direction also with --bidir.
        let plan = TestPlan::from_params(
            &json!({"udp": true, "time": 5, "bandwidth": 50_000_000, "parallel": 2, "bidirectional": true, "len": 1400}),
            &limits,
            V3_12,
        )
        .unwrap();
        assert_eq!(plan.stream_count(), 4);
        assert_eq!(plan.send_bytes_per_stream(), None);
    }

    #[test]
    fn bidir_receives_on_the_first_streams_and_sends_on_the_rest() {
        let limits = limits(30, None);
        let plan = TestPlan::from_params(
            &json!({"tcp": true, "time": 5, "parallel": 2, "bidirectional": true}),
            &limits,
            None,
        )
        .unwrap();
        let roles: Vec<bool> = (0..plan.stream_count())
            .map(|i| plan.server_sends(i))
            .collect();
        assert_eq!(roles, vec![false, false, true, true]);
        assert_eq!(
            plan.time_bound(&limits),
            Duration::from_secs(5) + RECEIVE_GRACE
        );
    }
}
