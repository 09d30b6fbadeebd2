//! Path discovery (`vantage trace`): specification, result and path comparison.
//!
//! Probes are flow-stable in the manner of Paris traceroute (Augustin et al., "Avoiding
//! traceroute anomalies with Paris traceroute", IMC 2006): every probe of one trace keeps
//! the header fields per-flow load balancers hash, so all hops belong to one path.
//! Field names are the JSON contract of docs/json-schema.md; units are in the names.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::latency::Distribution;

/// Highest TTL / hop limit a trace may probe.
pub const MAX_TTL_LIMIT: u8 = 64;
/// Most probes per hop.
pub const MAX_QUERIES: u8 = 10;
/// Shortest and longest per-probe timeout.
pub const MIN_TIMEOUT_US: u64 = 1_000;
pub const MAX_TIMEOUT_US: u64 = 10_000_000;
/// Destination port of UDP probes when none is given (classic traceroute's base port).
pub const DEFAULT_UDP_PORT: u16 = 33_434;
/// Destination port of TCP SYN probes when none is given.
pub const DEFAULT_TCP_PORT: u16 = 80;

/// How the probes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceProtocol {
    /// UDP datagrams to a (normally closed) port; the destination answers port unreachable.
    #[default]
    Udp,
    /// ICMP echo requests; the destination answers echo reply.
    Icmp,
    /// TCP SYN; the destination answers SYN-ACK (open port) or RST (closed port).
    Tcp,
}

/// What a trace was asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceSpec {
    /// Host name or address to trace towards.
    pub target: String,
    /// Destination port (UDP, TCP); `None` = 33434 for UDP, 80 for TCP. ICMP has none.
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub protocol: TraceProtocol,
    /// First TTL / hop limit probed.
    #[serde(default = "default_first_ttl")]
    pub first_ttl: u8,
    /// Last TTL probed when the destination has not answered before (at most 64).
    #[serde(default = "default_max_ttl")]
    pub max_ttl: u8,
    /// Probes per hop (1..=10).
    #[serde(default = "default_queries")]
    pub queries: u8,
    /// A probe without an answer after this long is lost (1 ms ..= 10 s).
    #[serde(default = "default_timeout_us")]
    pub timeout_us: u64,
    /// Flow identifier kept by every probe: the source port (UDP, TCP) or the echo
    /// identifier (ICMP). `None` = chosen by the kernel or at random, once per trace.
    #[serde(default)]
    pub flow_id: Option<u16>,
}

fn default_first_ttl() -> u8 {
    1
}
fn default_max_ttl() -> u8 {
    30
}
fn default_queries() -> u8 {
    3
}
fn default_timeout_us() -> u64 {
    1_000_000
}

/// A [`TraceSpec`] value out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct TraceSpecError {
    pub field: &'static str,
    pub reason: String,
}

impl TraceSpec {
    /// A spec with every default and `target`.
    pub fn new(target: impl Into<String>) -> Self {
        TraceSpec {
            target: target.into(),
            port: None,
            protocol: TraceProtocol::default(),
            first_ttl: default_first_ttl(),
            max_ttl: default_max_ttl(),
            queries: default_queries(),
            timeout_us: default_timeout_us(),
            flow_id: None,
        }
    }

    /// The destination port probes use (`None` for ICMP).
    pub fn destination_port(&self) -> Option<u16> {
        match self.protocol {
            TraceProtocol::Udp => Some(self.port.unwrap_or(DEFAULT_UDP_PORT)),
            TraceProtocol::Tcp => Some(self.port.unwrap_or(DEFAULT_TCP_PORT)),
            TraceProtocol::Icmp => None,
        }
    }

