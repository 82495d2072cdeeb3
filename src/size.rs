//! Byte sizes as people write them (`69GiB`, `70GB`, `512MiB`, `1.5GiB`, `1234`), and as
//! reports print them (`1.50 GiB`).
//!
//! Rules: a size is a decimal number (`12` or `1.5`, no sign, no exponent) and an optional unit,
//! binary (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB), `B` optional; a bare `K`/`M`/`G`/`T`
//! is refused as ambiguous. Arithmetic is exact (integers, no floats); a fractional byte count
//! rounds down. A ceiling (a size or a percentage) is [`crate::job::Ceiling`].

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
}
