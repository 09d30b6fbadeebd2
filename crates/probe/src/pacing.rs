//! Packet pacing against the monotonic clock: a token bucket whose tokens are
//! packets, refilled continuously at the target rate, with a shallow depth so a
//! sender that was descheduled catches up with a short burst, never a long one.
//!
//! The sender sleeps until the next packet is due (with a 1 µs timer slack, so the
//! wake-up is not rounded to the default 50 µs) and then sends every packet that
//! is due in one batch (`sendmmsg`). Rate is exact on average because due times are
//! computed from the start instant, not accumulated sleeps.

use std::time::{Duration, Instant};

/// Largest number of packets sent back to back after a late wake-up.
pub const MAX_BURST_PACKETS: u64 = 64;
/// At high packet rates the sender wakes once per this much sending time and sends
/// what fell due (a few packets), not once per packet: fewer wake-ups, same rate.
pub const COALESCE: Duration = Duration::from_micros(250);

/// Packets due at a fixed rate from a start instant.
#[derive(Debug, Clone)]
pub struct PacketSchedule {
    start: Instant,
    packet_interval_ns: f64,
    sent: u64,
    /// Packets whose slot passed while the sender could not keep up (credit beyond
    /// the bucket depth is dropped: the sender is the limit then, and says so).
    skipped: u64,
}

impl PacketSchedule {
    /// `rate_bps` counted over `packet_bits` per packet; both must be positive.
    pub fn new(start: Instant, rate_bps: f64, packet_bits: f64) -> Self {
        let packet_interval_ns = (packet_bits / rate_bps.max(1.0)) * 1e9;
        Self {
            start,
            packet_interval_ns: packet_interval_ns.max(1.0),
            sent: 0,
            skipped: 0,
        }
    }

    fn slots_until(&self, now: Instant) -> u64 {
        let elapsed_ns = now.saturating_duration_since(self.start).as_nanos() as f64;
        (elapsed_ns / self.packet_interval_ns) as u64 + 1
    }

    /// Packets due at `now` (slot k is due at start + k·interval), at most the burst depth.
    pub fn due(&mut self, now: Instant) -> u64 {
        let owed = self
            .slots_until(now)
            .saturating_sub(self.sent + self.skipped);
        if owed > MAX_BURST_PACKETS {
            self.skipped += owed - MAX_BURST_PACKETS;
            return MAX_BURST_PACKETS;
        }
        owed
    }

    pub fn record_sent(&mut self, packets: u64) {
        self.sent += packets;
    }

    /// When the next packet is due.
    pub fn next_due(&self) -> Instant {
        self.due_time_of(0)
    }

    /// When the sender should wake: once [`COALESCE`] worth of packets (at least one,
    /// at most 8) is due.
    pub fn next_wake(&self) -> Instant {
        let per_wake =
            (COALESCE.as_nanos() as f64 / self.packet_interval_ns).clamp(1.0, 8.0) as u64;
        self.due_time_of(per_wake - 1)
    }

    fn due_time_of(&self, ahead: u64) -> Instant {
        let slot = (self.sent + self.skipped + ahead) as f64;
        self.start + Duration::from_nanos((slot * self.packet_interval_ns) as u64)
    }

    pub fn sent(&self) -> u64 {
        self.sent
    }

    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

/// Sets the calling thread's timer slack to 1 µs so short sleeps end on time.
pub fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a nanosecond count; affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong, 0, 0, 0);
    }
}

/// Sleeps until `deadline` (returns at once if it has passed).
pub fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_fall_due_at_the_rate() {
        let start = Instant::now();
        // 1000 bit packets at 1 Mbit/s: one per millisecond.
        let mut schedule = PacketSchedule::new(start, 1e6, 1000.0);
        assert_eq!(schedule.due(start), 1);
        schedule.record_sent(1);
        assert_eq!(schedule.due(start + Duration::from_micros(500)), 0);
        assert_eq!(schedule.next_due(), start + Duration::from_millis(1));
        assert_eq!(schedule.due(start + Duration::from_micros(3_500)), 3);
        schedule.record_sent(3);
        assert_eq!(schedule.sent(), 4);
        // 1 ms per packet: wake for each one; 10 µs per packet: for 8 at once.
        assert_eq!(schedule.next_wake(), schedule.next_due());
        let fast = PacketSchedule::new(start, 1e8, 1000.0);
        assert_eq!(fast.next_wake(), start + Duration::from_micros(70));
        assert_eq!(schedule.skipped(), 0);
    }

    #[test]
    fn a_late_sender_bursts_at_most_the_bucket_depth() {
        let start = Instant::now();
        let mut schedule = PacketSchedule::new(start, 1e6, 1000.0);
        let due = schedule.due(start + Duration::from_millis(100));
        assert_eq!(due, MAX_BURST_PACKETS);
        assert_eq!(schedule.skipped(), 101 - MAX_BURST_PACKETS);
        schedule.record_sent(due);
        assert_eq!(schedule.due(start + Duration::from_millis(100)), 0);
    }
}
