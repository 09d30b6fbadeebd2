//! TWAMP-Light sender (RFC 5357 §4.1, unauthenticated, no control session), or
//! STAMP Session-Sender (RFC 8762 §4.2, unauthenticated; SSID per RFC 8972 §3) when
//! the spec asks for `udp_mode: stamp`.
//!
//! Replies are accepted from 38 bytes on (see `crate::twamp` on short replies); in
//! STAMP mode a reply carrying another non-zero SSID belongs to another session and
//! is ignored, while SSID 0 is a TWAMP-Light or RFC 8762-only reflector answering
//! (RFC 8762 §4.6) and counts.
//!
//! RTT = (t4 - t1) - (t3 - t2): our send and receive stamps minus the reflector's
//! residence time (its receive and send stamps), which needs no clock sync because
//! each difference is taken on one clock. One-way delays t2 - t1 and t4 - t3 need
//! both clocks synchronised and are reported only then, with an error bound.
//!
//! Loss split: an opening probe before the first counted probe and a closing probe
//! after the last bracket the run, so the reflector's sequence numbers bound every
//! gap (see `vantage_stats::split_loss`). They are not counted in the results.

use std::io;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use vantage_model::latency::{
    ClockSync, LatencySpec, OneWay, ReflectorReport, TimestampSource, Timestamping, TransmitStamp,
    UdpMode,
};
use vantage_stats::{distribution, split_loss, Bracket, SequenceTracker};

use super::engine::{EngineRun, LatencyError, ProbeOutcome, Progress};
use crate::clock::local_clock_sync;
use crate::mtu::{check_fragmentation, ip_header_bytes, path_mtu, UDP_HEADER_BYTES};
use crate::timestamp::{
    drain_tx_stamps, enable_timestamping, now_unix_ns, poll_readable, poll_until, recv_with_meta,
};
use crate::twamp::{self, ErrorEstimate, NtpTimestamp, ReflectorPacket, SenderPacket};

/// One packet we sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SentPacket {
    pub sender_seq: u32,
    /// Read right before `send`.
    pub user_tx_ns: i64,
    pub kernel_tx_ns: Option<i64>,
    /// Monotonic send instant, for deadlines.
    pub sent_at: Instant,
}

/// One reply that came back (first copy per sender sequence number only).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reply {
    pub packet: ReflectorPacket,
    pub rx_ns: i64,
    pub kernel_rx: bool,
    pub received_at: Instant,
}

impl SentPacket {
    /// Our transmit stamp t1: the kernel's if it is plausible (after the user stamp
    /// and before the reply), else the user one.
    pub fn tx_ns(&self, rx_ns: Option<i64>) -> (i64, bool) {
        match self.kernel_tx_ns {
            Some(k) if k >= self.user_tx_ns && rx_ns.is_none_or(|rx| k <= rx) => (k, true),
            _ => (self.user_tx_ns, false),
        }
    }
}

/// How much longer than our packet a reply may be and still be read whole. Reflectors
/// answer with the sender's size (RFC 6038 symmetric size) or their own 41-byte
/// minimum, STAMP ones with the sender's TLVs echoed (RFC 8972); anything longer is
/// not a reply to us. A buffer per run sized to the run, not 64 KiB: an agent in a
/// dense mesh has hundreds of runs open at once.
const REPLY_ROOM_BYTES: usize = 1024;

/// A connected UDP socket speaking TWAMP-Light sender, shared by the latency and
/// sandwich engines.
pub(crate) struct TwampClient {
    socket: Socket,
    pub peer: SocketAddr,
    /// Indexed by send order, which is the kernel's `OPT_ID` stamp counter.
    pub sent: Vec<SentPacket>,
    /// Indexed by sender sequence number.
    pub replies: Vec<Option<Reply>>,
    pub arrival_order: SequenceTracker,
    pub duplicates: u64,
    pub refused: bool,
    send_buffer: Vec<u8>,
    /// Room for a reply to the largest packet sent (see [`REPLY_ROOM_BYTES`]), reused
    /// across receives.
    receive_buffer: Vec<u8>,
    error_estimate: ErrorEstimate,
    /// `Some(ssid)`: send STAMP Session-Sender packets with this SSID.
    stamp_ssid: Option<u16>,
}

