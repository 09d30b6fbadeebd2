//! Agents seen (a heartbeat, a fetch) recorded together.
//!
//! Every agent heartbeats every 5 s, and its fetches record it seen as often. Written
//! one update each, a thousand agents were 200 and more commits a second, each its own
//! flush of the log, and on SQLite each a turn of the one writer: result batches and
//! hand-outs queued behind them, uploads took 30 s and heartbeats timed out waiting for
//! the writer. Now the agents seen while one set is being written are written next, in
//! one transaction: one turn of the writer per set instead of per agent.

use super::*;

/// One caller's agent, waiting to be recorded seen.
pub(super) struct Seen {
    agent: String,
    /// Whether the agent is registered.
    reply: oneshot::Sender<Result<bool, ArchiveError>>,
}

/// Most agents one transaction records (a few statements of [`chunk_rows`] each).
const SEEN_AT_ONCE: usize = 4_096;

/// Agents waiting for the writer; callers wait to enqueue beyond it.
pub(super) const SEEN_QUEUE: usize = 4_096;

/// Takes what is waiting when it is free and records it in one transaction. A set that
/// fails is recorded agent by agent, so each caller gets its own outcome. Ends when the
/// last archive handle is dropped.
pub(super) async fn record_seen(archive: Archive, mut jobs: mpsc::Receiver<Seen>) {
    while let Some(first) = jobs.recv().await {
        let mut waiting = vec![first];
        while waiting.len() < SEEN_AT_ONCE {
            let Ok(job) = jobs.try_recv() else { break };
            waiting.push(job);
        }
        let agents: Vec<&str> = waiting
            .iter()
            .map(|job| job.agent.as_str())
            .collect::<BTreeSet<&str>>()
            .into_iter()
            .collect();
        match archive.set_last_seen(&agents, now_us()).await {
            Ok(registered) => {
                for job in waiting {
                    let known = registered.contains(&job.agent);
                    let _ = job.reply.send(Ok(known));
                }
            }
            Err(error) => {
                tracing::debug!(
                    "recording {} agents seen failed ({error}); one by one",
                    agents.len()
                );
                for job in waiting {
                    let outcome = archive.set_last_seen(&[&job.agent], now_us()).await;
                    let _ = job
                        .reply
                        .send(outcome.map(|registered| registered.contains(&job.agent)));
                }
            }
        }
    }
}

impl Archive {
    /// Records `name` seen now; false when no agent of that name is registered. Waits
    /// for the set of agents seen meanwhile to be written (see [`record_seen`]).
    pub async fn touch_agent(&self, name: &str) -> Result<bool, ArchiveError> {
        let queue = self.seen.as_ref().ok_or(ArchiveError::WriterStopped)?;
        let (reply, outcome) = oneshot::channel();
        queue
            .send(Seen {
                agent: name.to_string(),
                reply,
            })
            .await
            .map_err(|_| ArchiveError::WriterStopped)?;
        outcome.await.map_err(|_| ArchiveError::WriterStopped)?
    }

    /// Sets the last-seen time of `agents` (distinct) to `seen_us` in one transaction;
    /// answers those that are registered.
    async fn set_last_seen(
        &self,
        agents: &[&str],
        seen_us: i64,
    ) -> Result<HashSet<String>, ArchiveError> {
        const DOING: &str = "recording a heartbeat";
        let mut tx = self.write_transaction().await.map_err(sql(DOING))?;
        let mut registered = HashSet::with_capacity(agents.len());
        for chunk in row_chunks(self.backend, agents) {
            let mut text = String::from("UPDATE agents SET last_seen_us = ");
            push_placeholders(&mut text, self.backend, 1, 1);
            text.push_str(" WHERE name IN (");
            push_placeholders(&mut text, self.backend, 2, chunk.len());
            text.push_str(") RETURNING name");
            let mut query = sqlx::query_scalar(&text).bind(seen_us);
            for agent in chunk {
                query = query.bind(*agent);
            }
            let names: Vec<String> = query.fetch_all(&mut *tx).await.map_err(sql(DOING))?;
            registered.extend(names);
        }
        tx.commit().await.map_err(sql(DOING))?;
        Ok(registered)
    }
}
