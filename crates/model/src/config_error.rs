//! One problem in a configuration or a test's parameters, with its path.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One problem in a configuration: the path of the bad field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigError {
    /// Such as `tasks[2].every` or `tests[0].spec.count`; `.` for the whole document.
    pub path: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// What [`is_valid_name`] allows, in words.
pub const NAME_RULE: &str = "use 1-64 characters from a-z, A-Z, 0-9, '-', '_', '.'";

/// Names are used in run ids and URLs: keep them to a safe alphabet ([`NAME_RULE`]).
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

pub(crate) fn check_name(path: &str, name: &str, errors: &mut Vec<ConfigError>) -> bool {
    let valid = is_valid_name(name);
    if !valid {
        errors.push(ConfigError::new(
            format!("{path}.name"),
            format!("invalid name '{name}': {NAME_RULE}"),
        ));
    }
    valid
}
