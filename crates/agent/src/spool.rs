//! Durable local spool: every result is on disk (fsync'd) before it is uploaded and
//! is deleted only after the server acknowledged it, so neither a server outage nor
//! an agent crash loses a result.
//!
//! One file per run, named by the SHA-256 of the run id (fixed length whatever the id,
//! so no id can exceed a file system's 255-byte name limit; the id itself is inside
//! the file). Writes go to a temporary file that is fsync'd, renamed into place, and
//! the directory fsync'd, so a crash leaves either the whole file or none; temporary
//! files a crash left behind are deleted on open. A quota bounds the spool's bytes and
//! files: a result that would exceed it is refused with [`SpoolError::Full`] and
//! nothing already spooled is touched. Files are listed, then read one at a time, so
//! a large spool is never held in memory.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};
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
    #[error(
        "spool '{dir}' is full ({used_files} files, {used_bytes} bytes; quota {max_files} files, \
         {max_bytes} bytes): result of run '{run_id}' ({bytes} bytes) not spooled"
    )]
    Full {
        dir: PathBuf,
        run_id: String,
        bytes: u64,
        used_files: u64,
        used_bytes: u64,
        max_files: u64,
        max_bytes: u64,
    },
    #[error("spool file '{path}' is unreadable ({reason}); moved aside to .corrupt")]
    Corrupt { path: PathBuf, reason: String },
}

fn io_error<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SpoolError + 'a {
    move |source| SpoolError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// How much the spool may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpoolQuota {
    pub max_bytes: u64,
    pub max_files: u64,
}

impl Default for SpoolQuota {
    /// 256 MiB: days of a busy agent's results (a latency result is a few KiB).
    fn default() -> Self {
        SpoolQuota {
            max_bytes: 256 * 1024 * 1024,
            max_files: 100_000,
        }
    }
}

#[derive(Debug, Default)]
struct Usage {
    files: u64,
    bytes: u64,
}

#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    quota: SpoolQuota,
    usage: Mutex<Usage>,
}

const SUFFIX: &str = ".result.json";
const TEMPORARY_SUFFIX: &str = ".tmp";

fn file_name(run_id: &str) -> String {
    format!("{}{SUFFIX}", hex::encode(Sha256::digest(run_id.as_bytes())))
}

