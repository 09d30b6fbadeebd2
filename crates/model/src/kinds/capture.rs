//! `capture`: an agent captures packets on one of its interfaces for a bounded time,
//! with a BPF filter, analyses the capture where it was taken and uploads the flow
//! records, not the packets (passive flow records as in Narada Metrics, Bazan-Antequera
//! et al.; the handshake RTT of Miravalls-Sierra et al., 2018). The capture is made by
//! Wireshark's `dumpcap`. Capturing disturbs no other run, so runs claim nothing: a
//! capture runs during the scheduled tests it is meant to see.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config_error::ConfigError;
use crate::kinds::counters::check_interface_name;
use crate::kinds::spec::{Metric, Param, ParamKind, Participants, Service, Spec, TestKind};
use crate::scheduling::SchedulingClass;

pub const DEFAULT_INTERFACE: &str = "any";
pub const DEFAULT_DURATION: &str = "10s";
/// Headers only: flow records need no payload (payload bytes are read from the IP
/// header's length, so a short snapshot still counts whole payloads).
pub const DEFAULT_SNAPLEN: &str = "128";
pub const DEFAULT_MAX_PACKETS: &str = "1000000";
pub const DEFAULT_SIDE: &str = "auto";
/// The longest capture a run may make: a capture is held in a file on the agent until
/// it is analysed.
pub const MAX_DURATION: Duration = Duration::from_secs(600);
/// The largest capture uploaded with its packets, in bytes (16 MiB): base64 in the
/// upload, it stays well within the server's default request body limit (32 MiB).
pub const MAX_UPLOADED_PACKETS_BYTES: u64 = 16 << 20;
/// The longest BPF filter accepted (libpcap's own limit is far above any real filter).
pub const MAX_FILTER_BYTES: usize = 1024;

pub const PARAMS: &[Param] = &[
    Param::new(
        "interface",
        ParamKind::Text,
        Some(DEFAULT_INTERFACE),
        "interface to capture on (`any`: every interface, as Linux cooked frames)",
    ),
    Param::new(
        "filter",
        ParamKind::Text,
        None,
        "BPF capture filter, as tcpdump takes it (default: every packet)",
    ),
    Param::new(
        "duration",
        ParamKind::Duration,
        Some(DEFAULT_DURATION),
        "how long to capture, in whole seconds (at most 10 min)",
    ),
    Param::new(
        "snaplen",
        ParamKind::Integer {
            min: 64,
            max: 262_144,
        },
        Some(DEFAULT_SNAPLEN),
        "bytes kept of each frame (headers are enough for flow records)",
    ),
    Param::new(
        "max_packets",
        ParamKind::Integer {
            min: 1,
            max: 10_000_000,
        },
        Some(DEFAULT_MAX_PACKETS),
        "the capture stops after this many packets",
    ),
    Param::new(
        "upload_packets",
        ParamKind::Flag,
        Some("false"),
        "also upload the packets (pcapng; the capture then stops at 16 MiB); off: only the flow records leave the agent",
    ),
    Param::new(
        "side",
        ParamKind::Choice(&["auto", "client", "server"]),
        Some(DEFAULT_SIDE),
        "where the capture is taken, for the handshake RTT (auto: from each handshake)",
    ),
];

pub static KIND: TestKind = TestKind {
    name: "capture",
    summary: "packet capture on an agent's interface for a bounded time and BPF filter, analysed into flow records where it was taken (passive flow records, Narada Metrics; handshake RTT, Miravalls-Sierra et al.)",
    params: PARAMS,
    participants: Participants::Alone,
    scheduling: |_| SchedulingClass::Background,
    reversible: false,
    bulk_transfer: false,
    service: |_| Service::Portless,
    estimate,
    check,
    metrics: &[FLOWS, PACKETS, PAYLOAD_BYTES, RETRANSMITS, DROPPED, TRUNCATED],
};

pub const FLOWS: Metric = Metric {
    name: "capture_flows",
    pointer: "/summary/flows",
    family: "vantage_capture_flows",
    unit: "",
    scale: 1.0,
    help: "TCP and UDP flows seen in the latest capture run.",
};
pub const PACKETS: Metric = Metric {
    name: "capture_packets",
    pointer: "/capture/packets",
    family: "vantage_capture_packets",
    unit: "",
    scale: 1.0,
    help: "TCP and UDP packets in the latest capture run.",
};
pub const PAYLOAD_BYTES: Metric = Metric {
    name: "capture_payload_bytes",
    pointer: "/summary/payload_bytes",
    family: "vantage_capture_payload_bytes",
    unit: "bytes",
    scale: 1.0,
    help: "TCP and UDP payload bytes, both ways, in the latest capture run.",
};
pub const RETRANSMITS: Metric = Metric {
    name: "capture_retransmits",
    pointer: "/summary/retransmits",
    family: "vantage_capture_retransmits",
    unit: "",
    scale: 1.0,
    help: "TCP retransmissions, both ways, in the latest capture run.",
};
pub const DROPPED: Metric = Metric {
    name: "capture_dropped_by_interface",
    pointer: "/capture/dropped_by_interface",
    family: "vantage_capture_dropped_by_interface",
    unit: "",
    scale: 1.0,
    help: "Packets the capturing interface dropped in the latest capture run.",
};
pub const TRUNCATED: Metric = Metric {
    name: "capture_truncated_frames",
    pointer: "/capture/truncated_frames",
    family: "vantage_capture_truncated_frames",
    unit: "",
    scale: 1.0,
    help: "Frames the snapshot length cut short in the latest capture run.",
};

