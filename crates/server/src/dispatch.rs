//! What an agent is handed for a run: its target's address and the port of the
//! service the run's test kind talks to.

use std::collections::HashMap;
use std::time::Duration;

use vantage_model::control::{AssignedRun, RunTicket};
use vantage_model::kinds::{self, Service, Target};
use vantage_model::ticket::{TicketClaims, TicketSigner};

use crate::archive::{from_us, AgentRecord, RunRecord};

/// How long after its planned end a run's ticket is still accepted: a run may start
/// late within the agent's start tolerance, and its connections close after the end.
pub const TICKET_GRACE: Duration = Duration::from_secs(60);

/// Resolves a stored run into what the client agent needs: the target's address and
/// the port of the service its test kind talks to (an agent's endpoint or iperf3
/// listener, or an external host's port). A run whose server agent is unknown, or
/// does not serve that service (the planner plans no such run), cannot be executed
/// and is left for the missed-run sweep to record.
///
/// Runs of a bulk-transfer kind towards an agent's endpoint or iperf3 listener carry a
/// ticket signed by `signer`, valid for the run's reservation plus [`TICKET_GRACE`].
pub fn assign(
    run: RunRecord,
    agents: &HashMap<String, AgentRecord>,
    signer: &TicketSigner,
) -> Option<AssignedRun> {
    let kind = kinds::find(&run.test)?;
    let service = kind.service_for(&run.spec);
    let (server_address, server_port, ticket) = match &run.target {
        Some(target) => {
            let target = Target::parse(target, service.default_port()).ok()?;
            (target.host, target.port, None)
        }
        None => {
            let server = agents.get(&run.server)?;
            let port = match service {
                Service::Endpoint => server.registration.endpoint_port,
                Service::Iperf3 => server.registration.iperf3_port?,
                Service::Portless => 0,
            };
            // Only bulk transfers present one: signing a latency mesh's runs, which no
            // endpoint asks a ticket of, was a signature per run (16 650 a second at
            // 1 000 agents).
            let ticket = kind.bulk_transfer.then(|| RunTicket {
                ticket: signer.sign(&TicketClaims {
                    run_id: run.id.clone(),
                    test: run.test.clone(),
                    client: run.client.clone(),
                    server: run.server.clone(),
                    max_duration_ms: u64::try_from(
                        (run.planned_end_us - run.planned_start_us) / 1000,
                    )
                    .unwrap_or(0),
                    not_after_us: run.planned_end_us + TICKET_GRACE.as_micros() as i64,
                }),
                endpoint_port: server.registration.endpoint_port,
            });
            (
                server.registration.addresses.first().cloned()?,
                port,
                ticket,
            )
        }
    };
    Some(AssignedRun {
        ticket,
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
