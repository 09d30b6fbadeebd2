//! `health`: the probe bundle of the network health system (Chard, Bubendorfer and
//! Ng, FGCS 2015) — ICMP echo at 64, 512 and 4096 bytes (fragmentation allowed),
//! UDP at 64 and 1024 bytes, sandwich probing, TCP connect time and in-connection
//! RTT, then 10 s of TCP throughput sampled each second; 5 s timeout. Every part can
//! be dropped (the paper advises dropping throughput to scale).
//!
//! The light parts run together, then the sandwich alone (its large packet must meet
//! an otherwise quiet path), then the throughput test. With throughput the bundle
//! holds its hosts alone (exclusive); without it, it shares them like `latency`.

use std::time::Duration;

use crate::config_error::ConfigError;
use crate::health::HealthSpec;
use crate::kinds::spec::{
    duration_or_zero, Metric, Param, ParamKind, Participants, Service, Spec, Target, TestKind,
};
use crate::scheduling::SchedulingClass;

pub const DEFAULT_ICMP_SIZES: &str = "64,512,4096";
pub const DEFAULT_UDP_SIZES: &str = "64,1024";
pub const DEFAULT_COUNT: &str = "10";
pub const DEFAULT_INTERVAL: &str = "100ms";
pub const DEFAULT_THROUGHPUT_DURATION: &str = "10s";
/// Largest probe size a list may name (an ICMP echo payload in one IPv4 datagram).
pub const MAX_PROBE_BYTES: u32 = 65_499;

pub const PARAMS: &[Param] = &[
    Param::new("icmp", ParamKind::Flag, Some("true"), "ICMP echo RTT part"),
    Param::new(
        "icmp_sizes",
        ParamKind::Text,
        Some(DEFAULT_ICMP_SIZES),
        "ICMP echo payload sizes, comma-separated (larger than the MTU: fragmented)",
    ),
    Param::new(
        "udp",
        ParamKind::Flag,
        Some("true"),
        "UDP RTT part (TWAMP-Light)",
    ),
    Param::new(
        "udp_sizes",
        ParamKind::Text,
        Some(DEFAULT_UDP_SIZES),
        "UDP probe sizes, comma-separated",
    ),
    Param::new(
        "sandwich",
        ParamKind::Flag,
        Some("true"),
        "sandwich probing part",
    ),
    Param::new(
        "tcp",
        ParamKind::Flag,
        Some("true"),
        "TCP connect time and in-connection RTT part",
    ),
    Param::new(
        "throughput",
        ParamKind::Flag,
        Some("true"),
        "TCP throughput part, sampled each second",
    ),
    Param::new(
        "count",
        ParamKind::Integer { min: 1, max: 1000 },
        Some(DEFAULT_COUNT),
        "probes per size, sandwiches and TCP connections",
    ),
    Param::new(
        "interval",
        ParamKind::Duration,
        Some(DEFAULT_INTERVAL),
        "time between probes of one part",
    ),
    Param::new(
        "timeout",
        ParamKind::Duration,
        Some(crate::kinds::latency::DEFAULT_TIMEOUT),
        "a probe unanswered after this long is lost",
    ),
    Param::new(
        "throughput_duration",
        ParamKind::Duration,
        Some(DEFAULT_THROUGHPUT_DURATION),
        "length of the throughput part",
    ),
];

pub static KIND: TestKind = TestKind {
    name: "health",
    summary: "network health probe bundle (Chard et al., FGCS 2015): ICMP, UDP, sandwich, TCP and throughput indicators for health markers and scores",
    params: PARAMS,
    participants: Participants::Pair,
    scheduling,
    reversible: false,
    bulk_transfer: true,
    service: |_| Service::Endpoint,
    estimate,
    check,
    metrics: &[
        THROUGHPUT_BPS,
        MARKER_TIMEOUT,
        MARKER_ICMP,
        MARKER_UDP,
        MARKER_TCP,
        MARKER_THROUGHPUT,
    ],
};

