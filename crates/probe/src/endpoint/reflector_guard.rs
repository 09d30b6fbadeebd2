//! Which UDP requests the reflector refuses to answer, so it can be neither a link in a
//! reflection loop nor an amplifier, nor a free traffic generator aimed at a third party
//! (the "loop DoS" class of UDP services: two reflectors whose replies are each
//! other's requests ping-pong forever after one spoofed datagram).
//!
//! Pure decisions over addresses, ports, lengths and clocks; the reflector thread
//! calls [`ReflectorGuard::check`] before it numbers a request.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::source_policy::{allowed, IpNet};
use crate::twamp::{NtpTimestamp, REFLECTOR_HEADER_LEN};

/// Source ports never answered besides the reflector's own and those below 1024:
/// TWAMP's well-known port (RFC 8545) and vantage's default endpoint port, so two
/// reflectors on the usual ports cannot be set against each other.
const REFLECTOR_PORTS: [u16; 2] = [862, crate::endpoint::config::DEFAULT_PORT];

/// A request whose timestamp (bytes 4..12) and receive-timestamp field (16..24) both
/// hold a time this close to ours is another reflector's reply, not a sender's request:
/// in a request bytes 16..24 are padding (zeros for STAMP, RFC 8762 §4.2.1), where a
/// valid recent NTP time does not appear by chance.
const REFLECTED_WINDOW_NS: i64 = 300 * 1_000_000_000;

/// Why a request was not answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The source port is privileged, a reflector's well-known port, or our own.
    SourcePort,
    /// The source is not a unicast address, or the request was sent to a broadcast
    /// or multicast address.
    NotUnicast,
    /// The reply would be longer than the request (RFC 6038 symmetric size): answering
    /// would amplify.
    ShorterThanReply,
    /// The request is another reflector's reply.
    Reflected,
    /// The source address sent more than its rate allows.
    RateLimited,
    NotAllowed,
}

/// Per-source token bucket, refilled continuously.
struct Bucket {
    tokens: f64,
    updated_ns: i64,
}

pub struct ReflectorGuard {
    own_port: u16,
    /// Requests per second each source address may send; 0 = unlimited.
    rate_limit_pps: u32,
    burst: f64,
    max_sources: usize,
    buckets: HashMap<IpAddr, Bucket>,
    /// Directed-broadcast addresses of this host's interfaces.
    broadcast_addresses: Vec<Ipv4Addr>,
    allow: Vec<IpNet>,
}

impl ReflectorGuard {
    pub fn new(own_port: u16, rate_limit_pps: u32, max_sources: usize) -> Self {
        Self {
            own_port,
            rate_limit_pps,
            // A tenth of a second of traffic: room for a sender's scheduling jitter,
            // not for a sustained excess.
            burst: (f64::from(rate_limit_pps) / 10.0).max(10.0),
            max_sources: max_sources.max(1),
            buckets: HashMap::new(),
            broadcast_addresses: Vec::new(),
            allow: Vec::new(),
        }
    }

    /// Answers only sources in these networks (`vantage endpoint --allow`).
    pub fn allow_only(&mut self, networks: Vec<IpNet>) {
        self.allow = networks;
    }

    pub fn set_broadcast_addresses(&mut self, addresses: Vec<Ipv4Addr>) {
        self.broadcast_addresses = addresses;
    }

    /// Whether to answer `request` from `peer`, sent to `destination`, received at
    /// `now_ns` (Unix nanoseconds); `Err` says why not.
    pub fn check(
        &mut self,
        request: &[u8],
        peer: SocketAddr,
        destination: Option<IpAddr>,
        now_ns: i64,
    ) -> Result<(), Refusal> {
        if !allowed(&self.allow, peer.ip()) {
            return Err(Refusal::NotAllowed);
        }
        let port = peer.port();
        if port < 1024 || port == self.own_port || REFLECTOR_PORTS.contains(&port) {
            return Err(Refusal::SourcePort);
        }
        if !is_unicast(peer.ip(), &[])
            || destination.is_some_and(|to| !is_unicast(to, &self.broadcast_addresses))
        {
            return Err(Refusal::NotUnicast);
        }
        if request.len() < REFLECTOR_HEADER_LEN {
            return Err(Refusal::ShorterThanReply);
        }
        if looks_reflected(request, now_ns) {
            return Err(Refusal::Reflected);
        }
        self.take_token(peer.ip().to_canonical(), now_ns)
    }