    /// Checks every bound; the error names the field.
    pub fn validate(&self) -> Result<(), TraceSpecError> {
        let bad = |field, reason: String| Err(TraceSpecError { field, reason });
        if self.target.trim().is_empty() {
            return bad("target", "empty".into());
        }
        if self.first_ttl == 0 {
            return bad("first_ttl", "must be at least 1".into());
        }
        if self.max_ttl > MAX_TTL_LIMIT {
            return bad(
                "max_ttl",
                format!("{} is above the limit of {MAX_TTL_LIMIT}", self.max_ttl),
            );
        }
        if self.first_ttl > self.max_ttl {
            return bad(
                "first_ttl",
                format!("{} is above max_ttl {}", self.first_ttl, self.max_ttl),
            );
        }
        if self.queries == 0 || self.queries > MAX_QUERIES {
            return bad(
                "queries",
                format!("{} is outside 1..={MAX_QUERIES}", self.queries),
            );
        }
        if !(MIN_TIMEOUT_US..=MAX_TIMEOUT_US).contains(&self.timeout_us) {
            return bad(
                "timeout_us",
                format!(
                    "{} µs is outside {MIN_TIMEOUT_US}..={MAX_TIMEOUT_US} µs",
                    self.timeout_us
                ),
            );
        }
        if self.port == Some(0) {
            return bad("port", "0 is not a destination port".into());
        }
        Ok(())
    }
}

/// How the probes were sent and their answers read (what privilege it took).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceMethod {
    /// Unprivileged UDP socket; ICMP errors read from its error queue (IP_RECVERR).
    UdpDatagram,
    /// Unprivileged ICMP datagram ("ping") socket; errors from its error queue.
    IcmpDatagram,
    /// Raw ICMP socket (root / CAP_NET_RAW).
    IcmpRaw,
    /// Raw TCP socket for the SYNs, raw ICMP socket for the errors (root / CAP_NET_RAW).
    TcpRaw,
}

/// The header fields every probe of the trace kept (Paris traceroute's flow identifier).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceFlow {
    pub source_addr: Option<String>,
    pub source_port: Option<u16>,
    pub destination_port: Option<u16>,
    /// ICMP: the echo identifier.
    pub icmp_identifier: Option<u16>,
    /// ICMP: the echo checksum, the same on every probe (the sequence number's change is
    /// compensated in the payload). Absent for ICMPv6 (the kernel adds a pseudo-header sum).
    pub icmp_checksum: Option<u16>,
}

/// What answered a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyKind {
    /// ICMP time exceeded: a router on the way.
    TimeExceeded,
    /// ICMP port unreachable from the destination (UDP).
    PortUnreachable,
    /// ICMP echo reply from the destination.
    EchoReply,
    /// TCP SYN-ACK from the destination (port open).
    SynAck,
    /// TCP RST from the destination (port closed).
    Reset,
    /// A UDP datagram from the destination (something listens on the port).
    Datagram,
    /// ICMP destination unreachable other than port unreachable (network, host,
    /// administratively prohibited …): the trace stops there.
    Unreachable,
}

impl ReplyKind {
    /// True when the answer comes from the destination itself.
    pub fn from_destination(self) -> bool {
        matches!(
            self,
            Self::PortUnreachable | Self::EchoReply | Self::SynAck | Self::Reset | Self::Datagram
        )
    }
}

/// One probe of one hop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceProbe {
    /// Who answered; `None` when nothing did within the timeout.
    pub address: Option<String>,
    pub rtt_us: Option<f64>,
    pub lost: bool,
    pub reply: Option<ReplyKind>,
    /// ICMP type and code of the answer, when it was ICMP.
    pub icmp_type: Option<u8>,
    pub icmp_code: Option<u8>,
}

/// All probes sent with one TTL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceHop {
    pub ttl: u8,
    /// The address that answered (the first, if several did); `None` = no answer ("*").
    pub address: Option<String>,
    /// Every distinct address that answered at this TTL (more than one means the path
    /// changed during the trace or a per-packet balancer is in the way).
    pub addresses: Vec<String>,
    pub probes: Vec<TraceProbe>,
    /// Summary of the answered probes' round-trip times.
    pub rtt_us: Option<Distribution>,
    pub sent: u32,
    pub answered: u32,
}

/// Why the trace stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceStop {
    DestinationReached,
    /// An ICMP destination unreachable (not port unreachable) ended it.
    Unreachable,
    MaxTtl,
}

