//! A dependency-free SVG line chart: delivered throughput over time with
//! fault and repair instants marked (the chaos report's figure).

use std::fmt::Write;

/// A vertical marker at `t_s` (seconds since traffic start).
#[derive(Clone, Debug)]
pub struct Marker {
    pub t_s: f64,
    pub label: String,
    /// A repair (green) rather than a fault (red).
    pub repair: bool,
}

const W: f64 = 900.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" step (1, 2 or 5 × 10^k) giving about `ticks` ticks over `span`.
fn nice_step(span: f64, ticks: f64) -> f64 {
    if !(span.is_finite() && span > 0.0) {
        return 1.0;
    }
    let raw = span / ticks;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm < 1.5 {
        1.0
    } else if norm < 3.5 {
        2.0
    } else if norm < 7.5 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// A named line of a chart's lower panel.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    /// (seconds since traffic start, value).
    pub points: Vec<(f64, f64)>,
}

/// Colours of the lower panel's lines, in turn.
const SERIES_COLOURS: [&str; 4] = ["#e07b00", "#7b3fb5", "#008a8a", "#a05a2c"];

/// Renders `points` (seconds, value) as an SVG line chart.
pub fn line_chart(title: &str, y_label: &str, points: &[(f64, f64)], markers: &[Marker]) -> String {
    chart(title, y_label, points, None, markers)
}

/// `points` as in [`line_chart`], with a second panel below on the same
/// time axis holding `flows` (each in its own colour, named in a legend)
/// against `flows_label`.
pub fn line_chart_with_flows(
    title: &str,
    y_label: &str,
    points: &[(f64, f64)],
    flows_label: &str,
    flows: &[Series],
    markers: &[Marker],
) -> String {
    chart(title, y_label, points, Some((flows_label, flows)), markers)
}

fn chart(
    title: &str,
    y_label: &str,
    points: &[(f64, f64)],
    flows: Option<(&str, &[Series])>,
    markers: &[Marker],
) -> String {
    let x_max = points
        .iter()
        .chain(
            flows
                .iter()
                .flat_map(|(_, f)| f.iter().flat_map(|s| s.points.iter())),
        )
        .map(|p| p.0)
        .chain(markers.iter().map(|m| m.t_s))
        .fold(1e-9, f64::max);
    let height = if flows.is_some() { 2.0 * H - TOP } else { H };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{height}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        escape(title)
    );
    let fabric = [(points, "#1f5fbf", None)];
    panel(&mut s, TOP, x_max, y_label, &fabric, markers);
    if let Some((label, flows)) = flows {
        let lines: Vec<Line> = flows
            .iter()
            .enumerate()
            .map(|(i, f)| {
                (
                    f.points.as_slice(),
                    SERIES_COLOURS[i % SERIES_COLOURS.len()],
                    Some(f.label.as_str()),
                )
            })
            .collect();
        panel(&mut s, H, x_max, label, &lines, markers);
    }
    s.push_str("</svg>\n");
    s
}

/// A panel's line: points, colour, legend label.
type Line<'a> = (&'a [(f64, f64)], &'a str, Option<&'a str>);

