//! Parsing and printing of byte sizes and dim assignments.

use std::collections::BTreeMap;

/// A budget as given: a size in bytes (0: `lowest`, as low as the levers get it), or a fraction of
/// the model's estimated peak (`0.15x`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    Bytes(u64),
    OfPeak(f64),
}

impl Budget {
    /// The budget in bytes; `peak` gives the estimated peak a fraction is taken of (rounded down).
    pub fn bytes<E>(self, peak: impl FnOnce() -> Result<u64, E>) -> Result<u64, E> {
        Ok(match self {
            Budget::Bytes(b) => b,
            Budget::OfPeak(f) => (peak()? as f64 * f).floor() as u64,
        })
    }
}

/// Parses a budget: a size ([`parse_size`]), `lowest`, or a positive fraction of the estimated
/// peak written with an `x` (`0.15x`).
pub fn parse_budget(s: &str) -> Result<Budget, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("lowest") {
        return Ok(Budget::Bytes(0));
    }
    if let Some(f) = t.strip_suffix(['x', 'X']) {
        return match f.trim().parse::<f64>() {
            Ok(f) if f.is_finite() && f > 0.0 => Ok(Budget::OfPeak(f)),
            _ => Err(format!(
                "budget '{s}': a fraction of the peak is a positive number before the x, like 0.15x"
            )),
        };
    }
    parse_size(s).map(Budget::Bytes)
}

/// Parses `123`, `512MiB`, `80GB`, `80GiB`, `1.5GiB`, `64k` (case-insensitive; SI suffixes are powers
/// of 1000, IEC ones powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num.replace('_', "").parse().map_err(|_| {
        format!("size '{s}': expected a number with an optional unit like 512MiB or 80GB")
    })?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" | "ki" => 1024.0,
        "mib" | "mi" => 1024.0 * 1024.0,
        "gib" | "gi" => 1024.0 * 1024.0 * 1024.0,
        "tib" | "ti" => 1024.0f64.powi(4),
        u => {
            return Err(format!(
                "size '{s}': unknown unit '{u}' (use B, KB, MB, GB, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let v = num * mult;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(format!("size '{s}' is out of range"));
    }
    Ok(v.round() as u64)
}

/// `1.5 GiB` style rendering with binary units (the estimate report's own).
pub use memplan_sim::estimate::human_bytes as human;

/// Parses repeated `NAME=VALUE` dim assignments; `@FILE.json` reads every dim of a JSON object of
/// names to values, or of its `"dims"` entry (what `memplan run --json` prints: the sizes a run
/// made from the data).
pub fn parse_dims(items: &[String]) -> Result<BTreeMap<String, i64>, String> {
    let mut m = BTreeMap::new();
    for it in items {
        if let Some(path) = it.strip_prefix('@') {
            for (k, v) in dims_file(path)? {
                if m.insert(k.clone(), v).is_some() {
                    return Err(format!("--dim {k} is given twice"));
                }
            }
            continue;
        }
        let Some((k, v)) = it.split_once('=') else {
            return Err(format!("--dim '{it}': expected NAME=VALUE, e.g. N=512"));
        };
        let k = k.trim();
        let v: i64 = v
            .trim()
            .replace('_', "")
            .parse()
            .map_err(|_| format!("--dim '{it}': value must be a nonnegative integer"))?;
        if v < 0 {
            return Err(format!("--dim '{it}': value must be >= 0"));
        }
        if m.insert(k.to_string(), v).is_some() {
            return Err(format!("--dim {k} is given twice"));
        }
    }
    Ok(m)
}

/// The dims of `--dim @FILE`: a JSON object of nonnegative integers, or one under `"dims"`.
fn dims_file(path: &str) -> Result<Vec<(String, i64)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--dim @{path}: {e}"))?;
    let j: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("--dim @{path}: not JSON: {e}"))?;
    let obj = j.get("dims").unwrap_or(&j).as_object().ok_or_else(|| {
        format!("--dim @{path}: expected an object of dims (or one under \"dims\")")
    })?;
    obj.iter()
        .map(|(k, v)| match v.as_i64() {
            Some(x) if x >= 0 => Ok((k.clone(), x)),
            _ => Err(format!(
                "--dim @{path}: '{k}' must be a nonnegative integer, got {v}"
            )),
        })
        .collect()
}

