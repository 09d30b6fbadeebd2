//! Path discovery (`vantage trace`): Paris-traceroute-style flow-stable probes
//! (Augustin et al., "Avoiding traceroute anomalies with Paris traceroute", IMC 2006).
//!
//! Every probe of one trace keeps the header fields per-flow load balancers hash
//! (addresses, protocol, ports; for ICMP echo the identifier and the checksum), so all
//! hops belong to one path; see the `wire` module for how. Probes go out one at a time, TTL by
//! TTL, each waiting for its answer or its timeout, which keeps matching unambiguous
//! and stays well inside routers' ICMP rate limits.
//!
//! Sockets, least privilege first:
//! - UDP: an ordinary UDP socket with `IP_TTL` / `IPV6_UNICAST_HOPS`; ICMP errors come
//!   back on its error queue (`IP_RECVERR` / `IPV6_RECVERR`, `MSG_ERRQUEUE`) with the
//!   answering router in `SO_EE_OFFENDER`. No privilege needed.
//! - ICMP: an ICMP datagram ("ping") socket where `net.ipv4.ping_group_range` allows the
//!   caller's group (errors on its error queue as for UDP), else a raw ICMP socket (root
//!   or `CAP_NET_RAW`).
//! - TCP SYN: raw sockets only (root or `CAP_NET_RAW`), IPv4 only.
//!
//! Round-trip times are read in user space around the send and receive calls.

mod prober;
mod sockets;
mod wire;

use std::time::{Duration, Instant};

use vantage_model::trace::{ReplyKind, TraceHop, TraceProbe, TraceResult, TraceSpec, TraceStop};

use crate::latency::resolve_target;
use prober::Prober;
pub use prober::TraceError;

/// Traces the path `spec` describes.
pub fn run_trace(spec: &TraceSpec) -> Result<TraceResult, TraceError> {
    run_trace_with_progress(spec, &mut |_| {})
}

/// Traces the path `spec` describes, handing each hop to `hop_done` as it completes.
pub fn run_trace_with_progress(
    spec: &TraceSpec,
    hop_done: &mut dyn FnMut(&TraceHop),
) -> Result<TraceResult, TraceError> {
    spec.validate()?;
    let target = resolve_target(&spec.target, 0)
        .map_err(|err| TraceError::Resolve {
            target: spec.target.clone(),
            reason: err.to_string(),
        })?
        .ip();
    let mut prober = sockets::open(spec, target)?;
    let start_time = chrono::Utc::now();
    let timeout = Duration::from_micros(spec.timeout_us);
    let mut hops = Vec::new();
    let mut stop_reason = TraceStop::MaxTtl;
    let mut seq: u16 = 0;
    for ttl in spec.first_ttl..=spec.max_ttl {
        let mut probes = Vec::with_capacity(usize::from(spec.queries));
        for _ in 0..spec.queries {
            probes.push(probe_once(prober.as_mut(), ttl, seq, timeout)?);
            seq = seq.wrapping_add(1);
        }
        let hop = summarize_hop(ttl, probes);
        hop_done(&hop);
        let kinds: Vec<ReplyKind> = hop.probes.iter().filter_map(|p| p.reply).collect();
        hops.push(hop);
        if kinds.iter().any(|k| k.from_destination()) {
            stop_reason = TraceStop::DestinationReached;
            break;
        }
        if kinds.contains(&ReplyKind::Unreachable) {
            stop_reason = TraceStop::Unreachable;
            break;
        }
    }
    Ok(TraceResult {
        test: "trace".into(),
        spec: spec.clone(),
        target: spec.target.clone(),
        target_addr: target.to_string(),
        protocol: spec.protocol,
        method: prober.method(),
        flow: prober.flow(),
        start_time,
        end_time: chrono::Utc::now(),
        hop_count: hops.last().map_or(0, |h: &TraceHop| h.ttl),
        destination_reached: stop_reason == TraceStop::DestinationReached,
        stop_reason,
        hops,
    })
}

/// Sends one probe and waits for its answer until `timeout`.
fn probe_once(
    prober: &mut dyn Prober,
    ttl: u8,
    seq: u16,
    timeout: Duration,
) -> Result<TraceProbe, TraceError> {
    let sent_at = Instant::now();
    prober.send(ttl, seq)?;
    let deadline = sent_at + timeout;
    // Bounded by the deadline; the count cap guards against a flood of foreign answers.
    for _ in 0..10_000 {
        let Some(answer) = prober.receive(deadline)? else {
            break;
        };
        if answer.seq.is_some_and(|s| s != seq) {
            continue; // a late answer to an earlier probe
        }
        return Ok(TraceProbe {
            address: Some(answer.address.to_string()),
            rtt_us: Some(sent_at.elapsed().as_secs_f64() * 1e6),
            lost: false,
            reply: Some(answer.kind),
            icmp_type: answer.icmp.map(|(t, _)| t),
            icmp_code: answer.icmp.map(|(_, c)| c),
        });
    }
    Ok(TraceProbe {
        address: None,
        rtt_us: None,
        lost: true,
        reply: None,
        icmp_type: None,
        icmp_code: None,
    })
}

fn summarize_hop(ttl: u8, probes: Vec<TraceProbe>) -> TraceHop {
    let mut addresses: Vec<String> = Vec::new();
    for address in probes.iter().filter_map(|p| p.address.as_ref()) {
        if !addresses.contains(address) {
            addresses.push(address.clone());
        }
    }
    let rtts: Vec<f64> = probes.iter().filter_map(|p| p.rtt_us).collect();
    TraceHop {
        ttl,
        address: addresses.first().cloned(),
        addresses,
        rtt_us: vantage_stats::distribution(&rtts),
        sent: probes.len() as u32,
        answered: rtts.len() as u32,
        probes,
    }
}
