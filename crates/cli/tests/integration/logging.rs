//! Logs of the long-running commands as a service manager or a log file sees them:
//! stderr is a pipe, so no ANSI colour codes.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn server_logs_to_a_pipe_carry_no_escape_codes() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("logging.db").display());
    let mut child = Command::new(
        std::env::var("VANTAGE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_vantage").to_string()),
    )
    .args(["server", "--listen", "127.0.0.1:0", "--database", &database])
    .args(["--admin-token", "logging-test-token"])
    // The default filter (info) and colour decided by the terminal test alone.
    .env_remove("RUST_LOG")
    .env_remove("NO_COLOR")
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("vantage server starts");
    let stderr = child.stderr.take().expect("stderr");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).split(b'\n') {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    // The tracing line "server listening" comes before the plain "API on" line.
    let mut seen = Vec::new();
    while let Ok(line) = received.recv_timeout(Duration::from_secs(30)) {
        let ready = String::from_utf8_lossy(&line).contains("vantage server: API on");
        seen.push(line);
        if ready {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let text: Vec<String> = seen
        .iter()
        .map(|line| String::from_utf8_lossy(line).into_owned())
        .collect();
    assert!(
        text.iter().any(|line| line.contains("server listening")),
        "no log line before the server was ready: {text:#?}"
    );
    assert!(
        !seen.iter().flatten().any(|&byte| byte == 0x1b),
        "ESC in piped logs: {text:#?}"
    );
}
