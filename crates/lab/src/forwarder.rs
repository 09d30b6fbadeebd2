//! The user-space impairment forwarder: one process per lab, living in the lab's emulator
//! namespace. Every link is cut in two there (`l<i>a` faces end a, `l<i>b` faces end b); for each
//! direction a thread reads frames from one side with an AF_PACKET socket, lets the
//! [`ImpairmentEngine`] decide their fate, holds them until their release time and writes them
//! to the other side, where the kernel's `tbf` (if a rate is set) shapes them.
//!
//! Timing: a frame's arrival is the kernel's receive timestamp (`SO_TIMESTAMPNS`), so a thread
//! woken late still holds the frame for its configured delay from when it reached the link, not
//! from when the thread got to it. The thread sleeps in `ppoll` (nanosecond timeout, timer slack
//! 1 ns) until [`SPIN_NS`] before the next release, then spins, yielding to the lab's other
//! forwarding threads. A longer spin would cover slower wake-ups, but under a steady stream the
//! next release is always near, so the real-time thread would spin without pause and starve
//! the lab's own applications (tried: with a spin growing to 2 ms, a 30 Mbit/s TCP test saw
//! releases up to 46 ms late).
//! Frames written more than [`LATE_RELEASE_NS`] after their release time are counted, so
//! `lab status` says when the machine could not keep the emulated delays.
//!
//! A Unix control socket (`/run/vantage-lab/<lab>/control.sock`) takes new impairments
//! (`lab set`) and reports counters (`lab status`).

use crate::impairment::{Decision, DropReason, Impairment, ImpairmentEngine};
use crate::netns::{emulator_netns, enter_netns};
use crate::state::{control_socket_path, emulator_interface, LabState, Side};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Below this much time to the next release the thread spins instead of sleeping.
const SPIN_NS: u64 = 50_000;
/// A frame written this much after its release time is counted as `released_late`.
const LATE_RELEASE_NS: u64 = 200_000;
/// A kernel receive timestamp older than this (a clock step) is not trusted; the read time is used.
const MAX_TIMESTAMP_AGE_NS: u64 = 1_000_000_000;
/// Packets held per direction; more are dropped (and counted), like netem's `limit`.
const DELAY_QUEUE_PACKETS: usize = 20_000;
/// Largest frame read: 64 KiB MTU plus Ethernet and VLAN headers.
const MAX_FRAME_BYTES: usize = 65_536 + 18;
const ETHERNET_HEADER_BYTES: usize = 14;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// Counters of one direction of one link since the forwarder started.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
pub struct DirectionCounters {
    pub received: u64,
    pub forwarded: u64,
    pub dropped_random_loss: u64,
    pub dropped_burst_loss: u64,
    /// Delay queue full ([`DELAY_QUEUE_PACKETS`]).
    pub dropped_delay_queue: u64,
    /// The egress refused the frame (the `tbf` queue was full).
    pub dropped_rate_queue: u64,
    /// The kernel dropped frames before the forwarder read them (receive buffer overrun):
    /// the forwarder's packet-rate limit was exceeded.
    pub dropped_socket_overrun: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub reordered: u64,
    /// Frames written more than [`LATE_RELEASE_NS`] after their release time: the machine
    /// delayed the forwarder, and those frames saw more delay than configured.
    #[serde(default)]
    pub released_late: u64,
    /// The latest any frame was written after its release time, in µs.
    #[serde(default)]
    pub max_release_lateness_us: u64,
}

#[derive(Default)]
struct AtomicCounters {
    received: AtomicU64,
    forwarded: AtomicU64,
    dropped_random_loss: AtomicU64,
    dropped_burst_loss: AtomicU64,
    dropped_delay_queue: AtomicU64,
    dropped_rate_queue: AtomicU64,
    dropped_socket_overrun: AtomicU64,
    duplicated: AtomicU64,
    corrupted: AtomicU64,
    reordered: AtomicU64,
    released_late: AtomicU64,
    max_release_lateness_us: AtomicU64,
}

