//! `vantage lab …`: emulated networks in namespaces (see docs/lab.md).

use clap::{Args, Subcommand};
use std::process::ExitCode;
use vantage_lab::lab::{self, ForwarderCommand, LabStatus};
use vantage_lab::topology::{Direction, Endpoint, Topology};

#[derive(Args)]
pub struct LabArgs {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Subcommand)]
enum LabCommand {
    /// Build a lab from a topology file (root).
    Up {
        /// Topology TOML (e.g. lab/scenarios/two-hosts.toml).
        topology: String,
        /// Lab name (1-12 lowercase letters/digits); default: the file's [lab].name.
        #[arg(long)]
        name: Option<String>,
    },
    /// Remove a lab and everything it created.
    Down {
        /// Lab name; default: the only running lab.
        name: Option<String>,
    },
    /// Show nodes, links, addresses, impairments and the forwarder's health and counters.
    Status {
        name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Run a command in a node's network namespace; its exit code is passed through.
    Exec {
        #[arg(long)]
        lab: Option<String>,
        node: String,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Change a link live: `lab set LINK delay=20ms loss=1% rate=100M mtu=1400 cost=5`.
    Set {
        #[arg(long)]
        lab: Option<String>,
        /// forward (a→b), reverse (b→a) or both.
        #[arg(long, default_value = "both")]
        direction: Direction,
        link: String,
        #[arg(required = true)]
        settings: Vec<String>,
    },
    /// Switch a topology's named incident on or off.
    Incident {
        #[arg(long)]
        lab: Option<String>,
        incident: String,
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
    /// Remove leftovers of dead labs (no forwarder, interrupted builds).
    Gc,
    /// The lab's packet forwarder (started by `lab up`).
    #[command(hide = true)]
    Forwarder { name: String },
}

fn parse_setting(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .ok_or_else(|| format!("\"{text}\" is not KEY=VALUE (e.g. delay=20ms)"))
}

fn lab_name(explicit: Option<String>) -> Result<String, String> {
    match explicit {
        Some(name) => Ok(name),
        None => lab::default_lab(),
    }
}

fn print_status(status: &LabStatus) {
    let state = &status.state;
    let topology = &state.topology;
    println!(
        "lab {} ({}), from {}",
        topology.name,
        format!("{:?}", state.phase).to_lowercase(),
        state.topology_file
    );
    match (state.forwarder_pid, status.forwarder_alive) {
        (Some(pid), true) => println!("forwarder: pid {pid}, alive"),
        (Some(pid), false) => {
            println!("forwarder: pid {pid}, NOT RUNNING (vantage lab gc removes this lab)")
        }
        (None, _) => println!("forwarder: not started"),
    }
    if !state.active_incidents.is_empty() {
        println!("active incidents: {}", state.active_incidents.join(", "));
    }
    println!("nodes:");
    for (index, node) in topology.nodes.iter().enumerate() {
        let addresses: Vec<String> = topology
            .node_addresses(index)
            .iter()
            .map(|(link, a)| format!("{}={a}", topology.links[*link].name))
            .collect();
        println!(
            "  {:<16} {:<6} netns {:<24} {}",
            node.name,
            format!("{:?}", node.kind).to_lowercase(),
            vantage_lab::netns::node_netns(&topology.name, &node.name),
            addresses.join(" ")
        );
    }
    println!("links:");
    for link in &topology.links {
        let end = |e: Endpoint| topology.endpoint_name(e).to_string();
        println!(
            "  {:<16} {} <-> {}  mtu {} cost {}",
            link.name,
            end(link.a),
            end(link.b),
            link.mtu,
            link.cost
        );
        println!(
            "    forward ({}→{}): {}",
            end(link.a),
            end(link.b),
            link.forward.describe()
        );
        println!(
            "    reverse ({}→{}): {}",
            end(link.b),
            end(link.a),
            link.reverse.describe()
        );
        if let Some(counters) = status
            .counters
            .iter()
            .flatten()
            .find(|c| c.link == link.name)
        {
            for (label, c) in [
                ("forward", &counters.forward),
                ("reverse", &counters.reverse),
            ] {
                println!(
                    "    {label} counters: received {} forwarded {} lost {} (burst {}) queue-drops {} rate-drops {} overrun {} dup {} corrupt {} reorder {} released-late {} (worst {} µs, mean {} µs) offloaded {} cpu-drops {} cpu-busy {} ms",
                    c.received,
                    c.forwarded,
                    c.dropped_random_loss,
                    c.dropped_burst_loss,
                    c.dropped_delay_queue,
                    c.dropped_rate_queue,
                    c.dropped_socket_overrun,
                    c.duplicated,
                    c.corrupted,
                    c.reordered,
                    c.released_late,
                    c.max_release_lateness_us,
                    c.release_lateness_us.checked_div(c.forwarded).unwrap_or(0),
                    c.offloaded_frames,
                    c.dropped_cpu_backlog,
                    c.cpu_busy_us / 1_000
                );
            }
        }
    }
    if !topology.incidents.is_empty() {
        println!("incidents:");
        for incident in &topology.incidents {
            println!(
                "  {:<20} {}",
                incident.name,
                incident.description.as_deref().unwrap_or("")
            );
        }
    }
}

pub(crate) fn forwarder_command() -> Result<ForwarderCommand, String> {
    let program =
        std::env::current_exe().map_err(|e| format!("cannot locate the vantage binary: {e}"))?;
    Ok(ForwarderCommand {
        program,
        args: vec!["lab".into(), "forwarder".into()],
    })
}

fn run_command(command: LabCommand) -> Result<i32, String> {
    match command {
        LabCommand::Up { topology, name } => {
            let text =
                std::fs::read_to_string(&topology).map_err(|e| format!("{topology}: {e}"))?;
            let parsed = Topology::from_toml(&text).map_err(|e| format!("{topology}: {e}"))?;
            let state = lab::up(parsed, &topology, name.as_deref(), &forwarder_command()?)
                .map_err(|e| {
                    format!(
                        "lab up failed at step \"{}\": {} (everything it created was removed)",
                        e.step, e.message
                    )
                })?;
            let topology = &state.topology;
            println!(
                "lab {} is up: {} nodes, {} links, forwarder pid {}",
                topology.name,
                topology.nodes.len(),
                topology.links.len(),
                state.forwarder_pid.unwrap_or(0)
            );
            println!("  vantage lab status {0}; vantage lab exec --lab {0} NODE -- CMD; vantage lab down {0}", topology.name);
            Ok(0)
        }
        LabCommand::Down { name } => {
            let name = lab_name(name)?;
            lab::down(&name).map_err(|e| {
                format!(
                    "lab down {name} failed at step \"{}\": {}",
                    e.step, e.message
                )
            })?;
            println!("lab {name} removed");
            Ok(0)
        }
        LabCommand::Status { name, json } => {
            let name = lab_name(name)?;
            let status = lab::status(&name).map_err(|e| e.to_string())?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&status).map_err(|e| e.to_string())?
                );
            } else {
                print_status(&status);
            }
            Ok(0)
        }
        LabCommand::Exec {
            lab: name,
            node,
            command,
        } => {
            let name = lab_name(name)?;
            match lab::exec(&name, &node, &command) {
                Err(error) => Err(error.to_string()),
            }
        }
        LabCommand::Set {
            lab: name,
            direction,
            link,
            settings,
        } => {
            let name = lab_name(name)?;
            let settings = settings
                .iter()
                .map(|s| parse_setting(s))
                .collect::<Result<Vec<_>, _>>()?;
            let state = lab::set(&name, &link, direction, &settings).map_err(|e| e.to_string())?;
            let link =
                &state.topology.links[state.topology.link_index(&link).expect("link exists")];
            println!(
                "{}: forward {}; reverse {}; mtu {} cost {}",
                link.name,
                link.forward.describe(),
                link.reverse.describe(),
                link.mtu,
                link.cost
            );
            Ok(0)
        }
        LabCommand::Incident {
            lab: name,
            incident,
            state,
        } => {
            let name = lab_name(name)?;
            let on = state == "on";
            let state = lab::incident(&name, &incident, on).map_err(|e| e.to_string())?;
            println!(
                "incident {incident} {}; active: {}",
                if on { "on" } else { "off" },
                if state.active_incidents.is_empty() {
                    "none".to_string()
                } else {
                    state.active_incidents.join(", ")
                }
            );
            Ok(0)
        }
        LabCommand::Gc => {
            let removed = lab::gc().map_err(|e| e.to_string())?;
            if removed.is_empty() {
                println!("nothing to remove");
            } else {
                println!("removed: {}", removed.join(", "));
            }
            Ok(0)
        }
        LabCommand::Forwarder { name } => {
            vantage_lab::forwarder::run_forwarder(&name)?;
            Ok(0)
        }
    }
}

pub fn run(args: LabArgs) -> ExitCode {
    match run_command(args.command) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(message) => {
            eprintln!("vantage lab: {message}");
            ExitCode::FAILURE
        }
    }
}
