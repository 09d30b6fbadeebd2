//! The user-space impairment forwarder: one process per lab, living in the lab's emulator
//! namespace. Every link is cut in two there (`l<i>a` faces end a, `l<i>b` faces end b); for each
//! direction the forwarder reads frames from one side with an AF_PACKET socket, lets the
//! [`ImpairmentEngine`] decide their fate, holds them until their release time and writes them
//! to the other side, where the kernel's `tbf` (if a rate is set) shapes them.
//!
//! Speed: one thread serves every direction of the lab. Frames are read from a memory-mapped
//! receive ring per direction ([`ReceiveRing`]: no system call per frame) and written in batches
//! (`sendmmsg`), each with a virtio-net header, so a segmentation-offloaded frame (up to
//! 64 KiB of one TCP or UDP flow) crosses as one frame where the direction's impairments treat
//! every packet alike (see `apply_offloads` in the lab), and datagrams of one UDP flow that fall
//! due together leave as one such frame ([`coalesce_udp`]). Held frames wait in a FIFO per
//! direction: the engine keeps releases in order, so the head is always next. Measured on a
//! 2-core virtual machine through five 1 Gbit/s hops: one thread forwards TCP at line rate and
//! UDP within 1 %; two threads (links split between them) got half the UDP rate, because the
//! lab's senders, receivers and the kernel's own forwarding need the second core. The thread
//! runs at normal priority for the same reason: at real-time priority it starved the kernel
//! threads that drain `tbf` and aggregate received packets (UDP at 1 Gbit/s fell by 6 %).
//!
//! Timing: a frame's arrival is the kernel's receive timestamp (in its ring slot), so a thread
//! woken late still holds the frame for its configured delay from when it reached the link, not
//! from when the thread got to it. The thread sleeps in `ppoll` (nanosecond timeout, timer slack
//! 1 ns) until shortly before the next release and spins the rest ([`WakeLead`]), looking at
//! every ring each turn; it only sleeps when all are empty. Not polling while busy halved the
//! emulator's idle round trip (62 → 33 µs) and took the generator's wake-ups off the 64-byte
//! packet rate.
//! Frames written more than [`LATE_RELEASE_NS`] after their release time are counted, so
//! `lab status` says when the machine could not keep the emulated delays.
//!
//! A Unix control socket (`/run/vantage-lab/<lab>/control.sock`) takes new impairments
//! (`lab set`) and reports counters (`lab status`).

use crate::coalesce::{
    coalesce_udp, ETHERNET_HEADER_BYTES, UDP_HEADER_BYTES, VIRTIO_NET_HDR_GSO_NONE,
    VIRTIO_NET_HDR_GSO_UDP_L4, VNET_HEADER_BYTES,
};
use crate::impairment::{CpuCost, Decision, DropReason, Impairment, ImpairmentEngine};
use crate::netns::{emulator_netns, enter_netns};
use crate::state::{control_socket_path, emulator_interface, LabState, Side};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A frame written this much after its release time is counted as `released_late`.
const LATE_RELEASE_NS: u64 = 200_000;
/// A kernel receive timestamp older than this (a clock step) is not trusted; the read time is used.
const MAX_TIMESTAMP_AGE_NS: u64 = 1_000_000_000;
/// Packets held per direction; more are dropped (and counted), like netem's `limit`.
const DELAY_QUEUE_PACKETS: u64 = 20_000;
/// Largest frame read: 64 KiB MTU plus Ethernet and VLAN headers.
const MAX_FRAME_BYTES: usize = 65_536 + 18;
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
    /// How late packets were written after their release times, summed over every forwarded
    /// packet, in µs: over `forwarded` it is the mean delay the machine added to the configured
    /// one, the emulator's own error in what it delivered.
    #[serde(default)]
    pub release_lateness_us: u64,
    /// Frames that carried several packets (segmentation offload, see docs/lab.md): the
    /// other counters count packets.
    #[serde(default)]
    pub offloaded_frames: u64,
    /// Packets dropped because the link's CPU-bound host had `cpu_backlog` packets waiting.
    #[serde(default)]
    pub dropped_cpu_backlog: u64,
    /// CPU time the link's CPU-bound host spent on this direction's packets, in µs: its
    /// utilisation is this over wall time (both directions share the one CPU).
    #[serde(default)]
    pub cpu_busy_us: u64,
    /// How long a written frame currently takes to reach the next hop, in µs; the delay is
    /// shortened by it so that the frame arrives there on time ([`SendLead`]).
    #[serde(default)]
    pub send_lead_us: u64,
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
    release_lateness_ns: AtomicU64,
    offloaded_frames: AtomicU64,
    dropped_cpu_backlog: AtomicU64,
    cpu_busy_ns: AtomicU64,
    send_lead_ns: AtomicU64,
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
            release_lateness_us: get(&self.release_lateness_ns) / 1_000,
            offloaded_frames: get(&self.offloaded_frames),
            dropped_cpu_backlog: get(&self.dropped_cpu_backlog),
            cpu_busy_us: get(&self.cpu_busy_ns) / 1_000,
            send_lead_us: get(&self.send_lead_ns) / 1_000,
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

