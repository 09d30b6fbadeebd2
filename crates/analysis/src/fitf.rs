//! InfiniBand congestion from `PortXmitWait`: the forced idle time fraction (FITF)
//! of Alali (PhD dissertation, University of Virginia, 2019, ch. 2).
//!
//! `PortXmitWait` counts the ticks during which a port had data to send but no
//! credits from the next hop. Between two consecutive reads `i` and `i + 1` of one
//! round (Eq. 2.3):
//!
//! ```text
//! F[i] = tick_ns · (W[i+1] − W[i]) / ((tq[i+1] + tp[i+1]/2) − (tq[i] + tp[i]/2))
//! ```
//!
//! where `tq` is the time just before the read and `tp` its turnaround, so each value
//! is taken as read half-way through its call. One tick is 22 ns on an FDR port (the
//! dissertation's figure, [`FDR_TICK_NS`]); the tick of other speeds is not given
//! there, so callers pass it. FITF above 1 is possible (the real read instants differ
//! from the half-turnaround estimate) and reads as "stalled for the whole interval".
//!
//! Counters are never reset here: only deltas between consecutive reads count.
//! A decrease between two values below 2³² is a wrap of the 32-bit `PortCounters`
//! field (the delta is taken modulo 2³²); a decrease involving a 64-bit
//! (`PortCountersExtended`) value is a reset by someone else, and the interval is
//! dropped and counted. An interval that ends on 0xFFFFFFFF (a saturated 32-bit
//! counter) has no known delta: it is counted as saturated, never as a zero.
//!
//! Class statistics follow the dissertation's Tables 2.1–2.2 and Figs. 2.5–2.7: zero
//! and non-zero shares of intervals, the per-round maximum and the per-round mean over
//! non-zero entries of the rounds with any non-zero entry, as boxplots with 1.5 × IQR
//! outliers reported separately.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;
use vantage_model::csv_table::{CsvError, CsvTable};

/// One `PortXmitWait` tick on a 4x FDR port, in nanoseconds (Alali 2019, ch. 2).
pub const FDR_TICK_NS: f64 = 22.0;

/// The largest value of the 32-bit `PortCounters` field, where it saturates.
pub const COUNTER32_MAX: u64 = u32::MAX as u64;

/// The label of reads without a class.
pub const UNCLASSIFIED: &str = "unclassified";

/// The tick of a port whose sysfs `rate` reads `rate` (e.g. "56 Gb/sec (4X FDR)"):
/// known only for FDR, the speed the dissertation measured.
pub fn tick_ns_for_rate(rate: &str) -> Option<f64> {
    rate.contains("FDR").then_some(FDR_TICK_NS)
}

/// One read of a port's `PortXmitWait` (Eq. 2.1, with the class of Eq. 2.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XmitWaitRead {
    /// Reads with the same round, switch and port form one round.
    pub round: u64,
    /// The switch's LID or a name.
    pub switch: String,
    pub port: u32,
    /// The port's class, e.g. "Leaf,down" (switch category and direction).
    pub class: Option<String>,
    /// Nanoseconds since the epoch just before the read was issued.
    pub t_query_ns: u64,
    /// How long the read took.
    pub t_turnaround_ns: u64,
    pub xmit_wait: u64,
}

#[derive(Debug, Error, PartialEq)]
pub enum FitfError {
    #[error("tick_ns must be a finite number > 0 (got {0})")]
    InvalidTick(f64),
    #[error(
        "round {round} of {switch} port {port}: read {index} is not later than the read before it"
    )]
    TimeNotIncreasing {
        round: u64,
        switch: String,
        port: u32,
        index: usize,
    },
    #[error("round {round} of {switch} port {port}: the class changes within the round")]
    ClassChanged {
        round: u64,
        switch: String,
        port: u32,
    },
    #[error(transparent)]
    Csv(#[from] CsvError),
    #[error("line {line}, column {column}: {message}")]
    Field {
        line: usize,
        column: String,
        message: String,
    },
    #[error("no reads")]
    NoReads,
    #[error("no PortXmitWait line in the perfquery output")]
    NoXmitWait,
    #[error("perfquery output line {line}: '{value}' is not a counter value")]
    BadPerfqueryValue { line: usize, value: String },
}

