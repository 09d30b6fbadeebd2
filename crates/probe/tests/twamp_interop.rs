//! Interoperability at the byte level: the endpoint's replies checked field by field
//! at RFC 5357 §4.2.1 offsets against a hand-built request, and the sender engine
//! run against an independent minimal reflector written here from the RFC (not with
//! our codec), so a mistake shared by our encoder and decoder cannot hide.

mod common;

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{spec, TestEndpoint};
use vantage_model::latency::LatencyProtocol;
use vantage_probe::latency::run_latency;

/// Seconds from 1900-01-01 to 1970-01-01 (RFC 868 / NTP).
const NTP_UNIX_OFFSET_S: u64 = 2_208_988_800;

fn ntp_now() -> [u8; 8] {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let seconds = (now.as_secs() + NTP_UNIX_OFFSET_S) as u32;
    let fraction = ((u64::from(now.subsec_nanos()) << 32) / 1_000_000_000) as u32;
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&seconds.to_be_bytes());
    out[4..].copy_from_slice(&fraction.to_be_bytes());
    out
}

fn ntp_seconds(bytes: &[u8]) -> u64 {
    u64::from(u32::from_be_bytes(bytes[..4].try_into().unwrap()))
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().unwrap())
}

#[test]
fn endpoint_reply_has_rfc5357_layout() {
    let endpoint = TestEndpoint::start(Some("127.0.0.1".parse().unwrap()), |_| {});
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(endpoint.addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    for expected_reflector_seq in 0..2u32 {
        // Sender packet, RFC 5357 §4.1.2: seq, timestamp, error estimate, padding.
        let mut request = vec![0xabu8; 64];
        request[0..4].copy_from_slice(&0x0102_0304u32.to_be_bytes());
        let sent_timestamp = ntp_now();
        request[4..12].copy_from_slice(&sent_timestamp);
        request[12..14].copy_from_slice(&0x8001u16.to_be_bytes()); // S=1, multiplier 1
        socket.send(&request).unwrap();

        let mut reply = [0u8; 256];
        let len = socket.recv(&mut reply).unwrap();
        let now_ntp_s = ntp_seconds(&ntp_now());
        assert_eq!(len, 64, "reply as long as the request");
        assert_eq!(
            be32(&reply[0..]),
            expected_reflector_seq,
            "reflector's own counter"
        );
        let (send_ts, receive_ts) = (&reply[4..12], &reply[16..24]);
        assert!(
            ntp_seconds(receive_ts).abs_diff(now_ntp_s) <= 2,
            "receive timestamp is now"
        );
        assert!(
            send_ts >= receive_ts,
            "sent after received (big-endian compare = time order)"
        );
        assert_eq!(reply[12] & 0x40, 0, "Z bit: NTP format");
        assert_eq!(&reply[14..16], &[0, 0], "MBZ");
        assert_eq!(be32(&reply[24..]), 0x0102_0304, "sender sequence number");
        assert_eq!(&reply[28..36], &sent_timestamp, "sender timestamp");
        assert_eq!(&reply[36..38], &[0x80, 0x01], "sender error estimate");
        assert_eq!(&reply[38..40], &[0, 0], "MBZ");
        assert_eq!(
            reply[40], 64,
            "sender TTL: the request's TTL as received on loopback"
        );
        assert!(
            reply[41..64].iter().all(|&b| b == 0xab),
            "padding from the request"
        );
    }
}

/// A stateful TWAMP-Light reflector from RFC 5357 §4.2.1, user-space stamps, written
/// independently of `vantage_probe::twamp`.
fn independent_reflector(socket: UdpSocket, stop: Arc<AtomicBool>, garbage_per_reply: usize) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    socket
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut counter = 0u32;
    let mut buf = [0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let Ok((len, peer)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let receive_ts = ntp_now();
        if len < 14 {
            continue;
        }
        let request = buf[..len].to_vec();
        let mut reply = vec![0u8; len.max(41)];
        reply[0..4].copy_from_slice(&counter.to_be_bytes());
        reply[12..14].copy_from_slice(&0x0001u16.to_be_bytes()); // unsynchronised
        reply[16..24].copy_from_slice(&receive_ts);
        reply[24..28].copy_from_slice(&request[0..4]);
        reply[28..36].copy_from_slice(&request[4..12]);
        reply[36..38].copy_from_slice(&request[12..14]);
        reply[40] = 255;
        reply[4..12].copy_from_slice(&ntp_now());
        counter += 1;
        // A hostile or broken reflector: random datagrams before the real reply.
        for _ in 0..garbage_per_reply {
            let garbage: Vec<u8> = (0..rng.gen_range(0..120)).map(|_| rng.gen()).collect();
            socket.send_to(&garbage, peer).unwrap();
        }
        socket.send_to(&reply, peer).unwrap();
    }
}

/// Runs 10 UDP probes against [`independent_reflector`].
fn probe_independent_reflector(garbage_per_reply: usize) -> vantage_model::latency::LatencyResult {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reflector = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || independent_reflector(socket, stop, garbage_per_reply))
    };
    let result = run_latency(
        &spec(addr.to_string(), LatencyProtocol::Udp, 10),
        &mut |_| {},
    );
    stop.store(true, Ordering::Relaxed);
    reflector.join().unwrap();
    result.unwrap()
}

#[test]
fn garbage_between_replies_is_ignored_by_the_sender() {
    let s = probe_independent_reflector(5).summary;
    assert_eq!((s.sent, s.received, s.duplicates), (10, 10, 0));
}

#[test]
fn sender_works_against_an_independent_reflector() {
    let result = probe_independent_reflector(0);
    let s = &result.summary;
    assert_eq!(
        (s.sent, s.received, s.forward_lost, s.reverse_lost),
        (10, 10, 0, 0)
    );
    let reflector_seqs: Vec<u32> = result
        .samples
        .iter()
        .map(|p| p.reflector_seq.unwrap())
        .collect();
    assert_eq!(reflector_seqs, (1..=10).collect::<Vec<u32>>());
    let one_way = s.one_way.as_ref().unwrap();
    assert!(!one_way.remote_clock.synchronized && one_way.forward_delay_us.is_none());
    assert_eq!(one_way.remote_clock.source, "twamp_error_estimate");
    assert!(s.rtt_us.unwrap().min > 0.0);
}
