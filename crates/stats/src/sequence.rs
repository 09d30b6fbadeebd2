//! Received / lost / duplicate / reordered accounting for a numbered stream
//! (RFC 4737 reordering), in memory bounded by a window of recent sequence numbers:
//! whatever numbers a sender (or an attacker) puts in its packets, the tracker holds
//! two bitmaps of `window` bits and a few counters.

/// How one arrival was classified by [`SequenceTracker::observe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// First copy, sequence number above every one seen before.
    InOrder,
    /// First copy, but a higher sequence number arrived earlier (RFC 4737 §3.3:
    /// reordered when s < NextExp, NextExp = highest seen + 1).
    Reordered,
    /// A copy of a sequence number already seen; not counted as received again.
    Duplicate,
    /// More than the window behind the highest sequence number seen: reordered or a
    /// duplicate, which the window no longer tells; counted apart, not as received.
    Late,
}

/// Totals over a stream, from [`SequenceTracker::finish`].
///
/// Invariant: `received + lost == expected`. Duplicates, reordered, late and
/// out-of-range arrivals are counted separately (reordered packets are also in
/// `received`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SequenceCounts {
    /// Packets sent, numbered 0..expected.
    pub expected: u64,
    /// Distinct sequence numbers in 0..expected that arrived.
    pub received: u64,
    /// `expected - received`.
    pub lost: u64,
    /// Extra copies of already-received sequence numbers.
    pub duplicates: u64,
    /// Distinct arrivals that came after a higher sequence number (RFC 4737).
    pub reordered: u64,
    /// Distinct arrivals numbered `expected` or higher — never sent in this stream
    /// (a stray or corrupted packet); not in `received`.
    pub out_of_range: u64,
    /// Arrivals more than the window behind the highest number seen ([`Arrival::Late`]).
    pub late: u64,
}

/// Sequence numbers this far or more beyond the highest seen are strays (a corrupted
/// or forged packet), not a loss burst: they are counted out of range without moving
/// the window, so one of them cannot make every later packet look reordered.
const STRAY_JUMP: u64 = 1 << 32;

/// Accumulates arrivals of a stream numbered from 0 in O(window) memory. Within the
/// window (by default the last 65 536 sequence numbers) the counts are exact RFC 4737
/// accounting; an arrival further behind is [`Arrival::Late`].
#[derive(Debug)]
pub struct SequenceTracker {
    window: u64,
    /// Bit `seq % window`: `seq` arrived (for seq in the window below `next_expected`).
    seen: Vec<u64>,
    /// Bit `seq % window`: `seq` arrived reordered.
    reordered_bits: Vec<u64>,
    /// NextExp of RFC 4737: one more than the highest sequence number seen.
    next_expected: u64,
    /// Distinct arrivals tracked (received or out of range).
    distinct: u64,
    reordered: u64,
    duplicates: u64,
    late: u64,
    strays: u64,
}

impl Default for SequenceTracker {
    fn default() -> Self {
        Self::with_window(1 << 16)
    }
}

fn bit(bits: &[u64], position: u64) -> bool {
    bits[(position / 64) as usize] & (1 << (position % 64)) != 0
}

/// Clears `len` bits of the ring from `position` on, a word at a time (a jump of
/// nearly a window costs window/64 operations, not window).
fn clear_range(bits: &mut [u64], mut position: u64, mut len: u64, window: u64) {
    while len > 0 {
        let offset = position % 64;
        let count = (64 - offset).min(len).min(window - position);
        let mask = if count == 64 {
            u64::MAX
        } else {
            ((1u64 << count) - 1) << offset
        };
        bits[(position / 64) as usize] &= !mask;
        len -= count;
        position = (position + count) % window;
    }
}

fn set_bit(bits: &mut [u64], position: u64) {
    bits[(position / 64) as usize] |= 1 << (position % 64);
}

