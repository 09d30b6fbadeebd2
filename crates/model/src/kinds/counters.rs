//! `counters`: an agent's network interface counters (bytes, packets, errors, drops
//! each way) sampled every interval, with deltas and rates across counter wraps and
//! resets — the passive counters of Narada Metrics (Bazan-Antequera et al., c. 2016),
//! sampled every 10 s by default as there. An agent reads its own interfaces: there is
//! no target, and reading counters disturbs no other run, so runs claim nothing.

use std::time::Duration;

use crate::config_error::ConfigError;
use crate::counters::{CounterWidth, CountersSpec};
use crate::kinds::spec::{
    duration_or_zero, Metric, Param, ParamKind, Participants, Service, Spec, TestKind,
};
use crate::scheduling::SchedulingClass;

/// Narada Metrics' sampling period for passive counters.
pub const DEFAULT_INTERVAL: &str = "10s";
pub const DEFAULT_COUNT: &str = "6";
pub const DEFAULT_COUNTER_BITS: &str = "64";
/// Linux's IFNAMSIZ less the terminating NUL.
pub const MAX_INTERFACE_NAME_BYTES: usize = 15;

pub const PARAMS: &[Param] = &[
    Param::new(
        "interfaces",
        ParamKind::Text,
        None,
        "interfaces to sample, comma-separated (default: every interface but lo)",
    ),
    Param::new(
        "interval",
        ParamKind::Duration,
        Some(DEFAULT_INTERVAL),
        "time between samples",
    ),
    Param::new(
        "count",
        ParamKind::Integer {
            min: 1,
            max: 100_000,
        },
        Some(DEFAULT_COUNT),
        "intervals to report (count + 1 samples)",
    ),
    Param::new(
        "counter_bits",
        ParamKind::Choice(&["64", "32"]),
        Some(DEFAULT_COUNTER_BITS),
        "counter width, where the counters wrap",
    ),
];

pub static KIND: TestKind = TestKind {
    name: "counters",
    summary: "interface counters each interval with rates across wraps and resets (Narada Metrics' passive counters, Bazan-Antequera et al.)",
    params: PARAMS,
    participants: Participants::Alone,
    scheduling: |_| SchedulingClass::Background,
    reversible: false,
    bulk_transfer: false,
    service: |_| Service::Portless,
    estimate,
    check,
    metrics: &[
        RX_BYTES,
        TX_BYTES,
        RX_RATE,
        TX_RATE,
        RX_PACKETS,
        TX_PACKETS,
        RX_ERRORS,
        TX_ERRORS,
        RX_DROPPED,
        TX_DROPPED,
        RESET_INTERVALS,
    ],
};

pub const RX_BYTES: Metric = Metric {
    name: "interface_rx_bytes",
    pointer: "/summary/rx_bytes",
    family: "vantage_interface_rx_bytes",
    unit: "bytes",
    scale: 1.0,
    help: "Bytes received on the sampled interfaces during the latest counters run.",
};
pub const TX_BYTES: Metric = Metric {
    name: "interface_tx_bytes",
    pointer: "/summary/tx_bytes",
    family: "vantage_interface_tx_bytes",
    unit: "bytes",
    scale: 1.0,
    help: "Bytes sent on the sampled interfaces during the latest counters run.",
};
pub const RX_RATE: Metric = Metric {
    name: "interface_rx_rate_bps",
    pointer: "/summary/rx_rate_bps",
    family: "vantage_interface_rx_bytes_per_second",
    unit: "bytes_per_second",
    scale: 0.125,
    help: "Mean receive rate of the sampled interfaces in the latest counters run.",
};
pub const TX_RATE: Metric = Metric {
    name: "interface_tx_rate_bps",
    pointer: "/summary/tx_rate_bps",
    family: "vantage_interface_tx_bytes_per_second",
    unit: "bytes_per_second",
    scale: 0.125,
    help: "Mean send rate of the sampled interfaces in the latest counters run.",
};
pub const RX_PACKETS: Metric = Metric {
    name: "interface_rx_packets",
    pointer: "/summary/rx_packets",
    family: "vantage_interface_rx_packets",
    unit: "",
    scale: 1.0,
    help: "Packets received on the sampled interfaces during the latest counters run.",
};
pub const TX_PACKETS: Metric = Metric {
    name: "interface_tx_packets",
    pointer: "/summary/tx_packets",
    family: "vantage_interface_tx_packets",
    unit: "",
    scale: 1.0,
    help: "Packets sent on the sampled interfaces during the latest counters run.",
};
pub const RX_ERRORS: Metric = Metric {
    name: "interface_rx_errors",
    pointer: "/summary/rx_errors",
    family: "vantage_interface_rx_errors",
    unit: "",
    scale: 1.0,
    help: "Receive errors on the sampled interfaces during the latest counters run.",
};
pub const TX_ERRORS: Metric = Metric {
    name: "interface_tx_errors",
    pointer: "/summary/tx_errors",
    family: "vantage_interface_tx_errors",
    unit: "",
    scale: 1.0,
    help: "Send errors on the sampled interfaces during the latest counters run.",
};
pub const RX_DROPPED: Metric = Metric {
    name: "interface_rx_dropped",
    pointer: "/summary/rx_dropped",
    family: "vantage_interface_rx_dropped",
    unit: "",
    scale: 1.0,
    help: "Received packets dropped on the sampled interfaces during the latest counters run.",
};
pub const TX_DROPPED: Metric = Metric {
    name: "interface_tx_dropped",
    pointer: "/summary/tx_dropped",
    family: "vantage_interface_tx_dropped",
    unit: "",
    scale: 1.0,
    help: "Packets to send dropped on the sampled interfaces during the latest counters run.",
};
pub const RESET_INTERVALS: Metric = Metric {
    name: "interface_counter_reset_intervals",
    pointer: "/summary/reset_intervals",
    family: "vantage_interface_reset_intervals",
    unit: "",
    scale: 1.0,
    help: "Intervals of the latest counters run in which a counter reset (no rate for them).",
};