/// The monotonic time of a kernel receive timestamp (`CLOCK_REALTIME`) read at `now_realtime_ns`
/// = `now_ns`, or `now_ns` when it is implausible (in the future, or older than
/// [`MAX_TIMESTAMP_AGE_NS`]).
fn arrival_from_timestamp(received_realtime_ns: u64, now_realtime_ns: u64, now_ns: u64) -> u64 {
    if received_realtime_ns > now_realtime_ns {
        return now_ns;
    }
    let age_ns = now_realtime_ns - received_realtime_ns;
    if age_ns > MAX_TIMESTAMP_AGE_NS {
        return now_ns;
    }
    now_ns.saturating_sub(age_ns)
}

fn last_error(context: &str) -> String {
    format!("{context}: {}", std::io::Error::last_os_error())
}

/// Sets a socket option whose value is a `T`; the error names `what`.
fn set_option<T>(
    fd: RawFd,
    level: libc::c_int,
    option: libc::c_int,
    value: &T,
    what: &str,
) -> Result<(), String> {
    // SAFETY: the pointer and length describe `value`, alive for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            option,
            value as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(last_error(what));
    }
    Ok(())
}

/// An AF_PACKET socket bound to `interface` (current namespace). A receiving socket (given its
/// ring's slot count) gets every frame arriving on it (not those we send) in its receive ring
/// ([`ReceiveRing`] maps it); a sending one (protocol 0) receives nothing. Both carry a
/// virtio-net header before each frame, so a segmentation-offloaded frame (many packets of one
/// TCP or UDP flow in one buffer) crosses the emulator whole.
fn packet_socket(interface: &str, receive_ring_slots: Option<usize>) -> Result<OwnedFd, String> {
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
        let set_int = |level, option, value: libc::c_int, what: &str| {
            set_option(fd, level, option, &value, &format!("{what} on {interface}"))
        };
        set_int(libc::SOL_PACKET, PACKET_VNET_HDR, 1, "PACKET_VNET_HDR")?;
        let protocol = if let Some(ring_slots) = receive_ring_slots {
            set_int(
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                1,
                "PACKET_IGNORE_OUTGOING",
            )?;
            set_int(
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                16 << 20,
                "SO_RCVBUFFORCE",
            )?;
            set_int(
                libc::SOL_PACKET,
                libc::PACKET_VERSION,
                libc::tpacket_versions::TPACKET_V2 as libc::c_int,
                "PACKET_VERSION",
            )?;
            // A frame longer than a ring slot is also queued whole to the socket.
            set_int(
                libc::SOL_PACKET,
                libc::PACKET_COPY_THRESH,
                1,
                "PACKET_COPY_THRESH",
            )?;
            let ring = libc::tpacket_req {
                tp_block_size: RING_BLOCK_BYTES as libc::c_uint,
                tp_block_nr: (ring_slots * RING_SLOT_BYTES / RING_BLOCK_BYTES) as libc::c_uint,
                tp_frame_size: RING_SLOT_BYTES as libc::c_uint,
                tp_frame_nr: ring_slots as libc::c_uint,
            };
            set_option(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_RX_RING,
                &ring,
                &format!("PACKET_RX_RING on {interface}"),
            )?;
            (libc::ETH_P_ALL as u16).to_be()
        } else {
            set_int(
                libc::SOL_SOCKET,
                libc::SO_SNDBUFFORCE,
                64 << 20,
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

/// One frame waiting for its release time, with the virtio-net header it was read with.
struct Held {
    release_ns: u64,
    /// The packets it carries: more than one for a segmentation-offloaded frame.
    segments: u64,
    frame: Vec<u8>,
}

const PACKET_VNET_HDR: libc::c_int = 15;
const VIRTIO_NET_HDR_F_DATA_VALID: u8 = 2;
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;
/// Frames read or written per system call.
const BATCH_FRAMES: usize = 32;

/// How many packets a frame carries: one, or for a segmentation-offloaded frame (TCP or UDP,
/// `gso_size` bytes of payload per packet) its payload divided into packets.
fn segments_of(frame_with_header: &[u8]) -> u64 {
    let Some(header) = frame_with_header.get(..VNET_HEADER_BYTES) else {
        return 1;
    };
    let gso_type = header[1] & !VIRTIO_NET_HDR_GSO_ECN;
    let gso_size = u16::from_ne_bytes([header[4], header[5]]) as usize;
    let transport_start = u16::from_ne_bytes([header[6], header[7]]) as usize;
    if gso_type == VIRTIO_NET_HDR_GSO_NONE || gso_size == 0 {
        return 1;
    }
    let frame = &frame_with_header[VNET_HEADER_BYTES..];
    let transport_header_bytes = if gso_type == VIRTIO_NET_HDR_GSO_UDP_L4 {
        UDP_HEADER_BYTES
    } else {
        frame
            .get(transport_start + 12)
            .map_or(20, |offset| (offset >> 4) as usize * 4)
    };
    let payload_bytes = frame
        .len()
        .saturating_sub(transport_start + transport_header_bytes);
    payload_bytes.div_ceil(gso_size).max(1) as u64
}

/// Receive ring geometry (TPACKET_V2: fixed slots, each handed to us as soon as the kernel has
/// filled it, so no frame waits for a block to fill). A 2 KiB slot holds the ring's header, the
/// virtio-net header and a frame of a 1500-byte MTU with a VLAN tag. Longer frames
/// (segmentation-offloaded, jumbo MTU) are queued whole to the socket as well and read from
/// there.
const RING_SLOT_BYTES: usize = 2048;
const RING_BLOCK_BYTES: usize = 64 * 1024;
/// Ring memory of a whole lab (locked kernel memory), shared equally by its directions within
/// [`MIN_RING_SLOTS`]..=[`MAX_RING_SLOTS`] each: one link gets 4096 slots (8 ms of 64-byte
/// packets at 500 k/s), gigabit-app's seven links 2336 each, cloud-zones' eighteen 896.
const LAB_RING_BYTES: usize = 64 << 20;
const MIN_RING_SLOTS: usize = 512;
const MAX_RING_SLOTS: usize = 4096;

/// Slots per receive ring in a lab of `directions` directions: a whole number of blocks.
fn ring_slots(directions: usize) -> usize {
    let slots_per_block = RING_BLOCK_BYTES / RING_SLOT_BYTES;
    let share = LAB_RING_BYTES / RING_SLOT_BYTES / directions.max(1);
    share.clamp(MIN_RING_SLOTS, MAX_RING_SLOTS) / slots_per_block * slots_per_block
}

/// What the next slot of a receive ring held.
enum Received {
    /// Nothing has arrived.
    Nothing,
    /// A frame (virtio-net header first) and its kernel receive time (`CLOCK_REALTIME` ns).
    Frame {
        frame: Vec<u8>,
        received_realtime_ns: u64,
    },
    /// A frame longer than a slot that the kernel could not also queue whole (the socket's
    /// receive buffer was full): lost.
    Truncated,
}

/// A receiving packet socket's memory-mapped ring (`PACKET_RX_RING`). Reading a frame is a
/// copy out of shared memory and one store to give the slot back: the per-frame system call of
/// `recvmmsg` was half of the forwarder's time at 64-byte packet rates.
struct ReceiveRing {
    socket: OwnedFd,
    slots: *mut u8,
    slot_count: usize,
    next_slot: usize,
    /// Where a frame longer than a slot is read whole from the socket.
    oversize: Vec<u8>,
}

// SAFETY: the mapping belongs to this value alone, so only the thread holding it touches it.
unsafe impl Send for ReceiveRing {}

impl ReceiveRing {
    fn open(interface: &str, slot_count: usize) -> Result<Self, String> {
        let socket = packet_socket(interface, Some(slot_count))?;
        // SAFETY: maps the ring the socket was just given; the result is checked.
        let slots = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                slot_count * RING_SLOT_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                socket.as_raw_fd(),
                0,
            )
        };
        if slots == libc::MAP_FAILED {
            return Err(last_error(&format!(
                "mapping the receive ring of {interface}"
            )));
        }
        Ok(ReceiveRing {
            socket,
            slots: slots as *mut u8,
            slot_count,
            next_slot: 0,
            oversize: vec![0u8; VNET_HEADER_BYTES + MAX_FRAME_BYTES],
        })
    }

    /// The next slot and its status word. The status (`tp_status`, the slot's first field)
    /// hands the slot between the kernel and us, so it is accessed atomically: acquire before
    /// reading the slot, release when giving it back.
    fn slot(&self) -> (*mut u8, &'static std::sync::atomic::AtomicU32) {
        // SAFETY: the slot lies inside the mapping and is 2 KiB-aligned. The mapping lives
        // until drop, and the status reference never leaves `has_frame` or `next`.
        unsafe {
            let slot = self.slots.add(self.next_slot * RING_SLOT_BYTES);
            (
                slot,
                std::sync::atomic::AtomicU32::from_ptr(slot as *mut u32),
            )
        }
    }

    fn has_frame(&self) -> bool {
        self.slot().1.load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Takes the next frame, if one has arrived, and gives its slot back to the kernel.
    fn next(&mut self) -> Received {
        let (slot, status) = self.slot();
        let flags = status.load(Ordering::Acquire);
        if flags & libc::TP_STATUS_USER == 0 {
            return Received::Nothing;
        }
        // SAFETY: the kernel filled this slot's header before setting TP_STATUS_USER.
        let header = unsafe { std::ptr::read(slot as *const libc::tpacket2_hdr) };
        let received_realtime_ns = header.tp_sec as u64 * 1_000_000_000 + header.tp_nsec as u64;
        let frame_start = (header.tp_mac as usize).checked_sub(VNET_HEADER_BYTES);
        let frame_end = header.tp_mac as usize + header.tp_snaplen as usize;
        let received = if flags & libc::TP_STATUS_COPY != 0 {
            // SAFETY: reads into a buffer of the stated length.
            let length = unsafe {
                libc::recv(
                    self.socket.as_raw_fd(),
                    self.oversize.as_mut_ptr() as *mut libc::c_void,
                    self.oversize.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if length > 0 {
                Received::Frame {
                    frame: self.oversize[..length as usize].to_vec(),
                    received_realtime_ns,
                }
            } else {
                Received::Truncated
            }
        } else {
            match frame_start {
                Some(start)
                    if header.tp_len == header.tp_snaplen && frame_end <= RING_SLOT_BYTES =>
                {
                    // SAFETY: start..frame_end lies inside this slot.
                    let bytes =
                        unsafe { std::slice::from_raw_parts(slot.add(start), frame_end - start) };
                    Received::Frame {
                        frame: bytes.to_vec(),
                        received_realtime_ns,
                    }
                }
                _ => Received::Truncated,
            }
        };
        status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next_slot = (self.next_slot + 1) % self.slot_count;
        received
    }
}

impl Drop for ReceiveRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`.
        unsafe {
            libc::munmap(
                self.slots as *mut libc::c_void,
                self.slot_count * RING_SLOT_BYTES,
            )
        };
    }
}

/// Writes `frames` (virtio-net header first, each with the packets it carries) with as few
/// `sendmmsg` calls as the egress takes, runs of one UDP flow joined into offloaded frames
/// ([`coalesce_udp`]); a frame the egress refuses (its `tbf` queue is full) is dropped and
/// counted.
fn send_frames(tx: RawFd, frames: &[(&[u8], u64)], counters: &AtomicCounters) {
    let frames = coalesce_udp(frames);
    for chunk in frames.chunks(BATCH_FRAMES) {
        let mut vectors: Vec<libc::iovec> = chunk
            .iter()
            .map(|(frame, _)| libc::iovec {
                iov_base: frame.as_ptr() as *mut libc::c_void,
                iov_len: frame.len(),
            })
            .collect();
        let mut messages: Vec<libc::mmsghdr> = vectors
            .iter_mut()
            .map(|vector| {
                // SAFETY: an all-zero mmsghdr is valid; it then points at one live iovec.
                let mut message: libc::mmsghdr = unsafe { std::mem::zeroed() };
                message.msg_hdr.msg_iov = vector;
                message.msg_hdr.msg_iovlen = 1;
                message
            })
            .collect();
        let mut next = 0;
        while next < messages.len() {
            // SAFETY: messages[next..] point at frames that outlive the call.
            let sent = unsafe {
                libc::sendmmsg(
                    tx,
                    messages[next..].as_mut_ptr(),
                    (messages.len() - next) as libc::c_uint,
                    // glibc declares the flags an int, musl an unsigned int.
                    libc::MSG_DONTWAIT as _,
                )
            };
            if sent > 0 {
                let sent = sent as usize;
                let segments: u64 = chunk[next..next + sent].iter().map(|(_, s)| s).sum();
                counters.forwarded.fetch_add(segments, Ordering::Relaxed);
                next += sent;
            } else {
                counters
                    .dropped_rate_queue
                    .fetch_add(chunk[next].1, Ordering::Relaxed);
                next += 1;
            }
        }
    }
}

/// How much later than the send lead assumed the packets of one batch reached the next hop,
/// summed over the packets: the write runs the next hop's receive for each frame in turn, so a
/// packet that is `k` of `n` in the batch arrives about `took_ns · k / n` after the write began.
fn batch_transit_beyond_lead_ns(frames: &[(&[u8], u64)], took_ns: u64, lead_ns: u64) -> u64 {
    let total: u64 = frames.iter().map(|(_, segments)| segments).sum();
    let mut before = 0;
    let mut late_ns = 0;
    for (_, segments) in frames {
        before += segments;
        let transit_ns = took_ns * before / total.max(1);
        late_ns += transit_ns.saturating_sub(lead_ns) * segments;
    }
    late_ns
}

/// The CPU of a link's CPU-bound forwarding host ([`CpuCost`]): one server for both directions,
/// packets served in arrival order.
#[derive(Default)]
struct CpuServer {
    /// When each admitted packet's service ends, in order: those not yet ended are the backlog.
    finishes_ns: VecDeque<u64>,
}

impl CpuServer {
    /// Admits a packet arriving at `arrival_ns` that needs `service_ns`: when its service ends,
    /// or `None` when the backlog is full and it is dropped.
    fn admit(&mut self, cost: &CpuCost, arrival_ns: u64, service_ns: u64) -> Option<u64> {
        while self
            .finishes_ns
            .front()
            .is_some_and(|&end| end <= arrival_ns)
        {
            self.finishes_ns.pop_front();
        }
        if self.finishes_ns.len() >= cost.backlog_packets as usize {
            return None;
        }
        let start_ns = self
            .finishes_ns
            .back()
            .map_or(arrival_ns, |&end| end.max(arrival_ns));
        self.finishes_ns.push_back(start_ns + service_ns);
        Some(start_ns + service_ns)
    }
}

/// One direction of one link as a forwarding thread holds it.
struct Direction {
    rx: ReceiveRing,
    tx: OwnedFd,
    shared: Arc<DirectionShared>,
    engine: ImpairmentEngine<StdRng>,
    /// Frames in release order: the engine keeps releases in FIFO order (a reordered packet
    /// is written at once instead), so the head is always the next one due.
    queue: VecDeque<Held>,
    queued_segments: u64,
    /// The link's CPU-bound host, shared with the other direction.
    cpu: Arc<Mutex<CpuServer>>,
    send_lead: SendLead,
}

impl Direction {
    /// Writes every held frame that is due and accounts for how late each went out.
    fn release_due(&mut self, now_ns: u64) {
        let due = self
            .queue
            .iter()
            .take_while(|held| held.release_ns <= now_ns)
            .count();
        if due == 0 {
            return;
        }
        let counters = &self.shared.counters;
        for held in self.queue.range(..due) {
            let lateness_ns = now_ns - held.release_ns;
            if lateness_ns > LATE_RELEASE_NS {
                counters
                    .released_late
                    .fetch_add(held.segments, Ordering::Relaxed);
            }
            counters
                .max_release_lateness_us
                .fetch_max(lateness_ns / 1_000, Ordering::Relaxed);
            counters
                .release_lateness_ns
                .fetch_add(lateness_ns * held.segments, Ordering::Relaxed);
        }
        let frames: Vec<(&[u8], u64)> = self
            .queue
            .range(..due)
            .map(|held| (held.frame.as_slice(), held.segments))
            .collect();
        let writing_ns = monotonic_ns();
        send_frames(self.tx.as_raw_fd(), &frames, counters);
        let took_ns = monotonic_ns() - writing_ns;
        if due == 1 {
            // Only lone frames set the lead ([`SendLead`]): a batch's write is longer.
            self.send_lead.observe(took_ns);
            counters
                .send_lead_ns
                .store(self.send_lead.mean_ns, Ordering::Relaxed);
        } else {
            let late_ns = batch_transit_beyond_lead_ns(&frames, took_ns, self.send_lead.mean_ns);
            counters
                .release_lateness_ns
                .fetch_add(late_ns, Ordering::Relaxed);
        }
        for held in self.queue.drain(..due) {
            self.queued_segments -= held.segments;
        }
    }

    /// Takes up to a batch of what arrived and decides each frame's fate; frames due at once are
    /// written before returning. True when the batch was full: more may be waiting, and the
    /// caller releases what fell due meanwhile before reading on.
    fn receive(&mut self) -> bool {
        if !self.rx.has_frame() {
            return false;
        }
        let impairment = self
            .shared
            .impairment
            .lock()
            .map(|i| i.clone())
            .unwrap_or_default();
        let counters = &self.shared.counters;
        let mut immediate: Vec<(Vec<u8>, u64)> = Vec::new();
        let (read_ns, read_realtime_ns) = (monotonic_ns(), clock_ns(libc::CLOCK_REALTIME));
        let mut count = 0;
        while count < BATCH_FRAMES {
            let (mut frame, received_realtime_ns) = match self.rx.next() {
                Received::Nothing => break,
                Received::Truncated => {
                    count += 1;
                    bump(&counters.dropped_socket_overrun);
                    continue;
                }
                Received::Frame {
                    frame,
                    received_realtime_ns,
                } => (frame, received_realtime_ns),
            };
            count += 1;
            if frame.len() <= VNET_HEADER_BYTES {
                continue;
            }
            let mut arrival_ns =
                arrival_from_timestamp(received_realtime_ns, read_realtime_ns, read_ns);
            let segments = segments_of(&frame);
            counters.received.fetch_add(segments, Ordering::Relaxed);
            if segments > 1 {
                bump(&counters.offloaded_frames);
            }
            let network_start = (VNET_HEADER_BYTES + ETHERNET_HEADER_BYTES).min(frame.len());
            let add = |counter: &AtomicU64| counter.fetch_add(segments, Ordering::Relaxed);
            if let Some(cost) = &impairment.cpu {
                // The host forwards the packet once its CPU is done with it; the link's
                // delay starts then.
                let service_ns = cost.service_ns(frame.len() - VNET_HEADER_BYTES);
                let finish = self
                    .cpu
                    .lock()
                    .ok()
                    .and_then(|mut cpu| cpu.admit(cost, arrival_ns, service_ns));
                match finish {
                    Some(finish_ns) => {
                        counters
                            .cpu_busy_ns
                            .fetch_add(service_ns, Ordering::Relaxed);
                        arrival_ns = finish_ns;
                    }
                    None => {
                        add(&counters.dropped_cpu_backlog);
                        continue;
                    }
                }
            }
            // The delay runs from the arrival less the time a written frame takes to reach the
            // next hop ([`SendLead`]), so it arrives there when the configured delay says.
            let delay_from_ns = arrival_ns.saturating_sub(self.send_lead.mean_ns);
            match self
                .engine
                .decide(&impairment, delay_from_ns, &mut frame[network_start..])
            {
                Decision::Drop(DropReason::RandomLoss) => {
                    add(&counters.dropped_random_loss);
                }
                Decision::Drop(DropReason::BurstLoss) => {
                    add(&counters.dropped_burst_loss);
                }
                Decision::Forward {
                    release_ns,
                    duplicate_release_ns,
                    corrupted_bit,
                    reordered,
                } => {
                    if corrupted_bit.is_some() {
                        add(&counters.corrupted);
                        // The receiver must check the checksum, not trust the sender's.
                        frame[0] &= !VIRTIO_NET_HDR_F_DATA_VALID;
                    }
                    if reordered {
                        add(&counters.reordered);
                    }
                    // Only a duplicate copies the frame; the original takes it.
                    let duplicate = duplicate_release_ns.map(|release| (release, frame.clone()));
                    if duplicate.is_some() {
                        add(&counters.duplicated);
                    }
                    for (release_ns, frame) in
                        [Some((release_ns, frame)), duplicate].into_iter().flatten()
                    {
                        // Due already with nothing ahead of it (no delay, or a reordered
                        // packet overtaking the queue): written with this batch.
                        if release_ns <= read_ns && (reordered || self.queue.is_empty()) {
                            counters
                                .release_lateness_ns
                                .fetch_add((read_ns - release_ns) * segments, Ordering::Relaxed);
                            immediate.push((frame, segments));
                            continue;
                        }
                        if self.queued_segments + segments > DELAY_QUEUE_PACKETS {
                            add(&counters.dropped_delay_queue);
                            continue;
                        }
                        self.queued_segments += segments;
                        self.queue.push_back(Held {
                            release_ns,
                            segments,
                            frame,
                        });
                    }
                }
            }
        }
        if !immediate.is_empty() {
            let frames: Vec<(&[u8], u64)> = immediate
                .iter()
                .map(|(frame, segments)| (frame.as_slice(), *segments))
                .collect();
            send_frames(self.tx.as_raw_fd(), &frames, counters);
        }
        count == BATCH_FRAMES
    }
}

/// How early to wake before a release: the running mean of how late timed sleeps end on this
/// machine (tens of µs in a virtual machine) plus twice their mean deviation. Waking that much
/// early and spinning the rest keeps releases within a few µs of their time without spinning
/// through every gap, which would take the CPU the lab's own applications need.
struct WakeLead {
    mean_ns: u64,
    deviation_ns: u64,
}

impl WakeLead {
    const MAX_NS: u64 = 200_000;

    fn new() -> Self {
        WakeLead {
            mean_ns: 30_000,
            deviation_ns: 10_000,
        }
    }

    fn lead_ns(&self) -> u64 {
        (self.mean_ns + 2 * self.deviation_ns).min(Self::MAX_NS)
    }

    /// Folds in one timed sleep that asked for `asked_ns` and took `took_ns` (1/16 weight).
    fn observe(&mut self, asked_ns: u64, took_ns: u64) {
        let overshoot_ns = took_ns.saturating_sub(asked_ns).min(Self::MAX_NS);
        self.deviation_ns = (self.deviation_ns * 15 + overshoot_ns.abs_diff(self.mean_ns)) / 16;
        self.mean_ns = (self.mean_ns * 15 + overshoot_ns) / 16;
    }
}

/// How long writing a lone frame takes until the next hop has it: `sendmmsg` on a veth runs the
/// receiving side's softirq in the same call (the router namespace's forwarding up to the next
/// link's receive ring, or the host's socket), so the call's duration is the frame's transit.
/// Without subtracting it every pass added it to the configured delay (about 12 µs a pass on a
/// 2-core virtual machine: +0.12 ms over five hops and back). A running mean (1/16 weight) of
/// single-frame writes only, so batches under load do not inflate it; capped, so a stalled
/// write cannot shorten delays by much.
struct SendLead {
    mean_ns: u64,
}

impl SendLead {
    const MAX_NS: u64 = 50_000;

    fn observe(&mut self, took_ns: u64) {
        self.mean_ns = (self.mean_ns * 15 + took_ns.min(Self::MAX_NS)) / 16;
    }
}

/// A forwarding thread's loop over its directions: never returns (the process ends on SIGTERM).
fn run_worker(mut directions: Vec<Direction>) -> ! {
    let mut lead = WakeLead::new();
    let mut polls: Vec<libc::pollfd> = directions
        .iter()
        .map(|d| libc::pollfd {
            fd: d.rx.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut backlog = false;
    loop {
        let now_ns = monotonic_ns();
        let mut next_release_ns = u64::MAX;
        for direction in &mut directions {
            direction.release_due(now_ns);
            if let Some(head) = direction.queue.front() {
                next_release_ns = next_release_ns.min(head.release_ns);
            }
        }
        let wait_ns = if backlog {
            0
        } else if next_release_ns == u64::MAX {
            100_000_000
        } else {
            (next_release_ns - now_ns.min(next_release_ns)).saturating_sub(lead.lead_ns())
        };
        // nix builds the timespec whatever width the libc gives time_t.
        let timeout = nix::sys::time::TimeSpec::from_duration(Duration::from_nanos(wait_ns));
        if wait_ns > 0 {
            // SAFETY: valid pollfds and timespec; a null sigmask keeps the current mask.
            let ready = unsafe {
                libc::ppoll(
                    polls.as_mut_ptr(),
                    polls.len() as libc::nfds_t,
                    timeout.as_ref(),
                    std::ptr::null(),
                )
            };
            if ready == 0 && next_release_ns != u64::MAX {
                lead.observe(wait_ns, monotonic_ns() - now_ns);
            }
        }
        // A ring is looked at without a system call, so every direction is read each turn:
        // working through a backlog or spinning up to a release costs no poll.
        backlog = false;
        for direction in &mut directions {
            backlog |= direction.receive();
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
    let mut directions = Vec::new();
    let slots = ring_slots(2 * state.topology.links.len());
    for (index, link) in state.topology.links.iter().enumerate() {
        let (a_side, b_side) = (
            emulator_interface(index, Side::A),
            emulator_interface(index, Side::B),
        );
        let shared = |impairment: &Impairment, rx: &ReceiveRing| {
            Arc::new(DirectionShared {
                rx_fd: rx.socket.as_raw_fd(),
                impairment: Mutex::new(impairment.clone()),
                counters: AtomicCounters::default(),
            })
        };
        let (forward_rx, reverse_rx) = (
            ReceiveRing::open(&a_side, slots)?,
            ReceiveRing::open(&b_side, slots)?,
        );
        let forward = shared(&link.forward, &forward_rx);
        let reverse = shared(&link.reverse, &reverse_rx);
        let cpu = Arc::new(Mutex::new(CpuServer::default()));
        for (rx, tx_name, direction, seed_offset) in [
            (forward_rx, &b_side, &forward, 0u64),
            (reverse_rx, &a_side, &reverse, 1u64),
        ] {
            let seed = state.topology.seed.wrapping_mul(1_000_003) + index as u64 * 2 + seed_offset;
            directions.push(Direction {
                rx,
                tx: packet_socket(tx_name, None)?,
                shared: Arc::clone(direction),
                engine: ImpairmentEngine::new(StdRng::seed_from_u64(seed)),
                queue: VecDeque::new(),
                queued_segments: 0,
                cpu: Arc::clone(&cpu),
                send_lead: SendLead { mean_ns: 0 },
            });
        }
        links.push(LinkShared {
            name: link.name.clone(),
            forward,
            reverse,
        });
    }
    std::thread::Builder::new()
        .name("forward".into())
        .spawn(move || run_worker(directions))
        .map_err(|e| format!("cannot start the forwarding thread: {e}"))?;
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
    fn the_cpu_serves_in_order_and_drops_beyond_its_backlog() {
        let cost = CpuCost {
            per_packet_us: 100,
            rate_bps: u64::MAX,
            backlog_packets: 2,
        };
        let mut cpu = CpuServer::default();
        // Three at once: two wait (100 and 200 µs), the third finds the backlog full.
        assert_eq!(cpu.admit(&cost, 0, 100_000), Some(100_000));
        assert_eq!(cpu.admit(&cost, 0, 100_000), Some(200_000));
        assert_eq!(cpu.admit(&cost, 0, 100_000), None);
        // Once the first is served there is room again, queued behind the second.
        assert_eq!(cpu.admit(&cost, 150_000, 100_000), Some(300_000));
        // An idle CPU starts at once.
        assert_eq!(cpu.admit(&cost, 1_000_000, 50_000), Some(1_050_000));
    }

    #[test]
    fn an_offloaded_frame_counts_its_packets() {
        // virtio-net header, Ethernet, IPv4 (20 bytes), TCP with 32 bytes of header.
        let transport_start = 14 + 20;
        let tcp_frame = |gso_type: u8, gso_size: u16, payload_bytes: usize| {
            let mut frame = vec![0u8; VNET_HEADER_BYTES + transport_start + 32 + payload_bytes];
            frame[1] = gso_type;
            frame[4..6].copy_from_slice(&gso_size.to_ne_bytes());
            frame[6..8].copy_from_slice(&(transport_start as u16).to_ne_bytes());
            frame[VNET_HEADER_BYTES + transport_start + 12] = 8 << 4;
            frame
        };
        assert_eq!(segments_of(&tcp_frame(0, 0, 1448)), 1);
        assert_eq!(segments_of(&tcp_frame(1, 1448, 10 * 1448)), 10);
        assert_eq!(segments_of(&tcp_frame(1 | 0x80, 1448, 10 * 1448 + 1)), 11);
        // UDP: an 8-byte header whatever the bytes after it say.
        let mut udp = tcp_frame(VIRTIO_NET_HDR_GSO_UDP_L4, 1000, 3000);
        udp.truncate(udp.len() - 24);
        assert_eq!(segments_of(&udp), 3);
        assert_eq!(segments_of(&[0u8; 4]), 1);
    }

    #[test]
    fn a_lab_shares_its_ring_memory_among_its_directions_in_whole_blocks() {
        assert_eq!(ring_slots(2), MAX_RING_SLOTS);
        // 64 MiB / 2 KiB / 14 = 2340 slots, down to whole blocks of 32.
        assert_eq!(ring_slots(14), 2336);
        assert_eq!(ring_slots(36), 896);
        assert_eq!(ring_slots(1000), MIN_RING_SLOTS);
    }

    #[test]
    fn a_batch_counts_each_packets_transit_beyond_the_lead() {
        let frame: &[u8] = &[0u8; 64];
        // Four lone packets written in 400 ns reach the next hop at 100, 200, 300, 400 ns;
        // beyond a 100 ns lead: 0 + 100 + 200 + 300.
        let lone = [(frame, 1), (frame, 1), (frame, 1), (frame, 1)];
        assert_eq!(batch_transit_beyond_lead_ns(&lone, 400, 100), 600);
        // Two frames of two packets each: at 200 and 400 ns, each packet counted.
        let offloaded = [(frame, 2), (frame, 2)];
        assert_eq!(
            batch_transit_beyond_lead_ns(&offloaded, 400, 100),
            2 * 100 + 2 * 300
        );
        // A write faster than the lead adds nothing.
        assert_eq!(batch_transit_beyond_lead_ns(&lone, 80, 100), 0);
    }

    #[test]
    fn send_lead_follows_single_frame_writes_and_is_capped() {
        let mut lead = SendLead { mean_ns: 0 };
        for _ in 0..200 {
            lead.observe(12_000);
        }
        assert!(
            (11_900..=12_000).contains(&lead.mean_ns),
            "{}",
            lead.mean_ns
        );
        // One write stalled for 10 ms moves the lead by at most a sixteenth of the cap.
        lead.observe(10_000_000);
        assert!(
            lead.mean_ns <= 12_000 + SendLead::MAX_NS / 16,
            "{}",
            lead.mean_ns
        );
    }

    #[test]
    fn arrival_is_the_kernel_timestamp_unless_it_is_implausible() {
        let (now_realtime_ns, now_ns) = (1_800_000_000_000_000_000, 5_000_000_000);
        let five_ms_ago = now_realtime_ns - 5_000_000;
        assert_eq!(
            arrival_from_timestamp(five_ms_ago, now_realtime_ns, now_ns),
            now_ns - 5_000_000
        );
        let in_the_future = now_realtime_ns + 60_000_000_000;
        assert_eq!(
            arrival_from_timestamp(in_the_future, now_realtime_ns, now_ns),
            now_ns
        );
        let before_a_clock_step = now_realtime_ns - 2 * MAX_TIMESTAMP_AGE_NS;
        assert_eq!(
            arrival_from_timestamp(before_a_clock_step, now_realtime_ns, now_ns),
            now_ns
        );
    }
}
