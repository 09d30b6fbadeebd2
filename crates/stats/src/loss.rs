//! Forward vs reverse loss of TWAMP-style request/reply exchanges.
//!
//! A stateful reflector (RFC 5357 §4.2.1) numbers the packets it *receives* in a
//! session with its own counter, independent of the sender's numbers. Between two
//! answered probes at sender positions s1 < s2 with reflector numbers r1 < r2, the
//! s2 - s1 - 1 unanswered probes in between include exactly r2 - r1 - 1 that reached
//! the reflector (it counted them, so their replies were lost: **reverse** loss); the
//! rest never reached it (**forward** loss). The counts are exact; *which* probe of a
//! mixed gap went which way is not knowable, so such probes are classified
//! [`ProbeFate::Lost`] while still counted in the forward/reverse totals.
//!
//! Unanswered probes before the first or after the last answered probe have no
//! bound on one side: their direction is unknown, unless the caller brackets the
//! run with an extra probe sent just before / just after (same session) whose reply
//! came back — see [`Bracket`].
//!
//! A gap whose reflector numbers are inconsistent (r2 <= r1, counter reset, reordered
//! requests, a counter shared with other senders, or more packets counted than were
//! sent) makes that gap's losses unknown-direction rather than guessing.
//!
//! Limitation: a *stateless* TWAMP-Light reflector (RFC 5357 Appendix I) copies the
//! sender's number instead of counting; then every gap looks like reverse loss. The
//! vantage endpoint is stateful.

use vantage_model::latency::ProbeStatus;

/// What became of one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeFate {
    Received,
    /// Never reached the reflector.
    ForwardLost,
    /// Reached the reflector, the reply was lost.
    ReverseLost,
    /// Lost; its own direction cannot be told (counted as forward, reverse or
    /// unknown in [`LossSplit`] depending on what its gap allows).
    Lost,
}

impl From<ProbeFate> for ProbeStatus {
    fn from(fate: ProbeFate) -> Self {
        match fate {
            ProbeFate::Received => ProbeStatus::Received,
            ProbeFate::ForwardLost => ProbeStatus::ForwardLost,
            ProbeFate::ReverseLost => ProbeStatus::ReverseLost,
            ProbeFate::Lost => ProbeStatus::Lost,
        }
    }
}

/// Reflector sequence numbers of optional uncounted probes sent in the same session
/// immediately before the first and after the last counted probe; `Some` only when
/// that probe's reply came back. They bound leading and trailing losses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bracket {
    pub opening_reflector_seq: Option<u32>,
    pub closing_reflector_seq: Option<u32>,
}

/// Result of [`split_loss`]. Invariant:
/// `received + forward_lost + reverse_lost + unknown_direction_lost == per_probe.len()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LossSplit {
    pub received: u64,
    pub forward_lost: u64,
    pub reverse_lost: u64,
    pub unknown_direction_lost: u64,
    /// One entry per counted probe, in sending order.
    pub per_probe: Vec<ProbeFate>,
}

/// An answered probe used as a bound: its position in sending order (the opening
/// probe is position 0, counted probe i is i + 1) and its reflector number.
#[derive(Clone, Copy)]
struct Anchor {
    position: u64,
    reflector_seq: u32,
}

/// Classifies losses. `replies[i]` is the reflector sequence number in the first
/// reply to counted probe i (sent i-th), or `None` if no reply came back.
pub fn split_loss(replies: &[Option<u32>], bracket: Bracket) -> LossSplit {
    let mut split = LossSplit {
        received: 0,
        forward_lost: 0,
        reverse_lost: 0,
        unknown_direction_lost: 0,
        per_probe: replies
            .iter()
            .map(|reply| match reply {
                Some(_) => ProbeFate::Received,
                None => ProbeFate::Lost,
            })
            .collect(),
    };
    split.received = replies.iter().filter(|reply| reply.is_some()).count() as u64;

    let counted = replies.len() as u64;
    let opening = bracket.opening_reflector_seq.map(|reflector_seq| Anchor {
        position: 0,
        reflector_seq,
    });
    let answered = replies.iter().enumerate().filter_map(|(index, reply)| {
        reply.map(|reflector_seq| Anchor {
            position: index as u64 + 1,
            reflector_seq,
        })
    });
    let closing = bracket.closing_reflector_seq.map(|reflector_seq| Anchor {
        position: counted + 1,
        reflector_seq,
    });

    // Walk the answered probes pairwise; every lost probe lies in exactly one
    // span: before the first anchor, between two anchors, or after the last.
    let mut previous: Option<Anchor> = None;
    for anchor in opening.into_iter().chain(answered).chain(closing) {
        let gap_start = previous.map_or(1, |p| p.position + 1);
        split.classify_gap(gap_start, anchor.position, previous, anchor);
        previous = Some(anchor);
    }
    let tail_start = previous.map_or(1, |p| p.position + 1);
    split.unknown_direction_lost += (counted + 1).saturating_sub(tail_start);
    split
}

