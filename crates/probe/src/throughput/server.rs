//! The endpoint side of the native throughput protocol (see [`super::wire`]).
//!
//! One test at a time by default: a second client is answered `busy` with the
//! seconds until the running test ends. Duration and rate caps come from
//! [`ServiceLimits`] (`vantage endpoint --max-duration --max-rate`).

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::deadline::DeadlineReader;
use crate::endpoint::tcp::{encode_status, parse_header, Status, PREAMBLE_LEN, PROTOCOL_VERSION};
use crate::source_policy::{SourceLimits, SourcePolicy};
use crate::tickets::TicketGate;

use super::engine::{run_streams, DataSocket, DataStream, EngineSettings, UdpSettings};
use super::wire::{self, Message, TestRequest};
use super::{stream_roles, SocketOptions};

/// How long a client has to open its data streams.
const SETUP_TIMEOUT: Duration = Duration::from_secs(5);
/// UDP receivers keep listening this long after the sender said it is done.
pub const UDP_DRAIN: Duration = Duration::from_millis(300);
/// Receivers give up this long after the planned end if the peer never finishes.
pub const RECEIVE_GRACE: Duration = Duration::from_secs(10);
pub const MAX_STREAMS: u32 = 128;
/// How long a new test waits for a finishing one before it is answered "busy".
pub const CLAIM_PATIENCE: Duration = Duration::from_secs(2);

/// Caps the endpoint enforces.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServiceLimits {
    pub max_duration: Duration,
    /// Largest rate per direction (UDP target rate; TCP pacing cap).
    pub max_rate_bps: Option<u64>,
}

impl Default for ServiceLimits {
    fn default() -> Self {
        Self {
            max_duration: Duration::from_secs(300),
            max_rate_bps: None,
        }
    }
}

/// What a connection's setup said it is.
enum Setup {
    Control(Message),
    Data { test_id: u64, stream_id: u32 },
}

struct ActiveTest {
    test_id: u64,
    ends_at: Instant,
    data: mpsc::Sender<(u32, TcpStream)>,
}

/// Interval samples one test may ask the endpoint to keep (streams × intervals):
/// 128 streams reporting every 200 ms for 300 s, or one stream every 10 ms for 2 000 s.
pub const MAX_INTERVAL_SAMPLES: u64 = 200_000;

/// The exclusive-test state shared by the native service and the iperf3 listener.
pub struct ThroughputService {
    pub limits: ServiceLimits,
    /// Who may test, and how much (shared with the endpoint's TCP accept loop).
    pub sources: Arc<SourcePolicy>,
    /// An agent's endpoint: the server's tickets required for every test.
    pub tickets: Option<Arc<TicketGate>>,
    active: Mutex<Option<ActiveTest>>,
}

/// Clears the active test when the control session ends, however it ends.
struct ActiveGuard<'a>(&'a ThroughputService);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut active) = self.0.active.lock() {
            *active = None;
        }
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

impl ThroughputService {
    /// A service without source limits or tickets (library use, one test driving it
    /// directly).
    pub fn new(limits: ServiceLimits) -> Arc<Self> {
        Self::guarded(limits, SourcePolicy::new(SourceLimits::unlimited()), None)
    }

