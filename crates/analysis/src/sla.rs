//! SLA verdicts: a contract's committed figures against one result's metrics, with
//! the margin of each (the multi-service SLA verification of Rufini et al.,
//! Fotonica 2014: the committed rate against a scheduled capacity run's verified
//! effective capacity, delay, loss and jitter against latency runs).

use std::collections::BTreeMap;

use vantage_model::sla::{Clause, ClauseVerdict, Contract, SlaVerdict};

/// The clauses of `contract` that a result of test kind `kind` with summary
/// `metrics` measures, each judged; empty when it measures none (a failed run,
/// or a kind the contract's figures are not about).
pub fn judge(
    contract: &Contract,
    kind: &str,
    metrics: &BTreeMap<String, f64>,
) -> Vec<ClauseVerdict> {
    contract
        .limits
        .iter()
        .filter_map(|(&clause, &limit)| {
            let metric = clause.metric_for(kind)?;
            let measured = *metrics.get(metric.name)?;
            let margin = if clause.is_floor() {
                (measured - limit) / limit
            } else {
                (limit - measured) / limit
            };
            Some(ClauseVerdict {
                clause,
                metric: metric.name.to_string(),
                measured,
                limit,
                margin,
                pass: margin >= 0.0,
            })
        })
        .collect()
}

/// A pair's standing under a contract: the latest verdict on each clause, from the
/// pair's verdicts newest first. Each clause keeps its own latest figure, so a
/// latency run does not clear a rate the last capacity run found short.
pub fn standing<'a>(
    verdicts_newest_first: impl IntoIterator<Item = &'a SlaVerdict>,
) -> BTreeMap<Clause, &'a ClauseVerdict> {
    let mut latest = BTreeMap::new();
    for verdict in verdicts_newest_first {
        for clause in &verdict.clauses {
            latest.entry(clause.clause).or_insert(clause);
        }
    }
    latest
}

/// Whether every clause of a standing passes (an empty standing passes: nothing
/// measured has failed).
pub fn standing_passes(standing: &BTreeMap<Clause, &ClauseVerdict>) -> bool {
    standing.values().all(|clause| clause.pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gold() -> Contract {
        Contract {
            name: "gold".into(),
            tasks: vec!["t".into()],
            limits: BTreeMap::from([
                (Clause::Rate, 50e6),
                (Clause::Rtt, 30_000.0),
                (Clause::Loss, 0.001),
                (Clause::Jitter, 2_000.0),
            ]),
        }
    }

    fn metrics(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn a_capacity_run_is_judged_on_the_rate_alone() {
        // 47.5 Mbit/s verified against 50 committed: (47.5 - 50) / 50 = -5 %.
        let verdicts = judge(
            &gold(),
            "capacity",
            &metrics(&[("capacity_bps", 47.5e6), ("tcp_bps", 49e6)]),
        );
        assert_eq!(verdicts.len(), 1);
        let rate = &verdicts[0];
        assert_eq!(
            (rate.clause, rate.metric.as_str()),
            (Clause::Rate, "capacity_bps")
        );
        assert!((rate.margin + 0.05).abs() < 1e-12, "{rate:?}");
        assert!(!rate.pass);
    }

    #[test]
    fn a_latency_run_is_judged_on_delay_loss_and_jitter_with_headroom() {
        // RTT 24 ms of 30: (30 - 24) / 30 = 20 % headroom; loss 0.002 of 0.001: -100 %;
        // jitter exactly at the limit passes with margin 0.
        let verdicts = judge(
            &gold(),
            "latency",
            &metrics(&[
                ("rtt_median_us", 24_000.0),
                ("loss_ratio", 0.002),
                ("jitter_us", 2_000.0),
            ]),
        );
        let by_clause: BTreeMap<Clause, &ClauseVerdict> =
            verdicts.iter().map(|v| (v.clause, v)).collect();
        assert_eq!(by_clause.len(), 3);
        assert!((by_clause[&Clause::Rtt].margin - 0.2).abs() < 1e-12);
        assert!(by_clause[&Clause::Rtt].pass);
        assert!((by_clause[&Clause::Loss].margin + 1.0).abs() < 1e-12);
        assert!(!by_clause[&Clause::Loss].pass);
        assert_eq!(by_clause[&Clause::Jitter].margin, 0.0);
        assert!(by_clause[&Clause::Jitter].pass);
    }

    #[test]
    fn a_throughput_run_measures_the_received_rate() {
        let verdicts = judge(
            &gold(),
            "throughput",
            &metrics(&[("sent_bps", 90e6), ("received_bps", 60e6)]),
        );
        assert_eq!(verdicts.len(), 1);
        assert_eq!(verdicts[0].measured, 60e6);
        assert!((verdicts[0].margin - 0.2).abs() < 1e-12);
    }

    #[test]
    fn a_result_without_the_metrics_gives_no_verdict() {
        assert!(judge(&gold(), "latency", &BTreeMap::new()).is_empty());
        assert!(judge(&gold(), "trace", &metrics(&[("hops", 3.0)])).is_empty());
    }

    fn verdict(clauses: Vec<ClauseVerdict>) -> SlaVerdict {
        SlaVerdict {
            contract: "gold".into(),
            run_id: "r".into(),
            task: "t".into(),
            client: "a".into(),
            server: "b".into(),
            time: chrono::DateTime::UNIX_EPOCH,
            pass: clauses.iter().all(|c| c.pass),
            clauses,
        }
    }

    #[test]
    fn a_standing_keeps_each_clauses_latest_figure() {
        let contract = gold();
        let short_capacity = verdict(judge(
            &contract,
            "capacity",
            &metrics(&[("capacity_bps", 40e6)]),
        ));
        let good_latency = verdict(judge(
            &contract,
            "latency",
            &metrics(&[
                ("rtt_median_us", 10_000.0),
                ("loss_ratio", 0.0),
                ("jitter_us", 100.0),
            ]),
        ));
        let older_good_capacity = verdict(judge(
            &contract,
            "capacity",
            &metrics(&[("capacity_bps", 60e6)]),
        ));
        // Newest first: the good latency run does not clear the short rate.
        let now = standing([&good_latency, &short_capacity, &older_good_capacity]);
        assert_eq!(now.len(), 4);
        assert_eq!(now[&Clause::Rate].measured, 40e6);
        assert!(!standing_passes(&now));
        // Before the short capacity run, everything measured passed.
        assert!(standing_passes(&standing([&older_good_capacity])));
        assert!(standing_passes(&standing([])));
    }
}
