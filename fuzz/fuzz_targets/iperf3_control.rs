//! iperf3's control channel as vantage's iperf3-compatible listener and client read it:
//! length-framed JSON (parameters from any client; results from the peer), state
//! bytes, and the test plan checked against the endpoint's limits.
//!
//! Properties: framing never reads past its cap; a plan the listener accepts stays
//! within the endpoint's stream and duration bounds; whatever results a peer sends are
//! refused or give non-negative, finite times.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use vantage_probe::iperf3::server::TestPlan;
use vantage_probe::iperf3::{read_json, read_state, run_from_results, ClientVersion};
use vantage_probe::throughput::server::{ServiceLimits, MAX_STREAMS, RECEIVE_GRACE};

fn parameters(params: &Value) {
    for limits in [
        ServiceLimits {
            max_duration: Duration::from_secs(60),
            max_rate_bps: Some(1_000_000_000),
        },
        ServiceLimits::default(),
    ] {
        let Ok(plan) = TestPlan::from_params(params, &limits, ClientVersion::of_params(params))
        else {
            continue;
        };
        assert!(plan.parallel >= 1);
        assert!(plan.stream_count() <= MAX_STREAMS as usize, "{plan:?}");
        assert!(
            plan.requested_time(&limits) <= limits.max_duration,
            "{plan:?}"
        );
        assert!(plan.time_bound(&limits) <= limits.max_duration + RECEIVE_GRACE);
        let senders = (0..plan.stream_count())
            .filter(|&index| plan.server_sends(index))
            .count();
        assert!(senders <= plan.stream_count());
        if let (Some(count), Some(per_stream)) = (plan.count_bytes(), plan.send_bytes_per_stream())
        {
            assert!(per_stream.saturating_mul(u64::from(plan.parallel)) >= count);
        }
    }
}

fn results(results: &Value) {
    for (peer_sends, udp) in [(false, false), (true, false), (false, true), (true, true)] {
        if let Ok(run) = run_from_results(results, peer_sends, udp) {
            assert!(run.intervals.is_empty(), "totals only");
            assert!(
                run.wall_s.is_finite() && run.wall_s >= 0.0,
                "wall time {}",
                run.wall_s
            );
            for stream in &run.streams {
                assert!(stream.active_s >= 0.0 && stream.active_s <= run.wall_s);
                let cpu_s = stream.cpu.cpu_s;
                assert!(cpu_s.is_finite() && cpu_s >= 0.0, "CPU time {cpu_s}");
            }
        }
    }
}

fuzz_target!(|bytes: &[u8]| {
    // As read from the socket: a state byte, then a length-framed JSON object.
    let mut stream = bytes;
    if read_state(&mut stream).is_ok() {
        if let Ok(value) = read_json(&mut stream) {
            parameters(&value);
            results(&value);
        }
    }
    // The input as one JSON body (the fuzzer need not learn the framing).
    if let Ok(value) = serde_json::from_slice::<Value>(bytes) {
        parameters(&value);
        results(&value);
    }
});
