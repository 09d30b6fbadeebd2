//! Kernel timestamps and per-packet metadata on datagram sockets.
//!
//! Receive stamps come from `SO_TIMESTAMPING` (`SOF_TIMESTAMPING_RX_SOFTWARE`) or, where
//! that is refused, `SO_TIMESTAMPNS`; transmit stamps from `SO_TIMESTAMPING`
//! (`SOF_TIMESTAMPING_TX_SOFTWARE | OPT_ID | OPT_TSONLY`) read back from the socket's
//! error queue (Linux `Documentation/networking/timestamping.rst`). Every stamp is
//! `CLOCK_REALTIME` in nanoseconds since the Unix epoch, the same clock as
//! [`now_unix_ns`], so kernel and user stamps can be mixed when one is missing.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use socket2::SockAddr;

/// Wall-clock time now (`CLOCK_REALTIME`), nanoseconds since the Unix epoch.
pub fn now_unix_ns() -> i64 {
    // SAFETY: clock_gettime writes into the timespec we own.
    let mut ts: libc::timespec = unsafe { zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    timespec_ns(&ts)
}

// From, not `as`: time_t and c_long are 32 bits on some ARM boards, where the
// conversion is not useless.
#[allow(clippy::useless_conversion)]
fn timespec_ns(ts: &libc::timespec) -> i64 {
    i64::from(ts.tv_sec)
        .saturating_mul(1_000_000_000)
        .saturating_add(i64::from(ts.tv_nsec))
}

/// Which kernel stamps a socket delivers, after [`enable_timestamping`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimestampCaps {
    pub kernel_rx: bool,
    pub kernel_tx: bool,
}

/// Asks the kernel for software receive stamps and, if `want_tx`, transmit stamps on
/// `socket`. Falls back to `SO_TIMESTAMPNS` (receive only); reports what it got.
///
/// When this is the host's first timestamping socket, the kernel switches receive
/// stamping on through deferred work: packets in the first moments may arrive
/// without a stamp, and callers fall back to the user clock for them.
pub fn enable_timestamping(socket: &impl AsRawFd, want_tx: bool) -> TimestampCaps {
    let fd = socket.as_raw_fd();
    let mut flags = libc::SOF_TIMESTAMPING_RX_SOFTWARE | libc::SOF_TIMESTAMPING_SOFTWARE;
    if want_tx {
        // OPT_ID numbers each send so a stamp can be matched to its packet; TSONLY
        // returns the stamp without a copy of the packet.
        flags |= libc::SOF_TIMESTAMPING_TX_SOFTWARE
            | libc::SOF_TIMESTAMPING_OPT_ID
            | libc::SOF_TIMESTAMPING_OPT_TSONLY;
    }
    if set_int_option(
        fd,
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPING,
        flags as libc::c_int,
    )
    .is_ok()
    {
        return TimestampCaps {
            kernel_rx: true,
            kernel_tx: want_tx,
        };
    }
    TimestampCaps {
        kernel_rx: set_int_option(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).is_ok(),
        kernel_tx: false,
    }
}

/// Asks for the TTL / hop limit of received packets in ancillary data. On a
/// dual-stack IPv6 socket both options are set so IPv4-mapped senders report too.
pub fn enable_receive_ttl(socket: &impl AsRawFd, ipv6: bool) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    if ipv6 {
        set_int_option(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT, 1)?;
        // IPv4 packets on a dual-stack socket carry IP_TTL; refused on v6-only sockets.
        let _ = set_int_option(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1);
        Ok(())
    } else {
        set_int_option(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)
    }
}

/// Asks for each received packet's destination address, so replies can be sent from
/// it (`IP_PKTINFO` / `IPV6_RECVPKTINFO`; a dual-stack socket reports IPv4 packets
/// through the IPv6 option, IPv4-mapped).
pub fn enable_packet_info(socket: &impl AsRawFd, ipv6: bool) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    if ipv6 {
        set_int_option(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO, 1)
    } else {
        set_int_option(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)
    }
}

