//! Captures brought into the archive from outside a scheduled run: `vantage pcap FILE
//! --server` analyses a capture where the file is and sends its flow records here. They
//! are stored as a completed `capture` run of the host that took the capture, so the
//! results API, series, subscribers and archivers see them as they see a scheduled
//! capture's. The packets never leave the host that holds them.
//!
//! The run's id is derived from the host's name and the flow records, so sending the
//! same capture again is acknowledged as a duplicate and stored once.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use vantage_model::config_error::{is_valid_name, NAME_RULE};
use vantage_model::control::{ResultUpload, RunOutcome};
use vantage_model::kinds::capture::KIND as CAPTURE;
use vantage_passive::{CaptureReport, FlowTotals};

use crate::archive::{to_us, Archive, ArchiveError, Ingest, IngestRefusal, RunRecord, RunState};
use crate::ingest::IngestPipeline;

/// The task of imported captures' runs. The colon keeps it apart from every task a
/// configuration can name.
pub const IMPORTED_CAPTURE_TASK: &str = "import:capture";
/// The longest file name kept with an imported capture.
pub const MAX_FILE_NAME_BYTES: usize = 255;

/// What `POST /api/v1/captures` takes: a capture's analysis, as `vantage pcap --json`
/// prints it, and where it came from.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureImport {
    /// The host the capture was taken on: an agent's name, or another host's in the
    /// same alphabet (a router's mirror port, say).
    pub agent: String,
    /// The capture file's name, without its directory.
    pub file: String,
    pub report: CaptureReport,
}

/// The stored result document of an imported capture: the report with its totals, as a
/// scheduled capture run stores it, and `import` instead of the run's spec and command.
#[derive(Serialize)]
struct ImportedCapture<'a> {
    import: ImportSource<'a>,
    summary: FlowTotals,
    #[serde(flatten)]
    report: &'a CaptureReport,
}

#[derive(Serialize)]
struct ImportSource<'a> {
    file: &'a str,
    /// The name of the token that sent it.
    imported_by: &'a str,
}

