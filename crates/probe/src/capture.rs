//! The `capture` kind's engine: Wireshark's `dumpcap` captures on one interface for the
//! run's duration (also bounded by packet count and file size), and the capture is
//! analysed where it was taken (`vantage_passive`) into flow records; the packets stay
//! in a temporary file that is removed once it is read, and are uploaded with the
//! records only when the spec asks (`upload_packets`).

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use vantage_model::kinds::capture::{CaptureSpec, MAX_UPLOADED_PACKETS_BYTES};
use vantage_passive::{analyse, CaptureReport, FlowTotals, Options, PassiveError};

use crate::subprocess::{run_bounded, BoundedRunError};

/// Wireshark's capture program (Debian's `wireshark-common`, installed with tshark).
pub const DUMPCAP: &str = "dumpcap";
/// How long dumpcap may take beyond the capture's duration to open the interface and
/// write its last statistics before it is killed.
const DUMPCAP_GRACE: Duration = Duration::from_secs(15);
/// The capture file's bound, in dumpcap's kB (1 GiB): the largest snapshot length times
/// the largest packet count the kind allows would be far more than an agent should hold,
/// so the file stops here whatever the packet count.
const MAX_FILE_KB: u64 = 1 << 20;

#[derive(Debug, Error)]
pub enum CaptureError {
    #[error(
        "cannot run {program} (Wireshark's dumpcap, Debian package wireshark-common): {source}"
    )]
    Missing {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("{command} did not finish within its {duration_s} s and {} s of grace", DUMPCAP_GRACE.as_secs())]
    Timeout { command: String, duration_s: u64 },
    #[error("{command} failed ({status}): {said}")]
    Failed {
        command: String,
        status: std::process::ExitStatus,
        said: String,
    },
    #[error("cannot make a file for the capture: {0}")]
    TemporaryFile(std::io::Error),
    #[error("reading the capture dumpcap wrote: {0}")]
    Analysis(#[from] PassiveError),
}

/// What a capture run reports: the flow records and the capture's quality, as
/// `vantage pcap` gives them, with their totals and what the capture program said.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaptureResult {
    pub spec: CaptureSpec,
    /// The capture command as run (the file name aside).
    pub command: String,
    /// What dumpcap said: the interface, and packets captured, received and dropped.
    pub tool_said: String,
    pub summary: FlowTotals,
    /// The capture file itself, when the spec asked for it (`upload_packets`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packets: Option<UploadedPackets>,
    #[serde(flatten)]
    pub report: CaptureReport,
}

/// The packets of a capture, as the agent uploads them. The server keeps the file apart
/// from the result document (`GET /api/v1/captures/packets?run_id=RUN_ID`) and leaves
/// `bytes` and its SHA-256 in the document.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UploadedPackets {
    /// The pcapng file's size.
    pub bytes: u64,
    /// The pcapng file, base64 (RFC 4648, with padding).
    pub pcapng_base64: String,
}

/// dumpcap's arguments for `spec`, but for the file it writes (pcapng, which carries the
/// interface's drop count).
fn dumpcap_args(spec: &CaptureSpec) -> Vec<String> {
    let mut args = vec![
        "-i".to_string(),
        spec.interface.clone(),
        "-s".to_string(),
        spec.snaplen_bytes.to_string(),
        "-c".to_string(),
        spec.max_packets.to_string(),
        "-a".to_string(),
        format!("duration:{}", spec.duration_s),
        "-a".to_string(),
        format!(
            "filesize:{}",
            if spec.upload_packets {
                MAX_UPLOADED_PACKETS_BYTES / 1024
            } else {
                MAX_FILE_KB
            }
        ),
        "-q".to_string(),
    ];
    if let Some(filter) = &spec.filter {
        args.extend(["-f".to_string(), filter.clone()]);
    }
    args
}