impl TwampClient {
    /// A client for a run that numbers its packets `0..packets`.
    pub fn connect(
        peer: SocketAddr,
        dscp: u8,
        tx_timestamp: TransmitStamp,
        packets: u32,
    ) -> Result<Self, LatencyError> {
        let io = |what: &str| {
            let what = format!("{what} (UDP to {peer})");
            move |e| LatencyError::io(what, e)
        };
        let socket = Socket::new(Domain::for_address(peer), Type::DGRAM, Some(Protocol::UDP))
            .map_err(io("creating socket"))?;
        set_dscp(&socket, peer, dscp).map_err(io("setting DSCP"))?;
        socket
            .connect(&peer.into())
            .map_err(|e| LatencyError::from_send(peer, e))?;
        socket
            .set_nonblocking(true)
            .map_err(io("setting non-blocking"))?;
        enable_timestamping(&socket, tx_timestamp == TransmitStamp::Kernel);
        let sync = local_clock_sync();
        let error_us = sync
            .estimated_error_us
            .or(sync.max_error_us)
            .unwrap_or(1_000_000);
        Ok(Self {
            socket,
            peer,
            sent: Vec::new(),
            replies: Vec::new(),
            // Sized to the run, up to the default 64 Ki numbers (16 KiB): an agent in a
            // dense mesh has hundreds of runs of a dozen packets open.
            arrival_order: SequenceTracker::with_window(u64::from(packets).min(1 << 16)),
            duplicates: 0,
            refused: false,
            send_buffer: Vec::new(),
            receive_buffer: Vec::new(),
            error_estimate: ErrorEstimate::from_error_seconds(
                sync.synchronized,
                error_us as f64 * 1e-6,
            ),
            stamp_ssid: None,
        })
    }

    /// Sends STAMP Session-Sender packets (RFC 8762 §4.2.1) carrying `ssid`
    /// (RFC 8972 §3; 0 means "no SSID") from now on.
    pub fn use_stamp(&mut self, ssid: u16) {
        self.stamp_ssid = Some(ssid);
    }

    /// The SSID our STAMP packets carry, `None` in TWAMP-Light mode.
    pub fn stamp_ssid(&self) -> Option<u16> {
        self.stamp_ssid
    }

    /// Refuses `payload_bytes` if it would fragment on the path (unless allowed);
    /// returns the path MTU.
    pub fn check_size(
        &self,
        payload_bytes: u32,
        allow_fragmentation: bool,
    ) -> Result<u32, LatencyError> {
        let mtu = path_mtu(
            &self.socket,
            self.peer.is_ipv6() && ip_header_bytes(self.peer.ip()) == 40,
        )
        .map_err(|e| LatencyError::io("reading the path MTU", e))?;
        check_fragmentation(
            payload_bytes,
            ip_header_bytes(self.peer.ip()) + UDP_HEADER_BYTES,
            mtu,
            allow_fragmentation,
        )?;
        Ok(mtu)
    }

    /// Sends one test packet of `size` bytes numbered `sender_seq`.
    pub fn send(&mut self, sender_seq: u32, size: usize) -> Result<(), LatencyError> {
        // Grow only: refilling a large buffer per send would sit between the stamp
        // and the send (and between a sandwich's packets).
        if self.send_buffer.len() < size {
            self.send_buffer.resize(size, 0);
            self.receive_buffer.resize(size + REPLY_ROOM_BYTES, 0);
        }
        let user_tx_ns = now_unix_ns();
        let packet = SenderPacket {
            seq: sender_seq,
            timestamp: NtpTimestamp::from_unix_nanos(user_tx_ns),
            error_estimate: self.error_estimate,
            len: size,
        };
        match self.stamp_ssid {
            Some(ssid) => twamp::encode_stamp_sender(&packet, ssid, &mut self.send_buffer),
            None => twamp::encode_sender(&packet, &mut self.send_buffer),
        }
        .map_err(|e| LatencyError::InvalidSpec(e.to_string()))?;
        let sent_at = Instant::now();
        if let Err(err) = self.socket.send(&self.send_buffer[..size]) {
            if err.raw_os_error() == Some(libc::ECONNREFUSED) {
                // An ICMP port unreachable for an earlier packet; this one was not sent.
                self.refused = true;
            }
            return Err(LatencyError::from_send(self.peer, err));
        }
        self.sent.push(SentPacket {
            sender_seq,
            user_tx_ns,
            kernel_tx_ns: None,
            sent_at,
        });
        let index = sender_seq as usize;
        if self.replies.len() <= index {
            self.replies.resize(index + 1, None);
        }
        Ok(())
    }

