//! `vantage qoe` as users run it: a series on stdin or in a file, the table and the
//! `--json` document on a hand-worked case, and one-line refusals of bad input.

use crate::support;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use support::vantage_bin;

fn qoe(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(vantage_bin())
        .arg("qoe")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vantage qoe");
    // A refusal can come before stdin is read: a broken pipe is then expected.
    let _ = child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(stdin.as_bytes());
    child.wait_with_output().expect("vantage qoe finishes")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// 0.8 Mbit/s for 30 s under a 1 Mbit/s, 20 s video: start-up 2.5 s, one 2.5 s stall at
/// 12.5 s (10 s into the video), playback ends at 25 s: MOS 3. At 2 Mbit/s: no stall.
const SLOW_SERIES: &str = "duration_s,rate_bps\n10,0.8e6\n10,0.8e6\n10,0.8e6\n";

#[test]
fn json_carries_the_hand_worked_stall_and_mos() {
    let output = qoe(
        &["-", "--bitrate", "1M", "--video", "20s", "--json"],
        SLOW_SERIES,
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["series"]["source"], "CSV steps");
    assert_eq!(report["series"]["steps"], 3);
    assert_eq!(report["video_s"], 20.0);
    let verdict = &report["profiles"][0];
    assert_eq!(verdict["profile"], "custom");
    assert_eq!(verdict["bitrate_bps"], 1e6);
    let outcome = &verdict["outcome"];
    let close = |field: &serde_json::Value, expected: f64| {
        (field.as_f64().unwrap_or(f64::NAN) - expected).abs() < 1e-6
    };
    assert!(close(&outcome["startup_delay_s"], 2.5), "{outcome}");
    assert!(close(&outcome["finished_at_s"], 25.0), "{outcome}");
    let stalls = outcome["stalls"].as_array().unwrap();
    assert_eq!(stalls.len(), 1, "{outcome}");
    assert!(close(&stalls[0]["start_s"], 12.5), "{outcome}");
    assert!(close(&stalls[0]["duration_s"], 2.5), "{outcome}");
    assert!(close(&stalls[0]["video_position_s"], 10.0), "{outcome}");
    assert_eq!(outcome["mos"], 3);
    assert_eq!(outcome["mos_rule"], "one stall of 0.5 s to 3 s");
    assert_eq!(outcome["series_passes"], 1);
}

#[test]
fn the_table_lists_every_profile_and_says_which_could_not_play() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steps.json");
    std::fs::write(&path, r#"[{"duration_s": 10, "rate_bps": 6e6}]"#).unwrap();
    let output = qoe(&[path.to_str().unwrap(), "--video", "8s"], "");
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    for profile in ["youtube-360p", "youtube-480p", "youtube-720p"] {
        let line = text.lines().find(|l| l.starts_with(profile)).unwrap_or("");
        assert!(line.contains("    5 "), "{profile}: {text}");
    }
    // 8 and 18 Mbit/s over 6 Mbit/s: 10 s of series bring 7.5 and 3.3 s of the 8 s video.
    let line = |profile| text.lines().find(|l| l.starts_with(profile)).unwrap();
    assert!(
        line("youtube-1080p").contains("the series (10.0 s) ended with 7.5 s of the 8.0 s video"),
        "{text}"
    );
    assert!(line("mpeg2-720p").contains("ended with 3.3 s"), "{text}");
}

#[test]
fn bad_input_is_refused_with_what_and_where() {
    let output = qoe(&["-"], "1,5e6\n2,fast\n");
    assert!(!output.status.success());
    assert_eq!(
        stderr(&output).trim(),
        "vantage qoe: -: line 2: rate_bps 'fast' is not a number"
    );
    let output = qoe(&["-", "--profile", "4k"], "1,5e6\n");
    assert!(stderr(&output).contains("unknown profile '4k' (known: youtube-360p"));
    let output = qoe(&["-", "--bitrate", "1M"], "1,-5\n");
    assert!(!output.status.success());
    assert_eq!(
        stderr(&output).trim(),
        "vantage qoe: -: series step 0: rate_bps must be a finite number ≥ 0 (got -5)"
    );
    let output = qoe(&["/nonexistent/series.csv"], "");
    assert!(stderr(&output).contains("cannot read /nonexistent/series.csv"));
}

/// A reader that goes away (`vantage qoe … | head -0`) ends the command quietly by
/// SIGPIPE, as it does other Unix tools, instead of a panic from `println!`.
#[test]
fn a_closed_output_pipe_ends_the_report_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let mut child = Command::new(vantage_bin())
        .args(["qoe", "-", "--bitrate", "1M", "--video", "20s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vantage qoe");
    // The reader closes before the command has read its input, so before it prints.
    drop(child.stdout.take());
    let _ = child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(SLOW_SERIES.as_bytes());
    let output = child.wait_with_output().expect("vantage qoe finishes");
    assert_eq!(
        output.status.signal(),
        Some(nix::libc::SIGPIPE),
        "{:?}: {}",
        output.status,
        stderr(&output)
    );
    assert!(stderr(&output).is_empty(), "{}", stderr(&output));
}
