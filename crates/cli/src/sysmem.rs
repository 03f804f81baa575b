//! The memory this process may still take: what `memplan run` compares the estimated peak with.
//!
//! On Linux it is `MemAvailable` from `/proc/meminfo`, lowered to what the cgroup (v2
//! `memory.max - memory.current`, v1 `memory.limit_in_bytes - memory.usage_in_bytes`) leaves when
//! that is less. Elsewhere, and where neither can be read, it is unknown and the check is skipped
//! (allocations still fail cleanly). `MEMPLAN_MEM_AVAILABLE` (bytes) overrides it, for tests and
//! for users who know better.

/// Bytes available and where the figure comes from, if known.
pub fn available() -> Option<(u64, &'static str)> {
    if let Ok(v) = std::env::var("MEMPLAN_MEM_AVAILABLE") {
        return v.trim().parse().ok().map(|b| (b, "MEMPLAN_MEM_AVAILABLE"));
    }
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| meminfo_available(&s))
        .map(|b| (b, "MemAvailable"));
    let cg = cgroup_left().map(|b| (b, "cgroup limit"));
    match (mem, cg) {
        (Some(m), Some(c)) => Some(if c.0 < m.0 { c } else { m }),
        (m, c) => m.or(c),
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn meminfo_available(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut it = line["MemAvailable:".len()..].split_whitespace();
    let n: u64 = it.next()?.parse().ok()?;
    match it.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        Some(_) => None,
    }
}

/// What this process's cgroup limit leaves, if there is a limit.
fn cgroup_left() -> Option<u64> {
    let read = |p: &str| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    // v2: the process's own group, from /proc/self/cgroup ("0::/path").
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
        });
    let dirs = own
        .map(|p| format!("/sys/fs/cgroup{p}"))
        .into_iter()
        .chain(["/sys/fs/cgroup".to_string()]);
    for d in dirs {
        if let (Some(max), Some(cur)) = (
            read(&format!("{d}/memory.max")),
            read(&format!("{d}/memory.current")),
        ) {
            return Some(max.saturating_sub(cur));
        }
    }
    let (max, cur) = (
        read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?,
        read("/sys/fs/cgroup/memory/memory.usage_in_bytes")?,
    );
    // v1 reports "no limit" as a huge number.
    (max < 1 << 60).then(|| max.saturating_sub(cur))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_is_parsed_in_kib() {
        let t = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(meminfo_available(t), Some(2048 * 1024));
        assert_eq!(meminfo_available("MemTotal: 5 kB\n"), None);
        assert_eq!(meminfo_available("MemAvailable: x kB\n"), None);
    }
}
