//! The pieces a test kind is made of: parameters and their parsing, the spec
//! reader, metrics, services and targets. Kind modules build their `KIND` from these;
//! the registry (`kinds::KINDS`) lists the kinds.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::config_error::ConfigError;
use crate::scheduling::SchedulingClass;
use crate::units::{parse_bytes, parse_duration, parse_rate_bps};

/// Port of `vantage endpoint` (UDP reflector and TCP service).
pub const ENDPOINT_PORT: u16 = 7862;
/// Port of iperf3's server (`iperf3 -s`, and the endpoint's iperf3-compatible listener).
pub const IPERF3_PORT: u16 = 5201;

/// What a parameter accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamKind {
    /// DUR string such as `100ms`.
    Duration,
    /// BPS string such as `100M`, or an integer of bits per second.
    Rate,
    /// Size string such as `64K`, or an integer of bytes.
    Bytes,
    Integer {
        min: u64,
        max: u64,
    },
    /// A number between 0 and 1.
    Ratio,
    Choice(&'static [&'static str]),
    Flag,
    Text,
}

impl ParamKind {
    fn describe(self) -> &'static str {
        match self {
            ParamKind::Duration => "a duration such as \"100ms\"",
            ParamKind::Rate => "a rate such as \"100M\"",
            ParamKind::Bytes => "a size such as 1400 or \"64K\"",
            ParamKind::Integer { .. } => "an integer",
            ParamKind::Ratio => "a number between 0 and 1",
            ParamKind::Choice(_) => "one of the listed words",
            ParamKind::Flag => "true or false",
            ParamKind::Text => "a string",
        }
    }
}

/// One parameter of a kind: its name in the configuration (the CLI's long option
/// without dashes, `_` for `-`), what it accepts, and its one default.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub kind: ParamKind,
    /// The default as it would be written in a configuration; `None` when the
    /// parameter is off unless given.
    pub default: Option<&'static str>,
    /// The default does not apply when this other parameter is given (a transfer
    /// bounded by `bytes` has no default `duration`).
    pub unless: Option<&'static str>,
    pub help: &'static str,
}

impl Param {
    pub const fn new(
        name: &'static str,
        kind: ParamKind,
        default: Option<&'static str>,
        help: &'static str,
    ) -> Param {
        Param {
            name,
            kind,
            default,
            unless: None,
            help,
        }
    }

    pub const fn unless(mut self, other: &'static str) -> Param {
        self.unless = Some(other);
        self
    }
}

/// A parameter's value, parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Duration(Duration),
    Rate(u64),
    Bytes(u64),
    Integer(u64),
    Ratio(f64),
    Choice(String),
    Flag(bool),
    Text(String),
}

impl Param {
    /// Parses a value as written in a configuration or request.
    pub fn parse(&self, value: &Value) -> Result<ParamValue, String> {
        match (self.kind, value) {
            (ParamKind::Duration, Value::String(text)) => parse_duration(text)
                .map(ParamValue::Duration)
                .map_err(|e| e.to_string()),
            (ParamKind::Rate, Value::String(text)) => parse_rate_bps(text)
                .map(ParamValue::Rate)
                .map_err(|e| e.to_string()),
            (ParamKind::Rate, Value::Number(number)) => match number.as_u64() {
                Some(bps) if bps >= 1 => Ok(ParamValue::Rate(bps)),
                _ => Err(format!(
                    "rate {number} must be a positive integer of bits/s or a BPS such as 100M"
                )),
            },
            (ParamKind::Bytes, Value::String(text)) => parse_bytes(text)
                .map(ParamValue::Bytes)
                .map_err(|e| e.to_string()),
            (ParamKind::Bytes, Value::Number(number)) => number.as_u64().map(ParamValue::Bytes).ok_or_else(|| {
                format!("size {number} must be a non-negative integer of bytes or a size such as 64K")
            }),
            (ParamKind::Integer { min, max }, Value::Number(number)) => match number.as_u64() {
                Some(n) if (min..=max).contains(&n) => Ok(ParamValue::Integer(n)),
                _ => Err(format!(
                    "{number} is out of range: expected an integer from {min} to {max}"
                )),
            },
            (ParamKind::Ratio, Value::Number(number)) => match number.as_f64() {
                Some(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ParamValue::Ratio(ratio)),
                _ => Err(format!("{number} is not a ratio between 0 and 1")),
            },
            (ParamKind::Choice(choices), Value::String(text))
                if choices.contains(&text.as_str()) =>
            {
                Ok(ParamValue::Choice(text.clone()))
            }
            (ParamKind::Choice(choices), other) => {
                Err(format!("{other} is not one of {}", choices.join(", ")))
            }
            (ParamKind::Flag, Value::Bool(flag)) => Ok(ParamValue::Flag(*flag)),
            (ParamKind::Text, Value::String(text)) => Ok(ParamValue::Text(text.clone())),
            (kind, other) => Err(format!("expected {}, got {other}", kind.describe())),
        }
    }

