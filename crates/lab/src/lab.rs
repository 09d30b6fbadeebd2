//! Lab lifecycle: `up` builds a topology (rolling back everything on failure), `down` and `gc`
//! remove it, `set` and incidents change it live. State lives in `/run/vantage-lab/<lab>/`.
//!
//! Layout of one lab: a namespace per node (`vl-<lab>-<node>`) and one emulator namespace
//! (`vl-<lab>_emu`). Link `i` between a and b is two veth pairs: a's interface (named like the
//! link) ↔ `l<i>a` and `l<i>b` ↔ b's interface, with the forwarder bridging `l<i>a` and `l<i>b`.
//! A switch end is a bridge `sw<j>` in the emulator, attached through the veth pair
//! `l<i>x` ↔ `s<i>x`.

use crate::forwarder::{control_request, ControlRequest, ControlResponse, LinkCounters};
use crate::netns::{
    emulator_netns, in_netns, ip, lab_of_netns, list_netns, node_netns, process_matches, run,
    set_features, set_threaded_receive, tc, AGGREGATION_FEATURES, SEGMENTATION_FEATURES,
};
use crate::routing::{compute_routes, Route};
use crate::state::{emulator_interface, state_dir, LabState, Phase, Side, STATE_ROOT};
use crate::topology::{Direction, Endpoint, NodeKind, Topology};
use serde::Serialize;
use std::collections::BTreeSet;
use std::convert::Infallible;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The veth end in the emulator that attaches end a or b of link `index` to a switch bridge.
fn bridge_port(index: usize, side: Side) -> String {
    match side {
        Side::A => format!("s{index}a"),
        Side::B => format!("s{index}b"),
    }
}

/// Why a lab operation failed: the step and the reason.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {message}")]
pub struct LabError {
    pub step: String,
    pub message: String,
}

fn step_error(step: impl Into<String>) -> impl FnOnce(String) -> LabError {
    let step = step.into();
    move |message| LabError { step, message }
}

pub fn require_root() -> Result<(), LabError> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(LabError {
            step: "check privileges".into(),
            message: "vantage lab needs root (it creates network namespaces, veth pairs and qdiscs); run it as root".into(),
        })
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn note_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT/SIGTERM/SIGHUP stop `up` between steps (which then rolls back) instead of
/// killing it halfway.
fn catch_interrupts() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(note_interrupt),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        let _ = unsafe { sigaction(signal, &action) };
    }
}

/// How `up` starts the forwarder: the program and leading arguments; the lab name is appended.
pub struct ForwarderCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

/// Tracks what `up` created so a failure removes exactly that.
struct Build<'a> {
    state: LabState,
    created_netns: Vec<String>,
    forwarder: Option<std::process::Child>,
    forwarder_command: &'a ForwarderCommand,
}

