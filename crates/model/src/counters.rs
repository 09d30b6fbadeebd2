//! Interface counters (`vantage counters`, test kind `counters`): a host's network
//! interface counters sampled every interval — the passive counters of Narada Metrics
//! (Bazan-Antequera et al., c. 2016: BytesReceivedPerSec / BytesSentPerSec, sampled every
//! 10 s "to keep passive measurement non-intrusive") — and the per-interval deltas and
//! rates between consecutive samples.
//!
//! Counters only grow, so a decrease is either a wrap or a reset. A decrease is read
//! as one wrap of the counter's width (2³² or 2⁶⁴) only when the wrapped delta is less
//! than half that range, the rule of serial number arithmetic (RFC 1982): a larger
//! one cannot be told from a reset, so the interval says "counter reset" for that
//! counter and has no delta and no rate for it. The first sample gives no interval:
//! a counter's absolute value says nothing about the run.
//!
//! Field names are the JSON contract of docs/json-schema.md; units are in the names.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The counters sampled per interface, in the order tables list them (Linux names them
/// so in `/sys/class/net/IFACE/statistics/`).
pub const COUNTER_NAMES: [&str; 8] = [
    "rx_bytes",
    "tx_bytes",
    "rx_packets",
    "tx_packets",
    "rx_errors",
    "tx_errors",
    "rx_dropped",
    "tx_dropped",
];

/// The width of the interface's counters: where they wrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CounterWidth {
    /// 32-bit counters (32-bit kernels, drivers exposing 32-bit hardware registers).
    #[serde(rename = "32")]
    Bits32,
    /// 64-bit counters (`rtnl_link_stats64`, what Linux sysfs reports on 64-bit kernels).
    #[default]
    #[serde(rename = "64")]
    Bits64,
}

impl CounterWidth {
    pub fn bits(self) -> u32 {
        match self {
            CounterWidth::Bits32 => 32,
            CounterWidth::Bits64 => 64,
        }
    }

    /// 2^bits, the number of values the counter takes.
    fn range(self) -> u128 {
        1u128 << self.bits()
    }
}

/// One value per counter of an interface: its readings, an interval's deltas (`None`
/// for a counter that reset) or totals. Flattened into the documents that hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Counters<T> {
    pub rx_bytes: T,
    pub tx_bytes: T,
    pub rx_packets: T,
    pub tx_packets: T,
    pub rx_errors: T,
    pub tx_errors: T,
    pub rx_dropped: T,
    pub tx_dropped: T,
}

/// One interface's counter values at one instant, as read.
pub type CounterValues = Counters<u64>;

impl<T: Copy> Counters<T> {
    /// The values in [`COUNTER_NAMES`] order.
    pub fn to_array(&self) -> [T; 8] {
        [
            self.rx_bytes,
            self.tx_bytes,
            self.rx_packets,
            self.tx_packets,
            self.rx_errors,
            self.tx_errors,
            self.rx_dropped,
            self.tx_dropped,
        ]
    }

    /// Values in [`COUNTER_NAMES`] order.
    pub fn from_array(values: [T; 8]) -> Counters<T> {
        let [rx_bytes, tx_bytes, rx_packets, tx_packets, rx_errors, tx_errors, rx_dropped, tx_dropped] =
            values;
        Counters {
            rx_bytes,
            tx_bytes,
            rx_packets,
            tx_packets,
            rx_errors,
            tx_errors,
            rx_dropped,
            tx_dropped,
        }
    }
}

/// One sample of one interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSample {
    /// Wall-clock time of the read.
    pub time: DateTime<Utc>,
    /// Monotonic nanoseconds since the run's first read: interval lengths come from
    /// these, so a wall-clock step does not change a rate.
    pub elapsed_ns: u64,
    pub values: CounterValues,
}

/// What a run was asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountersSpec {
    /// Interfaces to sample; empty means every interface of the host but loopback.
    #[serde(default)]
    pub interfaces: Vec<String>,
    /// Time between samples, in microseconds.
    pub interval_us: u64,
    /// Intervals to report (the run reads `count + 1` samples).
    pub count: u32,
    #[serde(default)]
    pub counter_bits: CounterWidth,
}

/// One counter across one interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterDelta {
    /// The counter grew by this much.
    Counted(u64),
    /// The counter wrapped once and grew by this much in all.
    Wrapped(u64),
    /// The counter went backwards by more than a wrap explains: no delta.
    Reset,
}

impl CounterDelta {
    pub fn value(self) -> Option<u64> {
        match self {
            CounterDelta::Counted(delta) | CounterDelta::Wrapped(delta) => Some(delta),
            CounterDelta::Reset => None,
        }
    }
}

