//! Resources a run holds and how: the vocabulary of conflicts.

use serde::{Deserialize, Serialize};

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

/// An external host's resource: one iperf3 server serves one test at a time, so
/// exclusive runs towards it from different agents must not overlap either.
pub fn target_resource(target: &str) -> String {
    format!("target:{target}")
}
