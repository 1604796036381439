//! The backtest's plot: instance counts as steps (observed, simulated HPA, and the scaler's
//! recommendation as a band from its lowest to its highest count per pixel column), minReplicas
//! and maxReplicas, the load on the right axis, and behind them shaded bands for every reason
//! other than the load (brake, schedule, max, …) and for the evaluations without an answer. The
//! legend sits right of the data; time ticks are round local times ([`super::ticks`]). SVG
//! (text stays text), and PNG through resvg with an embedded font (no system fonts).
use std::path::Path;

use anyhow::Context as _;
use jiff::tz::TimeZone;
use plotters::chart::DualCoordChartContext;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::types::{RangedCoordf64, RangedCoordi64};
use plotters::prelude::*;

use super::output::atomic_write;
use super::ticks;
use scaler_core::decision::Reason;
use scaler_core::replay::Row;

/// Buckets across the plot at most (about 1.3 px each): a longer table is drawn per bucket, each
/// count at its maximum (the recommendation at its minimum and maximum), so a short spike still
/// shows and a noisy recommendation is a band, not dense vertical bars.
const MAX_BUCKETS: usize = 600;
pub const SIZE: (u32, u32) = (1200, 520);
/// Width of the plot part; the legend takes the rest.
const PLOT_WIDTH: u32 = 920;

/// What the plot shows besides the table.
pub struct Frame<'a> {
    pub title: &'a str,
    pub load_label: &'a str,
    pub zone: &'a TimeZone,
    pub zone_name: &'a str,
    /// The trigger's minReplicas and maxReplicas.
    pub min_replicas: u32,
    pub max_replicas: u32,
}

pub fn svg_text(frame: &Frame<'_>, rows: &[Row]) -> anyhow::Result<String> {
    let mut text = String::new();
    draw(&mut text, frame, rows).map_err(|e| anyhow::anyhow!("drawing the plot: {e}"))?;
    Ok(text)
}

pub fn write_svg(path: &Path, text: &str) -> anyhow::Result<()> {
    atomic_write(path, |file| {
        std::io::Write::write_all(file, text.as_bytes())?;
        Ok(())
    })
    .with_context(|| format!("--plot {}", path.display()))
}

/// The SVG rendered to PNG with DejaVu Sans compiled in (the binary needs no fonts).
pub fn write_png(path: &Path, svg: &str) -> anyhow::Result<()> {
    use resvg::{tiny_skia, usvg};
    let png = (|| {
        let mut options = usvg::Options::default();
        let fonts = options.fontdb_mut();
        fonts.load_font_data(dejavu::sans::regular().to_vec());
        fonts.set_sans_serif_family("DejaVu Sans");
        options.font_family = "DejaVu Sans".into();
        let tree = usvg::Tree::from_str(svg, &options)?;
        let mut pixmap =
            tiny_skia::Pixmap::new(SIZE.0, SIZE.1).context("a pixmap of the plot's size")?;
        resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
        pixmap.encode_png().context("encoding the PNG")
    })()
    .context("--png: rendering the plot")?;
    atomic_write(path, |file| {
        std::io::Write::write_all(file, &png)?;
        Ok(())
    })
    .with_context(|| format!("--png {}", path.display()))
}

/// One bucket of consecutive rows.
#[derive(Debug, Clone, PartialEq)]
struct Bucket {
    time: i64,
    load: Option<f64>,
    observed: Option<f64>,
    simulated: f64,
    /// The lowest and highest recommendation.
    recommended: Option<(f64, f64)>,
}

/// Buckets each side whose recommendations widen a bucket's band: a recommendation flickering
/// across a threshold is one band, not a bar per bucket (it widens a real step by this much).
const BAND_REACH: usize = 3;

