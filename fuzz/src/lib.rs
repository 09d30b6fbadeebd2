//! What several fuzz targets share.

use vantage_probe::twamp::{ErrorEstimate, NtpTimestamp, ReflectorStamp};

/// The stamp a synchronised reflector (1 µs error) puts on request `seq`, received at
/// `receive_ns` and sent `hold_ns` later.
pub fn reflector_stamp(seq: u32, receive_ns: i64, hold_ns: i64) -> ReflectorStamp {
    ReflectorStamp {
        seq,
        receive_timestamp: NtpTimestamp::from_unix_nanos(receive_ns),
        send_timestamp: NtpTimestamp::from_unix_nanos(receive_ns + hold_ns),
        error_estimate: ErrorEstimate::from_error_seconds(true, 1e-6),
        request_ttl: 64,
    }
}