impl LossSplit {
    /// Classifies the unanswered counted probes at positions `start..end` lying
    /// between `before` (if any) and `after`.
    fn classify_gap(&mut self, start: u64, end: u64, before: Option<Anchor>, after: Anchor) {
        // Positions 0 and counted + 1 are the bracket probes, never counted.
        let counted = self.per_probe.len() as u64;
        let start = start.max(1);
        let end = end.min(counted + 1);
        let gap = end.saturating_sub(start);
        if gap == 0 {
            return;
        }
        let Some(before) = before else {
            self.unknown_direction_lost += gap;
            return;
        };
        // The reflector counts in u32 and may wrap; a step backwards becomes huge
        // and fails the consistency check below.
        let reached =
            u64::from(after.reflector_seq.wrapping_sub(before.reflector_seq)).wrapping_sub(1);
        if reached > gap {
            self.unknown_direction_lost += gap;
            return;
        }
        self.reverse_lost += reached;
        self.forward_lost += gap - reached;
        let fate = if reached == 0 {
            ProbeFate::ForwardLost
        } else if reached == gap {
            ProbeFate::ReverseLost
        } else {
            ProbeFate::Lost
        };
        for position in start..end {
            self.per_probe[(position - 1) as usize] = fate;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProbeFate::*;

    /// A stateful reflector over `sent` probes: `request_lost(i)` drops request i
    /// before the reflector, `reply_lost(i)` drops its reply. Returns what the sender
    /// sees: the reflector's number in each answered reply.
    fn simulate(
        sent: u32,
        request_lost: impl Fn(u32) -> bool,
        reply_lost: impl Fn(u32) -> bool,
    ) -> Vec<Option<u32>> {
        let mut reflector_counter = 0;
        (0..sent)
            .map(|i| {
                if request_lost(i) {
                    return None;
                }
                let reflector_seq = reflector_counter;
                reflector_counter += 1;
                (!reply_lost(i)).then_some(reflector_seq)
            })
            .collect()
    }

    #[test]
    fn every_kth_request_dropped_is_forward_loss() {
        // 20 probes, k = 4: requests 3, 7, 11, 15, 19 dropped -> 5 forward.
        // 3, 7, 11, 15 sit between answered probes whose reflector numbers are
        // consecutive (e.g. probe 2 -> r2, probe 4 -> r3): gap 1, reached 0 -> forward.
        // 19 is the last probe: trailing, unknown without a closing probe.
        let replies = simulate(20, |i| i % 4 == 3, |_| false);
        let split = split_loss(&replies, Bracket::default());
        assert_eq!(split.received, 15);
        assert_eq!((split.forward_lost, split.reverse_lost), (4, 0));
        assert_eq!(split.unknown_direction_lost, 1);
        assert_eq!(split.per_probe[3], ForwardLost);
        assert_eq!(split.per_probe[19], Lost);

        // With a closing probe (the reflector's 16th packet: number 15) 19 is bounded:
        // between probe 18 (r = 14) and the closing probe (r = 15): reached 0 -> forward.
        let closed = split_loss(
            &replies,
            Bracket {
                opening_reflector_seq: None,
                closing_reflector_seq: Some(15),
            },
        );
        assert_eq!((closed.forward_lost, closed.reverse_lost), (5, 0));
        assert_eq!(closed.unknown_direction_lost, 0);
        assert_eq!(closed.per_probe[19], ForwardLost);
    }

    #[test]
    fn every_kth_reply_dropped_is_reverse_loss() {
        // 20 probes, k = 5: replies to 4, 9, 14, 19 dropped -> 4 reverse. The reflector
        // counted all 20, so the number jumps by 2 across each gap of 1: reached 1.
        // 19 is trailing: the closing probe is the reflector's 21st packet (r = 20).
        let replies = simulate(20, |_| false, |i| i % 5 == 4);
        let split = split_loss(&replies, Bracket::default());
        assert_eq!((split.forward_lost, split.reverse_lost), (0, 3));
        assert_eq!(split.unknown_direction_lost, 1);
        let closed = split_loss(
            &replies,
            Bracket {
                opening_reflector_seq: None,
                closing_reflector_seq: Some(20),
            },
        );
        assert_eq!((closed.forward_lost, closed.reverse_lost), (0, 4));
        assert_eq!(closed.per_probe[4], ReverseLost);
        assert_eq!(closed.per_probe[19], ReverseLost);
        assert_eq!(closed.received, 16);
    }

    #[test]
    fn mixed_gap_counts_exact_but_probes_undetermined() {
        // Probes 0..6: 0 answered (r 0); 1 reply lost (reflector r 1); 2 request lost;
        // 3 reply lost (r 2); 4 answered (r 3); gap 1..4 of 3 with r 3 - 0 - 1 = 2 reached
        // -> 2 reverse, 1 forward, individually unknown.
        let replies = [Some(0), None, None, None, Some(3)];
        let split = split_loss(&replies, Bracket::default());
        assert_eq!((split.forward_lost, split.reverse_lost), (1, 2));
        assert_eq!(split.unknown_direction_lost, 0);
        assert_eq!(split.per_probe, vec![Received, Lost, Lost, Lost, Received]);
    }

    #[test]
    fn leading_losses_need_an_opening_probe() {
        // Probes 0 and 1 unanswered, 2 answered with r 5 (counter from an earlier use).
        let replies = [None, None, Some(5)];
        let split = split_loss(&replies, Bracket::default());
        assert_eq!(split.unknown_direction_lost, 2);
        // Opening probe answered with r 3: r 5 - 3 - 1 = 1 of the 2 reached.
        let opened = split_loss(
            &replies,
            Bracket {
                opening_reflector_seq: Some(3),
                closing_reflector_seq: None,
            },
        );
        assert_eq!((opened.forward_lost, opened.reverse_lost), (1, 1));
        assert_eq!(opened.unknown_direction_lost, 0);
    }

    #[test]
    fn inconsistent_reflector_numbers_are_unknown_direction() {
        // r goes backwards (reset) across a gap of 1, and later counts 5 packets in a
        // gap of 1 (counter shared with another sender): both gaps unknown.
        let replies = [Some(7), None, Some(2), None, Some(8)];
        let split = split_loss(&replies, Bracket::default());
        assert_eq!((split.forward_lost, split.reverse_lost), (0, 0));
        assert_eq!(split.unknown_direction_lost, 2);
        // Equal numbers across a gap are inconsistent too.
        let equal = split_loss(&[Some(4), None, Some(4)], Bracket::default());
        assert_eq!(equal.unknown_direction_lost, 1);
    }

    #[test]
    fn reflector_counter_wrap_is_followed() {
        // u32::MAX then 1: the reflector counted 0 in between -> 1 reverse.
        let split = split_loss(&[Some(u32::MAX), None, Some(1)], Bracket::default());
        assert_eq!((split.forward_lost, split.reverse_lost), (0, 1));
    }

    #[test]
    fn nothing_answered_is_all_unknown_unless_bracketed() {
        let split = split_loss(&[None, None, None], Bracket::default());
        assert_eq!(split.unknown_direction_lost, 3);
        let bracketed = split_loss(
            &[None, None, None],
            Bracket {
                opening_reflector_seq: Some(0),
                closing_reflector_seq: Some(1),
            },
        );
        assert_eq!(
            (bracketed.forward_lost, bracketed.unknown_direction_lost),
            (3, 0)
        );
        assert!(split_loss(&[], Bracket::default()).per_probe.is_empty());
    }
}