pub const THROUGHPUT_BPS: Metric = Metric {
    name: "health_throughput_bps",
    pointer: "/throughput/mean_bps",
    family: "vantage_health_throughput_bytes_per_second",
    unit: "bytes_per_second",
    scale: 0.125,
    help: "Mean rate of the latest health round's throughput part.",
};
/// A derived marker state (0 or 1) the server stores for each round it evaluates.
const fn marker(name: &'static str, family: &'static str, help: &'static str) -> Metric {
    Metric {
        name,
        pointer: "",
        family,
        unit: "",
        scale: 1.0,
        help,
    }
}

pub const MARKER_TIMEOUT: Metric = marker(
    "health_marker_timeout",
    "vantage_health_marker_timeout",
    "1 when more than one indicator of the latest health round got no answer within the timeout.",
);
pub const MARKER_ICMP: Metric = marker(
    "health_marker_icmp",
    "vantage_health_marker_icmp",
    "1 when 20 % of the latest round's ICMP probes exceeded the previous round's mean + σ.",
);
pub const MARKER_UDP: Metric = marker(
    "health_marker_udp",
    "vantage_health_marker_udp",
    "1 when the latest round's UDP RTTs exceeded the previous round's mean + σ or its sandwich delay rose by half.",
);
pub const MARKER_TCP: Metric = marker(
    "health_marker_tcp",
    "vantage_health_marker_tcp",
    "1 when the latest round's TCP connect times and RTTs exceeded the previous round's mean + σ.",
);
pub const MARKER_THROUGHPUT: Metric = marker(
    "health_marker_throughput",
    "vantage_health_marker_throughput",
    "1 when the latest round's throughput fell below the pair's long-term threshold.",
);

fn scheduling(spec: &Spec<'_>) -> SchedulingClass {
    if spec.flag("throughput").unwrap_or(true) {
        SchedulingClass::Exclusive
    } else {
        SchedulingClass::Shared
    }
}

/// The light parts together, the sandwich alone, then throughput: each probing
/// phase is `count` probes plus the wait for the last answer.
fn estimate(spec: &Spec<'_>) -> Option<Duration> {
    let count = spec.number_u32("count").ok().flatten().unwrap_or(1);
    let phase = duration_or_zero(spec, "interval") * count + duration_or_zero(spec, "timeout");
    let light = ["icmp", "udp", "tcp"]
        .iter()
        .any(|part| spec.flag(part).unwrap_or(false));
    let mut total = Duration::ZERO;
    if light {
        total += phase;
    }
    if spec.flag("sandwich").unwrap_or(false) {
        total += phase;
    }
    if spec.flag("throughput").unwrap_or(false) {
        total += duration_or_zero(spec, "throughput_duration");
    }
    Some(total)
}

