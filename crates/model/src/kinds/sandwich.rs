//! `sandwich`: sandwich probing (Chard et al., FGCS 2015) — two small packets
//! around a large one; the extra gap d' − d is the queuing the large packet adds.

use crate::config_error::ConfigError;
use crate::kinds::latency::dscp;
use crate::kinds::spec::{
    probing_time, Metric, Param, ParamKind, Participants, Service, Spec, Target, TestKind,
};
use crate::latency::SandwichSpec;
use crate::scheduling::SchedulingClass;

pub const DEFAULT_COUNT: &str = "10";
pub const DEFAULT_GAP: &str = "1ms";
pub const DEFAULT_INTERVAL: &str = "100ms";
pub const DEFAULT_SMALL_SIZE: &str = "64";

pub const PARAMS: &[Param] = &[
    Param::new(
        "count",
        ParamKind::Integer {
            min: 1,
            max: 1_000_000,
        },
        Some(DEFAULT_COUNT),
        "rounds (sandwiches) to send",
    ),
    Param::new(
        "gap",
        ParamKind::Duration,
        Some(DEFAULT_GAP),
        "gap d between the sends of the two small packets",
    ),
    Param::new(
        "interval",
        ParamKind::Duration,
        Some(DEFAULT_INTERVAL),
        "time between the starts of rounds",
    ),
    Param::new(
        "timeout",
        ParamKind::Duration,
        Some(crate::kinds::latency::DEFAULT_TIMEOUT),
        "a packet unanswered after this long is lost",
    ),
    Param::new(
        "small_size",
        ParamKind::Bytes,
        Some(DEFAULT_SMALL_SIZE),
        "size of the two small packets (UDP payload)",
    ),
    Param::new(
        "large_size",
        ParamKind::Bytes,
        None,
        "size of the large packet (default: path MTU minus headers)",
    ),
    Param::new(
        "dscp",
        ParamKind::Integer { min: 0, max: 63 },
        Some("0"),
        "DSCP code point",
    ),
    Param::new(
        "allow_fragmentation",
        ParamKind::Flag,
        Some("false"),
        "allow a large packet beyond the path MTU",
    ),
];

pub static KIND: TestKind = TestKind {
    name: "sandwich",
    summary: "sandwich probing (Chard et al., FGCS 2015): queuing delay a large packet adds to a small one",
    params: PARAMS,
    participants: Participants::Pair,
    scheduling: |_| SchedulingClass::Shared,
    reversible: false,
    bulk_transfer: false,
    service: |_| Service::Endpoint,
    estimate: probing_time,
    check: crate::kinds::spec::no_check,
    metrics: &[QUEUING_MEDIAN, LOST_ROUNDS],
};

pub const QUEUING_MEDIAN: Metric = Metric {
    name: "sandwich_delay_median_us",
    pointer: "/summary/queuing_delay_us/median",
    family: "vantage_sandwich_delay_median_seconds",
    unit: "seconds",
    scale: 1e-6,
    help: "Median sandwich delay d' - d of the latest run.",
};
pub const LOST_ROUNDS: Metric = Metric {
    name: "sandwich_lost_rounds",
    pointer: "/summary/lost_rounds",
    family: "vantage_sandwich_lost_rounds",
    unit: "",
    scale: 1.0,
    help: "Sandwich rounds with a small packet lost in the latest run.",
};

/// The engine's spec for a run against `target`.
pub fn engine_spec(spec: &Spec<'_>, target: &Target) -> Result<SandwichSpec, ConfigError> {
    Ok(SandwichSpec {
        target: target.host.clone(),
        port: target.port,
        count: spec.required("count", Spec::number_u32)?,
        gap_us: spec.required("gap", Spec::duration_us)?,
        interval_us: spec.required("interval", Spec::duration_us)?,
        timeout_us: spec.required("timeout", Spec::duration_us)?,
        small_size_bytes: spec.required("small_size", Spec::number_u32)?,
        large_size_bytes: spec.number_u32("large_size")?,
        dscp: dscp(spec)?,
        allow_fragmentation: spec.flag("allow_fragmentation")?,
    })
}
