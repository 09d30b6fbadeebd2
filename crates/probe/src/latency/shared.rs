//! Many UDP latency runs on one thread: what an agent in a dense mesh needs, where a
//! thread per run meant hundreds of threads (one agent of a 1 000-agent mesh measuring
//! every minute has some 300 runs open at once, each mostly waiting).
//!
//! Each run is a [`UdpSession`] state machine; one thread waits on all their sockets
//! with `ppoll(2)` until a reply comes or the earliest session has something due. The
//! engine's stamps are taken right at the send and by the kernel at the receive, so
//! sharing the thread does not change what a run measures; a probe may go out a little
//! after its nominal time when many fall due together, and its send offset says when
//! it did. TCP and ICMP runs keep a thread of their own (`run_latency`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::time::Instant;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use vantage_model::latency::{LatencyProtocol, LatencyResult, LatencySpec};

use super::udp::UdpSession;
use super::{prepare, LatencyError, RunStart};
use crate::timestamp::poll_many;

/// Called once with a run's outcome, on the prober's thread.
type Done = Box<dyn FnOnce(Result<LatencyResult, LatencyError>) + Send>;

struct Job {
    spec: LatencySpec,
    target: SocketAddr,
    done: Done,
}

/// A thread that runs every UDP latency run handed to it, side by side. Dropping the
/// handle lets the runs in progress finish, then ends the thread.
pub struct SharedProber {
    jobs: Sender<Job>,
    /// Written to after each job so a thread waiting in `ppoll(2)` takes it at once.
    wake: UnixStream,
}

impl SharedProber {
    pub fn start() -> io::Result<Self> {
        let (wake, wake_receiver) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        wake_receiver.set_nonblocking(true)?;
        let (jobs, receiver) = mpsc::channel();
        std::thread::Builder::new()
            .name("latency-prober".into())
            .spawn(move || serve(&receiver, wake_receiver))?;
        Ok(Self { jobs, wake })
    }

    /// Whether this prober can run `spec` (UDP: TWAMP-Light or STAMP).
    pub fn takes(spec: &LatencySpec) -> bool {
        spec.protocol == LatencyProtocol::Udp
    }

    /// Starts the run `spec` describes; `done` gets its result, or why there is none,
    /// and should only pass it on: it is called on the prober's thread (on the caller's
    /// when the run cannot start). The spec is checked and its target resolved on the
    /// caller's thread: a host name's lookup blocks the caller, not the runs in progress.
    pub fn submit(
        &self,
        spec: LatencySpec,
        done: impl FnOnce(Result<LatencyResult, LatencyError>) + Send + 'static,
    ) {
        if !Self::takes(&spec) {
            return done(Err(LatencyError::InvalidSpec(format!(
                "the shared prober runs UDP latency tests, not {:?}",
                spec.protocol
            ))));
        }
        let target = match prepare(&spec) {
            Ok(target) => target,
            Err(error) => return done(Err(error)),
        };
        let job = Job {
            spec,
            target,
            done: Box::new(done),
        };
        if let Err(mpsc::SendError(job)) = self.jobs.send(job) {
            return (job.done)(Err(LatencyError::io(
                "handing the run to the latency prober",
                io::Error::other("the prober's thread has stopped"),
            )));
        }
        // A full socket buffer already holds a wake-up.
        let _ = (&self.wake).write(&[1]);
    }
}

/// A run in progress on the prober's thread.
struct Active {
    spec: LatencySpec,
    target: SocketAddr,
    started: RunStart,
    session: UdpSession,
    done: Done,
}

/// The epoll key of the wake socket; runs are keyed from 0 up.
const WAKE_KEY: u64 = u64::MAX;

