//! STAMP (RFC 8762, unauthenticated mode; SSID and TLVs per RFC 8972) both ways on
//! loopback: vantage's sender against vantage's endpoint, vantage's sender against a
//! minimal STAMP Session-Reflector written here from the RFC text, and a hand-built
//! Session-Sender packet against vantage's endpoint, checked at the RFC offsets. The
//! independent side uses no code from `vantage_probe::twamp`, so a mistake shared by
//! our encoder and decoder cannot hide.

use crate::common;

use std::net::UdpSocket;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use common::{
    assert_all_ten_answered, be16, be32, endpoint_and_socket, ntp_now, probe_reflector,
    serve_requests, udp_spec, TestEndpoint,
};
use vantage_model::latency::{LatencyResult, LatencySpec, UdpMode};
use vantage_probe::latency::run_latency;

/// RFC 8762 §4.2.1 / §4.3.1: the unauthenticated base packet, both directions.
const BASE: usize = 44;

fn stamp_spec(addr: String, size_bytes: u32) -> LatencySpec {
    LatencySpec {
        target: addr,
        size_bytes,
        ..udp_spec(UdpMode::Stamp)
    }
}

fn assert_all_answered_with_ssid(result: &LatencyResult) {
    assert_all_ten_answered(result);
    let report = result.summary.reflector.as_ref().unwrap();
    assert_eq!(report.ssid_echoed, Some(true));
    assert_eq!(report.replies_without_ttl, 0);
    assert_eq!(
        (report.sender_ttl_min, report.sender_ttl_max),
        (Some(64), Some(64)),
        "the probes' TTL on loopback"
    );
}

#[test]
fn vantage_sender_against_vantage_reflector_in_stamp_mode() {
    let endpoint = TestEndpoint::start(Some("127.0.0.1".parse().unwrap()), |_| {});
    for size in [44, 48, 200] {
        let result =
            run_latency(&stamp_spec(endpoint.addr.to_string(), size), &mut |_| {}).unwrap();
        assert_eq!(result.spec.udp_mode, UdpMode::Stamp);
        assert_all_answered_with_ssid(&result);
    }
    let err = run_latency(&stamp_spec(endpoint.addr.to_string(), 46), &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("--size 46"), "{err}");
}

/// What the independent reflector saw of each request.
#[derive(Debug, Clone, PartialEq)]
struct SeenRequest {
    len: usize,
    ssid: u16,
    mbz_zero: bool,
    /// (flags, type, length) of each TLV after the base packet.
    tlvs: Vec<(u8, u8, u16)>,
}

/// A stateful STAMP Session-Reflector from RFC 8762 §4.3.1 (unauthenticated), with
/// RFC 8972 §3 (copy the SSID) and §4 (return every TLV; U flag on types it does not
/// know — it knows only Extra Padding, type 1). Replies are as long as the request.
fn independent_stamp_reflector(
    socket: UdpSocket,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<SeenRequest>>>,
) {
    serve_requests(
        socket,
        stop,
        BASE,
        |socket, peer, request, receive_ts, counter| {
            let len = request.len();
            let mut reply = vec![0u8; len];
            let mut tlvs = Vec::new();
            let mut at = BASE;
            while at + 4 <= len {
                let (flags, kind, length) =
                    (request[at], request[at + 1], be16(&request[at + 2..]));
                tlvs.push((flags, kind, length));
                let end = (at + 4 + usize::from(length)).min(len);
                reply[at..end].copy_from_slice(&request[at..end]);
                reply[at] = if kind == 1 { 0 } else { 0x80 };
                at = end;
            }
            seen.lock().unwrap().push(SeenRequest {
                len,
                ssid: be16(&request[14..]),
                mbz_zero: request[16..BASE].iter().all(|&b| b == 0),
                tlvs,
            });
            reply[0..4].copy_from_slice(&counter.to_be_bytes());
            reply[12..14].copy_from_slice(&0x0001u16.to_be_bytes()); // S=0, multiplier 1
            reply[14..16].copy_from_slice(&request[14..16]); // SSID
            reply[16..24].copy_from_slice(&receive_ts);
            reply[24..38].copy_from_slice(&request[0..14]); // sender seq, timestamp, error
            reply[40] = 64; // Ses-Sender TTL (a fixed plausible value; no IP_RECVTTL here)
            reply[4..12].copy_from_slice(&ntp_now());
            socket.send_to(&reply, peer).unwrap();
        },
    );
}

