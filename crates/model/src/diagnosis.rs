//! Diagnosis: the `diagnose` probe bundle one agent runs towards another (both
//! directions of one segment), and the verdict `vantage diagnose` returns.
//!
//! The bundle follows pathdiag (Mathis et al., "Pathdiag: automated TCP diagnosis",
//! PAM 2008) in testing each section of a path on its own and the Narada/PTaaS study
//! (Bazan-Antequera et al.) in measuring from measurement points at every hop: idle
//! round trips with one-way loss, TCP each way with round trips under that load,
//! and small UDP packets each way, whose rate tells a packet-bound host (a CPU-bound
//! VPN router) from a bit-rate limit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::latency::LatencySummary;
use crate::throughput::ThroughputResult;
use crate::ticket::TestTicket;

/// What a `diagnose` run measures towards `target`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnosticSpec {
    pub target: String,
    pub port: u16,
    /// Idle round-trip probes (TWAMP-Light), then the same cadence under load.
    pub probes: u32,
    pub probe_interval_us: u64,
    pub probe_timeout_us: u64,
    /// TCP each way.
    pub tcp_duration_us: u64,
    pub tcp_omit_us: u64,
    /// Small UDP datagrams each way, at 1.5 × that direction's TCP rate, at most
    /// `small_udp_max_rate_bps`.
    pub small_udp_bytes: u32,
    pub small_udp_duration_us: u64,
    pub small_udp_max_rate_bps: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<TestTicket>,
}

/// One direction of the bundle. Absent parts say why in `errors`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct DiagnosticDirection {
    pub tcp: Option<ThroughputResult>,
    /// Round trips measured while that TCP transfer ran.
    pub loaded: Option<LatencySummary>,
    pub small_udp: Option<ThroughputResult>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// Result of one `diagnose` run: `forward` is client → target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiagnosticResult {
    pub test: String,
    pub spec: DiagnosticSpec,
    pub start_time: chrono::DateTime<chrono::Utc>,
    pub end_time: chrono::DateTime<chrono::Utc>,
    pub idle: Option<LatencySummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_error: Option<String>,
    pub forward: DiagnosticDirection,
    pub reverse: DiagnosticDirection,
}

/// What `vantage diagnose` / `POST /api/v1/diagnose` is asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiagnoseRequest {
    /// Agent names: the path is measured from `source` towards `destination`.
    pub source: String,
    pub destination: String,
    /// The application's needs, when stated (NPAD/pathdiag's target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_rate_bps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_rtt_us: Option<u64>,
    /// An application profile naming the target (`youtube-1080p`, `ptaas-kinect`, …);
    /// an explicit `target_rate_bps` / `target_rtt_us` overrides its figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// Also measure segment by segment between the measurement points on the path.
    #[serde(default = "yes")]
    pub segments: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Healthy,
    Degraded,
    Unreachable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    ReceiveWindow,
    SendBuffer,
    HostCpu,
    OneWayLoss,
    Mtu,
    TunnelOverhead,
    Bufferbloat,
    RateLimit,
    PathChange,
    ProbeLimited,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::ReceiveWindow => "receive_window",
            Cause::SendBuffer => "send_buffer",
            Cause::HostCpu => "host_cpu",
            Cause::OneWayLoss => "one_way_loss",
            Cause::Mtu => "mtu",
            Cause::TunnelOverhead => "tunnel_overhead",
            Cause::Bufferbloat => "bufferbloat",
            Cause::RateLimit => "rate_limit",
            Cause::PathChange => "path_change",
            Cause::ProbeLimited => "probe_limited",
        }
    }
}

/// Which way along the path, source → destination being `forward`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathDirection {
    Forward,
    Reverse,
    Both,
}

/// One fact weighed for or against a suspect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The measurement: `tcp forward`, `idle probes`, `trace`, …
    pub test: String,
    pub metric: String,
    pub value: f64,
    /// What a healthy path would show, in words with units.
    pub expected: String,
    /// The stored run the value comes from.
    pub run_id: Option<String>,
    /// True when the fact speaks for the suspect, false when against.
    pub supports: bool,
    /// How strongly (0–1) it speaks; `confidence` weighs these.
    pub weight: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Suspect {
    pub cause: Cause,
    /// `A – B` between two measurement points, or a host's name for a host's cause.
    pub segment: String,
    pub direction: PathDirection,
    /// 0–1: the weight of the evidence for over all the evidence weighed.
    pub confidence: f64,
    pub evidence: Vec<Evidence>,
    pub fix: String,
}

/// The stated target and whether the path meets it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TargetAssessment {
    pub source: String,
    pub destination: String,
    /// Measurement points the path crosses, source first.
    pub path: Vec<String>,
    /// The application profile the target came from, when one was named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_rate_bps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_rtt_us: Option<u64>,
    /// Measured end to end, forward and reverse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_bps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reverse_bps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_us: Option<f64>,
    /// Whether the stated target is met; absent without a target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub met: Option<bool>,
    /// What the target needs of TCP (window, loss budget), in words.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub needs: BTreeMap<String, f64>,
}

/// One test the diagnosis ran (or found stored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestRun {
    pub test: String,
    pub client: String,
    pub server: String,
    pub run_id: String,
    pub outcome: String,
}

/// The answer of `vantage diagnose`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub verdict: Verdict,
    pub target: TargetAssessment,
    /// Most likely first.
    pub suspects: Vec<Suspect>,
    pub tests_run: Vec<TestRun>,
}