fn serve(jobs: &Receiver<Job>, mut wake: UnixStream) {
    // epoll hands back only the sockets that have something: a wait costs the same
    // with 300 runs open as with one (poll(2) over every socket did not).
    let epoll = match Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC) {
        Ok(epoll) => epoll,
        Err(error) => return fail_all(jobs, HashMap::new(), error.into()),
    };
    let readable = EpollFlags::EPOLLIN;
    if let Err(error) = epoll.add(&wake, EpollEvent::new(readable, WAKE_KEY)) {
        return fail_all(jobs, HashMap::new(), error.into());
    }
    let mut active: HashMap<u64, Active> = HashMap::new();
    let mut next_key = 0u64;
    let mut handle_open = true;
    let mut events = vec![EpollEvent::empty(); 256];
    let mut wakes = Wakes::new();
    loop {
        loop {
            match jobs.try_recv() {
                Ok(job) => {
                    let started = RunStart::now();
                    let session = guarded(|| UdpSession::start(&job.spec, job.target));
                    let session = session.and_then(|session| {
                        epoll
                            .add(session.fd(), EpollEvent::new(readable, next_key))
                            .map_err(|error| {
                                LatencyError::io("watching the run's socket", error.into())
                            })?;
                        Ok(session)
                    });
                    match session {
                        Ok(session) => {
                            if let Some(due) = session.next_wake() {
                                wakes.push(Reverse((due, next_key)));
                            }
                            active.insert(
                                next_key,
                                Active {
                                    spec: job.spec,
                                    target: job.target,
                                    started,
                                    session,
                                    done: job.done,
                                },
                            );
                            next_key += 1;
                        }
                        Err(error) => (job.done)(Err(error)),
                    }
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    if handle_open {
                        // The wake socket now reads end-of-file for ever.
                        let _ = epoll.delete(&wake);
                    }
                    handle_open = false;
                    break;
                }
            }
        }
        if !handle_open && active.is_empty() {
            return;
        }
        // The earliest wake-up that is still a run's (entries left by runs that ended or
        // moved on are dropped when they come up: cheaper than finding them).
        while let Some(&Reverse((due, key))) = wakes.peek() {
            if active.get(&key).and_then(|run| run.session.next_wake()) == Some(due) {
                break;
            }
            wakes.pop();
        }
        let deadline = wakes.peek().map(|&Reverse((due, _))| due);
        // ppoll(2) on the epoll descriptor waits to the nanosecond; epoll_wait only to
        // the millisecond.
        let mut epoll_fd = [libc::pollfd {
            fd: epoll.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let ready = poll_many(&mut epoll_fd, deadline)
            .and_then(|()| Ok(epoll.wait(&mut events, EpollTimeout::ZERO)?));
        let ready = match ready {
            Ok(ready) => ready,
            Err(error) => return fail_all(jobs, active, error),
        };
        for event in &events[..ready] {
            let key = event.data();
            if key == WAKE_KEY {
                let mut drained = [0u8; 64];
                while matches!(wake.read(&mut drained), Ok(n) if n > 0) {}
                continue;
            }
            let flags = event.events();
            let mut revents = 0;
            if flags.contains(EpollFlags::EPOLLIN) {
                revents |= libc::POLLIN;
            }
            if flags.intersects(EpollFlags::EPOLLERR | EpollFlags::EPOLLHUP) {
                revents |= libc::POLLERR;
            }
            step(&mut active, &mut wakes, key, false, |session| {
                session.on_readable(revents)
            });
        }
        let now = Instant::now();
        while let Some(&Reverse((due, key))) = wakes.peek() {
            if due > now {
                break;
            }
            wakes.pop();
            if active.get(&key).and_then(|run| run.session.next_wake()) == Some(due) {
                step(&mut active, &mut wakes, key, true, |session| {
                    session.on_time(now, &mut |_| {})
                });
            }
        }
    }
}

/// Runs' wake-up times, earliest first.
type Wakes = BinaryHeap<Reverse<(Instant, u64)>>;

/// Moves the run `key` on with `advance`; then notes its next wake-up (`woken`: the
/// one it had was just taken off `wakes`), or hands its outcome over once it is done
/// or has failed.
fn step(
    active: &mut HashMap<u64, Active>,
    wakes: &mut Wakes,
    key: u64,
    woken: bool,
    advance: impl FnOnce(&mut UdpSession) -> Result<(), LatencyError>,
) {
    let Some(run) = active.get_mut(&key) else {
        return;
    };
    let before = run.session.next_wake();
    let outcome = guarded(|| advance(&mut run.session));
    if outcome.is_ok() && !run.session.is_done() {
        if let Some(due) = run
            .session
            .next_wake()
            .filter(|&due| woken || Some(due) != before)
        {
            wakes.push(Reverse((due, key)));
        }
        return;
    }
    let Some(run) = active.remove(&key) else {
        return;
    };
    // Dropping the session closes its socket, which takes it out of the epoll set.
    let outcome = outcome.and_then(|()| {
        guarded(|| {
            let engine_run = run.session.finish(&mut |_| {});
            Ok(run.started.result(&run.spec, run.target, &engine_run))
        })
    });
    (run.done)(outcome);
}

/// Runs `work`, turning a panic into the run's error: one run's bug must not take the
/// thread, and every other run on it, down.
fn guarded<T>(work: impl FnOnce() -> Result<T, LatencyError>) -> Result<T, LatencyError> {
    std::panic::catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|message| message.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(LatencyError::io(
            "probing",
            io::Error::other(format!("the engine crashed: {message}")),
        ))
    })
}

/// Ends every run in progress and every queued one with `error`: the prober's thread
/// cannot wait any more.
fn fail_all(jobs: &Receiver<Job>, active: HashMap<u64, Active>, error: io::Error) {
    let fail = |done: Done| {
        done(Err(LatencyError::io(
            "waiting for replies on the latency prober's thread",
            io::Error::new(error.kind(), error.to_string()),
        )))
    };
    active.into_values().for_each(|run| fail(run.done));
    // Later submissions find the channel closed and say so.
    jobs.try_iter().for_each(|job| fail(job.done));
}
