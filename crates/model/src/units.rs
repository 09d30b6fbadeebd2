//! Parsing and printing of the CLI's unit syntaxes.
//!
//! `DUR` is a number with a unit (`500us`, `5ms`, `3s`, `1m`, `2h`); `BPS` is a
//! bit rate with an optional SI prefix (`100M`, `1G`, `2.5k`, `800000`);
//! byte sizes accept binary prefixes (`64K` = 65 536, `8M`, `1G`).

use std::time::Duration;

/// Why a unit string was rejected; the message names the input and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} '{input}': {reason}")]
pub struct UnitError {
    pub kind: &'static str,
    pub input: String,
    pub reason: String,
}

fn unit_error(kind: &'static str, input: &str, reason: impl Into<String>) -> UnitError {
    UnitError {
        kind,
        input: input.to_string(),
        reason: reason.into(),
    }
}

/// Splits `"12.5ms"` into `(12.5, "ms")`, rejecting empty, negative and non-finite numbers.
fn split_number<'a>(kind: &'static str, input: &'a str) -> Result<(f64, &'a str), UnitError> {
    let trimmed = input.trim();
    let split_at = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(split_at);
    if number.is_empty() {
        return Err(unit_error(kind, input, "expected a number first"));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| unit_error(kind, input, format!("'{number}' is not a number")))?;
    if !value.is_finite() {
        return Err(unit_error(kind, input, "number out of range"));
    }
    Ok((value, suffix.trim()))
}

/// Parses a duration such as `5ms`, `3s`, `1m`, `250us`, `2h`, `1.5s`.
/// A bare number is refused: the unit must be explicit to avoid 1000x mistakes.
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    const KIND: &str = "duration";
    let (value, suffix) = split_number(KIND, input)?;
    let seconds_per_unit = match suffix {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "" => {
            return Err(unit_error(
                KIND,
                input,
                "missing unit (use ns, us, ms, s, m or h, e.g. 5ms)",
            ))
        }
        other => {
            return Err(unit_error(
                KIND,
                input,
                format!("unknown unit '{other}' (use ns, us, ms, s, m or h)"),
            ))
        }
    };
    let seconds = value * seconds_per_unit;
    if seconds > 1e9 {
        return Err(unit_error(KIND, input, "too long"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses a bit rate in bits per second: `100M`, `1G`, `2.5k`, `64000`, `10Mbps`.
/// Prefixes are decimal (SI), as network rates are.
pub fn parse_rate_bps(input: &str) -> Result<u64, UnitError> {
    const KIND: &str = "rate";
    let (value, suffix) = split_number(KIND, input)?;
    let prefix = suffix
        .strip_suffix("bps")
        .or_else(|| suffix.strip_suffix("bit"))
        .or_else(|| suffix.strip_suffix("b"))
        .unwrap_or(suffix);
    let multiplier = match prefix {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        "G" | "g" => 1e9,
        "T" | "t" => 1e12,
        "m" => {
            return Err(unit_error(
                KIND,
                input,
                "'m' would mean milli; write M for mega (e.g. 100M)",
            ))
        }
        other => {
            return Err(unit_error(
                KIND,
                input,
                format!("unknown prefix '{other}' (use k, M, G or T, bits per second)"),
            ))
        }
    };
    let bps = value * multiplier;
    if !(1.0..=1e15).contains(&bps) {
        return Err(unit_error(
            KIND,
            input,
            "must be between 1 bit/s and 1 Pbit/s",
        ));
    }
    Ok(bps.round() as u64)
}

/// Parses a byte count: `1400`, `64K`, `8M`, `1G` (binary prefixes, as socket buffers are).
pub fn parse_bytes(input: &str) -> Result<u64, UnitError> {
    const KIND: &str = "size";
    let (value, suffix) = split_number(KIND, input)?;
    let prefix = suffix
        .strip_suffix("iB")
        .or_else(|| suffix.strip_suffix('B'))
        .unwrap_or(suffix);
    let multiplier = match prefix {
        "" => 1.0,
        "k" | "K" => 1024.0,
        "M" => 1024.0 * 1024.0,
        "G" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(unit_error(
                KIND,
                input,
                format!("unknown prefix '{other}' (use K, M or G)"),
            ))
        }
    };
    let bytes = value * multiplier;
    if bytes > 1e15 {
        return Err(unit_error(KIND, input, "too large"));
    }
    Ok(bytes.round() as u64)
}

/// Formats a rate for humans: `941.2 Mbit/s`.
pub fn format_rate_bps(bps: f64) -> String {
    let (value, unit) = if bps >= 1e9 {
        (bps / 1e9, "Gbit/s")
    } else if bps >= 1e6 {
        (bps / 1e6, "Mbit/s")
    } else if bps >= 1e3 {
        (bps / 1e3, "kbit/s")
    } else {
        (bps, "bit/s")
    };
    format!("{value:.1} {unit}")
}

/// Formats microseconds for humans, choosing µs or ms.
pub fn format_us(us: f64) -> String {
    if us.abs() >= 10_000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("5ms").unwrap(), Duration::from_millis(5));
        assert_eq!(parse_duration("3s").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
    }

    #[test]
    fn durations_without_unit_or_garbage_are_refused() {
        assert!(parse_duration("5")
            .unwrap_err()
            .reason
            .contains("missing unit"));
        assert!(parse_duration("ms").unwrap_err().reason.contains("number"));
        assert!(parse_duration("5parsecs")
            .unwrap_err()
            .reason
            .contains("unknown unit"));
        assert!(parse_duration("-5ms").is_err());
    }

    #[test]
    fn rates_parse_decimal_prefixes() {
        assert_eq!(parse_rate_bps("100M").unwrap(), 100_000_000);
        assert_eq!(parse_rate_bps("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate_bps("2.5k").unwrap(), 2_500);
        assert_eq!(parse_rate_bps("64000").unwrap(), 64_000);
        assert_eq!(parse_rate_bps("10Mbps").unwrap(), 10_000_000);
        assert!(parse_rate_bps("100m").unwrap_err().reason.contains("milli"));
        assert!(parse_rate_bps("0").is_err());
    }

    #[test]
    fn bytes_parse_binary_prefixes() {
        assert_eq!(parse_bytes("1400").unwrap(), 1400);
        assert_eq!(parse_bytes("64K").unwrap(), 65_536);
        assert_eq!(parse_bytes("8M").unwrap(), 8 * 1024 * 1024);
        assert!(parse_bytes("8X").is_err());
    }

    #[test]
    fn formatting_picks_readable_units() {
        assert_eq!(format_rate_bps(941_200_000.0), "941.2 Mbit/s");
        assert_eq!(format_us(123.44), "123.4 µs");
        assert_eq!(format_us(40_123.0), "40.12 ms");
    }
}
