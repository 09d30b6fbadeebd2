//! Conflict-free measurement scheduler (pure: no I/O, no clock reads).
//!
//! Given a validated configuration, the registered agents, a planning window
//! and the runs already planned, [`plan`] decides when each run of each task
//! happens so that no two runs hold a resource in incompatible modes at once:
//!
//! - every run claims its two agents' measurement interfaces and the declared
//!   segments it crosses, **exclusively** (throughput, capacity) or **shared**
//!   (latency), or nothing (`background`);
//! - a run may start anywhere within its task's slip after its nominal time;
//!   its preferred start is a deterministic pseudo-random point in that range
//!   (so meshes do not fire in lockstep), and the earliest conflict-free start
//!   from there is taken;
//! - exclusive tasks run as **campaigns**: the pairs are packed into rounds of
//!   disjoint pairs (round-robin tournament), so a full mesh of N agents takes
//!   N−1 rounds (N for odd N) per direction instead of N(N−1) serial runs;
//! - the agent that cannot accept inbound connections is always the client
//!   (throughput then runs in reverse mode to keep the direction);
//! - anything that cannot be placed is returned as a [`NonStart`] with the reason.
//!
//! [`place_request`] places an app's on-demand run, preempting lower-priority
//! runs that have not started when it cannot fit otherwise. [`find_overlaps`]
//! checks any set of runs (planned or as recorded) for conflicts.
//! Ideas from perfSONAR pScheduler (exclusive/normal/background classes, slip)
//! and seeds 000/003 (see docs/scheduler.md).

mod ondemand;
mod plan;
pub mod rounds;
mod timeline;
mod verify;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use vantage_model::config::TestType;

pub use ondemand::{place_request, OnDemandRequest, Placement, RequestOutcome, ON_DEMAND_TASK};
pub use plan::{plan, PlanWindow};
pub use verify::{find_overlaps, Occupancy, Overlap};

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
        }
    }
}

/// How a run holds a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimMode {
    /// No other run may hold the resource meanwhile.
    Exclusive,
    /// Other shared claims may overlap; exclusive ones may not.
    Shared,
}

/// A resource held by a run: `agent:<name>` (the agent's measurement
/// interface) or `segment:<name>` (a declared segment or uplink).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Claim {
    pub resource: String,
    pub mode: ClaimMode,
}

/// Resource name of an agent's measurement interface.
pub fn agent_resource(agent: &str) -> String {
    format!("agent:{agent}")
}

/// Resource name of a declared segment.
pub fn segment_resource(segment: &str) -> String {
    format!("segment:{segment}")
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
    pub test_type: TestType,
    /// Runs the test and uploads the result.
    pub client: String,
    /// Its endpoint is the target.
    pub server: String,
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

/// Milliseconds since the epoch, rounded down (starts of reservations, latest starts).
fn to_ms(time: DateTime<Utc>) -> i64 {
    time.timestamp_millis()
}

/// Milliseconds since the epoch, rounded up (ends of reservations, earliest
/// starts), so callers' sub-millisecond times never shrink a reservation.
fn to_ms_ceil(time: DateTime<Utc>) -> i64 {
    let floor = time.timestamp_millis();
    if time.timestamp_subsec_nanos() % 1_000_000 == 0 {
        floor
    } else {
        floor + 1
    }
}

fn from_ms(ms: i64) -> DateTime<Utc> {
    // Planning times come from DateTimes and bounded durations, so they stay in range.
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Stable 64-bit hash (FNV-1a with a SplitMix64 finaliser): the same across
/// platforms and Rust versions, unlike `DefaultHasher`, so slips are reproducible.
fn stable_hash(seed: u64, text: &str) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}
