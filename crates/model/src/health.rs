//! The health probe bundle's result: one probing round from a client to one peer,
//! reduced to the indicators of the network health system of Chard, Bubendorfer and
//! Ng (FGCS 2015): ICMP echo RTT at three sizes, UDP RTT at two sizes, sandwich
//! delay, TCP connect time and in-connection RTT, and a 10-second throughput test
//! sampled each second.
//!
//! Field names are the JSON contract of `docs/json-schema.md`; units are in the names.

use serde::{Deserialize, Serialize};

/// Round trips of one probe size (ICMP echo or UDP TWAMP-Light).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RttIndicator {
    pub size_bytes: u32,
    /// Probes sent.
    pub sent: u64,
    /// RTT of each answered probe, in send order.
    pub rtt_us: Vec<f64>,
    /// Why the part could not be measured (or ended early), if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Sandwich probing: d' − d of each completed round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandwichIndicator {
    pub rounds: u64,
    pub large_size_bytes: u32,
    pub delay_us: Vec<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// TCP: a new connection per probe, its establishment time and one request/response
/// round trip inside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpIndicator {
    pub sent: u64,
    pub connect_us: Vec<f64>,
    pub rtt_us: Vec<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Bulk TCP transfer: bytes in total and the rate of each one-second interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputIndicator {
    pub duration_s: f64,
    pub received_bytes: u64,
    /// `received_bytes` over `duration_s`, in bits per second.
    pub mean_bps: f64,
    pub per_second_bps: Vec<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Whole result of one `health` run (client → one peer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthResult {
    /// Always `"health"`.
    pub test: String,
    pub target: String,
    pub start_time: chrono::DateTime<chrono::Utc>,
    pub end_time: chrono::DateTime<chrono::Utc>,
    /// A probe unanswered after this long is lost.
    pub timeout_us: u64,
    /// One entry per ICMP size (empty when the part is off).
    pub icmp: Vec<RttIndicator>,
    /// One entry per UDP size (empty when the part is off).
    pub udp: Vec<RttIndicator>,
    pub sandwich: Option<SandwichIndicator>,
    pub tcp: Option<TcpIndicator>,
    pub throughput: Option<ThroughputIndicator>,
}

impl RttIndicator {
    /// Probes went out and none came back within the timeout (or the peer refused them).
    pub fn timed_out(&self) -> bool {
        self.sent > 0 && self.rtt_us.is_empty()
    }
}

impl SandwichIndicator {
    pub fn timed_out(&self) -> bool {
        self.rounds > 0 && self.delay_us.is_empty()
    }
}

impl TcpIndicator {
    pub fn timed_out(&self) -> bool {
        self.sent > 0 && self.connect_us.is_empty()
    }
}

impl ThroughputIndicator {
    /// Nothing got through: the peer did not take the transfer.
    pub fn timed_out(&self) -> bool {
        self.received_bytes == 0
    }
}

impl HealthResult {
    /// The indicators that timed out, by name (`icmp`, `udp`, `sandwich`, `tcp`,
    /// `throughput`). ICMP and UDP count once each, when every size timed out.
    pub fn timed_out_indicators(&self) -> Vec<&'static str> {
        let all =
            |parts: &[RttIndicator]| !parts.is_empty() && parts.iter().all(RttIndicator::timed_out);
        let mut names = Vec::new();
        if all(&self.icmp) {
            names.push("icmp");
        }
        if all(&self.udp) {
            names.push("udp");
        }
        if self
            .sandwich
            .as_ref()
            .is_some_and(SandwichIndicator::timed_out)
        {
            names.push("sandwich");
        }
        if self.tcp.as_ref().is_some_and(TcpIndicator::timed_out) {
            names.push("tcp");
        }
        if self
            .throughput
            .as_ref()
            .is_some_and(ThroughputIndicator::timed_out)
        {
            names.push("throughput");
        }
        names
    }
}

/// What one `health` run does, read from its spec (see `kinds::health`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthSpec {
    pub target: String,
    /// The peer's endpoint port (UDP reflector and TCP service).
    pub port: u16,
    /// ICMP echo payload sizes; empty when the part is off.
    pub icmp_sizes: Vec<u32>,
    /// UDP probe sizes; empty when the part is off.
    pub udp_sizes: Vec<u32>,
    pub sandwich: bool,
    pub tcp: bool,
    /// Length of the throughput test; `None` when the part is off.
    pub throughput_duration_us: Option<u64>,
    /// Probes per size, sandwiches, TCP connections.
    pub count: u32,
    pub interval_us: u64,
    pub timeout_us: u64,
}