fn buckets(rows: &[Row]) -> Vec<Bucket> {
    let size = rows.len().div_ceil(MAX_BUCKETS).max(1);
    let top = |values: &mut dyn Iterator<Item = f64>| values.reduce(f64::max);
    let mut out: Vec<Bucket> = rows
        .chunks(size)
        .map(|chunk| {
            let rec = chunk.iter().filter_map(|r| r.recommended.map(f64::from));
            let low = rec.clone().reduce(f64::min);
            Bucket {
                time: chunk[0].time,
                load: top(&mut chunk.iter().filter_map(|r| r.load)),
                observed: top(&mut chunk.iter().filter_map(|r| r.observed.map(f64::from))),
                simulated: top(&mut chunk.iter().map(|r| f64::from(r.simulated))).unwrap_or(0.0),
                recommended: low.zip(rec.reduce(f64::max)),
            }
        })
        .collect();
    let own: Vec<Option<(f64, f64)>> = out.iter().map(|b| b.recommended).collect();
    for (i, bucket) in out.iter_mut().enumerate() {
        // Within a run of answers only: a gap stays a gap.
        if bucket.recommended.is_none() {
            continue;
        }
        let near = &own[i.saturating_sub(BAND_REACH)..(i + BAND_REACH + 1).min(own.len())];
        bucket.recommended = near
            .iter()
            .flatten()
            .copied()
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
    }
    out
}

/// Runs of consecutive buckets where `value` is present.
fn runs<T: Copy>(buckets: &[Bucket], value: impl Fn(&Bucket) -> Option<T>) -> Vec<Vec<(i64, T)>> {
    let mut out: Vec<Vec<(i64, T)>> = Vec::new();
    let mut open = false;
    for b in buckets {
        match (value(b), open) {
            (Some(v), true) => out.last_mut().expect("open run").push((b.time, v)),
            (Some(v), false) => out.push(vec![(b.time, v)]),
            (None, _) => {}
        }
        open = value(b).is_some();
    }
    out
}

/// A count holds until the next point, and the last one for one `step`: draw it as steps.
fn steps(run: &[(i64, f64)], step: i64) -> Vec<(i64, f64)> {
    let mut out = Vec::with_capacity(run.len() * 2);
    for pair in run.windows(2) {
        out.push(pair[0]);
        out.push((pair[1].0, pair[0].1));
    }
    if let Some(&(t, v)) = run.last() {
        out.push((t, v));
        out.push((t + step, v));
    }
    out
}

/// The spans `[start, end)` of the rows where `holds`, exact to the row; spans closer than
/// `merge` seconds are drawn as one (so a flickering reason stays at most one band per bucket).
pub fn spans(rows: &[Row], step: i64, merge: i64, holds: impl Fn(&Row) -> bool) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for row in rows.iter().filter(|r| holds(r)) {
        match out.last_mut() {
            Some(last) if row.time - last.1 <= merge => last.1 = row.time + step,
            _ => out.push((row.time, row.time + step)),
        }
    }
    out
}

/// Reasons drawn as bands: every one but the load's own (and the floor, which the minReplicas
/// line shows), each in its colour.
const BANDS: [(Reason, RGBColor); 9] = [
    (Reason::Brake, RGBColor(255, 140, 0)),
    (Reason::Schedule, RGBColor(150, 80, 200)),
    (Reason::Max, RGBColor(220, 40, 120)),
    (Reason::Quorum, RGBColor(0, 160, 160)),
    (Reason::DryRun, RGBColor(120, 120, 200)),
    (Reason::ScaleInHold, RGBColor(160, 110, 40)),
    (Reason::Quota, RGBColor(200, 200, 0)),
    (Reason::QuotaUnreadable, RGBColor(200, 160, 0)),
    (Reason::Stuck, RGBColor(120, 0, 0)),
];
pub const GAP_COLOR: RGBColor = RGBColor(90, 90, 90);

/// The chart: times (with round key points) against counts, the load on the secondary axis.
type Chart<'a, 'b> = DualCoordChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<WithKeyPoints<RangedCoordi64>, RangedCoordf64>,
    Cartesian2d<RangedCoordi64, RangedCoordf64>,
>;
/// The legend's entries, drawn right of the data once every series is (plotters' own series
/// labels are drawn inside the plotting area, over the data).
type Legend = Vec<(String, ShapeStyle)>;
type DrawResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Where the data sits: the times, and the tops of both axes.
struct Extent {
    first: i64,
    /// One step past the last row.
    end: i64,
    step: i64,
    /// Spans of a reason closer than this many seconds (a bucket) are one band.
    merge: i64,
    count_top: f64,
    load_top: f64,
    /// Whether the maxReplicas line is drawn (it is near the data).
    max_shown: bool,
}