/// The whole result of `vantage trace --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceResult {
    /// Always `"trace"`.
    pub test: String,
    pub spec: TraceSpec,
    pub target: String,
    /// The resolved address traced towards.
    pub target_addr: String,
    pub protocol: TraceProtocol,
    pub method: TraceMethod,
    pub flow: TraceFlow,
    pub start_time: chrono::DateTime<chrono::Utc>,
    pub end_time: chrono::DateTime<chrono::Utc>,
    pub hops: Vec<TraceHop>,
    pub destination_reached: bool,
    pub stop_reason: TraceStop,
    /// TTL of the last hop listed: the distance to the destination when it was reached.
    pub hop_count: u8,
}

impl TraceResult {
    /// TTLs short of the destination (or of the last hop tried) that no probe answered.
    pub fn silent_hops(&self) -> Vec<u8> {
        let last = self.destination_ttl().unwrap_or(u8::MAX);
        self.hops
            .iter()
            .filter(|hop| hop.ttl < last && hop.addresses.is_empty())
            .map(|hop| hop.ttl)
            .collect()
    }

    /// Fills the hops no probe answered with another trace's answers at the same TTL:
    /// a retry over a lossy segment, whose bursts can swallow every probe of a hop.
    pub fn fill_silent_hops(&mut self, other: &TraceResult) {
        for hop in self.hops.iter_mut().filter(|hop| hop.addresses.is_empty()) {
            if let Some(answered) = other
                .hops
                .iter()
                .find(|theirs| theirs.ttl == hop.ttl && !theirs.addresses.is_empty())
            {
                *hop = answered.clone();
            }
        }
    }

    /// The TTL at which the destination answered.
    pub fn destination_ttl(&self) -> Option<u8> {
        self.hops
            .iter()
            .find(|hop| {
                hop.probes
                    .iter()
                    .any(|p| p.reply.is_some_and(ReplyKind::from_destination))
            })
            .map(|hop| hop.ttl)
    }
}

/// What [`compare_paths`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathComparison {
    pub changed: bool,
    /// Lowest TTL at which both traces got answers from different addresses (or at
    /// which the destination moved).
    pub first_difference_ttl: Option<u8>,
    /// Addresses on the current path, at differing hops, not seen on the previous one.
    pub added: Vec<String>,
    /// Addresses on the previous path, at differing hops, not seen on the current one.
    pub removed: Vec<String>,
    /// TTL of the destination in each trace, when it was reached.
    pub previous_destination_ttl: Option<u8>,
    pub current_destination_ttl: Option<u8>,
}