/// A declared dim (an input's size) is at least 1; 0 is a value only sizes made from the data
/// (a count, a branch taken) can have.
pub fn check_declared_positive(
    dims: &BTreeMap<String, i64>,
    declared: &[String],
) -> Result<(), String> {
    for k in declared {
        if let Some(&v) = dims.get(k) {
            if v < 1 {
                return Err(format!(
                    "--dim '{k}={v}': value must be >= 1 (0 only for sizes made from the data)"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("123"), Ok(123));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("80GB"), Ok(80_000_000_000));
        assert_eq!(parse_size("80GiB"), Ok(80 << 30));
        assert_eq!(parse_size("1.5gib"), Ok(3 << 29));
        assert!(parse_size("12XB").unwrap_err().contains("unknown unit"));
        assert!(parse_size("abc").is_err());
    }

    #[test]
    fn budgets() {
        assert_eq!(parse_budget("lowest"), Ok(Budget::Bytes(0)));
        assert_eq!(parse_budget("512MiB"), Ok(Budget::Bytes(512 << 20)));
        assert_eq!(parse_budget(" 0.15x"), Ok(Budget::OfPeak(0.15)));
        assert_eq!(parse_budget("2X"), Ok(Budget::OfPeak(2.0)));
        for bad in ["x", "-0.1x", "0x", "nanx", "1.5.x"] {
            assert!(parse_budget(bad).unwrap_err().contains("0.15x"), "{bad}");
        }
        assert_eq!(Budget::OfPeak(0.15).bytes(|| Ok::<_, ()>(1000)), Ok(150));
        assert_eq!(Budget::Bytes(7).bytes(|| Err("not asked")), Ok(7));
    }

    #[test]
    fn human_units() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 29), "1.5 GiB");
    }

    #[test]
    fn dims() {
        let d = parse_dims(&["N=512".into(), "S = 3".into()]).unwrap();
        assert_eq!(d.get("N"), Some(&512));
        assert_eq!(d.get("S"), Some(&3));
        assert!(parse_dims(&["N".into()]).is_err());
        assert!(parse_dims(&["N=-1".into()]).is_err());
        assert!(parse_dims(&["N=1".into(), "N=2".into()]).is_err());
        // 0 parses (a count made from the data may be 0); a declared dim must be >= 1.
        // `@FILE`: `run --json`'s output (its "dims"), or a plain object.
        let dir = std::env::temp_dir().join(format!("memplan-dims-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (run, plain, bad) = (
            dir.join("run.json"),
            dir.join("d.json"),
            dir.join("bad.json"),
        );
        std::fs::write(
            &run,
            r#"{"peak_bytes": 5, "dims": {"nonzero_count_a": 0, "k": 7}}"#,
        )
        .unwrap();
        std::fs::write(&plain, r#"{"N": 4}"#).unwrap();
        std::fs::write(&bad, r#"{"N": -4}"#).unwrap();
        let at = |p: &std::path::Path| format!("@{}", p.display());
        let d = parse_dims(&[at(&run), "N=3".into()]).unwrap();
        assert_eq!(
            d.into_iter().collect::<Vec<_>>(),
            [
                ("N".into(), 3),
                ("k".into(), 7),
                ("nonzero_count_a".into(), 0)
            ]
        );
        assert_eq!(parse_dims(&[at(&plain)]).unwrap()["N"], 4);
        assert!(parse_dims(&[at(&plain), "N=4".into()])
            .unwrap_err()
            .contains("twice"));
        assert!(parse_dims(&[at(&bad)]).unwrap_err().contains("nonnegative"));
        assert!(parse_dims(&[at(&dir.join("absent.json"))]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
        let z = parse_dims(&["N=0".into(), "c=0".into()]).unwrap();
        assert!(check_declared_positive(&z, &["N".to_string()]).is_err());
        assert!(check_declared_positive(&z, &["M".to_string()]).is_ok());
    }
}
