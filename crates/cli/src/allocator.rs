//! The binary's memory allocator: mimalloc rather than the C library's. A server taking
//! a thousand agents' results spent a third of its CPU in glibc's malloc and free (arena
//! locks, consolidation of freed chunks). With mimalloc, `bench/scale` at 1 000 agents
//! stored 15 100 results/s on SQLite against 9 600, and 14 500 on PostgreSQL against
//! 4 800 in the same session (10 900 in an earlier one). musl's allocator, in the static
//! build, is slower than glibc's.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc.h (v3): `mi_option_arena_eager_commit` and `mi_option_purge_delay`.
const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const PURGE_DELAY_MS: libmimalloc_sys::mi_option_t = 15;

/// Length of the command line read to find the subcommand: `vantage agent` comes first.
const COMMAND_LINE_BYTES: usize = 256;

/// An agent runs for months, mostly waiting, so its heap is kept small rather than fast:
/// by default mimalloc commits an arena's memory when it reserves it, and pages freed in
/// such an arena are only marked reusable, staying in the resident set until the system
/// runs short; freed pages are returned a second later. An agent commits as it goes and
/// returns freed pages at once. In `bench/agent-mesh` (999 peers a minute) its RSS median
/// went from 42.3 to 22.9 MiB at the same CPU (glibc's malloc, tuned: 23.7 MiB). The
/// options must be set before the first arena is reserved, at the first allocation
/// (set in `main`, the RSS stayed at 47 MiB), hence before `main`, from an
/// `.init_array` entry, which sees no parsed arguments: it reads /proc/self/cmdline
/// without allocating.
#[used]
#[link_section = ".init_array"]
static AGENT_HEAP_BEFORE_MAIN: extern "C" fn() = agent_heap;

extern "C" fn agent_heap() {
    if subcommand_is(b"agent") {
        // SAFETY: sets options before any allocation or thread; nothing reads them yet.
        unsafe {
            libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0);
            libmimalloc_sys::mi_option_set(PURGE_DELAY_MS, 0);
        }
    }
}

/// True when the process's first argument after its name is `name`.
fn subcommand_is(name: &[u8]) -> bool {
    let mut line = [0u8; COMMAND_LINE_BYTES];
    // SAFETY: open, read into a buffer of the given length, and close; no allocation.
    let length = unsafe {
        let fd = libc::open(
            c"/proc/self/cmdline".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let length = libc::read(fd, line.as_mut_ptr().cast(), line.len());
        libc::close(fd);
        length
    };
    usize::try_from(length).is_ok_and(|length| first_argument_is(&line[..length], name))
}

/// True when `command_line`, arguments ended by NULs as in /proc/PID/cmdline, has `name`
/// as its first argument after the program's name.
fn first_argument_is(command_line: &[u8], name: &[u8]) -> bool {
    command_line.split(|&byte| byte == 0).nth(1) == Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_numbers_are_mimallocs() {
        // Their defaults: 2 (commit eagerly where the system overcommits) and 1000 ms. A
        // test process is not `vantage agent`, so the constructor left them alone.
        let (eager_commit, purge_delay_ms) = unsafe {
            (
                libmimalloc_sys::mi_option_get(ARENA_EAGER_COMMIT),
                libmimalloc_sys::mi_option_get(PURGE_DELAY_MS),
            )
        };
        assert_eq!((eager_commit, purge_delay_ms), (2, 1000));
    }

    #[test]
    fn only_the_agent_subcommand_is_the_agent() {
        assert!(first_argument_is(
            b"vantage\0agent\0--server\0http://x\0",
            b"agent"
        ));
        assert!(first_argument_is(b"/usr/bin/vantage\0agent", b"agent"));
        assert!(!first_argument_is(
            b"vantage\0server\0--name\0agent\0",
            b"agent"
        ));
        assert!(!first_argument_is(b"vantage\0agents\0", b"agent"));
        assert!(!first_argument_is(b"vantage\0", b"agent"));
        assert!(!first_argument_is(b"", b"agent"));
        // This test's own process is not `vantage agent`.
        assert!(!subcommand_is(b"agent"));
    }
}
