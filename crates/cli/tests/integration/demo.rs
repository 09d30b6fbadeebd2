//! `vantage demo` as a newcomer first runs it: two minutes on the defaults. Its
//! meshes are conflict-free by construction, so every summary must count no run
//! that did not start, was missed or failed, and none may name a problem; by the end
//! every pair has a latency and a throughput figure, and the demo stops by itself.

use crate::support;

use std::time::Duration;

use support::demo::Demo;

#[test]
fn two_minutes_of_the_demo_report_no_problem() {
    let (mut guard, _banner) = Demo::start(&["--duration", "120s"], None);
    let status = guard.wait(Duration::from_secs(180));
    assert!(status.success(), "the demo ended with {status}");
    let output = guard.output.lock().unwrap().clone();
    let text = output.join("\n");

    let summaries: Vec<&String> = output
        .iter()
        .filter(|line| line.starts_with("-- ") && line.contains(" runs: "))
        .collect();
    // One every 5 s for 120 s, and one at the end.
    assert!(summaries.len() >= 20, "{text}");
    for summary in &summaries {
        for state in ["non_start", "missed", "failed"] {
            assert!(!summary.contains(state), "{summary}\n\n{text}");
        }
    }
    assert!(
        !output.iter().any(|line| line.contains("problem")),
        "{text}"
    );

    // The last summary: each of the three pairs has a figure from both meshes.
    let last = output
        .iter()
        .rposition(|line| line.starts_with("-- "))
        .unwrap();
    let pairs: Vec<&String> = output[last + 1..]
        .iter()
        .filter(|line| line.contains(" -> "))
        .collect();
    assert_eq!(pairs.len(), 3, "{text}");
    for pair in pairs {
        let figure = |label: &str| {
            pair.split_whitespace()
                .skip_while(|word| *word != label)
                .nth(1)
                .filter(|value| *value != "-")
        };
        assert!(
            figure("rtt").is_some() && figure("throughput").is_some(),
            "a pair without both figures: {pair}\n\n{text}"
        );
    }
}