/// `sendmsg` of `buf` to `peer` with source address `local` (a [`Received::local`]),
/// so a host with several addresses answers from the one it was asked on — a
/// connected client socket drops replies from any other.
pub fn send_from(fd: RawFd, buf: &[u8], peer: SocketAddr, local: IpAddr) -> io::Result<usize> {
    let peer_addr = SockAddr::from(peer);
    let mut control = ControlBuffer([0; 512]);
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: all pointers refer to live locals; the one control message is written
    // inside the buffer at the offsets CMSG_* compute for its declared length.
    unsafe {
        let mut msg: libc::msghdr = zeroed();
        msg.msg_name = peer_addr.as_ptr() as *mut libc::c_void;
        msg.msg_namelen = peer_addr.len();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr() as *mut libc::c_void;
        let (level, kind, payload_len) = match (peer, local) {
            (SocketAddr::V4(_), IpAddr::V4(_)) => (
                libc::IPPROTO_IP,
                libc::IP_PKTINFO,
                size_of::<libc::in_pktinfo>(),
            ),
            _ => (
                libc::IPPROTO_IPV6,
                libc::IPV6_PKTINFO,
                size_of::<libc::in6_pktinfo>(),
            ),
        };
        msg.msg_controllen = libc::CMSG_SPACE(payload_len as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = level;
        (*cmsg).cmsg_type = kind;
        (*cmsg).cmsg_len = libc::CMSG_LEN(payload_len as u32) as _;
        let data = libc::CMSG_DATA(cmsg);
        match local {
            IpAddr::V4(v4) if level == libc::IPPROTO_IP => {
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from_ne_bytes(v4.octets()),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                std::ptr::write_unaligned(data as *mut libc::in_pktinfo, info);
            }
            _ => {
                let v6 = match local {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    IpAddr::V6(v6) => v6,
                };
                let info = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: v6.octets(),
                    },
                    ipi6_ifindex: 0,
                };
                std::ptr::write_unaligned(data as *mut libc::in6_pktinfo, info);
            }
        }
        let n = libc::sendmsg(fd, &msg, 0);
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

pub(crate) fn set_int_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a c_int we own with its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One datagram with what the kernel told about it.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    pub len: usize,
    /// True when the datagram was longer than the buffer (the rest is lost).
    pub truncated: bool,
    pub peer: Option<SocketAddr>,
    /// Kernel receive stamp, ns since the Unix epoch.
    pub kernel_rx_ns: Option<i64>,
    /// IP TTL / IPv6 hop limit of the packet as received.
    pub ttl: Option<u8>,
    /// Local address the packet was sent to (with [`enable_packet_info`]); IPv4
    /// packets on a dual-stack socket report it IPv4-mapped.
    pub local: Option<IpAddr>,
    /// The packet's destination address (with [`enable_packet_info`]): differs from
    /// `local` when it was sent to a broadcast or multicast address.
    pub destination: Option<IpAddr>,
}

/// 8-byte aligned room for the control messages we ask for (stamps, TTL, errors).
#[repr(C, align(8))]
struct ControlBuffer([u8; 512]);

