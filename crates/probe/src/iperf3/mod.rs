//! The iperf3 wire protocol, written from iperf3's documentation and a reading of its
//! source (esnet/iperf, 3.x), both ways: [`client`] talks to a stock `iperf3 -s`,
//! [`server`] lets a stock `iperf3 -c` test against the vantage endpoint.
//!
//! The protocol as implemented here:
//! - The client opens a **control** TCP connection and sends a 37-byte **cookie**
//!   (36 random characters from `a-z2-7` and a NUL). Every later message on it is a
//!   one-byte **state** from the server (client: `TEST_END`, `IPERF_DONE`), or a JSON
//!   object prefixed by its length (u32 big-endian).
//! - Server: `PARAM_EXCHANGE` → client sends its parameters (`tcp`/`udp`, `time`,
//!   `num` (bytes, `-n`) and `blockcount` (`-k`) with `time` 0 for a count test,
//!   `parallel`, `reverse` or `bidirectional`, `len` (block size), `bandwidth` per
//!   stream, `window`, `omit`, `client_version`, …). Options are marked by the key's
//!   presence.
//! - Server: `CREATE_STREAMS` → the client opens the data streams: TCP connections to
//!   the same port that begin with the cookie; or UDP sockets that send a 4-byte
//!   "connect" datagram to the port and wait for the 4-byte reply (the server then
//!   talks to that client address from a socket connected to it). With
//!   `bidirectional` the client opens `parallel` sending streams, then as many
//!   receiving ones: the server receives on the first half and sends on the rest.
//! - Server: `TEST_START`, `TEST_RUNNING`; data flows (client → server, or the
//!   reverse with `-R`). UDP datagrams carry seconds, microseconds and a packet
//!   number (u32, or u64 with `udp_counters_64bit`), big-endian.
//! - The client sends `TEST_END` when its time is up or its count was sent or
//!   received; server: `EXCHANGE_RESULTS`; the client sends its results JSON (per
//!   stream: id, bytes it sent or received, …), the server its own; server:
//!   `DISPLAY_RESULTS`; client: `IPERF_DONE`.
//! - A busy server answers a new control connection's cookie with `ACCESS_DENIED`;
//!   an error is `SERVER_ERROR` followed by iperf3's error number and errno (i32 BE);
//!   the client prints its own message for the number ([`errors`]).
//! - Stream ids run 1, 3, 4, 5, … (iperf3 numbers the second stream 3); results are
//!   matched by id.

pub mod client;
pub mod server;

use std::io::{self, Read, Write};

use serde_json::{json, Value};

use crate::throughput::run::LocalRun;

pub const IPERF3_DEFAULT_PORT: u16 = 5201;
pub const COOKIE_BYTES: usize = 37;
const COOKIE_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567";
/// Largest JSON message accepted (results may carry the server's text output).
pub const MAX_JSON_BYTES: u32 = 8 * 1024 * 1024;

/// Control states (one signed byte on the wire).
pub mod state {
    pub const TEST_START: u8 = 1;
    pub const TEST_RUNNING: u8 = 2;
    pub const TEST_END: u8 = 4;
    pub const PARAM_EXCHANGE: u8 = 9;
    pub const CREATE_STREAMS: u8 = 10;
    pub const SERVER_TERMINATE: u8 = 11;
    pub const CLIENT_TERMINATE: u8 = 12;
    pub const EXCHANGE_RESULTS: u8 = 13;
    pub const DISPLAY_RESULTS: u8 = 14;
    pub const IPERF_DONE: u8 = 16;
    /// -1 as a signed byte.
    pub const ACCESS_DENIED: u8 = 0xff;
    /// -2 as a signed byte.
    pub const SERVER_ERROR: u8 = 0xfe;
}

/// iperf3 error numbers (`i_errno`) the endpoint sends with `SERVER_ERROR`. The client
/// prints its own text for the number; the texts quoted are iperf3 3.12's (Debian's).
/// Numbers are stable across iperf3 versions; newer ones add to the end of each range.
pub mod errors {
    /// "test duration too long (maximum = 86400 seconds)"; iperf3's compile-time
    /// maximum, not the endpoint's, so the endpoint's log says which limit it was.
    pub const DURATION: i32 = 5;
    /// "number of parallel streams too large (maximum = 128)".
    pub const NUM_STREAMS: i32 = 6;
    /// "block size too large (maximum = 1048576 bytes)".
    pub const BLOCK_SIZE: i32 = 7;
    /// "an option you are trying to set is not implemented yet".
    pub const UNIMPLEMENTED: i32 = 13;
    /// "only one test end condition (-t, -n, -k) may be specified".
    pub const END_CONDITIONS: i32 = 16;
    /// "no SCTP support available".
    pub const NO_SCTP: i32 = 18;
    /// "block size invalid (minimum = 16 bytes, maximum = 65507 bytes)".
    pub const UDP_BLOCK_SIZE: i32 = 20;
    /// "cannot be both reverse and bidirectional".
    pub const REVERSE_BIDIR: i32 = 25;
    /// "test authorization failed" (a client that presented no ticket to an agent).
    pub const AUTH_TEST: i32 = 142;
    /// "total required bandwidth is larger than server limit".
    pub const TOTAL_RATE: i32 = 27;
    /// "client's requested duration exceeds the server's maximum permitted limit"
    /// (iperf3 3.20 and later; older clients print only the number).
    pub const MAX_SERVER_DURATION: i32 = 37;
    /// "unable to receive parameters from client".
    pub const RECV_PARAMS: i32 = 114;
    /// "server test duration expired" (iperf3 3.21 and later).
    pub const SERVER_DURATION_EXPIRED: i32 = 160;

