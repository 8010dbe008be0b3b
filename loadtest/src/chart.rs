//! SVG charts: latency percentiles (one curve per histogram, the x axis in
//! "nines", 50%, 90%, 99%, 99.9%…, so the tail gets room), the bars of
//! a comparison of gateways, and a count per second (the storm).

use std::path::Path;

use anyhow::Context as _;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::hist::Hist;

/// Steps per nine on the x axis.
const STEPS_PER_NINE: u32 = 25;

/// Draws the percentile curves of `series` (µs histograms) to `path`.
pub(crate) fn percentiles(
    path: &Path,
    title: &str,
    series: &[(String, Hist)],
) -> anyhow::Result<()> {
    let curves: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .filter(|(_, h)| !h.is_empty())
        .map(|(label, h)| (label.clone(), curve(h)))
        .collect();
    let max_x = curves
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.0))
        .fold(1.0, f64::max)
        .ceil();
    let max_y = curves
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.05;
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(to_anyhow)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..max_x, 0.0..max_y)
        .map_err(to_anyhow)?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("ms")
        .x_labels(max_x as usize + 1)
        .x_label_formatter(&|x| percentile_label(*x))
        .draw()
        .map_err(to_anyhow)?;
    for (index, (label, points)) in curves.into_iter().enumerate() {
        let color = Palette99::pick(index).to_rgba();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(to_anyhow)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(to_anyhow)?;
    root.present()
        .map_err(to_anyhow)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Draws one column per second of `counts` to `path`, with a dashed
/// horizontal line at each `(value, label)` of `marks` (an average, a
/// limit).
pub(crate) fn per_second(
    path: &Path,
    title: &str,
    y_desc: &str,
    counts: &[u64],
    marks: &[(f64, String)],
) -> anyhow::Result<()> {
    let seconds = counts.len().max(1) as u32;
    let top = counts
        .iter()
        .map(|c| *c as f64)
        .chain(marks.iter().map(|(v, _)| *v))
        .fold(1.0, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(to_anyhow)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(72)
        .build_cartesian_2d(0u32..seconds, 0.0..top)
        .map_err(to_anyhow)?;
    chart
        .configure_mesh()
        .x_desc("second")
        .y_desc(y_desc)
        .x_labels(seconds.min(40) as usize)
        .draw()
        .map_err(to_anyhow)?;
    let fill = Palette99::pick(0).to_rgba().filled();
    chart
        .draw_series(counts.iter().enumerate().map(|(s, c)| {
            let s = s as u32;
            Rectangle::new([(s, 0.0), (s + 1, *c as f64)], fill)
        }))
        .map_err(to_anyhow)?;
    for (index, (value, label)) in marks.iter().enumerate() {
        let color = Palette99::pick(index + 1).to_rgba();
        chart
            .draw_series(DashedLineSeries::new(
                [(0, *value), (seconds, *value)],
                8,
                4,
                color.stroke_width(2),
            ))
            .map_err(to_anyhow)?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    if !marks.is_empty() {
        chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(to_anyhow)?;
    }
    root.present()
        .map_err(to_anyhow)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// One figure of a comparison: its name and each gateway's value.
#[derive(Debug, Clone)]
pub(crate) struct BarGroup {
    /// The figure, with its unit.
    pub label: String,
    /// Gateway name and value (`None`: not measured).
    pub values: Vec<(String, Option<f64>)>,
}

/// Pixels per bar row of the comparison chart.
const BAR_ROW_PX: u32 = 22;

/// Draws a comparison as horizontal bars to `path`: per figure, one bar
/// per gateway, each figure scaled to its largest value (figures have
/// different units), with the values written beside the bars.
pub(crate) fn bars(path: &Path, title: &str, groups: &[BarGroup]) -> anyhow::Result<()> {
    struct Row {
        label: String,
        text: String,
        series: usize,
        length: f64,
    }
    let mut names: Vec<String> = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        if g > 0 {
            // A gap between figures.
            rows.push(Row {
                label: String::new(),
                text: String::new(),
                series: usize::MAX,
                length: 0.0,
            });
        }
        let top = group
            .values
            .iter()
            .filter_map(|(_, v)| *v)
            .fold(0.0, f64::max);
        for (index, (name, value)) in group.values.iter().enumerate() {
            let series = names.iter().position(|n| n == name).unwrap_or_else(|| {
                names.push(name.clone());
                names.len() - 1
            });
            rows.push(Row {
                label: if index == 0 {
                    group.label.clone()
                } else {
                    String::new()
                },
                text: match value {
                    Some(v) => format!("{name} {}", crate::hist::round2(*v)),
                    None => format!("{name} –"),
                },
                series,
                length: match value {
                    Some(v) if top > 0.0 => v / top,
                    _ => 0.0,
                },
            });
        }
    }
    // Row k is drawn at the top for k = 0: segment `count - 1 - k`.
    let count = i32::try_from(rows.len()).unwrap_or(i32::MAX).max(1);
    let at = |k: usize| count - 1 - i32::try_from(k).unwrap_or(count - 1);
    let height = 130 + BAR_ROW_PX * rows.len().max(1) as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(to_anyhow)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(330)
        .build_cartesian_2d(0.0..1.45, (0..count).into_segmented())
        .map_err(to_anyhow)?;
    let labels: Vec<String> = rows.iter().map(|r| r.label.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("share of the larger value of each figure (the numbers are the values)")
        .x_labels(4)
        .x_label_formatter(&|x| format!("{:.0}%", x * 100.0))
        .y_labels(rows.len().max(1))
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(y) => usize::try_from(count - 1 - *y)
                .ok()
                .and_then(|k| labels.get(k))
                .cloned()
                .unwrap_or_default(),
            _ => String::new(),
        })
        .draw()
        .map_err(to_anyhow)?;
    for (series, name) in names.iter().enumerate() {
        let color = Palette99::pick(series).to_rgba();
        let data: Vec<(i32, f64)> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.series == series)
            .map(|(k, r)| (at(k), r.length))
            .collect();
        chart
            .draw_series(
                Histogram::horizontal(&chart)
                    .style(color.filled())
                    .margin(3)
                    .data(data),
            )
            .map_err(to_anyhow)?
            .label(name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    chart
        .draw_series(rows.iter().enumerate().map(|(k, r)| {
            Text::new(
                format!(" {}", r.text),
                (r.length, SegmentValue::CenterOf(at(k))),
                TextStyle::from(("sans-serif", 13).into_font())
                    .pos(Pos::new(HPos::Left, VPos::Center)),
            )
        }))
        .map_err(to_anyhow)?;
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(to_anyhow)?;
    root.present()
        .map_err(to_anyhow)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Points (nines, ms) from 0% to the last percentile the data supports.
fn curve(h: &Hist) -> Vec<(f64, f64)> {
    let max_nines = (h.len() as f64).log10().clamp(1.0, 5.0);
    let steps = (max_nines * f64::from(STEPS_PER_NINE)) as u32;
    let mut points: Vec<(f64, f64)> = (0..=steps)
        .map(|i| {
            let x = f64::from(i) / f64::from(STEPS_PER_NINE);
            let q = 1.0 - 10f64.powf(-x);
            (x, h.value_at_quantile(q) as f64 / 1000.0)
        })
        .collect();
    points.push((max_nines, h.max() as f64 / 1000.0));
    points
}

/// "90%", "99.9%" for x = 1, 3.
fn percentile_label(x: f64) -> String {
    let q = (1.0 - 10f64.powf(-x)) * 100.0;
    let text = format!("{q:.3}");
    format!("{}%", text.trim_end_matches('0').trim_end_matches('.'))
}

fn to_anyhow<E: std::fmt::Display>(err: E) -> anyhow::Error {
    anyhow::anyhow!("chart: {err}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparison_bars_are_drawn() {
        let dir = std::env::temp_dir().join(format!("loadtest-bars-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bars.svg");
        let groups = vec![
            BarGroup {
                label: "RSS per connection, KiB".into(),
                values: vec![("pushgate".into(), Some(3.3)), ("nchan".into(), Some(10.2))],
            },
            BarGroup {
                label: "lost".into(),
                values: vec![("pushgate".into(), Some(0.0)), ("nchan".into(), None)],
            },
        ];
        bars(&path, "compare", &groups).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("nchan 10.2") && svg.contains("RSS per connection"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_count_per_second_is_drawn() {
        let dir = std::env::temp_dir().join(format!("loadtest-cols-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cols.svg");
        let marks = [(30.0, "average".to_owned())];
        per_second(&path, "storm", "reconnects", &[10, 40, 35, 0], &marks).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("average") && svg.contains("reconnects"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn labels_read_as_percentiles() {
        assert_eq!(percentile_label(0.0), "0%");
        assert_eq!(percentile_label(1.0), "90%");
        assert_eq!(percentile_label(3.0), "99.9%");
    }
}