/// `recvmsg` on `fd` (non-blocking if the socket is) returning the datagram's
/// metadata. `flags` are passed through (e.g. `MSG_DONTWAIT`).
pub fn recv_with_meta(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<Received> {
    let mut control = ControlBuffer([0; 512]);
    // SAFETY: every pointer handed to recvmsg refers to a live local buffer with its length.
    let mut peer: libc::sockaddr_storage = unsafe { zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = &mut peer as *mut _ as *mut libc::c_void;
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = control.0.len() as _;
    let n = unsafe { libc::recvmsg(fd, &mut msg, flags | libc::MSG_TRUNC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let len = n as usize;
    let mut received = Received {
        len: len.min(buf.len()),
        truncated: len > buf.len() || msg.msg_flags & libc::MSG_TRUNC != 0,
        peer: None,
        kernel_rx_ns: None,
        ttl: None,
        local: None,
        destination: None,
    };
    if msg.msg_namelen > 0 {
        // SAFETY: the kernel filled `peer` with `msg_namelen` valid bytes.
        let addr = unsafe { SockAddr::new(peer, msg.msg_namelen) };
        received.peer = addr.as_socket();
    }
    for cmsg in control_messages(&msg) {
        match cmsg {
            ControlMessage::Stamp(ns) => received.kernel_rx_ns = Some(ns),
            ControlMessage::Ttl(ttl) => received.ttl = Some(ttl),
            ControlMessage::Local {
                reply_from,
                destination,
            } => {
                received.local = Some(reply_from);
                received.destination = Some(destination);
            }
            ControlMessage::TxStampId(_)
            | ControlMessage::IcmpError { .. }
            | ControlMessage::Other => {}
        }
    }
    Ok(received)
}

/// A transmit stamp read from the error queue: the `OPT_ID` counter of the send it
/// belongs to (0 for the socket's first send) and the stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxStamp {
    pub send_index: u32,
    pub kernel_tx_ns: i64,
}

/// Drains transmit stamps queued on `fd`'s error queue (never blocks). Error-queue
/// entries that are not stamps (e.g. ICMP errors) are skipped.
pub fn drain_tx_stamps(fd: RawFd) -> Vec<TxStamp> {
    let mut stamps = Vec::new();
    // Bounded: the queue holds at most what we sent; the cap guards against a loop.
    for _ in 0..4096 {
        let mut data = [0u8; 64];
        let entry = recv_error_queue(fd, &mut data, |msg, _| {
            let mut stamp = None;
            let mut id = None;
            for cmsg in control_messages(msg) {
                match cmsg {
                    ControlMessage::Stamp(ns) => stamp = Some(ns),
                    ControlMessage::TxStampId(send_index) => id = Some(send_index),
                    ControlMessage::Ttl(_)
                    | ControlMessage::Local { .. }
                    | ControlMessage::IcmpError { .. }
                    | ControlMessage::Other => {}
                }
            }
            (stamp, id)
        });
        let Ok(Some((stamp, id))) = entry else {
            break;
        };
        if let (Some(kernel_tx_ns), Some(send_index)) = (stamp, id) {
            stamps.push(TxStamp {
                send_index,
                kernel_tx_ns,
            });
        }
    }
    stamps
}

/// One non-blocking `recvmsg(MSG_ERRQUEUE)` on `fd` into `data`; `inspect` reads the
/// message (its control messages) and gets the length of the data. `Ok(None)` when the
/// error queue is empty.
pub(crate) fn recv_error_queue<T>(
    fd: RawFd,
    data: &mut [u8],
    inspect: impl FnOnce(&libc::msghdr, usize) -> T,
) -> io::Result<Option<T>> {
    let mut control = ControlBuffer([0; 512]);
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: as in recv_with_meta, all pointers refer to live local buffers.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = control.0.len() as _;
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if n < 0 {
        let err = io::Error::last_os_error();
        return if err.kind() == io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(err)
        };
    }
    Ok(Some(inspect(&msg, (n as usize).min(data.len()))))
}

pub(crate) enum ControlMessage {
    /// A software timestamp (receive, or transmit on the error queue).
    Stamp(i64),
    Ttl(u8),
    /// Destination address of a received packet (`IP_PKTINFO` / `IPV6_PKTINFO`).
    /// `IP_PKTINFO` / `IPV6_PKTINFO`: the local address a reply should come from, and
    /// the packet's destination address (a broadcast or multicast one, say).
    Local {
        reply_from: IpAddr,
        destination: IpAddr,
    },
    /// `sock_extended_err` of a timestamp: its `OPT_ID` counter.
    TxStampId(u32),
    /// `sock_extended_err` of an ICMP error (`IP_RECVERR`): type, code and the sender
    /// of the ICMP message (`SO_EE_OFFENDER`).
    IcmpError {
        icmp_type: u8,
        code: u8,
        offender: Option<IpAddr>,
    },
    Other,
}

/// The address behind a `sock_extended_err` (`SO_EE_OFFENDER`), `room` bytes long.
///
/// # Safety
/// `offender` must point to `room` readable bytes.
unsafe fn offender_address(offender: *const u8, room: usize) -> Option<IpAddr> {
    if room < size_of::<libc::sa_family_t>() {
        return None;
    }
    let family = std::ptr::read_unaligned(offender as *const libc::sa_family_t);
    match i32::from(family) {
        libc::AF_INET if room >= size_of::<libc::sockaddr_in>() => {
            let sin = std::ptr::read_unaligned(offender as *const libc::sockaddr_in);
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                sin.sin_addr.s_addr,
            ))))
        }
        libc::AF_INET6 if room >= size_of::<libc::sockaddr_in6>() => {
            let sin6 = std::ptr::read_unaligned(offender as *const libc::sockaddr_in6);
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

pub(crate) fn control_messages(msg: &libc::msghdr) -> Vec<ControlMessage> {
    let mut out = Vec::new();
    // SAFETY: CMSG_* walk the control buffer the kernel filled, bounded by msg_controllen;
    // each payload is read unaligned with the size the kernel documents for its type.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            let header = &*cmsg;
            let data = libc::CMSG_DATA(cmsg);
            let payload_len = header.cmsg_len as usize - (data as usize - cmsg as usize);
            out.push(match (header.cmsg_level, header.cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_TIMESTAMPING)
                    if payload_len >= size_of::<libc::timespec>() =>
                {
                    // scm_timestamping: ts[0] is the software stamp.
                    let ts = std::ptr::read_unaligned(data as *const libc::timespec);
                    if ts.tv_sec == 0 && ts.tv_nsec == 0 {
                        ControlMessage::Other
                    } else {
                        ControlMessage::Stamp(timespec_ns(&ts))
                    }
                }
                (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS)
                    if payload_len >= size_of::<libc::timespec>() =>
                {
                    let ts = std::ptr::read_unaligned(data as *const libc::timespec);
                    ControlMessage::Stamp(timespec_ns(&ts))
                }
                (libc::IPPROTO_IP, libc::IP_TTL) | (libc::IPPROTO_IPV6, libc::IPV6_HOPLIMIT)
                    if payload_len >= size_of::<libc::c_int>() =>
                {
                    let value = std::ptr::read_unaligned(data as *const libc::c_int);
                    ControlMessage::Ttl(value.clamp(0, 255) as u8)
                }
                (libc::IPPROTO_IP, libc::IP_PKTINFO)
                    if payload_len >= size_of::<libc::in_pktinfo>() =>
                {
                    let info = std::ptr::read_unaligned(data as *const libc::in_pktinfo);
                    // spec_dst: the local address a reply should come from;
                    // addr: the destination in the IP header.
                    let v4 = |address: libc::in_addr| {
                        IpAddr::V4(Ipv4Addr::from(address.s_addr.to_ne_bytes()))
                    };
                    ControlMessage::Local {
                        reply_from: v4(info.ipi_spec_dst),
                        destination: v4(info.ipi_addr),
                    }
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO)
                    if payload_len >= size_of::<libc::in6_pktinfo>() =>
                {
                    let info = std::ptr::read_unaligned(data as *const libc::in6_pktinfo);
                    let address = IpAddr::V6(Ipv6Addr::from(info.ipi6_addr.s6_addr));
                    ControlMessage::Local {
                        reply_from: address,
                        destination: address,
                    }
                }
                (libc::IPPROTO_IP, libc::IP_RECVERR) | (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
                    if payload_len >= size_of::<libc::sock_extended_err>() =>
                {
                    let err = std::ptr::read_unaligned(data as *const libc::sock_extended_err);
                    if err.ee_errno == libc::ENOMSG as u32
                        && err.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                    {
                        ControlMessage::TxStampId(err.ee_data)
                    } else if err.ee_origin == libc::SO_EE_ORIGIN_ICMP
                        || err.ee_origin == libc::SO_EE_ORIGIN_ICMP6
                    {
                        let ee_len = size_of::<libc::sock_extended_err>();
                        ControlMessage::IcmpError {
                            icmp_type: err.ee_type,
                            code: err.ee_code,
                            offender: offender_address(data.add(ee_len), payload_len - ee_len),
                        }
                    } else {
                        ControlMessage::Other
                    }
                }
                _ => ControlMessage::Other,
            });
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    out
}

/// Waits until `fd` is readable (or has an error-queue entry) or `timeout_ms` passes.
/// Returns the `revents` (0 on timeout). `EINTR` counts as a timeout.
pub fn poll_readable(fd: RawFd, timeout_ms: i32) -> io::Result<i16> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd we own.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(err);
    }
    Ok(if rc == 0 { 0 } else { pfd.revents })
}