/// One panel, `top` pixels down: axes, ticks, markers and `lines`
/// (points, colour, legend label).
fn panel(s: &mut String, top: f64, x_max: f64, y_label: &str, lines: &[Line], markers: &[Marker]) {
    let y_max = lines
        .iter()
        .flat_map(|(p, _, _)| p.iter())
        .map(|p| p.1)
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let x = |t: f64| LEFT + t / x_max * pw;
    let y = |v: f64| top + ph - v / y_max * ph;
    // Axes and ticks.
    let _ = writeln!(
        s,
        r#"<path d="M{LEFT},{top} V{} H{}" stroke="black" fill="none"/>"#,
        top + ph,
        LEFT + pw
    );
    let xs = nice_step(x_max, 10.0);
    let mut t = 0.0;
    while t <= x_max + 1e-9 {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{1}" x2="{0:.1}" y2="{2}" stroke="#ddd"/><text x="{0:.1}" y="{3}" text-anchor="middle">{4}</text>"##,
            x(t),
            top,
            top + ph,
            top + ph + 16.0,
            format_tick(t)
        );
        t += xs;
    }
    let ys = nice_step(y_max, 6.0);
    let mut v = 0.0;
    while v <= y_max + 1e-9 {
        let _ = writeln!(
            s,
            r##"<line x1="{0}" y1="{1:.1}" x2="{2}" y2="{1:.1}" stroke="#eee"/><text x="{3}" y="{4:.1}" text-anchor="end">{5}</text>"##,
            LEFT,
            y(v),
            LEFT + pw,
            LEFT - 6.0,
            y(v) + 4.0,
            format_tick(v)
        );
        v += ys;
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">time since traffic start (s)</text>"#,
        LEFT + pw / 2.0,
        top + ph + BOTTOM - 10.0
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{0}" text-anchor="middle" transform="rotate(-90 16 {0})">{1}</text>"#,
        top + ph / 2.0,
        escape(y_label)
    );
    // Markers, labels staggered so neighbours do not overlap.
    for (i, m) in markers.iter().enumerate() {
        let colour = if m.repair { "#2a2" } else { "#d22" };
        let _ = writeln!(
            s,
            r#"<line x1="{0:.1}" y1="{1}" x2="{0:.1}" y2="{2}" stroke="{3}" stroke-dasharray="4 3"/><text x="{4:.1}" y="{5}" fill="{3}" font-size="10">{6}</text>"#,
            x(m.t_s),
            top,
            top + ph,
            colour,
            x(m.t_s) + 3.0,
            top + 12.0 + (i % 4) as f64 * 12.0,
            escape(&m.label)
        );
    }
    for (k, (points, colour, label)) in lines.iter().enumerate() {
        if let Some(label) = label {
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end" fill="{colour}">{}</text>"#,
                LEFT + pw - 4.0,
                top + 12.0 + k as f64 * 14.0,
                escape(label)
            );
        }
        if points.is_empty() {
            continue;
        }
        let mut d = String::new();
        for (i, (t, v)) in points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1} ",
                if i == 0 { "M" } else { "L" },
                x(*t),
                y(*v)
            );
        }
        let _ = writeln!(
            s,
            r##"<path d="{}" stroke="{colour}" stroke-width="1.6" fill="none"/>"##,
            d.trim_end()
        );
    }
}

fn format_tick(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Rates between consecutive cumulative samples `(t_s, total)`.
pub fn rates(samples: &[(f64, u64)]) -> Vec<(f64, f64)> {
    samples
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| {
            let dt = w[1].0 - w[0].0;
            (w[1].0, w[1].1.saturating_sub(w[0].1) as f64 / dt)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_has_the_line_markers_and_escaped_labels() {
        let pts = [(0.1, 10.0), (0.2, 20.0), (0.3, 0.0)];
        let svg = line_chart(
            "a <b>",
            "flits/s",
            &pts,
            &[Marker {
                t_s: 0.15,
                label: "kill s0:1".into(),
                repair: false,
            }],
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a &lt;b&gt;"));
        assert!(svg.contains("kill s0:1") && svg.contains("#d22"));
        assert_eq!(svg.matches("<path").count(), 2, "axes and the data line");
        // An empty series still renders (no NaN coordinates).
        let empty = line_chart("x", "y", &[], &[]);
        assert!(!empty.contains("NaN"));
    }

    #[test]
    fn flows_get_a_panel_of_their_own_on_the_same_time_axis() {
        let flows = [Series {
            label: "iperf3 h00→h15 (tcp)".into(),
            points: vec![(0.5, 20.0), (1.0, 4.0), (4.0, 21.0)],
        }];
        let svg = line_chart_with_flows("t", "flits/s", &[(0.1, 1.0)], "Mbit/s", &flows, &[]);
        assert_eq!(svg.matches("<path").count(), 4, "two axes and two lines");
        assert!(svg.contains("iperf3 h00→h15 (tcp)") && svg.contains("Mbit/s"));
        assert!(svg.contains(r#"height="800""#), "{svg}");
        // The flow's last instant sets the shared time axis: a tick at 4 s.
        assert!(svg.contains(">4</text>"), "{svg}");
    }

    #[test]
    fn rates_are_deltas_over_time() {
        let r = rates(&[(0.0, 0), (0.5, 100), (1.0, 100), (1.0, 200)]);
        assert_eq!(r, vec![(0.5, 200.0), (1.0, 0.0)]);
    }
}
