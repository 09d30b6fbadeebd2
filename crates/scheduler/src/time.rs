//! Planning arithmetic runs on integer milliseconds since the epoch; these convert
//! at the boundary, rounding so that reservations never shrink.

use chrono::{DateTime, Utc};

/// Milliseconds since the epoch, rounded down (starts of reservations, latest starts).
pub(crate) fn to_ms(time: DateTime<Utc>) -> i64 {
    time.timestamp_millis()
}

/// Milliseconds since the epoch, rounded up (ends of reservations, earliest
/// starts), so callers' sub-millisecond times never shrink a reservation.
pub(crate) fn to_ms_ceil(time: DateTime<Utc>) -> i64 {
    let floor = time.timestamp_millis();
    if time.timestamp_subsec_nanos() % 1_000_000 == 0 {
        floor
    } else {
        floor + 1
    }
}

pub(crate) fn from_ms(ms: i64) -> DateTime<Utc> {
    // Planning times come from DateTimes and bounded durations, so they stay in range.
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MAX_UTC)
}