/// One round's FITF vector and what was left out of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundFitf {
    pub round: u64,
    pub switch: String,
    pub port: u32,
    pub class: String,
    /// FITF of each interval with a known delta, in time order.
    pub fitf: Vec<f64>,
    /// Intervals whose delta was taken modulo 2³² (included in `fitf`).
    pub wrapped: usize,
    /// Intervals ending on a saturated 32-bit counter (not in `fitf`).
    pub saturated: usize,
    /// Intervals across a reset of the counter (not in `fitf`).
    pub reset: usize,
}

/// The delta between two consecutive counter values, or why there is none.
enum Delta {
    Ticks(u64),
    Wrapped(u64),
    Saturated,
    Reset,
}

fn delta(before: u64, after: u64) -> Delta {
    if after == COUNTER32_MAX {
        Delta::Saturated
    } else if after >= before {
        Delta::Ticks(after - before)
    } else if before <= COUNTER32_MAX {
        Delta::Wrapped(after + (COUNTER32_MAX + 1) - before)
    } else {
        Delta::Reset
    }
}

/// Twice the instant a read is taken at (`2·tq + tp`), kept whole to stay exact.
fn double_midpoint_ns(read: &XmitWaitRead) -> i128 {
    2 * i128::from(read.t_query_ns) + i128::from(read.t_turnaround_ns)
}

/// The FITF vector of each round (Eq. 2.3), rounds in the order they first appear.
/// Reads of one round must be in time order.
pub fn fitf_rounds(reads: &[XmitWaitRead], tick_ns: f64) -> Result<Vec<RoundFitf>, FitfError> {
    if !(tick_ns.is_finite() && tick_ns > 0.0) {
        return Err(FitfError::InvalidTick(tick_ns));
    }
    let mut order: Vec<(u64, &str, u32)> = Vec::new();
    let mut by_round: BTreeMap<(u64, &str, u32), Vec<&XmitWaitRead>> = BTreeMap::new();
    for read in reads {
        let key = (read.round, read.switch.as_str(), read.port);
        let entry = by_round.entry(key).or_default();
        if entry.is_empty() {
            order.push(key);
        }
        entry.push(read);
    }
    order
        .into_iter()
        .map(|key| round_fitf(&by_round[&key], tick_ns))
        .collect()
}

fn round_fitf(reads: &[&XmitWaitRead], tick_ns: f64) -> Result<RoundFitf, FitfError> {
    let first = reads[0];
    let mut round = RoundFitf {
        round: first.round,
        switch: first.switch.clone(),
        port: first.port,
        class: first
            .class
            .clone()
            .unwrap_or_else(|| UNCLASSIFIED.to_string()),
        fitf: Vec::with_capacity(reads.len().saturating_sub(1)),
        wrapped: 0,
        saturated: 0,
        reset: 0,
    };
    for (index, pair) in reads.windows(2).enumerate() {
        let (before, after) = (pair[0], pair[1]);
        if after.class != first.class {
            return Err(FitfError::ClassChanged {
                round: first.round,
                switch: first.switch.clone(),
                port: first.port,
            });
        }
        let span_double_ns = double_midpoint_ns(after) - double_midpoint_ns(before);
        if span_double_ns <= 0 {
            return Err(FitfError::TimeNotIncreasing {
                round: first.round,
                switch: first.switch.clone(),
                port: first.port,
                index: index + 1,
            });
        }
        let ticks = match delta(before.xmit_wait, after.xmit_wait) {
            Delta::Ticks(ticks) => ticks,
            Delta::Wrapped(ticks) => {
                round.wrapped += 1;
                ticks
            }
            Delta::Saturated => {
                round.saturated += 1;
                continue;
            }
            Delta::Reset => {
                round.reset += 1;
                continue;
            }
        };
        round
            .fitf
            .push(tick_ns * ticks as f64 * 2.0 / span_double_ns as f64);
    }
    Ok(round)
}

/// A boxplot's figures with Tukey's whiskers: quartiles by linear interpolation
/// (Hyndman & Fan type 7), whiskers at the most extreme values within 1.5 × IQR of
/// the quartiles, the values beyond them as outliers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Boxplot {
    pub n: usize,
    pub q1: f64,
    pub median: f64,
    pub q3: f64,
    pub whisker_low: f64,
    pub whisker_high: f64,
    pub outliers: usize,
    pub outlier_min: Option<f64>,
    pub outlier_max: Option<f64>,
}

