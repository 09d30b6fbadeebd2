//! Received / lost / duplicate / reordered accounting for a numbered stream
//! (RFC 4737 reordering).

use std::collections::HashSet;

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
}

/// Totals over a stream, from [`SequenceTracker::finish`].
///
/// Invariant: `received + lost == expected`. Duplicates, reordered and out-of-range
/// arrivals are counted separately (reordered packets are also in `received`).
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
}

/// Accumulates arrivals of a stream numbered from 0. Memory grows with the number
/// of distinct sequence numbers seen (bounded by the probe count the caller sends).
#[derive(Debug, Default)]
pub struct SequenceTracker {
    seen: HashSet<u64>,
    /// NextExp of RFC 4737: one more than the highest sequence number seen.
    next_expected: u64,
    duplicates: u64,
    reordered_seqs: Vec<u64>,
}

impl SequenceTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one arrival and says how it was classified.
    pub fn observe(&mut self, seq: u64) -> Arrival {
        if !self.seen.insert(seq) {
            self.duplicates += 1;
            return Arrival::Duplicate;
        }
        if seq < self.next_expected {
            self.reordered_seqs.push(seq);
            Arrival::Reordered
        } else {
            self.next_expected = seq.saturating_add(1);
            Arrival::InOrder
        }
    }

    /// Totals for a stream of `expected` packets numbered 0..expected.
    pub fn finish(&self, expected: u64) -> SequenceCounts {
        let received = self.seen.iter().filter(|&&seq| seq < expected).count() as u64;
        let out_of_range = self.seen.len() as u64 - received;
        SequenceCounts {
            expected,
            received,
            lost: expected - received,
            duplicates: self.duplicates,
            reordered: self
                .reordered_seqs
                .iter()
                .filter(|&&seq| seq < expected)
                .count() as u64,
            out_of_range,
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
            }
        );
    }

    #[test]
    fn nothing_received_is_all_lost() {
        let counts = SequenceTracker::new().finish(5);
        assert_eq!((counts.received, counts.lost), (0, 5));
    }
}
