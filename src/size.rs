//! Byte sizes as people write them (`69GiB`, `70GB`, `512MiB`, `1.5GiB`, `1234`) and the
//! `--ceiling` value, which may also be a percentage of the model's predicted footprint (`90%`).
//!
//! Rules: a size is a decimal number (`12` or `1.5`, no sign, no exponent) and an optional unit,
//! binary (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB), `B` optional; a bare `K`/`M`/`G`/`T`
//! is refused as ambiguous. Arithmetic is exact (integers, no floats); a fractional byte count
//! rounds down. A ceiling is positive; a percentage lies in (0, 100].

use std::fmt;

/// Parse a size in bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty size: give e.g. 69GiB, 70GB, 512MiB or a byte count".into());
    }
    if t.starts_with(['+', '-']) {
        return Err(format!("`{s}`: a size takes no sign (write e.g. 69GiB)"));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    if num.is_empty() {
        return Err(format!("`{s}`: no number before the unit"));
    }
    if unit.starts_with(['e', 'E'])
        && unit[1..].starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+')
    {
        return Err(format!(
            "`{s}`: exponents are not accepted; write the number out or use a unit (1e9 = 1GB)"
        ));
    }
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "k" | "m" | "g" | "t" | "ki" | "mi" | "gi" | "ti" => {
            let p = unit[..1].to_ascii_uppercase();
            return Err(format!(
                "`{s}`: the unit `{unit}` is ambiguous: did you mean {num}{p}iB or {num}{p}B?"
            ));
        }
        _ => {
            return Err(format!(
                "`{s}`: unknown unit `{unit}` (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() || frac.contains('.') || (num.contains('.') && frac.is_empty()) {
        return Err(format!("`{s}`: `{num}` is not a decimal number"));
    }
    if frac.len() > 18 {
        return Err(format!("`{s}`: more than 18 decimal places"));
    }
    let out_of_range = || format!("`{s}` is out of range (at most 2^64 - 1 bytes)");
    let int: u128 = int.parse().map_err(|_| out_of_range())?;
    let frac_value: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| out_of_range())?
    };
    let scale = 10u128.pow(frac.len() as u32);
    let bytes = int
        .checked_mul(mult as u128)
        .and_then(|b| b.checked_add(frac_value * mult as u128 / scale))
        .ok_or_else(out_of_range)?;
    u64::try_from(bytes).map_err(|_| out_of_range())
}

/// What `--ceiling` says: bytes, or a share of the predicted footprint of the unmodified graph
/// (its ledger total).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CeilingSpec {
    Bytes(u64),
    PercentOfFootprint(f64),
}

impl CeilingSpec {
    /// Parse `90%`, `69GiB`, `70GB`, `512MiB`, `1.5GiB` or a byte count.
    pub fn parse(s: &str) -> Result<CeilingSpec, String> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let p = p.trim();
            let plain = !p.is_empty()
                && p.chars().all(|c| c.is_ascii_digit() || c == '.')
                && p.matches('.').count() <= 1
                && !p.starts_with('.')
                && !p.ends_with('.');
            let v: f64 = if plain {
                p.parse()
                    .map_err(|_| format!("`{s}`: `{p}` is not a number"))?
            } else {
                return Err(format!(
                    "`{s}`: a percentage is a plain number in (0, 100], e.g. 90%"
                ));
            };
            if !(v > 0.0 && v <= 100.0) {
                return Err(format!(
                    "`{s}`: a percentage of the footprint must lie in (0, 100]"
                ));
            }
            return Ok(CeilingSpec::PercentOfFootprint(v));
        }
        match parse_size(t)? {
            0 => Err(format!("`{s}`: the ceiling must be positive")),
            b => Ok(CeilingSpec::Bytes(b)),
        }
    }

    /// The ceiling in bytes, given the predicted footprint (ledger total) of the unmodified
    /// graph; a percentage rounds down.
    pub fn resolve(&self, footprint_bytes: u64) -> u64 {
        match *self {
            CeilingSpec::Bytes(b) => b,
            CeilingSpec::PercentOfFootprint(p) => {
                // Exact for the percentages people write (up to 6 decimals).
                let millionths = (p * 1e6).round() as u128;
                (footprint_bytes as u128 * millionths / 100_000_000) as u64
            }
        }
    }
}

