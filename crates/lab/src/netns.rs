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
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

#[repr(C)]
struct Ifreq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _union_padding: [u8; 16],
}

/// One `SIOCETHTOOL` request on `interface` with `buffer` as its ethtool command.
fn ethtool(
    socket: &std::net::UdpSocket,
    interface: &str,
    buffer: &mut [u32],
) -> std::io::Result<()> {
    let mut name = [0u8; libc::IFNAMSIZ];
    let length = interface.len().min(libc::IFNAMSIZ - 1);
    name[..length].copy_from_slice(&interface.as_bytes()[..length]);
    let mut request = Ifreq {
        name,
        data: buffer.as_mut_ptr() as *mut libc::c_void,
        _union_padding: [0; 16],
    };
    // SAFETY: `request` is a valid ifreq whose data points at a live ethtool command buffer
    // as large as the command says.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), SIOCETHTOOL as _, &mut request) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The device feature names of `interface`, in the kernel's bit order (`ethtool -k` names).
fn feature_names(socket: &std::net::UdpSocket, interface: &str) -> std::io::Result<Vec<String>> {
    // ethtool_sset_info: cmd, reserved, sset_mask (u64), then one u32 per set in the mask.
    let mut info = [ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_FEATURES, 0, 0];
    ethtool(socket, interface, &mut info)?;
    let count = info[4] as usize;
    // ethtool_gstrings: cmd, string_set, len, then len names of ETH_GSTRING_LEN bytes.
    let mut strings = vec![0u32; 3 + count * ETH_GSTRING_LEN / 4];
    strings[..3].copy_from_slice(&[ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count as u32]);
    ethtool(socket, interface, &mut strings)?;
    let bytes: Vec<u8> = strings[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
    Ok(bytes
        .chunks(ETH_GSTRING_LEN)
        .map(|name| {
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            String::from_utf8_lossy(&name[..end]).into_owned()
        })
        .collect())
}

/// Turns device features of `interface` (current namespace) on or off by their `ethtool -k`
/// names; names the device does not have are an error.
pub fn set_features(interface: &str, features: &[(&str, bool)]) -> Result<(), String> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0")
        .or_else(|_| std::net::UdpSocket::bind("[::]:0"))
        .map_err(|e| format!("socket for ethtool ioctl: {e}"))?;
    let names = feature_names(&socket, interface)
        .map_err(|e| format!("cannot read the features of {interface}: {e}"))?;
    let blocks = names.len().div_ceil(32);
    // ethtool_sfeatures: cmd, size (blocks), then per block: valid mask, requested bits.
    let mut request = vec![0u32; 2 + 2 * blocks];
    request[0] = ETHTOOL_SFEATURES;
    request[1] = blocks as u32;
    for (feature, on) in features {
        let bit = names
            .iter()
            .position(|name| name == feature)
            .ok_or_else(|| format!("{interface} has no feature {feature}"))?;
        let (valid, requested) = (2 + 2 * (bit / 32), 3 + 2 * (bit / 32));
        request[valid] |= 1 << (bit % 32);
        if *on {
            request[requested] |= 1 << (bit % 32);
        }
    }
    ethtool(&socket, interface, &mut request)
        .map_err(|e| format!("cannot set the features of {interface}: {e}"))
}

/// Gives `interface` in `netns` its own kernel thread for receive processing (threaded NAPI):
/// with receive aggregation on, packets then gather while the thread is busy instead of being
/// handled one by one on the sender's CPU, which is what makes aggregation happen on a veth.
pub fn set_threaded_receive(netns: &str, interface: &str) -> Result<(), String> {
    // sysfs shows a namespace's devices only to a process that mounted it there, which
    // `ip netns exec` does.
    let script = format!("echo 1 > /sys/class/net/{interface}/threaded");
    run(
        "ip",
        &["netns", "exec", netns, "sh", "-c", &script].map(String::from),
    )
    .map(|_| ())
}

/// Segmentation offload features: with them on, a TCP or UDP sender (or a router forwarding
/// such a frame) hands the next hop one frame standing for many packets.
pub const SEGMENTATION_FEATURES: &[&str] = &[
    "tx-scatter-gather",
    "tx-checksum-ip-generic",
    "tx-tcp-segmentation",
    "tx-tcp-ecn-segmentation",
    "tx-tcp-mangleid-segmentation",
    "tx-tcp6-segmentation",
    "tx-generic-segmentation",
    "tx-udp-segmentation",
];

/// Receive aggregation: packets of one flow arriving together become one frame
/// (`rx-udp-gro-forwarding` extends it to UDP that is forwarded, not delivered).
pub const AGGREGATION_FEATURES: &[&str] = &["rx-gro", "rx-udp-gro-forwarding"];

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
