//! Test tickets: the server's signed permission for one scheduled run between two
//! agents. The client agent presents the ticket to the server agent's endpoint, which
//! serves throughput tests (native or iperf3) only under a valid ticket for itself.
//!
//! A ticket is its claims as JSON text plus an Ed25519 signature (RFC 8032) of exactly
//! those bytes, so verification never depends on how JSON is re-serialised. The server
//! keeps the signing key; agents learn the public key when they register.

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

/// What a ticket allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TicketClaims {
    /// The run the ticket was issued for; test time is counted per run.
    pub run_id: String,
    /// Test kind (`throughput`, `capacity`, …).
    pub test: String,
    /// The agent the ticket was handed to.
    pub client: String,
    /// The agent whose endpoint serves the test; other endpoints refuse the ticket.
    pub server: String,
    /// Test time the ticket covers in total, over all the run's connections (ms).
    pub max_duration_ms: u64,
    /// The ticket is refused after this time (Unix µs).
    pub not_after_us: i64,
}

/// A signed ticket as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestTicket {
    /// The claims as signed: [`TicketClaims`] in JSON, verified byte for byte.
    pub claims: String,
    /// Ed25519 signature of `claims`, hex.
    pub signature: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TicketError {
    #[error("ticket key: {0}")]
    BadKey(String),
    #[error("ticket signature does not verify with any trusted key")]
    BadSignature,
    #[error("ticket claims are not valid: {0}")]
    Malformed(String),
    #[error("ticket for run '{run_id}' expired at {not_after}")]
    Expired { run_id: String, not_after: String },
}

/// 32 bytes from hex; `Err` says what is wrong with `what`.
fn decode_32(hex_text: &str, what: &str) -> Result<[u8; 32], String> {
    let bytes = hex::decode(hex_text.trim()).map_err(|err| format!("{what} is not hex: {err}"))?;
    bytes
        .try_into()
        .map_err(|bytes: Vec<u8>| format!("{what} has {} bytes, expected 32", bytes.len()))
}

/// One hex public key; `Err` says what is wrong with it.
fn parse_public_key(hex_text: &str) -> Result<VerifyingKey, String> {
    let bytes = decode_32(hex_text, "public key")?;
    VerifyingKey::from_bytes(&bytes).map_err(|err| format!("public key: {err}"))
}

/// The server's signing key.
#[derive(Clone)]
pub struct TicketSigner(SigningKey);

/// Shows the public key only, never the secret.
impl std::fmt::Debug for TicketSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TicketSigner(public key {})", self.public_key_hex())
    }
}

impl TicketSigner {
    /// A signer from 32 secret bytes (drawn by the caller from a CSPRNG).
    pub fn from_secret(secret: [u8; 32]) -> Self {
        Self(SigningKey::from_bytes(&secret))
    }

    pub fn from_hex(secret_hex: &str) -> Result<Self, TicketError> {
        Ok(Self::from_secret(
            decode_32(secret_hex, "secret key").map_err(TicketError::BadKey)?,
        ))
    }

    pub fn secret_hex(&self) -> String {
        hex::encode(self.0.to_bytes())
    }

    pub fn public_key_hex(&self) -> String {
        hex::encode(self.0.verifying_key().to_bytes())
    }

    pub fn sign(&self, claims: &TicketClaims) -> TestTicket {
        let claims = serde_json::to_string(claims).expect("claims serialise");
        let signature = self.0.sign(claims.as_bytes());
        TestTicket {
            claims,
            signature: hex::encode(signature.to_bytes()),
        }
    }
}

/// The public keys an endpoint trusts.
#[derive(Debug, Clone, Default)]
pub struct TicketVerifier {
    keys: Vec<VerifyingKey>,
}

