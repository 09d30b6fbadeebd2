//! The data plane shared by every throughput mode (native client and server, iperf3
//! client and server): one OS thread per stream, blocking sockets, one reusable
//! buffer per thread, byte counters sampled at interval boundaries by the calling
//! thread together with each socket's TCP_INFO.
//!
//! Streams on threads (not one thread multiplexing sockets) is the point of
//! Miravalls-Sierra et al. (2018):
//! parallel streams only help when they can use several cores.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::run::{
    LocalInterval, LocalRun, StreamOutcome, StreamSample, UdpIntervalCounts, UdpReceived,
};
use super::wire::UDP_HELLO;
use crate::cpu::{pin_current_thread, ThreadCpuMark, ThreadCpuUse};
use crate::pacing::{sleep_until, tighten_timer_slack, PacketSchedule};
use crate::tcp_info;

/// TCP write/read size: large enough that syscall overhead is small next to copying.
pub const TCP_BLOCK_BYTES: usize = 128 * 1024;
/// How often a blocked socket call returns to look at the stop flag and deadlines.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// Datagrams per `sendmmsg`.
const UDP_BATCH: usize = 32;
/// UDP datagram header: seconds u32, microseconds u32 (sender's wall clock), then the
/// packet number (from 1) as u32 or u64, all big-endian (iperf3's layout).
pub const UDP_HEADER_BYTES_32: usize = 12;
pub const UDP_HEADER_BYTES_64: usize = 16;

/// A stream's connected socket.
#[derive(Debug)]
pub enum DataSocket {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

impl DataSocket {
    /// Another handle on the same socket: holding it keeps the socket open after the
    /// engine is done, so a peer still writing is not reset before the protocol ends.
    pub fn keep_open(&self) -> std::io::Result<DataSocket> {
        Ok(match self {
            DataSocket::Tcp(socket) => DataSocket::Tcp(socket.try_clone()?),
            DataSocket::Udp(socket) => DataSocket::Udp(socket.try_clone()?),
        })
    }

    fn raw_fd(&self) -> i32 {
        match self {
            DataSocket::Tcp(socket) => socket.as_raw_fd(),
            DataSocket::Udp(socket) => socket.as_raw_fd(),
        }
    }
}

/// One stream handed to [`run_streams`].
#[derive(Debug)]
pub struct DataStream {
    /// Stream number, from 1.
    pub id: u32,
    pub sending: bool,
    pub socket: DataSocket,
}

/// UDP sending parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UdpSettings {
    /// Payload bits per second of each sending stream.
    pub rate_bps_per_stream: f64,
    pub payload_bytes: usize,
    /// Packet numbers as u64 (native; iperf3 only with `udp_counters_64bit`).
    pub counter_64bit: bool,
}

impl UdpSettings {
    pub fn header_bytes(&self) -> usize {
        if self.counter_64bit {
            UDP_HEADER_BYTES_64
        } else {
            UDP_HEADER_BYTES_32
        }
    }
}

/// When each side of a stream stops.
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// Senders stop after this long.
    pub send_duration: Option<Duration>,
    /// Senders stop after this many bytes each.
    pub send_bytes_per_stream: Option<u64>,
    /// Receivers stop after this long even without end of stream.
    pub receive_duration: Duration,
    pub interval: Duration,
    /// TCP senders shut down their write side when done (the receiver sees EOF).
    pub shutdown_after_send: bool,
    pub udp: Option<UdpSettings>,
    /// Cores to pin stream threads to, round-robin; empty = unpinned.
    pub affinity: Vec<usize>,
}

struct Shared {
    bytes: AtomicU64,
}

