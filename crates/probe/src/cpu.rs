//! CPU accounting of measuring threads: the probe self-check of
//! Miravalls-Sierra et al. (2018).
//!
//! A thread's CPU time comes from `getrusage(RUSAGE_THREAD)`; its run-queue wait
//! (time it was runnable but another task had the core) from
//! `/proc/thread-self/schedstat` when the kernel has schedstats. CPU + wait close to
//! the wall time means the thread wanted a whole core: the probe, not the network,
//! set the pace.

use std::time::Instant;

/// A thread's CPU counters at one instant.
#[derive(Debug, Clone, Copy)]
pub struct ThreadCpuMark {
    at: Instant,
    cpu_s: f64,
    runqueue_wait_s: Option<f64>,
}

/// A thread's CPU use between two marks.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct ThreadCpuUse {
    pub wall_s: f64,
    pub cpu_s: f64,
    pub runqueue_wait_s: Option<f64>,
}

impl ThreadCpuUse {
    /// CPU time / wall time (1.0 = a full core).
    pub fn cpu_ratio(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.cpu_s / self.wall_s
        } else {
            0.0
        }
    }

    /// Run-queue wait / wall time: how much of the time the thread was starved.
    pub fn runqueue_wait_ratio(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.runqueue_wait_s.unwrap_or(0.0) / self.wall_s
        } else {
            0.0
        }
    }

    /// (CPU time + run-queue wait) / wall time: the share of a core the thread wanted.
    pub fn demand_ratio(&self) -> f64 {
        if self.wall_s > 0.0 {
            (self.cpu_s + self.runqueue_wait_s.unwrap_or(0.0)) / self.wall_s
        } else {
            0.0
        }
    }
}

fn timeval_s(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6
}

fn rusage_cpu_s(who: libc::c_int) -> f64 {
    // SAFETY: getrusage fills the zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(who, &mut usage) };
    if rc != 0 {
        return 0.0;
    }
    timeval_s(usage.ru_utime) + timeval_s(usage.ru_stime)
}

/// CPU time (user + system) of the whole process so far, in seconds.
pub fn process_cpu_s() -> f64 {
    rusage_cpu_s(libc::RUSAGE_SELF)
}

/// Run-queue wait of the calling thread (second field of schedstat, nanoseconds).
fn runqueue_wait_s() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let wait_ns: f64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(wait_ns * 1e-9)
}

impl ThreadCpuMark {
    /// Marks the calling thread now.
    pub fn now() -> Self {
        Self {
            at: Instant::now(),
            cpu_s: rusage_cpu_s(libc::RUSAGE_THREAD),
            runqueue_wait_s: runqueue_wait_s(),
        }
    }

    /// Use of the calling thread since `self` (call from the same thread).
    pub fn elapsed(&self) -> ThreadCpuUse {
        let end = Self::now();
        ThreadCpuUse {
            wall_s: end.at.duration_since(self.at).as_secs_f64(),
            cpu_s: (end.cpu_s - self.cpu_s).max(0.0),
            runqueue_wait_s: match (self.runqueue_wait_s, end.runqueue_wait_s) {
                (Some(start), Some(stop)) => Some((stop - start).max(0.0)),
                _ => None,
            },
        }
    }
}

/// The host's aggregate CPU counters (/proc/stat, in clock ticks) at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostCpuMark {
    busy_ticks: u64,
    total_ticks: u64,
}

impl HostCpuMark {
    /// Now, or `None` where /proc/stat cannot be read.
    pub fn now() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The first (`cpu `) line of /proc/stat: user nice system idle iowait irq softirq
    /// steal …; idle and iowait are the idle ticks (pure).
    pub fn parse(proc_stat: &str) -> Option<Self> {
        let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|field| field.parse().ok())
            .collect::<Option<_>>()?;
        let idle_ticks = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0);
        let total_ticks: u64 = ticks.iter().sum();
        Some(Self {
            busy_ticks: total_ticks - idle_ticks,
            total_ticks,
        })
    }

    /// Share of all cores busy between `self` and `later` (`None` when no tick passed).
    pub fn busy_ratio_until(&self, later: &HostCpuMark) -> Option<f64> {
        let total = later.total_ticks.checked_sub(self.total_ticks)?;
        let busy = later.busy_ticks.checked_sub(self.busy_ticks)?;
        (total > 0).then(|| busy as f64 / total as f64)
    }
}

/// CPU cores online.
pub fn online_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Pins the calling thread to `core`.
pub fn pin_current_thread(core: usize) -> std::io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(core).map_err(std::io::Error::from)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|err| std::io::Error::other(format!("cannot pin thread to CPU {core}: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_busy_share_from_two_proc_stat_samples() {
        // 100 ticks pass: 30 user + 10 system busy, 55 idle + 5 iowait idle.
        let before = HostCpuMark::parse("cpu  100 0 50 1000 20 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        let after = HostCpuMark::parse("cpu  130 0 60 1055 25 0 0 0 0 0\n").unwrap();
        assert_eq!(before.busy_ratio_until(&after), Some(0.4));
        assert_eq!(before.busy_ratio_until(&before), None);
        assert_eq!(HostCpuMark::parse("intr 1 2\n"), None);
    }

    #[test]
    fn busy_thread_uses_about_a_core_and_sleeping_thread_does_not() {
        let mark = ThreadCpuMark::now();
        let until = Instant::now() + std::time::Duration::from_millis(200);
        let mut spins = 0u64;
        while Instant::now() < until {
            spins = std::hint::black_box(spins + 1);
        }
        let busy = mark.elapsed();
        assert!(busy.demand_ratio() > 0.5, "{busy:?}");

        let mark = ThreadCpuMark::now();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let idle = mark.elapsed();
        assert!(idle.cpu_ratio() < 0.2, "{idle:?}");
    }

    #[test]
    fn pinning_to_a_missing_core_is_an_error() {
        assert!(pin_current_thread(100_000).is_err());
    }
}
