//! Interface counters as app metrics: each stored `counters` result's per-interval
//! values are also written to the app metrics store, one metric per counter, interface
//! and interval (tags `agent` and `interface`, timestamp the interval's end), so that
//! `GET /api/v1/app/metrics`, the event stream and app–network correlation see a
//! host's counters exactly as they see the counters an app publishes itself (Narada
//! Metrics' BytesReceivedPerSec / BytesSentPerSec). A counter that reset in an interval
//! has no value there, so none is written.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use vantage_model::control::AppMetric;
use vantage_model::counters::{CounterInterval, CountersResult, COUNTER_NAMES};
use vantage_model::kinds::counters::KIND as COUNTERS;

use crate::archive::Archive;
use crate::events::{Event, EventBus};
use crate::ingest::{NewResult, ResultConsumer};

/// Prefix of every app metric written from a counters run.
pub const PREFIX: &str = "interface_";

pub struct InterfaceCounters {
    pub archive: Archive,
    pub events: Arc<EventBus>,
}

impl ResultConsumer for InterfaceCounters {
    fn name(&self) -> &'static str {
        "interface_counters"
    }

    fn consume<'a>(&'a self, result: &'a NewResult<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if result.run.test != COUNTERS.name {
                return;
            }
            let Some(counters) = result
                .upload
                .result
                .as_ref()
                .and_then(|document| CountersResult::deserialize(document).ok())
            else {
                return;
            };
            let agent = &result.run.client;
            let metrics = app_metrics(agent, &counters);
            if let Err(error) = self.archive.add_app_metrics(&metrics, agent).await {
                tracing::warn!(run_id = %result.run.id, "storing interface counters as app metrics failed: {error}");
                return;
            }
            for metric in metrics {
                self.events.publish(Event::AppMetric {
                    metric,
                    publisher: agent.clone(),
                });
            }
        })
    }
}

/// The app metrics of one interval: every counter with a delta, and both rates.
fn interval_metrics(tags: &BTreeMap<String, String>, interval: &CounterInterval) -> Vec<AppMetric> {
    let metric = |name: &str, value: f64, unit: &str| AppMetric {
        name: format!("{PREFIX}{name}"),
        value,
        unit: unit.to_string(),
        timestamp: interval.end,
        tags: tags.clone(),
    };
    let mut metrics: Vec<AppMetric> = COUNTER_NAMES
        .iter()
        .zip(interval.deltas.to_array())
        .filter_map(|(name, delta)| {
            let unit = if name.ends_with("bytes") {
                "bytes"
            } else {
                "packets"
            };
            Some(metric(name, delta? as f64, unit))
        })
        .collect();
    for (name, rate) in [
        ("rx_rate_bps", interval.rx_rate_bps),
        ("tx_rate_bps", interval.tx_rate_bps),
    ] {
        metrics.extend(rate.map(|rate| metric(name, rate, "bps")));
    }
    metrics
}

/// Every app metric of a counters result measured by `agent`.
pub fn app_metrics(agent: &str, result: &CountersResult) -> Vec<AppMetric> {
    result
        .interfaces
        .iter()
        .flat_map(|interface| {
            let tags = BTreeMap::from([
                ("agent".to_string(), agent.to_string()),
                ("interface".to_string(), interface.interface.clone()),
            ]);
            interface
                .intervals
                .iter()
                .flat_map(|interval| interval_metrics(&tags, interval))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use vantage_model::counters::{CounterSample, CounterValues, CounterWidth, CountersSpec};

    use super::*;

    #[test]
    fn each_interval_becomes_tagged_app_metrics_and_a_reset_writes_nothing() {
        let sample = |second: i64, rx_bytes: u64| CounterSample {
            time: Utc.timestamp_opt(1_700_000_000 + second, 0).unwrap(),
            elapsed_ns: second as u64 * 1_000_000_000,
            values: CounterValues {
                rx_bytes,
                tx_bytes: second as u64 * 100,
                ..CounterValues::default()
            },
        };
        let spec = CountersSpec {
            interfaces: vec!["eth0".into()],
            interval_us: 10_000_000,
            count: 2,
            counter_bits: CounterWidth::Bits64,
        };
        let samples = vec![sample(0, 5_000_000), sample(10, 10), sample(20, 1010)];
        let result = CountersResult::from_samples(&spec, &[("eth0".into(), samples)]).unwrap();
        let metrics = app_metrics("a1", &result);
        let named = |name: &str| -> Vec<f64> {
            metrics
                .iter()
                .filter(|metric| metric.name == name)
                .map(|metric| metric.value)
                .collect()
        };
        // The first interval's receive counter reset: only the second has values.
        assert_eq!(named("interface_rx_bytes"), vec![1000.0]);
        assert_eq!(named("interface_rx_rate_bps"), vec![800.0]);
        assert_eq!(named("interface_tx_bytes"), vec![1000.0, 1000.0]);
        let first = metrics
            .iter()
            .find(|m| m.name == "interface_tx_rate_bps")
            .unwrap();
        assert_eq!((first.unit.as_str(), first.value), ("bps", 800.0));
        assert_eq!(
            first.timestamp,
            Utc.timestamp_opt(1_700_000_010, 0).unwrap()
        );
        assert_eq!(first.tags["agent"], "a1");
        assert_eq!(first.tags["interface"], "eth0");
    }
}