/// Captures as `spec` says with `program` (normally [`DUMPCAP`]) and analyses the
/// capture. Blocking: about the spec's duration.
pub fn run_capture(program: &Path, spec: &CaptureSpec) -> Result<CaptureResult, CaptureError> {
    let directory = tempfile::Builder::new()
        .prefix("vantage-capture-")
        .tempdir()
        .map_err(CaptureError::TemporaryFile)?;
    let file = directory.path().join("capture.pcapng");
    let args = dumpcap_args(spec);
    let command = format!("{} {}", program.display(), args.join(" "));
    let output = run_bounded(
        Command::new(program).args(&args).arg("-w").arg(&file),
        Duration::from_secs(spec.duration_s) + DUMPCAP_GRACE,
    )
    .map_err(|error| match error {
        BoundedRunError::Io(source) => CaptureError::Missing {
            program: program.to_path_buf(),
            source,
        },
        BoundedRunError::Timeout => CaptureError::Timeout {
            command: command.clone(),
            duration_s: spec.duration_s,
        },
    })?;
    // The temporary file's name is of no use once it is gone.
    let said = String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|line| !line.starts_with("File: "))
        .collect::<Vec<_>>()
        .join("\n");
    if !output.status.success() {
        return Err(CaptureError::Failed {
            command,
            status: output.status,
            said,
        });
    }
    let options = Options {
        side: spec.side,
        ..Options::default()
    };
    let opened = File::open(&file).map_err(PassiveError::Io)?;
    let report = analyse(BufReader::new(opened), &options)?;
    let packets = if spec.upload_packets {
        let pcapng = std::fs::read(&file).map_err(PassiveError::Io)?;
        Some(UploadedPackets {
            bytes: pcapng.len() as u64,
            pcapng_base64: BASE64.encode(&pcapng),
        })
    } else {
        None
    };
    Ok(CaptureResult {
        spec: spec.clone(),
        command,
        tool_said: said,
        summary: report.totals(),
        packets,
        report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> CaptureSpec {
        CaptureSpec {
            interface: "eth0".into(),
            filter: Some("tcp port 5201".into()),
            duration_s: 30,
            snaplen_bytes: 128,
            max_packets: 1000,
            side: None,
            upload_packets: false,
        }
    }

    #[test]
    fn dumpcap_is_bounded_in_time_packets_and_size_and_takes_the_filter_as_one_argument() {
        let args = dumpcap_args(&spec());
        assert_eq!(
            args.join(" "),
            "-i eth0 -s 128 -c 1000 -a duration:30 -a filesize:1048576 -q -f tcp port 5201"
        );
        assert_eq!(args[12], "tcp port 5201");
    }

    #[test]
    fn packets_are_uploaded_only_when_asked_and_then_bounded_to_16_mib() {
        let capture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/corpus/capture_file/ethernet-ipv6-snaplen96.pcapng"
        );
        let pcapng = std::fs::read(capture).unwrap();
        let directory = tempfile::tempdir().unwrap();
        // Writes the capture to the file named by the last argument, as `-w FILE`.
        let program = crate::subprocess::fake_program(
            directory.path(),
            "dumpcap",
            &format!("for last; do :; done; cp '{capture}' \"$last\""),
        );
        let asked = CaptureSpec {
            upload_packets: true,
            ..spec()
        };
        assert!(dumpcap_args(&asked).contains(&"filesize:16384".to_string()));
        let result = run_capture(&program, &asked).unwrap();
        let packets = result.packets.expect("packets uploaded when asked");
        assert_eq!(packets.bytes, pcapng.len() as u64);
        assert_eq!(BASE64.decode(&packets.pcapng_base64).unwrap(), pcapng);
        assert!(result.summary.flows > 0);

        let result = run_capture(&program, &spec()).unwrap();
        assert!(result.packets.is_none());
        assert!(serde_json::to_value(&result)
            .unwrap()
            .get("packets")
            .is_none());
    }

    #[test]
    fn a_failing_or_missing_dumpcap_is_named_with_what_it_said() {
        let directory = tempfile::tempdir().unwrap();
        let program = crate::subprocess::fake_program(
            directory.path(),
            "dumpcap",
            r#"echo 'dumpcap: There is no device named "eth0".' >&2; exit 1"#,
        );
        let error = run_capture(&program, &spec()).unwrap_err().to_string();
        assert!(
            error.contains("-i eth0 -s 128 -c 1000 -a duration:30")
                && error.ends_with("dumpcap: There is no device named \"eth0\"."),
            "{error}"
        );
        assert!(!error.contains("-w"), "{error}");

        let missing = directory.path().join("absent");
        let error = run_capture(&missing, &spec()).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!("cannot run {}", missing.display())),
            "{error}"
        );
    }
}
