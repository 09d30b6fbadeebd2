//! `vantage sim` end to end: the headroom model's check case and both services'
//! simulations, a small Calibers study with its JSON contract and chart, and bad
//! arguments refused with what and where.

use crate::support;

use std::process::{Command, Output};

use support::vantage_bin;

fn sim(args: &[&str]) -> Output {
    Command::new(vantage_bin())
        .arg("sim")
        .args(args)
        .output()
        .expect("run vantage sim")
}

fn json(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

#[test]
fn headroom_gives_the_check_case_and_dh_beats_sh_on_concentrated_traffic() {
    let report = json(&sim(&[
        "headroom", "--runs", "2", "--flows", "3000", "--json",
    ]));
    let mg1 = &report["mg1"];
    assert_eq!(
        format!("{:.2}", mg1["expected_flows"].as_f64().unwrap()),
        "5.86"
    );
    assert_eq!(
        format!("{:.1}", mg1["per_flow_bps"].as_f64().unwrap() / 1e6),
        "102.4"
    );
    assert!(
        (mg1["load_ratio"].as_f64().unwrap() - 0.907).abs() < 0.001,
        "{mg1}"
    );
    let patterns = report["simulation"]["patterns"].as_array().unwrap();
    assert_eq!(patterns.len(), 2);
    let concentrated = &patterns[1];
    assert_eq!(concentrated["concentration"], 1.0);
    let sh = concentrated["sh"]["mean_flow_bps"].as_f64().unwrap();
    let dh = concentrated["dh"]["mean_flow_bps"].as_f64().unwrap();
    assert!(dh > 1.5 * sh && dh <= 10e9, "SH {sh}, DH {dh}");

    let model_only = sim(&["headroom", "--runs", "0", "--lambda", "0.022"]);
    let text = String::from_utf8_lossy(&model_only.stdout);
    assert!(
        text.contains("E[N] = ") && !text.contains("SH vs DH"),
        "{text}"
    );
}

#[test]
fn calibers_prints_each_policy_and_rate_and_writes_the_chart() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("calibers.svg");
    let report = json(&sim(&[
        "calibers",
        "--lambda",
        "0.05,0.4",
        "--runs",
        "1",
        "--requests",
        "600",
        "--svg",
        svg.to_str().unwrap(),
        "--json",
    ]));
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 10);
    for point in runs {
        for field in [
            "lambda",
            "epoch_s",
            "performance_index",
            "reject_ratio",
            "utilisation_ratio",
        ] {
            assert!(point[field].is_f64(), "{field}: {point}");
        }
        assert_eq!(point["epoch_s"], 180.0);
        let index = point["performance_index"].as_f64().unwrap();
        let expected = point["success_ratio"].as_f64().unwrap()
            / (1.0 - point["utilisation_ratio"].as_f64().unwrap());
        assert!((index - expected).abs() < 1e-9, "{point}");
    }
    let policies: Vec<&str> = runs[..5]
        .iter()
        .map(|p| p["policy"].as_str().unwrap())
        .collect();
    assert_eq!(
        policies,
        [
            "fixed",
            "global-sjf",
            "global-ljf",
            "local-sjf",
            "local-ljf"
        ]
    );
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.starts_with("<svg") && chart.contains("performance index, epoch 180 s"));
    assert!(chart.contains("local-ljf"));
}

#[test]
fn bad_arguments_are_refused_with_what_and_where() {
    let refused = |args: &[&str], expected: &str| {
        let output = sim(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    };
    refused(
        &["calibers", "--policy", "edf"],
        "--policy: 'edf' is not a policy",
    );
    refused(&["calibers", "--epoch", "3"], "--epoch:");
    refused(
        &["calibers", "--lambda", "0", "--svg", "/dev/null"],
        "arrival_rate_per_s: 0 is not allowed",
    );
    refused(
        &["headroom", "--alpha", "2"],
        "pareto_shape: 2 is not allowed: α above 2",
    );
    refused(
        &["headroom", "--lambda", "0.05"],
        "the M/G/1 model needs a load under 1",
    );
    refused(
        &["headroom", "--concentration", "1.5", "--runs", "1"],
        "concentration: 1.5 is not allowed",
    );
}
