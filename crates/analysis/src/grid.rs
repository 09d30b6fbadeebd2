//! A mesh grid cell's colour: one pair's recent values of a metric judged against
//! fixed thresholds and against the pair's own baseline, with hysteresis so that one
//! odd result does not repaint the cell (a cell changes state only after N
//! consecutive results agree, as perfSONAR's MaDDash grid does).

use serde::Serialize;

/// How a cell looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CellState {
    Ok,
    Warning,
    Critical,
}

impl CellState {
    pub fn as_str(self) -> &'static str {
        match self {
            CellState::Ok => "ok",
            CellState::Warning => "warning",
            CellState::Critical => "critical",
        }
    }
}

/// What counts as worse for one metric: absolute thresholds, and how far from its
/// own baseline a pair may move before that alone is a warning or critical.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MetricScale {
    pub metric: &'static str,
    /// Throughput and scores: lower is worse. Delays and loss: higher is worse.
    pub higher_is_better: bool,
    /// Absolute thresholds in the metric's unit; `None` judges by baseline only.
    pub warning: Option<f64>,
    pub critical: Option<f64>,
    /// A value this many times worse than the baseline (RTT 1.5× the usual, or a
    /// rate 1/1.5 of it) is a warning; `baseline_critical` times is critical.
    pub baseline_warning: f64,
    pub baseline_critical: f64,
    /// Departures from the baseline smaller than this are noise whatever their
    /// ratio (a loopback RTT moving from 20 to 45 µs is not news).
    pub min_change: f64,
}

/// The metrics a grid can be coloured by, with their defaults. Delay ceilings follow
/// ITU-T G.114 (150 ms one way is where conversation suffers: 300 ms of RTT is
/// critical); loss and delay-variation ceilings follow the ITU-T Y.1541 class 0/1
/// objectives (loss 1e-3, delay variation 50 ms).
pub const SCALES: &[MetricScale] = &[
    delay("rtt_median_us"),
    delay("rtt_p95_us"),
    MetricScale {
        metric: "jitter_us",
        higher_is_better: false,
        warning: Some(10_000.0),
        critical: Some(50_000.0),
        baseline_warning: 2.0,
        baseline_critical: 5.0,
        min_change: 1_000.0,
    },
    MetricScale {
        metric: "loss_ratio",
        higher_is_better: false,
        warning: Some(0.001),
        critical: Some(0.01),
        baseline_warning: 2.0,
        baseline_critical: 10.0,
        min_change: 0.005,
    },
    rate("received_bps"),
    rate("capacity_bps"),
];

/// An RTT in µs: G.114's thresholds, 1.5× / 3× the baseline, 1 ms of noise.
const fn delay(metric: &'static str) -> MetricScale {
    MetricScale {
        metric,
        higher_is_better: false,
        warning: Some(150_000.0),
        critical: Some(300_000.0),
        baseline_warning: 1.5,
        baseline_critical: 3.0,
        min_change: 1_000.0,
    }
}

/// A rate in bit/s: no universal threshold; 1/1.25 and 1/2 of the baseline.
const fn rate(metric: &'static str) -> MetricScale {
    MetricScale {
        metric,
        higher_is_better: true,
        warning: None,
        critical: None,
        baseline_warning: 1.25,
        baseline_critical: 2.0,
        min_change: 1e6,
    }
}

/// The scale of `metric`, if a grid can be coloured by it.
pub fn scale(metric: &str) -> Option<&'static MetricScale> {
    SCALES.iter().find(|scale| scale.metric == metric)
}

/// Fewest earlier values that make a baseline.
pub const MIN_BASELINE_VALUES: usize = 3;

/// Most consecutive results hysteresis may ask for (MaDDash's default was 3).
pub const MAX_HYSTERESIS: usize = 10;

/// A pair is judged on its newest values only, at most this many: with the longest
/// hysteresis that leaves 30 earlier values for the baseline, and it bounds what a
/// server keeps in memory per pair.
pub const MAX_JUDGED_VALUES: usize = 40;

/// A cell whose newest result is older than this many of its usual spacings has
/// missed its schedule: it is stale.
pub const STALE_SPACINGS: f64 = 3.0;

