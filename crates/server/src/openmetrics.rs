//! OpenMetrics text exposition of the latest result per (client, server, test), and
//! the archivers' delivery counters.
//!
//! Follows the OpenMetrics 1.0 text format: `# TYPE`/`# UNIT`/`# HELP` per family,
//! base units (seconds), label values escaped, terminated by `# EOF`.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::archive::StoredResult;
use crate::archivers::DeliveryCounts;

pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders the exposition; pairs without a metric are simply absent from that family.
pub fn render(latest: &[StoredResult], archivers: &BTreeMap<String, DeliveryCounts>) -> String {
    let mut text = String::new();
    // Families come from the test kinds' metric declarations (`vantage_model::kinds`).
    for metric in vantage_model::kinds::metrics() {
        let (family, unit, help) = (metric.family, metric.unit, metric.help);
        let samples: Vec<_> = latest
            .iter()
            .filter_map(|result| {
                result
                    .metrics
                    .get(metric.name)
                    .map(|value| (result, value * metric.scale))
            })
            .collect();
        if samples.is_empty() {
            continue;
        }
        let _ = writeln!(text, "# TYPE {family} gauge");
        if !unit.is_empty() {
            let _ = writeln!(text, "# UNIT {family} {unit}");
        }
        let _ = writeln!(text, "# HELP {family} {help}");
        for (result, value) in samples {
            let _ = writeln!(
                text,
                "{family}{{client=\"{}\",server=\"{}\",test=\"{}\"}} {value} {}",
                escape_label(&result.client),
                escape_label(&result.server),
                escape_label(&result.test),
                result.end_time.timestamp_micros() as f64 / 1e6
            );
        }
    }
    if !archivers.is_empty() {
        let family = "vantage_archiver_deliveries";
        let _ = writeln!(text, "# TYPE {family} counter");
        let _ = writeln!(
            text,
            "# HELP {family} Deliveries to file/http archivers since the server started: delivered, failed attempts (retried), given up."
        );
        for (archiver, counts) in archivers {
            for (outcome, value) in [
                ("delivered", counts.delivered),
                ("failed", counts.failed),
                ("given_up", counts.given_up),
            ] {
                let _ = writeln!(
                    text,
                    "{family}_total{{archiver=\"{}\",outcome=\"{outcome}\"}} {value}",
                    escape_label(archiver)
                );
            }
        }
    }
    text.push_str("# EOF\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn renders_families_with_units_and_escaped_labels() {
        let result = StoredResult {
            run_id: "r1".into(),
            test: "latency".into(),
            client: "a\"1".into(),
            server: "b".into(),
            start_time: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
            end_time: Utc.timestamp_opt(1_700_000_001, 0).unwrap(),
            outcome: "completed".into(),
            error: None,
            metrics: [
                ("rtt_median_us".to_string(), 1500.0),
                ("loss_ratio".to_string(), 0.25),
            ]
            .into_iter()
            .collect(),
            result: None,
        };
        let archivers = [(
            "ops-log".to_string(),
            DeliveryCounts {
                delivered: 3,
                failed: 1,
                given_up: 0,
            },
        )]
        .into_iter()
        .collect();
        let text = render(&[result], &archivers);
        assert!(
            text.contains(
                "vantage_archiver_deliveries_total{archiver=\"ops-log\",outcome=\"failed\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("# UNIT vantage_rtt_median_seconds seconds\n"),
            "{text}"
        );
        assert!(
            text.contains("vantage_rtt_median_seconds{client=\"a\\\"1\",server=\"b\",test=\"latency\"} 0.0015 1700000001\n"),
            "{text}"
        );
        assert!(text.contains("vantage_loss_ratio{"), "{text}");
        assert!(!text.contains("vantage_sent_bits_per_second"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
