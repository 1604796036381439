//! The chart model: `chartgen app` reads the chart once, here, and discovery, rendering and
//! writing take the [`Chart`] by reference. Every bound of a read (size, regular files only,
//! links confined to the chart) is applied here; the only later reads are a refusal's look into
//! the chart's dependencies ([`dependencies`]) and the staged write's snapshot for rollback.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::{Map, Value};

use super::settings::{self, Settings};
use super::{Note, own_files, values};
use crate::output::{ensure_inside, read, read_optional};

/// The chart's files chartgen app reads and writes.
pub struct Paths {
    pub values: PathBuf,
    pub schema: PathBuf,
    pub settings: PathBuf,
    pub templates: PathBuf,
}

/// A template file under `templates/`: its path (as reached from the chart) and text.
pub struct Template {
    pub path: PathBuf,
    pub text: String,
    /// One of the files chartgen app writes (left out of what it discovers from).
    pub own: bool,
}

/// A template whose count lines were rewritten: its path and new text.
pub type Rewritten = (PathBuf, String);

/// What `chartgen app` reads of a chart, read once.
pub struct Chart {
    /// The chart directory as given.
    pub dir: PathBuf,
    /// Chart.yaml's `name`, checked to prefix template helpers.
    pub name: String,
    pub paths: Paths,
    /// chartgen.yaml as stored (None: no file), and parsed.
    pub settings_text: Option<String>,
    pub settings: Settings,
    pub values_text: String,
    pub values: Map<String, Value>,
    /// values.schema.json, if the chart has one.
    pub schema: Option<String>,
    /// Every template file the walk lists, sorted by path.
    pub templates: Vec<Template>,
    /// chartgen's own files under `templates/` as they are (None: absent), read by path whether
    /// or not the walk lists them: whatever sits there (a link out of the chart, a FIFO) must be
    /// chartgen's own, or be refused, before a write replaces it.
    own: OwnFiles,
}

/// chartgen's own files by path, with their text (None: absent).
type OwnFiles = Vec<(PathBuf, Option<String>)>;

impl Chart {
    /// Reads Chart.yaml, the settings, values.yaml, every template and values.schema.json, in
    /// that order, refusing what chartgen cannot read safely; links the walk does not follow
    /// are reported in `warnings` (filled even when the read fails).
    pub fn read(dir: &Path, warnings: &mut Vec<Note>) -> anyhow::Result<Chart> {
        let name = chart_name(dir)?;
        let paths = Paths::of(dir)?;
        let settings_text = read_optional(&paths.settings)?;
        let settings = Settings::parse(settings_text.as_deref())
            .map_err(|e| anyhow::anyhow!("'{}': {e}", paths.settings.display()))?;
        let values_text = read(&paths.values)?;
        let values = values::parse(&values_text)?;
        let (templates, own) = read_templates(dir, &paths.templates, warnings)?;
        let schema = read_optional(&paths.schema)?;
        Ok(Chart {
            dir: dir.to_path_buf(),
            name,
            paths,
            settings_text,
            settings,
            values_text,
            values,
            schema,
            templates,
            own,
        })
    }

    /// The chart's own templates: chartgen's files left out.
    pub fn sources(&self) -> impl Iterator<Item = &Template> {
        self.templates.iter().filter(|t| !t.own)
    }

    /// What the chart holds now at `path`, one of the files chartgen writes (None: absent).
    pub fn current(&self, path: &Path) -> Option<&str> {
        if path == self.paths.values {
            return Some(&self.values_text);
        }
        if path == self.paths.schema {
            return self.schema.as_deref();
        }
        if path == self.paths.settings {
            return self.settings_text.as_deref();
        }
        if let Some((_, text)) = self.own.iter().find(|(p, _)| p == path) {
            return text.as_deref();
        }
        self.templates
            .iter()
            .find(|t| t.path == path)
            .map(|t| t.text.as_str())
    }
}