/// Where the capture was taken, relative to a TCP connection's ends: which of
/// Miravalls-Sierra et al.'s handshake formulas applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CaptureSide {
    Client,
    Server,
}

/// What the agent captures and how it reads the capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureSpec {
    pub interface: String,
    pub filter: Option<String>,
    pub duration_s: u64,
    pub snaplen_bytes: u32,
    pub max_packets: u64,
    /// `None`: detected per connection from its handshake.
    pub side: Option<CaptureSide>,
    /// Upload the packets with the flow records (the file then stops at
    /// [`MAX_UPLOADED_PACKETS_BYTES`]).
    #[serde(default)]
    pub upload_packets: bool,
}

fn estimate(spec: &Spec<'_>) -> Option<Duration> {
    engine_spec(spec)
        .ok()
        .map(|spec| Duration::from_secs(spec.duration_s))
}

fn check(spec: &Spec<'_>) -> Result<(), ConfigError> {
    engine_spec(spec).map(|_| ())
}

/// A filter is handed to the capture program as one argument: it may not look like an
/// option or carry control characters.
fn check_filter(filter: &str) -> Result<(), String> {
    if filter.trim().is_empty() {
        return Err("is empty (leave it out to capture every packet)".to_string());
    }
    if filter.len() > MAX_FILTER_BYTES {
        return Err(format!(
            "is {} bytes, longer than {MAX_FILTER_BYTES}",
            filter.len()
        ));
    }
    if filter.trim_start().starts_with('-') {
        return Err("may not start with '-'".to_string());
    }
    if filter.chars().any(char::is_control) {
        return Err("may not contain control characters".to_string());
    }
    Ok(())
}

/// The engine's spec: the agent captures on its own interface.
pub fn engine_spec(spec: &Spec<'_>) -> Result<CaptureSpec, ConfigError> {
    let interface = spec.required("interface", Spec::text)?;
    check_interface_name(&interface).map_err(|message| ConfigError::new("interface", message))?;
    let filter = spec.text("filter")?;
    if let Some(filter) = &filter {
        check_filter(filter).map_err(|message| ConfigError::new("filter", message))?;
    }
    let duration = spec.required("duration", Spec::duration)?;
    if duration.is_zero() || duration.subsec_nanos() != 0 {
        return Err(ConfigError::new(
            "duration",
            "must be a whole number of seconds, at least 1 s",
        ));
    }
    if duration > MAX_DURATION {
        return Err(ConfigError::new(
            "duration",
            format!("is longer than {} s", MAX_DURATION.as_secs()),
        ));
    }
    // The parameter's choices are these three.
    let side = match spec.required("side", Spec::text)?.as_str() {
        "client" => Some(CaptureSide::Client),
        "server" => Some(CaptureSide::Server),
        _ => None,
    };
    Ok(CaptureSpec {
        interface,
        filter,
        duration_s: duration.as_secs(),
        snaplen_bytes: spec.required("snaplen", Spec::number_u32)?,
        max_packets: spec.required("max_packets", Spec::number)?,
        side,
        upload_packets: spec.flag("upload_packets")?,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn defaults_capture_headers_on_every_interface_for_ten_seconds_in_the_background() {
        let values = KIND.normalise_json(json!({})).unwrap();
        let spec = engine_spec(&Spec::new(&KIND, &values)).unwrap();
        assert_eq!(
            spec,
            CaptureSpec {
                interface: "any".into(),
                filter: None,
                duration_s: 10,
                snaplen_bytes: 128,
                max_packets: 1_000_000,
                side: None,
                upload_packets: false,
            }
        );
        assert_eq!(KIND.scheduling_for(&values), SchedulingClass::Background);
        assert_eq!(KIND.participants, Participants::Alone);
        assert_eq!(
            (KIND.estimate)(&Spec::new(&KIND, &values)),
            Some(Duration::from_secs(10))
        );
    }

    #[test]
    fn filters_durations_and_interfaces_are_checked_with_their_place() {
        let values = KIND
            .normalise_json(json!({"interface": "eth0", "filter": "tcp port 5201", "side": "server", "duration": "1m"}))
            .unwrap();
        let spec = engine_spec(&Spec::new(&KIND, &values)).unwrap();
        assert_eq!(spec.filter.as_deref(), Some("tcp port 5201"));
        assert_eq!(spec.side, Some(CaptureSide::Server));
        assert_eq!(spec.duration_s, 60);
        assert!(!spec.upload_packets);
        let values = KIND
            .normalise_json(json!({"upload_packets": true}))
            .unwrap();
        assert!(
            engine_spec(&Spec::new(&KIND, &values))
                .unwrap()
                .upload_packets
        );
        for (field, bad, why) in [
            ("filter", json!("-w /etc/passwd"), "may not start with '-'"),
            ("filter", json!("tcp\nport 1"), "control characters"),
            ("filter", json!(" "), "is empty"),
            ("filter", json!("x".repeat(1025)), "longer than 1024"),
            ("duration", json!("1500ms"), "whole number of seconds"),
            ("duration", json!("11m"), "longer than 600 s"),
            ("interface", json!("../etc"), "not an interface name"),
            ("snaplen", json!(10), "64"),
            ("side", json!("middle"), "middle"),
            ("upload_packets", json!("yes"), "true or false"),
        ] {
            let errors = KIND
                .normalise_json(json!({ field: bad.clone() }))
                .unwrap_err();
            assert_eq!(errors[0].path, format!("spec.{field}"), "{bad}");
            assert!(errors[0].message.contains(why), "{bad}: {}", errors[0]);
        }
    }
}