    fn take_token(&mut self, source: IpAddr, now_ns: i64) -> Result<(), Refusal> {
        if self.rate_limit_pps == 0 {
            return Ok(());
        }
        if !self.buckets.contains_key(&source) && self.buckets.len() >= self.max_sources {
            self.forget_full_buckets(now_ns);
        }
        let rate = f64::from(self.rate_limit_pps);
        let burst = self.burst;
        let bucket = self.buckets.entry(source).or_insert(Bucket {
            tokens: burst,
            updated_ns: now_ns,
        });
        let elapsed_s = now_ns.saturating_sub(bucket.updated_ns).max(0) as f64 * 1e-9;
        bucket.tokens = (bucket.tokens + elapsed_s * rate).min(burst);
        bucket.updated_ns = now_ns;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Refusal::RateLimited)
        }
    }

    /// Frees the table: buckets that have refilled carry no state worth keeping; if
    /// none has, every bucket goes (each source then restarts with a full burst, so a
    /// flood of spoofed sources gains at most one burst per eviction).
    fn forget_full_buckets(&mut self, now_ns: i64) {
        let rate = f64::from(self.rate_limit_pps);
        let burst = self.burst;
        self.buckets.retain(|_, bucket| {
            let elapsed_s = now_ns.saturating_sub(bucket.updated_ns).max(0) as f64 * 1e-9;
            bucket.tokens + elapsed_s * rate < burst
        });
        if self.buckets.len() >= self.max_sources {
            self.buckets.clear();
        }
    }
}

fn is_unicast(address: IpAddr, broadcast_addresses: &[Ipv4Addr]) -> bool {
    match address.to_canonical() {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || broadcast_addresses.contains(&v4))
        }
        IpAddr::V6(v6) => !(v6.is_unspecified() || v6.is_multicast()),
    }
}

/// True when `request` carries a reflector reply's timestamp (bytes 4..12) and receive
/// timestamp (16..24), both within [`REFLECTED_WINDOW_NS`] of `now_ns`.
fn looks_reflected(request: &[u8], now_ns: i64) -> bool {
    let recent = |bytes: &[u8]| {
        let seconds = u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes"));
        let fraction = u32::from_be_bytes(bytes[4..8].try_into().expect("4 bytes"));
        seconds != 0
            && NtpTimestamp { seconds, fraction }
                .to_unix_nanos()
                .abs_diff(now_ns)
                <= REFLECTED_WINDOW_NS as u64
    };
    request.len() >= 24 && recent(&request[4..12]) && recent(&request[16..24])
}

/// The directed-broadcast addresses of this host's IPv4 interfaces, from each
/// address and netmask (the kernel's broadcast field also holds point-to-point peers).
pub(crate) fn interface_broadcast_addresses() -> Vec<Ipv4Addr> {
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    interfaces
        .filter_map(|interface| {
            let address = interface.address?.as_sockaddr_in()?.ip();
            let mask = interface.netmask?.as_sockaddr_in()?.ip();
            directed_broadcast(address, mask)
        })
        .collect()
}

