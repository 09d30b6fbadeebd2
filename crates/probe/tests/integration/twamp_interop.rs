//! Interoperability at the byte level: the endpoint's replies checked field by field
//! at RFC 5357 §4.2.1 offsets against a hand-built request, and the sender engine
//! run against an independent minimal reflector written here from the RFC (not with
//! our codec), so a mistake shared by our encoder and decoder cannot hide.

use crate::common;

use std::net::UdpSocket;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use common::{
    assert_all_ten_answered, be32, endpoint_and_socket, ntp_now, probe_reflector, serve_requests,
    udp_spec,
};
use vantage_model::latency::UdpMode;

fn ntp_seconds(bytes: &[u8]) -> u64 {
    u64::from(be32(bytes))
}

#[test]
fn endpoint_reply_has_rfc5357_layout() {
    let (_endpoint, socket) = endpoint_and_socket();
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

/// How [`independent_reflector`] lays out its replies.
#[derive(Clone, Copy)]
enum Layout {
    /// RFC 5357 §4.2.1 in full, as long as the request (at least 41 bytes), Sender
    /// TTL 255.
    Full,
    /// The layout some widely used open-source TWAMP-Light responders use: §4.2.1's
    /// fields up to and including the Sender Error Estimate (38 bytes), then
    /// `padding` zero bytes of their own — no second MBZ, no Sender TTL.
    Short { padding: usize },
}

/// A stateful TWAMP-Light reflector from RFC 5357 §4.2.1 (its own counter from 0),
/// user-space stamps, written independently of `vantage_probe::twamp`.
fn independent_reflector(
    socket: UdpSocket,
    stop: Arc<AtomicBool>,
    layout: Layout,
    garbage_per_reply: usize,
) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    serve_requests(
        socket,
        stop,
        14,
        |socket, peer, request, receive_ts, counter| {
            let mut reply = vec![
                0u8;
                match layout {
                    Layout::Full => request.len().max(41),
                    Layout::Short { padding } => 38 + padding,
                }
            ];
            reply[0..4].copy_from_slice(&counter.to_be_bytes());
            reply[12..14].copy_from_slice(&0x0001u16.to_be_bytes()); // unsynchronised
            reply[16..24].copy_from_slice(&receive_ts);
            reply[24..28].copy_from_slice(&request[0..4]);
            reply[28..36].copy_from_slice(&request[4..12]);
            reply[36..38].copy_from_slice(&request[12..14]);
            if let Layout::Full = layout {
                reply[40] = 255;
            }
            reply[4..12].copy_from_slice(&ntp_now());
            // A hostile or broken reflector: random datagrams before the real reply.
            for _ in 0..garbage_per_reply {
                let garbage: Vec<u8> = (0..rng.gen_range(0..120)).map(|_| rng.gen()).collect();
                socket.send_to(&garbage, peer).unwrap();
            }
            socket.send_to(&reply, peer).unwrap();
        },
    );
}

/// Runs 10 probes in `mode` against [`independent_reflector`].
fn probe_independent_reflector(
    mode: UdpMode,
    layout: Layout,
    garbage_per_reply: usize,
) -> vantage_model::latency::LatencyResult {
    probe_reflector(udp_spec(mode), move |socket, stop| {
        independent_reflector(socket, stop, layout, garbage_per_reply)
    })
}

#[test]
fn garbage_between_replies_is_ignored_by_the_sender() {
    let s = probe_independent_reflector(UdpMode::TwampLight, Layout::Full, 5).summary;
    assert_eq!((s.sent, s.received, s.duplicates), (10, 10, 0));
}

#[test]
fn sender_works_against_an_independent_reflector() {
    let result = probe_independent_reflector(UdpMode::TwampLight, Layout::Full, 0);
    assert_all_ten_answered(&result);
    let one_way = result.summary.one_way.as_ref().unwrap();
    assert!(!one_way.remote_clock.synchronized && one_way.forward_delay_us.is_none());
    assert_eq!(one_way.remote_clock.source, "twamp_error_estimate");
}

#[test]
fn short_38_byte_replies_are_measured_and_the_missing_ttl_is_reported() {
    // 38 bytes exactly, and 38 plus 8 bytes of zero padding (the TTL byte is then 0).
    for (padding, short) in [(0usize, 10u64), (8, 0)] {
        let result = probe_independent_reflector(UdpMode::TwampLight, Layout::Short { padding }, 0);
        assert_all_ten_answered(&result);
        let report = result.summary.reflector.as_ref().unwrap();
        assert_eq!(report.replies_without_ttl, 10, "padding {padding}");
        assert_eq!(report.short_replies, short, "padding {padding}");
        assert_eq!((report.sender_ttl_min, report.sender_ttl_max), (None, None));
        assert_eq!(report.ssid_echoed, None, "TWAMP-Light mode sends no SSID");
        let json = serde_json::to_value(&result).unwrap();
        assert_eq!(json["summary"]["reflector"]["replies_without_ttl"], 10);
    }
}

#[test]
fn full_layout_reflector_returns_the_ttl() {
    let report = probe_independent_reflector(UdpMode::TwampLight, Layout::Full, 0)
        .summary
        .reflector
        .unwrap();
    assert_eq!(report.replies_without_ttl, 0);
    assert_eq!(
        (report.sender_ttl_min, report.sender_ttl_max),
        (Some(255), Some(255))
    );
}

/// RFC 8762 §4.6: a STAMP Session-Sender's packets are answered by a TWAMP-Light
/// reflector; the RTT is measured and the report says the SSID did not come back.
#[test]
fn stamp_sender_works_against_a_twamp_light_reflector() {
    let result = probe_independent_reflector(UdpMode::Stamp, Layout::Full, 0);
    let s = &result.summary;
    assert_eq!((s.sent, s.received), (10, 10));
    assert_eq!(s.reflector.as_ref().unwrap().ssid_echoed, Some(false));
}