/// `poll(2)` on one socket for input until `deadline`, at the clock's resolution
/// rather than whole milliseconds; the events that came, 0 when the deadline did.
pub fn poll_until(fd: RawFd, deadline: Instant) -> io::Result<i16> {
    let mut pfd = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    poll_many(&mut pfd, Some(deadline))?;
    Ok(pfd[0].revents)
}

/// `ppoll(2)` on `fds` until one has an event or `deadline` (`None`: no deadline)
/// has come; an interrupted wait counts as a timeout.
pub fn poll_many(fds: &mut [libc::pollfd], deadline: Option<Instant>) -> io::Result<()> {
    let timeout = deadline.map(|deadline| {
        let wait = deadline.saturating_duration_since(Instant::now());
        libc::timespec {
            // `as _`: the field's own type; libc deprecates naming `time_t` on musl.
            tv_sec: wait.as_secs().min(i32::MAX as u64) as _,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        }
    });
    let timeout_ptr = timeout
        .as_ref()
        .map_or(std::ptr::null(), |timeout| timeout as *const libc::timespec);
    // SAFETY: `fds` is a slice of pollfds we own for the call; the timeout outlives it.
    let rc = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            timeout_ptr,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
        fds.iter_mut().for_each(|pfd| pfd.revents = 0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn loopback_datagram_carries_kernel_receive_stamp_and_ttl() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let caps = enable_timestamping(&receiver, false);
        assert!(
            caps.kernel_rx,
            "kernel refused SO_TIMESTAMPING and SO_TIMESTAMPNS"
        );
        enable_receive_ttl(&receiver, false).unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut buf = [0u8; 16];
        // Bounded: stamping may take a moment to switch on host-wide (see
        // enable_timestamping), so send until a stamped datagram arrives.
        for _ in 0..100 {
            let before = now_unix_ns();
            sender
                .send_to(b"hello", receiver.local_addr().unwrap())
                .unwrap();
            let got = loop {
                assert!(
                    poll_readable(receiver.as_raw_fd(), 2000).unwrap() != 0,
                    "datagram lost"
                );
                let got = recv_with_meta(receiver.as_raw_fd(), &mut buf, 0).unwrap();
                // Other tests on this host may hit our ephemeral port: skip strangers.
                if got.peer == Some(sender.local_addr().unwrap()) {
                    break got;
                }
            };
            assert_eq!(&buf[..got.len], b"hello");
            assert_eq!(got.ttl, Some(64));
            if let Some(stamp) = got.kernel_rx_ns {
                let after = now_unix_ns();
                assert!(
                    stamp >= before && stamp <= after,
                    "stamp {stamp} outside [{before}, {after}]"
                );
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("no kernel receive stamp in 100 datagrams over a second");
    }

    #[test]
    fn destination_address_is_reported_and_used_as_reply_source() {
        let receiver = UdpSocket::bind("[::]:0").unwrap();
        enable_packet_info(&receiver, true).unwrap();
        let port = receiver.local_addr().unwrap().port();
        for (client_bind, target) in [("127.0.0.1:0", "127.0.0.2"), ("[::1]:0", "::1")] {
            let client = UdpSocket::bind(client_bind).unwrap();
            client
                .connect((target.parse::<IpAddr>().unwrap(), port))
                .unwrap();
            client.send(b"ping").unwrap();
            let mut buf = [0u8; 16];
            assert!(poll_readable(receiver.as_raw_fd(), 2000).unwrap() != 0);
            let got = recv_with_meta(receiver.as_raw_fd(), &mut buf, 0).unwrap();
            let local = got.local.expect("no destination address");
            let expected: IpAddr = match target.parse().unwrap() {
                IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
                v6 => v6,
            };
            assert_eq!(local, expected);
            // The connected client only accepts a reply from exactly `target`.
            send_from(receiver.as_raw_fd(), b"pong", got.peer.unwrap(), local).unwrap();
            client
                .set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            let n = client.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"pong");
        }
    }

    #[test]
    fn transmit_stamps_are_numbered_per_send() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.connect(receiver.local_addr().unwrap()).unwrap();
        let caps = enable_timestamping(&sender, true);
        assert!(
            caps.kernel_tx,
            "kernel refused SO_TIMESTAMPING transmit stamps"
        );
        for _ in 0..3 {
            sender.send(b"x").unwrap();
        }
        let mut stamps = Vec::new();
        for _ in 0..100 {
            stamps.extend(drain_tx_stamps(sender.as_raw_fd()));
            if stamps.len() == 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let ids: Vec<u32> = stamps.iter().map(|s| s.send_index).collect();
        assert_eq!(ids, vec![0, 1, 2]);
        assert!(stamps
            .windows(2)
            .all(|w| w[0].kernel_tx_ns <= w[1].kernel_tx_ns));
    }
}
