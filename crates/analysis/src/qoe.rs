//! Video quality of experience from a throughput series.
//!
//! A playback-buffer model turns the rate at which a player downloads a video into
//! stall events, and the stalls into a Mean Opinion Score by the guideline Rufini,
//! Tego, Matera and Mellia used for HTTP video on GPON accesses (Fotonica AEIT 2014),
//! after Casas, Seufert and Schatz's finding that the number and length of stalls
//! drive the QoE of YouTube (YOUQMON, ACM SIGMETRICS PER 2013). "Two stalls of less
//! than 4 s" is read as each shorter than 4 s:
//!
//! | MOS | stalls |
//! |---|---|
//! | 5 | none |
//! | 4 | one, shorter than 0.5 s |
//! | 3 | one, 0.5 s to 3 s |
//! | 2 | two, each shorter than 4 s; or one, over 3 s up to 8 s |
//! | 1 | anything worse |
//!
//! The model: the video (constant bitrate, `video_s` seconds) downloads at the
//! series' rate from time 0. Playback starts once `initial_buffer_s` of video is
//! buffered (start-up delay, not a stall). When the buffer empties before the end,
//! playback stalls until `rebuffer_s` of video is buffered again (or the rest of the
//! video, if less). Everything is piecewise linear, so events are solved exactly.

use serde::{Deserialize, Serialize};
use thiserror::Error;
use vantage_model::throughput::{Direction, Interval};

/// An encoding the player streams at a constant bitrate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct VideoProfile {
    pub name: &'static str,
    pub bitrate_bps: f64,
    pub description: &'static str,
}

/// The profiles of Rufini et al.: YouTube 360p to 1080p (at YouTube's recommended
/// encoding bitrates for standard frame rates), H.264 1080p at 10 Mbit/s and
/// MPEG-2 720p at 18 Mbit/s.
pub const PROFILES: &[VideoProfile] = &[
    VideoProfile {
        name: "youtube-360p",
        bitrate_bps: 1e6,
        description: "YouTube 360p, 1 Mbit/s",
    },
    VideoProfile {
        name: "youtube-480p",
        bitrate_bps: 2.5e6,
        description: "YouTube 480p, 2.5 Mbit/s",
    },
    VideoProfile {
        name: "youtube-720p",
        bitrate_bps: 5e6,
        description: "YouTube 720p, 5 Mbit/s",
    },
    VideoProfile {
        name: "youtube-1080p",
        bitrate_bps: 8e6,
        description: "YouTube 1080p, 8 Mbit/s",
    },
    VideoProfile {
        name: "h264-1080p",
        bitrate_bps: 10e6,
        description: "H.264 1920x1080, 10 Mbit/s",
    },
    VideoProfile {
        name: "mpeg2-720p",
        bitrate_bps: 18e6,
        description: "MPEG-2 1280x720, 18 Mbit/s",
    },
];

/// The profile named `name`.
pub fn profile(name: &str) -> Option<&'static VideoProfile> {
    PROFILES.iter().find(|profile| profile.name == name)
}

/// One step of a throughput series: `rate_bps` held for `duration_s`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateStep {
    pub duration_s: f64,
    pub rate_bps: f64,
}

/// What to play over the series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlaybackSpec {
    pub bitrate_bps: f64,
    pub video_s: f64,
    /// Video buffered before playback starts.
    pub initial_buffer_s: f64,
    /// Video buffered before playback resumes after a stall.
    pub rebuffer_s: f64,
    /// Repeat the series until the video has downloaded (a steady path measured for
    /// less time than the video lasts); otherwise a series that ends first is an error.
    pub loop_series: bool,
}

/// Times closer than this are the same instant (float rounding of event times).
const EPSILON_S: f64 = 1e-9;

/// Passes over a series before the model gives up (a near-zero rate).
const MAX_SERIES_PASSES: usize = 100_000;

/// One playback interruption.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// Seconds since the download began.
    pub start_s: f64,
    pub duration_s: f64,
    /// Position in the video where playback stopped.
    pub video_position_s: f64,
}

/// The model's outcome for one video over one series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlaybackOutcome {
    pub startup_delay_s: f64,
    pub stalls: Vec<Stall>,
    pub total_stall_s: f64,
    /// Seconds from the start of the download to the end of playback.
    pub finished_at_s: f64,
    pub mean_rate_bps: f64,
    /// Passes over the series the download took (more than 1 only when looping).
    pub series_passes: usize,
    pub mos: u8,
    /// The row of the MOS guideline that applied.
    pub mos_rule: String,
}

