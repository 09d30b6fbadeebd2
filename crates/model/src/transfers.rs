//! Deadline transfers, planned by Calibers (Alali, PhD dissertation, University of
//! Virginia, 2019, ch. 4): what a client asks for, what the server tells the sending
//! agent each epoch, what that agent reports back, and what the API shows.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ticket::TestTicket;

/// Ticket `test` of a deadline transfer: the destination's endpoint receives one only
/// under a ticket naming it.
pub const TRANSFER_TEST: &str = "transfer";

/// `POST /api/v1/transfers`: move `bytes` from one agent to another by a deadline
/// (`deadline`, RFC 3339, or `window_s` seconds from now: exactly one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferAsk {
    pub source: String,
    pub destination: String,
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<f64>,
    /// The endpoints' ceiling (R^max); none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate_bps: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferState {
    /// Admitted; the source agent has not reported yet.
    Admitted,
    Running,
    /// Every byte reached the destination by the deadline.
    Completed,
    /// The deadline passed first; the transfer was stopped.
    Missed,
    /// The source agent could not carry it (the reason is in `error`).
    Failed,
}

impl TransferState {
    pub fn is_active(self) -> bool {
        matches!(self, TransferState::Admitted | TransferState::Running)
    }
}

/// A transfer as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferRecord {
    pub id: String,
    pub source: String,
    pub destination: String,
    pub bytes: u64,
    pub deadline: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rate_bps: Option<f64>,
    /// The scheduling policy that admitted it (`global-ljf`, …).
    pub policy: String,
    /// The declared segments (and directions) it crosses: the links it is planned on.
    pub links: Vec<String>,
    pub state: TransferState,
    /// The paced rate it is allocated now (goodput, bit/s); 0 once it has ended.
    pub rate_bps: f64,
    /// Bytes the destination has acknowledged receiving.
    pub delivered_bytes: u64,
    pub admitted_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
    /// Epochs in which it was behind its plan and was re-planned.
    pub replans: u32,
    /// The last epoch could not give it the rate its deadline needs (cleared once it can).
    pub at_risk: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One transfer the source agent is to send, at the rate it is allocated now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferAssignment {
    pub id: String,
    pub destination: String,
    /// Where the destination agent's endpoint listens.
    pub address: String,
    pub port: u16,
    pub bytes: u64,
    /// The paced goodput rate, bit/s.
    pub rate_bps: f64,
    pub deadline: DateTime<Utc>,
    /// The server's permission, which the destination's endpoint requires.
    pub ticket: TestTicket,
}

/// `GET /api/v1/agents/{name}/transfers`: the agent's transfers at plan `version`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferAssignments {
    pub version: u64,
    pub transfers: Vec<TransferAssignment>,
}

/// `POST /api/v1/agents/{name}/transfers/{id}/progress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferProgress {
    /// Bytes the destination has acknowledged receiving.
    pub delivered_bytes: u64,
    /// The sender has stopped: every byte delivered, or `error` says why not.
    #[serde(default)]
    pub done: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
