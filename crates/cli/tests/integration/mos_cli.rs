//! `vantage mos` on a small study whose figures scipy 1.17 gives: MOS with Student-t
//! intervals (`t.ppf(0.975, n-1) * sem`), Welch t-tests (`ttest_ind(equal_var=False)`),
//! Pearson r (`pearsonr`) and slopes (`linregress`) over the conditions' means.

use crate::support;

use std::process::{Command, Output};

use support::vantage_bin;

fn mos(args: &[&str]) -> Output {
    Command::new(vantage_bin())
        .arg("mos")
        .args(args)
        .output()
        .expect("run vantage mos")
}

/// Conditions (packet loss, %): 0 → 5,4,5,4,4,5,3,5; 0.5 → 4,4,3,5,4,3,4;
/// 3 → 2,3,2,1,3,2; 10 → 1,2,1,1,2 (listed out of order, with an extra column).
fn ratings() -> String {
    let groups: [(&str, &[u8]); 4] = [
        ("3", &[2, 3, 2, 1, 3, 2]),
        ("0", &[5, 4, 5, 4, 4, 5, 3, 5]),
        ("10", &[1, 2, 1, 1, 2]),
        ("0.5", &[4, 4, 3, 5, 4, 3, 4]),
    ];
    let mut text = "subject,condition,rating\n".to_string();
    for (condition, ratings) in groups {
        for (subject, rating) in ratings.iter().enumerate() {
            text += &format!("s{subject},{condition},{rating}\n");
        }
    }
    text
}

const OBJECTIVE: &str = "condition,value\n0,0.50\n0,0.52\n0,0.48\n0.5,0.61\n0.5,0.59\n\
                         3,0.80\n3,0.84\n10,1.20\n10,1.30\n10,1.25\n";

fn close(value: &serde_json::Value, expected: f64) -> bool {
    (value.as_f64().unwrap_or(f64::NAN) - expected).abs() <= 1e-9 * expected.abs().max(1.0)
}

#[test]
fn mos_intervals_t_tests_and_agreement_with_an_objective_metric() {
    let dir = tempfile::tempdir().unwrap();
    let (ratings_path, objective_path) = (dir.path().join("r.csv"), dir.path().join("o.csv"));
    std::fs::write(&ratings_path, ratings()).unwrap();
    std::fs::write(&objective_path, OBJECTIVE).unwrap();
    let (ratings_arg, objective_arg) = (
        ratings_path.to_str().unwrap(),
        objective_path.to_str().unwrap(),
    );
    let output = mos(&[ratings_arg, "--objective", objective_arg, "--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let conditions = report["conditions"].as_array().unwrap();
    let names: Vec<&str> = conditions
        .iter()
        .map(|c| c["condition"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["0", "0.5", "3", "10"]);
    assert_eq!(conditions[0]["n"], 8);
    assert!(close(&conditions[0]["mos"], 4.375));
    assert!(close(&conditions[0]["ci95"]["low"], 3.7529805293659506));
    assert!(close(&conditions[0]["ci95"]["high"], 4.99701947063405));
    assert!(close(&conditions[3]["ci95"]["low"], 0.7199126193417443));

    let pairs = report["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 6);
    let expected = [
        ("0", "0.5", 0.18562952514170863, false),
        ("0", "3", 0.00020793667664727338, true),
        ("0", "10", 6.24206241328154e-06, true),
        ("0.5", "3", 0.0017199076020166272, true),
        ("0.5", "10", 4.8087125833385374e-05, true),
        ("3", "10", 0.08326376504264746, false),
    ];
    for (pair, (a, b, p, significant)) in pairs.iter().zip(expected) {
        assert_eq!((pair["a"].as_str(), pair["b"].as_str()), (Some(a), Some(b)));
        let p_value = pair["test"]["p_value"].as_f64().unwrap();
        assert!((p_value - p).abs() <= 1e-6 * p, "{a}–{b}: {p_value} vs {p}");
        assert_eq!(pair["significant"], significant, "{a}–{b}");
    }
    assert_eq!(report["t_test"], "welch");

    let objective = &report["objective"];
    assert!(
        close(&objective["pearson"]["r"], -0.9461276034538135),
        "{objective}"
    );
    assert!(close(
        &objective["mos_slope"]["slope"],
        -0.27308986401233704
    ));
    assert!(close(
        &objective["objective_slope"]["slope"],
        0.07161923454367027
    ));

    let output = mos(&[ratings_arg, "--objective", objective_arg]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("0 – 3"), "{text}");
    assert!(text.contains("Pearson r = -0.946"), "{text}");
    assert!(
        text.contains("slope per condition unit: MOS -0.2731, objective 0.0716"),
        "{text}"
    );

    let output = mos(&[ratings_arg, "--pooled", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["t_test"], "pooled");
    assert!(
        (report["pairs"][1]["test"]["p_value"].as_f64().unwrap() - 0.00014322454995411188).abs()
            < 1e-9
    );
}

#[test]
fn a_bad_rating_is_refused_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.csv");
    std::fs::write(&path, "condition,rating\n0,5\n0,good\n").unwrap();
    let output = mos(&[path.to_str().unwrap()]);
    assert!(!output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        format!(
            "vantage mos: {}: line 3, column rating: 'good' is not a number\n",
            path.display()
        )
    );
}
