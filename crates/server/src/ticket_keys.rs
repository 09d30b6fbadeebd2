//! Which ticket keys sign and which agents trust, and their rotation. A rotation adds
//! a key that starts signing a little later (`activate_in`, so every agent has learnt
//! it from a heartbeat by then) and retires the older keys later still
//! (`retire_previous_in`, so tickets already handed out stay valid until their runs
//! end). Servers sharing an archive re-read the keys every [`REFRESH_EVERY`].

use std::time::Duration;

use serde::Serialize;
use vantage_model::ticket::TicketSigner;

use crate::archive::{from_us, TicketKey};

/// How long a new key waits before it signs: agents heartbeat every 5 s and servers
/// re-read the keys every [`REFRESH_EVERY`], so all have it well before.
pub const DEFAULT_ACTIVATE_IN: Duration = Duration::from_secs(60);
/// How long older keys stay trusted after a rotation: longer than any run's ticket.
pub const DEFAULT_RETIRE_PREVIOUS_IN: Duration = Duration::from_secs(24 * 3600);
/// Longest either delay may be.
pub const MAX_ROTATION_DELAY: Duration = Duration::from_secs(30 * 24 * 3600);
/// Most keys trusted at once: a rotation beyond it is refused until older keys retire,
/// so registration and heartbeat answers stay small.
pub const MAX_TRUSTED_KEYS: usize = 16;
/// Retired keys are deleted from the archive this long after retiring.
pub const KEEP_RETIRED: Duration = Duration::from_secs(7 * 24 * 3600);
/// How stale a server's copy of the keys may get.
pub const REFRESH_EVERY: Duration = Duration::from_secs(10);

/// The archive's ticket keys at one moment, oldest generation first.
#[derive(Debug, Clone)]
pub struct Keyring {
    keys: Vec<TicketKey>,
}

/// What a key does at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyState {
    /// Newer than the signing key, not signing yet; agents trust it already.
    Pending,
    Signing,
    /// Older than the signing key; its tickets are accepted until it retires.
    Previous,
    Retired,
}

/// One key as `GET /api/v1/ticket-keys` lists it (never its secret).
#[derive(Debug, Clone, Serialize)]
pub struct KeyInfo {
    pub generation: i64,
    pub public_key: String,
    pub state: KeyState,
    pub created: chrono::DateTime<chrono::Utc>,
    pub signs_from: chrono::DateTime<chrono::Utc>,
    pub retired: Option<chrono::DateTime<chrono::Utc>>,
}

impl Keyring {
    /// `keys` as the archive lists them; it always holds at least one.
    pub fn new(keys: Vec<TicketKey>) -> Keyring {
        assert!(!keys.is_empty(), "the archive always has a ticket key");
        Keyring { keys }
    }

    fn signing(&self, now_us: i64) -> &TicketKey {
        self.keys
            .iter()
            .rev()
            .find(|key| key.signs_from_us <= now_us)
            .unwrap_or(&self.keys[0])
    }

    /// The key that signs tickets at `now_us`: the newest whose time has come.
    pub fn signer(&self, now_us: i64) -> &TicketSigner {
        &self.signing(now_us).signer
    }

    /// What `key` does at `now_us`, given the generation signing then.
    fn state(key: &TicketKey, signing: i64, now_us: i64) -> KeyState {
        if key
            .retired_us
            .is_some_and(|retired_us| retired_us <= now_us)
        {
            KeyState::Retired
        } else if key.generation == signing {
            KeyState::Signing
        } else if key.generation > signing {
            KeyState::Pending
        } else {
            KeyState::Previous
        }
    }

    /// The public keys (hex) agents should trust at `now_us`: all but the retired.
    pub fn trusted_public_keys(&self, now_us: i64) -> Vec<String> {
        let signing = self.signing(now_us).generation;
        self.keys
            .iter()
            .filter(|key| Self::state(key, signing, now_us) != KeyState::Retired)
            .map(|key| key.signer.public_key_hex())
            .collect()
    }

    pub fn describe(&self, now_us: i64) -> Vec<KeyInfo> {
        let signing = self.signing(now_us).generation;
        self.keys
            .iter()
            .map(|key| KeyInfo {
                generation: key.generation,
                public_key: key.signer.public_key_hex(),
                state: Self::state(key, signing, now_us),
                created: from_us(key.created_us),
                signs_from: from_us(key.signs_from_us),
                retired: key.retired_us.map(from_us),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(generation: i64, signs_from_us: i64, retired_us: Option<i64>) -> TicketKey {
        TicketKey {
            generation,
            signer: TicketSigner::from_secret([generation as u8; 32]),
            created_us: 0,
            signs_from_us,
            retired_us,
        }
    }

    #[test]
    fn a_rotated_key_is_trusted_first_signs_later_and_the_old_one_retires_last() {
        // Generation 2 added at t=100: signs from 160, generation 1 retires at 1000.
        let ring = Keyring::new(vec![key(1, 0, Some(1000)), key(2, 160, None)]);
        let public = |generation: u8| TicketSigner::from_secret([generation; 32]).public_key_hex();
        let states =
            |now| -> Vec<KeyState> { ring.describe(now).iter().map(|info| info.state).collect() };

        assert_eq!(ring.signer(100).public_key_hex(), public(1));
        assert_eq!(states(100), [KeyState::Signing, KeyState::Pending]);
        assert_eq!(ring.trusted_public_keys(100), [public(1), public(2)]);

        assert_eq!(ring.signer(160).public_key_hex(), public(2));
        assert_eq!(states(500), [KeyState::Previous, KeyState::Signing]);
        assert_eq!(ring.trusted_public_keys(999), [public(1), public(2)]);

        assert_eq!(states(1000), [KeyState::Retired, KeyState::Signing]);
        assert_eq!(ring.trusted_public_keys(1000), [public(2)]);
    }

    #[test]
    fn the_first_key_signs_from_the_start() {
        let ring = Keyring::new(vec![key(1, 0, None)]);
        assert_eq!(ring.describe(0)[0].state, KeyState::Signing);
        assert_eq!(ring.trusted_public_keys(0).len(), 1);
    }
}