    /// The default as a JSON value of the type a configuration would use.
    pub(crate) fn default_value(&self) -> Option<Value> {
        let text = self.default?;
        Some(match self.kind {
            ParamKind::Integer { .. } => Value::from(text.parse::<u64>().expect("integer default")),
            ParamKind::Ratio => Value::from(text.parse::<f64>().expect("ratio default")),
            ParamKind::Flag => Value::from(text == "true"),
            _ => Value::from(text),
        })
    }
}

/// The service of a target that a run talks to, which decides the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// `vantage endpoint` (UDP reflector, TCP service): an agent's endpoint port,
    /// else 7862.
    Endpoint,
    /// An iperf3 server: an agent's iperf3-compatible listener, else 5201.
    Iperf3,
    /// No port at all (ICMP).
    Portless,
}

impl Service {
    /// The port of an external host that names none.
    pub fn default_port(self) -> Option<u16> {
        match self {
            Service::Endpoint => Some(ENDPOINT_PORT),
            Service::Iperf3 => Some(IPERF3_PORT),
            Service::Portless => None,
        }
    }
}

/// Who takes part in a run of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Participants {
    /// A client and the target it measures (an agent or an external host).
    Pair,
    /// One agent on its own (it reads its own interfaces): each agent of a task's group
    /// runs once per occurrence, with no target, and the run claims only that agent.
    Alone,
}

/// A summary metric a kind exports: where it is in the result document, and how
/// it appears in the Prometheus exposition (`/metrics`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metric {
    /// The archive's and query API's name; the unit is in the name.
    pub name: &'static str,
    /// JSON pointer into the result document (RFC 6901); empty for a metric the
    /// server derives from several results (an ingest consumer stores it).
    pub pointer: &'static str,
    /// Exposition family name, in Prometheus's base units: seconds, ratios, and
    /// bytes for data (rates in bytes per second; promtool refuses bits).
    pub family: &'static str,
    /// OpenMetrics unit, the family name's suffix (empty for counts).
    pub unit: &'static str,
    /// Multiplier from the archive's unit to the family's unit.
    pub scale: f64,
    pub help: &'static str,
}

impl Metric {
    /// The metric's value in a result document, if present and numeric.
    pub fn extract(&self, result: &Value) -> Option<f64> {
        if self.pointer.is_empty() {
            return None;
        }
        match value_at(result, self.pointer)? {
            Value::Bool(flag) => Some(f64::from(u8::from(*flag))),
            value => value.as_f64().filter(|number| number.is_finite()),
        }
    }
}

