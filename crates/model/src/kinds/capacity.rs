//! `capacity`: the SLA verification method of Rufini et al. (Fotonica 2014) —
//! TCP bulk throughput B_t, a UDP over-rate probe giving B_c, verification at
//! B_c − ε with a loss check, and the window bound.

use std::time::Duration;

use crate::capacity::CapacitySpec;
use crate::config_error::ConfigError;
use crate::kinds::spec::{
    duration_or_zero, Metric, Param, ParamKind, Participants, Service, Spec, Target, TestKind,
};
use crate::scheduling::SchedulingClass;

/// ε as a fraction of B_c (Rufini et al.: 0.001).
pub const DEFAULT_EPSILON: &str = "0.001";
/// Largest loss accepted at B_c − ε (Rufini et al.: 0.1 %).
pub const DEFAULT_LOSS_THRESHOLD: &str = "0.001";
pub const DEFAULT_TCP_DURATION: &str = "3s";
pub const DEFAULT_PROBE_DURATION: &str = "2s";
pub const DEFAULT_TCP_STREAMS: &str = "4";
/// A 1500-byte IPv4 packet.
pub const DEFAULT_PACKET_SIZE: &str = "1472";

/// Upper bound of UDP probe phases in a run (ramp, over-rate, verification);
/// used only to size its reservation.
const UDP_PROBES: u32 = 8;
/// Time each TCP test of a run takes beyond its duration (connection setup and
/// the results exchange).
const TCP_TEST_OVERHEAD: Duration = Duration::from_millis(250);
/// Time each UDP probe takes beyond its duration: setup, the results exchange, and
/// the receiver's 300 ms wait for stragglers. Measured: a run of 2 × 500 ms TCP
/// and six 300 ms probes took 6.5 s where its test time alone is 2.8 s.
const UDP_PROBE_OVERHEAD: Duration = Duration::from_millis(500);

pub const PARAMS: &[Param] = &[
    Param::new(
        "epsilon_ratio",
        ParamKind::Ratio,
        Some(DEFAULT_EPSILON),
        "ε as a fraction of B_c: verification runs at B_c · (1 − ε)",
    ),
    Param::new(
        "loss_threshold_ratio",
        ParamKind::Ratio,
        Some(DEFAULT_LOSS_THRESHOLD),
        "largest loss ratio accepted at the verification rate",
    ),
    Param::new(
        "tcp_duration",
        ParamKind::Duration,
        Some(DEFAULT_TCP_DURATION),
        "length of each TCP run",
    ),
    Param::new(
        "udp_probe_duration",
        ParamKind::Duration,
        Some(DEFAULT_PROBE_DURATION),
        "length of each UDP probe",
    ),
    Param::new(
        "tcp_streams",
        ParamKind::Integer { min: 1, max: 128 },
        Some(DEFAULT_TCP_STREAMS),
        "streams of the parallel TCP run",
    ),
    Param::new(
        "packet_size",
        ParamKind::Bytes,
        Some(DEFAULT_PACKET_SIZE),
        "UDP payload bytes",
    ),
    Param::new(
        "reverse",
        ParamKind::Flag,
        Some("false"),
        "measure the downlink: the target sends",
    ),
];

pub static KIND: TestKind = TestKind {
    name: "capacity",
    summary: "line capacity by the SLA method of Rufini et al. (Fotonica 2014): TCP, UDP over-rate, verification at B_c − ε",
    params: PARAMS,
    participants: Participants::Pair,
    scheduling: |_| SchedulingClass::Exclusive,
    reversible: true,
    bulk_transfer: true,
    service: |_| Service::Endpoint,
    estimate,
    check: crate::kinds::spec::no_check,
    metrics: &[CAPACITY, TCP, VERIFIED_LOSS, PROBE_LIMITED],
};

pub const CAPACITY: Metric = Metric {
    name: "capacity_bps",
    pointer: "/summary/capacity_bps",
    family: "vantage_capacity_bytes_per_second",
    unit: "bytes_per_second",
    scale: 0.125,
    help: "Verified IP-layer capacity B_c − ε of the latest run.",
};
pub const TCP: Metric = Metric {
    name: "tcp_bps",
    pointer: "/summary/tcp_bps",
    family: "vantage_tcp_bytes_per_second",
    unit: "bytes_per_second",
    scale: 0.125,
    help: "Single-stream TCP throughput B_t of the latest capacity run.",
};
pub const VERIFIED_LOSS: Metric = Metric {
    name: "verified_loss_ratio",
    pointer: "/summary/verified_loss_ratio",
    family: "vantage_verified_loss_ratio",
    unit: "ratio",
    scale: 1.0,
    help: "Loss at the verification rate of the latest capacity run.",
};
/// One stream, then several (Miravalls-Sierra et al., 2018): the hosts set the figures.
pub const PROBE_LIMITED: Metric = Metric {
    name: "probe_limited",
    pointer: "/calibration/probe_limited",
    family: "vantage_probe_limited",
    unit: "",
    scale: 1.0,
    help: "1 when several streams carried no more than one while the path carried more in the latest capacity run.",
};

/// Two TCP runs (one stream and several) plus the UDP probe phases, each with its
/// setup and results exchange, so a run ends inside its reservation and does not
/// hold the next exclusive run's endpoint.
fn estimate(spec: &Spec<'_>) -> Option<Duration> {
    Some(
        (duration_or_zero(spec, "tcp_duration") + TCP_TEST_OVERHEAD) * 2
            + (duration_or_zero(spec, "udp_probe_duration") + UDP_PROBE_OVERHEAD) * UDP_PROBES,
    )
}

/// The engine's spec for a run against `target`; `reverse` as for throughput.
pub fn engine_spec(
    spec: &Spec<'_>,
    target: &Target,
    reverse: bool,
) -> Result<CapacitySpec, ConfigError> {
    Ok(CapacitySpec {
        target: target.host.clone(),
        port: target.port,
        epsilon_ratio: spec.required("epsilon_ratio", Spec::ratio)?,
        loss_threshold_ratio: spec.required("loss_threshold_ratio", Spec::ratio)?,
        tcp_duration_us: spec.required("tcp_duration", Spec::duration_us)?,
        udp_probe_duration_us: spec.required("udp_probe_duration", Spec::duration_us)?,
        tcp_streams: spec.required("tcp_streams", Spec::number_u32)?,
        packet_size_bytes: spec.required("packet_size", Spec::number_u32)?,
        reverse: spec.flag("reverse")? != reverse,
        ticket: None,
    })
}

/// A run with every default, towards `target` (the CLI starts from it).
pub fn default_spec(target: &Target) -> CapacitySpec {
    let defaults = serde_json::Map::new();
    engine_spec(&Spec::new(&KIND, &defaults), target, false).expect("the defaults are valid")
}