impl Spool {
    /// Opens (creating) the spool directory with the default quota.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Spool, SpoolError> {
        Spool::open_with_quota(dir, SpoolQuota::default())
    }

    /// Opens (creating) the spool directory: deletes temporary files a crash left,
    /// renames files of older versions (named by the run id's hex) to hashed names, and
    /// counts what is there against `quota`.
    pub fn open_with_quota(
        dir: impl Into<PathBuf>,
        quota: SpoolQuota,
    ) -> Result<Spool, SpoolError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(io_error("creating", &dir))?;
        let spool = Spool {
            dir,
            quota,
            usage: Mutex::new(Usage::default()),
        };
        let mut usage = Usage::default();
        for entry in fs::read_dir(&spool.dir).map_err(io_error("listing", &spool.dir))? {
            let entry = entry.map_err(io_error("listing", &spool.dir))?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(TEMPORARY_SUFFIX) {
                tracing::warn!(path = %path.display(), "deleting a spool write a crash interrupted");
                fs::remove_file(&path).map_err(io_error("deleting", &path))?;
                continue;
            }
            let Some(stem) = name.strip_suffix(SUFFIX) else {
                continue;
            };
            let path = if stem.len() == 64 {
                path
            } else {
                match spool.read(&path) {
                    Ok(upload) => {
                        let hashed = spool.dir.join(file_name(&upload.run_id));
                        fs::rename(&path, &hashed).map_err(io_error("renaming", &path))?;
                        hashed
                    }
                    Err(SpoolError::Corrupt { .. }) => continue,
                    Err(error) => return Err(error),
                }
            };
            usage.files += 1;
            usage.bytes += fs::metadata(&path).map(|meta| meta.len()).unwrap_or(0);
        }
        *spool.usage.lock().expect("spool usage lock") = usage;
        spool.sync_dir()?;
        Ok(spool)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, run_id: &str) -> PathBuf {
        self.dir.join(file_name(run_id))
    }

    pub fn contains(&self, run_id: &str) -> bool {
        self.path_of(run_id).exists()
    }

    /// Writes the upload durably; returns once it is on stable storage. Refused with
    /// [`SpoolError::Full`] when it would exceed the quota.
    pub fn store(&self, upload: &ResultUpload) -> Result<(), SpoolError> {
        let path = self.path_of(&upload.run_id);
        let bytes = serde_json::to_vec(upload).expect("uploads serialise");
        let replaced = fs::metadata(&path).map(|meta| meta.len()).ok();
        {
            let usage = self.usage.lock().expect("spool usage lock");
            let files = usage.files + u64::from(replaced.is_none());
            let total = usage.bytes - replaced.unwrap_or(0).min(usage.bytes) + bytes.len() as u64;
            if files > self.quota.max_files || total > self.quota.max_bytes {
                return Err(SpoolError::Full {
                    dir: self.dir.clone(),
                    run_id: upload.run_id.clone(),
                    bytes: bytes.len() as u64,
                    used_files: usage.files,
                    used_bytes: usage.bytes,
                    max_files: self.quota.max_files,
                    max_bytes: self.quota.max_bytes,
                });
            }
        }
        let temporary = self
            .dir
            .join(format!("{}{TEMPORARY_SUFFIX}", file_name(&upload.run_id)));
        let written = (|| {
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
            fs::rename(&temporary, &path).map_err(io_error("renaming into", &path))
        })();
        if let Err(error) = written {
            // A full disk, say: leave no partial file behind.
            let _ = fs::remove_file(&temporary);
            return Err(error);
        }
        {
            let mut usage = self.usage.lock().expect("spool usage lock");
            if let Some(old) = replaced {
                usage.bytes = usage.bytes.saturating_sub(old);
            } else {
                usage.files += 1;
            }
            usage.bytes += bytes.len() as u64;
        }
        self.sync_dir()
    }

    fn sync_dir(&self) -> Result<(), SpoolError> {
        File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(io_error("syncing", &self.dir))
    }

    /// The spooled files, oldest first (read each with [`Spool::read`]).
    pub fn pending_files(&self) -> Result<Vec<PathBuf>, SpoolError> {
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
        Ok(files.into_iter().map(|(_, path)| path).collect())
    }

    /// Reads one spooled upload. An unreadable file is moved aside to `NAME.corrupt`
    /// (so it never blocks the others) and reported as [`SpoolError::Corrupt`].
    pub fn read(&self, path: &Path) -> Result<ResultUpload, SpoolError> {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) => return Err(io_error("reading", path)(error)),
        };
        match serde_json::from_slice::<ResultUpload>(&bytes) {
            Ok(upload) => Ok(upload),
            Err(error) => {
                let aside = path.with_extension("corrupt");
                fs::rename(path, &aside).map_err(io_error("moving aside", path))?;
                self.forget(bytes.len() as u64);
                Err(SpoolError::Corrupt {
                    path: path.to_path_buf(),
                    reason: error.to_string(),
                })
            }
        }
    }

    /// Every spooled upload, oldest first; unreadable files are moved aside and logged.
    /// Reads the whole spool: for tests and tools; the agent reads one at a time.
    pub fn pending(&self) -> Result<Vec<ResultUpload>, SpoolError> {
        let mut uploads = Vec::new();
        for path in self.pending_files()? {
            match self.read(&path) {
                Ok(upload) => uploads.push(upload),
                Err(error @ SpoolError::Corrupt { .. }) => tracing::error!("{error}"),
                Err(error) => return Err(error),
            }
        }
        Ok(uploads)
    }

    fn forget(&self, bytes: u64) {
        let mut usage = self.usage.lock().expect("spool usage lock");
        usage.files = usage.files.saturating_sub(1);
        usage.bytes = usage.bytes.saturating_sub(bytes);
    }

    /// Deletes an acknowledged upload.
    pub fn remove(&self, run_id: &str) -> Result<(), SpoolError> {
        let path = self.path_of(run_id);
        let bytes = fs::metadata(&path).map(|meta| meta.len()).unwrap_or(0);
        match fs::remove_file(&path) {
            Ok(()) => {
                self.forget(bytes);
                self.sync_dir()
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(io_error("deleting", &path)(error)),
        }
    }

    /// Keeps an upload the server refused for good under `rejected/`, with the reason,
    /// for an operator to inspect; it is not retried (and no longer counts against the
    /// quota).
    pub fn reject(&self, run_id: &str, reason: &str) -> Result<(), SpoolError> {
        let rejected = self.dir.join("rejected");
        fs::create_dir_all(&rejected).map_err(io_error("creating", &rejected))?;
        let name = file_name(run_id);
        let target = rejected.join(&name);
        let source = self.path_of(run_id);
        let bytes = fs::metadata(&source).map(|meta| meta.len()).unwrap_or(0);
        fs::rename(&source, &target).map_err(io_error("moving to", &target))?;
        self.forget(bytes);
        let reason_path = rejected.join(format!("{name}.reason"));
        fs::write(&reason_path, reason).map_err(io_error("writing", &reason_path))?;
        self.sync_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::failed_upload as upload;

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
        fs::write(dir.path().join(file_name("bad")), b"{not json").unwrap();
        spool.store(&upload("good")).unwrap();
        let pending = spool.pending().unwrap();
        assert_eq!(pending.len(), 1);
        let hashed = hex::encode(Sha256::digest(b"bad"));
        assert!(dir.path().join(format!("{hashed}.result.corrupt")).exists());
        spool.reject("good", "run does not exist").unwrap();
        assert!(spool.pending().unwrap().is_empty());
        let reason = fs::read_to_string(
            dir.path()
                .join("rejected")
                .join(format!("{}.reason", file_name("good"))),
        )
        .unwrap();
        assert_eq!(reason, "run does not exist");
    }

    #[test]
    fn long_run_ids_fit_in_a_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let long_id = "r".repeat(4096);
        spool.store(&upload(&long_id)).unwrap();
        assert_eq!(spool.pending().unwrap()[0].run_id, long_id);
        assert!(spool.contains(&long_id));
        spool.remove(&long_id).unwrap();
        assert!(spool.pending().unwrap().is_empty());
    }

    #[test]
    fn open_deletes_interrupted_writes_and_renames_older_names() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("abc.result.json.tmp"), b"{half").unwrap();
        // A file as the previous version named it: the hex of the run id.
        let legacy = upload("run/7");
        let legacy_name = format!("{}{SUFFIX}", hex::encode("run/7"));
        fs::write(
            dir.path().join(&legacy_name),
            serde_json::to_vec(&legacy).unwrap(),
        )
        .unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        assert!(!dir.path().join("abc.result.json.tmp").exists());
        assert!(!dir.path().join(&legacy_name).exists());
        assert!(spool.contains("run/7"));
        spool.remove("run/7").unwrap();
        assert!(spool.pending().unwrap().is_empty());
    }

    #[test]
    fn a_full_spool_refuses_new_results_and_keeps_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let one = serde_json::to_vec(&upload("run-1")).unwrap().len() as u64;
        let quota = SpoolQuota {
            max_bytes: 2 * one + one / 2,
            max_files: 10,
        };
        let spool = Spool::open_with_quota(dir.path(), quota).unwrap();
        spool.store(&upload("run-1")).unwrap();
        spool.store(&upload("run-2")).unwrap();
        let error = spool.store(&upload("run-3")).unwrap_err();
        assert!(matches!(error, SpoolError::Full { .. }), "{error}");
        assert!(error.to_string().contains("run 'run-3'"), "{error}");
        // Rewriting a spooled result does not count twice; removing frees room.
        spool.store(&upload("run-2")).unwrap();
        spool.remove("run-1").unwrap();
        spool.store(&upload("run-3")).unwrap();
        // The count survives a reopen, and a file quota applies too.
        let reopened = Spool::open_with_quota(
            dir.path(),
            SpoolQuota {
                max_bytes: u64::MAX,
                max_files: 2,
            },
        )
        .unwrap();
        assert!(matches!(
            reopened.store(&upload("run-4")),
            Err(SpoolError::Full { .. })
        ));
        assert_eq!(reopened.pending().unwrap().len(), 2);
    }
}