/// Why an import was refused (the sender's fault).
#[derive(Debug, thiserror::Error)]
pub enum ImportRefusal {
    #[error("field 'agent': invalid name '{0}': {NAME_RULE}")]
    AgentName(String),
    #[error(
        "field 'file': a file name of 1 to {MAX_FILE_NAME_BYTES} bytes without '/' or control characters is needed"
    )]
    FileName,
    #[error("field 'report.capture': the capture holds no frame, so there is nothing to place in time or store")]
    Empty,
    #[error("field 'report.capture.start_time': '{0}' is not an RFC 3339 time")]
    StartTime(String),
    #[error("field 'report.capture.duration_s': {0} is not a duration the archive can hold")]
    Duration(f64),
    #[error(transparent)]
    Ingest(#[from] IngestRefusal),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// Stores `import` as a completed capture run of `import.agent`, sent by the token
/// `imported_by`; a capture stored before is acknowledged as [`Ingest::Duplicate`].
pub async fn store_capture(
    archive: &Archive,
    ingest: &IngestPipeline,
    import: &CaptureImport,
    imported_by: &str,
) -> Result<(Ingest, RunRecord), ImportRefusal> {
    let (start, end) = check(import)?;
    // Plain derived structs with string keys: serialising them cannot fail.
    let report_json = serde_json::to_value(&import.report).expect("a report is plain JSON");
    let document = serde_json::to_value(ImportedCapture {
        import: ImportSource {
            file: &import.file,
            imported_by,
        },
        summary: import.report.totals(),
        report: &import.report,
    })
    .expect("a report is plain JSON");
    let run = RunRecord {
        id: run_id(&import.agent, &report_json),
        task: IMPORTED_CAPTURE_TASK.to_string(),
        test: CAPTURE.name.to_string(),
        test_name: IMPORTED_CAPTURE_TASK.to_string(),
        client: import.agent.clone(),
        server: import.agent.clone(),
        target: None,
        spec: serde_json::json!({ "file": import.file }).into(),
        exclusive: false,
        reverse: false,
        priority: 0,
        claims: Vec::new(),
        planned_start_us: to_us(start),
        planned_end_us: to_us(end),
        actual_start_us: Some(to_us(start)),
        actual_end_us: Some(to_us(end)),
        // Stored as made, so the missed-run sweep never sees it waiting for its result
        // in the moment before the ingest below stores it (sending the capture again
        // stores a result the ingest did not).
        state: RunState::Completed,
        reason: None,
    };
    archive.insert_runs(std::slice::from_ref(&run)).await?;
    let upload = ResultUpload {
        run_id: run.id,
        agent: import.agent.clone(),
        outcome: RunOutcome::Completed,
        actual_start: start,
        actual_end: end,
        result: Some(document),
        error: None,
    };
    Ok(ingest
        .ingest(std::slice::from_ref(&upload))
        .await?
        .pop()
        .expect("one outcome per upload")?)
}

/// The capture's first and last frame times, once the names are checked.
fn check(import: &CaptureImport) -> Result<(DateTime<Utc>, DateTime<Utc>), ImportRefusal> {
    if !is_valid_name(&import.agent) {
        return Err(ImportRefusal::AgentName(import.agent.clone()));
    }
    let file = &import.file;
    if file.is_empty()
        || file.len() > MAX_FILE_NAME_BYTES
        || file.contains('/')
        || file.chars().any(char::is_control)
    {
        return Err(ImportRefusal::FileName);
    }
    let capture = &import.report.capture;
    let Some(start_text) = capture.start_time.as_deref().filter(|_| capture.frames > 0) else {
        return Err(ImportRefusal::Empty);
    };
    let start = DateTime::parse_from_rfc3339(start_text)
        .map_err(|_| ImportRefusal::StartTime(start_text.to_string()))?
        .with_timezone(&Utc);
    let duration = capture.duration_s;
    let end = (duration.is_finite() && duration >= 0.0)
        .then(|| chrono::TimeDelta::microseconds((duration * 1e6).round() as i64))
        .and_then(|length| start.checked_add_signed(length))
        .ok_or(ImportRefusal::Duration(duration))?;
    Ok((start, end))
}

/// `import-` and 32 hex digits of SHA-256 over the host's name and the flow records.
fn run_id(agent: &str, report: &serde_json::Value) -> String {
    let mut digest = Sha256::new();
    digest.update(agent.as_bytes());
    digest.update([0]);
    digest.update(report.to_string().as_bytes());
    format!("import-{}", &hex::encode(digest.finalize())[..32])
}

#[cfg(test)]
mod tests {
    use super::*;
    use vantage_passive::{BandwidthEcdf, CaptureSummary};

    fn import(agent: &str, file: &str, start: Option<&str>, duration_s: f64) -> CaptureImport {
        CaptureImport {
            agent: agent.to_string(),
            file: file.to_string(),
            report: CaptureReport {
                capture: CaptureSummary {
                    frames: 3,
                    start_time: start.map(str::to_string),
                    duration_s,
                    ..CaptureSummary::default()
                },
                flows: Vec::new(),
                bandwidth_ecdf: BandwidthEcdf::default(),
            },
        }
    }

    const START: Option<&str> = Some("2026-11-27T10:00:00.000000250Z");

    #[test]
    fn a_capture_spans_its_first_to_its_last_frame() {
        let (start, end) = check(&import("edge-1", "a.pcapng", START, 2.5)).unwrap();
        assert_eq!(start.to_rfc3339(), "2026-11-27T10:00:00.000000250+00:00");
        assert_eq!((end - start).num_microseconds(), Some(2_500_000));
    }

    #[test]
    fn names_times_and_durations_the_archive_cannot_hold_are_refused() {
        let refusal = |import: CaptureImport| check(&import).unwrap_err().to_string();
        assert!(refusal(import("a b", "a.pcap", START, 1.0)).starts_with("field 'agent'"));
        for file in ["", "../a.pcap", "a\nb.pcap", &"x".repeat(256)] {
            assert!(
                refusal(import("edge-1", file, START, 1.0)).starts_with("field 'file'"),
                "{file:?}"
            );
        }
        assert!(refusal(import("edge-1", "a.pcap", None, 0.0)).contains("holds no frame"));
        assert!(refusal(import("edge-1", "a.pcap", Some("yesterday"), 1.0))
            .contains("'yesterday' is not an RFC 3339 time"));
        for duration_s in [f64::NAN, -1.0, f64::INFINITY, 1e300] {
            assert!(
                refusal(import("edge-1", "a.pcap", START, duration_s))
                    .starts_with("field 'report.capture.duration_s'"),
                "{duration_s}"
            );
        }
    }

    #[test]
    fn the_run_id_is_the_host_s_and_the_records_digest() {
        let report = serde_json::json!({"flows": []});
        assert_eq!(run_id("edge-1", &report), run_id("edge-1", &report));
        assert_ne!(run_id("edge-1", &report), run_id("edge-2", &report));
        assert_eq!(run_id("edge-1", &report).len(), "import-".len() + 32);
    }
}
