//! `throughput`: TCP or UDP bulk transfer with per-interval TCP_INFO and a
//! `limited_by` verdict, with vantage's native protocol or iperf3's.

use std::time::Duration;

use crate::config_error::ConfigError;
use crate::kinds::latency::dscp;
use crate::kinds::spec::{
    duration_or_zero, Metric, Param, ParamKind, Participants, Service, Spec, Target, TestKind,
};
use crate::scheduling::SchedulingClass;
use crate::throughput::{Direction, ThroughputProtocol, ThroughputSpec, ThroughputTool};

pub const DEFAULT_DURATION: &str = "10s";
pub const DEFAULT_INTERVAL: &str = "1s";
pub const DEFAULT_STREAMS: &str = "1";

pub const PARAMS: &[Param] = &[
    Param::new(
        "tool",
        ParamKind::Choice(&["native", "iperf3"]),
        Some("native"),
        "native (vantage endpoint) or iperf3 (any iperf3 -s)",
    ),
    Param::new(
        "protocol",
        ParamKind::Choice(&["tcp", "udp"]),
        Some("tcp"),
        "tcp or udp",
    ),
    Param::new(
        "streams",
        ParamKind::Integer { min: 1, max: 128 },
        Some(DEFAULT_STREAMS),
        "parallel streams",
    ),
    Param::new(
        "duration",
        ParamKind::Duration,
        Some(DEFAULT_DURATION),
        "sending time (not with bytes)",
    )
    .unless("bytes"),
    Param::new(
        "bytes",
        ParamKind::Bytes,
        None,
        "bytes to send instead of a duration",
    ),
    Param::new(
        "interval",
        ParamKind::Duration,
        Some(DEFAULT_INTERVAL),
        "report interval",
    ),
    Param::new(
        "omit",
        ParamKind::Duration,
        Some("0s"),
        "leading time left out of the summary",
    ),
    Param::new(
        "window",
        ParamKind::Bytes,
        None,
        "socket buffer size on both ends",
    ),
    Param::new(
        "congestion",
        ParamKind::Text,
        None,
        "TCP congestion control",
    ),
    Param::new(
        "mss",
        ParamKind::Integer {
            min: 88,
            max: 65_535,
        },
        None,
        "TCP maximum segment size",
    ),
    Param::new(
        "pacing_rate",
        ParamKind::Rate,
        None,
        "SO_MAX_PACING_RATE per TCP stream",
    ),
    Param::new(
        "dscp",
        ParamKind::Integer { min: 0, max: 63 },
        Some("0"),
        "DSCP code point",
    ),
    Param::new("rate", ParamKind::Rate, None, "UDP sending rate"),
    Param::new(
        "packet_size",
        ParamKind::Bytes,
        None,
        "UDP payload bytes per datagram",
    ),
    Param::new(
        "reverse",
        ParamKind::Flag,
        Some("false"),
        "the target sends (download)",
    ),
];

pub static KIND: TestKind = TestKind {
    name: "throughput",
    summary:
        "TCP/UDP throughput with TCP_INFO per interval and a limited_by verdict (native or iperf3)",
    params: PARAMS,
    participants: Participants::Pair,
    scheduling: |_| SchedulingClass::Exclusive,
    reversible: true,
    bulk_transfer: true,
    service,
    estimate,
    check,
    metrics: &[SENT, RECEIVED, RETRANSMITS],
};

pub const SENT: Metric = Metric {
    name: "sent_bps",
    pointer: "/summary/sent_bps",
    family: "vantage_sent_bytes_per_second",
    unit: "bytes_per_second",
    scale: 0.125,
    help: "Sender throughput of the latest run.",
};
pub const RECEIVED: Metric = Metric {
    name: "received_bps",
    pointer: "/summary/received_bps",
    family: "vantage_received_bytes_per_second",
    unit: "bytes_per_second",
    scale: 0.125,
    help: "Receiver throughput of the latest run.",
};
pub const RETRANSMITS: Metric = Metric {
    name: "retransmits",
    pointer: "/summary/retransmits",
    family: "vantage_retransmits",
    unit: "",
    scale: 1.0,
    help: "TCP retransmissions in the latest run.",
};

fn service(spec: &Spec<'_>) -> Service {
    match spec.text("tool").ok().flatten().as_deref() {
        Some("iperf3") => Service::Iperf3,
        _ => Service::Endpoint,
    }
}

/// A byte-bounded transfer has no knowable length: `reserve` is required then.
fn estimate(spec: &Spec<'_>) -> Option<Duration> {
    let duration = spec.duration("duration").ok().flatten()?;
    Some(duration + duration_or_zero(spec, "omit"))
}

fn check(spec: &Spec<'_>) -> Result<(), ConfigError> {
    if spec.given("bytes") && spec.given("duration") {
        return Err(ConfigError::new(
            "bytes",
            "give either 'duration' or 'bytes', not both",
        ));
    }
    Ok(())
}

/// The engine's spec for a run against `target`; `reverse` when the scheduler
/// turned the run round for NAT (the target sends), on top of the spec's own.
pub fn engine_spec(
    spec: &Spec<'_>,
    target: &Target,
    reverse: bool,
) -> Result<ThroughputSpec, ConfigError> {
    let mut throughput = ThroughputSpec::new(&target.host, target.port);
    throughput.tool = match spec.required("tool", Spec::text)?.as_str() {
        "iperf3" => ThroughputTool::Iperf3,
        _ => ThroughputTool::Native,
    };
    throughput.protocol = match spec.required("protocol", Spec::text)?.as_str() {
        "udp" => ThroughputProtocol::Udp,
        _ => ThroughputProtocol::Tcp,
    };
    throughput.direction = if spec.flag("reverse")? != reverse {
        Direction::Reverse
    } else {
        Direction::Forward
    };
    throughput.streams = spec.required("streams", Spec::number_u32)?;
    throughput.bytes = spec.number("bytes")?;
    throughput.duration_us = spec.duration_us("duration")?;
    throughput.interval_us = spec.required("interval", Spec::duration_us)?;
    throughput.omit_us = spec.required("omit", Spec::duration_us)?;
    throughput.window_bytes = spec.number("window")?;
    throughput.congestion = spec.text("congestion")?;
    throughput.mss_bytes = spec.number_u32("mss")?;
    throughput.pacing_rate_bps = spec.number("pacing_rate")?;
    throughput.dscp = dscp(spec)?;
    throughput.rate_bps = spec.number("rate")?;
    throughput.packet_size_bytes = spec.number_u32("packet_size")?;
    Ok(throughput)
}
