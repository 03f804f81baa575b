//! Memory-over-time plot as a self-contained SVG: live bytes per step, the peak marked, the largest
//! tensors as bands, axes with units and a legend.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use memplan_ir::Graph;
use memplan_sim::estimate::Estimate;

const W: f64 = 960.0;
const H: f64 = 540.0;
const ML: f64 = 90.0;
const MR: f64 = 260.0;
const MT: f64 = 50.0;
const MB: f64 = 60.0;
const COLORS: [&str; 6] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2",
];

fn unit_for(max: u64) -> (f64, &'static str) {
    const G: f64 = 1024.0 * 1024.0 * 1024.0;
    const M: f64 = 1024.0 * 1024.0;
    let m = max as f64;
    if m >= G {
        (G, "GiB")
    } else if m >= M {
        (M, "MiB")
    } else if m >= 1024.0 {
        (1024.0, "KiB")
    } else {
        (1.0, "B")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" tick step (1, 2, 5 x 10^k) giving about `n` ticks up to `max`.
fn tick_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// Renders the SVG text: resident bytes as a grey layer, the bands stacked on it, the total as a
/// step line, the peak marked, and the budget as a dashed line when one is given.
pub fn render_svg(title: &str, e: &Estimate, g: &Graph) -> String {
    let _ = g;
    let steps = e.per_step.len().max(1);
    let peak = e.per_step.iter().copied().max().unwrap_or(0).max(1);
    let top = peak.max(
        e.budget_bytes
            .filter(|&b| b <= peak.saturating_mul(2))
            .unwrap_or(0),
    );
    let (div, unit) = unit_for(top);
    let ymax_u = top as f64 / div * 1.1;
    let pw = W - ML - MR;
    let ph = H - MT - MB;
    let x = |s: f64| ML + s / steps as f64 * pw;
    let y = |b: f64| MT + ph - (b / div) / ymax_u * ph;
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(o, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = write!(
        o,
        r#"<text x="{}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        ML,
        esc(title)
    );
    let sub = format!(
        "peak {} (liveness)   arena {} (best fit)   resident {}",
        crate::units::human(e.peak_bytes),
        crate::units::human(e.arena_bytes),
        crate::units::human(e.resident_bytes)
    );
    let _ = write!(
        o,
        r##"<text x="{ML}" y="40" fill="#555">{}</text>"##,
        esc(&sub)
    );
    // Grid and y ticks.
    let step = tick_step(ymax_u, 6.0);
    let mut t = 0.0;
    while t <= ymax_u + 1e-9 {
        let yy = MT + ph - t / ymax_u * ph;
        let _ = write!(
            o,
            r##"<line x1="{ML}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e6e6e6"/>"##,
            ML + pw
        );
        let _ = write!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            ML - 6.0,
            yy + 4.0,
            fmt_tick(t)
        );
        t += step;
    }
    // X ticks.
    let xs = tick_step(steps as f64, 8.0).max(1.0);
    let mut s = 0.0;
    while s <= steps as f64 + 1e-9 {
        let xx = x(s);
        let _ = write!(
            o,
            r##"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#999"/>"##,
            MT + ph,
            MT + ph + 5.0
        );
        let _ = write!(
            o,
            r#"<text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            MT + ph + 18.0,
            s as u64
        );
        s += xs;
    }
    // Resident layer.
    let _ = write!(
        o,
        r##"<rect x="{ML}" y="{:.2}" width="{pw:.2}" height="{:.2}" fill="#bbbbbb" fill-opacity="0.6"/>"##,
        y(e.resident_bytes as f64),
        (MT + ph - y(e.resident_bytes as f64)).max(0.0)
    );
    // Bands stacked on the resident layer in legend order; merged into runs of equal height per step.
    let mut stack = vec![e.resident_bytes; steps];
    for (i, b) in e.bands.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let (from, to) = (b.from.min(steps - 1), b.to.min(steps - 1));
        let mut st = from;
        while st <= to {
            let base = stack[st];
            let mut end = st;
            while end < to && stack[end + 1] == base {
                end += 1;
            }
            let y0 = y(base as f64);
            let y1 = y((base + b.bytes) as f64);
            let _ = write!(
                o,
                r#"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{c}" fill-opacity="0.75"/>"#,
                x(st as f64),
                y1,
                (x(end as f64 + 1.0) - x(st as f64)).max(0.5),
                (y0 - y1).max(0.0)
            );
            for v in &mut stack[st..=end] {
                *v += b.bytes;
            }
            st = end + 1;
        }
    }
    // Total live bytes as a step line.
    let mut pts = String::new();
    for (st, &v) in e.per_step.iter().enumerate() {
        let _ = write!(
            pts,
            "{:.2},{:.2} {:.2},{:.2} ",
            x(st as f64),
            y(v as f64),
            x(st as f64 + 1.0),
            y(v as f64)
        );
    }
    let _ = write!(
        o,
        r##"<polyline points="{pts}" fill="none" stroke="#222" stroke-width="1.5"/>"##
    );
    // Budget.
    if let Some(bud) = e.budget_bytes {
        if (bud as f64 / div) <= ymax_u {
            let by = y(bud as f64);
            let _ = write!(
                o,
                r##"<line x1="{ML}" y1="{by:.1}" x2="{:.1}" y2="{by:.1}" stroke="#0a7" stroke-width="1.5" stroke-dasharray="8 4"/>"##,
                ML + pw
            );
            let label = format!("budget {}", crate::units::human(bud));
            let _ = write!(
                o,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#0a7">{}</text>"##,
                ML + pw - 4.0,
                by - 4.0,
                esc(&label)
            );
        }
    }
    // Peak marker.
    if let Some(ps) = e.peak_step {
        let px = x(ps as f64 + 0.5);
        let py = y(e.peak_bytes as f64);
        let _ = write!(
            o,
            r##"<line x1="{px:.1}" y1="{MT}" x2="{px:.1}" y2="{:.1}" stroke="#d00" stroke-dasharray="4 3"/>"##,
            MT + ph
        );
        let _ = write!(
            o,
            r##"<circle cx="{px:.1}" cy="{py:.1}" r="4" fill="#d00"/>"##
        );
        let node = e.peak_node.clone().unwrap_or_default();
        let label = format!(
            "peak {:.2} {unit} at step {ps}: {node}",
            e.peak_bytes as f64 / div
        );
        let right = px > ML + pw * 0.6;
        let (lx, anchor) = if right {
            (px - 6.0, "end")
        } else {
            (px + 6.0, "start")
        };
        let _ = write!(
            o,
            r##"<text x="{lx:.1}" y="{:.1}" fill="#d00" text-anchor="{anchor}">{}</text>"##,
            MT + 12.0,
            esc(&label)
        );
    }
    // Axes.
    let _ = write!(
        o,
        r##"<line x1="{ML}" y1="{MT}" x2="{ML}" y2="{:.1}" stroke="#222"/>"##,
        MT + ph
    );
    let _ = write!(
        o,
        r##"<line x1="{ML}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#222"/>"##,
        MT + ph,
        ML + pw,
        MT + ph
    );
    let _ = write!(
        o,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">schedule step (one node per step)</text>"#,
        ML + pw / 2.0,
        H - 18.0
    );
    let _ = write!(
        o,
        r#"<text transform="translate(24 {:.1}) rotate(-90)" text-anchor="middle">live tensor memory ({unit})</text>"#,
        MT + ph / 2.0
    );
    // Legend.
    let lx = ML + pw + 16.0;
    let mut ly = MT + 6.0;
    let _ = write!(
        o,
        r##"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="#222" stroke-width="1.5"/>"##,
        lx + 18.0
    );
    let _ = write!(
        o,
        r#"<text x="{}" y="{}">total live</text>"#,
        lx + 24.0,
        ly + 4.0
    );
    ly += 20.0;
    let _ = write!(
        o,
        r##"<rect x="{lx}" y="{}" width="18" height="10" fill="#bbbbbb" fill-opacity="0.6"/>"##,
        ly - 5.0
    );
    let _ = write!(
        o,
        r#"<text x="{}" y="{}">weights + inputs ({:.1} {unit})</text>"#,
        lx + 24.0,
        ly + 4.0,
        e.resident_bytes as f64 / div
    );
    ly += 20.0;
    let _ = write!(
        o,
        r##"<circle cx="{}" cy="{ly}" r="4" fill="#d00"/>"##,
        lx + 9.0
    );
    let _ = write!(o, r#"<text x="{}" y="{}">peak</text>"#, lx + 24.0, ly + 4.0);
    if e.budget_bytes.is_some() {
        ly += 20.0;
        let _ = write!(
            o,
            r##"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="#0a7" stroke-width="1.5" stroke-dasharray="8 4"/>"##,
            lx + 18.0
        );
        let _ = write!(
            o,
            r#"<text x="{}" y="{}">budget</text>"#,
            lx + 24.0,
            ly + 4.0
        );
    }
    ly += 26.0;
    let _ = write!(
        o,
        r##"<text x="{lx}" y="{ly}" fill="#555">largest tensors (at the peak first)</text>"##
    );
    for (i, b) in e.bands.iter().enumerate() {
        ly += 20.0;
        let c = COLORS[i % COLORS.len()];
        let _ = write!(
            o,
            r#"<rect x="{lx}" y="{}" width="18" height="10" fill="{c}" fill-opacity="0.75"/>"#,
            ly - 5.0
        );
        let mut name = b.name.clone();
        if name.chars().count() > 24 {
            name = name.chars().take(23).collect::<String>() + "…";
        }
        let _ = write!(
            o,
            r#"<text x="{}" y="{}">{} ({:.1} {unit})</text>"#,
            lx + 24.0,
            ly + 4.0,
            esc(&name),
            b.bytes as f64 / div
        );
    }
    o.push_str("</svg>\n");
    o
}

fn fmt_tick(v: f64) -> String {
    if v == v.trunc() {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The plot of an estimate of `model` (its file name and the dims make the title): what
/// `memplan estimate --plot` writes.
pub fn plot_svg(model: &Path, e: &Estimate, g: &Graph) -> String {
    let dims: Vec<String> = e.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let name = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let title = format!(
        "{name}  {}: live tensor memory over the schedule",
        dims.join(" ")
    );
    render_svg(&title, e, g)
}

/// Writes the plot, via a temporary file and a rename so no half file is left behind.
pub fn write_svg(path: &Path, model: &Path, e: &Estimate, g: &Graph) -> Result<()> {
    let svg = plot_svg(model, e, g);
    let tmp = path.with_extension("svg.tmp");
    std::fs::write(&tmp, svg)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
