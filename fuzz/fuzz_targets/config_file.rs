//! Measurement configurations as `vantage config apply` reads files (TOML or JSON) and
//! the server re-reads the JSON it stored.
//!
//! Properties: any text parses or is refused without a panic, and a refusal names a
//! place (a field path, `.` for the whole document) and a reason; validation reports
//! at least one such problem when it refuses; a configuration that validates still
//! does after the server stores it as JSON and reads it back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vantage_model::config::{parse_config, validate, ConfigError, ConfigFormat, MeasurementConfig};

fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    for format in [ConfigFormat::Toml, ConfigFormat::Json] {
        let config = match parse_config(text, format) {
            Ok(config) => config,
            Err(error) => {
                assert_names_place_and_reason(&error);
                continue;
            }
        };
        match validate(&config) {
            Ok(_) => {
                let stored = serde_json::to_value(&config).expect("a configuration serialises");
                let read_back: MeasurementConfig =
                    serde_json::from_value(stored).expect("the stored document parses");
                if let Err(errors) = validate(&read_back) {
                    panic!("valid until stored as JSON: {errors:?}");
                }
            }
            Err(errors) => {
                assert!(!errors.is_empty(), "refused without a reason");
                errors.iter().for_each(assert_names_place_and_reason);
            }
        }
    }
});

fn assert_names_place_and_reason(error: &ConfigError) {
    assert!(!error.path.is_empty(), "refusal without a place: {error:?}");
    assert!(
        !error.message.is_empty(),
        "refusal without a reason: {error:?}"
    );
}
