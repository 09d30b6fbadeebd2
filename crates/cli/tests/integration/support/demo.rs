//! `vantage demo` as a child process: its banner, its output, and a guard that stops
//! it (and takes its lab down) even when a test fails.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::vantage_bin;

/// Stops the demo (SIGTERM: it removes its lab) and takes the lab down if it is still there.
pub struct DemoGuard {
    child: Child,
    lab: Option<String>,
    /// Every line the demo printed so far.
    pub output: Arc<Mutex<Vec<String>>>,
}

impl DemoGuard {
    /// Waits up to `limit` for the demo to end by itself (its `--duration`).
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the demo") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the demo did not stop within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for DemoGuard {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(lab) = &self.lab {
            let _ = Command::new(vantage_bin())
                .args(["lab", "down", lab])
                .output();
        }
    }
}

/// What the demo's banner says.
pub struct Banner {
    pub url: String,
    pub admin_token: String,
    pub reader_token: String,
}

pub struct Demo;

impl Demo {
    /// Starts `vantage demo ARGS` on an ephemeral port and reads its banner; the rest
    /// of the output is drained (shown, and kept in the guard) so the demo never
    /// writes to a closed pipe. `lab` names the lab a `--lab` demo builds.
    pub fn start(args: &[&str], lab: Option<&str>) -> (DemoGuard, Banner) {
        let mut child = Command::new(vantage_bin())
            .arg("demo")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start vantage demo");
        let stdout = child.stdout.take().unwrap();
        let output = Arc::new(Mutex::new(Vec::new()));
        let guard = DemoGuard {
            child,
            lab: lab.map(str::to_string),
            output: output.clone(),
        };
        let (banner, banner_read) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut url, mut admin_token) = (String::new(), String::new());
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("{line}");
                if let Some(rest) = line.split("server on ").nth(1) {
                    url = rest.split_whitespace().next().unwrap_or("").to_string();
                }
                if let Some(rest) = line.trim().strip_prefix("admin token") {
                    admin_token = rest.trim().to_string();
                }
                if let Some(rest) = line.trim().strip_prefix("reader token") {
                    let _ = banner.send(Banner {
                        url: url.clone(),
                        admin_token: admin_token.clone(),
                        reader_token: rest.trim().to_string(),
                    });
                }
                output.lock().unwrap().push(line);
            }
        });
        let banner = banner_read
            .recv_timeout(Duration::from_secs(60))
            .expect("the demo prints its server and tokens");
        (guard, banner)
    }
}