    /// iperf3's text for the numbers above, for vantage's own iperf3 client.
    pub fn message(errno: i32) -> Option<&'static str> {
        Some(match errno {
            DURATION => "test duration too long",
            NUM_STREAMS => "number of parallel streams too large",
            BLOCK_SIZE => "block size too large",
            UNIMPLEMENTED => "an option you are trying to set is not implemented yet",
            END_CONDITIONS => "only one test end condition (-t, -n, -k) may be specified",
            NO_SCTP => "no SCTP support available",
            UDP_BLOCK_SIZE => "block size invalid",
            REVERSE_BIDIR => "cannot be both reverse and bidirectional",
            TOTAL_RATE => "total required bandwidth is larger than server limit",
            AUTH_TEST => "test authorization failed",
            MAX_SERVER_DURATION => {
                "client's requested duration exceeds the server's maximum permitted limit"
            }
            RECV_PARAMS => "unable to receive parameters from client",
            SERVER_DURATION_EXPIRED => "server test duration expired",
            _ => return None,
        })
    }
}

/// The `client_version` an iperf3 client sends with its parameters (since 3.0.7), as
/// (major, minor); which error numbers its message table knows depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ClientVersion(pub u32, pub u32);

impl ClientVersion {
    /// Parses "3.12", "3.21+", "3.13-mt-beta3"; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor_text = parts.next()?;
        let digits = minor_text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(minor_text.len());
        Some(Self(major, minor_text[..digits].parse().ok()?))
    }

    /// The version a client's parameter object names, if it names one we can read.
    pub fn of_params(params: &Value) -> Option<Self> {
        params
            .get("client_version")
            .and_then(Value::as_str)
            .and_then(Self::parse)
    }

    /// The number to send for "the test is longer than the endpoint allows": iperf3
    /// 3.20 added a message for exactly that; older clients get "test duration too
    /// long".
    pub fn duration_refusal(client: Option<Self>) -> i32 {
        if client >= Some(Self(3, 20)) {
            errors::MAX_SERVER_DURATION
        } else {
            errors::DURATION
        }
    }

    /// The number to send when a running test reaches the endpoint's time bound
    /// (3.21 added "server test duration expired").
    pub fn expiry(client: Option<Self>) -> i32 {
        if client >= Some(Self(3, 21)) {
            errors::SERVER_DURATION_EXPIRED
        } else {
            errors::DURATION
        }
    }
}

/// iperf3's UDP connect message and reply, as the bytes a little-endian host writes
/// ("9876" / "6789"), and the legacy numeric values older versions used.
pub const UDP_CONNECT_MSG: [u8; 4] = *b"9876";
pub const UDP_CONNECT_REPLY: [u8; 4] = *b"6789";
pub const LEGACY_UDP_CONNECT_MSG: [u8; 4] = 123_456_789u32.to_le_bytes();
pub const LEGACY_UDP_CONNECT_REPLY: [u8; 4] = 987_654_321u32.to_le_bytes();

/// A fresh random cookie.
pub fn make_cookie() -> [u8; COOKIE_BYTES] {
    let mut cookie = [0u8; COOKIE_BYTES];
    for byte in cookie.iter_mut().take(COOKIE_BYTES - 1) {
        *byte = COOKIE_ALPHABET[rand::random::<usize>() % COOKIE_ALPHABET.len()];
    }
    cookie
}

/// iperf3's id of the `index`-th stream (from 0): 1, 3, 4, 5, …
pub fn stream_id(index: usize) -> u32 {
    if index == 0 {
        1
    } else {
        index as u32 + 2
    }
}

pub fn write_json(stream: &mut impl Write, value: &Value) -> io::Result<()> {
    let body = serde_json::to_vec(value).map_err(io::Error::other)?;
    let mut framed = Vec::with_capacity(body.len() + 4);
    framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
    framed.extend_from_slice(&body);
    stream.write_all(&framed)
}

