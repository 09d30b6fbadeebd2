//! What the scheduler takes in (agents) and hands out (runs, non-starts, campaigns).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use vantage_model::kinds::KindRef;

use crate::claims::Claim;

/// An agent as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub name: String,
    /// Labels such as `site`, `zone`, `segment` that selectors match.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// False behind NAT or a firewall: the agent can then only be a client.
    pub accepts_inbound: bool,
    /// Test types (`latency`, `throughput`, …) the agent can take part in;
    /// `None` when it did not say, which places no restriction.
    #[serde(default)]
    pub capabilities: Option<BTreeSet<String>>,
    /// Whether the agent runs an iperf3-compatible listener: runs with
    /// `tool = "iperf3"` need one on their server. Assumed when not said.
    #[serde(default = "listener_assumed")]
    pub iperf3_listener: bool,
}

fn listener_assumed() -> bool {
    true
}

impl From<&vantage_model::control::AgentRegistration> for AgentInfo {
    fn from(registration: &vantage_model::control::AgentRegistration) -> AgentInfo {
        AgentInfo {
            name: registration.name.clone(),
            tags: registration.tags.clone(),
            accepts_inbound: registration.accepts_inbound,
            // An empty list is what agents that predate capabilities send.
            capabilities: (!registration.capabilities.is_empty())
                .then(|| registration.capabilities.iter().cloned().collect()),
            iperf3_listener: registration.iperf3_port.is_some(),
        }
    }
}

/// One run the scheduler placed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedRun {
    /// Deterministic: `<task>/<occurrence>/<from>><to>` for periodic runs, so
    /// planning the same window again yields the same ids (idempotent).
    pub run_id: String,
    pub task: String,
    /// Name of the test definition.
    pub test: String,
    pub kind: KindRef,
    /// Runs the test and uploads the result.
    pub client: String,
    /// Its endpoint is the target: an agent's name, or an external host as written.
    pub server: String,
    /// `server` is an external host (HOST or HOST:PORT), not an agent.
    #[serde(default)]
    pub external: bool,
    /// The server sends (throughput), so that the data still flows from the
    /// intended sender when only the receiver could be the client.
    pub reverse: bool,
    pub start: DateTime<Utc>,
    /// `start` plus the test's reservation (test time and setup guard).
    pub end: DateTime<Utc>,
    pub priority: i32,
    pub claims: Vec<Claim>,
    /// Test parameters to run (the test definition's normalised spec, shared).
    pub spec: vantage_model::shared_spec::SharedSpec,
    /// Campaign round (0-based) for runs of exclusive tasks.
    pub campaign_round: Option<u32>,
}

/// A run that will not happen, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NonStart {
    /// The id the run would have had (same scheme as [`PlannedRun::run_id`]).
    pub run_id: String,
    pub task: String,
    pub test: String,
    /// Intended sender / initiator and target of the measurement.
    pub from: String,
    pub to: String,
    pub nominal_start: DateTime<Utc>,
    pub reason: String,
}

/// How one occurrence of an exclusive task was packed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignSummary {
    pub task: String,
    pub occurrence: i64,
    /// Distinct agents taking part.
    pub agents: usize,
    pub runs_planned: usize,
    pub non_starts: usize,
    /// Rounds of the packing (round-robin order) with at least one planned run;
    /// the campaign takes `end - start`.
    pub rounds: usize,
    /// Lower bound: the most runs any one agent takes part in
    /// (N−1 per direction for a full mesh of even N).
    pub min_rounds: usize,
    pub start: DateTime<Utc>,
    /// End of the last planned run (`start` when none was planned).
    pub end: DateTime<Utc>,
    /// Set when the campaign cannot fit its period: only some rounds run per occurrence.
    pub overload: Option<CampaignOverload>,
}

/// Why an exclusive campaign does not fit its period, and the sample that does.
///
/// The estimate is a lower bound on the campaign's length: the runs that claim
/// one resource (an agent, a segment) can only run one after another, each
/// holding it for its reservation plus the task's round gap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignOverload {
    /// The resource with the most campaign runs (`agent:NAME`, `segment:NAME`).
    pub busiest: String,
    /// Runs of the campaign that claim it.
    pub busiest_runs: usize,
    /// Those runs back to back: each reservation plus the round gap between them.
    pub needed_ms: i64,
    /// The task's period.
    pub period_ms: i64,
    /// What the period leaves for them: the period less the task's slip.
    pub available_ms: i64,
    /// Rounds of the full packing (2(N−1) for a full mesh of even N in both directions).
    pub rounds_total: usize,
    /// Each occurrence runs the rounds whose index ≡ the occurrence (mod `cycle`),
    /// so every pair is measured once every `cycle` occurrences.
    pub cycle: u32,
    /// Whether every agent of the campaign takes part in every occurrence
    /// (true of a full mesh: each round-robin round holds every agent).
    pub every_agent_each_time: bool,
}

impl CampaignOverload {
    /// One sentence for the operator: the numbers, what runs instead, and the
    /// period that would fit the whole campaign.
    pub fn describe(&self, task: &str) -> String {
        let hours = |ms: i64| ms as f64 / 3_600_000.0;
        let rounds_run = self.rounds_total.div_ceil(self.cycle as usize);
        let period_s = u64::try_from(self.period_ms / 1000).unwrap_or(0);
        format!(
            "task '{task}' does not fit its period: {} takes part in {} of its runs, {:.2} h back to back, \
             but the {} period leaves {:.2} h after its slip. Each occurrence runs 1 round in {} \
             (about {rounds_run} of {} rounds), so {}every pair is measured once every {} periods; \
             to measure every pair each time, set every = \"{}\" (or use fewer agents, a shorter test or round gap)",
            self.busiest,
            self.busiest_runs,
            hours(self.needed_ms),
            humantime_secs(period_s),
            hours(self.available_ms),
            self.cycle,
            self.rounds_total,
            if self.every_agent_each_time {
                "every agent takes part in every occurrence and "
            } else {
                ""
            },
            self.cycle,
            humantime_secs(period_s * u64::from(self.cycle)),
        )
    }
}

/// A whole number of seconds as the configuration writes durations (`3h`, `90m`, `45s`).
fn humantime_secs(seconds: u64) -> String {
    if seconds > 0 && seconds % 3600 == 0 {
        format!("{}h", seconds / 3600)
    } else if seconds > 0 && seconds % 60 == 0 {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

/// The outcome of one planning call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// New runs, sorted by start time then run id.
    pub runs: Vec<PlannedRun>,
    pub non_starts: Vec<NonStart>,
    pub campaigns: Vec<CampaignSummary>,
}
