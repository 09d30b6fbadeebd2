//! TWAMP-Light and STAMP test packets (RFC 5357, RFC 8762, RFC 8972) as the latency
//! client and the reflector read them. Any bytes either parse or are refused by their
//! length; what parses re-encodes to the same bytes; a reflection has the length
//! `reply_len` gives, parses as a reply, and carries the request's sequence number,
//! timestamp and SSID back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vantage_fuzz::reflector_stamp;
use vantage_probe::twamp;

/// 2023-11-14T22:13:20Z: any fixed time; the reflection must not depend on it.
const RECEIVE_NS: i64 = 1_700_000_000_000_000_000;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(request) = twamp::parse_sender(bytes) {
        let mut encoded = bytes.to_vec();
        let len = twamp::encode_sender(&request, &mut encoded).expect("a parsed request encodes");
        assert_eq!(encoded[..len], bytes[..], "request header round trip");
    }
    // Replies of 38..=40 bytes parse (old reflectors omit the TTL) but are never sent.
    if let (Ok(reply), true) = (
        twamp::parse_reflector(bytes),
        bytes.len() >= twamp::REFLECTOR_HEADER_LEN,
    ) {
        let mut encoded = bytes.to_vec();
        let len = twamp::encode_reflector(&reply, &mut encoded).expect("a parsed reply encodes");
        assert_eq!(len, bytes.len());
        // Bytes 38..40 are MBZ and written as zeros; everything else round-trips.
        assert_eq!(encoded[..38], bytes[..38], "reply header round trip");
        assert_eq!(encoded[40..], bytes[40..], "reply header round trip");
    }

    let stamp = reflector_stamp(7, RECEIVE_NS, 20_000);
    let mut reply = vec![0u8; twamp::reply_len(bytes.len())];
    match (
        twamp::reflect(bytes, &stamp, &mut reply),
        twamp::parse_sender(bytes),
    ) {
        (Ok(len), Ok(request)) => {
            assert_eq!(len, reply.len());
            let parsed = twamp::parse_reflector(&reply).expect("a reflection parses as a reply");
            assert_eq!(parsed.seq, stamp.seq);
            assert_eq!(parsed.sender_seq, request.seq);
            assert_eq!(parsed.sender_timestamp, request.timestamp);
            assert_eq!(parsed.sender_error_estimate, request.error_estimate);
            assert_eq!(parsed.sender_ttl, Some(stamp.request_ttl));
            assert_eq!(parsed.ssid, twamp::stamp_request(bytes).unwrap_or(0));
        }
        (Err(_), Err(_)) => {}
        (reflected, parsed) => {
            panic!("reflect ({reflected:?}) and parse_sender ({parsed:?}) disagree")
        }
    }
});