impl Build<'_> {
    fn lab(&self) -> &str {
        &self.state.topology.name
    }

    fn check_interrupt(&self) -> Result<(), String> {
        if INTERRUPTED.load(Ordering::SeqCst) {
            Err("interrupted by a signal".into())
        } else {
            Ok(())
        }
    }

    fn add_netns(&mut self, netns: &str, router: bool, emulator: bool) -> Result<(), String> {
        ip(&format!("netns add {netns}"))?;
        self.created_netns.push(netns.to_string());
        ip(&format!("-n {netns} link set lo up"))?;
        let forwarding = if router { 1 } else { 0 };
        let mut sysctls = vec![
            format!("net.ipv4.ip_forward={forwarding}"),
            format!("net.ipv6.conf.all.forwarding={forwarding}"),
            // Addresses are usable at once; the lab's plan has no duplicates to detect.
            "net.ipv6.conf.default.accept_dad=0".to_string(),
            "net.ipv6.conf.all.accept_dad=0".to_string(),
        ];
        if emulator {
            // The emulator's interfaces are wires: no addresses, no neighbour discovery.
            sysctls.push("net.ipv6.conf.default.disable_ipv6=1".into());
        } else {
            // Every node answers every probe with its ICMP error (time exceeded, port
            // unreachable): the kernel's default of one per second per peer after a burst of
            // six would turn the hops of back-to-back traces into "*".
            sysctls.push("net.ipv4.icmp_ratelimit=0".into());
            sysctls.push("net.ipv6.icmp.ratelimit=0".into());
        }
        let mut args: Vec<String> = ["netns", "exec", netns, "sysctl", "-qw"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(sysctls);
        run("ip", &args).map(|_| ())
    }

    /// Creates one side of link `index`: the veth pair from `end` to the emulator.
    fn add_link_side(&self, index: usize, side: Side) -> Result<(), String> {
        let topology = &self.state.topology;
        let link = &topology.links[index];
        let emulator = emulator_netns(self.lab());
        let emulator_end = emulator_interface(index, side);
        let (end, addresses) = match side {
            Side::A => (link.a, &link.a_addresses),
            Side::B => (link.b, &link.b_addresses),
        };
        match end {
            Endpoint::Node(node) => {
                let netns = node_netns(self.lab(), &topology.nodes[node].name);
                ip(&format!(
                    "link add {} netns {netns} mtu {} type veth peer name {emulator_end} netns {emulator} mtu {}",
                    link.name, link.mtu, link.mtu
                ))?;
                ip(&format!("-n {netns} link set {} up", link.name))?;
                for address in addresses {
                    let nodad = if address.is_ipv6() { " nodad" } else { "" };
                    ip(&format!(
                        "-n {netns} addr add {address} dev {}{nodad}",
                        link.name
                    ))?;
                }
            }
            Endpoint::Switch(switch) => {
                let port = bridge_port(index, side);
                ip(&format!(
                    "-n {emulator} link add {emulator_end} mtu {} type veth peer name {port} mtu {}",
                    link.mtu, link.mtu
                ))?;
                ip(&format!(
                    "-n {emulator} link set {port} master sw{switch} up"
                ))?;
            }
        }
        ip(&format!("-n {emulator} link set {emulator_end} up"))?;
        Ok(())
    }

    fn start_forwarder(&mut self) -> Result<(), String> {
        let lab = self.lab().to_string();
        let log_path = state_dir(&lab).join("forwarder.log");
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let mut command = Command::new(&self.forwarder_command.program);
        command
            .args(&self.forwarder_command.args)
            .arg(&lab)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        // SAFETY: setsid is async-signal-safe; it detaches the forwarder from our session so it
        // outlives `lab up` and a terminal's signals.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let child = command.spawn().map_err(|e| {
            format!(
                "cannot start {}: {e}",
                self.forwarder_command.program.display()
            )
        })?;
        self.state.forwarder_pid = Some(child.id());
        self.forwarder = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(ControlResponse::Counters { .. }) =
                control_request(&lab, &ControlRequest::Counters)
            {
                return Ok(());
            }
            if let Some(child) = self.forwarder.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                    return Err(format!("forwarder exited ({status}): {}", log.trim()));
                }
            }
            if Instant::now() > deadline {
                return Err("forwarder did not answer within 10 s".into());
            }
            self.check_interrupt()?;
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn build(&mut self) -> Result<(), LabError> {
        let lab = self.lab().to_string();
        let topology = self.state.topology.clone();
        let emulator = emulator_netns(&lab);
        self.add_netns(&emulator, false, true)
            .map_err(step_error(format!("create emulator namespace {emulator}")))?;
        for node in &topology.nodes {
            self.check_interrupt()
                .map_err(step_error("create namespaces"))?;
            let netns = node_netns(&lab, &node.name);
            self.add_netns(&netns, node.kind == NodeKind::Router, false)
                .map_err(step_error(format!(
                    "create namespace {netns} for node {}",
                    node.name
                )))?;
        }
        for (index, _) in topology.switches.iter().enumerate() {
            ip(&format!("-n {emulator} link add sw{index} type bridge"))
                .and_then(|_| ip(&format!("-n {emulator} link set sw{index} up")))
                .map_err(step_error(format!(
                    "create switch {}",
                    topology.switches[index]
                )))?;
        }
        for (index, link) in topology.links.iter().enumerate() {
            self.check_interrupt().map_err(step_error("create links"))?;
            self.add_link_side(index, Side::A)
                .and_then(|_| self.add_link_side(index, Side::B))
                .map_err(step_error(format!("create link {}", link.name)))?;
            apply_offloads(&lab, &topology, index)
                .map_err(step_error(format!("set offloads of link {}", link.name)))?;
            apply_rates(&lab, index, link)
                .map_err(step_error(format!("set rate of link {}", link.name)))?;
        }
        for route in &self.state.routes {
            add_route(&lab, &topology, route).map_err(step_error("install routes"))?;
        }
        self.state.save().map_err(step_error("write state"))?;
        self.check_interrupt()
            .map_err(step_error("start forwarder"))?;
        self.start_forwarder()
            .map_err(step_error("start forwarder"))?;
        self.state.phase = Phase::Running;
        self.state.save().map_err(step_error("write state"))
    }

    fn roll_back(&mut self) {
        if let Some(mut child) = self.forwarder.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for netns in self.created_netns.iter().rev() {
            remove_netns(netns);
        }
        let _ = std::fs::remove_dir_all(state_dir(self.lab()));
    }
}