impl AtomicCounters {
    fn snapshot(&self) -> DirectionCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DirectionCounters {
            received: get(&self.received),
            forwarded: get(&self.forwarded),
            dropped_random_loss: get(&self.dropped_random_loss),
            dropped_burst_loss: get(&self.dropped_burst_loss),
            dropped_delay_queue: get(&self.dropped_delay_queue),
            dropped_rate_queue: get(&self.dropped_rate_queue),
            dropped_socket_overrun: get(&self.dropped_socket_overrun),
            duplicated: get(&self.duplicated),
            corrupted: get(&self.corrupted),
            reordered: get(&self.reordered),
            released_late: get(&self.released_late),
            max_release_lateness_us: get(&self.max_release_lateness_us),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

struct DirectionShared {
    /// The receiving socket; it lives as long as the process.
    rx_fd: RawFd,
    impairment: Mutex<Impairment>,
    counters: AtomicCounters,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LinkCounters {
    pub link: String,
    pub forward: DirectionCounters,
    pub reverse: DirectionCounters,
}

/// A request on the control socket (one JSON line).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ControlRequest {
    /// Replace both directions' user-space impairments of a link.
    Set {
        link: String,
        forward: Box<Impairment>,
        reverse: Box<Impairment>,
    },
    Counters,
}

/// The answer (one JSON line).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ControlResponse {
    Ok,
    Counters { links: Vec<LinkCounters> },
    Error { message: String },
}

/// Sends one request to a lab's forwarder and waits for its answer.
pub fn control_request(lab: &str, request: &ControlRequest) -> Result<ControlResponse, String> {
    let path = control_socket_path(lab);
    let mut stream = UnixStream::connect(&path)
        .map_err(|e| format!("cannot reach the forwarder at {}: {e}", path.display()))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut line = serde_json::to_string(request).map_err(|e| e.to_string())?;
    line.push('\n');
    stream
        .write_all(line.as_bytes())
        .map_err(|e| format!("forwarder control write: {e}"))?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .map_err(|e| format!("forwarder control read: {e}"))?;
    serde_json::from_str(&answer)
        .map_err(|e| format!("forwarder sent a bad answer ({e}): {answer}"))
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(clock, &mut now) };
    timespec_ns(&now)
}

