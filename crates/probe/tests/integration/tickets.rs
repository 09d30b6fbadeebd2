//! An agent's endpoint serves throughput tests only under its server's tickets: native
//! tests carry one, iperf3 clients present one first; tickets for another agent, with
//! a foreign signature, or beyond the test time they cover are refused.

use crate::common;

use std::process::Command;
use std::sync::Arc;

use common::TestEndpoint;
use vantage_model::throughput::{ThroughputSpec, ThroughputTool};
use vantage_model::ticket::{TestTicket, TicketClaims, TicketSigner, TicketVerifier};
use vantage_probe::throughput::client::{present_ticket, run_native};
use vantage_probe::tickets::TicketGate;

fn server_key() -> TicketSigner {
    TicketSigner::from_secret([42; 32])
}

fn ticket(signer: &TicketSigner, server: &str, max_duration_ms: u64) -> TestTicket {
    signer.sign(&TicketClaims {
        run_id: format!("tput/a>{server}/{max_duration_ms}"),
        test: "throughput".into(),
        client: "a".into(),
        server: server.into(),
        max_duration_ms,
        not_after_us: chrono::Utc::now().timestamp_micros() + 60_000_000,
    })
}

/// The endpoint of agent "b", trusting `server_key()`, with its iperf3 listener.
fn agent_endpoint() -> TestEndpoint {
    let gate = TicketGate::new("b");
    gate.trust(TicketVerifier::from_hex_keys([server_key().public_key_hex().as_str()]).unwrap());
    TestEndpoint::start(Some("127.0.0.1".parse().unwrap()), |config| {
        config.tickets = Some(Arc::new(gate));
        config.iperf3_port = Some(0);
    })
}

fn native(endpoint: &TestEndpoint, ticket: Option<TestTicket>) -> Result<u64, String> {
    let mut spec = ThroughputSpec::new("127.0.0.1", endpoint.addr.port());
    spec.duration_us = Some(500_000);
    spec.ticket = ticket;
    run_native(&spec)
        .map(|result| result.summary.received_bytes)
        .map_err(|error| error.to_string())
}

#[test]
fn native_tests_need_a_valid_ticket_for_this_agent() {
    let endpoint = agent_endpoint();
    let refused = native(&endpoint, None).unwrap_err();
    assert!(
        refused.contains("agent 'b' serves throughput tests only with a ticket"),
        "{refused}"
    );
    let for_c = native(&endpoint, Some(ticket(&server_key(), "c", 5_000))).unwrap_err();
    assert!(
        for_c.contains("the ticket is for 'c', not for agent 'b'"),
        "{for_c}"
    );
    let forged = native(
        &endpoint,
        Some(ticket(&TicketSigner::from_secret([7; 32]), "b", 5_000)),
    )
    .unwrap_err();
    assert!(forged.contains("signature does not verify"), "{forged}");
    // A valid ticket covering 1.2 s: a 0.5 s test runs twice, the third is refused.
    let valid = ticket(&server_key(), "b", 1_200);
    assert!(native(&endpoint, Some(valid.clone())).unwrap() > 0);
    assert!(native(&endpoint, Some(valid.clone())).unwrap() > 0);
    let spent = native(&endpoint, Some(valid)).unwrap_err();
    assert!(
        spent.contains("has used 1000 ms of the 1200 ms its ticket covers"),
        "{spent}"
    );
}

#[test]
fn iperf3_clients_present_a_ticket_first() {
    let endpoint = agent_endpoint();
    let iperf3_port = endpoint.iperf3.expect("iperf3 listener").port();
    let mut spec = ThroughputSpec::new("127.0.0.1", iperf3_port);
    spec.tool = ThroughputTool::Iperf3;
    spec.duration_us = Some(1_000_000);
    let refused = vantage_probe::iperf3::client::run_iperf3(&spec)
        .unwrap_err()
        .to_string();
    assert!(refused.contains("test authorization failed"), "{refused}");

    // Stock iperf3 gets iperf3's own "test authorization failed" too.
    let stock = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &iperf3_port.to_string(), "-t", "1"])
        .output()
        .expect("iperf3 is installed (scripts/install-deps)");
    let said = String::from_utf8_lossy(&stock.stdout).to_string()
        + &String::from_utf8_lossy(&stock.stderr);
    assert!(!stock.status.success(), "{said}");
    assert!(said.contains("authorization failed"), "{said}");

    // Presented over the native protocol, the ticket admits one iperf3 test.
    let valid = ticket(&server_key(), "b", 5_000);
    present_ticket("127.0.0.1", endpoint.addr.port(), &valid).unwrap();
    let result = vantage_probe::iperf3::client::run_iperf3(&spec).unwrap();
    assert!(result.summary.received_bytes > 0);
    let again = vantage_probe::iperf3::client::run_iperf3(&spec)
        .unwrap_err()
        .to_string();
    assert!(again.contains("test authorization failed"), "{again}");
    // A bad ticket is refused when presented.
    let for_c = present_ticket(
        "127.0.0.1",
        endpoint.addr.port(),
        &ticket(&server_key(), "c", 5_000),
    )
    .unwrap_err()
    .to_string();
    assert!(for_c.contains("the ticket is for 'c'"), "{for_c}");
}
