//! What the probers share with the trace loop: the probe/answer interface, the error
//! type and small socket helpers.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use vantage_model::trace::{ReplyKind, TraceFlow, TraceMethod, TraceSpecError};

/// Why a trace could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("invalid trace option {0}")]
    InvalidSpec(#[from] TraceSpecError),
    #[error("cannot resolve '{target}': {reason}")]
    Resolve { target: String, reason: String },
    /// The method needs a privilege this process lacks; the text says which.
    #[error("{0}")]
    Permission(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl TraceError {
    pub(super) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// One answer to a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Answer {
    /// The probe's sequence number as the answer quotes it; `None` when the answer
    /// quotes too little to tell (it then belongs to the one probe outstanding).
    pub(super) seq: Option<u16>,
    pub(super) address: IpAddr,
    pub(super) kind: ReplyKind,
    pub(super) icmp: Option<(u8, u8)>,
}

/// A way of sending probes and reading their answers.
pub(super) trait Prober {
    fn method(&self) -> TraceMethod;
    fn flow(&self) -> TraceFlow;
    /// Sends probe `seq` with time-to-live `ttl`.
    fn send(&mut self, ttl: u8, seq: u16) -> Result<(), TraceError>;
    /// The next answer that arrives before `deadline`, or `None` at the deadline.
    fn receive(&mut self, deadline: Instant) -> Result<Option<Answer>, TraceError>;
}

/// Milliseconds to `deadline` for `poll(2)`, rounded up (0 once it has passed).
pub(super) fn poll_ms(deadline: Instant) -> i32 {
    deadline
        .saturating_duration_since(Instant::now())
        .as_micros()
        .div_ceil(1000)
        .min(i32::MAX as u128) as i32
}

/// The local address the kernel would send from towards `target` (a connected UDP
/// socket sends nothing).
pub(super) fn source_address(target: IpAddr) -> Result<IpAddr, TraceError> {
    let bind: SocketAddr = if target.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let socket = std::net::UdpSocket::bind(bind)
        .map_err(|e| TraceError::io("opening a socket to find the source address", e))?;
    socket
        .connect(SocketAddr::new(target, 9))
        .map_err(|e| TraceError::io(format!("no route to {target}"), e))?;
    socket
        .local_addr()
        .map(|a| a.ip())
        .map_err(|e| TraceError::io("reading the source address", e))
}
