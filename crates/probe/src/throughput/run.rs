//! What one side of a throughput test measured ([`LocalRun`]): the engine produces it, the
//! native protocol's `report` message carries the endpoint's to the client, and
//! [`super::report`] and the iperf3 code turn it into results.

use serde::{Deserialize, Serialize};

use crate::cpu::ThreadCpuUse;
use crate::tcp_info::TcpInfo;

/// One stream at an interval boundary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamSample {
    pub id: u32,
    /// Bytes sent or received since the start.
    pub cumulative_bytes: u64,
    pub tcp_info: Option<TcpInfo>,
}

/// An interval as one side saw it; seconds since that side's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalInterval {
    pub start_s: f64,
    pub end_s: f64,
    pub streams: Vec<StreamSample>,
}

/// Receiver-side UDP figures of one interval (index-aligned with the intervals).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct UdpIntervalCounts {
    pub received_packets: u64,
    pub duplicate_packets: u64,
    pub reordered_packets: u64,
    /// One more than the highest packet number seen up to the end of the interval
    /// (numbers from 0), for per-interval loss.
    pub highest_seen: u64,
    pub jitter_us: Option<f64>,
}

/// Receiver-side UDP totals of one stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct UdpReceived {
    pub received_packets: u64,
    pub duplicate_packets: u64,
    pub reordered_packets: u64,
    pub highest_seen: u64,
    pub intervals: Vec<UdpIntervalCounts>,
}

/// How one stream ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamOutcome {
    pub id: u32,
    pub sending: bool,
    /// Payload bytes sent or (distinct) received.
    pub bytes: u64,
    /// Seconds from the start to the stream's last byte.
    pub active_s: f64,
    /// UDP sender: datagrams sent; slots it could not keep up with.
    pub packets_sent: u64,
    pub packets_skipped: u64,
    pub udp_received: Option<UdpReceived>,
    pub cpu: ThreadCpuUse,
    pub error: Option<String>,
    /// Retransmits reported by a peer that has no interval samples (iperf3 results).
    #[serde(default)]
    pub reported_retransmits: Option<u64>,
}

/// Everything one side measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalRun {
    pub wall_s: f64,
    pub intervals: Vec<LocalInterval>,
    pub streams: Vec<StreamOutcome>,
    pub online_cores: usize,
}

impl LocalRun {
    /// CPU time of the stream threads / (wall × cores).
    pub fn cpu_ratio(&self) -> f64 {
        let cpu_s: f64 = self.streams.iter().map(|s| s.cpu.cpu_s).sum();
        if self.wall_s > 0.0 {
            cpu_s / (self.wall_s * self.online_cores.max(1) as f64)
        } else {
            0.0
        }
    }

    pub fn max_thread_cpu_ratio(&self) -> f64 {
        self.streams
            .iter()
            .map(|s| s.cpu.cpu_ratio())
            .fold(0.0, f64::max)
    }

    pub fn max_thread_runqueue_wait_ratio(&self) -> f64 {
        self.streams
            .iter()
            .map(|s| s.cpu.runqueue_wait_ratio())
            .fold(0.0, f64::max)
    }

    pub fn max_thread_demand_ratio(&self) -> f64 {
        self.streams
            .iter()
            .map(|s| s.cpu.demand_ratio())
            .fold(0.0, f64::max)
    }
}
