//! Executes one assigned run with the probe engines and turns the outcome into an upload.

use chrono::Utc;
use vantage_model::control::{AssignedRun, ResultUpload, RunOutcome};
use vantage_model::latency::{LatencyProtocol, LatencySpec, TransmitStamp};
use vantage_model::throughput::{Direction, ThroughputProtocol, ThroughputSpec};
use vantage_model::units::{parse_bytes, parse_duration, parse_rate_bps};

/// Tests this agent can run as a client.
pub const CAPABILITIES: &[&str] = &["latency", "throughput"];

/// Reads an optional duration given as `"5ms"` (DUR) or as integer microseconds
/// under `NAME_us`; returns microseconds.
fn duration_us(spec: &serde_json::Value, name: &str, default_us: u64) -> Result<u64, String> {
    if let Some(text) = spec[name].as_str() {
        let duration = parse_duration(text).map_err(|error| format!("spec.{name}: {error}"))?;
        return u64::try_from(duration.as_micros()).map_err(|_| format!("spec.{name}: too large"));
    }
    let key = format!("{name}_us");
    match &spec[key.as_str()] {
        serde_json::Value::Null => Ok(default_us),
        value => value
            .as_u64()
            .ok_or_else(|| format!("spec.{key}: expected microseconds as an integer")),
    }
}

/// Reads an optional non-negative integer, given as a JSON number or a numeric string
/// (validated configurations keep values as written).
fn integer(spec: &serde_json::Value, name: &str, default: u64) -> Result<u64, String> {
    let value = &spec[name];
    if value.is_null() {
        return Ok(default);
    }
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|text| text.trim().parse().ok()))
        .ok_or_else(|| format!("spec.{name}: expected a non-negative integer"))
}

/// Reads an optional size (`"64K"` or a number of bytes).
fn bytes(spec: &serde_json::Value, name: &str) -> Result<Option<u64>, String> {
    match &spec[name] {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(text) => parse_bytes(text)
            .map(Some)
            .map_err(|error| format!("spec.{name}: {error}")),
        _ => integer(spec, name, 0).map(Some),
    }
}

/// Reads an optional bit rate (`"100M"` or a number of bits/s).
fn rate_bps(spec: &serde_json::Value, name: &str) -> Result<Option<u64>, String> {
    match &spec[name] {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(text) => parse_rate_bps(text)
            .map(Some)
            .map_err(|error| format!("spec.{name}: {error}")),
        _ => integer(spec, name, 0).map(Some),
    }
}

/// Builds the throughput engine's spec: the native tool against the server agent's
/// endpoint; `reverse` when the scheduler oriented the run for NAT (the server sends).
pub fn throughput_spec(run: &AssignedRun) -> Result<ThroughputSpec, String> {
    let spec = &run.spec;
    if let Some(tool) = spec["tool"].as_str().filter(|tool| *tool != "native") {
        return Err(format!(
            "spec.tool: '{tool}' is for third-party targets; agents measure each other with the native tool"
        ));
    }
    let mut throughput = ThroughputSpec::new(&run.server_address, run.server_port);
    throughput.protocol = match spec["protocol"].as_str().unwrap_or("tcp") {
        "tcp" => ThroughputProtocol::Tcp,
        "udp" => ThroughputProtocol::Udp,
        other => return Err(format!("spec.protocol: '{other}' is not one of tcp, udp")),
    };
    throughput.direction = if run.reverse {
        Direction::Reverse
    } else {
        Direction::Forward
    };
    let narrow = |name: &str, value: u64| {
        u32::try_from(value).map_err(|_| format!("spec.{name}: too large"))
    };
    throughput.streams = narrow("streams", integer(spec, "streams", 1)?)?;
    throughput.bytes = bytes(spec, "bytes")?;
    throughput.duration_us = match (&spec["duration"], throughput.bytes) {
        (serde_json::Value::Null, Some(_)) => None,
        _ => Some(duration_us(spec, "duration", 10_000_000)?),
    };
    throughput.interval_us = duration_us(spec, "interval", 1_000_000)?;
    throughput.omit_us = duration_us(spec, "omit", 0)?;
    throughput.window_bytes = bytes(spec, "window")?;
    throughput.congestion = spec["congestion"].as_str().map(str::to_string);
    throughput.mss_bytes = bytes(spec, "mss")?
        .map(|mss| narrow("mss", mss))
        .transpose()?;
    throughput.pacing_rate_bps = rate_bps(spec, "pacing_rate")?;
    throughput.dscp = u8::try_from(integer(spec, "dscp", 0)?)
        .map_err(|_| "spec.dscp: out of range 0..=63".to_string())?;
    throughput.rate_bps = rate_bps(spec, "rate")?;
    throughput.packet_size_bytes = bytes(spec, "packet_size")?
        .map(|size| narrow("packet_size", size))
        .transpose()?;
    Ok(throughput)
}

