//! The shared latency prober: many UDP latency runs on one thread, as a dense mesh's
//! agent runs them, each measuring what it would alone.

use crate::common;

use std::net::UdpSocket;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{spec, TestEndpoint};
use vantage_model::latency::{LatencyProtocol, LatencyResult, TimestampSource};
use vantage_probe::latency::{LatencyError, SharedProber};

/// Threads of this process named `name` (nextest runs each test in its own process).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.unwrap().path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

/// Waits (up to 5 s) until `expected` threads are named `name`: a thread names itself
/// once it runs, a moment after it was spawned.
fn await_threads_named(name: &str, expected: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = threads_named(name);
        if found == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{found} threads named {name}, expected {expected}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

type Outcome = (usize, Result<LatencyResult, LatencyError>);

fn submit(
    prober: &SharedProber,
    outcomes: &mpsc::Sender<Outcome>,
    index: usize,
    run: vantage_model::latency::LatencySpec,
) {
    let outcomes = outcomes.clone();
    prober.submit(run, move |outcome| {
        outcomes.send((index, outcome)).unwrap();
    });
}

#[test]
fn many_udp_runs_share_one_thread_and_each_measures_what_it_would_alone() {
    const RUNS: usize = 60;
    const PROBES: u32 = 10;
    let endpoint = TestEndpoint::start(Some("127.0.0.1".parse().unwrap()), |_| {});
    let prober = SharedProber::start().unwrap();
    let (outcomes, received) = mpsc::channel();
    for index in 0..RUNS {
        let mut run = spec(endpoint.at("127.0.0.1"), LatencyProtocol::Udp, PROBES);
        run.interval_us = 20_000;
        submit(&prober, &outcomes, index, run);
    }
    // Beside them: a silent target (a completed run, all lost), a closed port (refused),
    // and what the prober does not take (TCP) or cannot (no probes).
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut silent_run = spec(
        silent.local_addr().unwrap().to_string(),
        LatencyProtocol::Udp,
        3,
    );
    silent_run.timeout_us = 300_000;
    submit(&prober, &outcomes, RUNS, silent_run);
    let closed_port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let closed = spec(format!("127.0.0.1:{closed_port}"), LatencyProtocol::Udp, 3);
    submit(&prober, &outcomes, RUNS + 1, closed);
    let tcp = spec(endpoint.at("127.0.0.1"), LatencyProtocol::Tcp, 3);
    submit(&prober, &outcomes, RUNS + 2, tcp);
    let mut no_probes = spec(endpoint.at("127.0.0.1"), LatencyProtocol::Udp, 3);
    no_probes.count = 0;
    submit(&prober, &outcomes, RUNS + 3, no_probes);
    drop(outcomes);
    await_threads_named("latency-prober", 1);

    let mut results: Vec<Option<Result<LatencyResult, LatencyError>>> =
        (0..RUNS + 4).map(|_| None).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while results.iter().any(Option::is_none) {
        let wait = deadline.saturating_duration_since(Instant::now());
        let (index, outcome) = received
            .recv_timeout(wait)
            .expect("every run reports within 30 s");
        assert!(results[index].is_none(), "run {index} reported twice");
        results[index] = Some(outcome);
    }
    let results: Vec<_> = results.into_iter().map(Option::unwrap).collect();

    let measured: Vec<&LatencyResult> = results[..RUNS]
        .iter()
        .map(|outcome| outcome.as_ref().expect("a run to the endpoint completes"))
        .collect();
    for result in &measured {
        let summary = &result.summary;
        assert_eq!((summary.sent, summary.received), (10, 10));
        assert_eq!((summary.duplicates, summary.reordered), (0, 0));
        assert_eq!(result.timestamping.receive, TimestampSource::Kernel);
        assert!(result.samples.iter().all(|p| p.rtt_us.unwrap() > 0.0));
        // Probes go out on the run's own schedule: 20 ms apart from its start.
        let last_offset_us = result.samples.last().unwrap().sent_offset_us;
        assert!(
            (180_000.0..400_000.0).contains(&last_offset_us),
            "{last_offset_us}"
        );
    }
    // They ran side by side: every run started before any ended.
    let last_start = measured.iter().map(|r| r.start_time).max().unwrap();
    let first_end = measured.iter().map(|r| r.end_time).min().unwrap();
    assert!(last_start < first_end, "{last_start} vs {first_end}");

    let silent_summary = &results[RUNS].as_ref().unwrap().summary;
    assert_eq!((silent_summary.sent, silent_summary.received), (3, 0));
    assert!(
        matches!(results[RUNS + 1], Err(LatencyError::Refused { .. })),
        "{:?}",
        results[RUNS + 1]
    );
    for index in [RUNS + 2, RUNS + 3] {
        assert!(
            matches!(results[index], Err(LatencyError::InvalidSpec(_))),
            "{:?}",
            results[index]
        );
    }
    assert!(endpoint.stop().udp_reflected >= (RUNS as u64) * 12);

    // Dropping the handle ends the thread once its runs are over.
    drop(prober);
    await_threads_named("latency-prober", 0);
}
