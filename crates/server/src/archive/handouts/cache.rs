//! Hand-outs kept indexed in memory for the checks of the uploads that name their runs.
//!
//! An agent uploads its results every second, a few dozen at a time, and each upload's
//! check reads the hand-out its runs came from: at a thousand agents, a mesh every 40 s
//! hands out about 1 500 runs per agent a minute, 200 KiB of text that was read from the
//! archive and decoded again for each upload it served, one a second. A hand-out never
//! changes once stored (a later fetch adds a hand-out of its own; retention deletes only
//! swept ones, long past), so each is read and indexed once, here: its text, with each
//! run's place in it by id, and a run is decoded only when an upload names it. Every
//! replica keeps its own; one that has not seen a hand-out reads it from the archive.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;

use super::{decode_json, Document, HandedRun, TaskPart};
use crate::archive::{ArchiveError, RunRecord};

/// Most hand-out text kept. A thousand agents' current hand-outs, a mesh every 40 s,
/// are about 300 MiB; the least recently used beyond this are read again when asked.
pub(in crate::archive) const HANDOUT_CACHE_BYTES: usize = 384 << 20;

/// Which stored hand-out: its agent, the start of its window (the table's key), and
/// its runs' first start and last end. A row is never rewritten, and retention deletes
/// only hand-outs long past any fetch's window, so no other hand-out comes to have
/// these values.
pub(super) type HandOutKey = (String, i64, i64, i64);

#[derive(Default)]
struct Kept {
    entries: HashMap<HandOutKey, (Arc<IndexedHandOut>, u64)>,
    bytes: usize,
    uses: u64,
}

pub(in crate::archive) struct HandOutCache {
    kept: Mutex<Kept>,
    capacity_bytes: usize,
    hasher: RandomState,
}

impl HandOutCache {
    pub(in crate::archive) fn new(capacity_bytes: usize) -> HandOutCache {
        HandOutCache {
            kept: Mutex::default(),
            capacity_bytes,
            hasher: RandomState::new(),
        }
    }

    /// The kept hand-out `key` names, marked used now.
    pub(super) fn get(&self, key: &HandOutKey) -> Option<Arc<IndexedHandOut>> {
        let mut kept = self.kept.lock().expect("hand-out cache lock");
        kept.uses += 1;
        let uses = kept.uses;
        let (handout, used) = kept.entries.get_mut(key)?;
        *used = uses;
        Some(handout.clone())
    }

    /// Indexes a hand-out's text read from the archive and keeps it, dropping the least
    /// recently used beyond the capacity.
    pub(super) fn insert(
        &self,
        key: HandOutKey,
        text: String,
    ) -> Result<Arc<IndexedHandOut>, ArchiveError> {
        let handout = Arc::new(IndexedHandOut::new(&key.0, text, &self.hasher)?);
        let mut kept = self.kept.lock().expect("hand-out cache lock");
        kept.uses += 1;
        let uses = kept.uses;
        kept.bytes += handout.text.len();
        if let Some((replaced, _)) = kept.entries.insert(key, (handout.clone(), uses)) {
            kept.bytes -= replaced.text.len();
        }
        while kept.bytes > self.capacity_bytes {
            let Some(oldest) = kept
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some((dropped, _)) = kept.entries.remove(&oldest) {
                kept.bytes -= dropped.text.len();
            }
        }
        Ok(handout)
    }

    /// The runs with these ids of `handout`, `client`'s.
    pub(super) fn runs_named(
        &self,
        handout: &IndexedHandOut,
        client: &str,
        wanted: &HashSet<&str>,
    ) -> Result<Vec<RunRecord>, ArchiveError> {
        let mut runs = Vec::new();
        for id in wanted {
            let hash = self.hasher.hash_one(id);
            let first = handout.runs.partition_point(|place| place.0 < hash);
            for &(_, start, end) in handout.runs[first..]
                .iter()
                .take_while(|place| place.0 == hash)
            {
                let run: HandedRun = decode_json(&handout.text[start as usize..end as usize])?;
                if run.1 == *id {
                    runs.push(handout.shared.run(client, &run)?);
                }
            }
        }
        Ok(runs)
    }
}

/// A hand-out's text, with what its runs share decoded and each run's place in it.
pub(super) struct IndexedHandOut {
    text: Box<str>,
    /// The tasks and resources its runs name by index; no runs.
    shared: Document<'static>,
    /// Each run's id hash and the byte range of its array in `text`, by hash.
    runs: Vec<(u64, u32, u32)>,
}

impl IndexedHandOut {
    fn new(
        client: &str,
        text: String,
        hasher: &RandomState,
    ) -> Result<IndexedHandOut, ArchiveError> {
        let text = text.into_boxed_str();
        let Document::<&RawValue> {
            tasks,
            resources,
            runs: texts,
        } = decode_json(&text)?;
        let base = text.as_ptr() as usize;
        // Neither database stores a text of 1 GiB or more, so this never fails.
        let offset = |at: usize| {
            u32::try_from(at).map_err(|_| ArchiveError::CorruptHandOut {
                client: client.to_string(),
                what: "a hand-out of 4 GiB or more".into(),
            })
        };
        let mut runs = Vec::with_capacity(texts.len());
        for run_text in texts {
            let run: HandedRun = decode_json(run_text.get())?;
            let start = run_text.get().as_ptr() as usize - base;
            runs.push((
                hasher.hash_one(run.1.as_ref()),
                offset(start)?,
                offset(start + run_text.get().len())?,
            ));
        }
        runs.sort_unstable();
        let shared = Document {
            tasks: tasks.into_iter().map(TaskPart::into_owned).collect(),
            resources: resources
                .into_iter()
                .map(|resource| Cow::Owned(resource.into_owned()))
                .collect(),
            runs: Vec::new(),
        };
        Ok(IndexedHandOut { text, shared, runs })
    }
}