/// [`Boxplot`] of finite values; `None` when there are none.
pub fn boxplot(values: &[f64]) -> Option<Boxplot> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let q1 = vantage_stats::percentile(&sorted, 25.0)?;
    let median = vantage_stats::percentile(&sorted, 50.0)?;
    let q3 = vantage_stats::percentile(&sorted, 75.0)?;
    let iqr = q3 - q1;
    let (low_fence, high_fence) = (q1 - 1.5 * iqr, q3 + 1.5 * iqr);
    let inside = |v: &&f64| **v >= low_fence && **v <= high_fence;
    let outliers: Vec<f64> = sorted.iter().copied().filter(|v| !inside(&v)).collect();
    Some(Boxplot {
        n: sorted.len(),
        q1,
        median,
        q3,
        whisker_low: *sorted.iter().find(inside)?,
        whisker_high: *sorted.iter().rev().find(inside)?,
        outliers: outliers.len(),
        outlier_min: outliers.first().copied(),
        outlier_max: outliers.last().copied(),
    })
}

/// One class's statistics (Tables 2.1–2.2, Figs. 2.5–2.7).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassStats {
    pub class: String,
    pub rounds: usize,
    /// Intervals with a known FITF (the observations of Fig. 2.5).
    pub intervals: usize,
    pub zero_intervals: usize,
    pub nonzero_intervals: usize,
    /// `nonzero_intervals / intervals` (`None` without intervals).
    pub nonzero_share: Option<f64>,
    /// Rounds with at least one non-zero FITF.
    pub nonzero_rounds: usize,
    /// The maximum FITF of each non-zero round (Fig. 2.6, Table 2.2).
    pub round_max: Option<Boxplot>,
    /// The mean of each non-zero round's non-zero entries (Fig. 2.7).
    pub round_nonzero_mean: Option<Boxplot>,
    /// Rounds whose maximum FITF is 1 or more (stalled for a whole interval).
    pub rounds_max_at_least_one: usize,
    pub wrapped_intervals: usize,
    pub saturated_intervals: usize,
    /// Intervals dropped across a counter reset.
    pub reset_intervals: usize,
}

/// Statistics per class, classes in name order.
pub fn class_stats(rounds: &[RoundFitf]) -> Vec<ClassStats> {
    let mut by_class: BTreeMap<&str, Vec<&RoundFitf>> = BTreeMap::new();
    for round in rounds {
        by_class.entry(&round.class).or_default().push(round);
    }
    by_class
        .into_iter()
        .map(|(class, rounds)| {
            let intervals: usize = rounds.iter().map(|r| r.fitf.len()).sum();
            let nonzero_intervals: usize = rounds
                .iter()
                .map(|r| r.fitf.iter().filter(|f| **f > 0.0).count())
                .sum();
            let mut maxima = Vec::new();
            let mut means = Vec::new();
            for round in &rounds {
                let nonzero: Vec<f64> = round.fitf.iter().copied().filter(|f| *f > 0.0).collect();
                if nonzero.is_empty() {
                    continue;
                }
                maxima.push(nonzero.iter().copied().fold(f64::MIN, f64::max));
                means.push(nonzero.iter().sum::<f64>() / nonzero.len() as f64);
            }
            ClassStats {
                class: class.to_string(),
                rounds: rounds.len(),
                intervals,
                zero_intervals: intervals - nonzero_intervals,
                nonzero_intervals,
                nonzero_share: (intervals > 0).then(|| nonzero_intervals as f64 / intervals as f64),
                nonzero_rounds: maxima.len(),
                rounds_max_at_least_one: maxima.iter().filter(|m| **m >= 1.0).count(),
                round_max: boxplot(&maxima),
                round_nonzero_mean: boxplot(&means),
                wrapped_intervals: rounds.iter().map(|r| r.wrapped).sum(),
                saturated_intervals: rounds.iter().map(|r| r.saturated).sum(),
                reset_intervals: rounds.iter().map(|r| r.reset).sum(),
            }
        })
        .collect()
}

/// The columns of a reads CSV, in the order [`to_csv`] writes them.
pub const CSV_COLUMNS: [&str; 7] = [
    "round",
    "switch",
    "port",
    "class",
    "t_query_ns",
    "t_turnaround_ns",
    "xmit_wait",
];

