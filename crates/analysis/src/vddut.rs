//! Virtual desktop display update time, VD-DUT (Alali, PhD dissertation, University
//! of Virginia, 2019, ch. 5), from the server→client packets of a zero-client session.
//!
//! API, for a capture reader:
//!
//! - give [`display_update`] the server→client packets ([`Packet`]: time in ns and size
//!   in bytes, in any order), the time `t0_ns` the start marker was sent and
//!   [`VddutParams`] (default: candidates larger than 110 B, an update ends at the
//!   first gap over 500 ms). It returns a [`DisplayUpdate`] (VD-DUT, bytes, packets)
//!   or [`VddutError::NoDisplayUpdate`] when no candidate follows `t0_ns`;
//! - [`decompose`] splits a VD-DUT by Eq. 5.1 into processing (e.g. RT-Autoit, when
//!   known), transmission at a link rate and the remainder (retransmission and the
//!   client's repair of missing pixels);
//! - [`geometric_mean`] aggregates one run's tasks (the dissertation takes it over the
//!   six images of a run, then the arithmetic mean across runs);
//! - [`slow_motion_vq`] is the video quality of slow-motion benchmarking (Nieh et al.),
//!   Eq. 5.2.
//!
//! The rule (§5.3): candidates are packets after `t0_ns` larger than the threshold;
//! walking consecutive candidates, the first gap over the limit ends the update, and
//! VD-DUT is the time of its last packet minus `t0_ns`. Which size (frame, IP or
//! payload) the caller passes is its choice: the dissertation does not say; its idle
//! stream of 110-B packets is the reason for the threshold.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One server→client packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Packet {
    pub time_ns: i64,
    pub size_bytes: u32,
}

/// What makes a packet part of a display update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VddutParams {
    /// Packets larger than this are candidates (the idle stream's packets are 110 B).
    pub min_size_bytes: u32,
    /// A gap between consecutive candidates longer than this ends the update (task
    /// windows showed gaps of at most 490 ms; idle large packets come about every 60 s).
    pub max_gap_ns: i64,
}

impl Default for VddutParams {
    fn default() -> Self {
        VddutParams {
            min_size_bytes: 110,
            max_gap_ns: 500_000_000,
        }
    }
}

/// One display update.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DisplayUpdate {
    pub t0_ns: i64,
    pub first_packet_ns: i64,
    pub last_packet_ns: i64,
    /// `last_packet_ns − t0_ns`.
    pub vddut_ns: i64,
    /// Bytes of the update's packets.
    pub update_bytes: u64,
    pub packets: usize,
}

