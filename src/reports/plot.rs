//! The frontier as an SVG plot (plotters, SVG backend): device peak against added step time,
//! with the ceilings as horizontal lines, the floor, and the three baselines marked.
//!
//! Rules: the x axis is the measured p50 increase in milliseconds when the frontier was
//! validated, else the added time as a percentage of a step: predicted from ONNX Runtime's
//! measured node times with `--cost profile`, estimated from FLOPs otherwise; the y axis is the
//! device total in GiB, or MiB when the no-recompute total is under 1 GiB. Measured peaks are
//! drawn when present, else predicted ones. Only points that fit are plotted.

use plotters::prelude::*;

use crate::reports::frontier::{Frontier, NO_RECOMPUTE, PER_BLOCK, PER_LAYER, RECOMPUTE_ALL};

const WIDTH: u32 = 900;
const HEIGHT: u32 = 560;

/// The frontier's plot as SVG text.
pub fn frontier_svg(f: &Frontier) -> Result<String, String> {
    let l = Layout::of(f);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        draw(f, &l, &root).map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// What is drawn, in plot coordinates: the fitting points, the baselines, the ceilings, the
/// floor, the axes' ranges and labels.
struct Layout {
    /// The y axis's unit: `GiB` or `MiB`.
    unit: &'static str,
    x_label: &'static str,
    /// (x, y) of each point that fits.
    points: Vec<(f64, f64)>,
    /// (name, x, y) of each baseline.
    base: Vec<(String, f64, f64)>,
    ceilings: Vec<f64>,
    floor: f64,
    x: (f64, f64),
    y: (f64, f64),
}

impl Layout {
    fn of(f: &Frontier) -> Layout {
        let (unit, div) = if f.no_recompute_bytes >= 1 << 30 {
            ("GiB", (1u64 << 30) as f64)
        } else {
            ("MiB", (1u64 << 20) as f64)
        };
        let y = |b: u64| b as f64 / div;
        let base_ms = f.base_p50_ms;
        // x of a plan: measured p50 increase (ms) or estimated % of a step.
        let x = |p50: Option<f64>, pct: f64| match (f.validated, p50, base_ms) {
            (true, Some(p), Some(b)) => p - b,
            _ => pct,
        };
        let x_label = if f.validated {
            "added step time (ms, measured p50 increase on ONNX Runtime)"
        } else if f.step_kernel_ms.is_some() {
            "added step time (% of a step, predicted from ONNX Runtime's measured node times)"
        } else {
            "added step time (% of a step, estimated from added FLOPs)"
        };
        let points: Vec<(f64, f64)> = f
            .points
            .iter()
            .filter(|p| p.fits)
            .map(|p| {
                (
                    x(
                        p.p50_ms,
                        p.added_ms_percent.unwrap_or(p.added_flops_percent),
                    ),
                    y(p.measured_peak_bytes
                        .or(p.predicted_peak_bytes)
                        .unwrap_or(0)),
                )
            })
            .collect();
        let base: Vec<(String, f64, f64)> = f
            .baselines
            .iter()
            .map(|b| {
                (
                    b.name.clone(),
                    x(
                        b.p50_ms,
                        b.added_ms_percent.unwrap_or(b.added_flops_percent),
                    ),
                    y(b.measured_peak_bytes.unwrap_or(b.predicted_peak_bytes)),
                )
            })
            .collect();
        let ceilings: Vec<f64> = f.points.iter().map(|p| y(p.ceiling_bytes)).collect();
        let floor = y(f.floor_bytes);
        let xs = points.iter().map(|p| p.0).chain(base.iter().map(|b| b.1));
        let (mut x0, mut x1) = xs.fold((0.0f64, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if x1 - x0 < 1e-9 {
            x1 = x0 + 1.0;
        }
        // Room on the right for the baselines' names.
        let pad = x1 - x0;
        x0 -= 0.06 * pad;
        x1 += 0.2 * pad;
        let ys = points
            .iter()
            .map(|p| p.1)
            .chain(base.iter().map(|b| b.2))
            .chain(ceilings.iter().copied())
            .chain([floor]);
        let (mut y0, mut y1) = ys.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if y1 - y0 < 1e-9 {
            y1 = y0 + 1.0;
        }
        // Headroom above the data for the legend.
        let span = y1 - y0;
        y0 = (y0 - 0.08 * span).max(0.0);
        y1 += 0.55 * span;
        Layout {
            unit,
            x_label,
            points,
            base,
            ceilings,
            floor,
            x: (x0, x1),
            y: (y0, y1),
        }
    }
}

/// Draw the layout on `root`: axes, ceilings, floor, frontier, baselines, legend.
fn draw<DB: DrawingBackend>(
    f: &Frontier,
    l: &Layout,
    root: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (x0, x1) = l.x;
    root.fill(&WHITE)?;
    let title = format!("{}: device peak against added step time", f.model);
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, l.y.0..l.y.1)?;
    let x_fmt = |v: &f64| {
        if f.validated {
            format!("{v:.1}")
        } else {
            format!("{v:.0}%")
        }
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(l.x_label)
        .y_desc(format!(
            "device peak ({}, {})",
            l.unit,
            if f.validated { "measured" } else { "predicted" }
        ))
        .axis_desc_style(("sans-serif", 15))
        .label_style(("sans-serif", 13))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&|v: &f64| format!("{v:.2}"))
        .draw()?;
    let grey = RGBColor(150, 150, 150);
    for (i, &c) in l.ceilings.iter().enumerate() {
        let s = chart.draw_series(DashedLineSeries::new(
            [(x0, c), (x1, c)],
            6,
            4,
            grey.stroke_width(1),
        ))?;
        if i == 0 {
            s.label("ceilings swept")
                .legend(move |(a, b)| PathElement::new([(a, b), (a + 18, b)], grey));
        }
    }
    let red = RGBColor(200, 40, 40);
    chart
        .draw_series(LineSeries::new(
            [(x0, l.floor), (x1, l.floor)],
            red.stroke_width(1),
        ))?
        .label("floor (lowest reachable)")
        .legend(move |(a, b)| PathElement::new([(a, b), (a + 18, b)], red));
    let blue = RGBColor(30, 90, 200);
    let mut line = l.points.clone();
    line.sort_by(|a, b| a.0.total_cmp(&b.0));
    chart
        .draw_series(LineSeries::new(line, blue.stroke_width(2)))?
        .label("frontier: cheapest plan per ceiling")
        .legend(move |(a, b)| PathElement::new([(a, b), (a + 18, b)], blue.stroke_width(2)));
    chart.draw_series(l.points.iter().map(|&p| Circle::new(p, 4, blue.filled())))?;
    for (name, bx, by) in &l.base {
        let (color, label) = match name.as_str() {
            NO_RECOMPUTE => (RGBColor(0, 150, 70), "baseline: no recompute"),
            PER_BLOCK => (RGBColor(230, 130, 0), "baseline: per-block checkpointing"),
            PER_LAYER => (RGBColor(180, 90, 30), "baseline: per-layer checkpointing"),
            RECOMPUTE_ALL => (RGBColor(140, 40, 160), "baseline: recompute-all"),
            _ => (BLACK, "baseline"),
        };
        chart
            .draw_series([TriangleMarker::new((*bx, *by), 8, color.filled())])?
            .label(label)
            .legend(move |(a, b)| TriangleMarker::new((a + 9, b), 6, color.filled()));
        chart.draw_series([Text::new(
            format!("  {name}"),
            (*bx, *by),
            ("sans-serif", 12).into_font().color(&color),
        )])?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperMiddle)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()
}
