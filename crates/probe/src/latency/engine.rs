//! What the latency engines (UDP, TCP, ICMP) share and hand back: the error type (sandwich
//! probing uses it too), progress reports, and the per-probe and per-run outcomes that
//! `run_latency` summarizes.

use std::io;
use std::net::SocketAddr;

use vantage_model::latency::{OneWay, ReflectorReport, Timestamping};
use vantage_stats::LossSplit;

use crate::mtu::WouldFragment;

/// Why a latency (or sandwich) run could not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum LatencyError {
    #[error("invalid option: {0}")]
    InvalidSpec(String),
    #[error("cannot resolve '{target}': {reason}")]
    Resolve { target: String, reason: String },
    #[error("{addr} refused the probes ({detail})")]
    Refused { addr: SocketAddr, detail: String },
    #[error("{addr} is unreachable: {source}")]
    Unreachable { addr: SocketAddr, source: io::Error },
    #[error(transparent)]
    WouldFragment(#[from] WouldFragment),
    #[error("{0}")]
    Permission(String),
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("{addr} does not speak the vantage TCP service: {detail}")]
    Protocol { addr: SocketAddr, detail: String },
}

impl LatencyError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }

    /// Maps a send/connect error to refused / unreachable where it says so.
    pub(crate) fn from_send(addr: SocketAddr, err: io::Error) -> Self {
        match err.raw_os_error() {
            Some(libc::ECONNREFUSED) => Self::Refused {
                addr,
                detail: "connection refused / port unreachable".into(),
            },
            Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EADDRNOTAVAIL) => {
                Self::Unreachable { addr, source: err }
            }
            _ => Self::io(format!("sending to {addr}"), err),
        }
    }
}

/// Progress as probes go out and come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub sent: u32,
    pub answered: u32,
    pub total: u32,
}

/// What an engine measured for one probe.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProbeOutcome {
    pub sent_offset_us: f64,
    pub rtt_us: Option<f64>,
    pub forward_us: Option<f64>,
    pub reverse_us: Option<f64>,
    pub reflector_seq: Option<u32>,
    pub connect_us: Option<f64>,
}

/// What an engine hands to `summarize` (in the parent module).
pub(crate) struct EngineRun {
    pub probes: Vec<ProbeOutcome>,
    /// Forward/reverse split when the protocol allows one (UDP/TWAMP).
    pub loss_split: Option<LossSplit>,
    pub duplicates: u64,
    pub reordered: u64,
    pub timestamping: Timestamping,
    /// UDP only; computed by the engine from both clocks' sync state.
    pub one_way: Option<OneWay>,
    /// UDP only: Sender TTL / SSID as the reflector returned them.
    pub reflector: Option<ReflectorReport>,
}