/// The subnet's broadcast address; none for /31 and /32, which have none (RFC 3021).
fn directed_broadcast(address: Ipv4Addr, mask: Ipv4Addr) -> Option<Ipv4Addr> {
    let mask = u32::from(mask);
    (mask.count_ones() < 31).then(|| Ipv4Addr::from(u32::from(address) | !mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_NS: i64 = 1_800_000_000 * 1_000_000_000;

    fn peer(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    fn request(len: usize) -> Vec<u8> {
        vec![0u8; len]
    }

    #[test]
    fn refuses_privileged_reflector_and_own_source_ports() {
        let mut guard = ReflectorGuard::new(17_862, 0, 16);
        for port in [0, 7, 53, 123, 862, 1023, 7862, 17_862] {
            assert_eq!(
                guard.check(
                    &request(64),
                    SocketAddr::new([127, 0, 0, 2].into(), port),
                    None,
                    NOW_NS
                ),
                Err(Refusal::SourcePort),
                "port {port}"
            );
        }
        assert_eq!(
            guard.check(&request(64), peer("127.0.0.2:40000"), None, NOW_NS),
            Ok(())
        );
    }

    #[test]
    fn answers_only_allowed_networks_when_given_some() {
        let mut guard = ReflectorGuard::new(7862, 0, 16);
        assert_eq!(
            guard.check(&request(64), peer("192.0.2.1:40000"), None, NOW_NS),
            Ok(())
        );
        guard.allow_only(vec!["10.0.0.0/8".parse().unwrap()]);
        assert_eq!(
            guard.check(&request(64), peer("192.0.2.1:40000"), None, NOW_NS),
            Err(Refusal::NotAllowed)
        );
        assert_eq!(
            guard.check(&request(64), peer("10.9.8.7:40000"), None, NOW_NS),
            Ok(())
        );
        assert_eq!(
            guard.check(&request(64), peer("[::ffff:10.9.8.7]:40000"), None, NOW_NS),
            Ok(())
        );
    }

    #[test]
    fn refuses_non_unicast_sources_and_destinations() {
        let mut guard = ReflectorGuard::new(7862, 0, 16);
        guard.set_broadcast_addresses(vec![Ipv4Addr::new(10, 1, 255, 255)]);
        for source in [
            "0.0.0.0:40000",
            "224.0.0.1:40000",
            "255.255.255.255:40000",
            "[::ffff:224.0.0.9]:40000",
            "[ff02::1]:40000",
            "[::]:40000",
        ] {
            assert_eq!(
                guard.check(&request(64), peer(source), None, NOW_NS),
                Err(Refusal::NotUnicast),
                "{source}"
            );
        }
        for destination in [
            "255.255.255.255",
            "10.1.255.255",
            "239.1.2.3",
            "::ffff:10.1.255.255",
            "ff02::1",
        ] {
            let local: IpAddr = destination.parse().unwrap();
            assert_eq!(
                guard.check(&request(64), peer("10.1.0.7:40000"), Some(local), NOW_NS),
                Err(Refusal::NotUnicast),
                "{destination}"
            );
        }
        assert_eq!(
            guard.check(
                &request(64),
                peer("10.1.0.7:40000"),
                Some("10.1.0.1".parse().unwrap()),
                NOW_NS
            ),
            Ok(())
        );
    }

    #[test]
    fn never_answers_a_request_shorter_than_its_reply() {
        let mut guard = ReflectorGuard::new(7862, 0, 16);
        assert_eq!(
            guard.check(&request(40), peer("127.0.0.2:40000"), None, NOW_NS),
            Err(Refusal::ShorterThanReply)
        );
        assert_eq!(
            guard.check(&request(41), peer("127.0.0.2:40000"), None, NOW_NS),
            Ok(())
        );
    }

    #[test]
    fn recognises_another_reflectors_reply() {
        let mut guard = ReflectorGuard::new(7862, 0, 16);
        let ntp_bytes = |ns: i64| {
            let stamp = NtpTimestamp::from_unix_nanos(ns);
            let mut bytes = [0u8; 8];
            bytes[..4].copy_from_slice(&stamp.seconds.to_be_bytes());
            bytes[4..].copy_from_slice(&stamp.fraction.to_be_bytes());
            bytes
        };
        let stamp = ntp_bytes(NOW_NS - 1_000_000);
        let mut reply = request(41);
        reply[4..12].copy_from_slice(&stamp);
        reply[16..24].copy_from_slice(&stamp);
        assert_eq!(
            guard.check(&reply, peer("127.0.0.2:40000"), None, NOW_NS),
            Err(Refusal::Reflected)
        );
        // A sender's request (its own timestamp, padding after it), or a reply from
        // long ago, is a request.
        let mut padded = reply.clone();
        padded[16..24].fill(0);
        assert_eq!(
            guard.check(&padded, peer("127.0.0.2:40000"), None, NOW_NS),
            Ok(())
        );
        let old = ntp_bytes(NOW_NS - 3_600_000_000_000);
        reply[16..24].copy_from_slice(&old);
        assert_eq!(
            guard.check(&reply, peer("127.0.0.2:40000"), None, NOW_NS),
            Ok(())
        );
    }

    #[test]
    fn rate_limits_each_source_address_to_its_rate() {
        let mut guard = ReflectorGuard::new(7862, 1000, 16);
        let answered = |guard: &mut ReflectorGuard, source: &str, at_ns: i64| {
            guard.check(&request(64), peer(source), None, at_ns).is_ok()
        };
        // The burst (a tenth of a second at 1000/s) passes at once, then nothing.
        let burst = (0..500)
            .filter(|_| answered(&mut guard, "127.0.0.2:40000", NOW_NS))
            .count();
        assert_eq!(burst, 100);
        // Another source, and another port of the same address, are counted apart / together.
        assert!(answered(&mut guard, "127.0.0.3:40000", NOW_NS));
        assert!(!answered(&mut guard, "127.0.0.2:40001", NOW_NS));
        // One second later, one second of tokens (capped at the burst) is back.
        let later = (0..500)
            .filter(|_| answered(&mut guard, "127.0.0.2:40000", NOW_NS + 1_000_000_000))
            .count();
        assert_eq!(later, 100);
        // A steady 1000/s for 2 s is fully answered.
        let mut steady = 0;
        for i in 0..2000 {
            steady += usize::from(answered(
                &mut guard,
                "127.0.0.4:40000",
                NOW_NS + i * 1_000_000,
            ));
        }
        assert_eq!(steady, 2000);
    }

    #[test]
    fn directed_broadcast_comes_from_address_and_mask() {
        let at = |address: &str, mask: &str| {
            directed_broadcast(address.parse().unwrap(), mask.parse().unwrap())
        };
        assert_eq!(
            at("10.201.0.2", "255.255.255.0"),
            Some(Ipv4Addr::new(10, 201, 0, 255))
        );
        assert_eq!(
            at("192.0.2.130", "255.255.255.128"),
            Some(Ipv4Addr::new(192, 0, 2, 255))
        );
        assert_eq!(at("10.0.0.1", "255.255.255.254"), None);
        assert_eq!(at("10.0.0.1", "255.255.255.255"), None);
    }

    #[test]
    fn the_bucket_table_stays_bounded() {
        let mut guard = ReflectorGuard::new(7862, 1000, 64);
        for i in 0..10_000u32 {
            let source = SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), 40000);
            let _ = guard.check(&request(64), source, None, NOW_NS);
            assert!(guard.buckets.len() <= 64);
        }
    }
}
