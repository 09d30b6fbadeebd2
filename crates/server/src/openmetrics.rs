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

/// (archive metric, exported family, unit, scale to the unit, help)
const FAMILIES: &[(&str, &str, &str, f64, &str)] = &[
    (
        "rtt_min_us",
        "vantage_rtt_min_seconds",
        "seconds",
        1e-6,
        "Minimum round-trip time of the latest run.",
    ),
    (
        "rtt_median_us",
        "vantage_rtt_median_seconds",
        "seconds",
        1e-6,
        "Median round-trip time of the latest run.",
    ),
    (
        "rtt_p95_us",
        "vantage_rtt_p95_seconds",
        "seconds",
        1e-6,
        "95th percentile round-trip time of the latest run.",
    ),
    (
        "jitter_us",
        "vantage_jitter_seconds",
        "seconds",
        1e-6,
        "RFC 3550 jitter of the latest run.",
    ),
    (
        "loss_ratio",
        "vantage_loss_ratio",
        "ratio",
        1.0,
        "Fraction of probes lost in the latest run.",
    ),
    (
        "sent_bps",
        "vantage_sent_bits_per_second",
        "bits_per_second",
        1.0,
        "Sender throughput of the latest run.",
    ),
    (
        "received_bps",
        "vantage_received_bits_per_second",
        "bits_per_second",
        1.0,
        "Receiver throughput of the latest run.",
    ),
    (
        "retransmits",
        "vantage_retransmits",
        "",
        1.0,
        "TCP retransmissions in the latest run.",
    ),
];

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders the exposition; pairs without a metric are simply absent from that family.
pub fn render(latest: &[StoredResult], archivers: &BTreeMap<String, DeliveryCounts>) -> String {
    let mut text = String::new();
    for (metric, family, unit, scale, help) in FAMILIES {
        let samples: Vec<_> = latest
            .iter()
            .filter_map(|result| {
                result
                    .metrics
                    .get(*metric)
                    .map(|value| (result, value * scale))
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
            "# HELP {family} Results handed to file/http archivers since the server started, by outcome."
        );
        for (archiver, counts) in archivers {
            for (outcome, value) in [
                ("delivered", counts.delivered),
                ("failed", counts.failed),
                ("dropped", counts.dropped),
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
                dropped: 0,
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
