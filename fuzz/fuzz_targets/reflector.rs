//! The reflector's guard against loops, amplification and floods, on requests from any
//! address and port. Whatever the guard lets through is answered with a reply no
//! longer than the request (no amplification), and that reply, should it be aimed
//! at another vantage reflector, is refused there as a reflection (no loop).
//!
//! Input: 2 bytes source port, 1 byte choosing the source and destination addresses,
//! 1 byte of milliseconds since the previous request, then the request.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;
use vantage_fuzz::reflector_stamp;
use vantage_probe::endpoint::reflector_guard::{ReflectorGuard, Refusal};
use vantage_probe::endpoint::DEFAULT_PORT;
use vantage_probe::twamp;

const START_NS: i64 = 1_700_000_000_000_000_000;
const RATE_LIMIT_PPS: u32 = 100;
const MAX_SOURCES: usize = 64;

const SOURCES: [IpAddr; 8] = [
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)),
    IpAddr::V4(Ipv4Addr::new(0, 0, 0, 0)),
    IpAddr::V4(Ipv4Addr::new(255, 255, 255, 255)),
    IpAddr::V4(Ipv4Addr::new(224, 0, 0, 1)),
    IpAddr::V6(Ipv6Addr::LOCALHOST),
    IpAddr::V6(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1)),
    IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0001)),
];
const DESTINATIONS: [Option<IpAddr>; 4] = [
    None,
    Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))),
    Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 255))),
    Some(IpAddr::V4(Ipv4Addr::new(255, 255, 255, 255))),
];

/// One guard for the whole run, so its per-source buckets see sequences of requests.
struct State {
    guard: ReflectorGuard,
    now_ns: i64,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fuzz_target!(|bytes: &[u8]| {
    let [port_high, port_low, addresses, gap_ms, request @ ..] = bytes else {
        return;
    };
    let source = SOURCES[usize::from(addresses & 0x07)];
    let destination = DESTINATIONS[usize::from(addresses >> 3 & 0x03)];
    let peer = SocketAddr::new(source, u16::from_be_bytes([*port_high, *port_low]));

    let mut state = STATE.lock().unwrap();
    let state = state.get_or_insert_with(|| {
        let mut guard = ReflectorGuard::new(DEFAULT_PORT, RATE_LIMIT_PPS, MAX_SOURCES);
        guard.set_broadcast_addresses(vec![Ipv4Addr::new(10, 0, 0, 255)]);
        State {
            guard,
            now_ns: START_NS,
        }
    });
    state.now_ns += i64::from(*gap_ms) * 1_000_000;
    let now_ns = state.now_ns;

    match state.guard.check(request, peer, destination, now_ns) {
        Ok(()) => {
            assert!(peer.port() >= 1024 && peer.port() != DEFAULT_PORT && peer.port() != 862);
            let Ok(_) = twamp::parse_sender(request) else {
                // The reflector parses before it asks the guard; nothing to answer.
                return;
            };
            let stamp = reflector_stamp(1, now_ns, 10_000);
            let mut reply = vec![0u8; twamp::reply_len(request.len())];
            let len =
                twamp::reflect(request, &stamp, &mut reply).expect("an admitted request reflects");
            assert!(
                len <= request.len(),
                "a {}-byte request got a {len}-byte reply",
                request.len()
            );

            // The reply, sent on to a second reflector, must end there.
            let mut other = ReflectorGuard::new(DEFAULT_PORT, 0, MAX_SOURCES);
            let from_first = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)), 40_000);
            assert_eq!(
                other.check(&reply[..len], from_first, None, now_ns + 50_000),
                Err(Refusal::Reflected),
                "a reply was accepted as a request"
            );
        }
        Err(Refusal::ShorterThanReply) => assert!(request.len() < twamp::REFLECTOR_HEADER_LEN),
        Err(_) => {}
    }
});