pub fn read_json(stream: &mut impl Read) -> io::Result<Value> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header)?;
    let len = u32::from_be_bytes(header);
    if len > MAX_JSON_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("iperf3 JSON of {len} bytes exceeds {MAX_JSON_BYTES}"),
        ));
    }
    // Memory grows with the bytes that arrive, not with the length a peer announces.
    let mut body = Vec::new();
    stream.take(u64::from(len)).read_to_end(&mut body)?;
    if body.len() != len as usize {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    serde_json::from_slice(&body)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad iperf3 JSON: {e}")))
}

pub fn read_state(stream: &mut impl Read) -> io::Result<u8> {
    let mut byte = [0u8; 1];
    stream.read_exact(&mut byte)?;
    Ok(byte[0])
}

/// Our side's results object for the results exchange. Each stream reports what it
/// did: bytes sent by a sending stream, bytes received by a receiving one (both kinds
/// in one test with `--bidir`).
pub fn results_json(run: &LocalRun, udp: bool) -> Value {
    let sending_tcp = !udp && run.streams.iter().any(|s| s.sending);
    let cpu_s: f64 = run.streams.iter().map(|s| s.cpu.cpu_s).sum();
    let cpu_percent = if run.wall_s > 0.0 {
        cpu_s / run.wall_s * 100.0
    } else {
        0.0
    };
    let streams: Vec<Value> = run
        .streams
        .iter()
        .map(|stream| {
            let last_info = run
                .intervals
                .last()
                .and_then(|i| i.streams.iter().find(|s| s.id == stream.id))
                .and_then(|s| s.tcp_info);
            let retransmits = match (stream.sending && !udp, last_info) {
                (true, Some(info)) => i64::from(info.total_retrans),
                _ => -1,
            };
            let (jitter_s, errors, packets) = match &stream.udp_received {
                Some(received) => {
                    let jitters: Vec<f64> = received
                        .intervals
                        .iter()
                        .filter_map(|i| i.jitter_us)
                        .collect();
                    let jitter_us = if jitters.is_empty() {
                        0.0
                    } else {
                        jitters.iter().sum::<f64>() / jitters.len() as f64
                    };
                    (
                        jitter_us / 1e6,
                        received
                            .highest_seen
                            .saturating_sub(received.received_packets),
                        received.highest_seen,
                    )
                }
                None => (0.0, 0, stream.packets_sent),
            };
            json!({
                "id": stream.id,
                "bytes": stream.bytes,
                "retransmits": retransmits,
                "jitter": jitter_s,
                "errors": errors,
                "omitted_errors": 0,
                "packets": packets,
                "omitted_packets": 0,
                "start_time": 0,
                "end_time": if stream.active_s > 0.0 { stream.active_s } else { run.wall_s },
            })
        })
        .collect();
    json!({
        "cpu_util_total": cpu_percent,
        "cpu_util_user": cpu_percent,
        "cpu_util_system": 0.0,
        "sender_has_retransmits": if sending_tcp { 1 } else { -1 },
        "streams": streams,
    })
}

/// Longest stream time a peer's results may claim (a day; tests are bounded far below).
const MAX_RESULT_SECONDS: f64 = 86_400.0;
/// Largest `cpu_util_total` believed (100 % of each of 1 024 cores).
const MAX_CPU_PERCENT: f64 = 102_400.0;

