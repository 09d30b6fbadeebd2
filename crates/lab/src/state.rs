//! What a lab leaves in `/run/vantage-lab/<lab>/` and the names of its emulator interfaces:
//! shared by the lifecycle ([`crate::lab`]) and the forwarder ([`crate::forwarder`]), which runs
//! as its own process and finds its links and control socket through them.

use crate::netns::process_matches;
use crate::routing::Route;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Root of all lab state directories.
pub const STATE_ROOT: &str = "/run/vantage-lab";

pub fn state_dir(lab: &str) -> PathBuf {
    PathBuf::from(STATE_ROOT).join(lab)
}

pub fn control_socket_path(lab: &str) -> PathBuf {
    state_dir(lab).join("control.sock")
}

#[derive(Debug, Clone, Copy)]
pub enum Side {
    A,
    B,
}

/// The emulator-side interface of link `index` facing end a or b.
pub fn emulator_interface(index: usize, side: Side) -> String {
    match side {
        Side::A => format!("l{index}a"),
        Side::B => format!("l{index}b"),
    }
}

/// A lab's lifecycle phase as recorded in its state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// `lab up` (process `owner_pid`) is still building it.
    Creating,
    Running,
}

/// Everything `down`, `set` and `status` need, in `/run/vantage-lab/<lab>/state.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabState {
    pub phase: Phase,
    pub owner_pid: u32,
    pub topology_file: String,
    /// The topology as it is now (after `lab set` and incidents).
    pub topology: Topology,
    /// The topology as declared, to switch incidents off again.
    pub declared: Topology,
    pub routes: Vec<Route>,
    pub forwarder_pid: Option<u32>,
    pub active_incidents: Vec<String>,
}

impl LabState {
    pub fn load(lab: &str) -> Result<LabState, String> {
        let path = state_dir(lab).join("state.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("no lab named {lab} ({}: {e})", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: corrupt state: {e}", path.display()))
    }

    pub(crate) fn save(&self) -> Result<(), String> {
        let dir = state_dir(&self.topology.name);
        let temporary = dir.join("state.json.tmp");
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(&temporary, text).map_err(|e| format!("{}: {e}", temporary.display()))?;
        std::fs::rename(&temporary, dir.join("state.json")).map_err(|e| e.to_string())
    }

    pub fn forwarder_alive(&self) -> bool {
        self.forwarder_pid
            .is_some_and(|pid| process_matches(pid, &["forwarder", &self.topology.name]))
    }
}