fn route_command(lab: &str, topology: &Topology, route: &Route, verb: &str) -> String {
    let family = if route.destination.is_ipv6() {
        "-6 "
    } else {
        ""
    };
    format!(
        "-n {} {family}route {verb} {} via {} dev {}",
        node_netns(lab, &topology.nodes[route.node].name),
        route.destination,
        route.gateway,
        route.interface
    )
}

fn add_route(lab: &str, topology: &Topology, route: &Route) -> Result<(), String> {
    ip(&route_command(lab, topology, route, "replace")).map(|_| ())
}

/// Sets the offloads of link `index`'s interfaces for what each direction's impairment needs.
///
/// A direction that only delays and rate-limits lets whole segmentation-offloaded frames through:
/// its sending end segments nothing and the emulator's ingress aggregates what arrives packet
/// by packet (GRO, UDP too), so the forwarder handles one frame per up to 64 KiB and the same
/// delay applies to every packet in it; `tbf` still shapes packet by packet. A direction with
/// per-packet impairments (loss, jitter, duplication, reordering, corruption, a CPU-bound host:
/// [`crate::impairment::Impairment::is_per_packet`]) gets every packet alone: the sender (or
/// the router before it) segments in software and checksums in full, so a flipped bit is caught
/// by the receiver as on a wire. Receive checksum offload stays off on every interface for the
/// same reason.
fn apply_offloads(lab: &str, topology: &Topology, index: usize) -> Result<(), String> {
    let link = &topology.links[index];
    let emulator = emulator_netns(lab);
    for (side, end, leaving) in [
        (Side::A, link.a, &link.forward),
        (Side::B, link.b, &link.reverse),
    ] {
        let whole_frames = !leaving.is_per_packet();
        let sending_end = |on: bool| -> Vec<(&str, bool)> {
            SEGMENTATION_FEATURES
                .iter()
                .map(|feature| (*feature, on))
                .chain([("rx-checksum", false), ("rx-gro", false)])
                .collect()
        };
        match end {
            Endpoint::Node(node) => {
                let name = link.name.clone();
                in_netns(&node_netns(lab, &topology.nodes[node].name), || {
                    set_features(&name, &sending_end(whole_frames))
                })?
            }
            Endpoint::Switch(_) => {
                let port = bridge_port(index, side);
                in_netns(&emulator, || {
                    set_features(&port, &sending_end(whole_frames))
                })?
            }
        }
        let ingress = emulator_interface(index, side);
        let emulator_features: Vec<(&str, bool)> = AGGREGATION_FEATURES
            .iter()
            .map(|feature| (*feature, whole_frames))
            .chain(SEGMENTATION_FEATURES.iter().map(|feature| (*feature, true)))
            .chain([("rx-checksum", false)])
            .collect();
        in_netns(&emulator, || set_features(&ingress, &emulator_features))?;
        if whole_frames {
            set_threaded_receive(&emulator, &ingress)?;
        }
    }
    Ok(())
}

/// Installs or removes the `tbf` of each direction of link `index` on the emulator's egress.
fn apply_rates(lab: &str, index: usize, link: &crate::topology::Link) -> Result<(), String> {
    let emulator = emulator_netns(lab);
    for (impairment, egress) in [
        (&link.forward, emulator_interface(index, Side::B)),
        (&link.reverse, emulator_interface(index, Side::A)),
    ] {
        match impairment.rate_bps {
            Some(rate_bps) => {
                let frame_bytes = link.mtu as u64 + 14;
                // 1 ms of tokens, but never less than a few frames (tbf drops frames > burst).
                let burst_bytes = (rate_bps / 8 / 1000).max(4 * frame_bytes);
                let limit_bytes = impairment.effective_queue_bytes(rate_bps).max(burst_bytes);
                tc(&format!(
                    "-n {emulator} qdisc replace dev {egress} root tbf rate {rate_bps}bit burst {burst_bytes} limit {limit_bytes}"
                ))?;
            }
            None => {
                let current = tc(&format!("-n {emulator} qdisc show dev {egress} root"))?;
                if current.contains("tbf") {
                    tc(&format!("-n {emulator} qdisc del dev {egress} root"))?;
                }
            }
        }
    }
    Ok(())
}