    pub fn guarded(
        limits: ServiceLimits,
        sources: Arc<SourcePolicy>,
        tickets: Option<Arc<TicketGate>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            limits,
            sources,
            tickets,
            active: Mutex::new(None),
        })
    }

    /// Seconds until the running test should end, if one runs.
    pub fn busy_retry_after_s(&self) -> Option<u64> {
        let active = self.active.lock().ok()?;
        active.as_ref().map(|test| {
            test.ends_at
                .saturating_duration_since(Instant::now())
                .as_secs()
                + 1
        })
    }

    /// Claims the service for a test of `duration`; `Err(retry_after_s)` when busy.
    /// A test that is just finishing (results sent, sockets closing) gets
    /// [`CLAIM_PATIENCE`] to let go, so back-to-back runs are not told "busy".
    fn claim(&self, duration: Duration) -> Result<(u64, mpsc::Receiver<(u32, TcpStream)>), u64> {
        let give_up = Instant::now() + CLAIM_PATIENCE;
        let mut active = self.active.lock().map_err(|_| 1u64)?;
        while let Some(test) = active.as_ref() {
            let retry_after_s = test
                .ends_at
                .saturating_duration_since(Instant::now())
                .as_secs()
                + 1;
            if Instant::now() >= give_up {
                return Err(retry_after_s);
            }
            drop(active);
            std::thread::sleep(Duration::from_millis(50));
            active = self.active.lock().map_err(|_| 1u64)?;
        }
        let (sender, receiver) = mpsc::channel();
        let test_id = rand::random::<u64>();
        *active = Some(ActiveTest {
            test_id,
            ends_at: Instant::now() + duration + RECEIVE_GRACE,
            data: sender,
        });
        Ok((test_id, receiver))
    }

    /// Claims the service for a foreign-protocol test (the iperf3 listener).
    pub fn claim_exclusive(&self, duration: Duration) -> Result<ExclusiveClaim<'_>, u64> {
        self.claim(duration).map(|_| ExclusiveClaim {
            _guard: ActiveGuard(self),
        })
    }

    /// Sets the running test's planned length once it is known (busy answers then
    /// say when it really ends).
    pub fn plan_active(&self, duration: Duration) {
        if let Ok(mut active) = self.active.lock() {
            if let Some(test) = active.as_mut() {
                test.ends_at = Instant::now() + duration;
            }
        }
    }

    /// Serves one connection of kind `T` after its preamble was answered `Ok`. Its
    /// setup (connection type, then the data header or the control request) must
    /// arrive within [`SETUP_TIMEOUT`] in total.
    pub fn handle(self: &Arc<Self>, stream: TcpStream) -> io::Result<()> {
        stream.set_read_timeout(Some(SETUP_TIMEOUT))?;
        let setup = {
            let mut reader = DeadlineReader::new(&stream, SETUP_TIMEOUT)?;
            let mut kind = [0u8; 1];
            reader.read_exact(&mut kind)?;
            match kind[0] {
                wire::CONNECTION_CONTROL => {
                    Setup::Control(wire::read_message(&mut reader, wire::MAX_REQUEST_BYTES)?)
                }
                wire::CONNECTION_DATA => {
                    let mut header = [0u8; 12];
                    reader.read_exact(&mut header)?;
                    Setup::Data {
                        test_id: u64::from_be_bytes(header[..8].try_into().unwrap()),
                        stream_id: u32::from_be_bytes(header[8..].try_into().unwrap()),
                    }
                }
                other => {
                    return Err(invalid(format!(
                        "unknown throughput connection type 0x{other:02x}"
                    )))
                }
            }
        };
        match setup {
            Setup::Control(request) => self.control(stream, request),
            Setup::Data { test_id, stream_id } => {
                let active = self
                    .active
                    .lock()
                    .map_err(|_| io::Error::other("state poisoned"))?;
                match active.as_ref() {
                    Some(test) if test.test_id == test_id => {
                        let _ = test.data.send((stream_id, stream));
                        Ok(())
                    }
                    _ => Err(invalid(format!(
                        "data connection for unknown test {test_id:016x}"
                    ))),
                }
            }
        }
    }

    /// Accepts vantage TCP connections on `listener` (preamble, kind `T` only) until
    /// `stop`; for running the throughput service on its own (tests, lab namespaces).
    pub fn serve_blocking(
        self: Arc<Self>,
        listener: TcpListener,
        stop: Arc<AtomicBool>,
    ) -> io::Result<()> {
        let sources = Arc::clone(&self.sources);
        accept_until_stopped(
            &listener,
            &stop,
            "throughput",
            &sources,
            move |stream, _| self.accept_preamble(stream),
        )
    }

    fn accept_preamble(self: &Arc<Self>, mut stream: TcpStream) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(SETUP_TIMEOUT))?;
        let mut preamble = [0u8; PREAMBLE_LEN];
        stream.read_exact(&mut preamble)?;
        match parse_header(&preamble) {
            Some((PROTOCOL_VERSION, wire::KIND_THROUGHPUT)) => {
                stream.write_all(&encode_status(Status::Ok))?;
                self.handle(stream)
            }
            _ => Err(invalid("not a vantage throughput preamble".into())),
        }
    }

    /// Checks a request against the endpoint's limits; `Err` says what is out of bounds.
    pub fn check_request(&self, request: &TestRequest) -> Result<(), String> {
        if request.streams == 0 || request.streams > MAX_STREAMS {
            return Err(format!(
                "streams must be 1..={MAX_STREAMS}, got {}",
                request.streams
            ));
        }
        if !request.client_sends && !request.server_sends {
            return Err("neither side sends".into());
        }
        let duration = Duration::from_millis(request.duration_ms);
        if duration > self.limits.max_duration || request.duration_ms == 0 {
            return Err(format!(
                "duration {:.1} s outside this endpoint's limit of {:.0} s",
                duration.as_secs_f64(),
                self.limits.max_duration.as_secs_f64()
            ));
        }
        if request.interval_ms < 10 {
            return Err(format!(
                "interval {} ms is below 10 ms",
                request.interval_ms
            ));
        }
        let directions = u64::from(request.client_sends) + u64::from(request.server_sends);
        let samples = u64::from(request.streams)
            * directions
            * request.duration_ms.div_ceil(request.interval_ms);
        if samples > MAX_INTERVAL_SAMPLES {
            return Err(format!(
                "{} streams × {} directions × {} intervals of {} ms make {samples} interval samples, \
                 more than this endpoint keeps ({MAX_INTERVAL_SAMPLES}); use a longer interval",
                request.streams,
                directions,
                request.duration_ms.div_ceil(request.interval_ms),
                request.interval_ms
            ));
        }
        if let (Some(rate), Some(max)) = (request.rate_bps, self.limits.max_rate_bps) {
            if rate > max {
                return Err(format!(
                    "rate {rate} bit/s exceeds this endpoint's limit of {max} bit/s"
                ));
            }
        }
        if request.udp {
            if request.rate_bps.unwrap_or(0) == 0 {
                return Err("UDP needs a rate".into());
            }
            let size = request.packet_size_bytes.unwrap_or(1472);
            if !(64..=65_000).contains(&size) {
                return Err(format!("packet size {size} B outside 64..=65000"));
            }
        }
        Ok(())
    }

    fn control(self: &Arc<Self>, mut control: TcpStream, request: Message) -> io::Result<()> {
        control.set_nodelay(true)?;
        let request = match request {
            Message::Request(request) => request,
            Message::Authorize { ticket } => {
                let presented = match &self.tickets {
                    Some(gate) => gate.present(&ticket, control.peer_addr()?.ip()),
                    // An endpoint without tickets serves everyone anyway.
                    None => Ok(()),
                };
                let answer = match presented {
                    Ok(()) => Message::Authorized,
                    Err(reason) => Message::Refused { reason },
                };
                return wire::write_message(&mut control, &answer);
            }
            other => return Err(invalid(format!("expected a request, got {other:?}"))),
        };
        if let Err(reason) = self.check_request(&request) {
            return wire::write_message(&mut control, &Message::Refused { reason });
        }
        // Checked before claiming, so an unticketed client is told why at once.
        let ticket = match self
            .tickets
            .as_ref()
            .map(|gate| gate.check(request.ticket.as_ref()))
        {
            Some(Err(reason)) => {
                return wire::write_message(&mut control, &Message::Refused { reason })
            }
            Some(Ok(claims)) => Some(claims),
            None => None,
        };
        let duration = Duration::from_millis(request.duration_ms);
        let (test_id, data_connections) = match self.claim(duration) {
            Ok(claimed) => claimed,
            Err(retry_after_s) => {
                let reason = format!("a throughput test is running; retry after {retry_after_s} s");
                return wire::write_message(
                    &mut control,
                    &Message::Busy {
                        retry_after_s,
                        reason,
                    },
                );
            }
        };
        let _guard = ActiveGuard(self);
        let peer = control.peer_addr()?;
        if let Err(refused) = self.sources.charge(peer.ip(), duration) {
            let reason = refused.to_string();
            return wire::write_message(&mut control, &Message::Refused { reason });
        }
        if let (Some(gate), Some(claims)) = (&self.tickets, &ticket) {
            if let Err(reason) = gate.charge(claims, duration) {
                return wire::write_message(&mut control, &Message::Refused { reason });
            }
        }
        let roles = stream_roles(request.streams, request.client_sends, request.server_sends);
        let local_ip = control.local_addr()?.ip();
        let mut udp_sockets = Vec::new();
        if request.udp {
            for _ in &roles {
                udp_sockets.push(UdpSocket::bind(SocketAddr::new(local_ip, 0))?);
            }
        }
        let udp_ports = udp_sockets
            .iter()
            .map(|s| s.local_addr().map(|a| a.port()))
            .collect::<io::Result<_>>()?;
        let max_rate_bps = self.limits.max_rate_bps;
        wire::write_message(
            &mut control,
            &Message::Accepted {
                test_id,
                udp_ports,
                max_rate_bps,
            },
        )?;

        let options = SocketOptions {
            window_bytes: request.window_bytes,
            congestion: request.congestion.clone(),
            pacing_rate_bps: pacing_per_stream(
                request.pacing_rate_bps,
                max_rate_bps,
                request.streams,
            ),
            dscp: request.dscp,
            mss_bytes: None,
        };
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let mut streams = Vec::with_capacity(roles.len());
        if request.udp {
            for ((id, client_sends), socket) in roles.iter().zip(udp_sockets) {
                accept_udp_hello(&socket, test_id, *id, peer.ip(), deadline)?;
                options.apply(&socket, peer, false)?;
                streams.push(DataStream {
                    id: *id,
                    sending: !client_sends,
                    socket: DataSocket::Udp(socket),
                });
            }
        } else {
            let mut pending: Vec<(u32, TcpStream)> = Vec::new();
            while pending.len() < roles.len() {
                let left = deadline.saturating_duration_since(Instant::now());
                let (id, stream) = data_connections.recv_timeout(left).map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        "client did not open its data streams",
                    )
                })?;
                pending.push((id, stream));
            }
            for (id, client_sends) in &roles {
                let position = pending
                    .iter()
                    .position(|(pending_id, _)| pending_id == id)
                    .ok_or_else(|| invalid(format!("stream {id} never connected")))?;
                let (_, stream) = pending.swap_remove(position);
                stream.set_read_timeout(None)?;
                options.apply(&stream, peer, true)?;
                streams.push(DataStream {
                    id: *id,
                    sending: !client_sends,
                    socket: DataSocket::Tcp(stream),
                });
            }
        }
        match wire::read_message(
            &mut DeadlineReader::new(&control, SETUP_TIMEOUT)?,
            wire::MAX_REQUEST_BYTES,
        )? {
            Message::Ready => {}
            other => return Err(invalid(format!("expected ready, got {other:?}"))),
        }
        wire::write_message(&mut control, &Message::Start)?;

        let settings = engine_settings(&request, Duration::from_millis(request.duration_ms));
        let stop = Arc::new(AtomicBool::new(false));
        let (ended_tx, ended_rx) = mpsc::channel();
        let mut watcher_control = control.try_clone()?;
        watcher_control.set_read_timeout(None)?;
        let watcher_stop = Arc::clone(&stop);
        let udp = request.udp;
        std::thread::spawn(move || {
            let ended = matches!(
                wire::read_message(&mut watcher_control, wire::MAX_REQUEST_BYTES),
                Ok(Message::End)
            );
            // TCP receivers end at EOF, after the sender's buffered bytes arrived; UDP
            // receivers have no EOF and stop a drain time after the client's end. A
            // vanished client stops everything at once.
            if ended && udp {
                std::thread::sleep(UDP_DRAIN);
            }
            if !ended || udp {
                watcher_stop.store(true, Ordering::Relaxed);
            }
            let _ = ended_tx.send(ended);
        });
        let run = run_streams(streams, &settings, &stop);
        let ended = ended_rx
            .recv_timeout(Duration::from_millis(request.duration_ms) + RECEIVE_GRACE)
            .unwrap_or(false);
        if !ended {
            // Wakes the watcher thread should the client hold the connection silently.
            let _ = control.shutdown(std::net::Shutdown::Both);
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "client vanished before the end",
            ));
        }
        wire::write_message(&mut control, &Message::Report { run })
    }
}

