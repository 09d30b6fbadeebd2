//! Supervision of the server's background tasks (the planner, the archivers): a task
//! that panics is logged and restarted after a pause that doubles while it keeps
//! failing, and `/healthz` reports every task's state, so a stuck scheduler shows as
//! `degraded` instead of hiding behind `ok`.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A task that ran this long before failing starts again from the first pause.
const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// The longest pause between restarts.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// What a background task is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskPhase {
    Running,
    /// It panicked and waits to be started again.
    Restarting,
    /// It ended: normal while the server stops, a failure otherwise.
    Stopped,
}

/// One task's state as `/healthz` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskState {
    pub state: TaskPhase,
    pub since: DateTime<Utc>,
    pub restarts: u64,
    /// The last panic's message.
    pub last_failure: Option<String>,
}

/// The states of every supervised task.
#[derive(Debug, Default)]
pub struct TaskHealth {
    tasks: Mutex<BTreeMap<&'static str, TaskState>>,
}

impl TaskHealth {
    pub fn snapshot(&self) -> BTreeMap<&'static str, TaskState> {
        self.tasks.lock().expect("task health lock").clone()
    }

    /// True when every task runs.
    pub fn all_running(&self) -> bool {
        self.tasks
            .lock()
            .expect("task health lock")
            .values()
            .all(|task| task.state == TaskPhase::Running)
    }

    fn update(&self, name: &'static str, phase: TaskPhase, failure: Option<String>) {
        let mut tasks = self.tasks.lock().expect("task health lock");
        let task = tasks.entry(name).or_insert_with(|| TaskState {
            state: phase,
            since: Utc::now(),
            restarts: 0,
            last_failure: None,
        });
        if task.state == TaskPhase::Restarting && phase == TaskPhase::Running {
            task.restarts += 1;
        }
        task.state = phase;
        task.since = Utc::now();
        if failure.is_some() {
            task.last_failure = failure;
        }
    }
}

/// Runs the task `start` makes under `name` until it returns or `stopped` turns true;
/// each panic is recorded in `health` and the task started again after `first_pause`,
/// doubling up to a minute while it keeps failing.
pub fn supervise<F, Fut>(
    name: &'static str,
    health: Arc<TaskHealth>,
    mut stopped: watch::Receiver<bool>,
    first_pause: Duration,
    mut start: F,
) -> JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        let mut pause = first_pause;
        loop {
            health.update(name, TaskPhase::Running, None);
            let started = tokio::time::Instant::now();
            let outcome = tokio::spawn(start()).await;
            let failure = match outcome {
                Ok(()) => {
                    health.update(name, TaskPhase::Stopped, None);
                    return;
                }
                Err(error) if error.is_panic() => panic_message(error.into_panic()),
                Err(_) => "cancelled".to_string(),
            };
            tracing::error!(
                task = name,
                "background task failed: {failure}; restarting in {} ms",
                pause.as_millis()
            );
            health.update(name, TaskPhase::Restarting, Some(failure));
            if started.elapsed() >= HEALTHY_RUN {
                pause = first_pause;
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stopped.wait_for(|stop| *stop) => {
                    health.update(name, TaskPhase::Stopped, None);
                    return;
                }
            }
            pause = (pause * 2).min(MAX_PAUSE);
        }
    })
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        format!("panicked: {text}")
    } else if let Some(text) = payload.downcast_ref::<String>() {
        format!("panicked: {text}")
    } else {
        "panicked".to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::{supervise, TaskHealth, TaskPhase};

    #[tokio::test]
    async fn a_panicking_task_is_restarted_and_reported() {
        let health = Arc::new(TaskHealth::default());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let starts = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&starts);
        let task_stopped = stopped.clone();
        let handle = supervise(
            "planner",
            Arc::clone(&health),
            stopped,
            Duration::from_millis(10),
            move || {
                let attempt = counted.fetch_add(1, Ordering::SeqCst);
                let mut stopped = task_stopped.clone();
                async move {
                    if attempt < 2 {
                        panic!("tick {attempt} failed");
                    }
                    let _ = stopped.wait_for(|stop| *stop).await;
                }
            },
        );
        // Bounded wait for the third start.
        for _ in 0..500 {
            if starts.load(Ordering::SeqCst) == 3 && health.all_running() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let planner = health.snapshot()["planner"].clone();
        assert_eq!(planner.state, TaskPhase::Running);
        assert_eq!(planner.restarts, 2);
        assert_eq!(
            planner.last_failure.as_deref(),
            Some("panicked: tick 1 failed")
        );
        stop.send(true).unwrap();
        handle.await.unwrap();
        assert_eq!(health.snapshot()["planner"].state, TaskPhase::Stopped);
        assert!(!health.all_running());
    }

    #[tokio::test]
    async fn a_task_failing_while_the_server_stops_is_not_restarted() {
        let health = Arc::new(TaskHealth::default());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        stop.send(true).unwrap();
        let starts = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&starts);
        supervise(
            "archivers",
            Arc::clone(&health),
            stopped,
            Duration::from_secs(3600),
            move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { panic!("boom") }
            },
        )
        .await
        .unwrap();
        assert_eq!(starts.load(Ordering::SeqCst), 1);
        assert_eq!(health.snapshot()["archivers"].state, TaskPhase::Stopped);
    }
}
