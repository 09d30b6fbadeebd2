//! The Prometheus exposition, every family of every test kind plus the archivers'
//! counter, read back by each format's reference parsers (`scripts/check-exposition`:
//! promtool and the Python client's text parser for the classic format, the Python
//! client's OpenMetrics parser): both must accept it, and every sample they read must
//! carry the value, labels and timestamp exported.

use crate::common;

use std::collections::BTreeMap;

use chrono::{TimeZone, Utc};
use vantage_server::archive::StoredResult;
use vantage_server::archivers::DeliveryCounts;
use vantage_server::exposition::{render, Format};

/// One result per test kind holding each of its metrics, with a client name that
/// needs every label escape.
fn results() -> Vec<StoredResult> {
    let end_time = Utc.timestamp_opt(1_700_000_001, 250_000_000).unwrap();
    vantage_model::kinds::KINDS
        .iter()
        .map(|kind| StoredResult {
            run_id: format!("run-{}", kind.name),
            test: kind.name.to_string(),
            client: "edge \"east\" \\ rack\n2".to_string(),
            server: "core".to_string(),
            start_time: end_time - chrono::Duration::seconds(10),
            end_time,
            outcome: "completed".to_string(),
            error: None,
            metrics: kind
                .metrics
                .iter()
                .enumerate()
                .map(|(index, metric)| (metric.name.to_string(), 1.25 * (index + 1) as f64))
                .collect(),
            result: None,
        })
        .collect()
}

fn check(format: Format, name: &str) {
    let results = results();
    let archivers = BTreeMap::from([(
        "ops \"log\"".to_string(),
        DeliveryCounts {
            delivered: 7,
            failed: 2,
            given_up: 1,
        },
    )]);
    let samples = common::exposition_samples(name, &render(&results, &archivers, format));

    let mut expected = 0;
    for result in &results {
        let kind = vantage_model::kinds::find(&result.test).unwrap();
        for metric in kind.metrics {
            expected += 1;
            let sample = samples
                .iter()
                .find(|sample| {
                    sample["name"] == metric.family && sample["labels"]["test"] == kind.name
                })
                .unwrap_or_else(|| panic!("{name}: no {} of {}", metric.family, kind.name));
            let value = result.metrics[metric.name] * metric.scale;
            assert!(
                (sample["value"].as_f64().unwrap() - value).abs() <= 1e-12 * value.abs(),
                "{name}: {sample} should be {value}"
            );
            assert_eq!(
                sample["labels"]["client"],
                result.client.as_str(),
                "{sample}"
            );
            assert_eq!(
                sample["timestamp"].as_f64(),
                Some(1_700_000_001.25),
                "{sample}"
            );
            assert_eq!(sample["type"], "gauge", "{sample}");
            if format == Format::OpenMetrics {
                assert_eq!(sample["unit"], metric.unit, "{sample}");
            }
        }
    }
    for (outcome, count) in [("delivered", 7.0), ("failed", 2.0), ("given_up", 1.0)] {
        expected += 1;
        let sample = samples
            .iter()
            .find(|sample| {
                sample["name"] == "vantage_archiver_deliveries_total"
                    && sample["labels"]["outcome"] == outcome
            })
            .unwrap_or_else(|| panic!("{name}: no deliveries counter for {outcome}"));
        assert_eq!(sample["type"], "counter", "{sample}");
        assert_eq!(sample["labels"]["archiver"], "ops \"log\"", "{sample}");
        assert_eq!(sample["value"].as_f64(), Some(count), "{sample}");
    }
    assert_eq!(samples.len(), expected, "{name}: one sample per metric");
}

#[test]
fn the_classic_format_passes_promtool_and_reads_back() {
    check(Format::Classic, "classic");
}

#[test]
fn openmetrics_passes_the_reference_parser_and_reads_back() {
    check(Format::OpenMetrics, "openmetrics");
}
