//! `trace`: path discovery with flow-stable probes (Paris traceroute, Augustin et
//! al., IMC 2006) over UDP, ICMP echo or TCP SYN. The server compares each trace
//! with the previous one of the same pair and stores whether the path changed.

use std::time::Duration;

use crate::config_error::ConfigError;
use crate::kinds::spec::{Metric, Param, ParamKind, Participants, Service, Spec, Target, TestKind};
use crate::scheduling::SchedulingClass;
use crate::trace::{TraceProtocol, TraceSpec, MAX_QUERIES, MAX_TTL_LIMIT};

pub const DEFAULT_MAX_TTL: &str = "30";
pub const DEFAULT_FIRST_TTL: &str = "1";
pub const DEFAULT_QUERIES: &str = "3";
pub const DEFAULT_TIMEOUT: &str = "1s";

pub const PARAMS: &[Param] = &[
    Param::new(
        "protocol",
        ParamKind::Choice(&["udp", "icmp", "tcp"]),
        Some("udp"),
        "udp, icmp (echo) or tcp (SYN, needs raw sockets)",
    ),
    Param::new(
        "port",
        ParamKind::Integer {
            min: 1,
            max: 65_535,
        },
        None,
        "destination port (default 33434 for udp, 80 for tcp)",
    ),
    Param::new(
        "first_ttl",
        ParamKind::Integer {
            min: 1,
            max: MAX_TTL_LIMIT as u64,
        },
        Some(DEFAULT_FIRST_TTL),
        "first TTL probed",
    ),
    Param::new(
        "max_ttl",
        ParamKind::Integer {
            min: 1,
            max: MAX_TTL_LIMIT as u64,
        },
        Some(DEFAULT_MAX_TTL),
        "last TTL probed",
    ),
    Param::new(
        "queries",
        ParamKind::Integer {
            min: 1,
            max: MAX_QUERIES as u64,
        },
        Some(DEFAULT_QUERIES),
        "probes per hop",
    ),
    Param::new(
        "timeout",
        ParamKind::Duration,
        Some(DEFAULT_TIMEOUT),
        "a probe unanswered after this long is lost",
    ),
    Param::new(
        "flow_id",
        ParamKind::Integer {
            min: 1,
            max: 65_535,
        },
        None,
        "source port (udp, tcp) or echo identifier (icmp) every probe keeps",
    ),
];

pub static KIND: TestKind = TestKind {
    name: "trace",
    summary: "path discovery with flow-stable probes (Paris traceroute, Augustin et al., IMC 2006) and path-change detection",
    params: PARAMS,
    participants: Participants::Pair,
    scheduling: |_| SchedulingClass::Shared,
    reversible: false,
    bulk_transfer: false,
    service: |_| Service::Portless,
    estimate,
    check,
    metrics: &[HOP_COUNT, REACHED, PATH_CHANGED],
};

pub const HOP_COUNT: Metric = Metric {
    name: "hop_count",
    pointer: "/hop_count",
    family: "vantage_trace_hops",
    unit: "",
    scale: 1.0,
    help: "Hops to the destination (or the last TTL probed) in the latest trace.",
};
pub const REACHED: Metric = Metric {
    name: "destination_reached",
    pointer: "/destination_reached",
    family: "vantage_trace_destination_reached",
    unit: "",
    scale: 1.0,
    help: "1 when the latest trace reached its destination.",
};
/// Derived by the server from two traces of one pair, not read from the document.
pub const PATH_CHANGED: Metric = Metric {
    name: "path_changed",
    pointer: "",
    family: "vantage_trace_path_changed",
    unit: "",
    scale: 1.0,
    help: "1 when the latest trace's path differs from the previous one of the pair.",
};

/// Worst case: every TTL, every probe waiting out its timeout.
fn estimate(spec: &Spec<'_>) -> Option<Duration> {
    let number = |name| spec.number_u32(name).ok().flatten().unwrap_or(1);
    let ttls = number("max_ttl").saturating_sub(number("first_ttl")) + 1;
    let timeout = spec.duration("timeout").ok().flatten().unwrap_or_default();
    Some(timeout * ttls * number("queries"))
}

/// The trace engine's own limits (TTL order, timeout range), with their field.
fn check(spec: &Spec<'_>) -> Result<(), ConfigError> {
    let target = Target {
        host: "checked.invalid".to_string(),
        port: 0,
    };
    engine_spec(spec, &target)?
        .validate()
        .map_err(|error| ConfigError::new(error.field, error.reason))
}

/// The engine's spec for a run towards `target` (its port, when the target names
/// one, is the destination port unless the spec gives `port`).
pub fn engine_spec(spec: &Spec<'_>, target: &Target) -> Result<TraceSpec, ConfigError> {
    let small = |name: &str| -> Result<u8, ConfigError> {
        let value = spec.required(name, Spec::number)?;
        u8::try_from(value).map_err(|_| ConfigError::new(name, format!("{value} is too large")))
    };
    let port = |name: &str| -> Result<Option<u16>, ConfigError> {
        spec.number(name)?
            .map(|value| {
                u16::try_from(value)
                    .map_err(|_| ConfigError::new(name, format!("{value} is not a port")))
            })
            .transpose()
    };
    let mut trace = TraceSpec::new(&target.host);
    trace.protocol = match spec.required("protocol", Spec::text)?.as_str() {
        "icmp" => TraceProtocol::Icmp,
        "tcp" => TraceProtocol::Tcp,
        _ => TraceProtocol::Udp,
    };
    trace.port = port("port")?.or((target.port != 0).then_some(target.port));
    trace.first_ttl = small("first_ttl")?;
    trace.max_ttl = small("max_ttl")?;
    trace.queries = small("queries")?;
    trace.timeout_us = spec.required("timeout", Spec::duration_us)?;
    trace.flow_id = port("flow_id")?;
    Ok(trace)
}
