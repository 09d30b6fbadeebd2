//! A test's spec, shared by its runs and written as JSON from text made once.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// A test's spec object (its parameters, e.g. `count`, `interval`), shared (not copied)
/// by every run of the test, with its JSON text made once. A thousand-agent mesh hands
/// out, stores and answers tens of thousands of runs a second, each carrying its
/// test's spec: written from a value, each walked the same map again. Reads as the
/// [`Value`] (`Deref`); equal when the values are.
#[derive(Clone)]
pub struct SharedSpec(Arc<Parts>);

struct Parts {
    value: Value,
    text: Box<RawValue>,
}

impl SharedSpec {
    pub fn new(value: Value) -> SharedSpec {
        // A `Value` always serializes: its maps' keys are strings.
        let text = serde_json::value::to_raw_value(&value).expect("a JSON value serializes");
        SharedSpec(Arc::new(Parts { value, text }))
    }

    /// The spec as compact JSON text, as `Value`'s `Display` writes it.
    pub fn text(&self) -> &str {
        self.0.text.get()
    }
}

impl From<Value> for SharedSpec {
    fn from(value: Value) -> SharedSpec {
        SharedSpec::new(value)
    }
}

impl Deref for SharedSpec {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.0.value
    }
}

impl PartialEq for SharedSpec {
    fn eq(&self, other: &SharedSpec) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.value == other.0.value
    }
}

impl fmt::Debug for SharedSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.value.fmt(f)
    }
}

impl Serialize for SharedSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.text.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SharedSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SharedSpec, D::Error> {
        Value::deserialize(deserializer).map(SharedSpec::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_and_reads_the_same_json_as_its_value() {
        let value = json!({"count": 10, "interval": "1s", "sizes": [64, 1500], "note": "a \"b\""});
        let spec = SharedSpec::new(value.clone());
        let text = serde_json::to_string(&spec).unwrap();
        assert_eq!(text, serde_json::to_string(&value).unwrap());
        assert_eq!(spec.text(), value.to_string());
        assert_eq!(serde_json::to_value(&spec).unwrap(), value);
        let back: SharedSpec = serde_json::from_str(&text).unwrap();
        assert_eq!(back, spec);
        assert_eq!(back["count"], 10);
        // Inside another document, as a run's field.
        let run = json!({"run_id": "r", "spec": spec.clone()});
        assert_eq!(run["spec"], value);
        assert_ne!(SharedSpec::new(json!({"count": 11})), spec);
    }
}