impl SequenceTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// A tracker remembering the last `window` sequence numbers (rounded up to a
    /// multiple of 64, at least 64).
    pub fn with_window(window: u64) -> Self {
        let words = window.div_ceil(64).max(1);
        Self {
            window: words * 64,
            seen: vec![0; words as usize],
            reordered_bits: vec![0; words as usize],
            next_expected: 0,
            distinct: 0,
            reordered: 0,
            duplicates: 0,
            late: 0,
            strays: 0,
        }
    }

    /// Records one arrival and says how it was classified.
    pub fn observe(&mut self, seq: u64) -> Arrival {
        let position = seq % self.window;
        if seq >= self.next_expected {
            if self.distinct > 0 && seq - self.next_expected >= STRAY_JUMP {
                self.strays += 1;
                return Arrival::InOrder;
            }
            // The numbers between the old and the new highest now take the slots of
            // numbers a window older: clear them (all, after a jump of a window or more).
            let advance = seq + 1 - self.next_expected;
            if advance >= self.window {
                self.seen.fill(0);
                self.reordered_bits.fill(0);
            } else {
                let from = self.next_expected % self.window;
                clear_range(&mut self.seen, from, advance, self.window);
                clear_range(&mut self.reordered_bits, from, advance, self.window);
            }
            set_bit(&mut self.seen, position);
            self.next_expected = seq.saturating_add(1);
            self.distinct += 1;
            return Arrival::InOrder;
        }
        if self.next_expected - seq > self.window {
            self.late += 1;
            return Arrival::Late;
        }
        if bit(&self.seen, position) {
            self.duplicates += 1;
            return Arrival::Duplicate;
        }
        set_bit(&mut self.seen, position);
        set_bit(&mut self.reordered_bits, position);
        self.distinct += 1;
        self.reordered += 1;
        Arrival::Reordered
    }

    /// Totals for a stream of `expected` packets numbered 0..expected.
    pub fn finish(&self, expected: u64) -> SequenceCounts {
        // Distinct arrivals numbered `expected` or higher: the strays, and those in the
        // window at or above `expected` (none when everything seen is below it).
        let window_start = self.next_expected.saturating_sub(self.window);
        let (mut above, mut reordered_above) = (self.strays, 0);
        for seq in expected.max(window_start)..self.next_expected {
            let position = seq % self.window;
            above += u64::from(bit(&self.seen, position));
            reordered_above += u64::from(bit(&self.reordered_bits, position));
        }
        let received = self.distinct + self.strays - above;
        // Numbers above `expected` that left the window cannot be told apart any more;
        // `received` never exceeds what was sent.
        let received = received.min(expected);
        SequenceCounts {
            expected,
            received,
            lost: expected - received,
            duplicates: self.duplicates,
            reordered: (self.reordered - reordered_above).min(received),
            out_of_range: self.distinct + self.strays - received,
            late: self.late,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4737_reordering_duplicates_and_loss() {
        // Sent 0..8. Arrivals: 0 1 3 2 4 4 7 5 9.
        // 0,1,3 in order (NextExp 4); 2 < 4 reordered; 4 in order (NextExp 5); 4 dup;
        // 7 in order (NextExp 8); 5 < 8 reordered; 9 out of range (only 0..8 sent).
        // Received distinct in range: 0 1 2 3 4 5 7 = 7; lost: 6 -> 1.
        let mut tracker = SequenceTracker::new();
        let arrivals: Vec<Arrival> = [0, 1, 3, 2, 4, 4, 7, 5, 9]
            .into_iter()
            .map(|seq| tracker.observe(seq))
            .collect();
        use Arrival::*;
        assert_eq!(
            arrivals,
            [
                InOrder, InOrder, InOrder, Reordered, InOrder, Duplicate, InOrder, Reordered,
                InOrder
            ]
        );
        let counts = tracker.finish(8);
        assert_eq!(
            counts,
            SequenceCounts {
                expected: 8,
                received: 7,
                lost: 1,
                duplicates: 1,
                reordered: 2,
                out_of_range: 1,
                late: 0,
            }
        );
    }

    #[test]
    fn nothing_received_is_all_lost() {
        let counts = SequenceTracker::new().finish(5);
        assert_eq!((counts.received, counts.lost), (0, 5));
    }

    /// The accounting the tracker had before it was windowed: every number in a set.
    /// Within the window the windowed tracker must agree with it exactly.
    fn reference(arrivals: &[u64], expected: u64) -> (Vec<Arrival>, SequenceCounts) {
        use std::collections::HashSet;
        let (mut seen, mut next_expected, mut duplicates) = (HashSet::new(), 0u64, 0u64);
        let mut reordered_seqs = Vec::new();
        let classes = arrivals
            .iter()
            .map(|&seq| {
                if !seen.insert(seq) {
                    duplicates += 1;
                    Arrival::Duplicate
                } else if seq < next_expected {
                    reordered_seqs.push(seq);
                    Arrival::Reordered
                } else {
                    next_expected = seq + 1;
                    Arrival::InOrder
                }
            })
            .collect();
        let received = seen.iter().filter(|&&seq| seq < expected).count() as u64;
        let counts = SequenceCounts {
            expected,
            received,
            lost: expected - received,
            duplicates,
            reordered: reordered_seqs.iter().filter(|&&seq| seq < expected).count() as u64,
            out_of_range: seen.len() as u64 - received,
            late: 0,
        };
        (classes, counts)
    }

    #[test]
    fn agrees_with_the_unbounded_accounting_within_the_window() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(4737);
        // Bounded: 2 000 random streams of up to 600 arrivals numbered below 500, with
        // windows of 64 bits and more (every reordering in them stays within 500).
        for round in 0..2_000 {
            let len = rng.gen_range(0..600);
            let arrivals: Vec<u64> = (0..len).map(|_| rng.gen_range(0..500)).collect();
            let expected = rng.gen_range(0..520);
            let (classes, counts) = reference(&arrivals, expected);
            for window in [512, 1 << 16] {
                let mut tracker = SequenceTracker::with_window(window);
                let got: Vec<Arrival> = arrivals.iter().map(|&seq| tracker.observe(seq)).collect();
                assert_eq!(got, classes, "round {round}, window {window}");
                assert_eq!(
                    tracker.finish(expected),
                    counts,
                    "round {round}, window {window}"
                );
            }
        }
    }

    #[test]
    fn arrivals_behind_the_window_are_late_and_memory_stays_fixed() {
        let mut tracker = SequenceTracker::with_window(64);
        for seq in 0..1000 {
            tracker.observe(seq);
        }
        assert_eq!(tracker.observe(10), Arrival::Late);
        assert_eq!(tracker.observe(990), Arrival::Duplicate);
        // A forged number far ahead neither allocates nor moves the window.
        assert_eq!(tracker.observe(u64::MAX - 1), Arrival::InOrder);
        assert_eq!(tracker.observe(999), Arrival::Duplicate);
        assert_eq!((tracker.seen.len(), tracker.reordered_bits.len()), (1, 1));
        let counts = tracker.finish(1000);
        assert_eq!((counts.received, counts.lost, counts.late), (1000, 0, 1));
        assert_eq!((counts.duplicates, counts.out_of_range), (2, 1));
    }

    #[test]
    fn jumps_clear_the_slots_they_reuse() {
        let mut tracker = SequenceTracker::with_window(128);
        assert_eq!(tracker.observe(5), Arrival::InOrder);
        // 5 + 128 reuses 5's slot: a new number, not a duplicate.
        assert_eq!(tracker.observe(133), Arrival::InOrder);
        assert_eq!(tracker.observe(70), Arrival::Reordered);
        assert_eq!(tracker.observe(70), Arrival::Duplicate);
        // A jump of more than a window clears everything.
        assert_eq!(tracker.observe(10_000), Arrival::InOrder);
        assert_eq!(tracker.observe(9_999), Arrival::Reordered);
        let counts = tracker.finish(20_000);
        assert_eq!(
            (counts.received, counts.reordered, counts.duplicates),
            (5, 2, 1)
        );
    }
}
