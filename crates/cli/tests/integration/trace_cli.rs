//! `vantage trace` as users run it: text and `--json` output over loopback, exit codes,
//! and one-line refusals.

use std::process::{Command, Output};

fn vantage(args: &[&str]) -> Output {
    Command::new(
        std::env::var("VANTAGE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_vantage").to_string()),
    )
    .args(args)
    .output()
    .expect("run vantage")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn loopback_trace_prints_one_hop_and_exits_zero() {
    let output = vantage(&["trace", "127.0.0.1", "--queries", "2"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("trace to 127.0.0.1, UDP to port 33434"),
        "{text}"
    );
    assert!(lines[1].starts_with(" 1  127.0.0.1  "), "{text}");
    assert_eq!(lines[1].matches(" ms").count(), 2, "{text}");
    assert!(
        lines[2].starts_with("destination 127.0.0.1 reached in 1 hop;"),
        "{text}"
    );
}

#[test]
fn json_is_one_document_with_the_contract_fields() {
    let output = vantage(&[
        "trace",
        "::1",
        "--json",
        "--protocol",
        "icmp",
        "--max-ttl",
        "3",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON document");
    assert_eq!(json["test"], "trace");
    assert_eq!(json["protocol"], "icmp");
    assert_eq!(json["target_addr"], "::1");
    assert_eq!(json["destination_reached"], true);
    assert_eq!(json["stop_reason"], "destination_reached");
    assert_eq!(json["hop_count"], 1);
    assert_eq!(json["spec"]["max_ttl"], 3);
    let hop = &json["hops"][0];
    assert_eq!(hop["address"], "::1");
    assert_eq!(hop["probes"].as_array().unwrap().len(), 3);
    assert_eq!(hop["probes"][0]["reply"], "echo_reply");
    assert!(hop["rtt_us"]["median"].as_f64().unwrap() > 0.0);
}

#[test]
fn refusals_are_one_line_and_non_zero() {
    let cases: [(&[&str], &str); 4] = [
        (&["trace", "::1", "--protocol", "tcp"], "IPv4 only"),
        (
            &["trace", "no-such-host.invalid"],
            "cannot resolve 'no-such-host.invalid'",
        ),
        (
            &["trace", "127.0.0.1", "--first-ttl", "9", "--max-ttl", "3"],
            "first_ttl",
        ),
        (
            &["trace", "127.0.0.1", "--timeout", "1min"],
            "outside 1ms..=10s",
        ),
    ];
    for (args, reason) in cases {
        let output = vantage(args);
        assert!(!output.status.success(), "{args:?}");
        let text = stderr(&output);
        assert!(text.contains(reason), "{args:?}: {text}");
        if !text.starts_with("error:") {
            // Ours (not clap's usage text): exactly one line.
            assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
        }
    }
}
