//! vantage's native throughput protocol as an endpoint reads it from anyone who
//! connects: the 8-byte preamble, length-framed JSON control messages (checked against
//! the endpoint's limits, tickets verified), UDP hellos and data headers.
//!
//! Properties: framing never reads past its cap; a message that parses is written back
//! and read again unchanged; a request the endpoint accepts yields engine settings
//! without overflow; a ticket is accepted only with the claims its key signed.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use vantage_model::ticket::{TestTicket, TicketClaims, TicketSigner, TicketVerifier};
use vantage_probe::endpoint::tcp::{encode_preamble, parse_header, PREAMBLE_LEN, PROTOCOL_VERSION};
use vantage_probe::throughput::engine::parse_udp_header;
use vantage_probe::throughput::server::{
    engine_settings, pacing_per_stream, ServiceLimits, ThroughputService,
};
use vantage_probe::throughput::wire::{self, Message, UDP_HELLO};
use vantage_probe::tickets::TicketGate;

/// The agent whose endpoint is fuzzed; the seed corpus holds requests with a ticket for
/// it, signed with [`TICKET_SECRET`] (claims as in [`seed_claims`]).
const AGENT: &str = "fuzz-endpoint";
const TICKET_SECRET: [u8; 32] = [7; 32];

fn seed_claims() -> TicketClaims {
    TicketClaims {
        run_id: "fuzz-run".into(),
        test: "throughput".into(),
        client: "fuzz-client".into(),
        server: AGENT.into(),
        max_duration_ms: 10_000,
        // 2100-01-01: the seed ticket stays valid.
        not_after_us: 4_102_444_800_000_000,
    }
}

struct Endpoint {
    service: Arc<ThroughputService>,
    gate: TicketGate,
    seed_ticket: TestTicket,
}

fn endpoint() -> &'static Endpoint {
    static ENDPOINT: OnceLock<Endpoint> = OnceLock::new();
    ENDPOINT.get_or_init(|| {
        let signer = TicketSigner::from_secret(TICKET_SECRET);
        let gate = TicketGate::new(AGENT);
        gate.trust(
            TicketVerifier::from_hex_keys([signer.public_key_hex().as_str()])
                .expect("the signer's key"),
        );
        Endpoint {
            // `vantage endpoint`'s defaults: 60 s per test; a rate cap to check against.
            service: ThroughputService::new(ServiceLimits {
                max_duration: Duration::from_secs(60),
                max_rate_bps: Some(10_000_000_000),
            }),
            gate,
            seed_ticket: signer.sign(&seed_claims()),
        }
    })
}

/// A ticket the gate accepted must carry exactly the claims the key signed.
fn assert_only_signed_claims(accepted: bool, ticket: Option<&TestTicket>) {
    if accepted {
        let ticket = ticket.expect("accepted without a ticket");
        assert_eq!(
            ticket.claims,
            endpoint().seed_ticket.claims,
            "forged claims accepted"
        );
    }
}

fn control_message(message: &Message) {
    if !matches!(message, Message::Report { .. }) {
        // Reports carry floats, which JSON may round in the last place; the rest is exact.
        let mut written = Vec::new();
        wire::write_message(&mut written, message).expect("a parsed message serialises");
        let again = wire::read_message(&mut written.as_slice(), u32::MAX).expect("reads back");
        assert_eq!(&again, message, "control message round trip");
    }
    let endpoint = endpoint();
    match message {
        Message::Request(request) => {
            if endpoint.service.check_request(request).is_ok() {
                let duration = Duration::from_millis(request.duration_ms);
                let settings = engine_settings(request, duration);
                assert_eq!(settings.udp.is_some(), request.udp);
                let pacing = pacing_per_stream(
                    request.pacing_rate_bps,
                    endpoint.service.limits.max_rate_bps,
                    request.streams,
                );
                assert!(pacing.is_some(), "a capped endpoint always paces");
            }
            let checked = endpoint.gate.check(request.ticket.as_ref());
            assert_only_signed_claims(checked.is_ok(), request.ticket.as_ref());
        }
        Message::Authorize { ticket } => {
            let presented = endpoint
                .gate
                .present(ticket, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
            assert_only_signed_claims(presented.is_ok(), Some(ticket));
        }
        _ => {}
    }
}

fuzz_target!(|bytes: &[u8]| {
    // As read from the socket: length prefix and all, within the endpoint's cap.
    if let Ok(message) = wire::read_message(&mut &bytes[..], wire::MAX_REQUEST_BYTES) {
        control_message(&message);
    }
    // The input as one message body (the fuzzer need not learn the framing).
    let mut framed = (bytes.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(bytes);
    if let Ok(message) = wire::read_message(&mut framed.as_slice(), wire::MAX_REQUEST_BYTES) {
        control_message(&message);
    }

    if let Some(header) = bytes.first_chunk::<PREAMBLE_LEN>() {
        if let Some((PROTOCOL_VERSION, kind)) = parse_header(header) {
            assert_eq!(&encode_preamble(kind), header, "preamble round trip");
        }
    }
    if let Some((test_id, stream_id)) = wire::parse_udp_hello(bytes, UDP_HELLO) {
        assert_eq!(
            wire::encode_udp_hello(UDP_HELLO, test_id, stream_id)[..],
            bytes[..]
        );
    }
    for counter_64bit in [false, true] {
        if let Some((sent_us, _number)) = parse_udp_header(bytes, counter_64bit) {
            assert!(sent_us.is_finite() && sent_us >= 0.0);
        }
    }
});
