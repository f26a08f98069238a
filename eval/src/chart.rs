//! SVG charts (plotters, SVG backend only): grouped bars comparing systems over metrics, and
//! the quality-per-token curve of MemoryPacks.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::{EvalError, Result};

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn err<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> EvalError + '_ {
    move |e| EvalError::Chart {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// One bar series: a name and one value per group (absent values draw no bar).
#[derive(Debug, Clone)]
pub struct BarSeries {
    pub name: String,
    pub values: Vec<Option<f64>>,
}

/// Grouped bar chart: one group per entry of `groups` (metrics), one bar per series.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    groups: &[String],
    series: &[BarSeries],
    y_max: f64,
) -> Result<()> {
    let e = err(path);
    // The legend goes below the chart, two entries per row, so it never covers a bar.
    let legend_rows = series.len().div_ceil(2) as u32;
    let height = 440 + 22 * legend_rows + 10;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let (top, bottom) = root.split_vertically(440);
    let n = groups.len().max(1);
    let mut chart = ChartBuilder::on(&top)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0f64..n as f64, 0f64..y_max)
        .map_err(&e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("score")
        .draw()
        .map_err(&e)?;
    // Group names under the axis, centred on each group.
    let label_style =
        TextStyle::from(("sans-serif", 14).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (i, g) in groups.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
        top.draw(&Text::new(g.clone(), (px, py + 8), label_style.clone()))
            .map_err(&e)?;
    }
    let s = series.len().max(1) as f64;
    let width = 0.8 / s;
    for (si, ser) in series.iter().enumerate() {
        let c = color(si);
        let bars: Vec<Rectangle<(f64, f64)>> = ser
            .values
            .iter()
            .enumerate()
            .filter_map(|(gi, v)| {
                let v = (*v)?;
                let x0 = gi as f64 + 0.1 + si as f64 * width;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + width * 0.92, v.min(y_max))],
                    c.filled(),
                ))
            })
            .collect();
        chart.draw_series(bars).map_err(&e)?;
        let (col, row) = ((si % 2) as i32, (si / 2) as i32);
        let (x, y) = (70 + col * 420, 4 + row * 22);
        bottom
            .draw(&Rectangle::new([(x, y), (x + 14, y + 14)], c.filled()))
            .map_err(&e)?;
        bottom
            .draw(&Text::new(
                ser.name.clone(),
                (x + 22, y),
                ("sans-serif", 14).into_font(),
            ))
            .map_err(&e)?;
    }
    root.present().map_err(&e)?;
    Ok(())
}

/// One curve: a name and (x, y) points.
#[derive(Debug, Clone)]
pub struct Curve {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Line chart with markers (quality per token: x = tokens used, y = evidence recall).
pub fn curves(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Curve],
) -> Result<()> {
    let e = err(path);
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(&e)?;
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1.0f64, f64::max)
        * 1.08;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(52)
        .build_cartesian_2d(0f64..x_max, 0f64..1f64)
        .map_err(&e)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(&e)?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        chart
            .draw_series(LineSeries::new(s.points.clone(), c.stroke_width(2)))
            .map_err(&e)?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        chart
            .draw_series(s.points.iter().map(|p| Circle::new(*p, 4, c.filled())))
            .map_err(&e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(&e)?;
    root.present().map_err(&e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let bars = dir.path().join("bars.svg");
        grouped_bars(
            &bars,
            "modes",
            &["nDCG@10".into(), "Recall@100".into()],
            &[
                BarSeries {
                    name: "dense".into(),
                    values: vec![Some(0.7), Some(0.9)],
                },
                BarSeries {
                    name: "published".into(),
                    values: vec![Some(0.75), None],
                },
            ],
            1.0,
        )
        .unwrap();
        let svg = std::fs::read_to_string(&bars).unwrap();
        assert!(svg.contains("<svg") && svg.contains("nDCG@10") && svg.contains("published"));
        let line = dir.path().join("line.svg");
        curves(
            &line,
            "packs",
            "tokens",
            "evidence recall",
            &[Curve {
                name: "scifact".into(),
                points: vec![(200.0, 0.5), (450.0, 0.7)],
            }],
        )
        .unwrap();
        assert!(std::fs::read_to_string(&line).unwrap().contains("scifact"));
    }
}