/// The change of a counter from `before` to `after`, read at `width`.
pub fn counter_delta(before: u64, after: u64, width: CounterWidth) -> CounterDelta {
    if after >= before {
        return CounterDelta::Counted(after - before);
    }
    let range = width.range();
    let (before, after) = (u128::from(before), u128::from(after));
    // A value the width cannot hold means the counter is not of that width: no wrap.
    if before >= range || after >= range {
        return CounterDelta::Reset;
    }
    let wrapped = range - before + after;
    if wrapped < range / 2 {
        CounterDelta::Wrapped(wrapped as u64)
    } else {
        CounterDelta::Reset
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum CountersError {
    #[error("interface {interface}: sample {index} was not taken after the one before it")]
    TimeNotIncreasing { interface: String, index: usize },
}

/// One interval of one interface: deltas and rates, `None` for a counter that reset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterInterval {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// Measured length (monotonic clock), in seconds.
    pub interval_s: f64,
    /// Each counter's delta; `None` for a counter that reset.
    #[serde(flatten)]
    pub deltas: Counters<Option<u64>>,
    /// Receive and transmit rates in bits per second (the paper's BytesReceivedPerSec ×
    /// 8 and BytesSentPerSec × 8).
    pub rx_rate_bps: Option<f64>,
    pub tx_rate_bps: Option<f64>,
    pub rx_packets_per_s: Option<f64>,
    pub tx_packets_per_s: Option<f64>,
    /// Counters that wrapped in this interval (their deltas include the wrap).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wrapped: Vec<String>,
    /// Counters that reset in this interval (their deltas and rates are `null`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counter_reset: Vec<String>,
}

/// Sums over intervals: each counter over the intervals where it has a delta.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CounterTotals {
    pub intervals: usize,
    /// Intervals in which some counter reset.
    pub reset_intervals: usize,
    /// Intervals in which some counter wrapped.
    pub wrapped_intervals: usize,
    #[serde(flatten)]
    pub counts: Counters<u64>,
    /// Mean rates over the time the byte counter was known; `None` without such time.
    pub rx_rate_bps: Option<f64>,
    pub tx_rate_bps: Option<f64>,
}

/// One interface's intervals and their totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterfaceCounters {
    pub interface: String,
    pub intervals: Vec<CounterInterval>,
    pub totals: CounterTotals,
}

/// A run's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CountersResult {
    /// The interval asked for, in seconds (each interval's measured length is its own).
    pub interval_s: f64,
    pub counter_bits: CounterWidth,
    pub interfaces: Vec<InterfaceCounters>,
    /// Totals over every interface sampled; its rates are the sums of the
    /// interfaces' mean rates.
    pub summary: CounterTotals,
}

fn rate(delta: Option<u64>, seconds: f64, scale: f64) -> Option<f64> {
    delta
        .filter(|_| seconds > 0.0)
        .map(|delta| delta as f64 * scale / seconds)
}

/// The intervals between consecutive samples of one interface.
pub fn intervals(
    interface: &str,
    samples: &[CounterSample],
    width: CounterWidth,
) -> Result<Vec<CounterInterval>, CountersError> {
    samples
        .windows(2)
        .enumerate()
        .map(|(index, pair)| {
            let (before, after) = (&pair[0], &pair[1]);
            if after.elapsed_ns <= before.elapsed_ns {
                return Err(CountersError::TimeNotIncreasing {
                    interface: interface.to_string(),
                    index: index + 1,
                });
            }
            let interval_s = (after.elapsed_ns - before.elapsed_ns) as f64 / 1e9;
            let mut wrapped = Vec::new();
            let mut counter_reset = Vec::new();
            let mut deltas = [None; 8];
            let values = before
                .values
                .to_array()
                .into_iter()
                .zip(after.values.to_array());
            for (slot, (name, (from, to))) in COUNTER_NAMES.iter().zip(values).enumerate() {
                let delta = counter_delta(from, to, width);
                match delta {
                    CounterDelta::Counted(_) => {}
                    CounterDelta::Wrapped(_) => wrapped.push(name.to_string()),
                    CounterDelta::Reset => counter_reset.push(name.to_string()),
                }
                deltas[slot] = delta.value();
            }
            let deltas = Counters::from_array(deltas);
            Ok(CounterInterval {
                start: before.time,
                end: after.time,
                interval_s,
                rx_rate_bps: rate(deltas.rx_bytes, interval_s, 8.0),
                tx_rate_bps: rate(deltas.tx_bytes, interval_s, 8.0),
                rx_packets_per_s: rate(deltas.rx_packets, interval_s, 1.0),
                tx_packets_per_s: rate(deltas.tx_packets, interval_s, 1.0),
                deltas,
                wrapped,
                counter_reset,
            })
        })
        .collect()
}