impl fmt::Display for CeilingSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CeilingSpec::Bytes(b) => write!(f, "{b}"),
            CeilingSpec::PercentOfFootprint(p) => write!(f, "{p}%"),
        }
    }
}

pub use ckpt_planner::human;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("69GiB"), Ok(69 << 30));
        assert_eq!(parse_size("70GB"), Ok(70_000_000_000));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1234"), Ok(1234));
        assert_eq!(parse_size("1.5 KiB"), Ok(1536));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("0.1KB"), Ok(100));
        assert_eq!(parse_size("12b"), Ok(12));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 29), "1.50 GiB");
    }

    #[test]
    fn refused_sizes_say_why() {
        for (s, why) in [
            ("12 parsecs", "unknown unit"),
            ("GiB", "no number"),
            ("-5", "no sign"),
            ("-5GiB", "no sign"),
            ("+5GiB", "no sign"),
            ("1e9", "exponents"),
            ("1E9", "exponents"),
            ("69G", "did you mean 69GiB or 69GB?"),
            ("69g", "did you mean 69GiB or 69GB?"),
            ("5M", "did you mean 5MiB or 5MB?"),
            ("5K", "did you mean 5KiB or 5KB?"),
            ("2Gi", "did you mean 2GiB or 2GB?"),
            ("1.2.3GB", "not a decimal number"),
            ("1.GB", "not a decimal number"),
            (".5GB", "not a decimal number"),
            ("", "empty"),
            ("nan", "no number"),
            ("inf", "no number"),
            ("18446744073709551616", "out of range"),
            ("17TiB000", "unknown unit"),
            ("99999999999TiB", "out of range"),
        ] {
            let e = parse_size(s).expect_err(s);
            assert!(e.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn ceilings() {
        assert_eq!(
            CeilingSpec::parse("90%"),
            Ok(CeilingSpec::PercentOfFootprint(90.0))
        );
        assert_eq!(
            CeilingSpec::parse("100%"),
            Ok(CeilingSpec::PercentOfFootprint(100.0))
        );
        assert_eq!(
            CeilingSpec::parse("0.5%"),
            Ok(CeilingSpec::PercentOfFootprint(0.5))
        );
        assert_eq!(
            CeilingSpec::parse("69GiB"),
            Ok(CeilingSpec::Bytes(69 << 30))
        );
        assert_eq!(CeilingSpec::parse("1"), Ok(CeilingSpec::Bytes(1)));
        assert_eq!(CeilingSpec::PercentOfFootprint(90.0).resolve(1000), 900);
        assert_eq!(CeilingSpec::PercentOfFootprint(100.0).resolve(1001), 1001);
        assert_eq!(CeilingSpec::PercentOfFootprint(33.3).resolve(1000), 333);
        assert_eq!(
            CeilingSpec::PercentOfFootprint(90.0).resolve(u64::MAX),
            u64::MAX / 10 * 9 + 4
        );
        assert_eq!(CeilingSpec::Bytes(7).resolve(1000), 7);
        for (s, why) in [
            ("0", "positive"),
            ("0GiB", "positive"),
            ("0.0001B", "positive"),
            ("0%", "(0, 100]"),
            ("100.5%", "(0, 100]"),
            ("150%", "(0, 100]"),
            ("-5%", "plain number"),
            ("nan%", "plain number"),
            ("inf%", "plain number"),
            ("1e2%", "plain number"),
            ("%", "plain number"),
            ("-5GiB", "no sign"),
        ] {
            let e = CeilingSpec::parse(s).expect_err(s);
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