/// A comma-separated list of probe sizes.
pub fn parse_sizes(text: &str) -> Result<Vec<u32>, String> {
    let sizes = text
        .split(',')
        .map(|item| {
            let item = item.trim();
            match item.parse::<u32>() {
                Ok(size) if (1..=MAX_PROBE_BYTES).contains(&size) => Ok(size),
                _ => Err(format!(
                    "'{item}' is not a probe size from 1 to {MAX_PROBE_BYTES} bytes"
                )),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut unique = sizes.clone();
    unique.sort_unstable();
    unique.dedup();
    if unique.len() != sizes.len() {
        return Err(format!("'{text}' names a size twice"));
    }
    Ok(sizes)
}

fn sizes(spec: &Spec<'_>, part: &str, list: &str) -> Result<Vec<u32>, ConfigError> {
    if !spec.flag(part)? {
        return Ok(Vec::new());
    }
    parse_sizes(&spec.required(list, Spec::text)?)
        .map_err(|message| ConfigError::new(list, message))
}

fn check(spec: &Spec<'_>) -> Result<(), ConfigError> {
    sizes(spec, "icmp", "icmp_sizes")?;
    sizes(spec, "udp", "udp_sizes")?;
    let any = ["icmp", "udp", "sandwich", "tcp", "throughput"]
        .iter()
        .any(|part| spec.flag(part).unwrap_or(false));
    if !any {
        return Err(ConfigError::new(
            "throughput",
            "every part is off: keep at least one of icmp, udp, sandwich, tcp, throughput",
        ));
    }
    if spec.flag("throughput")?
        && spec
            .required("throughput_duration", Spec::duration)?
            .is_zero()
    {
        return Err(ConfigError::new(
            "throughput_duration",
            "must be longer than zero (or set throughput = false)",
        ));
    }
    Ok(())
}

/// The bundle's spec for a run against `target`.
pub fn engine_spec(spec: &Spec<'_>, target: &Target) -> Result<HealthSpec, ConfigError> {
    check(spec)?;
    Ok(HealthSpec {
        target: target.host.clone(),
        port: target.port,
        icmp_sizes: sizes(spec, "icmp", "icmp_sizes")?,
        udp_sizes: sizes(spec, "udp", "udp_sizes")?,
        sandwich: spec.flag("sandwich")?,
        tcp: spec.flag("tcp")?,
        throughput_duration_us: if spec.flag("throughput")? {
            Some(spec.required("throughput_duration", Spec::duration_us)?)
        } else {
            None
        },
        count: spec.required("count", Spec::number_u32)?,
        interval_us: spec.required("interval", Spec::duration_us)?,
        timeout_us: spec.required("timeout", Spec::duration_us)?,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map, Value};

    use super::*;

    fn spec_of(values: &Map<String, Value>) -> HealthSpec {
        let target = Target {
            host: "192.0.2.1".into(),
            port: 7862,
        };
        engine_spec(&Spec::new(&KIND, values), &target).unwrap()
    }

    #[test]
    fn defaults_are_the_papers_bundle_and_hold_hosts_alone() {
        let values = KIND.normalise_json(json!({})).unwrap();
        let spec = spec_of(&values);
        assert_eq!(spec.icmp_sizes, vec![64, 512, 4096]);
        assert_eq!(spec.udp_sizes, vec![64, 1024]);
        assert!(spec.sandwich && spec.tcp);
        assert_eq!(spec.throughput_duration_us, Some(10_000_000));
        assert_eq!(spec.timeout_us, 5_000_000);
        assert_eq!(KIND.scheduling_for(&values), SchedulingClass::Exclusive);
        // Two probing phases of 10 × 100 ms + 5 s, then 10 s of throughput.
        assert_eq!(
            (KIND.estimate)(&Spec::new(&KIND, &values)),
            Some(Duration::from_secs(22))
        );
    }

    #[test]
    fn without_throughput_the_bundle_shares_and_is_shorter() {
        let values = KIND
            .normalise_json(json!({"throughput": false, "sandwich": false}))
            .unwrap();
        assert_eq!(KIND.scheduling_for(&values), SchedulingClass::Shared);
        assert_eq!(
            (KIND.estimate)(&Spec::new(&KIND, &values)),
            Some(Duration::from_secs(6))
        );
        assert_eq!(spec_of(&values).throughput_duration_us, None);
    }

    #[test]
    fn bad_sizes_and_an_empty_bundle_are_refused_with_the_place() {
        let errors = KIND
            .normalise_json(json!({"icmp_sizes": "64,x"}))
            .unwrap_err();
        assert_eq!(errors[0].path, "spec.icmp_sizes");
        assert!(errors[0].message.contains("'x'"), "{}", errors[0].message);
        let errors = KIND
            .normalise_json(json!({"udp_sizes": "64,64"}))
            .unwrap_err();
        assert!(errors[0].message.contains("twice"));
        let errors = KIND.normalise_json(json!({"udp_sizes": "0"})).unwrap_err();
        assert_eq!(errors[0].path, "spec.udp_sizes");
        let off = json!({"icmp": false, "udp": false, "sandwich": false, "tcp": false, "throughput": false});
        let errors = KIND.normalise_json(off).unwrap_err();
        assert!(errors[0].message.contains("every part is off"));
        // A part that is off does not have its sizes read.
        assert!(KIND
            .normalise_json(json!({"icmp": false, "icmp_sizes": "nonsense"}))
            .is_ok());
    }
}
