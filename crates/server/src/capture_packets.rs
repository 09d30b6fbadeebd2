//! Packets a capture run uploads when its spec asks (`upload_packets`): taken out of the
//! result document before it is stored, so result queries stay small, and kept as the
//! pcapng file they are (`GET /api/v1/captures/packets?run_id=RUN_ID`). The document keeps
//! the file's size and SHA-256 in their place.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde_json::Value;
use sha2::{Digest, Sha256};
use vantage_model::kinds::capture::{KIND as CAPTURE, MAX_UPLOADED_PACKETS_BYTES};

/// Where an upload carries its packets.
const POINTER: &str = "/packets/pcapng_base64";
/// What is accepted beyond the capture's bound: dumpcap stops at the first packet past
/// its file size, so a file may end one packet (at most 256 KiB) beyond it.
const MAX_PACKETS_BYTES: u64 = MAX_UPLOADED_PACKETS_BYTES + (256 << 10);

/// Why uploaded packets were refused.
#[derive(Debug, thiserror::Error)]
pub enum PacketsRefusal {
    #[error("field 'packets.pcapng_base64' is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("field 'packets.pcapng_base64' holds {0} bytes, more than the {MAX_PACKETS_BYTES} a capture may upload")]
    TooLarge(u64),
    #[error("field 'packets.bytes' says {said} but the file has {decoded} bytes")]
    Size { said: Value, decoded: u64 },
    #[error("packets come only with results of capture runs, not of '{0}'")]
    NotACapture(String),
}

/// A `test` result with its packets taken out, and the pcapng file they were; `None`
/// when it carries none (the result is then stored as it is, without a copy).
pub fn detach(test: &str, result: &Value) -> Result<Option<(Value, Vec<u8>)>, PacketsRefusal> {
    let Some(encoded) = result.pointer(POINTER) else {
        return Ok(None);
    };
    if test != CAPTURE.name {
        return Err(PacketsRefusal::NotACapture(test.to_string()));
    }
    // Checked before decoding: base64 is 4 characters for every 3 bytes.
    let encoded = encoded.as_str().unwrap_or_default();
    if encoded.len() as u64 / 4 * 3 > MAX_PACKETS_BYTES + 3 {
        return Err(PacketsRefusal::TooLarge(encoded.len() as u64 / 4 * 3));
    }
    let pcapng = BASE64.decode(encoded)?;
    let decoded = pcapng.len() as u64;
    if decoded > MAX_PACKETS_BYTES {
        return Err(PacketsRefusal::TooLarge(decoded));
    }
    let said = result
        .pointer("/packets/bytes")
        .cloned()
        .unwrap_or(Value::Null);
    if said.as_u64() != Some(decoded) {
        return Err(PacketsRefusal::Size { said, decoded });
    }
    let mut document = result.clone();
    document["packets"] = serde_json::json!({
        "bytes": decoded,
        "sha256": hex::encode(Sha256::digest(&pcapng)),
    });
    Ok(Some((document, pcapng)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn packets_are_taken_out_and_their_size_and_digest_left() {
        let result = json!({
            "summary": {"flows": 1},
            "packets": {"bytes": 3, "pcapng_base64": BASE64.encode(b"abc")},
        });
        let (document, packets) = detach("capture", &result).unwrap().unwrap();
        assert_eq!(packets, b"abc");
        assert_eq!(
            document,
            json!({
                "summary": {"flows": 1},
                "packets": {
                    "bytes": 3,
                    "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                },
            })
        );
        let plain = json!({"summary": {"flows": 1}});
        assert_eq!(detach("capture", &plain).unwrap(), None);
    }

    #[test]
    fn packets_that_are_not_a_capture_s_or_not_what_they_say_are_refused() {
        let upload = |bytes: Value, encoded: Value| json!({"packets": {"bytes": bytes, "pcapng_base64": encoded}});
        let refusal = |test: &str, result: Value| detach(test, &result).unwrap_err().to_string();
        assert!(refusal("latency", upload(json!(3), json!("YWJj"))).contains("not of 'latency'"));
        assert!(refusal("capture", upload(json!(3), json!("%%%%"))).contains("is not base64"));
        assert!(refusal("capture", upload(json!(4), json!("YWJj")))
            .contains("says 4 but the file has 3 bytes"));
        let huge = "A".repeat(23 << 20);
        assert!(refusal("capture", upload(json!(0), json!(huge))).contains("more than"));
    }
}
