//! The backtest's plot: instance counts (observed, recommended, simulated) on the left axis and
//! the load on the right, as SVG (text stays text, so no fonts are needed to draw it).
use std::path::Path;

use anyhow::Context as _;
use plotters::prelude::*;

use super::output::atomic_write;
use scaler_core::replay::Row;

/// Points per line at most: a longer table is drawn in buckets, each at its maximum, so the
/// file stays small and a short spike still shows.
const MAX_POINTS: usize = 2000;
const SIZE: (u32, u32) = (1200, 520);

pub fn svg(path: &Path, title: &str, load_label: &str, rows: &[Row]) -> anyhow::Result<()> {
    let mut text = String::new();
    draw(&mut text, title, load_label, rows)
        .map_err(|e| anyhow::anyhow!("drawing the plot: {e}"))?;
    atomic_write(path, |file| {
        std::io::Write::write_all(file, text.as_bytes())?;
        Ok(())
    })
    .with_context(|| format!("--plot {}", path.display()))
}

type Series = Vec<Vec<(i64, f64)>>;

/// Runs of consecutive present values, at most [`MAX_POINTS`] buckets in all, each bucket at the
/// maximum of its present values.
fn lines(rows: &[Row], value: impl Fn(&Row) -> Option<f64>) -> Series {
    let bucket = rows.len().div_ceil(MAX_POINTS).max(1);
    let mut runs: Series = Vec::new();
    let mut open = false;
    for chunk in rows.chunks(bucket) {
        let top = chunk.iter().filter_map(&value).reduce(f64::max);
        match (top, open) {
            (Some(v), true) => runs.last_mut().expect("open run").push((chunk[0].time, v)),
            (Some(v), false) => runs.push(vec![(chunk[0].time, v)]),
            (None, _) => {}
        }
        open = top.is_some();
    }
    runs
}

/// A count holds until the next point: draw it as steps.
fn steps(run: &[(i64, f64)]) -> Vec<(i64, f64)> {
    let mut out = Vec::with_capacity(run.len() * 2);
    for pair in run.windows(2) {
        out.push(pair[0]);
        out.push((pair[1].0, pair[0].1));
    }
    out.extend(run.last());
    out
}

fn draw(
    out: &mut String,
    title: &str,
    load_label: &str,
    rows: &[Row],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(out, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (first, last) = match (rows.first(), rows.last()) {
        (Some(f), Some(l)) => (f.time, l.time.max(f.time + 1)),
        _ => return Err("no rows to plot".into()),
    };
    let load = lines(rows, |r| r.load);
    let observed = lines(rows, |r| r.observed.map(f64::from));
    let recommended = lines(rows, |r| r.recommended.map(f64::from));
    let simulated = lines(rows, |r| Some(f64::from(r.simulated)));
    let top = |s: &Series| s.iter().flatten().map(|p| p.1).fold(0.0, f64::max);
    let count_top = top(&observed).max(top(&recommended)).max(top(&simulated)) + 1.0;
    let load_top = (top(&load) * 1.1).max(1.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .right_y_label_area_size(64)
        .build_cartesian_2d(first..last, 0.0..count_top)?
        .set_secondary_coord(first..last, 0.0..load_top);
    let time_label = |t: &i64| {
        jiff::Timestamp::from_second(*t)
            .map(|t| t.strftime("%m-%d %H:%M").to_string())
            .unwrap_or_default()
    };
    chart
        .configure_mesh()
        .x_labels(8)
        .x_label_formatter(&time_label)
        .x_desc("time (UTC)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("instances")
        .draw()?;
    chart.configure_secondary_axes().y_desc(load_label).draw()?;
    let grey = RGBColor(150, 150, 150);
    for (i, run) in load.iter().enumerate() {
        let series = chart.draw_secondary_series(LineSeries::new(run.iter().copied(), grey))?;
        if i == 0 {
            series
                .label(format!("load ({load_label}, right axis)"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], grey));
        }
    }
    // Widest first, so a line that coincides with another still shows on top of it.
    let counts: [(&Series, RGBColor, u32, &str); 3] = [
        (&observed, RGBColor(60, 170, 60), 6, "observed instances"),
        (&simulated, RGBColor(220, 50, 40), 3, "simulated (HPA)"),
        (
            &recommended,
            RGBColor(40, 90, 220),
            1,
            "recommended (scaler)",
        ),
    ];
    for (series, color, width, label) in counts {
        let style = ShapeStyle::from(color).stroke_width(width);
        for (i, run) in series.iter().enumerate() {
            let drawn = chart.draw_series(LineSeries::new(steps(run), style))?;
            if i == 0 {
                drawn
                    .label(label)
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], style));
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(time: i64, observed: Option<u32>) -> Row {
        Row {
            time,
            load: observed.map(f64::from),
            recommended: observed,
            reason: None,
            simulated: 2,
            observed,
            error: None,
        }
    }

    #[test]
    fn gaps_split_lines_and_long_tables_are_bucketed_at_their_maximum() {
        let rows = [
            row(0, Some(2)),
            row(15, None),
            row(30, Some(3)),
            row(45, Some(4)),
        ];
        assert_eq!(
            lines(&rows, |r| r.observed.map(f64::from)),
            [vec![(0, 2.0)], vec![(30, 3.0), (45, 4.0)]]
        );
        let long: Vec<Row> = (0..10_000)
            .map(|i| row(i * 15, Some(if i == 7_777 { 9 } else { 2 })))
            .collect();
        let runs = lines(&long, |r| r.observed.map(f64::from));
        assert_eq!(runs.len(), 1);
        assert!(runs[0].len() <= MAX_POINTS);
        assert!(
            runs[0].iter().any(|p| p.1 == 9.0),
            "the spike survives bucketing"
        );
        assert_eq!(
            steps(&[(0, 1.0), (15, 2.0)]),
            [(0, 1.0), (15, 1.0), (15, 2.0)]
        );
    }

    #[test]
    fn draws_an_svg_with_every_series_in_the_legend() {
        let rows: Vec<Row> = (0..100)
            .map(|i| row(i * 60, Some(2 + (i / 30) as u32)))
            .collect();
        let mut text = String::new();
        draw(&mut text, "pg", "connections", &rows).unwrap();
        assert!(text.starts_with("<svg"), "{}", &text[..50]);
        for label in [
            "observed instances",
            "recommended (scaler)",
            "simulated (HPA)",
            "load (connections",
        ] {
            assert!(text.contains(label), "{label}");
        }
    }
}
