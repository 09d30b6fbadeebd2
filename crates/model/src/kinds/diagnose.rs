//! `diagnose`: the bundle a diagnosis runs on each segment of a path (pathdiag,
//! Mathis et al., PAM 2008, tests a path section by section): idle round trips with
//! one-way loss (TWAMP-Light), TCP each way with round trips under that load, and
//! small UDP datagrams each way (module `vantage_probe::diagnose`). Holds its
//! hosts alone: it transfers bulk data.

use std::time::Duration;

use crate::config_error::ConfigError;
use crate::diagnosis::DiagnosticSpec;
use crate::kinds::spec::{
    duration_or_zero, Param, ParamKind, Participants, Service, Spec, Target, TestKind,
};
use crate::scheduling::SchedulingClass;

/// Loss counts from 1 % and two lost probes: 200 probes expect two at 1 %. With 100, a
/// bursty 15 % loss (a half-duplex port) left fewer than two lost about once in 230 runs.
pub const DEFAULT_PROBES: &str = "200";
pub const DEFAULT_PROBE_INTERVAL: &str = "5ms";
pub const DEFAULT_PROBE_TIMEOUT: &str = "1s";
pub const DEFAULT_TCP_DURATION: &str = "1500ms";
pub const DEFAULT_TCP_OMIT: &str = "500ms";
pub const DEFAULT_SMALL_UDP_BYTES: &str = "128";
pub const DEFAULT_SMALL_UDP_DURATION: &str = "500ms";
pub const DEFAULT_SMALL_UDP_MAX_RATE: &str = "100M";

pub const PARAMS: &[Param] = &[
    Param::new(
        "probes",
        ParamKind::Integer {
            min: 10,
            max: 10_000,
        },
        Some(DEFAULT_PROBES),
        "idle round-trip probes",
    ),
    Param::new(
        "probe_interval",
        ParamKind::Duration,
        Some(DEFAULT_PROBE_INTERVAL),
        "time between round-trip probes, idle and under load",
    ),
    Param::new(
        "probe_timeout",
        ParamKind::Duration,
        Some(DEFAULT_PROBE_TIMEOUT),
        "a probe unanswered after this long is lost",
    ),
    Param::new(
        "tcp_duration",
        ParamKind::Duration,
        Some(DEFAULT_TCP_DURATION),
        "TCP transfer each way",
    ),
    Param::new(
        "tcp_omit",
        ParamKind::Duration,
        Some(DEFAULT_TCP_OMIT),
        "start of each transfer left out (slow start)",
    ),
    Param::new(
        "small_udp_bytes",
        ParamKind::Integer { min: 16, max: 512 },
        Some(DEFAULT_SMALL_UDP_BYTES),
        "payload of the small UDP datagrams",
    ),
    Param::new(
        "small_udp_duration",
        ParamKind::Duration,
        Some(DEFAULT_SMALL_UDP_DURATION),
        "small UDP datagrams each way",
    ),
    Param::new(
        "small_udp_max_rate",
        ParamKind::Rate,
        Some(DEFAULT_SMALL_UDP_MAX_RATE),
        "most the small datagrams are sent at (they go at 1.5 × the TCP rate)",
    ),
];

pub static KIND: TestKind = TestKind {
    name: "diagnose",
    summary: "segment diagnostic bundle for vantage diagnose (pathdiag, Mathis et al., PAM 2008): idle and loaded RTT with one-way loss, TCP and small UDP each way",
    params: PARAMS,
    participants: Participants::Pair,
    scheduling: |_| SchedulingClass::Exclusive,
    reversible: false,
    bulk_transfer: true,
    service: |_| Service::Endpoint,
    estimate,
    check,
    metrics: &[],
};

fn estimate(spec: &Spec<'_>) -> Option<Duration> {
    let probes = spec.number_u32("probes").ok().flatten().unwrap_or(1);
    let timeout = duration_or_zero(spec, "probe_timeout");
    let idle = duration_or_zero(spec, "probe_interval") * probes + timeout;
    let each_way =
        duration_or_zero(spec, "tcp_duration") + duration_or_zero(spec, "small_udp_duration");
    Some(idle + each_way * 2)
}

fn check(spec: &Spec<'_>) -> Result<(), ConfigError> {
    let tcp = spec.required("tcp_duration", Spec::duration_us)?;
    if tcp == 0 {
        return Err(ConfigError::new("tcp_duration", "must be longer than zero"));
    }
    if spec.required("tcp_omit", Spec::duration_us)? >= tcp {
        return Err(ConfigError::new(
            "tcp_omit",
            "must be shorter than tcp_duration",
        ));
    }
    if spec.required("probe_interval", Spec::duration_us)? == 0 {
        return Err(ConfigError::new(
            "probe_interval",
            "must be longer than zero",
        ));
    }
    if spec.required("small_udp_duration", Spec::duration_us)? == 0 {
        return Err(ConfigError::new(
            "small_udp_duration",
            "must be longer than zero",
        ));
    }
    Ok(())
}

/// The bundle's spec for a run against `target`.
pub fn engine_spec(spec: &Spec<'_>, target: &Target) -> Result<DiagnosticSpec, ConfigError> {
    check(spec)?;
    Ok(DiagnosticSpec {
        target: target.host.clone(),
        port: target.port,
        probes: spec.required("probes", Spec::number_u32)?,
        probe_interval_us: spec.required("probe_interval", Spec::duration_us)?,
        probe_timeout_us: spec.required("probe_timeout", Spec::duration_us)?,
        tcp_duration_us: spec.required("tcp_duration", Spec::duration_us)?,
        tcp_omit_us: spec.required("tcp_omit", Spec::duration_us)?,
        small_udp_bytes: spec.required("small_udp_bytes", Spec::number_u32)?,
        small_udp_duration_us: spec.required("small_udp_duration", Spec::duration_us)?,
        small_udp_max_rate_bps: spec.required("small_udp_max_rate", Spec::number)?,
        ticket: None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn defaults_take_six_seconds_and_hold_hosts_alone() {
        let values = KIND.normalise_json(json!({})).unwrap();
        let target = Target {
            host: "192.0.2.1".into(),
            port: 7862,
        };
        let spec = engine_spec(&Spec::new(&KIND, &values), &target).unwrap();
        assert_eq!(spec.probes, 200);
        assert_eq!(spec.tcp_duration_us, 1_500_000);
        assert_eq!(spec.small_udp_max_rate_bps, 100_000_000);
        assert_eq!(KIND.scheduling_for(&values), SchedulingClass::Exclusive);
        // 200 × 5 ms + 1 s idle, then 2 × (1.5 s + 0.5 s).
        assert_eq!(
            (KIND.estimate)(&Spec::new(&KIND, &values)),
            Some(Duration::from_millis(6_000))
        );
    }

    #[test]
    fn an_omit_as_long_as_the_transfer_is_refused_with_its_place() {
        let errors = KIND
            .normalise_json(json!({"tcp_duration": "1s", "tcp_omit": "1s"}))
            .unwrap_err();
        assert_eq!(errors[0].path, "spec.tcp_omit");
        let errors = KIND
            .normalise_json(json!({"small_udp_bytes": 4}))
            .unwrap_err();
        assert_eq!(errors[0].path, "spec.small_udp_bytes");
    }
}
