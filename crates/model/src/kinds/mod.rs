//! Test kinds: what each measurement is, declared once.
//!
//! A kind (pScheduler calls it a test plug-in) owns its parameters with their one
//! default, their validation, its scheduling class and reservation estimate, who
//! may take part, whether it can be reversed, how to build the engine's typed spec,
//! and the summary metrics it exports to the archive and to `/metrics`. Every
//! kind is one module here plus one line in [`KINDS`]; configuration validation,
//! the agent's dispatch, the archive, `/metrics` and the scheduler read this list
//! instead of matching on kind names.

pub mod capacity;
pub mod capture;
pub mod counters;
pub mod diagnose;
pub mod health;
pub mod latency;
pub mod sandwich;
pub(crate) mod spec;
pub mod throughput;
pub mod trace;

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use spec::{
    Metric, Param, ParamKind, ParamValue, Participants, Service, Spec, Target, TestKind,
    ENDPOINT_PORT, IPERF3_PORT,
};

/// Every test kind vantage knows, in the order help and docs list them.
pub static KINDS: &[&TestKind] = &[
    &latency::KIND,
    &throughput::KIND,
    &capacity::KIND,
    &sandwich::KIND,
    &trace::KIND,
    &health::KIND,
    &diagnose::KIND,
    &counters::KIND,
    &capture::KIND,
];

/// The kind named `name`.
pub fn find(name: &str) -> Option<&'static TestKind> {
    KINDS.iter().copied().find(|kind| kind.name == name)
}

/// Names of all kinds, for messages.
pub fn names() -> Vec<&'static str> {
    KINDS.iter().map(|kind| kind.name).collect()
}

/// Every metric any kind exports, each name once, in [`KINDS`] order.
pub fn metrics() -> Vec<&'static Metric> {
    let mut seen = std::collections::BTreeSet::new();
    KINDS
        .iter()
        .flat_map(|kind| kind.metrics.iter())
        .filter(|metric| seen.insert(metric.name))
        .collect()
}

/// The metric named `name`, whichever kind exports it.
pub fn metric(name: &str) -> Option<&'static Metric> {
    KINDS
        .iter()
        .flat_map(|kind| kind.metrics.iter())
        .find(|metric| metric.name == name)
}

/// A kind by reference, as stored in validated configurations and planned runs;
/// serialises as the kind's name.
#[derive(Clone, Copy, PartialEq)]
pub struct KindRef(pub &'static TestKind);

impl KindRef {
    pub fn named(name: &str) -> Option<KindRef> {
        find(name).map(KindRef)
    }

    pub fn as_str(self) -> &'static str {
        self.0.name
    }
}

impl std::ops::Deref for KindRef {
    type Target = TestKind;
    fn deref(&self) -> &TestKind {
        self.0
    }
}

impl fmt::Debug for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KindRef({})", self.0.name)
    }
}

impl Serialize for KindRef {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.name)
    }
}