/// Held while a foreign-protocol test owns the service.
pub struct ExclusiveClaim<'a> {
    _guard: ActiveGuard<'a>,
}

/// Splits a pacing request (and the endpoint cap) over the streams.
pub fn pacing_per_stream(requested: Option<u64>, cap: Option<u64>, streams: u32) -> Option<u64> {
    let per_stream_cap = cap.map(|cap| cap / u64::from(streams.max(1)));
    match (requested, per_stream_cap) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Engine settings of one side from the request (both sides use the same).
pub fn engine_settings(request: &TestRequest, duration: Duration) -> EngineSettings {
    EngineSettings {
        send_duration: Some(duration),
        send_bytes_per_stream: request
            .bytes
            .map(|bytes| bytes.div_ceil(u64::from(request.streams))),
        receive_duration: duration + RECEIVE_GRACE,
        interval: Duration::from_millis(request.interval_ms),
        shutdown_after_send: true,
        udp: request.udp.then(|| UdpSettings {
            rate_bps_per_stream: request.rate_bps.unwrap_or(0) as f64 / f64::from(request.streams),
            payload_bytes: request.packet_size_bytes.unwrap_or(1472) as usize,
            counter_64bit: true,
        }),
        affinity: Vec::new(),
    }
}

/// Whether two addresses are the same host (an IPv4 address and its IPv4-mapped IPv6
/// form are, as a dual-stack socket reports one as the other).
pub(crate) fn same_host(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

/// Waits for the client's hello on `socket` from `client` (the control connection's
/// host), connects to its source and acknowledges. A hello from another host is
/// ignored: with a forged source it would aim a reverse test at a third party.
fn accept_udp_hello(
    socket: &UdpSocket,
    test_id: u64,
    stream_id: u32,
    client: IpAddr,
    deadline: Instant,
) -> io::Result<()> {
    let mut buf = [0u8; 64];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no UDP hello for stream {stream_id}"),
            ));
        }
        socket.set_read_timeout(Some(left))?;
        let (len, from) = match socket.recv_from(&mut buf) {
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
            tracing::info!(%from, %client, "UDP hello from another host than the control connection ignored");
            continue;
        }
        if wire::parse_udp_hello(&buf[..len], wire::UDP_HELLO) == Some((test_id, stream_id)) {
            socket.connect(from)?;
            socket.send(&wire::encode_udp_hello(
                wire::UDP_HELLO_ACK,
                test_id,
                stream_id,
            ))?;
            return Ok(());
        }
    }
}