/// Totals over intervals (of one interface or several).
pub fn totals<'a>(intervals: impl IntoIterator<Item = &'a CounterInterval>) -> CounterTotals {
    let mut sums = [0u64; 8];
    let (mut rx_seconds, mut tx_seconds) = (0.0, 0.0);
    let mut totals = CounterTotals::default();
    for interval in intervals {
        totals.intervals += 1;
        totals.reset_intervals += usize::from(!interval.counter_reset.is_empty());
        totals.wrapped_intervals += usize::from(!interval.wrapped.is_empty());
        for (sum, delta) in sums.iter_mut().zip(interval.deltas.to_array()) {
            *sum = sum.saturating_add(delta.unwrap_or(0));
        }
        if interval.deltas.rx_bytes.is_some() {
            rx_seconds += interval.interval_s;
        }
        if interval.deltas.tx_bytes.is_some() {
            tx_seconds += interval.interval_s;
        }
    }
    totals.counts = Counters::from_array(sums);
    totals.rx_rate_bps = rate(Some(totals.counts.rx_bytes), rx_seconds, 8.0);
    totals.tx_rate_bps = rate(Some(totals.counts.tx_bytes), tx_seconds, 8.0);
    totals
}

impl CountersResult {
    /// The result of samples of each interface (all taken at the same reads).
    pub fn from_samples(
        spec: &CountersSpec,
        samples: &[(String, Vec<CounterSample>)],
    ) -> Result<CountersResult, CountersError> {
        let interfaces = samples
            .iter()
            .map(|(interface, samples)| {
                let intervals = intervals(interface, samples, spec.counter_bits)?;
                Ok(InterfaceCounters {
                    interface: interface.clone(),
                    totals: totals(&intervals),
                    intervals,
                })
            })
            .collect::<Result<Vec<_>, CountersError>>()?;
        let mut summary = totals(interfaces.iter().flat_map(|each| &each.intervals));
        // The host's rate is the sum of its interfaces' rates, not their mean.
        let sum = |rate: fn(&CounterTotals) -> Option<f64>| {
            interfaces
                .iter()
                .filter_map(|each| rate(&each.totals))
                .reduce(|a, b| a + b)
        };
        summary.rx_rate_bps = sum(|totals| totals.rx_rate_bps);
        summary.tx_rate_bps = sum(|totals| totals.tx_rate_bps);
        Ok(CountersResult {
            interval_s: spec.interval_us as f64 / 1e6,
            counter_bits: spec.counter_bits,
            interfaces,
            summary,
        })
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::Value;

    use super::*;

    const TWO_32: u64 = 1 << 32;

    fn sample(second: u64, rx_bytes: u64, tx_bytes: u64) -> CounterSample {
        CounterSample {
            time: Utc.timestamp_opt(1_700_000_000 + second as i64, 0).unwrap(),
            elapsed_ns: second * 1_000_000_000,
            values: CounterValues {
                rx_bytes,
                tx_bytes,
                rx_packets: rx_bytes / 1000,
                tx_packets: tx_bytes / 1000,
                ..CounterValues::default()
            },
        }
    }

    #[test]
    fn a_32_bit_counter_wraps_once_and_keeps_its_rate() {
        // 1000 bytes before the top, 4000 after it: 5000 bytes in 10 s.
        assert_eq!(
            counter_delta(TWO_32 - 1000, 4000, CounterWidth::Bits32),
            CounterDelta::Wrapped(5000)
        );
        let mut samples = [sample(0, TWO_32 - 1000, 10), sample(10, 4000, 20)];
        // Packets keep counting below the top: only the byte counter wraps.
        samples[0].values.rx_packets = 7;
        samples[1].values.rx_packets = 12;
        let intervals = intervals("eth0", &samples, CounterWidth::Bits32).unwrap();
        assert_eq!(intervals[0].deltas.rx_packets, Some(5));
        assert_eq!(intervals[0].deltas.rx_bytes, Some(5000));
        assert_eq!(intervals[0].rx_rate_bps, Some(4000.0));
        assert_eq!(intervals[0].wrapped, vec!["rx_bytes"]);
        assert!(intervals[0].counter_reset.is_empty());
    }

    #[test]
    fn a_64_bit_counter_wraps_at_two_to_the_64() {
        assert_eq!(
            counter_delta(u64::MAX - 9, 5, CounterWidth::Bits64),
            CounterDelta::Wrapped(15)
        );
        // The same drop read as 32-bit: the value does not fit 32 bits, so no wrap.
        assert_eq!(
            counter_delta(u64::MAX - 9, 5, CounterWidth::Bits32),
            CounterDelta::Reset
        );
        // A 64-bit counter that passes 2³² just keeps counting.
        assert_eq!(
            counter_delta(TWO_32 - 1, TWO_32 + 1, CounterWidth::Bits64),
            CounterDelta::Counted(2)
        );
    }

    #[test]
    fn a_drop_a_wrap_does_not_explain_is_a_reset_with_no_rate() {
        // 64-bit: from 5 GB back to 1 kB would need a wrap of nearly 2⁶⁴ bytes.
        assert_eq!(
            counter_delta(5_000_000_000, 1000, CounterWidth::Bits64),
            CounterDelta::Reset
        );
        // 32-bit: from 1 MB back to 10 B would need nearly 2³² bytes in one wrap.
        assert_eq!(
            counter_delta(1_000_000, 10, CounterWidth::Bits32),
            CounterDelta::Reset
        );
        let intervals = intervals(
            "eth0",
            &[
                sample(0, 1_000_000, 500),
                sample(10, 10, 1500),
                sample(20, 1010, 2500),
            ],
            CounterWidth::Bits64,
        )
        .unwrap();
        let reset = &intervals[0];
        assert_eq!(reset.counter_reset, vec!["rx_bytes", "rx_packets"]);
        assert_eq!((reset.deltas.rx_bytes, reset.rx_rate_bps), (None, None));
        assert_eq!(
            (reset.deltas.rx_packets, reset.rx_packets_per_s),
            (None, None)
        );
        // The other direction is unaffected, and the next interval counts again.
        assert_eq!(reset.deltas.tx_bytes, Some(1000));
        assert_eq!(intervals[1].deltas.rx_bytes, Some(1000));
        // A reset counter is null in the document, and reads back as no value.
        let json = serde_json::to_value(reset).unwrap();
        assert_eq!(
            (&json["rx_bytes"], &json["tx_bytes"]),
            (&Value::Null, &Value::from(1000))
        );
        assert_eq!(
            json["counter_reset"],
            serde_json::json!(["rx_bytes", "rx_packets"])
        );
        assert_eq!(
            &serde_json::from_value::<CounterInterval>(json).unwrap(),
            reset
        );
        let totals = totals(&intervals);
        assert_eq!((totals.reset_intervals, totals.counts.rx_bytes), (1, 1000));
        // The mean rate covers only the 10 s where the counter was known.
        assert_eq!(totals.rx_rate_bps, Some(800.0));
        assert_eq!(totals.tx_rate_bps, Some(800.0));
    }

    #[test]
    fn the_first_sample_gives_no_interval_and_no_rate() {
        let spec = CountersSpec {
            interfaces: vec!["eth0".into()],
            interval_us: 10_000_000,
            count: 1,
            counter_bits: CounterWidth::Bits64,
        };
        let result =
            CountersResult::from_samples(&spec, &[("eth0".into(), vec![sample(0, 7_000, 9_000)])])
                .unwrap();
        assert!(result.interfaces[0].intervals.is_empty());
        assert_eq!(result.summary.intervals, 0);
        assert_eq!(result.summary.counts.rx_bytes, 0);
        assert_eq!(result.summary.rx_rate_bps, None);
    }

    #[test]
    fn samples_out_of_time_order_are_refused() {
        let error = intervals(
            "eth0",
            &[sample(10, 0, 0), sample(10, 1, 1)],
            CounterWidth::Bits64,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "interface eth0: sample 1 was not taken after the one before it"
        );
    }

    #[test]
    fn totals_add_interfaces_and_serialise_with_units_in_names() {
        let spec = CountersSpec {
            interfaces: Vec::new(),
            interval_us: 10_000_000,
            count: 1,
            counter_bits: CounterWidth::Bits32,
        };
        let result = CountersResult::from_samples(
            &spec,
            &[
                ("a".into(), vec![sample(0, 0, 0), sample(10, 2000, 1000)]),
                ("b".into(), vec![sample(0, 0, 0), sample(10, 3000, 0)]),
            ],
        )
        .unwrap();
        assert_eq!(result.summary.counts.rx_bytes, 5000);
        assert_eq!(result.summary.counts.rx_packets, 5);
        // 1600 b/s on one interface and 2400 b/s on the other.
        assert_eq!(result.summary.rx_rate_bps, Some(4000.0));
        let json = serde_json::to_value(&result).unwrap();
        assert_eq!(json["counter_bits"], "32");
        assert_eq!(json["interfaces"][0]["intervals"][0]["rx_rate_bps"], 1600.0);
        assert_eq!(json["summary"]["tx_bytes"], 1000);
        let back: CountersResult = serde_json::from_value(json).unwrap();
        assert_eq!(back, result);
    }
}