/// Reads from CSV text: a header naming the columns (any order; `class` optional),
/// then one read per line. Blank lines and `#` comments are skipped. A class with a
/// comma (e.g. "Leaf,down") is written in double quotes.
pub fn parse_csv(text: &str) -> Result<Vec<XmitWaitRead>, FitfError> {
    let table = match CsvTable::parse(text) {
        Err(CsvError::NoHeader) => return Err(FitfError::NoReads),
        parsed => parsed?,
    };
    let round = table.column("round")?;
    let switch = table.column("switch")?;
    let port = table.column("port")?;
    let t_query = table.column("t_query_ns")?;
    let t_turnaround = table.column("t_turnaround_ns")?;
    let xmit_wait = table.column("xmit_wait")?;
    let class = table.optional_column("class");
    let mut reads = Vec::new();
    for row in &table.rows {
        let fields = &row.fields;
        let number = |index: usize| -> Result<u64, FitfError> {
            fields[index].parse::<u64>().map_err(|_| FitfError::Field {
                line: row.line,
                column: table.header[index].clone(),
                message: format!("'{}' is not an unsigned integer", fields[index]),
            })
        };
        let port_number = number(port)?;
        reads.push(XmitWaitRead {
            round: number(round)?,
            switch: fields[switch].clone(),
            port: u32::try_from(port_number).map_err(|_| FitfError::Field {
                line: row.line,
                column: "port".to_string(),
                message: format!("{port_number} is not a port number"),
            })?,
            class: class
                .map(|index| fields[index].clone())
                .filter(|class| !class.is_empty()),
            t_query_ns: number(t_query)?,
            t_turnaround_ns: number(t_turnaround)?,
            xmit_wait: number(xmit_wait)?,
        });
    }
    if reads.is_empty() {
        return Err(FitfError::NoReads);
    }
    Ok(reads)
}

/// Reads as CSV with a header, in [`CSV_COLUMNS`] order; [`parse_csv`] reads it back.
pub fn to_csv(reads: &[XmitWaitRead]) -> String {
    let quote = |text: &str| {
        if text.contains([',', '"']) {
            format!("\"{}\"", text.replace('"', "\"\""))
        } else {
            text.to_string()
        }
    };
    let mut text = CSV_COLUMNS.join(",") + "\n";
    for read in reads {
        text += &format!(
            "{},{},{},{},{},{},{}\n",
            read.round,
            quote(&read.switch),
            read.port,
            quote(read.class.as_deref().unwrap_or_default()),
            read.t_query_ns,
            read.t_turnaround_ns,
            read.xmit_wait
        );
    }
    text
}

/// `PortXmitWait` as `perfquery` prints it, with the LID and port of its block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PerfqueryRead {
    pub lid: Option<u32>,
    pub port: Option<u32>,
    pub xmit_wait: u64,
    /// Read from the extended (64-bit) counters block (`perfquery -x`).
    pub extended: bool,
}

/// `PortXmitWait` from `perfquery` or `perfquery -x` output: blocks headed
/// `# Port counters: Lid L port P` or `# Port extended counters: Lid L port P (…)`,
/// lines `Name:....value`. The extended block's value wins when both are present
/// (it is 64-bit).
pub fn parse_perfquery(text: &str) -> Result<PerfqueryRead, FitfError> {
    let mut block: (Option<u32>, Option<u32>, bool) = (None, None, false);
    let mut found: Option<PerfqueryRead> = None;
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('#') {
            let words: Vec<&str> = header.split_whitespace().collect();
            let after = |name: &str| {
                words
                    .iter()
                    .position(|word| *word == name)
                    .and_then(|at| words.get(at + 1))
                    .and_then(|word| word.parse::<u32>().ok())
            };
            block = (after("Lid"), after("port"), header.contains("extended"));
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if name.trim() != "PortXmitWait" {
            continue;
        }
        let value = value.trim_start_matches('.').trim();
        let xmit_wait = value
            .parse::<u64>()
            .map_err(|_| FitfError::BadPerfqueryValue {
                line: index + 1,
                value: value.to_string(),
            })?;
        let read = PerfqueryRead {
            lid: block.0,
            port: block.1,
            xmit_wait,
            extended: block.2,
        };
        if found.as_ref().is_none_or(|earlier| !earlier.extended) {
            found = Some(read);
        }
    }
    found.ok_or(FitfError::NoXmitWait)
}

#[cfg(test)]
mod tests;