fn estimate(spec: &Spec<'_>) -> Option<Duration> {
    let count = spec.number_u32("count").ok().flatten().unwrap_or(1);
    Some(duration_or_zero(spec, "interval") * count)
}

/// A name Linux could give an interface: what `/sys/class/net/NAME` may be.
pub(crate) fn check_interface_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("an interface name is empty (a stray comma?)".to_string());
    }
    if name.len() > MAX_INTERFACE_NAME_BYTES {
        return Err(format!(
            "interface name '{name}' is longer than {MAX_INTERFACE_NAME_BYTES} bytes"
        ));
    }
    if name == "."
        || name == ".."
        || name.contains(['/', ':'])
        || name.contains(char::is_whitespace)
    {
        return Err(format!(
            "'{name}' is not an interface name (no '/', ':' or spaces)"
        ));
    }
    Ok(())
}

/// The `interfaces` parameter as a list (empty: every interface but loopback).
pub fn interfaces(spec: &Spec<'_>) -> Result<Vec<String>, ConfigError> {
    let Some(text) = spec.text("interfaces")? else {
        return Ok(Vec::new());
    };
    let names: Vec<String> = text
        .split(',')
        .map(|name| name.trim().to_string())
        .collect();
    for name in &names {
        check_interface_name(name).map_err(|message| ConfigError::new("interfaces", message))?;
    }
    Ok(names)
}

fn check(spec: &Spec<'_>) -> Result<(), ConfigError> {
    engine_spec(spec).map(|_| ())
}

/// The engine's spec: the agent samples its own interfaces.
pub fn engine_spec(spec: &Spec<'_>) -> Result<CountersSpec, ConfigError> {
    let interval_us = spec.required("interval", Spec::duration_us)?;
    if interval_us == 0 {
        return Err(ConfigError::new("interval", "must be longer than zero"));
    }
    Ok(CountersSpec {
        interfaces: interfaces(spec)?,
        interval_us,
        count: spec.required("count", Spec::number_u32)?,
        counter_bits: match spec.required("counter_bits", Spec::text)?.as_str() {
            "32" => CounterWidth::Bits32,
            _ => CounterWidth::Bits64,
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn defaults_sample_every_interface_each_ten_seconds_in_the_background() {
        let values = KIND.normalise_json(json!({})).unwrap();
        let spec = engine_spec(&Spec::new(&KIND, &values)).unwrap();
        assert_eq!(
            spec,
            CountersSpec {
                interfaces: Vec::new(),
                interval_us: 10_000_000,
                count: 6,
                counter_bits: CounterWidth::Bits64,
            }
        );
        assert_eq!(KIND.scheduling_for(&values), SchedulingClass::Background);
        assert_eq!(KIND.participants, Participants::Alone);
        assert_eq!(
            (KIND.estimate)(&Spec::new(&KIND, &values)),
            Some(Duration::from_secs(60))
        );
    }

    #[test]
    fn interfaces_are_listed_and_checked_with_their_place() {
        let values = KIND
            .normalise_json(json!({"interfaces": "eth0, wlan0", "counter_bits": "32"}))
            .unwrap();
        let spec = engine_spec(&Spec::new(&KIND, &values)).unwrap();
        assert_eq!(spec.interfaces, vec!["eth0", "wlan0"]);
        assert_eq!(spec.counter_bits, CounterWidth::Bits32);
        for (bad, why) in [
            ("eth0,", "empty"),
            ("../etc", "not an interface name"),
            ("averyveryverylongname0", "longer than 15 bytes"),
        ] {
            let errors = KIND
                .normalise_json(json!({ "interfaces": bad }))
                .unwrap_err();
            assert_eq!(errors[0].path, "spec.interfaces", "{bad}");
            assert!(errors[0].message.contains(why), "{bad}: {}", errors[0]);
        }
        let errors = KIND.normalise_json(json!({"interval": "0s"})).unwrap_err();
        assert_eq!(errors[0].path, "spec.interval");
        let errors = KIND
            .normalise_json(json!({"counter_bits": "16"}))
            .unwrap_err();
        assert_eq!(errors[0].path, "spec.counter_bits");
    }
}
