//! SLA verdicts over the fleet (the multi-service SLA verification of Rufini et
//! al., Fotonica 2014).
//!
//! - [`SlaVerdicts`], an ingest consumer: every stored result of a task a contract
//!   judges is weighed by `vantage_analysis::sla::judge`; the verdict is stored, sent
//!   to subscribers as an `sla` event, and a pair that starts failing (or recovers)
//!   raises an alert.
//! - [`compliance`]: what `GET /api/v1/sla` answers, each contract's pairs with
//!   their latest verdict and how often they passed.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::Serialize;
use vantage_analysis::sla::{judge, standing, standing_passes};
use vantage_model::sla::{Clause, ClauseVerdict, Contract, SlaVerdict};

use crate::archive::{Archive, ArchiveError, SlaFilter};
use crate::config_store::CachedConfig;
use crate::events::{Alert, Event, EventBus};
use crate::ingest::{NewResult, ResultConsumer};

/// The most verdicts one compliance answer reads per contract.
pub const MAX_COMPLIANCE_VERDICTS: i64 = 100_000;
/// How many of a pair's latest verdicts make its standing (a contract has at most
/// four clauses; a clause not judged among them counts as not failing).
const STANDING_VERDICTS: i64 = 100;

pub struct SlaVerdicts {
    pub archive: Archive,
    pub events: Arc<EventBus>,
    pub config: CachedConfig,
}

impl ResultConsumer for SlaVerdicts {
    fn name(&self) -> &'static str {
        "sla_verdicts"
    }

    fn consume<'a>(&'a self, result: &'a NewResult<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(config) = self.config.get().await else {
                return;
            };
            for contract in config
                .contracts
                .iter()
                .filter(|contract| contract.judges_task(&result.run.task))
            {
                if let Err(error) = self.evaluate(contract, result).await {
                    tracing::warn!(
                        run_id = %result.run.id,
                        contract = %contract.name,
                        "SLA verdict failed: {error}"
                    );
                }
            }
        })
    }
}

impl SlaVerdicts {
    async fn evaluate(
        &self,
        contract: &Contract,
        result: &NewResult<'_>,
    ) -> Result<(), ArchiveError> {
        let clauses = judge(contract, &result.run.test, &result.summary.metrics);
        if clauses.is_empty() {
            // A run that measured none of the committed figures (it failed, say) is
            // not a verdict: the missed-run alerts already tell about it.
            return Ok(());
        }
        let run = result.run;
        let verdict = SlaVerdict {
            contract: contract.name.clone(),
            run_id: run.id.clone(),
            task: run.task.clone(),
            client: run.client.clone(),
            server: run.server.clone(),
            time: result.summary.start_time,
            pass: clauses.iter().all(|clause| clause.pass),
            clauses,
        };
        let previous = self
            .archive
            .sla_verdicts(&SlaFilter {
                contract: Some(verdict.contract.clone()),
                client: Some(verdict.client.clone()),
                server: Some(verdict.server.clone()),
                to_us: Some(crate::archive::to_us(verdict.time)),
                limit: STANDING_VERDICTS,
                ..SlaFilter::default()
            })
            .await?;
        self.archive.add_sla_verdict(&verdict).await?;
        // Alert when the pair's standing changes, not on every failing run of a
        // failing pair (nor when a latency run passes while the rate still fails).
        let before = standing(&previous);
        let after = standing(std::iter::once(&verdict).chain(&previous));
        if standing_passes(&before) != standing_passes(&after) {
            let failing: Vec<&ClauseVerdict> = after
                .values()
                .copied()
                .filter(|clause| !clause.pass)
                .collect();
            crate::alerts::raise(
                &self.archive,
                &self.events,
                transition_alert(&verdict, &failing),
            )
            .await?;
        }
        self.events.publish(Event::Sla(verdict));
        Ok(())
    }
}

