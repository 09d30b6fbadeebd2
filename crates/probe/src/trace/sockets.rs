//! The three probers: UDP (error queue), ICMP echo (ping socket or raw), TCP SYN (raw).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use socket2::{Domain, Protocol, Socket, Type};
use vantage_model::trace::{
    ReplyKind, TraceFlow, TraceMethod, TraceProtocol, TraceSpec, DEFAULT_TCP_PORT, DEFAULT_UDP_PORT,
};

use super::prober::{poll_ms, source_address, Answer, Prober, TraceError};
use super::wire::{self, ECHO_REPLY_V4, ECHO_REPLY_V6, ECHO_REQUEST_V4, ECHO_REQUEST_V6};
use crate::latency::open_echo_socket;
use crate::timestamp::{
    control_messages, poll_readable, recv_error_queue, recv_with_meta, set_int_option,
    ControlMessage,
};

/// Largest answer read: an ICMP error quotes at most 576 (IPv4) or 1280 (IPv6) bytes.
const ANSWER_BUFFER_BYTES: usize = 2048;

/// Opens the prober for `spec`'s protocol towards `target`.
pub(super) fn open(spec: &TraceSpec, target: IpAddr) -> Result<Box<dyn Prober>, TraceError> {
    Ok(match spec.protocol {
        TraceProtocol::Udp => Box::new(UdpProber::open(spec, target)?),
        TraceProtocol::Icmp => Box::new(IcmpProber::open(spec, target)?),
        TraceProtocol::Tcp => Box::new(TcpProber::open(spec, target)?),
    })
}

fn domain_of(target: IpAddr) -> Domain {
    if target.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    }
}

fn unspecified(target: IpAddr, port: u16) -> SocketAddr {
    let ip = if target.is_ipv6() {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    SocketAddr::new(ip, port)
}

fn set_ttl(socket: &Socket, ipv6: bool, ttl: u8) -> Result<(), TraceError> {
    let result = if ipv6 {
        socket.set_unicast_hops_v6(u32::from(ttl))
    } else {
        socket.set_ttl(u32::from(ttl))
    };
    result.map_err(|e| TraceError::io(format!("setting the TTL to {ttl}"), e))
}

/// Asks for ICMP errors on the socket's error queue.
fn enable_recverr(socket: &Socket, ipv6: bool) -> Result<(), TraceError> {
    let (level, name) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
    } else {
        (libc::IPPROTO_IP, libc::IP_RECVERR)
    };
    set_int_option(socket.as_raw_fd(), level, name, 1)
        .map_err(|e| TraceError::io("enabling IP_RECVERR", e))
}

/// Sends `packet`; a pending error from an earlier probe's ICMP answer (the kernel
/// reports it on the next call) is cleared and the send retried once.
fn send_probe(socket: &Socket, packet: &[u8], to: Option<SocketAddr>) -> Result<(), TraceError> {
    let mut last = None;
    for _ in 0..2 {
        let result = match to {
            Some(to) => socket.send_to(packet, &to.into()),
            None => socket.send(packet),
        };
        match result {
            Ok(_) => return Ok(()),
            Err(err)
                if matches!(
                    err.raw_os_error(),
                    Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH)
                ) =>
            {
                last = Some(err)
            }
            Err(err) => return Err(TraceError::io("sending a probe", err)),
        }
    }
    Err(TraceError::io(
        "sending a probe",
        last.unwrap_or_else(|| io::Error::other("send failed")),
    ))
}

/// One ICMP error from a socket's error queue.
struct QueuedError {
    /// Bytes of the quoted packet copied into the buffer (what follows the transport
    /// header for UDP, the quoted ICMP header for ping sockets).
    len: usize,
    icmp_type: u8,
    code: u8,
    offender: Option<IpAddr>,
}

