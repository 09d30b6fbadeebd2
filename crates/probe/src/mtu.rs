//! Path MTU of a connected socket and the refusal of probes that would fragment
//! (Miravalls-Sierra et al., 2018: one lost fragment loses the whole datagram, biasing loss and delay).

use std::io;
use std::mem::size_of;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

/// IPv4 header without options.
pub const IPV4_HEADER_BYTES: u32 = 20;
/// IPv6 fixed header.
pub const IPV6_HEADER_BYTES: u32 = 40;
/// UDP header; the ICMP echo header has the same size.
pub const UDP_HEADER_BYTES: u32 = 8;
pub const ICMP_ECHO_HEADER_BYTES: u32 = 8;

/// IP header size for packets to `addr`.
pub fn ip_header_bytes(addr: IpAddr) -> u32 {
    match addr {
        IpAddr::V4(_) => IPV4_HEADER_BYTES,
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => IPV4_HEADER_BYTES,
        IpAddr::V6(_) => IPV6_HEADER_BYTES,
    }
}

/// The kernel's path MTU for a *connected* socket (`IP_MTU` / `IPV6_MTU`): the route's
/// MTU, lowered by any ICMP "fragmentation needed" seen for the destination.
pub fn path_mtu(socket: &impl AsRawFd, ipv6: bool) -> io::Result<u32> {
    let (level, name) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: reads one c_int into a variable we own.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            level,
            name,
            &mut value as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(value).map_err(|_| io::Error::other(format!("kernel reported MTU {value}")))
}

/// A probe larger than the path allows without fragmentation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "probe size {payload_bytes} B plus {header_bytes} B of headers exceeds the path MTU of \
     {mtu_bytes} B (largest unfragmented payload: {max_payload_bytes} B); pass \
     --allow-fragmentation to send it anyway"
)]
pub struct WouldFragment {
    pub payload_bytes: u32,
    pub header_bytes: u32,
    pub mtu_bytes: u32,
    pub max_payload_bytes: u32,
}

/// Refuses `payload_bytes` if, with `header_bytes` of IP + transport headers, it exceeds
/// `mtu_bytes`, unless fragmentation is allowed.
pub fn check_fragmentation(
    payload_bytes: u32,
    header_bytes: u32,
    mtu_bytes: u32,
    allow_fragmentation: bool,
) -> Result<(), WouldFragment> {
    if allow_fragmentation || payload_bytes.saturating_add(header_bytes) <= mtu_bytes {
        return Ok(());
    }
    Err(WouldFragment {
        payload_bytes,
        header_bytes,
        mtu_bytes,
        max_payload_bytes: mtu_bytes.saturating_sub(header_bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_names_size_mtu_and_flag() {
        // 1500 MTU, IPv4 + UDP = 28 B of headers: 1472 fits, 1473 does not.
        assert!(check_fragmentation(1472, 28, 1500, false).is_ok());
        let err = check_fragmentation(1473, 28, 1500, false).unwrap_err();
        assert_eq!(err.max_payload_bytes, 1472);
        let text = err.to_string();
        assert!(
            text.contains("1473")
                && text.contains("1500")
                && text.contains("--allow-fragmentation")
        );
        assert!(check_fragmentation(4096, 28, 1500, true).is_ok());
    }

    #[test]
    fn loopback_path_mtu_is_reported() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.connect("127.0.0.1:9").unwrap();
        let mtu = path_mtu(&socket, false).unwrap();
        assert!(mtu >= 1280, "loopback MTU {mtu}");
        assert_eq!(ip_header_bytes("::1".parse().unwrap()), 40);
    }
}
