//! Repeated runs: one test run N times and each of its kind's summary metrics
//! summarised across the runs — mean ± standard deviation and median with IQR, the
//! pairs Miravalls-Sierra et al. (2018) ask a measurement to report, since one run
//! on a shared path or host says little about the next.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use vantage_model::kinds::TestKind;
pub use vantage_stats::Spread;

/// One metric over the runs that reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricAcrossRuns {
    /// The kind's metric name; its unit is in the name.
    pub metric: String,
    /// Runs that reported the metric.
    pub runs: usize,
    /// Mean, population standard deviation, median, IQR, min and max.
    #[serde(flatten)]
    pub spread: Spread,
}

/// Every metric of `kind` that at least one of `results` (result documents)
/// carries, in the kind's order.
pub fn across_runs(kind: &TestKind, results: &[Value]) -> Vec<MetricAcrossRuns> {
    kind.metrics
        .iter()
        .filter_map(|metric| {
            let values: Vec<f64> = results.iter().filter_map(|r| metric.extract(r)).collect();
            Some(MetricAcrossRuns {
                metric: metric.name.to_string(),
                runs: values.len(),
                spread: vantage_stats::spread(&values)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use vantage_model::kinds;

    use super::*;

    #[test]
    fn throughput_metrics_across_four_runs() {
        // received_bps 10, 20, 30, 40: mean 25, population σ = sqrt(125) (deviations
        // 15, 5, 5, 15 squared sum to 500, / 4), median 25, IQR 32.5 - 17.5 = 15.
        let runs: Vec<Value> = [10.0, 20.0, 30.0, 40.0]
            .iter()
            .map(|bps| json!({"summary": {"received_bps": bps, "sent_bps": 50.0}}))
            .collect();
        let kind = kinds::find("throughput").unwrap();
        let rows = across_runs(kind, &runs);
        let received = rows.iter().find(|r| r.metric == "received_bps").unwrap();
        let spread = received.spread;
        assert_eq!((received.runs, spread.mean, spread.median), (4, 25.0, 25.0));
        assert!((spread.stddev - 125f64.sqrt()).abs() < 1e-12);
        assert_eq!((spread.iqr, spread.min, spread.max), (15.0, 10.0, 40.0));
        let sent = rows.iter().find(|r| r.metric == "sent_bps").unwrap();
        assert_eq!((sent.spread.stddev, sent.spread.iqr), (0.0, 0.0));
        // Metrics no run reported are left out, not invented.
        assert!(rows.iter().all(|r| r.metric != "retransmits"), "{rows:?}");
    }

    #[test]
    fn a_metric_some_runs_lack_counts_only_the_runs_that_have_it() {
        let runs = vec![
            json!({"summary": {"received_bps": 10.0, "retransmits": 3}}),
            json!({"summary": {"received_bps": 20.0}}),
        ];
        let rows = across_runs(kinds::find("throughput").unwrap(), &runs);
        let retransmits = rows.iter().find(|r| r.metric == "retransmits").unwrap();
        assert_eq!((retransmits.runs, retransmits.spread.mean), (1, 3.0));
    }
}
