//! Capacity test (`vantage capacity`): the SLA verification method of Rufini et al.
//! (Fotonica 2014).
//!
//! TCP bulk throughput B_t with RTT and congestion window; a UDP over-rate probe
//! giving B_c = (BT_U / BT_T) · B_c'; verification at B_c* = B_c − ε with a loss
//! check; the consistency bound B_t ≤ min(cwnd, rwnd)/RTT ≤ min(B_c, rwnd/RTT).
//! Capacities are IP-layer rates (UDP payload + UDP/IP headers), the rate a link
//! shaper sees; documented in `docs/throughput.md`.

use serde::{Deserialize, Serialize};

use crate::throughput::LimitedBy;

/// What a capacity run was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacitySpec {
    pub target: String,
    pub port: u16,
    /// ε as a fraction of B_c (Rufini et al.: 0.001).
    pub epsilon_ratio: f64,
    /// Largest loss accepted at B_c* (Rufini et al.: 0.001 = 0.1 %).
    pub loss_threshold_ratio: f64,
    pub tcp_duration_us: u64,
    pub udp_probe_duration_us: u64,
    /// Parallel TCP streams of the multi-stream run (the single-stream run always happens).
    pub tcp_streams: u32,
    pub packet_size_bytes: u32,
    /// Measure the downlink: the target sends every TCP run and UDP probe.
    #[serde(default)]
    pub reverse: bool,
    /// The server's ticket for a scheduled run towards an agent (never serialised).
    #[serde(skip)]
    pub ticket: Option<crate::ticket::TestTicket>,
}

/// One TCP bulk run of the capacity test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcpRun {
    pub streams: u32,
    pub received_bps: f64,
    pub rtt_us: Option<f64>,
    pub mean_cwnd_bytes: Option<f64>,
    pub mean_rwnd_bytes: Option<f64>,
    /// Mean over the intervals of min(cwnd, rwnd) / RTT (each interval's own RTT).
    pub window_rate_bps: Option<f64>,
    /// Mean over the intervals of rwnd / RTT.
    pub rwnd_rate_bps: Option<f64>,
    pub retransmits: Option<u64>,
    pub limited_by: LimitedBy,
}

/// One UDP probe at a fixed rate (ramp, over-rate or verification).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpProbe {
    /// `ramp`, `over_rate` or `verify`.
    pub purpose: String,
    pub target_rate_bps: f64,
    /// Achieved sending rate (IP layer) in the steady part of the probe.
    pub sent_bps: f64,
    /// Received rate (IP layer) in the steady part of the probe.
    pub received_bps: f64,
    pub sent_packets: u64,
    pub received_packets: u64,
    /// Over the whole probe.
    pub loss_ratio: f64,
}

/// Which term of B_t ≤ min(cwnd, rwnd)/RTT ≤ min(B_c, rwnd/RTT) binds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoundCheck {
    pub tcp_bps: f64,
    /// min(cwnd, rwnd) / RTT of the single-stream run.
    pub window_bps: Option<f64>,
    /// rwnd / RTT.
    pub rwnd_bps: Option<f64>,
    pub capacity_bps: f64,
    /// B_t ≤ min(cwnd, rwnd)/RTT ≤ min(B_c, rwnd/RTT) (10 % tolerance on each ≤,
    /// since RTT and windows are per-interval means).
    pub holds: Option<bool>,
    /// `receive_window` (B_t near rwnd/RTT), `congestion_window` (cwnd < rwnd and
    /// B_t near cwnd/RTT), `capacity` (B_t near B_c) or `unknown`.
    pub binding: String,
    pub explanation: String,
}

/// The calibration of Miravalls-Sierra et al. (2018): one stream, then several. When
/// several carry no more than one while the path carries more, the measuring hosts
/// (CPU, NIC, bus), not the network, set the figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamCalibration {
    pub streams: u32,
    /// Multi-stream over single-stream TCP throughput.
    pub gain_ratio: f64,
    /// The figures are the probe's, not the path's.
    pub probe_limited: bool,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacitySummary {
    /// B_c* when verified, else B_c (see `verified`).
    pub capacity_bps: f64,
    /// Single-stream TCP throughput B_t.
    pub tcp_bps: f64,
    /// Multi-stream TCP throughput.
    pub tcp_parallel_bps: f64,
    /// Smoothed TCP RTT of the single-stream run.
    pub rtt_us: Option<f64>,
    /// Loss at the verification rate B_c*.
    pub verified_loss_ratio: f64,
    pub verified: bool,
    /// B_c' (achieved over-rate).
    pub over_rate_bps: f64,
    /// B_c = (BT_U / BT_T) · B_c'.
    pub estimated_capacity_bps: f64,
    /// False when no UDP probe could be sent faster than the path delivered
    /// (the sender, not the path, was the limit): then `capacity_bps` is only a
    /// lower bound and `verified` is false, because the method's formula needs an
    /// over-rate probe that the path actually dropped.
    pub over_capacity_reached: bool,
}

/// Result of one capacity run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityResult {
    /// Always `capacity`.
    pub test: String,
    pub started_at: String,
    pub spec: CapacitySpec,
    pub summary: CapacitySummary,
    pub tcp_single: TcpRun,
    pub tcp_parallel: TcpRun,
    pub probes: Vec<UdpProbe>,
    pub bound: BoundCheck,
    /// Absent in results archived before the calibration existed.
    #[serde(default)]
    pub calibration: Option<StreamCalibration>,
}
