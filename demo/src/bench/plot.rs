//! `bench --plot FILE.svg`: the throughput of the matrix as an SVG chart written by hand (no
//! plotting crate: the demo's dependencies are the library's). Two panels, messages per second
//! and MB/s against the message size, both axes logarithmic, one line per subscriber count,
//! with axis labels, tick labels (the sizes measured on x) and a legend.

use std::fmt::Write;

/// One measured point, as the chart needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlotPoint {
    /// Message size, bytes.
    pub size: u64,
    /// Subscribers.
    pub subscribers: u64,
    /// Messages per second.
    pub msgs_per_sec: f64,
    /// Payload goodput, MB/s.
    pub mb_per_sec: f64,
}

const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 470.0;
const PANEL_WIDTH: f64 = WIDTH / 2.0;
/// Plot area inside a panel: left, right, top and bottom margins.
const LEFT: f64 = 80.0;
const RIGHT: f64 = 25.0;
const TOP: f64 = 95.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/// The SVG document of `points` under `title`.
pub fn svg(points: &[PlotPoint], title: &str) -> String {
    let mut counts: Vec<u64> = points.iter().map(|p| p.subscribers).collect();
    counts.sort_unstable();
    counts.dedup();
    let mut sizes: Vec<u64> = points.iter().map(|p| p.size).collect();
    sizes.sort_unstable();
    sizes.dedup();

    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" \
         font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(s, "<rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">{}</text>",
        WIDTH / 2.0,
        escape(title)
    );
    legend(&mut s, &counts);
    let panels = [
        Panel { name: "messages per second", y_label: "msgs/s (log scale)", value: |p| p.msgs_per_sec },
        Panel { name: "payload goodput", y_label: "MB/s (log scale)", value: |p| p.mb_per_sec },
    ];
    for (n, what) in panels.iter().enumerate() {
        panel(&mut s, n as f64 * PANEL_WIDTH, what, points, &sizes, &counts);
    }
    s.push_str("</svg>\n");
    s
}

/// What a panel shows.
struct Panel {
    /// Its title.
    name: &'static str,
    /// The label of its y axis.
    y_label: &'static str,
    /// The value it plots of a point.
    value: fn(&PlotPoint) -> f64,
}

/// One entry per subscriber count, centred under the title.
fn legend(s: &mut String, counts: &[u64]) {
    let entry = 130.0;
    let x0 = WIDTH / 2.0 - entry * counts.len() as f64 / 2.0;
    let _ = writeln!(s, "<g class=\"legend\">");
    for (i, &c) in counts.iter().enumerate() {
        let x = x0 + entry * i as f64;
        let color = COLORS[i % COLORS.len()];
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"46\" x2=\"{:.1}\" y2=\"46\" stroke=\"{color}\" stroke-width=\"2\"/>\
             <circle cx=\"{:.1}\" cy=\"46\" r=\"3\" fill=\"{color}\"/>\
             <text x=\"{:.1}\" y=\"50\">{c} subscriber{}</text>",
            x + 24.0,
            x + 12.0,
            x + 30.0,
            if c == 1 { "" } else { "s" }
        );
    }
    let _ = writeln!(s, "</g>");
}

/// Where values land on a logarithmic axis from `lo` to `hi` onto `from..to` (pixels).
struct LogAxis {
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
}

impl LogAxis {
    fn at(&self, v: f64) -> f64 {
        let v = v.clamp(self.lo, self.hi);
        self.from + (v / self.lo).ln() / (self.hi / self.lo).ln() * (self.to - self.from)
    }
}

/// The panel `what` of `points` with its left edge at `x0`.
fn panel(s: &mut String, x0: f64, what: &Panel, points: &[PlotPoint], sizes: &[u64], counts: &[u64]) {
    let Panel { name, y_label, value } = *what;
    let (left, right, top, bottom) = (x0 + LEFT, x0 + PANEL_WIDTH - RIGHT, TOP, HEIGHT - BOTTOM);
    let first = *sizes.first().unwrap_or(&1) as f64;
    let last = *sizes.last().unwrap_or(&1) as f64;
    // A margin of half a step either side keeps the points off the axes.
    let pad = if sizes.len() > 1 { (last / first).powf(0.5 / (sizes.len() - 1) as f64) } else { 2.0 };
    let x = LogAxis { lo: first / pad, hi: last * pad, from: left, to: right };
    let values: Vec<f64> = points.iter().map(value).filter(|v| v.is_finite() && *v > 0.0).collect();
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(0.0, f64::max);
    let (lo, hi) = if values.is_empty() { (1.0, 10.0) } else { decades(min, max) };
    let y = LogAxis { lo, hi, from: bottom, to: top };

    let _ = writeln!(s, "<g class=\"panel\">");
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"80\" text-anchor=\"middle\" font-size=\"14\">{}</text>",
        (left + right) / 2.0,
        escape(name)
    );
    // Horizontal grid lines and y tick labels.
    for t in y_ticks(lo, hi) {
        let ty = y.at(t);
        let _ = writeln!(
            s,
            "<line x1=\"{left:.1}\" y1=\"{ty:.1}\" x2=\"{right:.1}\" y2=\"{ty:.1}\" stroke=\"#e0e0e0\"/>\
             <text class=\"ytick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 6.0,
            ty + 4.0,
            si(t)
        );
    }
    // x ticks: the sizes measured.
    for &size in sizes {
        let tx = x.at(size as f64);
        let _ = writeln!(
            s,
            "<line x1=\"{tx:.1}\" y1=\"{bottom:.1}\" x2=\"{tx:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\
             <text class=\"xtick\" x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            bottom + 5.0,
            bottom + 18.0,
            size_label(size)
        );
    }
    // Axes and their labels.
    let _ = writeln!(
        s,
        "<polyline class=\"axes\" fill=\"none\" stroke=\"black\" points=\"{left:.1},{top:.1} {left:.1},{bottom:.1} {right:.1},{bottom:.1}\"/>"
    );
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">message size (log scale)</text>",
        (left + right) / 2.0,
        bottom + 40.0
    );
    let (lx, ly) = (x0 + 18.0, (top + bottom) / 2.0);
    let _ = writeln!(
        s,
        "<text x=\"{lx:.1}\" y=\"{ly:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 {lx:.1} {ly:.1})\">{}</text>",
        escape(y_label)
    );
    // One line per subscriber count, with a marker per point.
    for (i, &c) in counts.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut line: Vec<&PlotPoint> = points.iter().filter(|p| p.subscribers == c).collect();
        line.sort_by_key(|p| p.size);
        let xy: Vec<(f64, f64)> = line.iter().map(|p| (x.at(p.size as f64), y.at(value(p)))).collect();
        let coords: Vec<String> = xy.iter().map(|(px, py)| format!("{px:.1},{py:.1}")).collect();
        let _ = writeln!(
            s,
            "<polyline class=\"series\" data-subscribers=\"{c}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            coords.join(" ")
        );
        for (px, py) in xy {
            let _ = writeln!(s, "<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"3\" fill=\"{color}\"/>");
        }
    }
    let _ = writeln!(s, "</g>");
}

