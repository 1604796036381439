//! The minijinja environment `chartgen app` renders through.
//!
//! Delimiters are `[[ ]]`, `[% %]` and `[# #]` so Helm's `{{ }}` passes through untouched;
//! undefined variables are errors (a typo must never render as an empty string). The app
//! templates are compiled into the binary, so an installed chartgen needs no files beside it; a
//! templates directory (`--templates`, `CHARTGEN_TEMPLATES`) replaces them while developing them.

use std::path::Path;

use minijinja::{
    AutoEscape, Environment, Error, ErrorKind, UndefinedBehavior, Value, syntax::SyntaxConfig,
    value::ValueKind,
};
use serde::Serialize;

/// The app templates built into the binary, by the name `chartgen app` renders them under.
const EMBEDDED: &[(&str, &str)] = &[
    (
        "app/_autoscaling.tpl",
        include_str!("../../templates/app/_autoscaling.tpl"),
    ),
    (
        "app/scaledobject.yaml",
        include_str!("../../templates/app/scaledobject.yaml"),
    ),
    (
        "app/scaleadapter.yaml",
        include_str!("../../templates/app/scaleadapter.yaml"),
    ),
    (
        "app/pooler-autoscaling.yaml",
        include_str!("../../templates/app/pooler-autoscaling.yaml"),
    ),
    (
        "app/values-autoscaling.yaml",
        include_str!("../../templates/app/values-autoscaling.yaml"),
    ),
    (
        "app/values-autoscaling.schema.json",
        include_str!("../../templates/app/values-autoscaling.schema.json"),
    ),
];

pub struct Renderer {
    env: Environment<'static>,
}

impl Renderer {
    /// Templates from `dir` when given (development), else the ones built into the binary.
    pub fn new(dir: Option<&Path>) -> anyhow::Result<Self> {
        let mut env = Self::environment()?;
        match dir {
            Some(dir) if !dir.is_dir() => anyhow::bail!(
                "templates directory '{}' does not exist; pass --templates DIR or unset CHARTGEN_TEMPLATES to use the built-in templates",
                dir.display()
            ),
            Some(dir) => env.set_loader(minijinja::path_loader(dir)),
            None => env.set_loader(|name| {
                Ok(EMBEDDED
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, text)| (*text).to_owned()))
            }),
        }
        Ok(Self { env })
    }

    fn environment() -> anyhow::Result<Environment<'static>> {
        let mut env = Environment::new();
        env.set_syntax(
            SyntaxConfig::builder()
                .block_delimiters("[%", "%]")
                .variable_delimiters("[[", "]]")
                .comment_delimiters("[#", "#]")
                .keep_trailing_newline(true)
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()?,
        );
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        // Output is YAML/JSON/Go-template text: never escape it.
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.add_filter("yaml", yaml_filter);
        env.add_filter("json", json_filter);
        Ok(env)
    }

    /// Renders template `name` (a path relative to the templates directory).
    pub fn render<S: Serialize>(&self, name: &str, ctx: S) -> anyhow::Result<String> {
        let tmpl = self.env.get_template(name).map_err(describe)?;
        tmpl.render(Value::from(minijinja::value::Serde(ctx)))
            .map_err(describe)
    }
}

/// Keeps minijinja's debug info (template name, line, nearby source) in the error text.
fn describe(err: Error) -> anyhow::Error {
    anyhow::anyhow!("{err:#}\n{}", err.display_debug_info())
}

/// `value | yaml(indent)`: a scalar or empty collection renders inline after a space
/// (`key:[[ v | yaml(2) ]]` → `key: 3`); a non-empty collection renders as a block on the
/// following lines, indented by `indent` spaces.
fn yaml_filter(value: Value, indent: usize) -> Result<String, Error> {
    let text = serde_norway::to_string(&value).map_err(|e| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("cannot render YAML: {e}"),
        )
    })?;
    let text = text.trim_end_matches('\n');
    let is_block =
        matches!(value.kind(), ValueKind::Map | ValueKind::Seq) && value.len().unwrap_or(0) > 0;
    if !is_block {
        return Ok(format!(" {text}"));
    }
    let pad = " ".repeat(indent);
    Ok(text.lines().map(|l| format!("\n{pad}{l}")).collect())
}

/// `value | json`: compact JSON, for values embedded in JSON documents.
fn json_filter(value: Value) -> Result<String, Error> {
    serde_json::to_string(&value).map_err(|e| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("cannot render JSON: {e}"),
        )
    })
}