/// Most connections a listener handles at once, each on its own thread: one test's
/// control connection and [`MAX_STREAMS`] data streams, plus room for a few refusals.
pub const MAX_CONNECTION_THREADS: usize = MAX_STREAMS as usize + 32;

/// Accepts connections on `listener` until `stop` is set, handling each on its own
/// thread, at most [`MAX_CONNECTION_THREADS`] at once and as many per source as
/// `sources` admits: a connection beyond that (or from an address not allowed) is
/// closed at once, and a thread the system cannot start costs that connection only,
/// never the listener. Non-blocking accept polled every 20 ms so `stop` is noticed
/// without a wake-up connection. The handler also gets the connection's accept
/// number: the threads run in any order, and a protocol that gives connections roles
/// by their order (iperf3's `--bidir`) needs the order of accept.
pub(crate) fn accept_until_stopped<H>(
    listener: &TcpListener,
    stop: &AtomicBool,
    service_name: &'static str,
    sources: &Arc<SourcePolicy>,
    handle: H,
) -> io::Result<()>
where
    H: Fn(TcpStream, u64) -> io::Result<()> + Send + Sync + 'static,
{
    listener.set_nonblocking(true)?;
    let handle = Arc::new(handle);
    let running = Arc::new(AtomicUsize::new(0));
    let mut accepted = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if running.load(Ordering::Acquire) >= MAX_CONNECTION_THREADS {
                    tracing::info!(%peer, "{service_name}: {MAX_CONNECTION_THREADS} connections already served; closing this one");
                    drop(stream);
                    continue;
                }
                let admitted = match sources.admit(peer.ip()) {
                    Ok(admitted) => admitted,
                    Err(refused) => {
                        tracing::info!("{service_name}: {refused}; closing the connection");
                        drop(stream);
                        continue;
                    }
                };
                let handle = Arc::clone(&handle);
                accepted += 1;
                let number = accepted;
                running.fetch_add(1, Ordering::AcqRel);
                let finished = Arc::clone(&running);
                let spawned = std::thread::Builder::new()
                    .name(format!("{service_name}-conn"))
                    .spawn(move || {
                        if let Err(err) = handle(stream, number) {
                            tracing::debug!(%peer, "{service_name} connection ended: {err}");
                        }
                        drop(admitted);
                        finished.fetch_sub(1, Ordering::AcqRel);
                    });
                if let Err(err) = spawned {
                    // The closure (and with it the connection) was dropped unrun.
                    running.fetch_sub(1, Ordering::AcqRel);
                    tracing::warn!(%peer, "{service_name}: cannot start a thread for a connection: {err}");
                }
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(err) => tracing::debug!("{service_name} accept failed: {err}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, UdpSocket};
    use std::time::{Duration, Instant};

    use super::{accept_udp_hello, same_host};
    use crate::throughput::wire;

    #[test]
    fn a_udp_hello_from_another_host_than_the_control_connection_is_ignored() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        let target = server.local_addr().unwrap();
        let hello = wire::encode_udp_hello(wire::UDP_HELLO, 42, 1);
        // The forged hello (a third party's address) arrives first, then the client's.
        let third_party = UdpSocket::bind("127.0.0.2:0").unwrap();
        third_party.send_to(&hello, target).unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.send_to(&hello, target).unwrap();
        let control_host: IpAddr = "127.0.0.1".parse().unwrap();
        accept_udp_hello(
            &server,
            42,
            1,
            control_host,
            Instant::now() + Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(server.peer_addr().unwrap(), client.local_addr().unwrap());
        let mut ack = [0u8; 64];
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let len = client.recv(&mut ack).unwrap();
        assert_eq!(
            wire::parse_udp_hello(&ack[..len], wire::UDP_HELLO_ACK),
            Some((42, 1))
        );
        third_party
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(
            third_party.recv(&mut ack).is_err(),
            "the third party got nothing"
        );
    }

    #[test]
    fn ipv4_mapped_addresses_are_the_same_host() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert!(same_host(v4, mapped));
        assert!(!same_host(v4, "192.0.2.8".parse().unwrap()));
    }
}