/// The whole decades around `min..=max` (at least one decade).
fn decades(min: f64, max: f64) -> (f64, f64) {
    let lo = 10f64.powf(min.log10().floor());
    let mut hi = 10f64.powf(max.log10().ceil());
    if hi <= lo {
        hi = lo * 10.0;
    }
    (lo, hi)
}

/// Ticks from `lo` to `hi` (whole decades): 1, 2 and 5 of each decade when there are at most
/// two decades, else the decades only.
fn y_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let decades = (hi / lo).log10().round().max(1.0) as i32;
    let steps: &[f64] = if decades <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    let mut ticks = Vec::new();
    for d in 0..=decades {
        let base = lo * 10f64.powi(d);
        for &m in steps {
            if m * base <= hi * 1.000_001 {
                ticks.push(m * base);
            }
        }
    }
    ticks
}

/// A tick value with an SI suffix: `500`, `2k`, `1.5M`.
fn si(v: f64) -> String {
    let (scale, suffix) = match v {
        v if v >= 1e9 => (1e9, "G"),
        v if v >= 1e6 => (1e6, "M"),
        v if v >= 1e3 => (1e3, "k"),
        _ => (1.0, ""),
    };
    let x = v / scale;
    // Three significant digits, without trailing zeros.
    let decimals = (2 - x.log10().floor() as i32).clamp(0, 9) as usize;
    let text = format!("{x:.decimals$}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    format!("{text}{suffix}")
}

/// A message size as a tick label: `64 B`, `4 KiB`, `1 MiB`, `1000 B`.
pub fn size_label(size: u64) -> String {
    if size >= 1 << 20 && size % (1 << 20) == 0 {
        format!("{} MiB", size >> 20)
    } else if size >= 1 << 10 && size % (1 << 10) == 0 {
        format!("{} KiB", size >> 10)
    } else {
        format!("{size} B")
    }
}

/// Text made safe inside an XML element.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_ticks_and_axes_are_labelled_readably() {
        assert_eq!(size_label(64), "64 B");
        assert_eq!(size_label(1000), "1000 B");
        assert_eq!(size_label(4096), "4 KiB");
        assert_eq!(size_label(1 << 20), "1 MiB");
        assert_eq!(si(500.0), "500");
        assert_eq!(si(2000.0), "2k");
        assert_eq!(si(1_500_000.0), "1.5M");
        assert_eq!(si(0.2), "0.2");
        assert_eq!(decades(37.0, 420.0), (10.0, 1000.0));
        assert_eq!(decades(100.0, 100.0), (100.0, 1000.0));
        assert_eq!(y_ticks(10.0, 1000.0).len(), 7);
        assert_eq!(y_ticks(1.0, 1e6), vec![1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]);
    }

    #[test]
    fn one_line_per_subscriber_count_in_each_panel() {
        let points: Vec<PlotPoint> = [64, 1024]
            .iter()
            .flat_map(|&size| {
                [1, 4].map(|subscribers| PlotPoint {
                    size,
                    subscribers,
                    msgs_per_sec: 1e5 / subscribers as f64,
                    mb_per_sec: 1e5 * size as f64 / 1e6,
                })
            })
            .collect();
        let doc = svg(&points, "a & b");
        assert!(doc.starts_with("<svg") && doc.trim_end().ends_with("</svg>"));
        assert_eq!(doc.matches("<polyline class=\"series\"").count(), 4);
        assert!(doc.contains(">64 B</text>") && doc.contains(">1 KiB</text>"));
        assert!(doc.contains("a &amp; b") && doc.contains(">4 subscribers</text>"));
    }
}