impl Paths {
    pub fn of(chart: &Path) -> anyhow::Result<Paths> {
        let paths = Paths {
            values: chart.join("values.yaml"),
            schema: chart.join("values.schema.json"),
            settings: chart.join(settings::FILE),
            templates: chart.join("templates"),
        };
        for path in [&paths.values, &paths.schema, &paths.settings] {
            ensure_inside(chart, path)?;
        }
        Ok(paths)
    }
}

/// The template files under `dir` (see [`template_files`]), read: the chart's own first, then
/// chartgen's by path, listed or not (their text shared with the listing).
fn read_templates(
    chart: &Path,
    dir: &Path,
    warnings: &mut Vec<Note>,
) -> anyhow::Result<(Vec<Template>, OwnFiles)> {
    let own_paths = own_files(dir);
    let mut templates = Vec::new();
    for path in template_files(chart, dir, warnings)? {
        let own = own_paths.contains(&path);
        let text = if own { String::new() } else { read(&path)? };
        templates.push(Template { path, text, own });
    }
    let mut own = Vec::new();
    for path in own_paths {
        let text = read_optional(&path)?;
        own.push((path, text));
    }
    for t in templates.iter_mut().filter(|t| t.own) {
        match own.iter().find(|(p, _)| *p == t.path) {
            Some((_, Some(text))) => t.text.clone_from(text),
            // Listed, yet gone when read by path: read it as any template, naming it.
            _ => t.text = read(&t.path)?,
        }
    }
    Ok((templates, own))
}

/// An entry of the chart's `charts/` directory that may render the target the chart does not.
pub enum Dependency {
    /// A local chart (Chart.yaml and templates/): its directory and directory name.
    Chart { dir: PathBuf, name: String },
    /// A packaged chart: its file name.
    Packaged(String),
}

/// The chart's dependencies under `charts/`, sorted; read only for the refusal naming which one
/// renders the target the chart itself does not.
pub fn dependencies(chart: &Path) -> Vec<Dependency> {
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(chart.join("charts")) {
        Ok(e) => e.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    };
    entries.sort();
    entries
        .into_iter()
        .filter_map(|dir| {
            let name = dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if dir.join("Chart.yaml").is_file() && dir.join("templates").is_dir() {
                Some(Dependency::Chart { dir, name })
            } else if name.ends_with(".tgz") || name.ends_with(".tar.gz") {
                Some(Dependency::Packaged(name))
            } else {
                None
            }
        })
        .collect()
}

/// A dependency chart's templates, chartgen's files left out (links confined to `chart`).
pub fn dependency_templates(
    chart: &Path,
    dep: &Path,
    warnings: &mut Vec<Note>,
) -> anyhow::Result<Vec<Template>> {
    let dir = dep.join("templates");
    let own = own_files(&dir);
    let mut out = Vec::new();
    for path in template_files(chart, &dir, warnings)? {
        if !own.contains(&path) {
            let text = read(&path)?;
            out.push(Template {
                path,
                text,
                own: false,
            });
        }
    }
    Ok(out)
}

/// A dependency chart's name, if its Chart.yaml gives a valid one.
pub fn dependency_name(dep: &Path) -> Option<String> {
    chart_name(dep).ok()
}

/// Template files under `dir`, sorted. Symlinks are followed only while they stay inside
/// `chart`; one that leaves it (or leads nowhere) is reported and skipped (chartgen never reads or
/// writes outside the chart).
fn template_files(
    chart: &Path,
    dir: &Path,
    warnings: &mut Vec<Note>,
) -> anyhow::Result<Vec<PathBuf>> {
    let root = chart
        .canonicalize()
        .with_context(|| format!("cannot resolve '{}'", chart.display()))?;
    // The walk's filter and its error arm both report a link: a cell lets both push.
    let skipped = std::cell::RefCell::new(Vec::new());
    let leaves = |link: &Path| {
        let inside = link.canonicalize().is_ok_and(|t| t.starts_with(&root));
        if !inside {
            skipped.borrow_mut().push(Note::Warning(format!(
                "not following '{}': the link leads out of the chart",
                link.display()
            )));
        }
        !inside
    };
    let walk = walkdir::WalkDir::new(dir)
        .follow_links(true)
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !e.path_is_symlink() || !leaves(e.path()));
    let mut out = Vec::new();
    for entry in walk {
        let entry = match entry {
            Ok(entry) => entry,
            // A dangling link: following it failed.
            Err(e) if e.path().is_some_and(|p| p.is_symlink() && leaves(p)) => continue,
            Err(e) => {
                warnings.extend(skipped.take());
                let listing = format!("cannot list '{}'; is this a Helm chart?", dir.display());
                return Err(e).context(listing);
            }
        };
        let template = |e: &std::ffi::OsStr| e == "yaml" || e == "yml" || e == "tpl";
        if entry.file_type().is_file() && entry.path().extension().is_some_and(template) {
            out.push(entry.into_path());
        }
    }
    warnings.extend(skipped.take());
    out.sort();
    Ok(out)
}