#[derive(Debug, Error, PartialEq)]
pub enum QoeError {
    #[error("the throughput series is empty")]
    EmptySeries,
    #[error("series step {index}: {field} must be a finite number ≥ 0 (got {value})")]
    InvalidStep {
        index: usize,
        field: &'static str,
        value: f64,
    },
    #[error("{field} must be a finite number > 0 (got {value})")]
    InvalidSpec { field: &'static str, value: f64 },
    #[error(
        "the series ({series_s:.1} s) ended with {downloaded_s:.1} s of the {video_s:.1} s video \
         downloaded; measure for longer, play a shorter video, or loop the series"
    )]
    SeriesTooShort {
        series_s: f64,
        downloaded_s: f64,
        video_s: f64,
    },
    #[error("the series carries no data: the video never downloads")]
    NoData,
}

/// The MOS guideline of Rufini et al. over stall durations (seconds), and the rule used.
pub fn mos_from_stalls(stall_durations_s: &[f64]) -> (u8, &'static str) {
    match stall_durations_s {
        [] => (5, "no stall"),
        [one] if *one < 0.5 => (4, "one stall shorter than 0.5 s"),
        [one] if *one <= 3.0 => (3, "one stall of 0.5 s to 3 s"),
        [one] if *one <= 8.0 => (2, "one stall over 3 s up to 8 s"),
        [a, b] if *a < 4.0 && *b < 4.0 => (2, "two stalls, each shorter than 4 s"),
        _ => (1, "longer or more stalls"),
    }
}

/// The series a player downloading in `direction` would see from a throughput
/// result's intervals: each interval's received bits over that direction's streams
/// (slow start included, as a player gets it; `None`: every stream).
pub fn series_from_intervals(
    intervals: &[Interval],
    direction: Option<Direction>,
) -> Vec<RateStep> {
    intervals
        .iter()
        .filter(|interval| interval.end_s > interval.start_s)
        .map(|interval| {
            let duration_s = interval.end_s - interval.start_s;
            let bytes: u64 = interval
                .streams
                .iter()
                .filter(|stream| direction.is_none_or(|wanted| stream.direction == wanted))
                .map(|stream| stream.bytes)
                .sum();
            RateStep {
                duration_s,
                rate_bps: bytes as f64 * 8.0 / duration_s,
            }
        })
        .collect()
}

/// The series' length.
pub fn series_duration_s(series: &[RateStep]) -> f64 {
    series.iter().map(|step| step.duration_s).sum()
}

/// The series' time-weighted mean rate (0 for a series of no time).
pub fn mean_rate_bps(series: &[RateStep]) -> f64 {
    let duration_s = series_duration_s(series);
    let bits: f64 = series.iter().map(|s| s.rate_bps * s.duration_s).sum();
    if duration_s > 0.0 {
        bits / duration_s
    } else {
        0.0
    }
}

fn check(spec: &PlaybackSpec, series: &[RateStep]) -> Result<(), QoeError> {
    for (field, value) in [
        ("bitrate_bps", spec.bitrate_bps),
        ("video_s", spec.video_s),
        ("initial_buffer_s", spec.initial_buffer_s),
        ("rebuffer_s", spec.rebuffer_s),
    ] {
        if !value.is_finite() || value <= 0.0 {
            return Err(QoeError::InvalidSpec { field, value });
        }
    }
    check_series(series)
}

/// A series the model can play: not empty, finite non-negative steps, some data.
pub fn check_series(series: &[RateStep]) -> Result<(), QoeError> {
    if series.is_empty() {
        return Err(QoeError::EmptySeries);
    }
    for (index, step) in series.iter().enumerate() {
        for (field, value) in [("duration_s", step.duration_s), ("rate_bps", step.rate_bps)] {
            if !value.is_finite() || value < 0.0 {
                return Err(QoeError::InvalidStep {
                    index,
                    field,
                    value,
                });
            }
        }
    }
    if series
        .iter()
        .all(|step| step.rate_bps * step.duration_s == 0.0)
    {
        return Err(QoeError::NoData);
    }
    Ok(())
}

/// The playback state between events.
struct Player {
    now_s: f64,
    /// Video seconds downloaded.
    downloaded_s: f64,
    /// Video seconds played.
    played_s: f64,
    started_at_s: Option<f64>,
    stall_started_at_s: Option<f64>,
    stalls: Vec<Stall>,
}

impl Player {
    /// Started and not stalled.
    fn playing(&self) -> bool {
        self.started_at_s.is_some() && self.stall_started_at_s.is_none()
    }

    fn buffered_s(&self) -> f64 {
        self.downloaded_s - self.played_s
    }