fn is_timeout(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// Runs every stream on its own thread until senders reach their limit and receivers
/// see end of stream, their deadline, or `stop`. Samples at each interval boundary.
pub fn run_streams(
    streams: Vec<DataStream>,
    settings: &EngineSettings,
    stop: &Arc<AtomicBool>,
) -> LocalRun {
    let start = Instant::now();
    let running = Arc::new(AtomicUsize::new(streams.len()));
    // Stream threads wake this one as they end; otherwise it sleeps to each interval
    // boundary (no periodic wake-ups competing with the measuring threads for a core).
    let sampler = std::thread::current();
    let mut handles = Vec::with_capacity(streams.len());
    let mut sockets = Vec::with_capacity(streams.len());
    for (index, stream) in streams.into_iter().enumerate() {
        let socket = Arc::new(stream.socket);
        let shared = Arc::new(Shared {
            bytes: AtomicU64::new(0),
        });
        sockets.push((stream.id, Arc::clone(&socket), Arc::clone(&shared)));
        let settings = settings.clone();
        let stop = Arc::clone(stop);
        let running = Arc::clone(&running);
        let core = (!settings.affinity.is_empty())
            .then(|| settings.affinity[index % settings.affinity.len()]);
        let (id, sending) = (stream.id, stream.sending);
        let sampler = sampler.clone();
        handles.push(std::thread::spawn(move || {
            let outcome = run_one(id, sending, &socket, &shared, &settings, &stop, start, core);
            running.fetch_sub(1, Ordering::Release);
            sampler.unpark();
            outcome
        }));
    }

    let mut intervals: Vec<LocalInterval> = Vec::new();
    let mut previous_end_s = 0.0;
    for k in 1u32.. {
        let boundary = start + settings.interval * k;
        loop {
            let now = Instant::now();
            if now >= boundary || running.load(Ordering::Acquire) == 0 {
                break;
            }
            std::thread::park_timeout(boundary - now);
        }
        let end_s = start.elapsed().as_secs_f64();
        let samples = sockets
            .iter()
            .map(|(id, socket, shared)| StreamSample {
                id: *id,
                cumulative_bytes: shared.bytes.load(Ordering::Relaxed),
                tcp_info: match &**socket {
                    DataSocket::Tcp(tcp) => tcp_info::read(tcp).ok(),
                    DataSocket::Udp(_) => None,
                },
            })
            .collect();
        // A short tail after the streams ended (drain, last write) joins the interval
        // before it rather than showing as a sliver with a meaningless rate.
        let finished = running.load(Ordering::Acquire) == 0;
        let sliver = end_s - previous_end_s < settings.interval.as_secs_f64() / 4.0;
        match intervals.last_mut() {
            Some(last) if finished && sliver => {
                last.end_s = end_s;
                last.streams = samples;
            }
            _ => intervals.push(LocalInterval {
                start_s: previous_end_s,
                end_s,
                streams: samples,
            }),
        }
        previous_end_s = end_s;
        if finished {
            break;
        }
    }
    let streams = handles
        .into_iter()
        .zip(&sockets)
        .map(|(handle, (id, socket, _))| {
            handle.join().unwrap_or_else(|_| StreamOutcome {
                id: *id,
                sending: false,
                bytes: 0,
                active_s: 0.0,
                packets_sent: 0,
                packets_skipped: 0,
                udp_received: None,
                cpu: ThreadCpuUse::default(),
                error: Some(format!("stream thread (fd {}) panicked", socket.raw_fd())),
                reported_retransmits: None,
            })
        })
        .collect();
    LocalRun {
        wall_s: start.elapsed().as_secs_f64(),
        intervals,
        streams,
        online_cores: crate::cpu::online_cores(),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    id: u32,
    sending: bool,
    socket: &DataSocket,
    shared: &Shared,
    settings: &EngineSettings,
    stop: &AtomicBool,
    start: Instant,
    core: Option<usize>,
) -> StreamOutcome {
    let pin_error = core.and_then(|core| pin_current_thread(core).err().map(|e| e.to_string()));
    let mark = ThreadCpuMark::now();
    let mut outcome = StreamOutcome {
        id,
        sending,
        bytes: 0,
        active_s: 0.0,
        packets_sent: 0,
        packets_skipped: 0,
        udp_received: None,
        cpu: ThreadCpuUse::default(),
        error: pin_error,
        reported_retransmits: None,
    };
    let result = match (socket, sending) {
        (DataSocket::Tcp(tcp), true) => tcp_send(tcp, shared, settings, stop, start, &mut outcome),
        (DataSocket::Tcp(tcp), false) => {
            tcp_receive(tcp, shared, settings, stop, start, &mut outcome)
        }
        (DataSocket::Udp(udp), true) => udp_send(udp, shared, settings, stop, start, &mut outcome),
        (DataSocket::Udp(udp), false) => {
            udp_receive(udp, shared, settings, stop, start, &mut outcome)
        }
    };
    if let Err(err) = result {
        outcome.error.get_or_insert(err);
    }
    outcome.bytes = shared.bytes.load(Ordering::Relaxed);
    outcome.cpu = mark.elapsed();
    outcome
}

fn send_deadline(settings: &EngineSettings, start: Instant) -> Option<Instant> {
    settings.send_duration.map(|d| start + d)
}

/// A zeroed buffer that starts on a page boundary. The kernel copies to and from
/// page-aligned user memory measurably faster on loopback (bench/throughput: about
/// 10 % per byte); a plain 128 KiB `Vec` starts 16 bytes past a page boundary
/// (malloc's header in front of an mmap'd chunk).
struct PageAlignedBlock {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl PageAlignedBlock {
    const PAGE_BYTES: usize = 4096;

    fn new(len: usize) -> Self {
        let storage = vec![0u8; len + Self::PAGE_BYTES];
        let offset = storage.as_ptr().align_offset(Self::PAGE_BYTES);
        Self {
            storage,
            offset,
            len,
        }
    }

    fn as_slice(&self) -> &[u8] {
        &self.storage[self.offset..self.offset + self.len]
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.offset..self.offset + self.len]
    }
}

/// Where a TCP sender's bytes come from. The block is copied once into an in-memory
/// file (memfd) and sent with `sendfile(2)`: its page-cache pages go to the socket
/// without the per-write copy from user memory, the technique of iperf3's `-Z`. On
/// loopback that cuts the sender's CPU per byte by about a quarter (bench/throughput).
/// Where the kernel refuses (no memfd, or sendfile to this socket), `write(2)` of the
/// page-aligned block is used instead; the bytes on the wire are the same.
enum BlockSource {
    File(std::os::fd::OwnedFd),
    Memory(PageAlignedBlock),
}

impl BlockSource {
    fn new() -> Self {
        let block = Self::pattern();
        match Self::memory_file(block.as_slice()) {
            Ok(file) => BlockSource::File(file),
            Err(err) => {
                tracing::debug!("memfd unavailable ({err}); sending with write(2)");
                BlockSource::Memory(block)
            }
        }
    }

    /// One block of a repeating byte pattern (not all zeros, so nothing on the path
    /// can compress it away).
    fn pattern() -> PageAlignedBlock {
        let mut block = PageAlignedBlock::new(TCP_BLOCK_BYTES);
        for (i, byte) in block.as_mut_slice().iter_mut().enumerate() {
            *byte = (i % 251) as u8;
        }
        block
    }

    fn memory_file(block: &[u8]) -> io::Result<std::os::fd::OwnedFd> {
        use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
        let file = memfd_create(c"vantage-tcp-block", MemFdCreateFlag::MFD_CLOEXEC)?;
        let mut writer = std::fs::File::from(file);
        writer.write_all(block)?;
        Ok(writer.into())
    }

    /// Sends up to `len` bytes (at most one block) of the pattern.
    fn send(&mut self, tcp: &TcpStream, len: usize) -> io::Result<usize> {
        loop {
            match self {
                BlockSource::File(file) => {
                    let mut offset: libc::off_t = 0;
                    match nix::sys::sendfile::sendfile(tcp, &*file, Some(&mut offset), len) {
                        Err(errno @ (nix::errno::Errno::EINVAL | nix::errno::Errno::ENOSYS)) => {
                            tracing::debug!("sendfile refused ({errno}); sending with write(2)");
                            *self = BlockSource::Memory(Self::pattern());
                        }
                        sent => return sent.map_err(io::Error::from),
                    }
                }
                BlockSource::Memory(block) => return (&*tcp).write(&block.as_slice()[..len]),
            }
        }
    }
}

fn tcp_send(
    tcp: &TcpStream,
    shared: &Shared,
    settings: &EngineSettings,
    stop: &AtomicBool,
    start: Instant,
    outcome: &mut StreamOutcome,
) -> Result<(), String> {
    tcp.set_write_timeout(Some(POLL_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let deadline = send_deadline(settings, start);
    let limit = settings.send_bytes_per_stream.unwrap_or(u64::MAX);
    let mut source = BlockSource::new();
    let mut sent = 0u64;
    let result = loop {
        if stop.load(Ordering::Relaxed)
            || sent >= limit
            || deadline.is_some_and(|d| Instant::now() >= d)
        {
            break Ok(());
        }
        let len = (limit - sent).min(TCP_BLOCK_BYTES as u64) as usize;
        match source.send(tcp, len) {
            Ok(n) => {
                sent += n as u64;
                shared.bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(err) if is_timeout(err.kind()) => {}
            Err(err) => break Err(format!("stream {}: send failed: {err}", outcome.id)),
        }
    };
    outcome.active_s = start.elapsed().as_secs_f64();
    if settings.shutdown_after_send {
        let _ = tcp.shutdown(Shutdown::Write);
    }
    result
}

fn tcp_receive(
    tcp: &TcpStream,
    shared: &Shared,
    settings: &EngineSettings,
    stop: &AtomicBool,
    start: Instant,
    outcome: &mut StreamOutcome,
) -> Result<(), String> {
    tcp.set_read_timeout(Some(POLL_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let deadline = start + settings.receive_duration;
    let mut block = PageAlignedBlock::new(TCP_BLOCK_BYTES);
    let block = block.as_mut_slice();
    let mut reader = tcp;
    loop {
        if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
            return Ok(());
        }
        match reader.read(block) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                shared.bytes.fetch_add(n as u64, Ordering::Relaxed);
                outcome.active_s = start.elapsed().as_secs_f64();
            }
            Err(err) if is_timeout(err.kind()) => {}
            Err(err) if err.kind() == ErrorKind::ConnectionReset => return Ok(()),
            Err(err) => return Err(format!("stream {}: receive failed: {err}", outcome.id)),
        }
    }
}

fn wall_clock() -> (u32, u32) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_secs() as u32, now.subsec_micros())
}

/// Writes the datagram header for packet `number` (from 1).
pub fn write_udp_header(packet: &mut [u8], number: u64, counter_64bit: bool) {
    let (sec, usec) = wall_clock();
    packet[0..4].copy_from_slice(&sec.to_be_bytes());
    packet[4..8].copy_from_slice(&usec.to_be_bytes());
    if counter_64bit {
        packet[8..16].copy_from_slice(&number.to_be_bytes());
    } else {
        packet[8..12].copy_from_slice(&(number as u32).to_be_bytes());
    }
}

/// Parses (send time µs since the epoch, packet number from 1) of a datagram.
pub fn parse_udp_header(packet: &[u8], counter_64bit: bool) -> Option<(f64, u64)> {
    let need = if counter_64bit {
        UDP_HEADER_BYTES_64
    } else {
        UDP_HEADER_BYTES_32
    };
    if packet.len() < need {
        return None;
    }
    let sec = u32::from_be_bytes(packet[0..4].try_into().ok()?);
    let usec = u32::from_be_bytes(packet[4..8].try_into().ok()?);
    let number = if counter_64bit {
        u64::from_be_bytes(packet[8..16].try_into().ok()?)
    } else {
        u64::from(u32::from_be_bytes(packet[8..12].try_into().ok()?))
    };
    Some((f64::from(sec) * 1e6 + f64::from(usec), number))
}

fn udp_send(
    udp: &UdpSocket,
    shared: &Shared,
    settings: &EngineSettings,
    stop: &AtomicBool,
    start: Instant,
    outcome: &mut StreamOutcome,
) -> Result<(), String> {
    let udp_settings = settings.udp.ok_or("UDP stream without UDP settings")?;
    let payload = udp_settings.payload_bytes.max(udp_settings.header_bytes());
    tighten_timer_slack();
    let deadline = send_deadline(settings, start);
    let limit_packets = settings
        .send_bytes_per_stream
        .map(|bytes| bytes.div_ceil(payload as u64))
        .unwrap_or(u64::MAX);
    let mut schedule = PacketSchedule::new(
        start,
        udp_settings.rate_bps_per_stream,
        (payload * 8) as f64,
    );
    let mut buffers = vec![0u8; payload * UDP_BATCH];
    for (i, byte) in buffers.iter_mut().enumerate() {
        *byte = (i % 251) as u8;
    }
    let fd = udp.as_raw_fd();
    let result = loop {
        let now = Instant::now();
        if stop.load(Ordering::Relaxed)
            || deadline.is_some_and(|d| now >= d)
            || schedule.sent() >= limit_packets
        {
            break Ok(());
        }
        let due = schedule.due(now).min(limit_packets - schedule.sent()) as usize;
        if due == 0 {
            let wake = schedule.next_wake();
            sleep_until(deadline.map_or(wake, |d| wake.min(d)));
            continue;
        }
        let batch = due.min(UDP_BATCH);
        let first_number = schedule.sent() + 1;
        for (i, packet) in buffers.chunks_mut(payload).take(batch).enumerate() {
            write_udp_header(packet, first_number + i as u64, udp_settings.counter_64bit);
        }
        match send_batch(fd, &mut buffers, payload, batch) {
            Ok(sent) => {
                schedule.record_sent(sent as u64);
                shared
                    .bytes
                    .fetch_add((sent * payload) as u64, Ordering::Relaxed);
            }
            // Full socket buffer or an ICMP error from a receiver not yet listening:
            // the datagrams were not sent; the schedule keeps its slots.
            Err(err) if is_timeout(err.kind()) || err.kind() == ErrorKind::ConnectionRefused => {
                sleep_until(Instant::now() + Duration::from_micros(200));
            }
            Err(err) if err.raw_os_error() == Some(libc::ENOBUFS) => {
                sleep_until(Instant::now() + Duration::from_micros(200));
            }
            Err(err) => break Err(format!("stream {}: UDP send failed: {err}", outcome.id)),
        }
    };
    outcome.packets_sent = schedule.sent();
    outcome.packets_skipped = schedule.skipped();
    outcome.active_s = start.elapsed().as_secs_f64();
    result
}

/// Sends `count` datagrams of `payload` bytes from `buffers` with one `sendmmsg`.
fn send_batch(fd: i32, buffers: &mut [u8], payload: usize, count: usize) -> std::io::Result<usize> {
    let mut iovecs: [libc::iovec; UDP_BATCH] = unsafe { std::mem::zeroed() };
    let mut headers: [libc::mmsghdr; UDP_BATCH] = unsafe { std::mem::zeroed() };
    for i in 0..count {
        iovecs[i] = libc::iovec {
            iov_base: buffers[i * payload..].as_mut_ptr() as *mut libc::c_void,
            iov_len: payload,
        };
        headers[i].msg_hdr.msg_iov = &mut iovecs[i];
        headers[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `count` headers point at iovecs into `buffers`, all alive for the call;
    // the socket is connected so no address is needed.
    let sent = unsafe { libc::sendmmsg(fd, headers.as_mut_ptr(), count as u32, 0) };
    if sent < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(sent as usize)
}

fn udp_receive(
    udp: &UdpSocket,
    shared: &Shared,
    settings: &EngineSettings,
    stop: &AtomicBool,
    start: Instant,
    outcome: &mut StreamOutcome,
) -> Result<(), String> {
    let counter_64bit = settings.udp.map(|u| u.counter_64bit).unwrap_or(true);
    udp.set_read_timeout(Some(POLL_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let deadline = start + settings.receive_duration;
    let interval_s = settings.interval.as_secs_f64();
    let mut tracker = vantage_stats::SequenceTracker::new();
    let mut received = UdpReceived::default();
    let mut current = UdpIntervalCounts::default();
    let mut current_index = 0usize;
    let mut transits_us: Vec<f64> = Vec::new();
    let mut buf = vec![0u8; 65_536];
    let close_interval =
        |received: &mut UdpReceived, current: &mut UdpIntervalCounts, transits: &mut Vec<f64>| {
            current.highest_seen = received.highest_seen;
            current.jitter_us = vantage_stats::jitter_rfc3550(transits);
            received.intervals.push(*current);
            *current = UdpIntervalCounts::default();
            transits.clear();
        };
    let result = loop {
        if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
            break Ok(());
        }
        let outcome_recv = udp.recv(&mut buf);
        let elapsed_s = start.elapsed().as_secs_f64();
        let index = (elapsed_s / interval_s) as usize;
        while current_index < index {
            close_interval(&mut received, &mut current, &mut transits_us);
            current_index += 1;
        }
        match outcome_recv {
            Ok(len) => {
                // Late hellos of the native set-up are not data.
                if buf[..len].starts_with(&UDP_HELLO) {
                    continue;
                }
                let Some((sent_us, number)) = parse_udp_header(&buf[..len], counter_64bit) else {
                    continue;
                };
                if number == 0 {
                    continue;
                }
                let (sec, usec) = wall_clock();
                let arrival_us = f64::from(sec) * 1e6 + f64::from(usec);
                transits_us.push(arrival_us - sent_us);
                match tracker.observe(number - 1) {
                    vantage_stats::Arrival::Duplicate => current.duplicate_packets += 1,
                    arrival => {
                        // A late arrival (behind the tracker's window) is reordered or a
                        // duplicate; it is counted as a reordered arrival.
                        if matches!(
                            arrival,
                            vantage_stats::Arrival::Reordered | vantage_stats::Arrival::Late
                        ) {
                            current.reordered_packets += 1;
                            received.reordered_packets += 1;
                        }
                        current.received_packets += 1;
                        received.received_packets += 1;
                        received.highest_seen = received.highest_seen.max(number);
                        shared.bytes.fetch_add(len as u64, Ordering::Relaxed);
                        outcome.active_s = elapsed_s;
                    }
                }
            }
            Err(err) if is_timeout(err.kind()) || err.kind() == ErrorKind::ConnectionRefused => {}
            Err(err) => break Err(format!("stream {}: UDP receive failed: {err}", outcome.id)),
        }
    };
    close_interval(&mut received, &mut current, &mut transits_us);
    received.duplicate_packets = received.intervals.iter().map(|i| i.duplicate_packets).sum();
    outcome.udp_received = Some(received);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both send paths put the same pattern on the wire; on Linux the memfd path is
    /// the one in use.
    #[test]
    fn sendfile_and_write_send_the_same_bytes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = listener.accept().unwrap();
        let mut file_source = BlockSource::new();
        assert!(matches!(file_source, BlockSource::File(_)));
        let mut memory_source = BlockSource::Memory(BlockSource::pattern());
        let expected: Vec<u8> = (0..1000).map(|i| (i % 251) as u8).collect();
        for source in [&mut file_source, &mut memory_source] {
            let mut sent = 0;
            while sent < expected.len() {
                sent += source.send(&sender, expected.len() - sent).unwrap();
            }
            let mut got = vec![0u8; expected.len()];
            receiver.read_exact(&mut got).unwrap();
            assert_eq!(got, expected);
        }
    }

    #[test]
    fn blocks_start_on_a_page_boundary_and_have_the_asked_length() {
        for len in [1, 4096, TCP_BLOCK_BYTES] {
            let mut block = PageAlignedBlock::new(len);
            assert_eq!(block.as_slice().as_ptr() as usize % 4096, 0);
            assert_eq!(block.as_mut_slice().len(), len);
        }
    }

    #[test]
    fn udp_header_round_trips_in_both_counter_widths() {
        let mut packet = [0u8; 64];
        write_udp_header(&mut packet, 77, false);
        assert_eq!(parse_udp_header(&packet, false).unwrap().1, 77);
        write_udp_header(&mut packet, 1 << 40, true);
        assert_eq!(parse_udp_header(&packet, true).unwrap().1, 1 << 40);
        assert!(parse_udp_header(&packet[..10], false).is_none());
    }
}