#[derive(serde::Deserialize)]
struct ChartMeta {
    name: String,
}

/// Chart.yaml's `name`, refused unless it can prefix template helpers.
fn chart_name(chart: &Path) -> anyhow::Result<String> {
    let path = chart.join("Chart.yaml");
    let text = read(&path)?;
    if let Some(line) = values::deeper_than(&text, values::MAX_DEPTH) {
        bail!(
            "'{}' nests deeper than {} levels (line {line}); chartgen refuses it to stay fast",
            path.display(),
            values::MAX_DEPTH
        );
    }
    let meta: ChartMeta = serde_norway::from_str(&text)
        .with_context(|| format!("'{}' has no valid `name`", path.display()))?;
    if meta.name.is_empty()
        || !meta
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        bail!(
            "'{}': chart name {:?} cannot prefix template helpers",
            path.display(),
            meta.name
        );
    }
    Ok(meta.name)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("chartgen-chart-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("chart/templates")).unwrap();
        fs::create_dir_all(dir.join("outside")).unwrap();
        fs::write(dir.join("chart/Chart.yaml"), "name: t\n").unwrap();
        fs::write(dir.join("chart/values.yaml"), "replicas: 2\n").unwrap();
        fs::write(dir.join("outside/x.yaml"), "kind: Secret\n").unwrap();
        std::os::unix::fs::symlink(dir.join("outside"), dir.join("chart/templates/out")).unwrap();
        dir
    }

    #[test]
    fn the_chart_is_read_once_with_its_own_files_marked_and_links_out_reported() {
        let dir = scratch("read");
        let chart_dir = dir.join("chart");
        let templates = chart_dir.join("templates");
        fs::write(templates.join("db.yaml"), "kind: Cluster\n").unwrap();
        fs::write(templates.join("scaledobject.yaml"), "{{/* Generated */}}\n").unwrap();
        let mut warnings = Vec::new();
        let chart = Chart::read(&chart_dir, &mut warnings).unwrap();
        let link = templates.join("out");
        assert_eq!(
            warnings,
            [Note::Warning(format!(
                "not following '{}': the link leads out of the chart",
                link.display()
            ))]
        );
        let listed: Vec<(&Path, bool)> = chart
            .templates
            .iter()
            .map(|t| (t.path.as_path(), t.own))
            .collect();
        assert_eq!(
            listed,
            [
                (templates.join("db.yaml").as_path(), false),
                (templates.join("scaledobject.yaml").as_path(), true)
            ]
        );
        assert_eq!(chart.sources().count(), 1);
        assert_eq!(chart.current(&chart.paths.values), Some("replicas: 2\n"));
        assert_eq!(chart.current(&templates.join("_autoscaling.tpl")), None);
        assert_eq!(chart.schema, None);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn warnings_survive_a_read_that_fails() {
        let dir = scratch("fails");
        let chart_dir = dir.join("chart");
        fs::write(chart_dir.join("templates/bad.yaml"), [0xff, 0xfe]).unwrap();
        let mut warnings = Vec::new();
        let err = Chart::read(&chart_dir, &mut warnings).err().unwrap();
        assert!(err.to_string().contains("is not UTF-8 text"), "{err}");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        fs::remove_dir_all(dir).unwrap();
    }
}