fn extent(frame: &Frame<'_>, rows: &[Row], buckets: &[Bucket]) -> DrawResult<Extent> {
    let (first, last) = match (rows.first(), rows.last()) {
        (Some(f), Some(l)) => (f.time, l.time),
        _ => return Err("no rows to plot".into()),
    };
    let step = rows.get(1).map_or(60, |r| r.time - first).max(1);
    let end = last + step;
    let data_top = buckets
        .iter()
        .flat_map(|b| [b.observed, Some(b.simulated), b.recommended.map(|r| r.1)])
        .flatten()
        .fold(f64::from(frame.min_replicas), f64::max);
    // maxReplicas is drawn when it is near the data; a far one (KEDA's default 100) would flatten it.
    let max = f64::from(frame.max_replicas);
    let max_shown = max <= data_top * 2.0 + 2.0;
    let count_top = if max_shown {
        data_top.max(max)
    } else {
        data_top
    } + 1.0;
    let load_top = (buckets.iter().filter_map(|b| b.load).fold(0.0, f64::max) * 1.1).max(1.0);
    Ok(Extent {
        first,
        end,
        step,
        merge: (end - first) / MAX_BUCKETS as i64,
        count_top,
        load_top,
        max_shown,
    })
}

fn draw(out: &mut String, frame: &Frame<'_>, rows: &[Row]) -> DrawResult {
    let buckets = buckets(rows);
    let ext = extent(frame, rows, &buckets)?;
    let root = SVGBackend::with_string(out, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let (area, legend_area) = root.split_horizontally(PLOT_WIDTH);
    let mut chart = axes(&area, frame, &ext)?;
    let mut legend = Legend::new();
    // Bands first, so the lines are drawn over them.
    draw_bands(&mut chart, rows, &ext, &mut legend)?;
    draw_load(&mut chart, &runs(&buckets, |b| b.load), &mut legend)?;
    draw_bounds(&mut chart, frame, &ext, &mut legend)?;
    draw_recommended(
        &mut chart,
        &runs(&buckets, |b| b.recommended),
        ext.step,
        &mut legend,
    )?;
    draw_counts(&mut chart, &buckets, ext.step, &mut legend)?;
    draw_legend(&legend_area, &legend)?;
    root.present()?;
    Ok(())
}

/// The chart on `area` with its caption, time and count axes and the load's axis on the right.
fn axes<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    frame: &Frame<'_>,
    ext: &Extent,
) -> DrawResult<Chart<'a, 'b>> {
    let (first, end) = (ext.first, ext.end);
    let (interval, key_points) = ticks::ticks(first, end, frame.zone, 9);
    let mut chart = ChartBuilder::on(area)
        .caption(frame.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(52)
        .right_y_label_area_size(72)
        .build_cartesian_2d(
            (first..end).with_key_points(key_points.clone()),
            0.0..ext.count_top,
        )?
        .set_secondary_coord(first..end, 0.0..ext.load_top);
    let first_tick = key_points.first().copied();
    let time_label = |t: &i64| ticks::label(*t, interval, frame.zone, Some(*t) == first_tick);
    let x_desc = format!("time ({})", frame.zone_name);
    chart
        .configure_mesh()
        // Lines at the ticks only: a count's tenths say nothing.
        .light_line_style(TRANSPARENT)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 15))
        .x_label_formatter(&time_label)
        .x_desc(x_desc.as_str())
        .y_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("instances")
        .draw()?;
    chart
        .configure_secondary_axes()
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 15))
        .y_desc(frame.load_label)
        .draw()?;
    Ok(chart)
}

/// A shaded band per reason other than the load's (over its rows), then one over the rows
/// without an answer.
fn draw_bands(chart: &mut Chart, rows: &[Row], ext: &Extent, legend: &mut Legend) -> DrawResult {
    let shaded = BANDS
        .iter()
        .map(|&(reason, color)| {
            let bands = spans(rows, ext.step, ext.merge, |r| r.reason == Some(reason));
            (
                bands,
                color.mix(0.25),
                format!("reason: {}", reason.as_str()),
            )
        })
        .chain(std::iter::once((
            spans(rows, ext.step, ext.merge, |r| r.error.is_some()),
            GAP_COLOR.mix(0.3),
            "no answer (metrics gap or error)".into(),
        )));
    for (bands, color, label) in shaded {
        if bands.is_empty() {
            continue;
        }
        let style = color.filled();
        chart.draw_series(
            bands
                .iter()
                .map(|&(a, b)| Rectangle::new([(a, 0.0), (b, ext.count_top)], style)),
        )?;
        legend.push((label, style));
    }
    Ok(())
}