impl DisplayUpdate {
    pub fn vddut_s(&self) -> f64 {
        self.vddut_ns as f64 / 1e9
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum VddutError {
    #[error("no display update: no packet larger than {min_size_bytes} B after the start marker")]
    NoDisplayUpdate { min_size_bytes: u32 },
    #[error("{field} must be a finite number > 0 (got {value})")]
    NotPositive { field: &'static str, value: f64 },
    #[error("{field} must be a finite number ≥ 0 (got {value})")]
    Negative { field: &'static str, value: f64 },
    #[error("no values to average")]
    Empty,
}

/// The display update that follows the start marker at `t0_ns` (packets strictly
/// after it count).
pub fn display_update(
    packets: &[Packet],
    t0_ns: i64,
    params: VddutParams,
) -> Result<DisplayUpdate, VddutError> {
    if params.max_gap_ns <= 0 {
        return Err(VddutError::NotPositive {
            field: "max_gap_ns",
            value: params.max_gap_ns as f64,
        });
    }
    let mut candidates: Vec<Packet> = packets
        .iter()
        .copied()
        .filter(|p| p.time_ns > t0_ns && p.size_bytes > params.min_size_bytes)
        .collect();
    // Captures are in arrival order, which multi-queue capture can shuffle slightly.
    candidates.sort_by_key(|p| p.time_ns);
    let Some(first) = candidates.first() else {
        return Err(VddutError::NoDisplayUpdate {
            min_size_bytes: params.min_size_bytes,
        });
    };
    let mut update = DisplayUpdate {
        t0_ns,
        first_packet_ns: first.time_ns,
        last_packet_ns: first.time_ns,
        vddut_ns: first.time_ns - t0_ns,
        update_bytes: u64::from(first.size_bytes),
        packets: 1,
    };
    for next in &candidates[1..] {
        if next.time_ns - update.last_packet_ns > params.max_gap_ns {
            break;
        }
        update.last_packet_ns = next.time_ns;
        update.update_bytes += u64::from(next.size_bytes);
        update.packets += 1;
    }
    update.vddut_ns = update.last_packet_ns - t0_ns;
    Ok(update)
}

/// VD-DUT = T_proc + T_trans + T_retrans (Eq. 5.1), in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Decomposition {
    pub vddut_s: f64,
    /// The server's processing time, when known (e.g. RT-Autoit).
    pub t_proc_s: Option<f64>,
    /// The update's bytes at the link rate.
    pub t_trans_s: f64,
    /// What remains: retransmissions and the client's repair of missing pixels. Only
    /// with `t_proc_s`; negative when processing and transmission overlap.
    pub t_retrans_s: Option<f64>,
}

/// Eq. 5.1 over one update at `rate_bps` (the dissertation's link: 1 Gbit/s).
pub fn decompose(
    update: &DisplayUpdate,
    t_proc_s: Option<f64>,
    rate_bps: f64,
) -> Result<Decomposition, VddutError> {
    if !(rate_bps.is_finite() && rate_bps > 0.0) {
        return Err(VddutError::NotPositive {
            field: "rate_bps",
            value: rate_bps,
        });
    }
    if let Some(t_proc_s) = t_proc_s.filter(|t| !(t.is_finite() && *t >= 0.0)) {
        return Err(VddutError::Negative {
            field: "t_proc_s",
            value: t_proc_s,
        });
    }
    let vddut_s = update.vddut_s();
    let t_trans_s = update.update_bytes as f64 * 8.0 / rate_bps;
    Ok(Decomposition {
        vddut_s,
        t_proc_s,
        t_trans_s,
        t_retrans_s: t_proc_s.map(|t_proc_s| vddut_s - t_proc_s - t_trans_s),
    })
}

/// The geometric mean of positive values (a run's per-task VD-DUTs or bytes).
pub fn geometric_mean(values: &[f64]) -> Result<f64, VddutError> {
    if values.is_empty() {
        return Err(VddutError::Empty);
    }
    let mut log_sum = 0.0;
    for &value in values {
        if !(value.is_finite() && value > 0.0) {
            return Err(VddutError::NotPositive {
                field: "value",
                value,
            });
        }
        log_sum += value.ln();
    }
    Ok((log_sum / values.len() as f64).exp())
}

/// One playback of a clip, as slow-motion benchmarking measures it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Playback {
    /// Bytes the client received during playback.
    pub data_bytes: f64,
    pub playback_s: f64,
    /// The frame rate the clip was played at (the reference plays it at 1 fps).
    pub ideal_fps: f64,
}

/// Video quality by slow-motion benchmarking (Nieh et al.; Eq. 5.2 of Alali 2019):
/// the test playback's data per second per ideal frame over the same for a slow,
/// unimpaired reference playback. 1 means every frame arrived in full.
pub fn slow_motion_vq(test: &Playback, reference: &Playback) -> Result<f64, VddutError> {
    let per_frame = |playback: &Playback| -> Result<f64, VddutError> {
        for (field, value) in [
            ("playback_s", playback.playback_s),
            ("ideal_fps", playback.ideal_fps),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(VddutError::NotPositive { field, value });
            }
        }
        if !(playback.data_bytes.is_finite() && playback.data_bytes >= 0.0) {
            return Err(VddutError::Negative {
                field: "data_bytes",
                value: playback.data_bytes,
            });
        }
        Ok(playback.data_bytes / playback.playback_s / playback.ideal_fps)
    };
    let reference_per_frame = per_frame(reference)?;
    if reference_per_frame == 0.0 {
        return Err(VddutError::NotPositive {
            field: "reference data_bytes",
            value: 0.0,
        });
    }
    Ok(per_frame(test)? / reference_per_frame)
}

#[cfg(test)]
mod tests;