/// Compares two traces hop by hop. A hop that did not answer in one of them ("*") is no
/// evidence of a change by itself; hops answered by different addresses, or a
/// destination reached at a different distance, are.
pub fn compare_paths(previous: &TraceResult, current: &TraceResult) -> PathComparison {
    let answered = |trace: &TraceResult| -> BTreeSet<String> {
        trace
            .hops
            .iter()
            .flat_map(|hop| hop.addresses.iter().cloned())
            .collect()
    };
    let previous_all = answered(previous);
    let current_all = answered(current);
    let mut first_difference_ttl: Option<u8> = None;
    let mut added = BTreeSet::new();
    let mut removed = BTreeSet::new();
    for hop in &current.hops {
        let Some(before) = previous.hops.iter().find(|h| h.ttl == hop.ttl) else {
            continue;
        };
        if hop.addresses.is_empty() || before.addresses.is_empty() {
            continue;
        }
        let now: BTreeSet<&String> = hop.addresses.iter().collect();
        let then: BTreeSet<&String> = before.addresses.iter().collect();
        if now == then {
            continue;
        }
        first_difference_ttl = Some(first_difference_ttl.map_or(hop.ttl, |t| t.min(hop.ttl)));
        added.extend(
            now.iter()
                .filter(|a| !previous_all.contains(**a))
                .map(|a| (*a).clone()),
        );
        removed.extend(
            then.iter()
                .filter(|a| !current_all.contains(**a))
                .map(|a| (*a).clone()),
        );
    }
    let previous_destination_ttl = previous.destination_ttl();
    let current_destination_ttl = current.destination_ttl();
    if let (Some(p), Some(c)) = (previous_destination_ttl, current_destination_ttl) {
        if p != c {
            let ttl = p.min(c);
            first_difference_ttl = Some(first_difference_ttl.map_or(ttl, |t| t.min(ttl)));
        }
    }
    PathComparison {
        changed: first_difference_ttl.is_some(),
        first_difference_ttl,
        added: added.into_iter().collect(),
        removed: removed.into_iter().collect(),
        previous_destination_ttl,
        current_destination_ttl,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-made trace: `None` = a hop that did not answer; the last answered hop is the destination.
    fn trace(path: &[Option<&str>], reached: bool) -> TraceResult {
        let last = path.len();
        let hops = path
            .iter()
            .enumerate()
            .map(|(i, address)| {
                let ttl = i as u8 + 1;
                let reply = address.map(|_| {
                    if reached && i + 1 == last {
                        ReplyKind::PortUnreachable
                    } else {
                        ReplyKind::TimeExceeded
                    }
                });
                let probe = TraceProbe {
                    address: address.map(str::to_string),
                    rtt_us: address.map(|_| 100.0 * f64::from(ttl)),
                    lost: address.is_none(),
                    reply,
                    icmp_type: None,
                    icmp_code: None,
                };
                TraceHop {
                    ttl,
                    address: address.map(str::to_string),
                    addresses: address.iter().map(|a| a.to_string()).collect(),
                    probes: vec![probe],
                    rtt_us: None,
                    sent: 1,
                    answered: u32::from(address.is_some()),
                }
            })
            .collect();
        TraceResult {
            test: "trace".into(),
            spec: TraceSpec::new("10.0.0.9"),
            target: "10.0.0.9".into(),
            target_addr: "10.0.0.9".into(),
            protocol: TraceProtocol::Udp,
            method: TraceMethod::UdpDatagram,
            flow: TraceFlow {
                source_addr: None,
                source_port: Some(40_000),
                destination_port: Some(DEFAULT_UDP_PORT),
                icmp_identifier: None,
                icmp_checksum: None,
            },
            start_time: chrono::DateTime::UNIX_EPOCH,
            end_time: chrono::DateTime::UNIX_EPOCH,
            hops,
            destination_reached: reached,
            stop_reason: if reached {
                TraceStop::DestinationReached
            } else {
                TraceStop::MaxTtl
            },
            hop_count: last as u8,
        }
    }

    const A: Option<&str> = Some("10.0.0.1");
    const B: Option<&str> = Some("10.0.0.2");
    const C: Option<&str> = Some("10.0.0.3");
    const X: Option<&str> = Some("10.0.9.1");
    const D: Option<&str> = Some("10.0.0.9");

    #[test]
    fn identical_paths_do_not_change() {
        let comparison = compare_paths(&trace(&[A, B, C, D], true), &trace(&[A, B, C, D], true));
        assert!(!comparison.changed);
        assert_eq!(comparison.first_difference_ttl, None);
        assert!(comparison.added.is_empty() && comparison.removed.is_empty());
        assert_eq!(comparison.current_destination_ttl, Some(4));
    }

    #[test]
    fn a_retry_fills_the_hops_a_lossy_trace_missed() {
        let mut lossy = trace(&[A, None, C, None, D], true);
        assert_eq!(lossy.silent_hops(), vec![2, 4]);
        lossy.fill_silent_hops(&trace(&[A, B, None, X, D], true));
        let addresses: Vec<_> = lossy.hops.iter().map(|h| h.address.as_deref()).collect();
        assert_eq!(addresses, [A, B, C, X, D]);
        assert!(lossy.silent_hops().is_empty());
        // Beyond a destination never reached, every silent hop counts.
        assert_eq!(trace(&[A, None, None], false).silent_hops(), vec![2, 3]);
    }

    #[test]
    fn unanswered_hops_alone_are_no_change() {
        let before = trace(&[A, None, C, D], true);
        let after = trace(&[A, B, None, D], true);
        let comparison = compare_paths(&before, &after);
        assert!(!comparison.changed, "{comparison:?}");
        assert!(comparison.added.is_empty() && comparison.removed.is_empty());
    }

    #[test]
    fn detour_router_is_added_at_the_first_differing_hop() {
        let before = trace(&[A, B, C, D], true);
        let after = trace(&[A, B, X, C, D], true);
        let comparison = compare_paths(&before, &after);
        assert!(comparison.changed);
        assert_eq!(comparison.first_difference_ttl, Some(3));
        assert_eq!(comparison.added, vec!["10.0.9.1".to_string()]);
        assert!(comparison.removed.is_empty(), "C is still on the path");
        assert_eq!(comparison.previous_destination_ttl, Some(4));
        assert_eq!(comparison.current_destination_ttl, Some(5));
        let back = compare_paths(&after, &before);
        assert_eq!(back.removed, vec!["10.0.9.1".to_string()]);
        assert_eq!(back.first_difference_ttl, Some(3));
    }

    #[test]
    fn a_replaced_router_is_added_and_removed() {
        let comparison = compare_paths(&trace(&[A, B, D], true), &trace(&[A, X, D], true));
        assert!(comparison.changed);
        assert_eq!(comparison.first_difference_ttl, Some(2));
        assert_eq!(comparison.added, vec!["10.0.9.1".to_string()]);
        assert_eq!(comparison.removed, vec!["10.0.0.2".to_string()]);
    }

    #[test]
    fn destination_moving_behind_a_silent_hop_is_a_change() {
        // The new hop at TTL 3 does not answer; the destination is one hop further.
        let comparison = compare_paths(&trace(&[A, B, D], true), &trace(&[A, B, None, D], true));
        assert!(comparison.changed);
        assert_eq!(comparison.first_difference_ttl, Some(3));
        assert!(comparison.added.is_empty());
    }

    #[test]
    fn a_shorter_unfinished_trace_is_no_change() {
        let comparison = compare_paths(&trace(&[A, B, C, D], true), &trace(&[A, B], false));
        assert!(!comparison.changed);
        assert_eq!(comparison.current_destination_ttl, None);
    }

    #[test]
    fn spec_defaults_and_bounds() {
        let spec: TraceSpec = serde_json::from_str(r#"{"target": "example.net"}"#).unwrap();
        assert_eq!(spec, TraceSpec::new("example.net"));
        assert_eq!(spec.destination_port(), Some(DEFAULT_UDP_PORT));
        assert!(spec.validate().is_ok());
        let check = |edit: fn(&mut TraceSpec), field: &str| {
            let mut spec = TraceSpec::new("h");
            edit(&mut spec);
            assert_eq!(spec.validate().unwrap_err().field, field);
        };
        check(|s| s.max_ttl = 65, "max_ttl");
        check(|s| s.first_ttl = 0, "first_ttl");
        check(|s| s.first_ttl = 31, "first_ttl");
        check(|s| s.queries = 11, "queries");
        check(|s| s.queries = 0, "queries");
        check(|s| s.timeout_us = 10, "timeout_us");
        check(|s| s.timeout_us = 60_000_000, "timeout_us");
        check(|s| s.port = Some(0), "port");
        check(|s| s.target = " ".into(), "target");
        let tcp: TraceSpec =
            serde_json::from_str(r#"{"target": "h", "protocol": "tcp", "max_ttl": 8}"#).unwrap();
        assert_eq!(tcp.destination_port(), Some(DEFAULT_TCP_PORT));
        assert_eq!(tcp.max_ttl, 8);
    }

    #[test]
    fn result_json_round_trips_in_snake_case() {
        let result = trace(&[A, None, D], true);
        let json = serde_json::to_value(&result).unwrap();
        assert_eq!(json["method"], "udp_datagram");
        assert_eq!(json["hops"][1]["address"], serde_json::Value::Null);
        assert_eq!(json["hops"][2]["probes"][0]["reply"], "port_unreachable");
        assert_eq!(json["stop_reason"], "destination_reached");
        let back: TraceResult = serde_json::from_value(json).unwrap();
        assert_eq!(back, result);
    }
}