    /// Video buffered that lets playback (re)start: the threshold or the rest.
    fn resume_level_s(&self, spec: &PlaybackSpec) -> f64 {
        let threshold_s = if self.started_at_s.is_none() {
            spec.initial_buffer_s
        } else {
            spec.rebuffer_s
        };
        threshold_s.min(spec.video_s - self.played_s)
    }

    /// Advances through one step of `duration_s` downloading at `rate_bps`,
    /// handling every event inside it. Returns true once playback has finished.
    fn advance(&mut self, spec: &PlaybackSpec, mut duration_s: f64, rate_bps: f64) -> bool {
        loop {
            if self.played_s >= spec.video_s - EPSILON_S {
                return true;
            }
            // Download stops once the whole video is in.
            let fill = if self.downloaded_s < spec.video_s - EPSILON_S {
                rate_bps / spec.bitrate_bps
            } else {
                0.0
            };
            if !self.playing() {
                let missing_s = self.resume_level_s(spec) - self.buffered_s();
                if missing_s <= EPSILON_S {
                    match self.stall_started_at_s.take() {
                        Some(start_s) => self.stalls.push(Stall {
                            start_s,
                            duration_s: self.now_s - start_s,
                            video_position_s: self.played_s,
                        }),
                        None => self.started_at_s = Some(self.now_s),
                    }
                    continue;
                }
                if fill == 0.0 {
                    self.now_s += duration_s;
                    return false;
                }
                let wait_s = missing_s / fill;
                if wait_s > duration_s {
                    self.downloaded_s += fill * duration_s;
                    self.now_s += duration_s;
                    return false;
                }
                self.downloaded_s += missing_s;
                self.now_s += wait_s;
                duration_s -= wait_s;
                continue;
            }
            // Playing: the next event is the end of the video, the end of the
            // download, an empty buffer, or the end of this step.
            let to_end_s = spec.video_s - self.played_s;
            let to_download_s = if fill > 0.0 {
                (spec.video_s - self.downloaded_s) / fill
            } else {
                f64::INFINITY
            };
            let drain = 1.0 - fill;
            let to_empty_s = if drain > 0.0 {
                self.buffered_s() / drain
            } else {
                f64::INFINITY
            };
            let step_s = duration_s.min(to_end_s).min(to_download_s).min(to_empty_s);
            self.downloaded_s = (self.downloaded_s + fill * step_s).min(spec.video_s);
            self.played_s = (self.played_s + step_s).min(self.downloaded_s);
            self.now_s += step_s;
            duration_s -= step_s;
            if self.played_s >= spec.video_s - EPSILON_S {
                return true;
            }
            if self.buffered_s() <= EPSILON_S && step_s == to_empty_s {
                self.stall_started_at_s = Some(self.now_s);
            }
            if duration_s <= EPSILON_S {
                return false;
            }
        }
    }
}

/// Plays `spec`'s video over `series` and scores it.
pub fn play(spec: &PlaybackSpec, series: &[RateStep]) -> Result<PlaybackOutcome, QoeError> {
    check(spec, series)?;
    let mut player = Player {
        now_s: 0.0,
        downloaded_s: 0.0,
        played_s: 0.0,
        started_at_s: None,
        stall_started_at_s: None,
        stalls: Vec::new(),
    };
    let mut passes = 0;
    'outer: loop {
        passes += 1;
        for step in series {
            if player.advance(spec, step.duration_s, step.rate_bps) {
                break 'outer;
            }
        }
        let fully_downloaded = player.downloaded_s >= spec.video_s - EPSILON_S;
        if fully_downloaded {
            // The rest plays out of the buffer with no further download.
            player.advance(spec, f64::INFINITY, 0.0);
            break;
        }
        if !spec.loop_series {
            return Err(QoeError::SeriesTooShort {
                series_s: series_duration_s(series),
                downloaded_s: player.downloaded_s,
                video_s: spec.video_s,
            });
        }
        if passes >= MAX_SERIES_PASSES {
            return Err(QoeError::NoData);
        }
    }
    let durations: Vec<f64> = player.stalls.iter().map(|stall| stall.duration_s).collect();
    let (mos, rule) = mos_from_stalls(&durations);
    Ok(PlaybackOutcome {
        startup_delay_s: player.started_at_s.unwrap_or(player.now_s),
        // A fold from +0.0: an empty f64 sum is -0.0.
        total_stall_s: durations.iter().fold(0.0, |total, d| total + d),
        stalls: player.stalls,
        finished_at_s: player.now_s,
        mean_rate_bps: mean_rate_bps(series),
        series_passes: passes,
        mos,
        mos_rule: rule.to_string(),
    })
}

#[cfg(test)]
mod tests;