impl TicketVerifier {
    pub fn from_hex_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> Result<Self, TicketError> {
        let keys = keys
            .into_iter()
            .map(|key| parse_public_key(key).map_err(TicketError::BadKey))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { keys })
    }

    /// The keys of an authorized-keys file (`vantage endpoint --authorized-keys`): one
    /// hex public key per line; blank lines and `#` comments are ignored. An error names
    /// the line.
    pub fn from_authorized_keys(text: &str) -> Result<Self, TicketError> {
        let mut keys = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let key = line.split('#').next().unwrap_or("").trim();
            if key.is_empty() {
                continue;
            }
            let key = parse_public_key(key)
                .map_err(|message| TicketError::BadKey(format!("line {}: {message}", index + 1)))?;
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(TicketError::BadKey("no public key in the file".into()));
        }
        Ok(Self { keys })
    }

    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// The claims of `ticket` when a trusted key signed it and it has not expired at
    /// `now_us`.
    pub fn verify(&self, ticket: &TestTicket, now_us: i64) -> Result<TicketClaims, TicketError> {
        let signature = hex::decode(&ticket.signature)
            .ok()
            .and_then(|bytes| Signature::from_slice(&bytes).ok())
            .ok_or(TicketError::BadSignature)?;
        if !self
            .keys
            .iter()
            .any(|key| key.verify(ticket.claims.as_bytes(), &signature).is_ok())
        {
            return Err(TicketError::BadSignature);
        }
        let claims: TicketClaims = serde_json::from_str(&ticket.claims)
            .map_err(|err| TicketError::Malformed(err.to_string()))?;
        if now_us > claims.not_after_us {
            let not_after = chrono::DateTime::from_timestamp_micros(claims.not_after_us)
                .map_or_else(|| claims.not_after_us.to_string(), |time| time.to_rfc3339());
            return Err(TicketError::Expired {
                run_id: claims.run_id,
                not_after,
            });
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> TicketClaims {
        TicketClaims {
            run_id: "tput/1/a>b".into(),
            test: "throughput".into(),
            client: "a".into(),
            server: "b".into(),
            max_duration_ms: 12_000,
            not_after_us: 2_000_000,
        }
    }

    fn signer(seed: u8) -> TicketSigner {
        TicketSigner::from_secret([seed; 32])
    }

    #[test]
    fn a_signed_ticket_verifies_until_it_expires() {
        let signer = signer(7);
        let verifier = TicketVerifier::from_hex_keys([signer.public_key_hex().as_str()]).unwrap();
        let ticket = signer.sign(&claims());
        assert_eq!(verifier.verify(&ticket, 1_000_000), Ok(claims()));
        assert_eq!(verifier.verify(&ticket, 2_000_000), Ok(claims()));
        assert!(matches!(
            verifier.verify(&ticket, 2_000_001),
            Err(TicketError::Expired { .. })
        ));
        // The secret round-trips through its hex form.
        let again = TicketSigner::from_hex(&signer.secret_hex()).unwrap();
        assert_eq!(again.public_key_hex(), signer.public_key_hex());
    }

    #[test]
    fn tampered_claims_and_foreign_keys_are_refused() {
        let signer = signer(7);
        let verifier = TicketVerifier::from_hex_keys([signer.public_key_hex().as_str()]).unwrap();
        let mut ticket = signer.sign(&claims());
        ticket.claims = ticket.claims.replace("12000", "99000");
        assert_eq!(verifier.verify(&ticket, 0), Err(TicketError::BadSignature));
        let foreign = signer_foreign().sign(&claims());
        assert_eq!(verifier.verify(&foreign, 0), Err(TicketError::BadSignature));
        let garbled = TestTicket {
            claims: signer.sign(&claims()).claims,
            signature: "zz".into(),
        };
        assert_eq!(verifier.verify(&garbled, 0), Err(TicketError::BadSignature));
        // Several trusted keys (a rotation): either verifies.
        let both = TicketVerifier::from_hex_keys([
            signer.public_key_hex().as_str(),
            signer_foreign().public_key_hex().as_str(),
        ])
        .unwrap();
        assert!(both.verify(&foreign, 0).is_ok());
    }

    fn signer_foreign() -> TicketSigner {
        signer(9)
    }

    #[test]
    fn authorized_keys_files_skip_comments_and_name_bad_lines() {
        let first = signer(7).public_key_hex();
        let second = signer_foreign().public_key_hex();
        let text = format!("# lab signer\n{first}\n\n  {second}  # rotated in 2026-11\n");
        let verifier = TicketVerifier::from_authorized_keys(&text).unwrap();
        assert!(verifier.verify(&signer(7).sign(&claims()), 0).is_ok());
        assert!(verifier
            .verify(&signer_foreign().sign(&claims()), 0)
            .is_ok());
        assert_eq!(
            TicketVerifier::from_authorized_keys(&format!("{first}\nabcd\n")).unwrap_err(),
            TicketError::BadKey("line 2: public key has 2 bytes, expected 32".into())
        );
        assert_eq!(
            TicketVerifier::from_authorized_keys("# nothing yet\n").unwrap_err(),
            TicketError::BadKey("no public key in the file".into())
        );
    }

    #[test]
    fn bad_keys_say_what_is_wrong() {
        assert_eq!(
            TicketVerifier::from_hex_keys(["abcd"]).unwrap_err(),
            TicketError::BadKey("public key has 2 bytes, expected 32".into())
        );
        assert!(matches!(
            TicketSigner::from_hex("not hex"),
            Err(TicketError::BadKey(message)) if message.starts_with("secret key is not hex")
        ));
    }
}
