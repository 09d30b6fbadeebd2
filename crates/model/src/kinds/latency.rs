//! `latency`: round-trip time, jitter, loss split by direction and one-way delay,
//! over UDP (TWAMP-Light, RFC 5357 Appendix I), TCP or ICMP echo.

use crate::config_error::ConfigError;
use crate::kinds::spec::{
    probing_time, Metric, Param, ParamKind, Participants, Service, Spec, Target, TestKind,
};
use crate::latency::{LatencyProtocol, LatencySpec, TransmitStamp, UdpMode};
use crate::scheduling::SchedulingClass;

pub const DEFAULT_COUNT: &str = "10";
pub const DEFAULT_INTERVAL: &str = "1s";
/// A probe unanswered after this long is lost (the timeout Chard et al., FGCS 2015, use).
pub const DEFAULT_TIMEOUT: &str = "5s";
pub const DEFAULT_SIZE: &str = "64";

pub const PARAMS: &[Param] = &[
    Param::new(
        "protocol",
        ParamKind::Choice(&["udp", "tcp", "icmp"]),
        Some("udp"),
        "udp (TWAMP-Light), tcp or icmp",
    ),
    Param::new(
        "count",
        ParamKind::Integer {
            min: 1,
            max: 1_000_000,
        },
        Some(DEFAULT_COUNT),
        "probes to send",
    ),
    Param::new(
        "interval",
        ParamKind::Duration,
        Some(DEFAULT_INTERVAL),
        "time between probe sends",
    ),
    Param::new(
        "timeout",
        ParamKind::Duration,
        Some(DEFAULT_TIMEOUT),
        "a probe unanswered after this long is lost",
    ),
    Param::new(
        "size",
        ParamKind::Bytes,
        Some(DEFAULT_SIZE),
        "probe size: UDP payload, ICMP payload or TCP request",
    ),
    Param::new(
        "dscp",
        ParamKind::Integer { min: 0, max: 63 },
        Some("0"),
        "DSCP code point of the probes",
    ),
    Param::new(
        "allow_fragmentation",
        ParamKind::Flag,
        Some("false"),
        "send probes larger than the path MTU",
    ),
    Param::new(
        "udp_mode",
        ParamKind::Choice(&["twamp-light", "stamp"]),
        Some("twamp-light"),
        "UDP test packets: TWAMP-Light (RFC 5357) or STAMP (RFC 8762)",
    ),
    Param::new(
        "tx_timestamp",
        ParamKind::Choice(&["kernel", "user"]),
        Some("kernel"),
        "transmit stamp from the kernel or from user space",
    ),
];

pub static KIND: TestKind = TestKind {
    name: "latency",
    summary: "RTT, jitter, loss by direction and one-way delay (TWAMP-Light RFC 5357, TCP, ICMP)",
    params: PARAMS,
    participants: Participants::Pair,
    scheduling: |_| SchedulingClass::Shared,
    reversible: false,
    bulk_transfer: false,
    service,
    estimate: probing_time,
    check: crate::kinds::spec::no_check,
    metrics: &[RTT_MIN, RTT_MEDIAN, RTT_P95, LOSS, JITTER, PROBE_SATURATED],
};

pub const RTT_MIN: Metric = Metric {
    name: "rtt_min_us",
    pointer: "/summary/rtt_us/min",
    family: "vantage_rtt_min_seconds",
    unit: "seconds",
    scale: 1e-6,
    help: "Minimum round-trip time of the latest run.",
};
pub const RTT_MEDIAN: Metric = Metric {
    name: "rtt_median_us",
    pointer: "/summary/rtt_us/median",
    family: "vantage_rtt_median_seconds",
    unit: "seconds",
    scale: 1e-6,
    help: "Median round-trip time of the latest run.",
};
pub const RTT_P95: Metric = Metric {
    name: "rtt_p95_us",
    pointer: "/summary/rtt_us/p95",
    family: "vantage_rtt_p95_seconds",
    unit: "seconds",
    scale: 1e-6,
    help: "95th percentile round-trip time of the latest run.",
};
pub const LOSS: Metric = Metric {
    name: "loss_ratio",
    pointer: "/summary/loss_ratio",
    family: "vantage_loss_ratio",
    unit: "ratio",
    scale: 1.0,
    help: "Fraction of probes lost in the latest run.",
};
pub const JITTER: Metric = Metric {
    name: "jitter_us",
    pointer: "/summary/jitter_us/rfc3550",
    family: "vantage_jitter_seconds",
    unit: "seconds",
    scale: 1e-6,
    help: "RFC 3550 jitter of the latest run.",
};
/// The probe's self-check (Miravalls-Sierra et al., 2018): its delays may be over-reported.
pub const PROBE_SATURATED: Metric = Metric {
    name: "probe_saturated",
    pointer: "/probe_cpu/saturated",
    family: "vantage_probe_saturated",
    unit: "",
    scale: 1.0,
    help: "1 when the probing host was near CPU saturation during the latest run.",
};

fn service(spec: &Spec<'_>) -> Service {
    match spec.text("protocol").ok().flatten().as_deref() {
        Some("icmp") => Service::Portless,
        _ => Service::Endpoint,
    }
}

/// The engine's spec for a run against `target`.
pub fn engine_spec(spec: &Spec<'_>, target: &Target) -> Result<LatencySpec, ConfigError> {
    Ok(LatencySpec {
        target: target.host.clone(),
        port: target.port,
        protocol: match spec.required("protocol", Spec::text)?.as_str() {
            "tcp" => LatencyProtocol::Tcp,
            "icmp" => LatencyProtocol::Icmp,
            _ => LatencyProtocol::Udp,
        },
        count: spec.required("count", Spec::number_u32)?,
        interval_us: spec.required("interval", Spec::duration_us)?,
        timeout_us: spec.required("timeout", Spec::duration_us)?,
        size_bytes: spec.required("size", Spec::number_u32)?,
        dscp: dscp(spec)?,
        allow_fragmentation: spec.flag("allow_fragmentation")?,
        tx_timestamp: match spec.required("tx_timestamp", Spec::text)?.as_str() {
            "user" => TransmitStamp::User,
            _ => TransmitStamp::Kernel,
        },
        udp_mode: match spec.required("udp_mode", Spec::text)?.as_str() {
            "stamp" => UdpMode::Stamp,
            _ => UdpMode::TwampLight,
        },
    })
}

/// The DSCP parameter, range-checked by its declaration.
pub(crate) fn dscp(spec: &Spec<'_>) -> Result<u8, ConfigError> {
    let value = spec.required("dscp", Spec::number)?;
    u8::try_from(value).map_err(|_| ConfigError::new("dscp", "out of range 0..=63"))
}
