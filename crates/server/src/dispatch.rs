//! What an agent is handed for a run: its target's address and the port of the
//! service the run's test kind talks to.

use vantage_model::control::AssignedRun;
use vantage_model::kinds::{self, Service, Target};

use crate::archive::{from_us, AgentRecord, RunRecord};

/// Resolves a stored run into what the client agent needs: the target's address and
/// the port of the service its test kind talks to (an agent's endpoint or iperf3
/// listener, or an external host's port). A run whose server agent is unknown, or
/// does not serve that service (the planner plans no such run), cannot be executed
/// and is left for the missed-run sweep to record.
pub fn assign(run: RunRecord, agents: &[AgentRecord]) -> Option<AssignedRun> {
    let service = kinds::find(&run.test)?.service_for(&run.spec);
    let (server_address, server_port) = match &run.target {
        Some(target) => {
            let target = Target::parse(target, service.default_port()).ok()?;
            (target.host, target.port)
        }
        None => {
            let server = agents
                .iter()
                .find(|agent| agent.registration.name == run.server)?;
            let port = match service {
                Service::Endpoint => server.registration.endpoint_port,
                Service::Iperf3 => server.registration.iperf3_port?,
                Service::Portless => 0,
            };
            (server.registration.addresses.first().cloned()?, port)
        }
    };
    Some(AssignedRun {
        reverse: run.reverse,
        run_id: run.id,
        task: run.task,
        test: run.test,
        client: run.client,
        server: run.server,
        server_address,
        server_port,
        spec: run.spec,
        planned_start: from_us(run.planned_start_us),
        planned_end: from_us(run.planned_end_us),
    })
}
