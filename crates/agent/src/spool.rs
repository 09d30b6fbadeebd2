//! Durable local spool: every result is on disk (fsync'd) before it is uploaded and
//! is deleted only after the server acknowledged it, so neither a server outage nor
//! an agent crash loses a result.
//!
//! One file per run, named by the hex of the run id (any id maps to a safe, unique
//! name). Writes go to a temporary file that is fsync'd, renamed into place, and the
//! directory fsync'd, so a crash leaves either the whole file or none.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use vantage_model::control::ResultUpload;

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool {action} '{path}': {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_error<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SpoolError + 'a {
    move |source| SpoolError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
}

const SUFFIX: &str = ".result.json";

fn encode_name(run_id: &str) -> String {
    run_id.bytes().map(|byte| format!("{byte:02x}")).collect()
}

impl Spool {
    /// Opens (creating) the spool directory.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Spool, SpoolError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(io_error("creating", &dir))?;
        Ok(Spool { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, run_id: &str) -> PathBuf {
        self.dir.join(format!("{}{SUFFIX}", encode_name(run_id)))
    }

    pub fn contains(&self, run_id: &str) -> bool {
        self.path_of(run_id).exists()
    }

    /// Writes the upload durably; returns once it is on stable storage.
    pub fn store(&self, upload: &ResultUpload) -> Result<(), SpoolError> {
        let path = self.path_of(&upload.run_id);
        let temporary = path.with_extension("tmp");
        let bytes = serde_json::to_vec(upload).expect("uploads serialise");
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temporary)
            .map_err(io_error("creating", &temporary))?;
        file.write_all(&bytes)
            .map_err(io_error("writing", &temporary))?;
        file.sync_all().map_err(io_error("syncing", &temporary))?;
        drop(file);
        fs::rename(&temporary, &path).map_err(io_error("renaming into", &path))?;
        self.sync_dir()
    }

    fn sync_dir(&self) -> Result<(), SpoolError> {
        File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(io_error("syncing", &self.dir))
    }

    /// Every spooled upload, oldest file first. Unreadable files are moved aside to
    /// `NAME.corrupt` (and reported) so they never block the others.
    pub fn pending(&self) -> Result<Vec<ResultUpload>, SpoolError> {
        let mut files = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io_error("listing", &self.dir))? {
            let entry = entry.map_err(io_error("listing", &self.dir))?;
            let path = entry.path();
            if path.to_string_lossy().ends_with(SUFFIX) {
                let modified = entry.metadata().and_then(|meta| meta.modified()).ok();
                files.push((modified, path));
            }
        }
        files.sort();
        let mut uploads = Vec::with_capacity(files.len());
        for (_, path) in files {
            let parsed = fs::read(&path)
                .map_err(|error| error.to_string())
                .and_then(|bytes| {
                    serde_json::from_slice::<ResultUpload>(&bytes)
                        .map_err(|error| error.to_string())
                });
            match parsed {
                Ok(upload) => uploads.push(upload),
                Err(reason) => {
                    let aside = path.with_extension("corrupt");
                    tracing::error!(path = %path.display(), %reason, "unreadable spool file moved aside");
                    fs::rename(&path, &aside).map_err(io_error("moving aside", &path))?;
                }
            }
        }
        Ok(uploads)
    }

    /// Deletes an acknowledged upload.
    pub fn remove(&self, run_id: &str) -> Result<(), SpoolError> {
        let path = self.path_of(run_id);
        match fs::remove_file(&path) {
            Ok(()) => self.sync_dir(),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(io_error("deleting", &path)(error)),
        }
    }

    /// Keeps an upload the server refused for good under `rejected/`, with the reason,
    /// for an operator to inspect; it is not retried.
    pub fn reject(&self, run_id: &str, reason: &str) -> Result<(), SpoolError> {
        let rejected = self.dir.join("rejected");
        fs::create_dir_all(&rejected).map_err(io_error("creating", &rejected))?;
        let name = format!("{}{SUFFIX}", encode_name(run_id));
        let target = rejected.join(&name);
        fs::rename(self.path_of(run_id), &target).map_err(io_error("moving to", &target))?;
        let reason_path = rejected.join(format!("{name}.reason"));
        fs::write(&reason_path, reason).map_err(io_error("writing", &reason_path))?;
        self.sync_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use vantage_model::control::RunOutcome;

    fn upload(run_id: &str) -> ResultUpload {
        ResultUpload {
            run_id: run_id.into(),
            agent: "a".into(),
            outcome: RunOutcome::Failed,
            actual_start: Utc::now(),
            actual_end: Utc::now(),
            result: None,
            error: Some("x".into()),
        }
    }

    #[test]
    fn stores_lists_and_removes_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        spool.store(&upload("run/1")).unwrap();
        spool.store(&upload("run/2")).unwrap();
        spool.store(&upload("run/1")).unwrap();
        let reopened = Spool::open(dir.path()).unwrap();
        let mut ids: Vec<_> = reopened
            .pending()
            .unwrap()
            .into_iter()
            .map(|u| u.run_id)
            .collect();
        ids.sort();
        assert_eq!(ids, ["run/1", "run/2"]);
        assert!(reopened.contains("run/2"));
        reopened.remove("run/2").unwrap();
        reopened.remove("run/2").unwrap();
        assert!(!reopened.contains("run/2"));
        assert_eq!(reopened.pending().unwrap().len(), 1);
    }

    #[test]
    fn corrupt_files_are_moved_aside_and_rejects_kept_with_reason() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        fs::write(
            dir.path().join(format!("{}{SUFFIX}", encode_name("bad"))),
            b"{not json",
        )
        .unwrap();
        spool.store(&upload("good")).unwrap();
        let pending = spool.pending().unwrap();
        assert_eq!(pending.len(), 1);
        assert!(dir
            .path()
            .join(format!("{}.result.corrupt", encode_name("bad")))
            .exists());
        spool.reject("good", "run does not exist").unwrap();
        assert!(spool.pending().unwrap().is_empty());
        let reason = fs::read_to_string(
            dir.path()
                .join("rejected")
                .join(format!("{}{SUFFIX}.reason", encode_name("good"))),
        )
        .unwrap();
        assert_eq!(reason, "run does not exist");
    }
}