#[test]
fn vantage_sender_against_an_independent_stamp_reflector() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let result = {
        let seen = Arc::clone(&seen);
        probe_reflector(stamp_spec(String::new(), 64), move |socket, stop| {
            independent_stamp_reflector(socket, stop, seen)
        })
    };
    assert_all_answered_with_ssid(&result);

    // Our requests as the RFC text describes them: 44-byte base with an SSID and
    // zero MBZ, then one Extra Padding TLV (flags 0, type 1) filling the 64 bytes.
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 12, "10 probes and the two bracketing ones");
    let ssid = seen[0].ssid;
    assert_ne!(ssid, 0, "RFC 8972 §3: a non-zero SSID");
    for request in seen.iter() {
        assert_eq!(
            request,
            &SeenRequest {
                len: 64,
                ssid,
                mbz_zero: true,
                tlvs: vec![(0, 1, 64 - 48)],
            }
        );
    }
}

/// A Session-Sender packet built by hand (RFC 8762 §4.2.1 + RFC 8972 §3, §4.1) sent
/// to vantage's endpoint; the reply is checked field by field at §4.3.1's offsets.
#[test]
fn independent_stamp_sender_against_the_vantage_reflector() {
    let (_endpoint, socket) = endpoint_and_socket();
    let exchange = |request: &[u8]| {
        socket.send(request).unwrap();
        let mut reply = [0u8; 512];
        let len = socket.recv(&mut reply).unwrap();
        reply[..len].to_vec()
    };
    let mut request = vec![0u8; BASE];
    request[0..4].copy_from_slice(&7u32.to_be_bytes());
    let sent_timestamp = ntp_now();
    request[4..12].copy_from_slice(&sent_timestamp);
    request[12..14].copy_from_slice(&0x8001u16.to_be_bytes()); // S=1, multiplier 1
    request[14..16].copy_from_slice(&0x1234u16.to_be_bytes()); // SSID
                                                               // Extra Padding TLV with 4 value bytes, then an unassigned type (250) with 2.
    request.extend_from_slice(&[0, 1, 0, 4, 9, 9, 9, 9]);
    request.extend_from_slice(&[0, 250, 0, 2, 0xAB, 0xCD]);

    for expected_reflector_seq in 0..2u32 {
        let reply = exchange(&request);
        assert_eq!(reply.len(), request.len(), "symmetric size, RFC 8762 §4.3");
        assert_eq!(
            be32(&reply[0..]),
            expected_reflector_seq,
            "stateful counter"
        );
        assert_eq!(reply[12] & 0x40, 0, "Z bit: NTP format");
        assert_eq!(be16(&reply[14..]), 0x1234, "SSID copied, RFC 8972 §3");
        assert!(reply[4..12] >= reply[16..24], "sent after received");
        assert_eq!(be32(&reply[24..]), 7, "Session-Sender Sequence Number");
        assert_eq!(&reply[28..36], &sent_timestamp, "Session-Sender Timestamp");
        assert_eq!(
            &reply[36..38],
            &[0x80, 0x01],
            "Session-Sender Error Estimate"
        );
        assert_eq!(&reply[38..40], &[0, 0], "MBZ");
        assert_eq!(reply[40], 64, "Ses-Sender TTL as received on loopback");
        assert_eq!(&reply[41..44], &[0, 0, 0], "MBZ");
        assert_eq!(
            &reply[44..52],
            &[0, 1, 0, 4, 9, 9, 9, 9],
            "Extra Padding understood"
        );
        assert_eq!(
            &reply[52..58],
            &[0x80, 250, 0, 2, 0xAB, 0xCD],
            "unknown TLV returned with the U flag, RFC 8972 §4"
        );
    }

    // Another SSID from the same address and port is another session: its own
    // counter starts at 0.
    request[14..16].copy_from_slice(&0x4321u16.to_be_bytes());
    let reply = exchange(&request);
    assert_eq!((be32(&reply[0..]), be16(&reply[14..])), (0, 0x4321));

    // The plain 44-byte base packet, no TLVs.
    let reply = exchange(&request[..BASE]);
    assert_eq!(reply.len(), BASE);
    assert_eq!(be32(&reply[0..]), 1);
}