/// The load on the right axis, a line per run of answers.
fn draw_load(chart: &mut Chart, load: &[Vec<(i64, f64)>], legend: &mut Legend) -> DrawResult {
    let grey = ShapeStyle::from(RGBColor(150, 150, 150));
    for run in load {
        chart.draw_secondary_series(LineSeries::new(run.iter().copied(), grey))?;
    }
    legend.push(("load (right axis)".into(), grey));
    Ok(())
}

/// minReplicas and maxReplicas as dashed lines; a maxReplicas far above the data is only named.
fn draw_bounds(
    chart: &mut Chart,
    frame: &Frame<'_>,
    ext: &Extent,
    legend: &mut Legend,
) -> DrawResult {
    let bounds: [(f64, &str, RGBColor, bool); 2] = [
        (
            f64::from(frame.min_replicas),
            "minReplicas",
            RGBColor(0, 120, 0),
            true,
        ),
        (
            f64::from(frame.max_replicas),
            "maxReplicas",
            RGBColor(160, 0, 0),
            ext.max_shown,
        ),
    ];
    for (value, name, color, shown) in bounds {
        let style = ShapeStyle::from(color).stroke_width(1);
        if shown {
            chart.draw_series(DashedLineSeries::new(
                [(ext.first, value), (ext.end, value)],
                6,
                4,
                style,
            ))?;
            legend.push((format!("{name} {value} (dashed)"), style));
        } else {
            legend.push((format!("{name} {value} (above the plot)"), style));
        }
    }
    Ok(())
}

/// The recommendation: a band from its lowest to its highest count, outlined at the highest.
fn draw_recommended(
    chart: &mut Chart,
    recommended: &[Vec<(i64, (f64, f64))>],
    step: i64,
    legend: &mut Legend,
) -> DrawResult {
    let blue = RGBColor(40, 90, 220);
    for run in recommended {
        let high: Vec<(i64, f64)> = run.iter().map(|&(t, r)| (t, r.1)).collect();
        let low: Vec<(i64, f64)> = run.iter().map(|&(t, r)| (t, r.0)).collect();
        let mut outline = steps(&high, step);
        outline.extend(steps(&low, step).into_iter().rev());
        chart.draw_series(std::iter::once(Polygon::new(
            outline,
            blue.mix(0.25).filled(),
        )))?;
        chart.draw_series(LineSeries::new(
            steps(&high, step),
            ShapeStyle::from(blue).stroke_width(1),
        ))?;
    }
    legend.push(("recommended (scaler)".into(), blue.into()));
    legend.push(("  its range (band)".into(), blue.mix(0.25).filled()));
    Ok(())
}

/// The observed and the simulated counts as steps.
fn draw_counts(
    chart: &mut Chart,
    buckets: &[Bucket],
    step: i64,
    legend: &mut Legend,
) -> DrawResult {
    let observed = runs(buckets, |b| b.observed);
    let simulated = runs(buckets, |b| Some(b.simulated));
    // Widest first, so a line that coincides with another still shows on top of it.
    let counts = [
        (&observed, RGBColor(60, 170, 60), 6, "observed instances"),
        (&simulated, RGBColor(220, 50, 40), 3, "simulated (HPA)"),
    ];
    for (series, color, width, label) in counts {
        let style = ShapeStyle::from(color).stroke_width(width);
        for run in series {
            chart.draw_series(LineSeries::new(steps(run, step), style))?;
        }
        legend.push((label.into(), style));
    }
    Ok(())
}

/// Under the legend: what the simulated count is, and what the replay does not simulate, so no
/// figure is read as more than it is (docs/backtest.md, "Not simulated").
const NOTES: [&str; 5] = [
    "simulated: what the HPA asks for; the",
    "holds hold it. Not simulated: the time",
    "CNPG takes to create an instance, pod",
    "readiness (it serves at once). Load,",
    "lag and writes come from history.",
];

