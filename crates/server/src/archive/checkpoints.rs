//! SQLite's log copied back into the database beside the writer, not inside its commits.
//!
//! In WAL mode a commit that finds the log past `wal_autocheckpoint` pages copies the
//! log into the database file before it returns: the ingest writer's commit then waits
//! for some 200 MiB of page writes, and a fleet's uploads queue behind it. Here a
//! connection of its own runs a passive checkpoint every [`COPY_EVERY`], which copies
//! what no reader still needs without taking the write lock, so the writer's commits
//! find the log copied and start it over. The writer's `wal_autocheckpoint` stays as a
//! backstop should this fall behind.

use super::*;

/// How often the log is copied: often enough that each copy is a few thousand pages.
const COPY_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// Copies the log of the SQLite database at `url` every [`COPY_EVERY`] on a connection
/// of its own until the group commit's queue closes (its last sender, held by the
/// archive's handles, dropped).
pub(super) async fn copy_log(
    url: &str,
    queue: mpsc::WeakSender<IngestJob>,
) -> Result<(), ArchiveError> {
    let connection = AnyPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .map_err(sql("connecting for checkpoints"))?;
    tokio::spawn(async move {
        let mut every = tokio::time::interval(COPY_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if queue.upgrade().is_none() {
                break;
            }
            if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&connection)
                .await
            {
                tracing::debug!("copying the archive's log into its database failed: {error}");
            }
        }
        connection.close().await;
    });
    Ok(())
}