/// The alert for a pair whose standing changed with `verdict`; `failing` are the
/// clauses failing now (none: the contract is met again).
fn transition_alert(verdict: &SlaVerdict, failing: &[&ClauseVerdict]) -> Alert {
    let (severity, what, clauses) = if failing.is_empty() {
        (
            "info",
            "is met again",
            &verdict.clauses.iter().collect::<Vec<_>>(),
        )
    } else {
        ("warning", "is breached", &failing.to_vec())
    };
    let clauses: Vec<String> = clauses.iter().map(ToString::to_string).collect();
    Alert {
        severity: severity.into(),
        message: format!(
            "SLA contract {} {what} for {} -> {} (run {}): {}",
            verdict.contract,
            verdict.client,
            verdict.server,
            verdict.run_id,
            clauses.join("; ")
        ),
        agents: vec![verdict.client.clone(), verdict.server.clone()],
        tags: BTreeMap::from([("contract".to_string(), verdict.contract.clone())]),
        time: verdict.time,
    }
}

/// One pair's standing under a contract.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairCompliance {
    pub client: String,
    pub server: String,
    pub verdicts: usize,
    pub passed: usize,
    /// `passed / verdicts`.
    pub compliance_ratio: f64,
    /// The smallest margin seen per clause over the window (the closest call).
    pub worst_margin: BTreeMap<Clause, f64>,
    /// Every clause's latest figure passes.
    pub pass: bool,
    /// The latest verdict on each clause.
    pub standing: Vec<ClauseVerdict>,
    pub latest: SlaVerdict,
}

/// A contract with its limits and the pairs it has judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContractCompliance {
    #[serde(flatten)]
    pub contract: Contract,
    pub pairs: Vec<PairCompliance>,
    /// True when the window held more verdicts than were read.
    pub truncated: bool,
}

/// Each contract's pairs over `[from_us, to_us)`, failing pairs first.
pub async fn compliance(
    archive: &Archive,
    contracts: &[Contract],
    from_us: Option<i64>,
    to_us: Option<i64>,
) -> Result<Vec<ContractCompliance>, ArchiveError> {
    let mut answer = Vec::new();
    for contract in contracts {
        let verdicts = archive
            .sla_verdicts(&SlaFilter {
                contract: Some(contract.name.clone()),
                from_us,
                to_us,
                limit: MAX_COMPLIANCE_VERDICTS,
                ..SlaFilter::default()
            })
            .await?;
        let truncated = verdicts.len() as i64 >= MAX_COMPLIANCE_VERDICTS;
        answer.push(ContractCompliance {
            contract: contract.clone(),
            pairs: summarise(verdicts),
            truncated,
        });
    }
    Ok(answer)
}

/// Groups verdicts (newest first, as the archive gives them) by pair.
fn summarise(verdicts: Vec<SlaVerdict>) -> Vec<PairCompliance> {
    let mut by_pair: BTreeMap<(String, String), Vec<SlaVerdict>> = BTreeMap::new();
    for verdict in verdicts {
        by_pair
            .entry((verdict.client.clone(), verdict.server.clone()))
            .or_default()
            .push(verdict);
    }
    let mut pairs: Vec<PairCompliance> = by_pair
        .into_values()
        .filter_map(|verdicts| pair_compliance(&verdicts))
        .collect();
    // Failing pairs first, the least compliant first among them.
    pairs.sort_by(|a, b| {
        a.pass
            .cmp(&b.pass)
            .then(a.compliance_ratio.total_cmp(&b.compliance_ratio))
    });
    pairs
}

/// One pair's standing from its verdicts, newest first; `None` for no verdicts.
fn pair_compliance(verdicts: &[SlaVerdict]) -> Option<PairCompliance> {
    let latest = verdicts.first()?.clone();
    let standing = standing(verdicts);
    let passed = verdicts.iter().filter(|verdict| verdict.pass).count();
    let mut worst_margin: BTreeMap<Clause, f64> = BTreeMap::new();
    for clause in verdicts.iter().flat_map(|verdict| &verdict.clauses) {
        worst_margin
            .entry(clause.clause)
            .and_modify(|worst| *worst = worst.min(clause.margin))
            .or_insert(clause.margin);
    }
    Some(PairCompliance {
        client: latest.client.clone(),
        server: latest.server.clone(),
        verdicts: verdicts.len(),
        passed,
        compliance_ratio: passed as f64 / verdicts.len() as f64,
        worst_margin,
        pass: standing_passes(&standing),
        standing: standing.into_values().cloned().collect(),
        latest,
    })
}