/// Reads one ICMP error from `fd`'s error queue; `Ok(None)` when it is empty. Other
/// entries (local errors) are consumed and skipped.
fn read_error_queue(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<QueuedError>> {
    // Bounded: the queue holds a few entries per probe.
    for _ in 0..64 {
        match recv_error_queue(fd, buf, icmp_error_entry)? {
            None => return Ok(None),
            Some(Some(entry)) => return Ok(Some(entry)),
            Some(None) => {}
        }
    }
    Ok(None)
}

/// The ICMP error a `MSG_ERRQUEUE` message carries, if it carries one.
fn icmp_error_entry(msg: &libc::msghdr, len: usize) -> Option<QueuedError> {
    control_messages(msg)
        .into_iter()
        .find_map(|cmsg| match cmsg {
            ControlMessage::IcmpError {
                icmp_type,
                code,
                offender,
            } => Some(QueuedError {
                len,
                icmp_type,
                code,
                offender,
            }),
            _ => None,
        })
}

fn io_error(context: &'static str) -> impl Fn(io::Error) -> TraceError {
    move |e| TraceError::io(context, e)
}

/// Waits on a datagram socket for an answer before `deadline`: ICMP errors from the
/// error queue (`on_error`) or ordinary datagrams (`on_datagram`).
fn receive_datagram_socket(
    socket: &Socket,
    buf: &mut [u8],
    deadline: Instant,
    mut on_error: impl FnMut(&QueuedError, &[u8]) -> Option<Answer>,
    mut on_datagram: impl FnMut(&[u8], Option<SocketAddr>) -> Option<Answer>,
) -> Result<Option<Answer>, TraceError> {
    let fd = socket.as_raw_fd();
    loop {
        if Instant::now() >= deadline {
            return Ok(None);
        }
        let revents =
            poll_readable(fd, poll_ms(deadline)).map_err(io_error("waiting for answers"))?;
        if revents & libc::POLLERR != 0 {
            let mut any = false;
            while let Some(entry) =
                read_error_queue(fd, buf).map_err(io_error("reading the error queue"))?
            {
                any = true;
                if let Some(answer) = on_error(&entry, &buf[..entry.len]) {
                    return Ok(Some(answer));
                }
            }
            if !any {
                // A pending socket error without a queued entry: reading clears it.
                let _ = recv_with_meta(fd, buf, libc::MSG_DONTWAIT);
            }
        }
        if revents & libc::POLLIN != 0 {
            // An error here was already reported through the error queue, or nothing is there.
            if let Ok(received) = recv_with_meta(fd, buf, libc::MSG_DONTWAIT) {
                if let Some(answer) = on_datagram(&buf[..received.len], received.peer) {
                    return Ok(Some(answer));
                }
            }
        }
    }
}

/// UDP probes from one connected socket: one source port, one destination port.
struct UdpProber {
    socket: Socket,
    target: SocketAddr,
    buf: Vec<u8>,
}

impl UdpProber {
    fn open(spec: &TraceSpec, target: IpAddr) -> Result<Self, TraceError> {
        let port = spec.destination_port().unwrap_or(DEFAULT_UDP_PORT);
        let target = SocketAddr::new(target, port);
        let socket = Socket::new(domain_of(target.ip()), Type::DGRAM, Some(Protocol::UDP))
            .map_err(io_error("opening a UDP socket"))?;
        socket
            .bind(&unspecified(target.ip(), spec.flow_id.unwrap_or(0)).into())
            .map_err(|e| TraceError::io("binding the source port (flow_id)", e))?;
        socket
            .connect(&target.into())
            .map_err(|e| TraceError::io(format!("connecting to {target}"), e))?;
        enable_recverr(&socket, target.is_ipv6())?;
        socket
            .set_nonblocking(true)
            .map_err(io_error("setting non-blocking"))?;
        Ok(UdpProber {
            socket,
            target,
            buf: vec![0; ANSWER_BUFFER_BYTES],
        })
    }
}

impl Prober for UdpProber {
    fn method(&self) -> TraceMethod {
        TraceMethod::UdpDatagram
    }

    fn flow(&self) -> TraceFlow {
        let local = self.socket.local_addr().ok().and_then(|a| a.as_socket());
        TraceFlow {
            source_addr: local.map(|a| a.ip().to_string()),
            source_port: local.map(|a| a.port()),
            destination_port: Some(self.target.port()),
            icmp_identifier: None,
            icmp_checksum: None,
        }
    }

    fn send(&mut self, ttl: u8, seq: u16) -> Result<(), TraceError> {
        set_ttl(&self.socket, self.target.is_ipv6(), ttl)?;
        send_probe(&self.socket, &wire::udp_payload(seq), None)
    }

    fn receive(&mut self, deadline: Instant) -> Result<Option<Answer>, TraceError> {
        let ipv6 = self.target.is_ipv6();
        let target = self.target.ip();
        receive_datagram_socket(
            &self.socket,
            &mut self.buf,
            deadline,
            |entry, quoted| {
                let kind = wire::classify_error(ipv6, entry.icmp_type, entry.code)?;
                Some(Answer {
                    seq: wire::udp_quoted_seq(quoted),
                    address: entry.offender.unwrap_or(target),
                    kind,
                    icmp: Some((entry.icmp_type, entry.code)),
                })
            },
            // Something listens on the port and answered.
            |_, peer| {
                Some(Answer {
                    seq: None,
                    address: peer.map_or(target, |p| p.ip()),
                    kind: ReplyKind::Datagram,
                    icmp: None,
                })
            },
        )
    }
}

/// ICMP echo probes with one identifier and one checksum.
struct IcmpProber {
    socket: Socket,
    /// Ping socket (kernel-managed identifier, errors on the error queue) or raw.
    datagram: bool,
    target: IpAddr,
    identifier: u16,
    buf: Vec<u8>,
}

impl IcmpProber {
    fn open(spec: &TraceSpec, target: IpAddr) -> Result<Self, TraceError> {
        let ipv6 = target.is_ipv6();
        let (socket, datagram) = open_echo_socket(ipv6).map_err(TraceError::Permission)?;
        let identifier = if datagram {
            // A ping socket's identifier is its bound "port"; the kernel picks one for 0.
            socket
                .bind(&unspecified(target, spec.flow_id.unwrap_or(0)).into())
                .map_err(|e| TraceError::io("binding the echo identifier (flow_id)", e))?;
            enable_recverr(&socket, ipv6)?;
            socket
                .connect(&SocketAddr::new(target, 0).into())
                .map_err(|e| TraceError::io(format!("connecting to {target}"), e))?;
            socket
                .local_addr()
                .ok()
                .and_then(|a| a.as_socket())
                .map_or(0, |a| a.port())
        } else {
            // A raw socket stays unconnected: a connected one only sees the target's packets,
            // not the routers' time-exceeded messages.
            spec.flow_id.unwrap_or_else(rand::random)
        };
        socket
            .set_nonblocking(true)
            .map_err(io_error("setting non-blocking"))?;
        Ok(IcmpProber {
            socket,
            datagram,
            target,
            identifier,
            buf: vec![0; ANSWER_BUFFER_BYTES],
        })
    }

    fn echo_types(&self) -> (u8, u8) {
        if self.target.is_ipv6() {
            (ECHO_REQUEST_V6, ECHO_REPLY_V6)
        } else {
            (ECHO_REQUEST_V4, ECHO_REPLY_V4)
        }
    }

    /// Parses what a raw ICMP socket read: an echo reply or an error quoting our probe.
    fn parse_raw(&self, bytes: &[u8], peer: Option<SocketAddr>) -> Option<Answer> {
        let ipv6 = self.target.is_ipv6();
        let (request, reply) = self.echo_types();
        let message = wire::raw_icmp(bytes, ipv6)?;
        let source = message.source.or(peer.map(|p| p.ip()))?;
        if message.icmp_type == reply {
            let (identifier, seq) = wire::echo_fields(message.icmp, reply)?;
            return (identifier == self.identifier && source == self.target).then_some(Answer {
                seq: Some(seq),
                address: source,
                kind: ReplyKind::EchoReply,
                icmp: Some((message.icmp_type, message.code)),
            });
        }
        let kind = wire::classify_error(ipv6, message.icmp_type, message.code)?;
        let (protocol, destination, transport) = wire::quoted_packet(message.icmp, ipv6)?;
        let icmp_protocol = if ipv6 {
            libc::IPPROTO_ICMPV6
        } else {
            libc::IPPROTO_ICMP
        };
        if i32::from(protocol) != icmp_protocol || destination != self.target {
            return None;
        }
        let (identifier, seq) = wire::echo_fields(transport, request)?;
        (identifier == self.identifier).then_some(Answer {
            seq: Some(seq),
            address: source,
            kind,
            icmp: Some((message.icmp_type, message.code)),
        })
    }
}

impl Prober for IcmpProber {
    fn method(&self) -> TraceMethod {
        if self.datagram {
            TraceMethod::IcmpDatagram
        } else {
            TraceMethod::IcmpRaw
        }
    }

    fn flow(&self) -> TraceFlow {
        let ipv6 = self.target.is_ipv6();
        TraceFlow {
            source_addr: source_address(self.target).ok().map(|a| a.to_string()),
            source_port: None,
            destination_port: None,
            icmp_identifier: Some(self.identifier),
            icmp_checksum: (!ipv6).then(|| wire::echo_checksum_v4(self.identifier)),
        }
    }

    fn send(&mut self, ttl: u8, seq: u16) -> Result<(), TraceError> {
        let ipv6 = self.target.is_ipv6();
        set_ttl(&self.socket, ipv6, ttl)?;
        // Ping sockets overwrite the identifier with their own and compute the checksum;
        // the payload keeps that checksum constant just the same.
        let packet = wire::echo_request(ipv6, self.identifier, seq);
        let to = (!self.datagram).then_some(SocketAddr::new(self.target, 0));
        send_probe(&self.socket, &packet, to)
    }

    fn receive(&mut self, deadline: Instant) -> Result<Option<Answer>, TraceError> {
        let ipv6 = self.target.is_ipv6();
        let (request, reply) = self.echo_types();
        let target = self.target;
        if self.datagram {
            return receive_datagram_socket(
                &self.socket,
                &mut self.buf,
                deadline,
                |entry, quoted| {
                    let kind = wire::classify_error(ipv6, entry.icmp_type, entry.code)?;
                    let (_, seq) = wire::echo_fields(quoted, request)?;
                    Some(Answer {
                        seq: Some(seq),
                        address: entry.offender?,
                        kind,
                        icmp: Some((entry.icmp_type, entry.code)),
                    })
                },
                |bytes, peer| {
                    let (_, seq) = wire::echo_fields(bytes, reply)?;
                    Some(Answer {
                        seq: Some(seq),
                        address: peer.map_or(target, |p| p.ip()),
                        kind: ReplyKind::EchoReply,
                        icmp: Some((reply, 0)),
                    })
                },
            );
        }
        let fd = self.socket.as_raw_fd();
        loop {
            if Instant::now() >= deadline {
                return Ok(None);
            }
            let revents =
                poll_readable(fd, poll_ms(deadline)).map_err(io_error("waiting for answers"))?;
            if revents & libc::POLLIN == 0 {
                continue;
            }
            let mut buf = std::mem::take(&mut self.buf);
            // A failed read (nothing there after all, a pending socket error) loses nothing
            // of ours: the loop goes on until the deadline.
            let answer = recv_with_meta(fd, &mut buf, libc::MSG_DONTWAIT)
                .ok()
                .and_then(|r| self.parse_raw(&buf[..r.len], r.peer));
            self.buf = buf;
            if answer.is_some() {
                return Ok(answer);
            }
        }
    }
}

/// TCP SYN probes from raw sockets: one source port, one destination port; the probe's
/// number rides in the TCP sequence number, which balancers do not hash.
struct TcpProber {
    tcp: Socket,
    icmp: Socket,
    source: Ipv4Addr,
    target: Ipv4Addr,
    source_port: u16,
    destination_port: u16,
    isn_base: u32,
    buf: Vec<u8>,
}

impl TcpProber {
    fn open(spec: &TraceSpec, target: IpAddr) -> Result<Self, TraceError> {
        let IpAddr::V4(target) = target else {
            return Err(TraceError::Unsupported(format!(
                "TCP SYN traces are IPv4 only; trace {target} with --protocol udp or icmp"
            )));
        };
        let raw = |protocol: Protocol, what: &str| {
            Socket::new(Domain::IPV4, Type::RAW, Some(protocol)).map_err(|e| {
                TraceError::Permission(format!(
                    "TCP SYN traces need a raw {what} socket, which needs root or \
                     CAP_NET_RAW (refused: {e}); unprivileged, use --protocol udp or icmp"
                ))
            })
        };
        let tcp = raw(Protocol::TCP, "TCP")?;
        let icmp = raw(Protocol::ICMPV4, "ICMP")?;
        let IpAddr::V4(source) = source_address(IpAddr::V4(target))? else {
            return Err(TraceError::Unsupported(
                "no IPv4 source address towards the target".into(),
            ));
        };
        // The pseudo-header checksum needs the source address the kernel will use.
        tcp.bind(&SocketAddr::new(IpAddr::V4(source), 0).into())
            .map_err(io_error("binding the raw TCP socket"))?;
        for socket in [&tcp, &icmp] {
            socket
                .set_nonblocking(true)
                .map_err(io_error("setting non-blocking"))?;
        }
        let destination_port = spec.destination_port().unwrap_or(DEFAULT_TCP_PORT);
        let source_port = spec.flow_id.unwrap_or_else(|| {
            // Ephemeral range, never the destination port (a loopback SYN would look like its answer).
            let port = 33_000 + rand::random::<u16>() % 28_000;
            if port == destination_port {
                port + 1
            } else {
                port
            }
        });
        Ok(TcpProber {
            tcp,
            icmp,
            source,
            target,
            source_port,
            destination_port,
            isn_base: rand::random(),
            buf: vec![0; ANSWER_BUFFER_BYTES],
        })
    }

    fn seq_of(&self, sequence: u32) -> Option<u16> {
        u16::try_from(sequence.wrapping_sub(self.isn_base)).ok()
    }

    fn parse_icmp(&self, bytes: &[u8]) -> Option<Answer> {
        let message = wire::raw_icmp(bytes, false)?;
        let kind = wire::classify_error(false, message.icmp_type, message.code)?;
        let (protocol, destination, transport) = wire::quoted_packet(message.icmp, false)?;
        if i32::from(protocol) != libc::IPPROTO_TCP
            || destination != IpAddr::V4(self.target)
            || transport.len() < 8
        {
            return None;
        }
        let ports = (
            u16::from_be_bytes([transport[0], transport[1]]),
            u16::from_be_bytes([transport[2], transport[3]]),
        );
        if ports != (self.source_port, self.destination_port) {
            return None;
        }
        let sequence = u32::from_be_bytes([transport[4], transport[5], transport[6], transport[7]]);
        Some(Answer {
            seq: Some(self.seq_of(sequence)?),
            address: message.source?,
            kind,
            icmp: Some((message.icmp_type, message.code)),
        })
    }

    fn parse_tcp(&self, bytes: &[u8]) -> Option<Answer> {
        let reply = wire::tcp_reply(bytes)?;
        if reply.source != self.target
            || reply.source_port != self.destination_port
            || reply.destination_port != self.source_port
        {
            return None;
        }
        Some(Answer {
            seq: Some(self.seq_of(reply.acknowledgement.wrapping_sub(1))?),
            address: IpAddr::V4(reply.source),
            kind: reply.kind,
            icmp: None,
        })
    }
}

impl Prober for TcpProber {
    fn method(&self) -> TraceMethod {
        TraceMethod::TcpRaw
    }

    fn flow(&self) -> TraceFlow {
        TraceFlow {
            source_addr: Some(self.source.to_string()),
            source_port: Some(self.source_port),
            destination_port: Some(self.destination_port),
            icmp_identifier: None,
            icmp_checksum: None,
        }
    }

    fn send(&mut self, ttl: u8, seq: u16) -> Result<(), TraceError> {
        set_ttl(&self.tcp, false, ttl)?;
        let segment = wire::tcp_syn(
            self.source,
            self.target,
            self.source_port,
            self.destination_port,
            self.isn_base.wrapping_add(u32::from(seq)),
        );
        send_probe(
            &self.tcp,
            &segment,
            Some(SocketAddr::new(IpAddr::V4(self.target), 0)),
        )
    }

    fn receive(&mut self, deadline: Instant) -> Result<Option<Answer>, TraceError> {
        loop {
            if Instant::now() >= deadline {
                return Ok(None);
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.tcp.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.icmp.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two pollfds we own, with their count.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, poll_ms(deadline)) };
            if rc < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(TraceError::io("waiting for answers", err));
            }
            let mut buf = std::mem::take(&mut self.buf);
            let mut answer = None;
            for (index, pfd) in fds.iter().enumerate() {
                if pfd.revents & libc::POLLIN == 0 || answer.is_some() {
                    continue;
                }
                if let Ok(r) = recv_with_meta(pfd.fd, &mut buf, libc::MSG_DONTWAIT) {
                    answer = if index == 0 {
                        self.parse_tcp(&buf[..r.len])
                    } else {
                        self.parse_icmp(&buf[..r.len])
                    };
                }
            }
            self.buf = buf;
            if let Some(found) = answer {
                if found.kind == ReplyKind::SynAck {
                    self.reset(found.seq.unwrap_or(0))?;
                }
                return Ok(answer);
            }
        }
    }
}

impl TcpProber {
    /// Closes the half-open connection a SYN-ACK opened, before the next probe of the same
    /// flow can reach it (the local kernel's own RST is sent from another CPU and can come
    /// later; the destination would then take the next SYN as part of the old connection).
    fn reset(&self, seq: u16) -> Result<(), TraceError> {
        let segment = wire::tcp_rst(
            self.source,
            self.target,
            self.source_port,
            self.destination_port,
            self.isn_base.wrapping_add(u32::from(seq)).wrapping_add(1),
        );
        self.tcp
            .send_to(
                &segment,
                &SocketAddr::new(IpAddr::V4(self.target), 0).into(),
            )
            .map(|_| ())
            .map_err(io_error("sending a RST after the SYN-ACK"))
    }
}
