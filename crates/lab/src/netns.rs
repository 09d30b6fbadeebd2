//! Thin wrappers around the system: `ip`/`tc` invocations with errors that carry the command and
//! its stderr, running code inside a named network namespace, and offload switches.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;

/// Namespace of a node: `vl-<lab>-<node>`.
pub fn node_netns(lab: &str, node: &str) -> String {
    format!("vl-{lab}-{node}")
}

/// Namespace of a lab's emulator (forwarder interfaces and switch bridges). Node names cannot
/// contain `_`, so this never collides with a node's namespace.
pub fn emulator_netns(lab: &str) -> String {
    format!("vl-{lab}_emu")
}

/// The lab a namespace named by this module belongs to, if any.
pub fn lab_of_netns(netns: &str) -> Option<&str> {
    let rest = netns.strip_prefix("vl-")?;
    let end = rest.find(['-', '_'])?;
    Some(&rest[..end])
}

/// Runs a command to completion; the error quotes the command line and its stderr.
pub fn run(program: &str, args: &[String]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// `ip ARGS…`; arguments are split on whitespace (none of ours contain spaces).
pub fn ip(args: &str) -> Result<String, String> {
    run(
        "ip",
        &args
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>(),
    )
}

pub fn tc(args: &str) -> Result<String, String> {
    run(
        "tc",
        &args
            .split_whitespace()
            .map(String::from)
            .collect::<Vec<_>>(),
    )
}

/// Names of all named network namespaces (`ip netns list`).
pub fn list_netns() -> Result<Vec<String>, String> {
    Ok(ip("netns list")?
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(String::from)
        .collect())
}

/// Enters the namespace `/run/netns/<netns>` on the calling thread.
pub fn enter_netns(netns: &str) -> Result<(), String> {
    let path = format!("/run/netns/{netns}");
    let file = File::open(&path).map_err(|e| format!("cannot open {path}: {e}"))?;
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("cannot enter network namespace {netns}: {e}"))
}

/// Runs `work` on a fresh thread inside `netns` (the namespace switch is per thread, so the
/// caller's namespace is untouched).
pub fn in_netns<T: Send>(
    netns: &str,
    work: impl FnOnce() -> Result<T, String> + Send,
) -> Result<T, String> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                enter_netns(netns)?;
                work()
            })
            .join()
            .map_err(|_| "namespace worker thread panicked".to_string())?
    })
}

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_SRXCSUM: u32 = 0x15;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_SSG: u32 = 0x19;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_SGRO: u32 = 0x2c;

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

#[repr(C)]
struct IfreqData {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _union_padding: [u8; 16],
}

/// Turns off checksum and segmentation offloads of `interface` (current namespace), so frames
/// the forwarder reads are complete, MTU-sized and carry real checksums (a bit flipped by the
/// corruption impairment is then caught by the receiver, as on a wire).
pub fn disable_offloads(interface: &str) -> Result<(), String> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")
        .or_else(|_| std::net::UdpSocket::bind("[::]:0"))
        .map_err(|e| format!("socket for ethtool ioctl: {e}"))?;
    let mut name = [0u8; libc::IFNAMSIZ];
    name[..interface.len()].copy_from_slice(interface.as_bytes());
    for (command, feature) in [
        (ETHTOOL_SGRO, "gro"),
        (ETHTOOL_SGSO, "gso"),
        (ETHTOOL_STSO, "tso"),
        (ETHTOOL_SSG, "scatter-gather"),
        (ETHTOOL_STXCSUM, "tx-checksum"),
        (ETHTOOL_SRXCSUM, "rx-checksum"),
    ] {
        let mut value = EthtoolValue {
            cmd: command,
            data: 0,
        };
        let mut request = IfreqData {
            name,
            data: &mut value as *mut EthtoolValue as *mut libc::c_void,
            _union_padding: [0; 16],
        };
        // SAFETY: `request` is a valid ifreq whose data points at a live ethtool_value.
        let rc = unsafe { libc::ioctl(socket.as_raw_fd(), SIOCETHTOOL as _, &mut request) };
        if rc != 0 {
            return Err(format!(
                "cannot turn off {feature} offload on {interface}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// True when `pid` is alive and its command line contains every one of `markers`
/// (guards against a recycled pid).
pub fn process_matches(pid: u32, markers: &[&str]) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    let is_zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true);
    !is_zombie && markers.iter().all(|m| cmdline.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_map_back_to_their_lab() {
        assert_eq!(lab_of_netns(&node_netns("t1", "h-1")), Some("t1"));
        assert_eq!(lab_of_netns(&emulator_netns("t12")), Some("t12"));
        assert_eq!(lab_of_netns("other"), None);
        assert_eq!(lab_of_netns("vl-nodelimiter"), None);
    }
}