    /// Receives replies until `deadline` or until `done` says enough came back.
    pub fn receive_until(
        &mut self,
        deadline: Instant,
        done: &mut dyn FnMut(&Self) -> bool,
    ) -> Result<(), LatencyError> {
        let mut buf = std::mem::take(&mut self.receive_buffer);
        let result = self.receive_into(deadline, done, &mut buf);
        self.receive_buffer = buf;
        result
    }

    fn receive_into(
        &mut self,
        deadline: Instant,
        done: &mut dyn FnMut(&Self) -> bool,
        buf: &mut [u8],
    ) -> Result<(), LatencyError> {
        loop {
            if done(self) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            // Round up so we never spin on a sub-millisecond remainder.
            let wait_ms = (deadline - now)
                .as_micros()
                .div_ceil(1000)
                .min(i32::MAX as u128) as i32;
            let revents = poll_readable(self.socket.as_raw_fd(), wait_ms)
                .map_err(|e| LatencyError::io("waiting for replies", e))?;
            if revents & libc::POLLERR != 0 {
                self.collect_tx_stamps();
            }
            if revents & libc::POLLIN != 0 {
                self.drain_into(buf)?;
            }
        }
    }

    /// Reads every reply queued on the socket without waiting.
    pub fn drain_replies(&mut self) -> Result<(), LatencyError> {
        let mut buf = std::mem::take(&mut self.receive_buffer);
        let result = self.drain_into(&mut buf);
        self.receive_buffer = buf;
        result
    }

    fn drain_into(&mut self, buf: &mut [u8]) -> Result<(), LatencyError> {
        let fd = self.socket.as_raw_fd();
        loop {
            match recv_with_meta(fd, buf, libc::MSG_DONTWAIT) {
                Ok(received) => {
                    let rx_ns = received.kernel_rx_ns.unwrap_or_else(now_unix_ns);
                    if received.truncated {
                        continue;
                    }
                    // Anything that is not a reply to one of our probes is ignored.
                    let Ok(packet) = twamp::parse_reflector(&buf[..received.len]) else {
                        continue;
                    };
                    if self
                        .stamp_ssid
                        .is_some_and(|ours| packet.ssid != 0 && packet.ssid != ours)
                    {
                        continue; // another STAMP session's reply
                    }
                    self.record_reply(packet, rx_ns, received.kernel_rx_ns.is_some());
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(err) if err.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    self.refused = true;
                    return Ok(());
                }
                Err(err) => return Err(LatencyError::io("receiving replies", err)),
            }
        }
    }

    fn record_reply(&mut self, packet: ReflectorPacket, rx_ns: i64, kernel_rx: bool) {
        let index = packet.sender_seq as usize;
        let Some(slot) = self.replies.get_mut(index) else {
            return; // never sent by us
        };
        // Slots exist only for numbers already sent (send() grows the table).
        if slot.is_some() {
            self.duplicates += 1;
            return;
        }
        *slot = Some(Reply {
            packet,
            rx_ns,
            kernel_rx,
            received_at: Instant::now(),
        });
        self.arrival_order.observe(u64::from(packet.sender_seq));
    }

    /// Moves queued kernel transmit stamps onto the packets they belong to; how many
    /// there were.
    pub fn collect_tx_stamps(&mut self) -> usize {
        let stamps = drain_tx_stamps(self.socket.as_raw_fd());
        for stamp in &stamps {
            if let Some(sent) = self.sent.get_mut(stamp.send_index as usize) {
                sent.kernel_tx_ns = Some(stamp.kernel_tx_ns);
            }
        }
        stamps.len()
    }

    /// The reply to `sender_seq` if it came back within `timeout` of the send.
    pub fn reply_within(&self, sent: &SentPacket, timeout: Duration) -> Option<Reply> {
        let reply = self
            .replies
            .get(sent.sender_seq as usize)
            .copied()
            .flatten()?;
        (reply.received_at.saturating_duration_since(sent.sent_at) <= timeout).then_some(reply)
    }

