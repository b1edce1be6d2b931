//! SVG line charts of the runs (plotters, SVG backend only).

use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points in x order.
    pub points: Vec<(f64, f64)>,
}

/// Where the legend goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Legend {
    /// Top left corner (for lines that rise to the right).
    UpperLeft,
    /// Bottom right corner.
    LowerRight,
}

/// A line chart as SVG text.
pub fn line_chart(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    legend: Legend,
) -> Result<String> {
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {title:?}: {e}");
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max)
        .max(1.0)
        * 1.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (860, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(|e| err(&e))?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(|e| err(&e))?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        if series.len() > 1 || series.iter().any(|s| !s.name.is_empty()) {
            chart
                .configure_series_labels()
                .position(match legend {
                    Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
                    Legend::LowerRight => SeriesLabelPosition::LowerRight,
                })
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.4))
                .draw()
                .map_err(|e| err(&e))?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_series_with_its_legend() {
        let series = vec![
            Series {
                name: "run 1".into(),
                points: vec![(0.0, 0.0), (10.0, 40.0), (20.0, 100.0)],
            },
            Series {
                name: "run 2".into(),
                points: vec![(0.0, 0.0), (12.0, 50.0), (25.0, 100.0)],
            },
        ];
        let svg = line_chart(
            "Clusters Running",
            "seconds",
            "clusters",
            &series,
            Legend::LowerRight,
        )
        .unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
        assert!(svg.contains("Clusters Running"));
        assert!(svg.contains("run 1") && svg.contains("run 2"));
        assert!(svg.matches("<polyline").count() >= 2);
    }

    #[test]
    fn an_empty_chart_still_renders() {
        let svg = line_chart("nothing", "x", "y", &[], Legend::UpperLeft).unwrap();
        assert!(svg.contains("nothing"));
    }
}
