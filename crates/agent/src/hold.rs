//! Results that neither the spool nor the server could take (the spool's disk or
//! quota full while the server is unreachable), kept in memory, bounded in bytes,
//! until either has room again. Memory does not survive a restart, so the agent tries
//! the spool first each time and says at shutdown what it still held.

use std::collections::VecDeque;
use std::sync::Mutex;

use vantage_model::control::ResultUpload;

/// Default bound on the bytes held in memory.
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
#[error(
    "the memory hold is full ({held_results} results, {held_bytes} of {max_bytes} bytes): \
     result of run '{run_id}' ({bytes} bytes) cannot be kept"
)]
pub struct HoldFull {
    pub run_id: String,
    pub bytes: u64,
    pub held_results: usize,
    pub held_bytes: u64,
    pub max_bytes: u64,
}

/// What the hold keeps after a push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldUsage {
    pub results: usize,
    pub bytes: u64,
}

/// Results waiting in memory, oldest first.
#[derive(Debug)]
pub struct MemoryHold {
    max_bytes: u64,
    held: Mutex<VecDeque<(ResultUpload, u64)>>,
}

impl MemoryHold {
    pub fn new(max_bytes: u64) -> MemoryHold {
        MemoryHold {
            max_bytes,
            held: Mutex::new(VecDeque::new()),
        }
    }

    /// Keeps `upload` unless that would take the hold over its bound (sized as the
    /// JSON the agent uploads).
    pub fn push(&self, upload: ResultUpload) -> Result<HoldUsage, HoldFull> {
        let bytes = serde_json::to_vec(&upload).map_or(0, |json| json.len() as u64);
        let mut held = self.held.lock().expect("memory hold lock");
        let held_bytes: u64 = held.iter().map(|(_, bytes)| bytes).sum();
        if held_bytes + bytes > self.max_bytes {
            return Err(HoldFull {
                run_id: upload.run_id,
                bytes,
                held_results: held.len(),
                held_bytes,
                max_bytes: self.max_bytes,
            });
        }
        held.push_back((upload, bytes));
        Ok(HoldUsage {
            results: held.len(),
            bytes: held_bytes + bytes,
        })
    }

    /// A copy of the oldest held result; it stays held until [`MemoryHold::remove`].
    pub fn oldest(&self) -> Option<ResultUpload> {
        let held = self.held.lock().expect("memory hold lock");
        held.front().map(|(upload, _)| upload.clone())
    }

    pub fn remove(&self, run_id: &str) {
        let mut held = self.held.lock().expect("memory hold lock");
        held.retain(|(upload, _)| upload.run_id != run_id);
    }

    pub fn contains(&self, run_id: &str) -> bool {
        let held = self.held.lock().expect("memory hold lock");
        held.iter().any(|(upload, _)| upload.run_id == run_id)
    }

    /// Run ids still held, oldest first.
    pub fn run_ids(&self) -> Vec<String> {
        let held = self.held.lock().expect("memory hold lock");
        held.iter()
            .map(|(upload, _)| upload.run_id.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::failed_upload as upload;

    #[test]
    fn keeps_results_in_order_within_its_bound_and_refuses_beyond() {
        let first = upload("run/1");
        let size = serde_json::to_vec(&first).unwrap().len() as u64;
        let hold = MemoryHold::new(2 * size);
        assert_eq!(
            hold.push(first).unwrap(),
            HoldUsage {
                results: 1,
                bytes: size
            }
        );
        hold.push(upload("run/2")).unwrap();
        let full = hold.push(upload("run/3")).unwrap_err();
        assert_eq!(full.run_id, "run/3");
        assert_eq!(full.held_results, 2);
        assert!(full.to_string().contains("memory hold is full"), "{full}");
        assert_eq!(hold.run_ids(), ["run/1", "run/2"]);

        assert_eq!(hold.oldest().unwrap().run_id, "run/1");
        assert!(hold.contains("run/1"), "a result stays held until removed");
        hold.remove("run/1");
        assert!(!hold.contains("run/1"));
        assert_eq!(hold.oldest().unwrap().run_id, "run/2");
        hold.push(upload("run/3")).expect("room again");
        assert_eq!(hold.run_ids(), ["run/2", "run/3"]);
    }
}