fn timespec_ns(time: &libc::timespec) -> u64 {
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The monotonic time of a kernel receive timestamp (`CLOCK_REALTIME`), or `now_ns` when there is
/// none or it is implausible (in the future, or older than [`MAX_TIMESTAMP_AGE_NS`]).
fn arrival_from_timestamp(received_realtime_ns: Option<u64>, now_ns: u64) -> u64 {
    let Some(received_realtime_ns) = received_realtime_ns else {
        return now_ns;
    };
    let age_ns = clock_ns(libc::CLOCK_REALTIME).saturating_sub(received_realtime_ns);
    if age_ns > MAX_TIMESTAMP_AGE_NS {
        return now_ns;
    }
    now_ns.saturating_sub(age_ns)
}

fn last_error(context: &str) -> String {
    format!("{context}: {}", std::io::Error::last_os_error())
}

/// An AF_PACKET socket bound to `interface` (current namespace). A receiving socket gets every
/// frame arriving on it (not those we send); a sending one (protocol 0) receives nothing.
fn packet_socket(interface: &str, receive: bool) -> Result<OwnedFd, String> {
    let name = std::ffi::CString::new(interface).map_err(|e| e.to_string())?;
    // SAFETY: plain libc calls with valid arguments; the fd is owned right after creation.
    unsafe {
        let index = libc::if_nametoindex(name.as_ptr());
        if index == 0 {
            return Err(last_error(&format!("interface {interface}")));
        }
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(last_error("AF_PACKET socket"));
        }
        let socket = OwnedFd::from_raw_fd(fd);
        let set_int = |level, option, value: libc::c_int, what: &str| -> Result<(), String> {
            let rc = libc::setsockopt(
                fd,
                level,
                option,
                &value as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
            if rc != 0 {
                return Err(last_error(&format!("{what} on {interface}")));
            }
            Ok(())
        };
        let protocol = if receive {
            set_int(
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                1,
                "PACKET_IGNORE_OUTGOING",
            )?;
            set_int(
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                8 << 20,
                "SO_RCVBUFFORCE",
            )?;
            set_int(libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1, "SO_TIMESTAMPNS")?;
            (libc::ETH_P_ALL as u16).to_be()
        } else {
            set_int(
                libc::SOL_SOCKET,
                libc::SO_SNDBUFFORCE,
                8 << 20,
                "SO_SNDBUFFORCE",
            )?;
            0
        };
        let mut address: libc::sockaddr_ll = std::mem::zeroed();
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_protocol = protocol;
        address.sll_ifindex = index as i32;
        let rc = libc::bind(
            fd,
            &address as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        );
        if rc != 0 {
            return Err(last_error(&format!("bind to {interface}")));
        }
        Ok(socket)
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    release_ns: u64,
    sequence: u64,
    frame: Vec<u8>,
}

/// Writes a held frame and accounts for how late it went out.
fn release_frame(tx: RawFd, packet: &Held, now_ns: u64, counters: &AtomicCounters) {
    send_frame(tx, &packet.frame, counters);
    let lateness_ns = now_ns.saturating_sub(packet.release_ns);
    if lateness_ns > LATE_RELEASE_NS {
        bump(&counters.released_late);
    }
    counters
        .max_release_lateness_us
        .fetch_max(lateness_ns / 1_000, Ordering::Relaxed);
}

fn send_frame(tx: RawFd, frame: &[u8], counters: &AtomicCounters) {
    // SAFETY: frame is a valid buffer; tx is an open packet socket.
    let sent = unsafe {
        libc::send(
            tx,
            frame.as_ptr() as *const libc::c_void,
            frame.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if sent < 0 {
        bump(&counters.dropped_rate_queue);
    } else {
        bump(&counters.forwarded);
    }
}

/// Reads one frame into `buffer` without waiting: its length and the kernel's receive
/// timestamp (`CLOCK_REALTIME` ns) if the socket gave one.
fn receive_frame(rx: RawFd, buffer: &mut [u8]) -> Option<(usize, Option<u64>)> {
    let mut vector = libc::iovec {
        iov_base: buffer.as_mut_ptr() as *mut libc::c_void,
        iov_len: buffer.len(),
    };
    // u64 elements keep the control buffer aligned for `cmsghdr`.
    let mut control = [0u64; 8];
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut vector;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    message.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: message points at valid buffers for their stated lengths.
    let length = unsafe { libc::recvmsg(rx, &mut message, libc::MSG_DONTWAIT) };
    if length <= 0 {
        return None;
    }
    let mut received_ns = None;
    // SAFETY: the kernel filled `control` up to msg_controllen; CMSG_* walk within it.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET
                && (*header).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let stamp: libc::timespec =
                    std::ptr::read_unaligned(libc::CMSG_DATA(header) as *const libc::timespec);
                received_ns = Some(timespec_ns(&stamp));
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
    }
    Some((length as usize, received_ns))
}

/// Waits until `rx` is readable or `timeout_ns` passed.
fn wait_readable(rx: RawFd, timeout_ns: u64) {
    let mut poll = libc::pollfd {
        fd: rx,
        events: libc::POLLIN,
        revents: 0,
    };
    let timeout = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: valid pollfd and timespec; a null sigmask keeps the current mask.
    unsafe { libc::ppoll(&mut poll, 1, &timeout, std::ptr::null()) };
}

/// Real-time FIFO priority for a forwarding thread: a busy machine (compilers, tests) then
/// delays packets by microseconds instead of milliseconds. The thread mostly sleeps and spins at
/// most [`SPIN_NS`] per release, and the kernel's RT throttling bounds it in any case.
fn use_realtime_priority() {
    let parameters = libc::sched_param { sched_priority: 10 };
    // SAFETY: pid 0 = the calling thread; valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &parameters) } != 0 {
        eprintln!(
            "vantage lab forwarder: no real-time priority ({}); delays will be noisier",
            std::io::Error::last_os_error()
        );
    }
}

/// The per-direction loop: never returns (the process ends on SIGTERM).
fn run_direction(rx: OwnedFd, tx: OwnedFd, shared: Arc<DirectionShared>, seed: u64) -> ! {
    use_realtime_priority();
    let mut engine = ImpairmentEngine::new(StdRng::seed_from_u64(seed));
    let mut held: BinaryHeap<Reverse<Held>> = BinaryHeap::new();
    let mut sequence = 0u64;
    let mut buffer = vec![0u8; MAX_FRAME_BYTES];
    let counters = &shared.counters;
    loop {
        // Release everything that is due.
        let now = monotonic_ns();
        while held.peek().is_some_and(|Reverse(h)| h.release_ns <= now) {
            let Reverse(packet) = held.pop().expect("peeked");
            release_frame(tx.as_raw_fd(), &packet, now, counters);
        }
        match held.peek() {
            // Spinning yields, so the lab's other forwarding threads (same real-time
            // priority) that share this CPU still run on time.
            Some(Reverse(next)) if next.release_ns - now <= SPIN_NS => {
                // SAFETY: no arguments; only reorders this thread in its run queue.
                unsafe { libc::sched_yield() };
            }
            Some(Reverse(next)) => wait_readable(rx.as_raw_fd(), next.release_ns - now - SPIN_NS),
            None => wait_readable(rx.as_raw_fd(), 100_000_000),
        }
        // Drain what arrived; bounded so a flood cannot starve releases.
        let impairment = shared
            .impairment
            .lock()
            .map(|i| i.clone())
            .unwrap_or_default();
        for _ in 0..64 {
            let Some((length, received_ns)) = receive_frame(rx.as_raw_fd(), &mut buffer) else {
                break;
            };
            let read_ns = monotonic_ns();
            let arrival_ns = arrival_from_timestamp(received_ns, read_ns);
            bump(&counters.received);
            let mut frame = buffer[..length].to_vec();
            let network_start = ETHERNET_HEADER_BYTES.min(frame.len());
            match engine.decide(&impairment, arrival_ns, &mut frame[network_start..]) {
                Decision::Drop(DropReason::RandomLoss) => bump(&counters.dropped_random_loss),
                Decision::Drop(DropReason::BurstLoss) => bump(&counters.dropped_burst_loss),
                Decision::Forward {
                    release_ns,
                    duplicate_release_ns,
                    corrupted_bit,
                    reordered,
                } => {
                    if corrupted_bit.is_some() {
                        bump(&counters.corrupted);
                    }
                    if reordered {
                        bump(&counters.reordered);
                    }
                    if release_ns <= read_ns && held.is_empty() && duplicate_release_ns.is_none() {
                        // Nothing to wait for: the floor path, no queueing.
                        send_frame(tx.as_raw_fd(), &frame, counters);
                        continue;
                    }
                    let copies = [Some(release_ns), duplicate_release_ns];
                    for (copy, release) in copies.into_iter().flatten().enumerate() {
                        if copy > 0 {
                            bump(&counters.duplicated);
                        }
                        if held.len() >= DELAY_QUEUE_PACKETS {
                            bump(&counters.dropped_delay_queue);
                            continue;
                        }
                        sequence += 1;
                        held.push(Reverse(Held {
                            release_ns: release,
                            sequence,
                            frame: frame.clone(),
                        }));
                    }
                }
            }
        }
    }
}

const PACKET_STATISTICS: libc::c_int = 6;

/// Adds the kernel's drop count of a receiving socket (reset by each read) to its counter.
fn collect_socket_drops(direction: &DirectionShared) {
    let mut stats = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut length = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: valid buffer and length for PACKET_STATISTICS on a live packet socket.
    let rc = unsafe {
        libc::getsockopt(
            direction.rx_fd,
            libc::SOL_PACKET,
            PACKET_STATISTICS,
            &mut stats as *mut libc::tpacket_stats as *mut libc::c_void,
            &mut length,
        )
    };
    if rc == 0 {
        direction
            .counters
            .dropped_socket_overrun
            .fetch_add(stats.tp_drops as u64, Ordering::Relaxed);
    }
}

struct LinkShared {
    name: String,
    forward: Arc<DirectionShared>,
    reverse: Arc<DirectionShared>,
}

fn handle_control(stream: UnixStream, links: &[LinkShared]) -> Result<(), String> {
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let response = match serde_json::from_str::<ControlRequest>(&line) {
        Err(e) => ControlResponse::Error {
            message: format!("bad request: {e}"),
        },
        Ok(ControlRequest::Counters) => ControlResponse::Counters {
            links: links
                .iter()
                .inspect(|l| {
                    collect_socket_drops(&l.forward);
                    collect_socket_drops(&l.reverse);
                })
                .map(|l| LinkCounters {
                    link: l.name.clone(),
                    forward: l.forward.counters.snapshot(),
                    reverse: l.reverse.counters.snapshot(),
                })
                .collect(),
        },
        Ok(ControlRequest::Set {
            link,
            forward,
            reverse,
        }) => match links.iter().find(|l| l.name == link) {
            None => ControlResponse::Error {
                message: format!("no link named {link}"),
            },
            Some(shared) => {
                for (direction, impairment) in
                    [(&shared.forward, forward), (&shared.reverse, reverse)]
                {
                    if let Ok(mut current) = direction.impairment.lock() {
                        *current = *impairment;
                    }
                }
                ControlResponse::Ok
            }
        },
    };
    let mut answer = serde_json::to_string(&response).map_err(|e| e.to_string())?;
    answer.push('\n');
    (&stream)
        .write_all(answer.as_bytes())
        .map_err(|e| e.to_string())
}

/// Entry point of `vantage lab forwarder LAB`: serves until killed.
pub fn run_forwarder(lab: &str) -> Result<(), String> {
    let state = LabState::load(lab)?;
    // SAFETY: prctl with an integer argument; a 1 ns slack lets sleeps end when asked.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    enter_netns(&emulator_netns(lab))?;
    let mut links = Vec::new();
    for (index, link) in state.topology.links.iter().enumerate() {
        let (a_side, b_side) = (
            emulator_interface(index, Side::A),
            emulator_interface(index, Side::B),
        );
        let shared = |impairment: &Impairment, rx: &OwnedFd| {
            Arc::new(DirectionShared {
                rx_fd: rx.as_raw_fd(),
                impairment: Mutex::new(impairment.clone()),
                counters: AtomicCounters::default(),
            })
        };
        let (forward_rx, reverse_rx) =
            (packet_socket(&a_side, true)?, packet_socket(&b_side, true)?);
        let forward = shared(&link.forward, &forward_rx);
        let reverse = shared(&link.reverse, &reverse_rx);
        for (rx, tx_name, direction, seed_offset) in [
            (forward_rx, &b_side, &forward, 0u64),
            (reverse_rx, &a_side, &reverse, 1u64),
        ] {
            let tx = packet_socket(tx_name, false)?;
            let direction = Arc::clone(direction);
            let seed = state.topology.seed.wrapping_mul(1_000_003) + index as u64 * 2 + seed_offset;
            std::thread::Builder::new()
                .name(format!(
                    "{}-{}",
                    link.name,
                    if seed_offset == 0 { "fwd" } else { "rev" }
                ))
                .spawn(move || run_direction(rx, tx, direction, seed))
                .map_err(|e| format!("cannot start a forwarding thread: {e}"))?;
        }
        links.push(LinkShared {
            name: link.name.clone(),
            forward,
            reverse,
        });
    }
    let path = control_socket_path(lab);
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)
        .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                if let Err(e) = handle_control(stream, &links) {
                    eprintln!("vantage lab forwarder: control request failed: {e}");
                }
            }
            Err(e) => eprintln!("vantage lab forwarder: accept failed: {e}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrival_is_the_kernel_timestamp_unless_it_is_missing_or_implausible() {
        let now_ns = monotonic_ns();
        let five_ms_ago = clock_ns(libc::CLOCK_REALTIME) - 5_000_000;
        let arrival_ns = arrival_from_timestamp(Some(five_ms_ago), now_ns);
        // The two clocks are read a few µs apart: allow that, not a millisecond.
        assert!(
            (now_ns - arrival_ns).abs_diff(5_000_000) < 1_000_000,
            "arrival {} µs before now",
            (now_ns - arrival_ns) / 1_000
        );
        assert_eq!(arrival_from_timestamp(None, now_ns), now_ns);
        let in_the_future = clock_ns(libc::CLOCK_REALTIME) + 60_000_000_000;
        assert_eq!(arrival_from_timestamp(Some(in_the_future), now_ns), now_ns);
        let before_a_clock_step = clock_ns(libc::CLOCK_REALTIME) - 2 * MAX_TIMESTAMP_AGE_NS;
        assert_eq!(
            arrival_from_timestamp(Some(before_a_clock_step), now_ns),
            now_ns
        );
    }
}