/// The judged cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// The newest value.
    pub value: f64,
    /// Median of the values before the newest `hysteresis` ones; `None` with fewer
    /// than [`MIN_BASELINE_VALUES`] of them.
    pub baseline: Option<f64>,
    /// The colour, after hysteresis.
    pub state: CellState,
    /// What the newest value alone says.
    pub latest_state: CellState,
    /// Median spacing of the results, when there are two or more.
    pub spacing_us: Option<i64>,
    /// How many values were judged (at most [`MAX_JUDGED_VALUES`]).
    pub values: usize,
}

impl MetricScale {
    /// One value against the thresholds and the baseline: the worse of the two.
    pub fn classify(&self, value: f64, baseline: Option<f64>) -> CellState {
        let worse_than = |limit: f64| {
            if self.higher_is_better {
                value < limit
            } else {
                value > limit
            }
        };
        let absolute = if self.critical.is_some_and(worse_than) {
            CellState::Critical
        } else if self.warning.is_some_and(worse_than) {
            CellState::Warning
        } else {
            CellState::Ok
        };
        let relative = baseline.map_or(CellState::Ok, |baseline| {
            let (worse, better) = if self.higher_is_better {
                (baseline, value)
            } else {
                (value, baseline)
            };
            // How many times worse, as a ratio ≥ 1 when worse; a zero denominator
            // (no loss usually, no rate now) is infinitely worse.
            if worse - better < self.min_change {
                CellState::Ok
            } else if better <= 0.0 || worse / better >= self.baseline_critical {
                CellState::Critical
            } else if worse / better >= self.baseline_warning {
                CellState::Warning
            } else {
                CellState::Ok
            }
        });
        absolute.max(relative)
    }

    /// Judges one pair's values (oldest first, as `(start_us, value)`; only the
    /// newest [`MAX_JUDGED_VALUES`] count) with `hysteresis` (1 to
    /// [`MAX_HYSTERESIS`]) consecutive results needed to change the state; `None`
    /// when there are none.
    pub fn judge(&self, values: &[(i64, f64)], hysteresis: usize) -> Option<Cell> {
        let values = &values[values.len().saturating_sub(MAX_JUDGED_VALUES)..];
        let &(_, value) = values.last()?;
        let hysteresis = hysteresis.clamp(1, MAX_HYSTERESIS);
        let history = &values[..values.len().saturating_sub(hysteresis)];
        let baseline = (history.len() >= MIN_BASELINE_VALUES)
            .then(|| median(history.iter().map(|&(_, value)| value).collect()));
        let mut state = None;
        let mut candidate = CellState::Ok;
        let mut streak = 0;
        for &(_, value) in values {
            let class = self.classify(value, baseline);
            if class == candidate {
                streak += 1;
            } else {
                candidate = class;
                streak = 1;
            }
            // The first result sets the state; later ones change it only in a run.
            if state.is_none() || streak >= hysteresis {
                state = Some(candidate);
            }
        }
        let spacings: Vec<f64> = values
            .windows(2)
            .map(|pair| (pair[1].0 - pair[0].0) as f64)
            .collect();
        Some(Cell {
            value,
            baseline,
            state: state.unwrap_or(CellState::Ok),
            latest_state: self.classify(value, baseline),
            spacing_us: (!spacings.is_empty()).then(|| median(spacings) as i64),
            values: values.len(),
        })
    }
}