/// Kills every process still inside `netns`, then deletes it.
fn remove_netns(netns: &str) {
    if let Ok(pids) = ip(&format!("netns pids {netns}")) {
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    let _ = ip(&format!("netns del {netns}"));
}

/// Builds the lab. On failure everything created is removed and the error names the step.
pub fn up(
    mut topology: Topology,
    topology_file: &str,
    name_override: Option<&str>,
    forwarder_command: &ForwarderCommand,
) -> Result<LabState, LabError> {
    require_root()?;
    if let Some(name) = name_override {
        crate::topology::validate_lab_name(name).map_err(step_error("check lab name"))?;
        topology.name = name.to_string();
    }
    let lab = topology.name.clone();
    catch_interrupts();
    std::fs::create_dir_all(STATE_ROOT).map_err(|e| LabError {
        step: "create state directory".into(),
        message: format!("{STATE_ROOT}: {e}"),
    })?;
    let dir = state_dir(&lab);
    std::fs::create_dir(&dir).map_err(|e| LabError {
        step: "create state directory".into(),
        message: if e.kind() == std::io::ErrorKind::AlreadyExists {
            format!("a lab named {lab} already exists (vantage lab down {lab}, or up --name OTHER)")
        } else {
            format!("{}: {e}", dir.display())
        },
    })?;
    let routes = compute_routes(&topology);
    let mut build = Build {
        state: LabState {
            phase: Phase::Creating,
            owner_pid: std::process::id(),
            topology_file: topology_file.to_string(),
            declared: topology.clone(),
            topology,
            routes,
            forwarder_pid: None,
            active_incidents: Vec::new(),
        },
        created_netns: Vec::new(),
        forwarder: None,
        forwarder_command,
    };
    let saved = build.state.save().map_err(step_error("write state"));
    match saved.and_then(|_| build.build()) {
        Ok(()) => Ok(build.state),
        Err(e) => {
            build.roll_back();
            Err(e)
        }
    }
}

/// Removes a lab: its forwarder, every process in its namespaces, the namespaces (and with them
/// every interface) and its state. Works from the namespace names alone, so it also cleans up
/// after a crash that left no readable state.
pub fn down(lab: &str) -> Result<(), LabError> {
    require_root()?;
    let state = LabState::load(lab).ok();
    let namespaces: Vec<String> = list_netns()
        .map_err(step_error("list namespaces"))?
        .into_iter()
        .filter(|n| lab_of_netns(n) == Some(lab))
        .collect();
    if state.is_none() && namespaces.is_empty() && !state_dir(lab).exists() {
        return Err(LabError {
            step: "find lab".into(),
            message: format!("no lab named {lab}"),
        });
    }
    if let Some(state) = &state {
        if let (true, Some(pid)) = (state.forwarder_alive(), state.forwarder_pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    for netns in &namespaces {
        remove_netns(netns);
    }
    let remaining: Vec<String> = list_netns()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| lab_of_netns(n) == Some(lab))
        .collect();
    let _ = std::fs::remove_dir_all(state_dir(lab));
    if remaining.is_empty() {
        Ok(())
    } else {
        Err(LabError {
            step: "remove namespaces".into(),
            message: format!("still present: {}", remaining.join(", ")),
        })
    }
}

/// Names of labs with state directories or namespaces.
pub fn list_labs() -> Vec<String> {
    let mut labs = BTreeSet::new();
    if let Ok(entries) = std::fs::read_dir(STATE_ROOT) {
        labs.extend(
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok()),
        );
    }
    if let Ok(namespaces) = list_netns() {
        labs.extend(
            namespaces
                .iter()
                .filter_map(|n| lab_of_netns(n).map(String::from)),
        );
    }
    labs.into_iter().collect()
}

/// True when nothing keeps the lab alive: no `up` still building it, no live forwarder.
fn is_dead(lab: &str) -> bool {
    match LabState::load(lab) {
        // A state directory without a readable state is either a crash leftover or an `up`
        // that has not written its first state yet; only the first is old.
        Err(_) => std::fs::metadata(state_dir(lab))
            .and_then(|m| m.modified())
            .map(|modified| modified.elapsed().unwrap_or_default() > Duration::from_secs(60))
            .unwrap_or(true),
        Ok(state) => match state.phase {
            Phase::Creating => !process_matches(state.owner_pid, &["lab", "up"]),
            Phase::Running => !state.forwarder_alive(),
        },
    }
}

/// Removes the leftovers of dead labs; returns their names.
pub fn gc() -> Result<Vec<String>, LabError> {
    require_root()?;
    let mut removed = Vec::new();
    for lab in list_labs() {
        if is_dead(&lab) {
            down(&lab)?;
            removed.push(lab);
        }
    }
    Ok(removed)
}

/// The lab a command without an explicit name applies to: the only one there is.
pub fn default_lab() -> Result<String, String> {
    let labs = list_labs();
    match labs.as_slice() {
        [only] => Ok(only.clone()),
        [] => Err("no lab is running (vantage lab up TOPOLOGY.toml)".into()),
        many => Err(format!(
            "several labs are running ({}); name one",
            many.join(", ")
        )),
    }
}

/// Holds an exclusive lock on a lab's state while changing it.
struct StateLock {
    _file: std::fs::File,
}

impl StateLock {
    fn acquire(lab: &str) -> Result<StateLock, String> {
        let path = state_dir(lab).join("lock");
        let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        // SAFETY: flock on an open file descriptor.
        let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) };
        if rc != 0 {
            return Err(format!(
                "lock {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(StateLock { _file: file })
    }
}

/// Applies `KEY=VALUE` settings to a link of a running lab without tearing it down.
pub fn set(
    lab: &str,
    link_name: &str,
    direction: Direction,
    settings: &[(String, String)],
) -> Result<LabState, LabError> {
    require_root()?;
    let _lock = StateLock::acquire(lab).map_err(step_error("lock lab state"))?;
    let mut state = LabState::load(lab).map_err(step_error("load lab state"))?;
    let index = state
        .topology
        .link_index(link_name)
        .ok_or_else(|| LabError {
            step: "find link".into(),
            message: format!(
                "no link named {link_name} in lab {lab} (links: {})",
                state
                    .topology
                    .links
                    .iter()
                    .map(|l| l.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
    let mut link = state.topology.links[index].clone();
    for (key, value) in settings {
        link.apply_setting(direction, key, value)
            .map_err(|m| LabError {
                step: "parse settings".into(),
                message: format!("{key}={value}: {m}"),
            })?;
    }
    replace_link(&mut state, index, link)?;
    state.save().map_err(step_error("write state"))?;
    Ok(state)
}

/// Makes the running lab match `link` (MTU, rates, routes, user-space impairments).
fn replace_link(
    state: &mut LabState,
    index: usize,
    link: crate::topology::Link,
) -> Result<(), LabError> {
    let lab = state.topology.name.clone();
    let old = std::mem::replace(&mut state.topology.links[index], link.clone());
    if old.mtu != link.mtu {
        set_link_mtu(&lab, &state.topology, index)
            .map_err(step_error(format!("set MTU of {}", link.name)))?;
    }
    if old.forward.is_per_packet() != link.forward.is_per_packet()
        || old.reverse.is_per_packet() != link.reverse.is_per_packet()
    {
        apply_offloads(&lab, &state.topology, index)
            .map_err(step_error(format!("set offloads of {}", link.name)))?;
    }
    if old.forward.rate_bps != link.forward.rate_bps
        || old.reverse.rate_bps != link.reverse.rate_bps
        || old.forward.queue_bytes != link.forward.queue_bytes
        || old.reverse.queue_bytes != link.reverse.queue_bytes
        || old.mtu != link.mtu
    {
        apply_rates(&lab, index, &link)
            .map_err(step_error(format!("set rate of {}", link.name)))?;
    }
    if old.cost != link.cost {
        let routes = compute_routes(&state.topology);
        for route in state.routes.iter().filter(|r| !routes.contains(r)) {
            let _ = ip(&route_command(&lab, &state.topology, route, "del"));
        }
        for route in &routes {
            add_route(&lab, &state.topology, route).map_err(step_error("update routes"))?;
        }
        state.routes = routes;
    }
    let request = ControlRequest::Set {
        link: link.name.clone(),
        forward: Box::new(link.forward.clone()),
        reverse: Box::new(link.reverse.clone()),
    };
    match control_request(&lab, &request).map_err(step_error("update forwarder"))? {
        ControlResponse::Ok => Ok(()),
        other => Err(LabError {
            step: "update forwarder".into(),
            message: format!("{other:?}"),
        }),
    }
}

fn set_link_mtu(lab: &str, topology: &Topology, index: usize) -> Result<(), String> {
    let link = &topology.links[index];
    let emulator = emulator_netns(lab);
    for (side, end) in [(Side::A, link.a), (Side::B, link.b)] {
        ip(&format!(
            "-n {emulator} link set {} mtu {}",
            emulator_interface(index, side),
            link.mtu
        ))?;
        match end {
            Endpoint::Node(node) => ip(&format!(
                "-n {} link set {} mtu {}",
                node_netns(lab, &topology.nodes[node].name),
                link.name,
                link.mtu
            ))?,
            Endpoint::Switch(_) => ip(&format!(
                "-n {emulator} link set {} mtu {}",
                bridge_port(index, side),
                link.mtu
            ))?,
        };
    }
    Ok(())
}

/// Switches a declared incident on or off. Off restores the declared state of the links the
/// incident touched, then re-applies the other active incidents that touch them.
pub fn incident(lab: &str, name: &str, on: bool) -> Result<LabState, LabError> {
    require_root()?;
    let _lock = StateLock::acquire(lab).map_err(step_error("lock lab state"))?;
    let mut state = LabState::load(lab).map_err(step_error("load lab state"))?;
    let find = |state: &LabState, name: &str| {
        state
            .declared
            .incidents
            .iter()
            .find(|i| i.name == name)
            .cloned()
            .ok_or_else(|| LabError {
                step: "find incident".into(),
                message: format!(
                    "no incident named {name} in lab {lab} (incidents: {})",
                    state
                        .declared
                        .incidents
                        .iter()
                        .map(|i| i.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    };
    let incident = find(&state, name)?;
    state.active_incidents.retain(|n| n != name);
    if on {
        state.active_incidents.push(name.to_string());
    }
    let touched: BTreeSet<&str> = incident.changes.iter().map(|c| c.link.as_str()).collect();
    for link_name in touched {
        let index = state
            .topology
            .link_index(link_name)
            .expect("validated incident link");
        let mut link = state.declared.links[index].clone();
        for active in state.active_incidents.clone() {
            for change in find(&state, &active)?
                .changes
                .iter()
                .filter(|c| c.link == link_name)
            {
                for (key, value) in &change.settings {
                    link.apply_setting(change.direction, key, value)
                        .map_err(step_error(format!("apply incident {active}")))?;
                }
            }
        }
        replace_link(&mut state, index, link)?;
    }
    state.save().map_err(step_error("write state"))?;
    Ok(state)
}

/// Runs a command inside a node's namespace by replacing this process with
/// `ip netns exec` (which in turn execs the command): its exit status and signals are
/// the command's own, so stopping `vantage lab exec` stops the command. Returns only
/// when the command could not be started.
pub fn exec(lab: &str, node: &str, command: &[String]) -> Result<Infallible, LabError> {
    require_root()?;
    let state = LabState::load(lab).map_err(step_error("load lab state"))?;
    if !state.topology.nodes.iter().any(|n| n.name == node) {
        return Err(LabError {
            step: "find node".into(),
            message: format!(
                "no node named {node} in lab {lab} (nodes: {})",
                state
                    .topology
                    .nodes
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    use std::os::unix::process::CommandExt;
    let error = Command::new("ip")
        .args(["netns", "exec", &node_netns(lab, node)])
        .args(command)
        .exec();
    Err(LabError {
        step: "run command".into(),
        message: format!("cannot run ip netns exec: {error}"),
    })
}

/// A running lab as `lab status` shows it.
#[derive(Debug, Serialize)]
pub struct LabStatus {
    pub state: LabState,
    pub forwarder_alive: bool,
    pub counters: Option<Vec<LinkCounters>>,
}

pub fn status(lab: &str) -> Result<LabStatus, LabError> {
    let state = LabState::load(lab).map_err(step_error("load lab state"))?;
    let forwarder_alive = state.forwarder_alive();
    let counters = match control_request(lab, &ControlRequest::Counters) {
        Ok(ControlResponse::Counters { links }) => Some(links),
        _ => None,
    };
    Ok(LabStatus {
        state,
        forwarder_alive,
        counters,
    })
}