/// The value at a JSON pointer (RFC 6901), as `Value::pointer` finds it. That one
/// copies every token into a new string to unescape it; a kind's metrics are read from
/// every result stored (twenty thousand a second at a thousand agents), and their
/// tokens have nothing to unescape, so a token is copied only when it has.
fn value_at<'v>(document: &'v Value, pointer: &str) -> Option<&'v Value> {
    if pointer.is_empty() {
        return Some(document);
    }
    pointer
        .strip_prefix('/')?
        .split('/')
        .try_fold(document, |value, token| {
            let token: Cow<str> = if token.contains('~') {
                Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
            } else {
                Cow::Borrowed(token)
            };
            match value {
                Value::Object(map) => map.get(token.as_ref()),
                Value::Array(items) => array_index(&token).and_then(|index| items.get(index)),
                _ => None,
            }
        })
}

/// An array index token: decimal digits without a leading zero (RFC 6901, 4).
fn array_index(token: &str) -> Option<usize> {
    if token.is_empty()
        || !token.bytes().all(|byte| byte.is_ascii_digit())
        || (token.len() > 1 && token.starts_with('0'))
    {
        return None;
    }
    token.parse().ok()
}

/// A test kind: everything the layers above need to know about one measurement.
#[derive(Debug)]
pub struct TestKind {
    pub name: &'static str,
    /// One line for help and docs, naming the method and its source.
    pub summary: &'static str,
    pub params: &'static [Param],
    pub participants: Participants,
    /// How runs with this spec claim resources unless a test says otherwise
    /// (pScheduler's convention: bulk transfers hold their hosts alone; light
    /// probes share).
    pub scheduling: fn(&Spec<'_>) -> SchedulingClass,
    /// Whether the target can be made the sender (`reverse`), so a run between an
    /// agent behind NAT and a reachable one keeps its direction.
    pub reversible: bool,
    /// Whether runs transfer bulk data to or from the target's endpoint, which an
    /// agent's endpoint allows only with a ticket for the run.
    pub bulk_transfer: bool,
    /// Which service of the target a run with this spec talks to.
    pub service: fn(&Spec<'_>) -> Service,
    /// Test time of a run with this spec (without the setup guard); `None` when it
    /// cannot be known (a byte-bounded transfer), so `reserve` must be given.
    pub estimate: fn(&Spec<'_>) -> Option<Duration>,
    /// Checks across parameters (one parameter at a time is checked by [`Param::parse`]).
    pub check: fn(&Spec<'_>) -> Result<(), ConfigError>,
    pub metrics: &'static [Metric],
}

impl TestKind {
    /// The service a run of this kind with `spec` (a stored or configured spec object;
    /// anything else counts as empty) talks to on its server.
    pub fn service_for(&'static self, spec: &Value) -> Service {
        let empty = Map::new();
        (self.service)(&Spec::new(self, spec.as_object().unwrap_or(&empty)))
    }

    /// How a run with this normalised spec claims resources by default.
    pub fn scheduling_for(&'static self, spec: &Map<String, Value>) -> SchedulingClass {
        (self.scheduling)(&Spec::new(self, spec))
    }

    /// The summary metrics present in one of this kind's result documents.
    pub fn summary(&self, result: &Value) -> Vec<(&'static str, f64)> {
        self.metrics
            .iter()
            .filter_map(|metric| Some((metric.name, metric.extract(result)?)))
            .collect()
    }

    /// [`TestKind::normalise`] of a JSON object, as the kinds' tests write specs.
    #[cfg(test)]
    pub(crate) fn normalise_json(
        &'static self,
        given: Value,
    ) -> Result<Map<String, Value>, Vec<ConfigError>> {
        self.normalise("spec", given.as_object().expect("a spec is an object"))
    }

    pub fn param(&self, name: &str) -> Option<&'static Param> {
        self.params.iter().find(|param| param.name == name)
    }

    /// Checks `given` parameters (each with its path under `spec_path`), fills in
    /// every default, and returns the normalised spec, or every problem found.
    pub fn normalise(
        &'static self,
        spec_path: &str,
        given: &Map<String, Value>,
    ) -> Result<Map<String, Value>, Vec<ConfigError>> {
        let mut errors = Vec::new();
        for (key, value) in given {
            match self.param(key) {
                Some(param) => {
                    if let Err(message) = param.parse(value) {
                        errors.push(ConfigError::new(format!("{spec_path}.{key}"), message));
                    }
                }
                None => errors.push(ConfigError::new(
                    format!("{spec_path}.{key}"),
                    format!(
                        "unknown {} parameter '{key}' (known: {})",
                        self.name,
                        self.params
                            .iter()
                            .map(|param| param.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let mut spec = given.clone();
        for param in self.params {
            let overridden = param.unless.is_some_and(|other| given.contains_key(other));
            if let (false, false, Some(default)) = (
                spec.contains_key(param.name),
                overridden,
                param.default_value(),
            ) {
                spec.insert(param.name.to_string(), default);
            }
        }
        let view = Spec {
            kind: self,
            values: &spec,
            given,
        };
        (self.check)(&view).map_err(|error| {
            vec![ConfigError::new(
                format!("{spec_path}.{}", error.path),
                error.message,
            )]
        })?;
        Ok(spec)
    }
}

impl PartialEq for TestKind {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl fmt::Display for TestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// A spec's parameters read through its kind: given values, else the kind's
/// default. Errors name the parameter (`interval: …`); callers add their prefix.
pub struct Spec<'a> {
    kind: &'static TestKind,
    values: &'a Map<String, Value>,
    /// What was written, before defaults (cross-parameter checks need to know).
    given: &'a Map<String, Value>,
}

impl<'a> Spec<'a> {
    /// Reads a spec as the agent receives it (already normalised by the server).
    pub fn new(kind: &'static TestKind, values: &'a Map<String, Value>) -> Spec<'a> {
        Spec {
            kind,
            values,
            given: values,
        }
    }

    /// Whether the parameter was written (not just defaulted).
    pub fn given(&self, name: &str) -> bool {
        self.given.contains_key(name)
    }

    fn value(&self, name: &str) -> Result<Option<ParamValue>, ConfigError> {
        let param = self
            .kind
            .param(name)
            .unwrap_or_else(|| panic!("{} has no parameter '{name}'", self.kind.name));
        let overridden = param
            .unless
            .is_some_and(|other| self.values.contains_key(other));
        let value = match self.values.get(name) {
            Some(value) => value.clone(),
            None => match param.default_value().filter(|_| !overridden) {
                Some(value) => value,
                None => return Ok(None),
            },
        };
        param
            .parse(&value)
            .map(Some)
            .map_err(|message| ConfigError::new(name, message))
    }

    pub fn duration(&self, name: &str) -> Result<Option<Duration>, ConfigError> {
        Ok(match self.value(name)? {
            Some(ParamValue::Duration(duration)) => Some(duration),
            _ => None,
        })
    }

    /// A duration in microseconds.
    pub fn duration_us(&self, name: &str) -> Result<Option<u64>, ConfigError> {
        self.duration(name)?
            .map(|duration| {
                u64::try_from(duration.as_micros())
                    .map_err(|_| ConfigError::new(name, "duration too long"))
            })
            .transpose()
    }

    /// A number: integer, size (bytes) or rate (bits/s).
    pub fn number(&self, name: &str) -> Result<Option<u64>, ConfigError> {
        Ok(match self.value(name)? {
            Some(ParamValue::Integer(n) | ParamValue::Bytes(n) | ParamValue::Rate(n)) => Some(n),
            _ => None,
        })
    }

    /// A number that must fit 32 bits.
    pub fn number_u32(&self, name: &str) -> Result<Option<u32>, ConfigError> {
        self.number(name)?
            .map(|n| {
                u32::try_from(n).map_err(|_| ConfigError::new(name, format!("{n} is too large")))
            })
            .transpose()
    }

    pub fn ratio(&self, name: &str) -> Result<Option<f64>, ConfigError> {
        Ok(match self.value(name)? {
            Some(ParamValue::Ratio(ratio)) => Some(ratio),
            _ => None,
        })
    }

    /// A choice or text parameter.
    pub fn text(&self, name: &str) -> Result<Option<String>, ConfigError> {
        Ok(match self.value(name)? {
            Some(ParamValue::Choice(text) | ParamValue::Text(text)) => Some(text),
            _ => None,
        })
    }

    pub fn flag(&self, name: &str) -> Result<bool, ConfigError> {
        Ok(matches!(self.value(name)?, Some(ParamValue::Flag(true))))
    }

    /// For parameters with a default: the value, which is then always present.
    pub fn required<T>(
        &self,
        name: &str,
        read: impl Fn(&Self, &str) -> Result<Option<T>, ConfigError>,
    ) -> Result<T, ConfigError> {
        read(self, name)?.ok_or_else(|| ConfigError::new(name, "missing"))
    }
}

/// No cross-parameter rules.
pub(crate) fn no_check(_: &Spec<'_>) -> Result<(), ConfigError> {
    Ok(())
}

/// Durations read for estimates: defaults make them present.
pub(crate) fn duration_or_zero(spec: &Spec<'_>, name: &str) -> Duration {
    spec.duration(name).ok().flatten().unwrap_or_default()
}

/// Probing kinds: `count` probes `interval` apart, plus the wait for the last answer.
pub(crate) fn probing_time(spec: &Spec<'_>) -> Option<Duration> {
    let count = spec.number_u32("count").ok().flatten().unwrap_or(1);
    Some(duration_or_zero(spec, "interval") * count + duration_or_zero(spec, "timeout"))
}

/// Where a run's target is: the host and port the engine connects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    /// 0 for portless services (ICMP).
    pub port: u16,
}

impl Target {
    /// Parses `HOST`, `HOST:PORT`, `[IPv6]:PORT` or a bare IPv6 address; a target
    /// without a port gets `default_port` (0 when the service has none).
    pub fn parse(text: &str, default_port: Option<u16>) -> Result<Target, String> {
        let text = text.trim();
        let invalid = |why: &str| Err(format!("'{text}' is not HOST or HOST:PORT ({why})"));
        if text.is_empty() {
            return invalid("empty");
        }
        if text.chars().any(|c| c.is_whitespace() || c == '/') {
            return invalid("spaces and '/' are not allowed");
        }
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            match rest.split_once(']') {
                Some((host, "")) => (host, None),
                Some((host, port)) => match port.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None => return invalid("junk after ']'"),
                },
                None => return invalid("missing ']'"),
            }
        } else if text.matches(':').count() > 1 {
            (text, None) // a bare IPv6 address
        } else {
            match text.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            }
        };
        if host.is_empty() {
            return invalid("no host");
        }
        let port = match port {
            Some(port) => match port.parse::<u16>() {
                Ok(port) if port > 0 => port,
                _ => return invalid("the port must be 1-65535"),
            },
            None => default_port.unwrap_or(0),
        };
        Ok(Target {
            host: host.to_string(),
            port,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::value_at;

    #[test]
    fn a_pointer_finds_what_serde_json_finds() {
        let document = json!({
            "summary": {"rtt_us": {"p50": 812.5}, "lost": 0},
            "a/b": {"m~n": 1},
            "samples": [10, 20, {"x": 3}],
            "": {"": 4},
        });
        for pointer in [
            "",
            "/summary/rtt_us/p50",
            "/summary/lost",
            "/summary/missing",
            "/a~1b/m~0n",
            "/samples/1",
            "/samples/2/x",
            "/samples/01",
            "/samples/+1",
            "/samples/3",
            "/samples/x",
            "/summary/lost/deeper",
            "//",
            "no-slash",
        ] {
            assert_eq!(
                value_at(&document, pointer),
                document.pointer(pointer),
                "pointer {pointer:?}"
            );
        }
    }
}