    /// Which stamps the run used: kernel only if every stamp that mattered was the kernel's.
    /// Only packets whose sender sequence number is in `counted` are considered (the
    /// latency engine's bracket probes are not results).
    pub fn timestamping(&self, timeout: Duration, counted: RangeInclusive<u32>) -> Timestamping {
        let mut any_sent = false;
        let mut all_tx_kernel = true;
        let mut all_rx_kernel = true;
        for sent in self.sent.iter().filter(|s| counted.contains(&s.sender_seq)) {
            any_sent = true;
            let reply = self.reply_within(sent, timeout);
            all_tx_kernel &= sent.tx_ns(reply.map(|r| r.rx_ns)).1;
            if let Some(reply) = reply {
                all_rx_kernel &= reply.kernel_rx;
            }
        }
        let source = |kernel: bool| {
            if kernel {
                TimestampSource::Kernel
            } else {
                TimestampSource::User
            }
        };
        Timestamping {
            transmit: source(all_tx_kernel && any_sent),
            receive: source(all_rx_kernel),
        }
    }
}

/// Sets the DSCP (upper six bits of the TOS / traffic class byte).
pub(crate) fn set_dscp(socket: &Socket, peer: SocketAddr, dscp: u8) -> io::Result<()> {
    if dscp == 0 {
        return Ok(());
    }
    let tos = u32::from(dscp) << 2;
    if peer.is_ipv6() {
        socket.set_tclass_v6(tos)
    } else {
        socket.set_tos(tos)
    }
}

/// RTT, forward and reverse delays (µs) of one exchange from t1..t4 in ns.
/// The reflector's residence time t3 - t2 is subtracted only when it is sane
/// (non-negative and shorter than what we measured); a broken reflector clock
/// otherwise falls back to t4 - t1.
pub(crate) fn exchange_delays_us(t1: i64, t2: i64, t3: i64, t4: i64) -> (f64, f64, f64) {
    let round_trip = t4 - t1;
    let residence = t3 - t2;
    let rtt_ns = if residence >= 0 && residence <= round_trip {
        round_trip - residence
    } else {
        round_trip
    };
    (
        rtt_ns as f64 / 1e3,
        (t2 - t1) as f64 / 1e3,
        (t4 - t3) as f64 / 1e3,
    )
}

/// Where a [`UdpSession`] is.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Counted probe `next` (1..=count) is due at `start + interval * (next - 1)`.
    Probing {
        next: u32,
    },
    /// Every probe is out, the closing bracket too: replies are awaited until `deadline`.
    Awaiting {
        deadline: Instant,
    },
    /// Replies are in; kernel transmit stamps can trail the last reply by a moment.
    StampGrace {
        until: Instant,
    },
    Done,
}

/// One UDP latency run as a state machine without I/O waits of its own: the caller
/// owns the waiting (`poll(2)` on this one socket in [`run`], on many sockets in the
/// shared prober) and calls [`UdpSession::on_readable`] when the socket has something
/// and [`UdpSession::on_time`] once [`UdpSession::next_wake`] has come. Stamps are
/// taken at the send and by the kernel at the receive, so a caller that serves many
/// sessions does not blur what one measures.
pub(crate) struct UdpSession {
    client: TwampClient,
    target: SocketAddr,
    size: usize,
    count: u32,
    interval: Duration,
    timeout: Duration,
    start: Instant,
    start_ns: i64,
    /// Kernel transmit stamps were asked for.
    kernel_tx: bool,
    phase: Phase,
}

impl UdpSession {
    /// Opens the socket and sends the opening bracket (sender sequence number 0;
    /// 1..=count are the counted probes, count + 1 the closing bracket).
    pub fn start(spec: &LatencySpec, target: SocketAddr) -> Result<Self, LatencyError> {
        let size = spec.size_bytes as usize;
        if spec.udp_mode == UdpMode::Stamp && !twamp::stamp_len_ok(size) {
            return Err(LatencyError::InvalidSpec(format!(
                "--size {size}: {}",
                twamp::TwampError::StampSize { len: size }
            )));
        }
        // Counted probes 1..=count between the brackets 0 and count + 1.
        let packets = spec.count.saturating_add(2);
        let mut client = TwampClient::connect(target, spec.dscp, spec.tx_timestamp, packets)?;
        if spec.udp_mode == UdpMode::Stamp {
            // Any non-zero value: it only has to tell our replies from other sessions'.
            client.use_stamp(rand::random::<u16>().max(1));
        }
        client.check_size(spec.size_bytes, spec.allow_fragmentation)?;
        let mut session = Self {
            client,
            target,
            size,
            count: spec.count,
            interval: Duration::from_micros(spec.interval_us),
            timeout: Duration::from_micros(spec.timeout_us),
            start: Instant::now(),
            start_ns: now_unix_ns(),
            kernel_tx: spec.tx_timestamp == TransmitStamp::Kernel,
            phase: Phase::Probing { next: 1 },
        };
        session.send(0)?;
        Ok(session)
    }

