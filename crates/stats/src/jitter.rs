//! Delay variation: jitter three ways (RFC 3550, Miravalls-Sierra et al. 2018) and IPDV (RFC 3393 / 5481).
//!
//! All functions take the delays (one-way transit times or RTTs) of the received
//! packets **in sending order**, lost packets simply absent — so consecutive
//! elements are consecutive *received* packets, as RFC 5481 §4.2 (IPDV) does.
//! Non-finite delays are dropped first, the same as a lost packet.

use vantage_model::latency::Jitter;

use crate::distribution::{finite_sorted, percentile};

fn finite(delays: &[f64]) -> impl Iterator<Item = f64> + '_ {
    delays.iter().copied().filter(|v| v.is_finite())
}

/// IPDV of consecutive received packets: `d[i] - d[i-1]`, signed (RFC 3393 §2.4 with
/// the RFC 5481 §4.2 selection function "consecutive packets"). A positive value means
/// the later packet took longer. n delays give n - 1 values; fewer than 2 give none.
pub fn ipdv(delays: &[f64]) -> Vec<f64> {
    let finite: Vec<f64> = finite(delays).collect();
    finite.windows(2).map(|pair| pair[1] - pair[0]).collect()
}

/// The RFC 3550 interarrival jitter estimator (§6.4.1, code in §A.8):
/// `J += (|D(i-1, i)| - J) / 16`, starting from J = 0, where D is the difference of
/// consecutive transit times. The absolute transit offset cancels in D, so RTTs or
/// one-way delays from unsynchronised clocks both work. Returns the final J, or
/// `None` with fewer than two finite samples.
///
/// Note: RTP computes this over packets in *arrival* order; we use sending order of
/// the received packets, which is the same unless packets were reordered.
pub fn jitter_rfc3550(transit_us: &[f64]) -> Option<f64> {
    let deltas = ipdv(transit_us);
    if deltas.is_empty() {
        return None;
    }
    Some(
        deltas
            .iter()
            .fold(0.0, |jitter, delta| jitter + (delta.abs() - jitter) / 16.0),
    )
}

/// Miravalls-Sierra et al. (2018): with delays l_0..l_N, D_i = |l_i - l_(i-1)|; the mean of the D_i.
/// `None` with fewer than two finite samples.
pub fn mean_abs_delta(delays: &[f64]) -> Option<f64> {
    let deltas = ipdv(delays);
    if deltas.is_empty() {
        return None;
    }
    Some(deltas.iter().map(|d| d.abs()).sum::<f64>() / deltas.len() as f64)
}

/// Miravalls-Sierra et al. (2018): the median of D_i = |l_i - l_(i-1)| (robust to loss streaks and
/// outliers, unlike the mean). Median per [`percentile`] (type 7: the mean of
/// the two middle values for an even count). `None` with fewer than two finite samples.
pub fn median_abs_delta(delays: &[f64]) -> Option<f64> {
    let abs_deltas: Vec<f64> = ipdv(delays).iter().map(|d| d.abs()).collect();
    percentile(&finite_sorted(&abs_deltas), 50.0)
}

/// All three jitter definitions over the same delays; `None` with fewer than two
/// finite samples.
pub fn jitter(delays: &[f64]) -> Option<Jitter> {
    Some(Jitter {
        rfc3550: jitter_rfc3550(delays)?,
        mean_abs_delta: mean_abs_delta(delays)?,
        median_abs_delta: median_abs_delta(delays)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipdv_is_signed_consecutive_difference() {
        assert_eq!(ipdv(&[10.0, 12.0, 11.0, 15.0]), vec![2.0, -1.0, 4.0]);
        assert!(ipdv(&[10.0]).is_empty());
        // A non-finite delay is treated like a lost packet: 10 -> 12 are neighbours.
        assert_eq!(ipdv(&[10.0, f64::NAN, 12.0]), vec![2.0]);
    }

    #[test]
    fn rfc3550_filter_hand_worked() {
        // Transits 0, 16, 16, 48 -> |D| = 16, 0, 32.
        // J1 = 0 + (16 - 0)/16 = 1
        // J2 = 1 + (0 - 1)/16 = 0.9375
        // J3 = 0.9375 + (32 - 0.9375)/16 = 0.9375 + 1.94140625 = 2.87890625
        let j = jitter_rfc3550(&[0.0, 16.0, 16.0, 48.0]).unwrap();
        assert_eq!(j, 2.878_906_25);
        // A constant offset (unsynchronised clocks) cancels.
        assert_eq!(
            jitter_rfc3550(&[1000.0, 1016.0, 1016.0, 1048.0]).unwrap(),
            j
        );
        assert_eq!(jitter_rfc3550(&[5.0]), None);
    }

    #[test]
    fn seed004_mean_and_median_of_abs_delta() {
        // l = 10, 12, 11, 15, 15 -> D = 2, 1, 4, 0.
        // mean = 7 / 4 = 1.75; median of sorted 0, 1, 2, 4 = (1 + 2) / 2 = 1.5.
        let l = [10.0, 12.0, 11.0, 15.0, 15.0];
        assert_eq!(mean_abs_delta(&l), Some(1.75));
        assert_eq!(median_abs_delta(&l), Some(1.5));
        let j = jitter(&l).unwrap();
        assert_eq!((j.mean_abs_delta, j.median_abs_delta), (1.75, 1.5));
        // RFC 3550 over D = 2, 1, 4, 0: J = 0.125, 0.1796875, 0.418457..., 0.392303...
        let expected = [2.0, 1.0, 4.0, 0.0]
            .iter()
            .fold(0.0, |j, d: &f64| j + (d - j) / 16.0);
        assert_eq!(j.rfc3550, expected);
        assert!((j.rfc3550 - 0.392_303_466_796_875).abs() < 1e-15);
        assert_eq!(jitter(&[1.0]), None);
    }
}
