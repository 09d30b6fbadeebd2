//! Executes one assigned run with the probe engines and turns the outcome into an upload.
//!
//! [`ENGINES`] lists, per test kind, how this agent runs it as a client; the kind
//! (crate `vantage-model`, module `kinds`) reads the run's spec into the engine's
//! typed spec, with the same defaults as the CLI.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use vantage_model::control::{AssignedRun, ResultUpload, RunOutcome};
use vantage_model::kinds::{self, Spec, Target, TestKind};
use vantage_model::latency::{LatencyResult, LatencySpec};
use vantage_model::throughput::ThroughputTool;
use vantage_probe::latency::{LatencyError, SharedProber};

/// How the agent runs one kind: the run's spec read through the kind, its target,
/// and the run itself (for NAT orientation); the engine's result as JSON.
type Engine = fn(&Spec<'_>, &Target, &AssignedRun) -> Result<Value, String>;

/// The kinds this agent runs, one line each; registration advertises these names.
pub static ENGINES: &[(&TestKind, Engine)] = &[
    (&kinds::latency::KIND, latency),
    (&kinds::throughput::KIND, throughput),
    (&kinds::capacity::KIND, capacity),
    (&kinds::sandwich::KIND, sandwich),
    (&kinds::trace::KIND, trace),
    (&kinds::health::KIND, health),
    (&kinds::diagnose::KIND, diagnose),
    (&kinds::counters::KIND, counters),
    (&kinds::capture::KIND, capture),
];

/// Names of the kinds this agent can run as a client.
pub fn capabilities() -> Vec<String> {
    ENGINES
        .iter()
        .map(|(kind, _)| kind.name.to_string())
        .collect()
}

fn to_json(result: impl Serialize) -> Value {
    serde_json::to_value(result).expect("results serialise")
}

fn spec_error(error: vantage_model::config::ConfigError) -> String {
    format!("spec.{error}")
}

fn latency(spec: &Spec<'_>, target: &Target, _: &AssignedRun) -> Result<Value, String> {
    let spec = kinds::latency::engine_spec(spec, target).map_err(spec_error)?;
    vantage_probe::latency::run_latency(&spec, &mut |_| {})
        .map(to_json)
        .map_err(|error| error.to_string())
}

fn throughput(spec: &Spec<'_>, target: &Target, run: &AssignedRun) -> Result<Value, String> {
    let mut spec = kinds::throughput::engine_spec(spec, target, run.reverse).map_err(spec_error)?;
    spec.ticket = run.ticket.as_ref().map(|ticket| ticket.ticket.clone());
    match spec.tool {
        ThroughputTool::Native => vantage_probe::throughput::client::run_native(&spec),
        ThroughputTool::Iperf3 => {
            // iperf3 carries no ticket: it is presented to the agent's endpoint first.
            if let Some(ticket) = &run.ticket {
                vantage_probe::throughput::client::present_ticket(
                    &target.host,
                    ticket.endpoint_port,
                    &ticket.ticket,
                )
                .map_err(|error| format!("presenting the run's ticket: {error}"))?;
            }
            vantage_probe::iperf3::client::run_iperf3(&spec)
        }
    }
    .map(to_json)
    .map_err(|error| error.to_string())
}

fn capacity(spec: &Spec<'_>, target: &Target, run: &AssignedRun) -> Result<Value, String> {
    let mut spec = kinds::capacity::engine_spec(spec, target, run.reverse).map_err(spec_error)?;
    spec.ticket = run.ticket.as_ref().map(|ticket| ticket.ticket.clone());
    vantage_probe::capacity::run_capacity(&spec, &mut |_| {})
        .map(to_json)
        .map_err(|error| error.to_string())
}

fn sandwich(spec: &Spec<'_>, target: &Target, _: &AssignedRun) -> Result<Value, String> {
    let spec = kinds::sandwich::engine_spec(spec, target).map_err(spec_error)?;
    vantage_probe::sandwich::run_sandwich(&spec, &mut |_| {})
        .map(to_json)
        .map_err(|error| error.to_string())
}

fn trace(spec: &Spec<'_>, target: &Target, _: &AssignedRun) -> Result<Value, String> {
    let spec = kinds::trace::engine_spec(spec, target).map_err(spec_error)?;
    vantage_probe::trace::run_trace(&spec)
        .map(to_json)
        .map_err(|error| error.to_string())
}

fn health(spec: &Spec<'_>, target: &Target, run: &AssignedRun) -> Result<Value, String> {
    let spec = kinds::health::engine_spec(spec, target).map_err(spec_error)?;
    let ticket = run.ticket.as_ref().map(|ticket| ticket.ticket.clone());
    Ok(to_json(vantage_probe::health::run_health(&spec, ticket)))
}

fn diagnose(spec: &Spec<'_>, target: &Target, run: &AssignedRun) -> Result<Value, String> {
    let mut spec = kinds::diagnose::engine_spec(spec, target).map_err(spec_error)?;
    spec.ticket = run.ticket.as_ref().map(|ticket| ticket.ticket.clone());
    Ok(to_json(vantage_probe::diagnose::run_diagnostic(&spec)))
}

/// Reads this agent's own interfaces: the run's target is the agent itself, unused.
fn counters(spec: &Spec<'_>, _: &Target, _: &AssignedRun) -> Result<Value, String> {
    let spec = kinds::counters::engine_spec(spec).map_err(spec_error)?;
    vantage_probe::counters::run_counters(
        std::path::Path::new(vantage_probe::counters::SYSFS_NET),
        &spec,
        &mut |_| {},
    )
    .map(to_json)
    .map_err(|error| error.to_string())
}

/// Captures on this agent's own interface and uploads the flow records, not the packets.
fn capture(spec: &Spec<'_>, _: &Target, _: &AssignedRun) -> Result<Value, String> {
    let spec = kinds::capture::engine_spec(spec).map_err(spec_error)?;
    vantage_probe::capture::run_capture(
        std::path::Path::new(vantage_probe::capture::DUMPCAP),
        &spec,
    )
    .map(to_json)
    .map_err(|error| error.to_string())
}

/// Runs the measurement (blocking: call from `spawn_blocking`) and describes the outcome.
pub fn execute(run: &AssignedRun, agent: &str) -> ResultUpload {
    let actual_start = Utc::now();
    let measured = measure(run, agent);
    upload(run, agent, actual_start, Utc::now(), measured)
}

/// The upload of a run measured from `actual_start` to `actual_end`.
pub fn upload(
    run: &AssignedRun,
    agent: &str,
    actual_start: DateTime<Utc>,
    actual_end: DateTime<Utc>,
    measured: Result<Value, String>,
) -> ResultUpload {
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

fn measure(run: &AssignedRun, agent: &str) -> Result<Value, String> {
    let Some((kind, engine)) = ENGINES.iter().find(|(kind, _)| kind.name == run.test) else {
        return Err(format!(
            "agent '{agent}' has no engine for test '{}'",
            run.test
        ));
    };
    read_spec(run, kind, |spec, target| engine(spec, target, run))?
}

/// Calls `read` with the run's spec as `kind` reads it and the run's target.
fn read_spec<T>(
    run: &AssignedRun,
    kind: &'static TestKind,
    read: impl FnOnce(&Spec<'_>, &Target) -> T,
) -> Result<T, String> {
    let empty = serde_json::Map::new();
    let values = match &*run.spec {
        Value::Object(values) => values,
        Value::Null => &empty,
        _ => return Err("spec: expected an object".to_string()),
    };
    let target = Target {
        host: run.server_address.clone(),
        port: run.server_port,
    };
    Ok(read(&Spec::new(kind, values), &target))
}

/// The engine spec of a run the agent's shared latency prober takes (UDP latency);
/// `None` for any other run, and for a spec that does not read (`execute` says why).
pub fn shared_latency_spec(run: &AssignedRun) -> Option<LatencySpec> {
    let kind = &kinds::latency::KIND;
    if run.test != kind.name {
        return None;
    }
    let spec = read_spec(run, kind, kinds::latency::engine_spec)
        .ok()?
        .ok()?;
    SharedProber::takes(&spec).then_some(spec)
}

/// The upload of a latency run measured by the shared prober.
pub fn latency_upload(
    run: &AssignedRun,
    agent: &str,
    actual_start: DateTime<Utc>,
    actual_end: DateTime<Utc>,
    measured: Result<LatencyResult, LatencyError>,
) -> ResultUpload {
    let measured = measured.map(to_json).map_err(|error| error.to_string());
    upload(run, agent, actual_start, actual_end, measured)
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
    use vantage_model::latency::LatencyProtocol;
    use vantage_model::throughput::{Direction, ThroughputProtocol};

    fn run(test: &str, spec: serde_json::Value) -> AssignedRun {
        AssignedRun {
            run_id: "r".into(),
            task: "t".into(),
            test: test.into(),
            client: "a".into(),
            server: "b".into(),
            server_address: "127.0.0.1".into(),
            server_port: 9,
            spec: spec.into(),
            reverse: false,
            planned_start: Utc::now(),
            planned_end: Utc::now(),
            ticket: None,
        }
    }

    fn read<T>(
        run: &AssignedRun,
        build: impl Fn(&Spec<'_>, &Target) -> Result<T, vantage_model::config::ConfigError>,
    ) -> Result<T, String> {
        let kind = kinds::find(&run.test).unwrap();
        let values = run.spec.as_object().unwrap();
        let target = Target {
            host: run.server_address.clone(),
            port: run.server_port,
        };
        build(&Spec::new(kind, values), &target).map_err(spec_error)
    }

    #[test]
    fn latency_spec_reads_durations_and_takes_the_cli_defaults() {
        let assigned = run(
            "latency",
            serde_json::json!({"count": 5, "interval": "20ms", "protocol": "tcp", "allow_fragmentation": true}),
        );
        let spec = read(&assigned, kinds::latency::engine_spec).unwrap();
        assert_eq!(
            (spec.count, spec.interval_us, spec.timeout_us),
            (5, 20_000, 5_000_000)
        );
        assert_eq!(spec.protocol, LatencyProtocol::Tcp);
        assert!(spec.allow_fragmentation);
        assert_eq!((spec.target.as_str(), spec.port), ("127.0.0.1", 9));
    }

    #[test]
    fn bad_fields_are_named() {
        let error = read(
            &run("latency", serde_json::json!({"interval": "20"})),
            kinds::latency::engine_spec,
        )
        .unwrap_err();
        assert!(error.starts_with("spec.interval:"), "{error}");
        let error = read(
            &run("latency", serde_json::json!({"protocol": "sctp"})),
            kinds::latency::engine_spec,
        )
        .unwrap_err();
        assert!(
            error.contains("spec.protocol") && error.contains("sctp"),
            "{error}"
        );
    }

    #[test]
    fn throughput_spec_follows_orientation_tool_and_units() {
        let mut assigned = run(
            "throughput",
            serde_json::json!({"duration": "3s", "streams": 2, "window": "256K", "rate": "100M", "protocol": "udp"}),
        );
        let reversed = |assigned: &AssignedRun| {
            read(assigned, |spec, target| {
                kinds::throughput::engine_spec(spec, target, assigned.reverse)
            })
            .unwrap()
        };
        assigned.reverse = true;
        let spec = reversed(&assigned);
        assert_eq!(spec.direction, Direction::Reverse);
        assert_eq!(
            (spec.duration_us, spec.streams, spec.window_bytes),
            (Some(3_000_000), 2, Some(256 * 1024))
        );
        assert_eq!(
            (spec.protocol, spec.rate_bps),
            (ThroughputProtocol::Udp, Some(100_000_000))
        );
        // The spec's own reverse and the NAT orientation compose: both = forward.
        assigned.spec =
            serde_json::json!({"tool": "iperf3", "reverse": true, "bytes": "1M"}).into();
        let spec = reversed(&assigned);
        assert_eq!(spec.direction, Direction::Forward);
        assert_eq!(spec.tool, ThroughputTool::Iperf3);
        assert_eq!((spec.bytes, spec.duration_us), (Some(1 << 20), None));
    }

    #[test]
    fn every_kind_has_an_engine_and_is_a_capability() {
        assert_eq!(capabilities(), kinds::names());
    }

    /// As root: a capture on loopback with a filter sees a known stream of datagrams as
    /// one UDP flow, every packet dumpcap says it captured, and none of the traffic the
    /// filter leaves out.
    #[test]
    fn capture_uploads_the_flow_records_of_the_filtered_traffic() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "capturing needs root (CAP_NET_RAW): run the tests as root"
        );
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let other = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = receiver.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sender = {
            let stop = stop.clone();
            let (to, other) = (receiver.local_addr().unwrap(), other.local_addr().unwrap());
            std::thread::spawn(move || {
                let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                // Bounded: 400 datagrams at most, 10 ms apart.
                for _ in 0..400 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    socket.send_to(&[7; 100], to).unwrap();
                    socket.send_to(&[7; 300], other).unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            })
        };
        let upload = execute(
            &run(
                "capture",
                serde_json::json!({"interface": "lo", "filter": format!("udp dst port {port}"), "duration": "2s"}),
            ),
            "a",
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sender.join().unwrap();
        assert_eq!(upload.outcome, RunOutcome::Completed, "{:?}", upload.error);
        let result = upload.result.unwrap();
        let flows = result["flows"].as_array().unwrap();
        assert_eq!(flows.len(), 1, "{result}");
        let flow = &flows[0];
        assert_eq!(flow["protocol"], "udp");
        assert_eq!(flow["server"], format!("127.0.0.1:{port}"));
        let packets = flow["client_to_server"]["packets"].as_u64().unwrap();
        assert!(packets >= 50, "2 s at 100 datagrams/s captured {packets}");
        assert_eq!(flow["client_to_server"]["payload_bytes"], packets * 100);
        let said = result["tool_said"].as_str().unwrap();
        assert!(
            said.contains(&format!("Packets captured: {packets}")),
            "dumpcap said: {said}"
        );
        assert_eq!(result["summary"]["flows"], 1);
        assert_eq!(result["summary"]["payload_bytes"], packets * 100);
        assert_eq!(result["capture"]["packets"], packets);
        assert_eq!(result["spec"]["duration_s"], 2);
        let metrics = kinds::capture::KIND.summary(&result);
        assert!(metrics.contains(&("capture_flows", 1.0)), "{metrics:?}");

        let upload = execute(
            &run(
                "capture",
                serde_json::json!({"interface": "nosuch0", "duration": "1s"}),
            ),
            "a",
        );
        assert_eq!(upload.outcome, RunOutcome::Failed);
        let error = upload.error.unwrap();
        assert!(
            error.contains("dumpcap -i nosuch0") && error.contains("nosuch0"),
            "{error}"
        );
    }

    #[test]
    fn counters_read_the_agents_own_interfaces_and_name_a_missing_one() {
        let upload = execute(
            &run(
                "counters",
                serde_json::json!({"interfaces": "lo", "interval": "1ms", "count": 1}),
            ),
            "a",
        );
        assert_eq!(upload.outcome, RunOutcome::Completed, "{:?}", upload.error);
        let result = upload.result.unwrap();
        assert_eq!(result["interfaces"][0]["interface"], "lo");
        assert_eq!(result["summary"]["intervals"], 1);
        let upload = execute(
            &run(
                "counters",
                serde_json::json!({"interfaces": "nosuch0", "interval": "1ms"}),
            ),
            "a",
        );
        assert_eq!(upload.outcome, RunOutcome::Failed);
        assert_eq!(
            upload.error.unwrap(),
            "interface 'nosuch0' does not exist (/sys/class/net/nosuch0 not found)"
        );
    }

    #[test]
    fn unknown_test_is_a_failed_run_with_reason() {
        let upload = execute(&run("teleport", serde_json::json!({})), "a");
        assert_eq!(upload.outcome, RunOutcome::Failed);
        assert!(upload
            .error
            .unwrap()
            .contains("no engine for test 'teleport'"));
    }
}