    /// Sends packet `seq`. The kernel stamps a send on its way out, mostly before
    /// `send` returns: taken at once, the stamp does not wake a caller that waits on
    /// many sockets.
    fn send(&mut self, seq: u32) -> Result<(), LatencyError> {
        self.client.send(seq, self.size)?;
        if self.kernel_tx {
            self.client.collect_tx_stamps();
        }
        Ok(())
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.client.socket.as_fd()
    }

    /// When [`UdpSession::on_time`] has work; `None` once the run is over.
    pub fn next_wake(&self) -> Option<Instant> {
        match self.phase {
            Phase::Probing { next } => Some(self.start + self.interval * (next - 1)),
            Phase::Awaiting { deadline } => Some(deadline),
            Phase::StampGrace { until } => Some(until),
            Phase::Done => None,
        }
    }

    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// Takes what `poll(2)` reported on the socket: transmit stamps on `POLLERR`,
    /// replies on `POLLIN`.
    pub fn on_readable(&mut self, revents: i16) -> Result<(), LatencyError> {
        let stamps = match revents & libc::POLLERR {
            0 => 0,
            _ => self.client.collect_tx_stamps(),
        };
        // An ICMP port unreachable shows as POLLERR too, until a receive reads it.
        if revents & libc::POLLIN != 0 || revents & libc::POLLERR != 0 && stamps == 0 {
            self.client.drain_replies()?;
        }
        if let Phase::Awaiting { .. } = self.phase {
            let all_in = self.client.replies.iter().skip(1).all(Option::is_some);
            if all_in || refused_before_any_answer(&self.client) {
                self.stop_receiving()?;
            }
        }
        Ok(())
    }