/// Builds the latency engine's spec from a run: defaults are `vantage latency`'s
/// (UDP, 10 probes, 100 ms apart, 1 s timeout, 64 bytes).
pub fn latency_spec(run: &AssignedRun) -> Result<LatencySpec, String> {
    let spec = &run.spec;
    let protocol = match spec["protocol"].as_str().unwrap_or("udp") {
        "udp" => LatencyProtocol::Udp,
        "tcp" => LatencyProtocol::Tcp,
        "icmp" => LatencyProtocol::Icmp,
        other => {
            return Err(format!(
                "spec.protocol: '{other}' is not one of udp, tcp, icmp"
            ))
        }
    };
    let size_bytes = match &spec["size"] {
        serde_json::Value::String(text) => {
            parse_bytes(text).map_err(|error| format!("spec.size: {error}"))?
        }
        _ => integer(spec, "size", 64)?,
    };
    let narrow = |name: &str, value: u64| {
        u32::try_from(value).map_err(|_| format!("spec.{name}: too large"))
    };
    Ok(LatencySpec {
        target: run.server_address.clone(),
        port: run.server_port,
        protocol,
        count: narrow("count", integer(spec, "count", 10)?)?,
        interval_us: duration_us(spec, "interval", 100_000)?,
        timeout_us: duration_us(spec, "timeout", 1_000_000)?,
        size_bytes: narrow("size", size_bytes)?,
        dscp: u8::try_from(integer(spec, "dscp", 0)?)
            .map_err(|_| "spec.dscp: out of range 0..=63".to_string())?,
        allow_fragmentation: spec["allow_fragmentation"].as_bool().unwrap_or(false),
        tx_timestamp: match spec["tx_timestamp"].as_str() {
            None | Some("kernel") => TransmitStamp::Kernel,
            Some("user") => TransmitStamp::User,
            Some(other) => {
                return Err(format!(
                    "spec.tx_timestamp: '{other}' is not one of kernel, user"
                ))
            }
        },
    })
}

/// Runs the measurement (blocking: call from `spawn_blocking`) and describes the outcome.
pub fn execute(run: &AssignedRun, agent: &str) -> ResultUpload {
    let actual_start = Utc::now();
    let measured: Result<serde_json::Value, String> = match run.test.as_str() {
        "latency" => latency_spec(run).and_then(|spec| {
            vantage_probe::latency::run_latency(&spec, &mut |_| {})
                .map_err(|error| error.to_string())
                .map(|result| serde_json::to_value(result).expect("results serialise"))
        }),
        "throughput" => throughput_spec(run).and_then(|spec| {
            vantage_probe::throughput::client::run_native(&spec)
                .map_err(|error| error.to_string())
                .map(|result| serde_json::to_value(result).expect("results serialise"))
        }),
        other => Err(format!("agent '{agent}' has no engine for test '{other}'")),
    };
    let actual_end = Utc::now();
    match measured {
        Ok(result) => ResultUpload {
            run_id: run.run_id.clone(),
            agent: agent.to_string(),
            outcome: RunOutcome::Completed,
            actual_start,
            actual_end,
            result: Some(result),
            error: None,
        },
        Err(error) => failed(run, agent, error),
    }
}

/// An upload saying the run could not be made, and why.
pub fn failed(run: &AssignedRun, agent: &str, error: String) -> ResultUpload {
    let now = Utc::now();
    ResultUpload {
        run_id: run.run_id.clone(),
        agent: agent.to_string(),
        outcome: RunOutcome::Failed,
        actual_start: now,
        actual_end: now,
        result: None,
        error: Some(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(spec: serde_json::Value) -> AssignedRun {
        AssignedRun {
            run_id: "r".into(),
            task: "t".into(),
            test: "latency".into(),
            client: "a".into(),
            server: "b".into(),
            server_address: "127.0.0.1".into(),
            server_port: 9,
            spec,
            reverse: false,
            planned_start: Utc::now(),
            planned_end: Utc::now(),
        }
    }

    #[test]
    fn latency_spec_reads_durations_and_defaults() {
        let spec = latency_spec(&run(
            serde_json::json!({"count": 5, "interval": "20ms", "protocol": "tcp"}),
        ))
        .unwrap();
        assert_eq!(
            (spec.count, spec.interval_us, spec.timeout_us),
            (5, 20_000, 1_000_000)
        );
        assert_eq!(spec.protocol, LatencyProtocol::Tcp);
        assert_eq!((spec.target.as_str(), spec.port), ("127.0.0.1", 9));
    }

    #[test]
    fn latency_spec_names_bad_fields() {
        let error = latency_spec(&run(serde_json::json!({"interval": "20"}))).unwrap_err();
        assert!(error.starts_with("spec.interval:"), "{error}");
        let error = latency_spec(&run(serde_json::json!({"protocol": "sctp"}))).unwrap_err();
        assert!(
            error.contains("spec.protocol") && error.contains("sctp"),
            "{error}"
        );
        let error = latency_spec(&run(serde_json::json!({"count": -1}))).unwrap_err();
        assert!(error.starts_with("spec.count:"), "{error}");
    }

    #[test]
    fn throughput_spec_follows_orientation_and_units() {
        let mut assigned = run(
            serde_json::json!({"duration": "3s", "streams": 2, "window": "256K", "rate": "100M", "protocol": "udp"}),
        );
        assigned.test = "throughput".into();
        assigned.reverse = true;
        let spec = throughput_spec(&assigned).unwrap();
        assert_eq!(spec.direction, Direction::Reverse);
        assert_eq!(
            (spec.duration_us, spec.streams, spec.window_bytes),
            (Some(3_000_000), 2, Some(256 * 1024))
        );
        assert_eq!(
            (spec.protocol, spec.rate_bps),
            (ThroughputProtocol::Udp, Some(100_000_000))
        );
        assigned.spec = serde_json::json!({"tool": "iperf3"});
        assert!(throughput_spec(&assigned)
            .unwrap_err()
            .starts_with("spec.tool:"));
    }

    #[test]
    fn unknown_test_is_a_failed_run_with_reason() {
        let mut unknown = run(serde_json::json!({}));
        unknown.test = "teleport".into();
        let upload = execute(&unknown, "a");
        assert_eq!(upload.outcome, RunOutcome::Failed);
        assert!(upload
            .error
            .unwrap()
            .contains("no engine for test 'teleport'"));
    }
}
