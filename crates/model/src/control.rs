//! Control-plane wire contract between `vantage agent`, apps and `vantage server`.
//!
//! Both sides (crates `agent` and `server`) serialise exactly these types, so the
//! agent never needs the server's dependencies. Times are RFC 3339 UTC.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a bearer token may do. Every role may read the archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything, including token management and configuration.
    Admin,
    /// Register, heartbeat, fetch assigned runs, upload results.
    Agent,
    /// Apps: publish app metrics and alerts, request on-demand runs.
    Publisher,
    /// Read-only: queries, subscriptions, `/metrics`.
    Reader,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Agent => "agent",
            Role::Publisher => "publisher",
            Role::Reader => "reader",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        [Role::Admin, Role::Agent, Role::Publisher, Role::Reader]
            .into_iter()
            .find(|role| role.as_str() == text)
    }
}

/// Sent by an agent when it connects (and again after every reconnect).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRegistration {
    /// Unique agent name; re-registering a name updates that agent.
    pub name: String,
    /// Addresses other agents use to reach this agent's endpoint.
    pub addresses: Vec<String>,
    /// Port of the agent's in-process test endpoint.
    pub endpoint_port: u16,
    /// Port of the agent's iperf3-compatible listener, when it serves one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iperf3_port: Option<u16>,
    /// Free-form labels such as `site`, `segment`, `zone`.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Tests this agent can run as a client, e.g. `latency`, `throughput`.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// False behind NAT / firewalls: the agent is then only ever a client.
    pub accepts_inbound: bool,
    /// The agent's vantage version (older agents do not send it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Longest agent version string the server stores.
pub const MAX_VERSION_LEN: usize = 64;

/// One run the server assigned to an agent (the agent is its client).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssignedRun {
    pub run_id: String,
    pub task: String,
    pub test: String,
    pub client: String,
    pub server: String,
    /// Where the server agent's endpoint listens.
    pub server_address: String,
    pub server_port: u16,
    /// Test parameters (the test's spec object, e.g. `count`, `interval`, `duration`),
    /// shared by the runs of one test.
    pub spec: crate::shared_spec::SharedSpec,
    /// Throughput only: the server agent sends, because it cannot be reached as a client.
    pub reverse: bool,
    pub planned_start: DateTime<Utc>,
    pub planned_end: DateTime<Utc>,
    /// Towards another agent: the server's permission, which that agent's endpoint
    /// requires for throughput tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<RunTicket>,
}

/// The server's answer to a registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistrationAck {
    pub name: String,
    pub registered: bool,
    /// The server's Ed25519 public key (hex) that signs tickets now: the agent's
    /// endpoint serves throughput tests only under tickets the server signed.
    pub ticket_key: String,
    /// Every key the agent should trust now (hex): the signing key, a newer one about
    /// to sign, and older ones whose tickets may still be in use after a rotation.
    #[serde(default)]
    pub ticket_keys: Vec<String>,
}

impl RegistrationAck {
    /// The keys to trust: `ticket_keys`, or the signing key alone from a server that
    /// sends no list.
    pub fn trusted_keys(&self) -> Vec<String> {
        if self.ticket_keys.is_empty() {
            vec![self.ticket_key.clone()]
        } else {
            self.ticket_keys.clone()
        }
    }
}

/// The server's answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatAck {
    pub name: String,
    pub time: DateTime<Utc>,
    /// Every ticket key the agent should trust now, as in [`RegistrationAck`]: how a
    /// key rotation reaches running agents.
    #[serde(default)]
    pub ticket_keys: Vec<String>,
}

/// A run's ticket and where to present it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTicket {
    pub ticket: crate::ticket::TestTicket,
    /// The server agent's endpoint port: native tests carry the ticket in their
    /// request; before an iperf3 test the client presents it there.
    pub endpoint_port: u16,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssignedRuns {
    pub runs: Vec<AssignedRun>,
}

/// How a run ended on the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// `result` holds the engine's JSON result.
    Completed,
    /// The measurement could not be made; `error` says why.
    Failed,
}

/// A run's result as the agent uploads it; idempotent by `run_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultUpload {
    pub run_id: String,
    /// The uploading agent (must be the run's client).
    pub agent: String,
    pub outcome: RunOutcome,
    pub actual_start: DateTime<Utc>,
    pub actual_end: DateTime<Utc>,
    /// The engine's result document (`vantage latency --json` etc.), when completed.
    pub result: Option<serde_json::Value>,
    pub error: Option<String>,
}

/// The server's acknowledgement; once received the agent may delete its spooled copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultAck {
    pub run_id: String,
    /// True when this upload was already stored earlier (a retry); nothing was changed.
    pub duplicate: bool,
}

/// The server's answer to a batch upload (`POST /api/v1/results/batch`): one element
/// per upload, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchAck {
    pub results: Vec<BatchItemAck>,
    /// While the server's uploads queue for its archive: the least time, in
    /// milliseconds, from the start of this upload round to the agent's next one, so
    /// that a fleet sends fewer, fuller batches. Absent when uploads do not queue (and
    /// from servers that never pace): the agent keeps its own round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_round_ms: Option<u64>,
}

/// How one upload of a batch was answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BatchItemAck {
    /// Stored, or already stored (`duplicate`): the agent may delete its copy.
    Stored(ResultAck),
    /// Refused for the result itself (unknown run, another agent's run, no document).
    Refused { run_id: String, error: String },
}

/// One application metric sample (Narada Metrics' publish call, Bazan-Antequera et al.).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppMetric {
    pub name: String,
    pub value: f64,
    /// Unit of `value`, e.g. `bps`, `ratio`, `mos`.
    pub unit: String,
    pub timestamp: DateTime<Utc>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// An app's request for a test outside the configured schedules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    pub test: String,
    /// Agent that runs the test as client.
    pub client: String,
    /// Agent whose endpoint is the target.
    pub server: String,
    /// Test parameters, as in a configured task.
    #[serde(default = "empty_object")]
    pub spec: serde_json::Value,
    /// Earliest start; absent means now.
    pub not_before: Option<DateTime<Utc>>,
    /// Latest start; absent means as soon as possible within the planning horizon.
    pub not_after: Option<DateTime<Utc>>,
    /// Higher wins when requests contend for the same resources.
    #[serde(default)]
    pub priority: i32,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}
