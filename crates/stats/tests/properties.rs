//! Property tests: invariants of the KPI functions over arbitrary input.

use proptest::prelude::*;
use vantage_stats::{
    distribution, ipdv, jitter, percentile, split_loss, spread, Bracket, ProbeFate, SequenceTracker,
};

/// Finite, large-but-not-overflowing samples (delays in µs are far smaller).
fn finite_samples() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(-1e12f64..1e12, 1..200)
}

/// Any f64 bit pattern, NaN and infinities included.
fn any_samples() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(any::<f64>(), 0..100)
}

proptest! {
    #[test]
    fn percentile_is_monotone_in_p_and_within_range(
        mut samples in finite_samples(),
        p1 in 0.0f64..=100.0,
        p2 in 0.0f64..=100.0,
    ) {
        samples.sort_by(f64::total_cmp);
        let (low_p, high_p) = if p1 <= p2 { (p1, p2) } else { (p2, p1) };
        let low = percentile(&samples, low_p).unwrap();
        let high = percentile(&samples, high_p).unwrap();
        prop_assert!(low <= high);
        prop_assert!(samples[0] <= low && high <= samples[samples.len() - 1]);
    }

    #[test]
    fn distribution_is_ordered(samples in finite_samples()) {
        let d = distribution(&samples).unwrap();
        prop_assert!(d.min <= d.median && d.median <= d.p95);
        prop_assert!(d.p95 <= d.p99 && d.p99 <= d.max);
        // The mean may differ from the true one by rounding only.
        let tolerance = 1e-9 * d.max.abs().max(d.min.abs()).max(1.0);
        prop_assert!(d.min - tolerance <= d.mean && d.mean <= d.max + tolerance);
        prop_assert!(d.stddev >= 0.0);
    }

    /// NaN/inf handling: never a panic; a summary exists exactly when a finite sample
    /// does, and it is built from finite samples only.
    #[test]
    fn arbitrary_floats_never_panic(samples in any_samples(), p in any::<f64>()) {
        let has_finite = samples.iter().any(|v| v.is_finite());
        prop_assert_eq!(distribution(&samples).is_some(), has_finite);
        prop_assert_eq!(spread(&samples).is_some(), has_finite);
        if let Some(d) = distribution(&samples) {
            prop_assert!(d.min.is_finite() && d.max.is_finite());
        }
        let _ = percentile(&samples, p);
        let _ = jitter(&samples);
        let finite_count = samples.iter().filter(|v| v.is_finite()).count();
        prop_assert_eq!(ipdv(&samples).len(), finite_count.saturating_sub(1));
    }

    #[test]
    fn jitter_definitions_are_non_negative(samples in finite_samples()) {
        if let Some(j) = jitter(&samples) {
            prop_assert!(j.rfc3550 >= 0.0 && j.mean_abs_delta >= 0.0 && j.median_abs_delta >= 0.0);
        }
    }

    /// received + lost == sent, whatever arrives (duplicates, reordering, strays).
    #[test]
    fn sequence_accounting_conserves_counts(
        arrivals in prop::collection::vec(0u64..300, 0..400),
        expected in 0u64..300,
    ) {
        let mut tracker = SequenceTracker::new();
        for seq in &arrivals {
            tracker.observe(*seq);
        }
        let counts = tracker.finish(expected);
        prop_assert_eq!(counts.received + counts.lost, expected);
        prop_assert!(counts.reordered <= counts.received);
        prop_assert_eq!(
            counts.received + counts.out_of_range + counts.duplicates + counts.late,
            arrivals.len() as u64
        );
    }

    /// Every probe lands in exactly one bucket, whatever the reflector numbers say.
    #[test]
    fn loss_split_conserves_counts(
        replies in prop::collection::vec(prop::option::of(any::<u32>()), 0..200),
        opening in prop::option::of(any::<u32>()),
        closing in prop::option::of(any::<u32>()),
    ) {
        let bracket = Bracket { opening_reflector_seq: opening, closing_reflector_seq: closing };
        let split = split_loss(&replies, bracket);
        prop_assert_eq!(split.per_probe.len(), replies.len());
        prop_assert_eq!(
            split.received + split.forward_lost + split.reverse_lost + split.unknown_direction_lost,
            replies.len() as u64
        );
        let received = split.per_probe.iter().filter(|f| **f == ProbeFate::Received).count();
        prop_assert_eq!(received as u64, split.received);
    }

    /// A simulated stateful reflector with random request and reply losses, bracketed
    /// by answered opening and closing probes: the split is exact.
    #[test]
    fn loss_split_exact_for_stateful_reflector(
        fates in prop::collection::vec(0u8..3, 0..200), // 0 ok, 1 request lost, 2 reply lost
        first_reflector_seq in any::<u32>(),
    ) {
        let mut counter = first_reflector_seq;
        let mut next = || { let seq = counter; counter = counter.wrapping_add(1); seq };
        let opening = next();
        let replies: Vec<Option<u32>> = fates
            .iter()
            .map(|fate| match fate {
                0 => Some(next()),
                1 => None,
                _ => { next(); None }
            })
            .collect();
        let closing = next();
        let split = split_loss(
            &replies,
            Bracket { opening_reflector_seq: Some(opening), closing_reflector_seq: Some(closing) },
        );
        let count = |wanted: u8| fates.iter().filter(|f| **f == wanted).count() as u64;
        prop_assert_eq!(split.forward_lost, count(1));
        prop_assert_eq!(split.reverse_lost, count(2));
        prop_assert_eq!(split.unknown_direction_lost, 0);
    }
}