/// One line per entry: a swatch (a filled box for a band, a stroke for a line) and its label;
/// then the notes.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[(String, ShapeStyle)],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let font = ("sans-serif", 14).into_font();
    let mut y = 48;
    for (label, style) in entries {
        if style.filled {
            area.draw(&Rectangle::new([(6, y - 7), (30, y + 7)], *style))?;
        } else {
            area.draw(&PathElement::new([(6, y), (30, y)], *style))?;
        }
        area.draw(&Text::new(label.as_str(), (38, y - 7), font.clone()))?;
        y += 22;
    }
    let note = ("sans-serif", 12).into_font().color(&RGBColor(90, 90, 90));
    for line in NOTES {
        area.draw(&Text::new(line, (6, y), note.clone()))?;
        y += 16;
    }
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
            reason: observed.map(|_| Reason::Load),
            simulated: 2,
            observed,
            error: observed.is_none().then(|| "gap".into()),
        }
    }

    fn frame(zone: &TimeZone) -> Frame<'_> {
        Frame {
            title: "pg",
            load_label: "connections",
            zone,
            zone_name: "UTC",
            min_replicas: 2,
            max_replicas: 8,
        }
    }

    #[test]
    fn gaps_split_lines_and_long_tables_are_bucketed_keeping_spikes_and_ranges() {
        let rows = [
            row(0, Some(2)),
            row(15, None),
            row(30, Some(3)),
            row(45, Some(4)),
        ];
        let b = buckets(&rows);
        assert_eq!(
            runs(&b, |b| b.observed),
            [vec![(0, 2.0)], vec![(30, 3.0), (45, 4.0)]]
        );
        let long: Vec<Row> = (0..10_000)
            .map(|i| {
                row(
                    i * 15,
                    Some(if i == 7_777 { 9 } else { 2 + (i % 2) as u32 }),
                )
            })
            .collect();
        let b = buckets(&long);
        assert!(b.len() <= MAX_BUCKETS);
        assert!(
            b.iter().any(|b| b.observed == Some(9.0)),
            "the spike survives bucketing"
        );
        // A recommendation flickering 2/3 every row is one band from 2 to 3, not bars.
        assert!(
            b.iter()
                .all(|b| matches!(b.recommended, Some((2.0, 3.0 | 9.0))))
        );
        assert_eq!(
            steps(&[(0, 1.0), (15, 2.0)], 15),
            [(0, 1.0), (15, 1.0), (15, 2.0), (30, 2.0)]
        );
    }

    #[test]
    fn spans_are_exact_to_the_row_and_merge_flicker() {
        let rows: Vec<Row> = (0..10)
            .map(|i| row(i * 60, (![3, 4, 7].contains(&i)).then_some(2)))
            .collect();
        assert_eq!(
            spans(&rows, 60, 0, |r| r.error.is_some()),
            [(180, 300), (420, 480)]
        );
        assert_eq!(spans(&rows, 60, 120, |r| r.error.is_some()), [(180, 480)]);
    }

    #[test]
    fn draws_every_series_bands_and_bounds_in_the_legend() {
        let mut rows: Vec<Row> = (0..100)
            .map(|i| row(i * 60, Some(2 + (i / 30) as u32)))
            .collect();
        rows[50].reason = Some(Reason::Brake);
        rows[60] = row(3600, None);
        let zone = TimeZone::UTC;
        let text = svg_text(&frame(&zone), &rows).unwrap();
        assert!(text.starts_with("<svg"), "{}", &text[..50]);
        for label in [
            "observed instances",
            "recommended (scaler)",
            "simulated (HPA)",
            "load (right axis)",
            "reason: brake",
            "no answer",
            "minReplicas 2",
            "maxReplicas 8",
            "time (UTC)",
        ]
        .iter()
        .chain(&NOTES)
        {
            assert!(text.contains(label), "{label}");
        }
        assert!(
            !text.contains("reason: schedule"),
            "only reasons that occur"
        );
        let png = std::env::temp_dir().join(format!("backtest-plot-{}.png", std::process::id()));
        write_png(&png, &text).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // Width and height in the IHDR chunk.
        assert_eq!(
            u32::from_be_bytes(bytes[16..20].try_into().unwrap()),
            SIZE.0
        );
        std::fs::remove_file(&png).unwrap();
    }
}
