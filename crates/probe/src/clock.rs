//! The local clock's synchronisation state, as the kernel reports it (`adjtimex(2)`).
//!
//! NTP/PTP daemons (chrony, ntpd, ptp4l via phc2sys) keep the kernel's view current:
//! `STA_UNSYNC` clear and a return value other than `TIME_ERROR` mean synchronised;
//! `esterror` / `maxerror` are the daemon's estimated and maximum error in µs.

use vantage_model::latency::ClockSync;

/// Reads the local clock's sync state. Never fails: if the call is refused the
/// clock counts as unsynchronised with source `unknown`.
pub fn local_clock_sync() -> ClockSync {
    // SAFETY: modes = 0 only reads; the kernel fills the timex we own.
    let mut timex: libc::timex = unsafe { std::mem::zeroed() };
    let state = unsafe { libc::adjtimex(&mut timex) };
    if state < 0 {
        return ClockSync {
            synchronized: false,
            estimated_error_us: None,
            max_error_us: None,
            source: "unknown".into(),
        };
    }
    let unsynchronised = state == libc::TIME_ERROR || timex.status & libc::STA_UNSYNC != 0;
    ClockSync {
        synchronized: !unsynchronised,
        estimated_error_us: u64::try_from(timex.esterror).ok(),
        max_error_us: u64::try_from(timex.maxerror).ok(),
        source: "adjtimex".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjtimex_is_readable_and_consistent() {
        let sync = local_clock_sync();
        assert_eq!(sync.source, "adjtimex");
        if sync.synchronized {
            assert!(sync.estimated_error_us.is_some());
        }
    }
}