/// The peer's side as a [`LocalRun`] with totals only (no interval samples), from its
/// results object. iperf3's `cpu_util_total` (percent of one core, one thread) is
/// carried as the CPU of its single measuring thread.
pub fn run_from_results(results: &Value, peer_sends: bool, udp: bool) -> io::Result<LocalRun> {
    use crate::cpu::ThreadCpuUse;
    use crate::throughput::run::{StreamOutcome, UdpReceived};
    let bad = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("iperf3 results lack {what}"),
        )
    };
    let streams_json = results
        .get("streams")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("streams"))?;
    // A figure outside what any host can report is the peer's error: CPU unknown.
    let cpu_percent = results
        .get("cpu_util_total")
        .and_then(Value::as_f64)
        .filter(|percent| (0.0..=MAX_CPU_PERCENT).contains(percent))
        .unwrap_or(0.0);
    let has_retransmits = results
        .get("sender_has_retransmits")
        .and_then(Value::as_i64)
        == Some(1);
    let mut wall_s: f64 = 0.0;
    let mut streams = Vec::new();
    for (index, stream) in streams_json.iter().enumerate() {
        let number = |key: &str| {
            stream
                .get(key)
                .and_then(Value::as_f64)
                .ok_or_else(|| bad(key))
        };
        let id = number("id")? as u32;
        let bytes = number("bytes")? as u64;
        let end_s = stream
            .get("end_time")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        if !(0.0..=MAX_RESULT_SECONDS).contains(&end_s) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("iperf3 results: stream {index} ends at {end_s} s, outside 0..={MAX_RESULT_SECONDS} s"),
            ));
        }
        wall_s = wall_s.max(end_s);
        let packets = stream.get("packets").and_then(Value::as_u64).unwrap_or(0);
        let errors = stream.get("errors").and_then(Value::as_u64).unwrap_or(0);
        let retransmits = stream
            .get("retransmits")
            .and_then(Value::as_i64)
            .filter(|&r| r >= 0 && has_retransmits);
        let udp_received = (udp && !peer_sends).then(|| UdpReceived {
            received_packets: packets.saturating_sub(errors),
            duplicate_packets: 0,
            reordered_packets: 0,
            highest_seen: packets,
            intervals: Vec::new(),
        });
        streams.push(StreamOutcome {
            id,
            sending: peer_sends,
            bytes,
            active_s: end_s,
            packets_sent: if peer_sends { packets } else { 0 },
            packets_skipped: 0,
            udp_received,
            cpu: if index == 0 {
                ThreadCpuUse {
                    wall_s: end_s,
                    cpu_s: cpu_percent / 100.0 * end_s,
                    runqueue_wait_s: None,
                }
            } else {
                ThreadCpuUse::default()
            },
            error: None,
            reported_retransmits: retransmits.map(|r| r as u64),
        });
    }
    Ok(LocalRun {
        wall_s,
        intervals: Vec::new(),
        streams,
        online_cores: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_is_36_base32_characters_and_a_nul() {
        let cookie = make_cookie();
        assert_eq!(cookie[36], 0);
        assert!(cookie[..36].iter().all(|c| COOKIE_ALPHABET.contains(c)));
        assert_ne!(make_cookie(), cookie);
    }

    #[test]
    fn client_versions_choose_the_duration_message() {
        assert_eq!(ClientVersion::parse("3.12"), Some(ClientVersion(3, 12)));
        assert_eq!(ClientVersion::parse("3.21+"), Some(ClientVersion(3, 21)));
        assert_eq!(
            ClientVersion::parse("3.13-mt-beta3"),
            Some(ClientVersion(3, 13))
        );
        assert_eq!(ClientVersion::parse("iperf"), None);
        let v = |text| ClientVersion::parse(text);
        assert_eq!(ClientVersion::duration_refusal(None), errors::DURATION);
        assert_eq!(ClientVersion::duration_refusal(v("3.19")), errors::DURATION);
        assert_eq!(
            ClientVersion::duration_refusal(v("3.20")),
            errors::MAX_SERVER_DURATION
        );
        assert_eq!(ClientVersion::expiry(v("3.20")), errors::DURATION);
        assert_eq!(
            ClientVersion::expiry(v("3.21")),
            errors::SERVER_DURATION_EXPIRED
        );
    }

    #[test]
    fn stream_ids_follow_iperf3() {
        assert_eq!((0..4).map(stream_id).collect::<Vec<_>>(), vec![1, 3, 4, 5]);
    }

    #[test]
    fn results_without_streams_are_an_error() {
        let err = run_from_results(&json!({"cpu_util_total": 1.0}), true, false).unwrap_err();
        assert!(err.to_string().contains("streams"));
        let ok = run_from_results(
            &json!({"cpu_util_total": 50.0, "sender_has_retransmits": 1, "streams": [
                {"id": 1, "bytes": 1000, "retransmits": 3, "jitter": 0, "errors": 0, "packets": 0, "end_time": 2.0}]}),
            true,
            false,
        )
        .unwrap();
        assert_eq!(ok.streams[0].reported_retransmits, Some(3));
        assert!((ok.max_thread_cpu_ratio() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn results_beyond_what_a_host_can_report_are_refused_or_ignored() {
        let stream = |end_time: f64| json!({"id": 1, "bytes": 1000, "end_time": end_time});
        for end_time in [-1.0, 1e300] {
            let results = json!({"streams": [stream(end_time)]});
            let err = run_from_results(&results, true, false).unwrap_err();
            assert!(err.to_string().contains("outside"), "{err}");
        }
        // An impossible CPU figure is unknown (0), not believed.
        let results = json!({"cpu_util_total": 1e12, "streams": [stream(2.0)]});
        let run = run_from_results(&results, true, false).unwrap();
        assert_eq!(run.max_thread_cpu_ratio(), 0.0);
    }

    #[test]
    fn oversized_or_broken_json_is_refused() {
        let err = read_json(&mut (MAX_JSON_BYTES + 1).to_be_bytes().as_slice()).unwrap_err();
        assert!(err.to_string().contains("exceeds"));
        let err = read_json(&mut [0u8, 0, 0, 1, b'{'].as_slice()).unwrap_err();
        assert!(err.to_string().contains("bad iperf3 JSON"));
    }
}
