//! `TCP_INFO` of a socket, read with `getsockopt` into a byte buffer and decoded at the
//! offsets of Linux's `struct tcp_info` (include/uapi/linux/tcp.h).
//!
//! Offsets relied on (bytes; the struct only ever grows at its end, and the kernel
//! returns how much it filled, so newer fields are `None` on older kernels):
//!
//! | field | offset | type | since |
//! |---|---|---|---|
//! | tcpi_snd_mss | 16 | u32 | 2.6 |
//! | tcpi_pmtu (path MTU the socket uses) | 60 | u32 | 2.6 |
//! | tcpi_rtt / tcpi_rttvar (µs) | 68 / 72 | u32 | 2.6 |
//! | tcpi_snd_cwnd (segments) | 80 | u32 | 2.6 |
//! | tcpi_total_retrans | 100 | u32 | 2.6 |
//! | tcpi_min_rtt | 148 | u32 | 4.6 |
//! | tcpi_delivery_rate (bytes/s) | 160 | u64 | 4.9 |
//! | tcpi_busy_time / rwnd_limited / sndbuf_limited (µs) | 168 / 176 / 184 | u64 | 4.10 |
//! | tcpi_snd_wnd (bytes, peer's advertised window) | 228 | u32 | 5.4 |

use std::io;
use std::os::fd::AsRawFd;

/// Decoded subset of `struct tcp_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TcpInfo {
    pub snd_mss_bytes: u32,
    /// The path MTU the socket sends with (lowered by path MTU discovery).
    #[serde(default)]
    pub path_mtu_bytes: u32,
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub cwnd_segments: u32,
    pub total_retrans: u32,
    pub min_rtt_us: Option<u32>,
    pub delivery_rate_bytes_per_s: Option<u64>,
    pub busy_time_us: Option<u64>,
    pub rwnd_limited_us: Option<u64>,
    pub sndbuf_limited_us: Option<u64>,
    pub snd_wnd_bytes: Option<u32>,
}

impl TcpInfo {
    pub fn cwnd_bytes(&self) -> u64 {
        u64::from(self.cwnd_segments) * u64::from(self.snd_mss_bytes)
    }
}

const BUFFER_BYTES: usize = 256;

fn u32_at(buf: &[u8], filled: usize, offset: usize) -> Option<u32> {
    (offset + 4 <= filled).then(|| u32::from_ne_bytes(buf[offset..offset + 4].try_into().unwrap()))
}

fn u64_at(buf: &[u8], filled: usize, offset: usize) -> Option<u64> {
    (offset + 8 <= filled).then(|| u64::from_ne_bytes(buf[offset..offset + 8].try_into().unwrap()))
}

/// Decodes the first `filled` bytes the kernel wrote. Needs at least the 2.6-era fields.
pub fn decode(buf: &[u8], filled: usize) -> io::Result<TcpInfo> {
    let filled = filled.min(buf.len());
    let base = |offset| {
        u32_at(buf, filled, offset).ok_or_else(|| {
            io::Error::other(format!("kernel returned only {filled} bytes of tcp_info"))
        })
    };
    Ok(TcpInfo {
        snd_mss_bytes: base(16)?,
        path_mtu_bytes: base(60)?,
        rtt_us: base(68)?,
        rttvar_us: base(72)?,
        cwnd_segments: base(80)?,
        total_retrans: base(100)?,
        min_rtt_us: u32_at(buf, filled, 148),
        delivery_rate_bytes_per_s: u64_at(buf, filled, 160),
        busy_time_us: u64_at(buf, filled, 168),
        rwnd_limited_us: u64_at(buf, filled, 176),
        sndbuf_limited_us: u64_at(buf, filled, 184),
        snd_wnd_bytes: u32_at(buf, filled, 228),
    })
}

/// Reads TCP_INFO of a TCP socket.
pub fn read(socket: &impl AsRawFd) -> io::Result<TcpInfo> {
    let mut buf = [0u8; BUFFER_BYTES];
    let mut len = BUFFER_BYTES as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into our buffer and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            buf.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    decode(&buf, len as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn short_buffer_is_an_error_not_a_panic() {
        let buf = [0u8; 64];
        let err = decode(&buf, 64).unwrap_err();
        assert!(err.to_string().contains("64 bytes"));
    }

    #[test]
    fn newer_fields_absent_when_kernel_fills_less() {
        let mut buf = [0u8; BUFFER_BYTES];
        buf[80..84].copy_from_slice(&10u32.to_ne_bytes());
        buf[16..20].copy_from_slice(&1448u32.to_ne_bytes());
        let info = decode(&buf, 104).unwrap();
        assert_eq!(info.cwnd_bytes(), 14_480);
        assert_eq!(info.busy_time_us, None);
        assert_eq!(info.snd_wnd_bytes, None);
    }

    #[test]
    fn loopback_connection_reports_plausible_values() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(&[7u8; 100_000]).unwrap();
        let mut sink = vec![0u8; 100_000];
        server.read_exact(&mut sink).unwrap();
        let info = read(&client).unwrap();
        assert!(info.cwnd_segments >= 1, "{info:?}");
        assert!(info.snd_mss_bytes >= 536, "{info:?}");
        // Loopback's MTU is 65536; IP caps a packet at 65535.
        assert_eq!(info.path_mtu_bytes, 65_535, "{info:?}");
        assert!(
            info.busy_time_us.is_some(),
            "kernel without tcpi_busy_time: {info:?}"
        );
        assert!(info.snd_wnd_bytes.unwrap_or(0) > 0, "{info:?}");
    }
}
