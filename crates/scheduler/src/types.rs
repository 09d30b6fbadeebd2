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
    /// Deterministic: `<task>/<from>><to>/<occurrence>` for periodic runs, so
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
    /// Test parameters to run (the test definition's normalised spec).
    pub spec: serde_json::Value,
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
}

/// The outcome of one planning call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// New runs, sorted by start time then run id.
    pub runs: Vec<PlannedRun>,
    pub non_starts: Vec<NonStart>,
    pub campaigns: Vec<CampaignSummary>,
}