impl<'de> Deserialize<'de> for KindRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        KindRef::named(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown test kind '{name}' (known: {})",
                names().join(", ")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;

    #[test]
    fn kind_names_and_metric_names_are_unique_and_defaults_valid() {
        let mut kinds = std::collections::BTreeSet::new();
        let mut metrics = std::collections::BTreeMap::new();
        for kind in KINDS {
            assert!(kinds.insert(kind.name), "kind {} twice", kind.name);
            assert_eq!(find(kind.name).unwrap(), *kind);
            for param in kind.params {
                if let Some(value) = param.default_value() {
                    param.parse(&value).unwrap_or_else(|error| {
                        panic!("{}.{} default: {error}", kind.name, param.name)
                    });
                }
            }
            // The kind's own defaults pass its cross-parameter checks.
            kind.normalise("spec", &Map::new())
                .unwrap_or_else(|errors| panic!("{}: {errors:?}", kind.name));
            for metric in kind.metrics {
                // Empty: derived by the server from several results.
                assert!(
                    metric.pointer.is_empty() || metric.pointer.starts_with('/'),
                    "{}",
                    metric.name
                );
                // A metric name means the same thing wherever it is exported.
                if let Some(previous) = metrics.insert(metric.name, *metric) {
                    assert_eq!(
                        previous, *metric,
                        "{} declared twice differently",
                        metric.name
                    );
                }
            }
        }
    }

    fn kind_word(kind: ParamKind) -> String {
        match kind {
            ParamKind::Duration => "DUR".into(),
            ParamKind::Rate => "BPS".into(),
            ParamKind::Bytes => "size".into(),
            ParamKind::Integer { min, max } => format!("integer {min}…{max}"),
            ParamKind::Ratio => "number 0…1".into(),
            ParamKind::Choice(choices) => choices
                .iter()
                .map(|choice| format!("`{choice}`"))
                .collect::<Vec<_>>()
                .join(", "),
            ParamKind::Flag => "`true`, `false`".into(),
            ParamKind::Text => "string".into(),
        }
    }

    /// The text between `<!-- NAME:start -->` and `<!-- NAME:end -->` in a doc.
    fn doc_section(doc: &str, name: &str) -> String {
        let start = format!("<!-- {name}:start -->\n");
        let from = doc.find(&start).expect("start marker") + start.len();
        let to = doc[from..]
            .find(&format!("<!-- {name}:end -->"))
            .expect("end marker");
        doc[from..from + to].to_string()
    }

    /// docs/config.md's parameter table is this registry's, row for row.
    #[test]
    fn config_doc_lists_every_parameter_with_its_default() {
        let mut table =
            String::from("| type | key | accepts | default | meaning |\n|---|---|---|---|---|\n");
        for kind in KINDS {
            for (index, param) in kind.params.iter().enumerate() {
                let default = match (param.default, param.unless) {
                    (Some(default), Some(other)) => format!("`{default}` (not with `{other}`)"),
                    (Some(default), None) => format!("`{default}`"),
                    (None, _) => String::new(),
                };
                table.push_str(&format!(
                    "| {} | `{}` | {} | {default} | {} |\n",
                    if index == 0 { kind.name } else { "" },
                    param.name,
                    kind_word(param.kind),
                    param.help
                ));
            }
        }
        let doc = include_str!("../../../../docs/config.md");
        assert_eq!(
            doc_section(doc, "kinds-params"),
            table,
            "docs/config.md's parameter table is out of date; it should read:\n{table}"
        );
    }

    /// docs/api.md's metric table is every kind's declared metrics.
    #[test]
    fn api_doc_lists_every_metric_and_family() {
        let mut table = String::from(
            "| metric | test | from the result document | exposition family | meaning |\n|---|---|---|---|---|\n",
        );
        for kind in KINDS {
            for metric in kind.metrics {
                table.push_str(&format!(
                    "| `{}` | {} | `{}` | `{}` | {} |\n",
                    metric.name, kind.name, metric.pointer, metric.family, metric.help
                ));
            }
        }
        let doc = include_str!("../../../../docs/api.md");
        assert_eq!(
            doc_section(doc, "kinds-metrics"),
            table,
            "docs/api.md's metric table is out of date; it should read:\n{table}"
        );
    }

    /// The trace engine's own defaults (used by `TraceSpec::new`) are the kind's.
    #[test]
    fn trace_defaults_are_the_engines() {
        let defaults = Map::new();
        let target = Target {
            host: "h".into(),
            port: 0,
        };
        let spec = trace::engine_spec(&Spec::new(&trace::KIND, &defaults), &target).unwrap();
        assert_eq!(spec, crate::trace::TraceSpec::new("h"));
    }

    #[test]
    fn kind_ref_round_trips_by_name_and_refuses_unknown_kinds() {
        let kind: KindRef = serde_json::from_str("\"capacity\"").unwrap();
        assert_eq!(kind.as_str(), "capacity");
        assert_eq!(serde_json::to_string(&kind).unwrap(), "\"capacity\"");
        let error = serde_json::from_str::<KindRef>("\"teleport\"").unwrap_err();
        assert!(error.to_string().contains("known: latency"), "{error}");
    }

    #[test]
    fn targets_parse_with_and_without_ports() {
        let parse = |text| Target::parse(text, Some(5201));
        assert_eq!(parse("iperf.example.net").unwrap().port, 5201);
        assert_eq!(
            parse("h:7862").unwrap(),
            Target {
                host: "h".into(),
                port: 7862
            }
        );
        assert_eq!(
            parse("[::1]:9").unwrap(),
            Target {
                host: "::1".into(),
                port: 9
            }
        );
        assert_eq!(
            parse("::1").unwrap(),
            Target {
                host: "::1".into(),
                port: 5201
            }
        );
        assert_eq!(Target::parse("10.0.0.1", None).unwrap().port, 0);
        for bad in ["", "h:0", "h:x", "[::1", "[::1]x", ":80", "a b"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn metrics_read_numbers_and_flags_by_pointer() {
        let result = serde_json::json!({"summary": {"rtt_us": {"median": 12.5}, "reached": true}});
        let metric = |pointer| Metric {
            name: "x",
            pointer,
            family: "x",
            unit: "",
            scale: 1.0,
            help: "",
        };
        assert_eq!(
            metric("/summary/rtt_us/median").extract(&result),
            Some(12.5)
        );
        assert_eq!(metric("/summary/reached").extract(&result), Some(1.0));
        assert_eq!(metric("/summary/nothing").extract(&result), None);
    }
}