/// Whether a cell with newest result at `newest_us` is stale at `now_us`: older than
/// [`STALE_SPACINGS`] of its spacing, or than `fallback_us` when its spacing is
/// unknown.
pub fn is_stale(newest_us: i64, spacing_us: Option<i64>, now_us: i64, fallback_us: i64) -> bool {
    let allowed = spacing_us.map_or(fallback_us, |spacing| {
        (spacing as f64 * STALE_SPACINGS) as i64
    });
    now_us - newest_us > allowed
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 0 {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rtt() -> &'static MetricScale {
        scale("rtt_median_us").unwrap()
    }

    fn series(values: &[f64]) -> Vec<(i64, f64)> {
        values
            .iter()
            .enumerate()
            .map(|(index, &value)| (index as i64 * 5_000_000, value))
            .collect()
    }

    #[test]
    fn absolute_thresholds_and_baseline_take_the_worse() {
        // 200 ms RTT is past G.114's warning whatever the baseline.
        assert_eq!(rtt().classify(200_000.0, None), CellState::Warning);
        assert_eq!(rtt().classify(400_000.0, None), CellState::Critical);
        // 12 ms against a 5 ms baseline: 2.4× and 7 ms more, a warning.
        assert_eq!(rtt().classify(12_000.0, Some(5_000.0)), CellState::Warning);
        // 16 ms against 5 ms: 3.2×, critical.
        assert_eq!(rtt().classify(16_000.0, Some(5_000.0)), CellState::Critical);
        // 60 µs against 20 µs is 3× but under the 1 ms noise floor.
        assert_eq!(rtt().classify(60.0, Some(20.0)), CellState::Ok);
    }

    #[test]
    fn rates_are_worse_when_lower_and_zero_is_critical() {
        let rate = scale("received_bps").unwrap();
        assert_eq!(rate.classify(90e6, Some(100e6)), CellState::Ok);
        // 100/70 = 1.43 ≥ 1.25: warning; 100/40 = 2.5 ≥ 2: critical.
        assert_eq!(rate.classify(70e6, Some(100e6)), CellState::Warning);
        assert_eq!(rate.classify(40e6, Some(100e6)), CellState::Critical);
        assert_eq!(rate.classify(0.0, Some(100e6)), CellState::Critical);
        // No thresholds and no baseline: nothing to say against it.
        assert_eq!(rate.classify(1e3, None), CellState::Ok);
    }

    #[test]
    fn hysteresis_needs_n_consecutive_results_to_change_colour() {
        // Baseline 5 ms from the first five; two 20 ms results are not yet three.
        let values = series(&[5e3, 5e3, 5e3, 5e3, 5e3, 20e3, 20e3]);
        let cell = rtt().judge(&values, 3).unwrap();
        assert_eq!(cell.baseline, Some(5e3));
        assert_eq!(cell.latest_state, CellState::Critical);
        assert_eq!(cell.state, CellState::Ok);
        // The third one turns it.
        let values = series(&[5e3, 5e3, 5e3, 5e3, 5e3, 20e3, 20e3, 20e3]);
        assert_eq!(rtt().judge(&values, 3).unwrap().state, CellState::Critical);
        // One good result between bad ones resets the run.
        let values = series(&[5e3, 5e3, 5e3, 5e3, 5e3, 20e3, 20e3, 5e3, 20e3, 20e3]);
        assert_eq!(rtt().judge(&values, 3).unwrap().state, CellState::Ok);
        // Hysteresis 1 follows every result.
        let values = series(&[5e3, 5e3, 5e3, 5e3, 20e3]);
        assert_eq!(rtt().judge(&values, 1).unwrap().state, CellState::Critical);
    }

    #[test]
    fn the_first_result_sets_the_state_and_too_few_make_no_baseline() {
        let cell = rtt().judge(&series(&[400_000.0]), 3).unwrap();
        assert_eq!(cell.state, CellState::Critical);
        assert_eq!(cell.baseline, None);
        assert_eq!(cell.spacing_us, None);
        assert!(rtt().judge(&[], 3).is_none());
        let cell = rtt().judge(&series(&[1e3, 2e3, 3e3, 4e3]), 2).unwrap();
        assert_eq!(cell.baseline, None, "two earlier values are too few");
        assert_eq!(cell.spacing_us, Some(5_000_000));
    }

    #[test]
    fn only_the_newest_values_are_judged() {
        // 60 old results at 50 ms, then 40 at 5 ms: the baseline is the median of the
        // 37 judged values before the newest 3 (5 ms), not of all 97 (50 ms).
        let mut values = vec![50e3; 60];
        values.extend([5e3; 40]);
        let cell = rtt().judge(&series(&values), 3).unwrap();
        assert_eq!(cell.baseline, Some(5e3));
        assert_eq!(cell.state, CellState::Ok);
        assert_eq!(cell.values, MAX_JUDGED_VALUES);
        // Hysteresis past the most allowed counts as the most allowed.
        let mut values = vec![5e3; 30];
        values.extend([20e3; MAX_HYSTERESIS]);
        let cell = rtt().judge(&series(&values), 50).unwrap();
        assert_eq!(cell.state, CellState::Critical);
    }

    #[test]
    fn a_cell_is_stale_after_three_missed_spacings() {
        assert!(!is_stale(0, Some(5_000_000), 15_000_000, 60_000_000));
        assert!(is_stale(0, Some(5_000_000), 15_000_001, 60_000_000));
        assert!(!is_stale(0, None, 60_000_000, 60_000_000));
        assert!(is_stale(0, None, 60_000_001, 60_000_000));
    }
}