    /// Sends the probes due by `now` (late ones go at once), or ends the waits that
    /// are over.
    pub fn on_time(
        &mut self,
        now: Instant,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), LatencyError> {
        while let Phase::Probing { next } = self.phase {
            if self.start + self.interval * (next - 1) > now {
                return Ok(());
            }
            match self.send(next) {
                Ok(()) => {}
                Err(err) if refused_before_any_answer(&self.client) => return Err(err),
                // A refusal mid-run (e.g. the endpoint restarted) is loss, not an abort.
                Err(LatencyError::Refused { .. }) => self.client.refused = false,
                Err(err) => return Err(err),
            }
            progress(Progress {
                sent: next,
                answered: self.answered(),
                total: self.count,
            });
            if refused_before_any_answer(&self.client) {
                return Err(refused(self.target));
            }
            if next < self.count {
                self.phase = Phase::Probing { next: next + 1 };
            } else {
                self.send(self.count + 1)?;
                let last_sent = self.client.sent.last().map_or(self.start, |s| s.sent_at);
                self.phase = Phase::Awaiting {
                    deadline: last_sent + self.timeout,
                };
            }
        }
        match self.phase {
            Phase::Awaiting { deadline } if now >= deadline => self.stop_receiving(),
            Phase::StampGrace { until } if now >= until => {
                self.client.collect_tx_stamps();
                self.phase = Phase::Done;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn stop_receiving(&mut self) -> Result<(), LatencyError> {
        if refused_before_any_answer(&self.client) {
            return Err(refused(self.target));
        }
        self.client.collect_tx_stamps();
        // Stamps can trail the last reply by a moment; give them one short chance.
        self.phase = if self.client.sent.iter().any(|s| s.kernel_tx_ns.is_none()) {
            Phase::StampGrace {
                until: Instant::now() + Duration::from_millis(2),
            }
        } else {
            Phase::Done
        };
        Ok(())
    }

    fn answered(&self) -> u32 {
        let counted = self.client.replies.iter().skip(1).take(self.count as usize);
        counted.flatten().count() as u32
    }

    /// The run's outcomes, once [`UdpSession::is_done`].
    pub fn finish(self, progress: &mut dyn FnMut(Progress)) -> EngineRun {
        progress(Progress {
            sent: self.count,
            answered: self.answered(),
            total: self.count,
        });
        build_run(&self.client, self.count, self.timeout, self.start_ns)
    }
}

/// Runs one session on this thread.
pub(super) fn run(
    spec: &LatencySpec,
    target: SocketAddr,
    progress: &mut dyn FnMut(Progress),
) -> Result<EngineRun, LatencyError> {
    let mut session = UdpSession::start(spec, target)?;
    while let Some(wake) = session.next_wake() {
        let revents = poll_until(session.fd().as_raw_fd(), wake)
            .map_err(|e| LatencyError::io("waiting for replies", e))?;
        if revents != 0 {
            session.on_readable(revents)?;
        } else {
            session.on_time(Instant::now(), progress)?;
        }
    }
    Ok(session.finish(progress))
}

fn refused_before_any_answer(client: &TwampClient) -> bool {
    client.refused && client.replies.iter().all(Option::is_none)
}

fn refused(addr: SocketAddr) -> LatencyError {
    LatencyError::Refused {
        addr,
        detail: "ICMP port unreachable: nothing listens on that UDP port".into(),
    }
}

/// Pure over what the client recorded: per-probe outcomes, loss split, one-way state.
fn build_run(client: &TwampClient, count: u32, timeout: Duration, start_ns: i64) -> EngineRun {
    let reflector_seq = |sent: Option<&SentPacket>| {
        sent.and_then(|s| client.reply_within(s, timeout))
            .map(|r| r.packet.seq)
    };
    let by_seq = |seq: u32| client.sent.iter().find(|s| s.sender_seq == seq);
    let bracket = Bracket {
        opening_reflector_seq: reflector_seq(by_seq(0)),
        closing_reflector_seq: reflector_seq(by_seq(count + 1)),
    };
    let mut probes = Vec::with_capacity(count as usize);
    let mut replies_for_split = Vec::with_capacity(count as usize);
    let mut remote_error_estimate = None;
    let mut reflector = ReflectorReport {
        replies_without_ttl: 0,
        short_replies: 0,
        sender_ttl_min: None,
        sender_ttl_max: None,
        ssid_echoed: None,
    };
    for seq in 1..=count {
        let sent = by_seq(seq);
        let reply = sent.and_then(|s| client.reply_within(s, timeout));
        replies_for_split.push(reply.map(|r| r.packet.seq));
        let mut outcome = ProbeOutcome {
            sent_offset_us: sent.map_or(0.0, |s| (s.user_tx_ns - start_ns) as f64 / 1e3),
            ..ProbeOutcome::default()
        };
        if let (Some(sent), Some(reply)) = (sent, reply) {
            let (t1, _) = sent.tx_ns(Some(reply.rx_ns));
            let (rtt, forward, reverse) = exchange_delays_us(
                t1,
                reply.packet.receive_timestamp.to_unix_nanos(),
                reply.packet.timestamp.to_unix_nanos(),
                reply.rx_ns,
            );
            outcome.rtt_us = Some(rtt);
            outcome.forward_us = Some(forward);
            outcome.reverse_us = Some(reverse);
            outcome.reflector_seq = Some(reply.packet.seq);
            remote_error_estimate = Some(reply.packet.error_estimate);
            note_reflector(&mut reflector, &reply.packet, client.stamp_ssid());
        }
        probes.push(outcome);
    }
    let one_way = one_way(&mut probes, local_clock_sync(), remote_error_estimate);
    let counts = client.arrival_order.finish(u64::from(count) + 2);
    EngineRun {
        probes,
        loss_split: Some(split_loss(&replies_for_split, bracket)),
        duplicates: client.duplicates,
        reordered: counts.reordered,
        timestamping: client.timestamping(timeout, 1..=count),
        one_way: Some(one_way),
        reflector: Some(reflector),
    }
}

/// Adds one counted reply's Sender TTL and SSID to the report.
fn note_reflector(report: &mut ReflectorReport, reply: &ReflectorPacket, our_ssid: Option<u16>) {
    match reply.sender_ttl {
        Some(ttl) => {
            report.sender_ttl_min = Some(report.sender_ttl_min.map_or(ttl, |m| m.min(ttl)));
            report.sender_ttl_max = Some(report.sender_ttl_max.map_or(ttl, |m| m.max(ttl)));
        }
        None => {
            report.replies_without_ttl += 1;
            if reply.len < twamp::REFLECTOR_HEADER_LEN {
                report.short_replies += 1;
            }
        }
    }
    if let Some(ours) = our_ssid {
        // Echoed only if every reply carried it (0 from any reply means a reflector
        // that does not know RFC 8972's SSID answered at least once).
        let echoed = reply.ssid == ours;
        report.ssid_echoed = Some(report.ssid_echoed.unwrap_or(true) && echoed);
    }
}

/// One-way delays are kept only when both clocks say they are synchronised;
/// otherwise they are removed from the probes and the reason is given.
fn one_way(
    probes: &mut [ProbeOutcome],
    local_clock: ClockSync,
    remote: Option<ErrorEstimate>,
) -> OneWay {
    let remote_clock = match remote {
        Some(estimate) => ClockSync {
            synchronized: estimate.synchronized,
            estimated_error_us: estimate.error_seconds().map(|s| (s * 1e6).ceil() as u64),
            max_error_us: None,
            source: "twamp_error_estimate".into(),
        },
        None => ClockSync {
            synchronized: false,
            estimated_error_us: None,
            max_error_us: None,
            source: "unknown".into(),
        },
    };
    let reason = match (local_clock.synchronized, remote_clock.synchronized) {
        (true, true) => None,
        (false, true) => Some("local clock not synchronised (adjtimex)"),
        (true, false) if remote.is_none() => Some("no reply from the reflector"),
        (true, false) => {
            Some("reflector clock not synchronised (TWAMP error estimate S bit clear)")
        }
        (false, false) => Some("neither clock is synchronised"),
    };
    if reason.is_some() {
        for probe in probes.iter_mut() {
            probe.forward_us = None;
            probe.reverse_us = None;
        }
        return OneWay {
            local_clock,
            remote_clock,
            valid: false,
            reason: reason.map(str::to_string),
            error_bound_us: None,
            forward_delay_us: None,
            reverse_delay_us: None,
        };
    }
    let forward: Vec<f64> = probes.iter().filter_map(|p| p.forward_us).collect();
    let reverse: Vec<f64> = probes.iter().filter_map(|p| p.reverse_us).collect();
    let error_bound_us = match (
        local_clock.estimated_error_us,
        remote_clock.estimated_error_us,
    ) {
        (Some(local), Some(remote)) => Some((local + remote) as f64),
        _ => None,
    };
    OneWay {
        local_clock,
        remote_clock,
        valid: true,
        reason: None,
        error_bound_us,
        forward_delay_us: distribution(&forward),
        reverse_delay_us: distribution(&reverse),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residence_time_is_subtracted_only_when_sane() {
        // t1=0, reflector receives at 40 µs and sends at 70 µs, back at 100 µs:
        // RTT 100 - 30 = 70 µs, forward 40, reverse 30.
        assert_eq!(
            exchange_delays_us(0, 40_000, 70_000, 100_000),
            (70.0, 40.0, 30.0)
        );
        // Reflector clock 1 s ahead: RTT unaffected, one-way values absurd (hence the sync rule).
        let (rtt, forward, _) = exchange_delays_us(0, 1_000_040_000, 1_000_070_000, 100_000);
        assert_eq!(rtt, 70.0);
        assert!(forward > 1e6);
        // Negative residence (broken reflector): plain t4 - t1.
        assert_eq!(exchange_delays_us(0, 70_000, 40_000, 100_000).0, 100.0);
    }

    #[test]
    fn one_way_values_are_withheld_without_sync() {
        let mut probes = vec![ProbeOutcome {
            rtt_us: Some(70.0),
            forward_us: Some(40.0),
            reverse_us: Some(30.0),
            ..ProbeOutcome::default()
        }];
        let synced = |yes: bool| ClockSync {
            synchronized: yes,
            estimated_error_us: Some(5),
            max_error_us: Some(50),
            source: "adjtimex".into(),
        };
        let remote = ErrorEstimate::from_error_seconds(true, 10e-6);
        let mut unsynced_probes = probes.clone();
        let withheld = one_way(&mut unsynced_probes, synced(false), Some(remote));
        assert!(!withheld.valid && withheld.forward_delay_us.is_none());
        assert!(withheld.reason.unwrap().contains("local clock"));
        assert_eq!(unsynced_probes[0].forward_us, None);

        let valid = one_way(&mut probes, synced(true), Some(remote));
        assert!(valid.valid);
        assert_eq!(valid.forward_delay_us.unwrap().median, 40.0);
        // 5 µs local + the remote estimate rounded up to whole µs (10 µs encodes as ≥ 10).
        assert!(valid.error_bound_us.unwrap() >= 15.0);
    }
}
