//! The Prometheus text exposition of the latest result per (client, server, test), and
//! the archivers' delivery counters, in the format the scraper asks for.
//!
//! - **Classic text format 0.0.4** (the default): what promtool, Prometheus without
//!   OpenMetrics, VictoriaMetrics, Telegraf and most other consumers read. `# HELP` and
//!   `# TYPE` per family, timestamps in integer milliseconds, a counter's family named
//!   with its `_total` suffix.
//! - **OpenMetrics 1.0.0**, when the `Accept` header ranks `application/openmetrics-text`
//!   at least as high as plain text (Prometheus does since 2.5): `# UNIT` per family
//!   with a unit, timestamps in seconds, the counter's family named without `_total`
//!   (its samples carry it), terminated by `# EOF`.
//!
//! Both use Prometheus's base units (seconds, bytes per second, ratios) and escape
//! label values.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::archive::StoredResult;
use crate::archivers::DeliveryCounts;

/// The two text formats of the Prometheus exposition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Classic,
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics when it names
    /// `application/openmetrics-text` with a quality at least that of `text/plain`
    /// (or `text/*`, `*/*`); the classic format otherwise, also without a header.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let (mut openmetrics_q, mut classic_q) = (0.0_f32, 0.0_f32);
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let quality = parts
                .filter_map(|param| param.split_once('='))
                .find(|(key, _)| key.trim().eq_ignore_ascii_case("q"))
                .map_or(1.0, |(_, value)| value.trim().parse().unwrap_or(0.0));
            match media.as_str() {
                "application/openmetrics-text" => openmetrics_q = openmetrics_q.max(quality),
                "text/plain" | "text/*" | "*/*" => classic_q = classic_q.max(quality),
                _ => {}
            }
        }
        if openmetrics_q > 0.0 && openmetrics_q >= classic_q {
            Format::OpenMetrics
        } else {
            Format::Classic
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Classic => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// A sample's timestamp in the format's unit: integer milliseconds, or seconds.
    fn timestamp(self, time: &chrono::DateTime<chrono::Utc>) -> String {
        match self {
            Format::Classic => time.timestamp_millis().to_string(),
            Format::OpenMetrics => (time.timestamp_micros() as f64 / 1e6).to_string(),
        }
    }

    /// `# HELP` text: both formats escape backslashes and line feeds, OpenMetrics
    /// also double quotes, as in label values.
    fn escape_help(self, help: &str) -> String {
        match self {
            Format::Classic => help.replace('\\', "\\\\").replace('\n', "\\n"),
            Format::OpenMetrics => escape_label(help),
        }
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A sample value as both formats spell it (`+Inf`, `-Inf`, `NaN`; Rust's `inf` is not).
fn sample_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        value.to_string()
    }
}

/// Renders the exposition; pairs without a metric are simply absent from that family.
pub fn render(
    latest: &[StoredResult],
    archivers: &BTreeMap<String, DeliveryCounts>,
    format: Format,
) -> String {
    let mut text = String::new();
    // Families come from the test kinds' metric declarations (`vantage_model::kinds`).
    for metric in vantage_model::kinds::metrics() {
        let family = metric.family;
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
        let _ = writeln!(text, "# HELP {family} {}", format.escape_help(metric.help));
        let _ = writeln!(text, "# TYPE {family} gauge");
        if format == Format::OpenMetrics && !metric.unit.is_empty() {
            let _ = writeln!(text, "# UNIT {family} {}", metric.unit);
        }
        for (result, value) in samples {
            let _ = writeln!(
                text,
                "{family}{{client=\"{}\",server=\"{}\",test=\"{}\"}} {} {}",
                escape_label(&result.client),
                escape_label(&result.server),
                escape_label(&result.test),
                sample_value(value),
                format.timestamp(&result.end_time)
            );
        }
    }
    if !archivers.is_empty() {
        // A counter's family is named with `_total` in the classic format, without it
        // in OpenMetrics; its samples carry `_total` in both.
        let samples = "vantage_archiver_deliveries_total";
        let family = match format {
            Format::Classic => samples,
            Format::OpenMetrics => "vantage_archiver_deliveries",
        };
        let help = "Deliveries to file/http archivers since the server started: delivered, failed attempts (retried), given up.";
        let _ = writeln!(text, "# HELP {family} {}", format.escape_help(help));
        let _ = writeln!(text, "# TYPE {family} counter");
        for (archiver, counts) in archivers {
            for (outcome, value) in [
                ("delivered", counts.delivered),
                ("failed", counts.failed),
                ("given_up", counts.given_up),
            ] {
                let _ = writeln!(
                    text,
                    "{samples}{{archiver=\"{}\",outcome=\"{outcome}\"}} {value}",
                    escape_label(archiver)
                );
            }
        }
    }
    if format == Format::OpenMetrics {
        text.push_str("# EOF\n");
    }
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
            end_time: Utc.timestamp_opt(1_700_000_001, 250_000_000).unwrap(),
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
        let text = render(
            std::slice::from_ref(&result),
            &archivers,
            Format::OpenMetrics,
        );
        assert!(
            text.contains("# TYPE vantage_archiver_deliveries counter\n")
                && text.contains(
                    "vantage_archiver_deliveries_total{archiver=\"ops-log\",outcome=\"failed\"} 1\n"
                ),
            "{text}"
        );
        assert!(
            text.contains("# UNIT vantage_rtt_median_seconds seconds\n"),
            "{text}"
        );
        assert!(
            text.contains("vantage_rtt_median_seconds{client=\"a\\\"1\",server=\"b\",test=\"latency\"} 0.0015 1700000001.25\n"),
            "{text}"
        );
        assert!(text.contains("vantage_loss_ratio{"), "{text}");
        assert!(!text.contains("vantage_sent_bytes_per_second"), "{text}");
        assert!(text.ends_with("# EOF\n"));

        let text = render(&[result], &archivers, Format::Classic);
        assert!(
            text.contains("# TYPE vantage_archiver_deliveries_total counter\n")
                && text.contains(
                    "vantage_archiver_deliveries_total{archiver=\"ops-log\",outcome=\"failed\"} 1\n"
                ),
            "{text}"
        );
        assert!(
            text.contains("vantage_rtt_median_seconds{client=\"a\\\"1\",server=\"b\",test=\"latency\"} 0.0015 1700000001250\n"),
            "{text}"
        );
        assert!(
            !text.contains("# UNIT") && !text.contains("# EOF"),
            "{text}"
        );
    }

    #[test]
    fn spells_values_as_the_formats_do() {
        assert_eq!(sample_value(f64::INFINITY), "+Inf");
        assert_eq!(sample_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(sample_value(f64::NAN), "NaN");
        assert_eq!(sample_value(0.25), "0.25");
        assert_eq!(sample_value(3.0), "3");
        assert_eq!(
            Format::OpenMetrics.escape_help("a \\ \"b\"\nc"),
            "a \\\\ \\\"b\\\"\\nc"
        );
        assert_eq!(
            Format::Classic.escape_help("a \\ \"b\"\nc"),
            "a \\\\ \"b\"\\nc"
        );
    }

    #[test]
    fn negotiates_the_format_from_accept() {
        // What Prometheus 2.42 sends: OpenMetrics first.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        // Prometheus configured for the classic format only (scrape_protocols).
        let classic = "text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(classic)), Format::Classic);
        for accept in [
            None,
            Some(""),
            Some("*/*"),
            Some("text/plain"),
            Some("application/json"),
        ] {
            assert_eq!(Format::negotiate(accept), Format::Classic, "{accept:?}");
        }
        assert_eq!(
            Format::negotiate(Some("Application/OpenMetrics-Text")),
            Format::OpenMetrics
        );
        // Ranked below plain text, or refused with q=0: classic.
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0.3, text/plain")),
            Format::Classic
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; q=0")),
            Format::Classic
        );
    }
}
