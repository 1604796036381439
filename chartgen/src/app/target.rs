//! Reads the scale target's template: the Go-template expressions of its `metadata.name` and
//! `metadata.namespace`, and where it takes its synchronous quorum from. Pure text analysis of
//! one manifest document; an expression chartgen cannot carry over is reported, never guessed.

/// How a field of the target renders, as a Go-template expression usable at the top level of a
/// chart template (where `.` and `$` are the root context).
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// An expression that renders the same value as the template's own field.
    Known(String),
    /// The field exists but chartgen cannot carry it over; the string says why.
    Unknown(String),
}

/// One manifest document of a template file: its lines and the number of the first.
#[derive(Debug, Clone, Copy)]
pub struct Doc<'a> {
    /// The whole file (assignments and enclosing blocks are looked up in it).
    pub file: &'a str,
    pub lines: &'a [&'a str],
    /// 0-based index in the file of `lines[0]`.
    pub first: usize,
}

/// The document of `file` that holds 0-based line `at` (documents split on `---` lines).
pub fn doc_at<'a>(file: &'a str, lines: &'a [&'a str], at: usize) -> Doc<'a> {
    let is_sep = |l: &str| l.trim_end() == "---" || l.starts_with("--- ");
    let start = (0..at)
        .rev()
        .find(|&i| is_sep(lines[i]))
        .map_or(0, |i| i + 1);
    let end = (at..lines.len())
        .find(|&i| is_sep(lines[i]))
        .unwrap_or(lines.len());
    Doc {
        file,
        lines: &lines[start..end],
        first: start,
    }
}

impl Doc<'_> {
    /// The value text of the top-level `key:` line (`kind`, `apiVersion`).
    pub fn top(&self, key: &str) -> Option<&str> {
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':').map(str::trim))
    }

    /// The 0-based file line of the top-level `key:` line.
    pub fn top_line(&self, key: &str) -> Option<usize> {
        self.lines
            .iter()
            .position(|l| l.strip_prefix(key).is_some_and(|r| r.starts_with(':')))
            .map(|i| self.first + i)
    }

    /// The 0-based file line and text of the mapping key at `path` (`["spec", "redis"]`).
    pub fn line_of(&self, path: &[&str]) -> Option<(usize, &str)> {
        let (last, parents) = path.split_last()?;
        let (line, _) = if parents.is_empty() {
            let at = self.top_line(last)?;
            (at, "")
        } else {
            self.child_of(parents, last)?
        };
        Some((line, self.lines[line - self.first]))
    }

    /// The 0-based file line and value text of `spec.<field>`; None when the field is absent.
    pub fn spec(&self, field: &str) -> Option<(usize, &str)> {
        self.child_of(&["spec"], field)
    }

    /// `metadata.<field>` as an expression; None when the field is absent.
    pub fn metadata(&self, field: &str) -> Option<(usize, Expr)> {
        self.field(&["metadata"], field)
    }

    /// `<path>.<field>` (`["spec", "cluster"]`, `name`) as an expression and its 0-based file
    /// line; None when the field is absent.
    pub fn field(&self, path: &[&str], field: &str) -> Option<(usize, Expr)> {
        let (line, value) = self.child_of(path, field)?;
        Some((line, self.expr_at(line, value)))
    }

    /// Expressions of every synchronous-quorum setting of a CNPG Cluster: legacy
    /// `spec.maxSyncReplicas` and `spec.postgresql.synchronous.number`.
    pub fn quorum(&self) -> Vec<(usize, Expr)> {
        let mut out = Vec::new();
        if let Some((line, value)) = self.child_of(&["spec"], "maxSyncReplicas") {
            out.push((line, self.expr_at(line, value)));
        }
        match self.child_of(&["spec", "postgresql", "synchronous"], "number") {
            Some((line, value)) => out.push((line, self.expr_at(line, value))),
            None => {
                if let Some((line, _)) = self.child_of(&["spec", "postgresql"], "synchronous") {
                    out.push((line, self.synchronous_as_yaml(line)));
                }
            }
        }
        out
    }

    /// `synchronous:` rendered whole from values, the common chart idiom:
    /// `{{- with .Values.X }}` / `synchronous:` / `{{- toYaml . | nindent N }}`: the quorum is
    /// `.Values.X.number`.
    fn synchronous_as_yaml(&self, line: usize) -> Expr {
        let blocks = enclosing_blocks(self.file, line);
        let with_values = blocks.last().and_then(|b| {
            let path = b
                .expr
                .strip_prefix("$")
                .unwrap_or(&b.expr)
                .strip_prefix(".Values.")?;
            let plain = path
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
            (b.word == "with" && b.passed.is_empty() && plain)
                .then(|| format!(".Values.{path}.number"))
        });
        let next = self.file.lines().nth(line + 1).unwrap_or("").trim();
        match with_values {
            Some(e) if next.starts_with("{{") && next.contains("toYaml .") => Expr::Known(e),
            _ => Expr::Unknown("`synchronous` is not written out field by field".into()),
        }
    }

    /// Finds `field:` directly under the mapping at `path` (top-level keys first); returns its
    /// 0-based file line and its value text. Lines that are only template actions are skipped.
    fn child_of(&self, path: &[&str], field: &str) -> Option<(usize, &str)> {
        let mut from = 0;
        let mut indent = 0;
        for (depth, key) in path.iter().enumerate() {
            let (at, ind) = self.find_key(from, depth == 0, indent, key)?;
            from = at + 1;
            indent = ind;
        }
        let (at, _) = self.find_key(from, false, indent, field)?;
        let line = self.lines[at];
        let value = line.trim_start()[field.len() + 1..].trim();
        Some((self.first + at, value))
    }

    /// The line of `key:` at the first child indentation after `from` (or at column 0 when
    /// `top`), stopping where the parent mapping ends.
    fn find_key(&self, from: usize, top: bool, parent: usize, key: &str) -> Option<(usize, usize)> {
        let mut child: Option<usize> = if top { Some(0) } else { None };
        for (i, line) in self.lines.iter().enumerate().skip(from) {
            let body = line.trim_start();
            if body.is_empty() || body.starts_with('#') || is_action_line(body) {
                continue;
            }
            let ind = line.len() - body.len();
            if !top && ind <= parent {
                return None;
            }
            let want = *child.get_or_insert(ind);
            if ind == want
                && body.strip_prefix(key).is_some_and(|r| {
                    r.starts_with(':') && r[1..].chars().next().is_none_or(char::is_whitespace)
                })
            {
                return Some((i, ind));
            }
        }
        None
    }

    /// The expression of `value` (a YAML scalar on 0-based file `line`) as it reads at the chart's root.
    pub fn expr_at(&self, line: usize, value: &str) -> Expr {
        let blocks = enclosing_blocks(self.file, line);
        match value_expr(value) {
            Expr::Known(e) => {
                let e = match inline_variables(self.file, line, &e) {
                    Ok(e) => e,
                    Err(why) => return Expr::Unknown(why),
                };
                if uses_dot(&e) && blocks.iter().any(|b| b.word == "with" || b.word == "range") {
                    // `.name` inside `with .Values.db` is `.Values.db.name` at the root.
                    return match root_scope(self.file, line, &e) {
                        Ok(e) => Expr::Known(e),
                        Err(why) => {
                            Expr::Unknown(format!("{why}; `.` there is not the chart's root"))
                        }
                    };
                }
                Expr::Known(e)
            }
            unknown => unknown,
        }
    }
}

/// What a count line (`<field>: ...`) renders, read from its text and the blocks around it.
#[derive(Debug, Clone, PartialEq)]
pub enum Count {
    /// The count is one action reading one values key.
    Values {
        /// The dotted values path, e.g. `redis.replicas`.
        key: String,
        /// The action's expression as it reads at the chart's root (`with` scopes resolved).
        expr: String,
        /// Byte range in the line of the action's expression (inside `{{ }}` and its trim
        /// markers): what the autoscaling branch replaces.
        span: (usize, usize),
    },
    /// A plain integer (`instances: 2`): its text and byte range in the line.
    Literal { value: String, span: (usize, usize) },
    /// Anything else; says why chartgen cannot take the count from it.
    Other(String),
}

/// The count of 0-based `line` of `file` (split into `lines`) if it is a `<field>:` line. Read: one action reading
/// one values key, with a trailing comment, `$.Values`, `.x` inside `with .Values.P`, a
/// `required`/`default`/`int` around it, and the chart's own check on the same line
/// (`{{ if C }}{{ fail M }}{{ else }}{{ .Values.x }}{{ end }}`).
pub fn count_at(file: &str, lines: &[&str], line: usize, field: &str) -> Option<Count> {
    let text = *lines.get(line)?;
    let body = text.trim_start();
    let after = body.strip_prefix(field)?.strip_prefix(':')?;
    if !after.is_empty() && !after.starts_with(char::is_whitespace) {
        return None;
    }
    let start = text.len() - after.len();
    let value = strip_comment(after);
    let lead = value.len() - value.trim_start().len();
    let value = value.trim();
    let at = start + lead;
    if value.is_empty() {
        return Some(Count::Other("it has no value on the line".into()));
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Count::Literal {
            value: value.to_owned(),
            span: (at, at + value.len()),
        });
    }
    Some(match count_action(value) {
        Ok((expr, (from, to))) => match root_scope(file, line, expr) {
            Ok(expr) => match values_key(&expr) {
                Ok(key) => Count::Values {
                    key,
                    expr,
                    span: (at + from, at + to),
                },
                Err(why) => Count::Other(why),
            },
            Err(why) => Count::Other(why),
        },
        Err(why) => Count::Other(why),
    })
}

/// The one action of `value` that renders the count, and its expression's byte range: every
/// other action must be `if`/`else`/`end` or a `fail`, and nothing but blanks between them.
fn count_action(value: &str) -> Result<(&str, (usize, usize)), String> {
    let mut rest = 0;
    let mut found = None;
    while rest < value.len() {
        let gap = &value[rest..];
        let Some(open) = gap.find("{{") else {
            return Err(format!("`{value}` mixes text with template actions"));
        };
        if !gap[..open].trim().is_empty() {
            return Err(format!("`{value}` mixes text with template actions"));
        }
        let from = rest + open + 2;
        let Some(close) = value[from..].find("}}") else {
            return Err(format!("`{value}` has an unclosed action"));
        };
        let raw = &value[from..from + close];
        let lead = raw.len() - raw.trim_start_matches('-').trim_start().len();
        let inner = raw.trim_start_matches('-').trim_start();
        let inner = inner.trim_end_matches('-').trim_end();
        let word = inner.split_whitespace().next().unwrap_or("");
        rest = from + close + 2;
        match word {
            "if" | "else" | "end" | "fail" => continue,
            "range" | "with" | "define" | "template" | "block" | "break" | "continue" => {
                return Err(format!(
                    "`{value}` opens a `{word}` block on the count line"
                ));
            }
            _ if inner.is_empty() || inner.starts_with("/*") || inner.contains(":=") => {
                return Err(format!("`{value}` is not a single expression"));
            }
            _ => {}
        }
        if found.is_some() {
            return Err(format!("`{value}` renders more than one action"));
        }
        found = Some((inner, (from + lead, from + lead + inner.len())));
    }
    found.ok_or_else(|| format!("`{value}` renders no expression"))
}

/// `expr` as it reads at the chart's root: inside `with .Values.P`, `.x` is `.Values.P.x`.
fn root_scope(file: &str, line: usize, expr: &str) -> Result<String, String> {
    let mut scope: Option<String> = None;
    for b in enclosing_blocks(file, line) {
        let target = value_of(&b.expr).trim();
        match b.word.as_str() {
            // The plain `else` of a `with` keeps the outer `.`.
            "with" if b.expr.is_empty() && !b.passed.is_empty() => {}
            "with" => {
                let path = target
                    .strip_prefix('$')
                    .unwrap_or(target)
                    .strip_prefix(".Values.")
                    .filter(|p| plain_path(p))
                    .map(str::to_owned)
                    .or_else(|| {
                        let rel = target.strip_prefix('.').filter(|p| plain_path(p))?;
                        Some(format!("{}.{rel}", scope.as_ref()?))
                    });
                match path {
                    Some(p) => scope = Some(p),
                    None if uses_dot(expr) => {
                        return Err(format!(
                            "it reads `.` inside `with {target}`, which chartgen cannot resolve to one values key"
                        ));
                    }
                    None => {}
                }
            }
            "range" if uses_dot(expr) || expr.starts_with('$') && !expr.starts_with("$.") => {
                return Err(format!(
                    "it is inside `range {}`, where it reads each entry in turn, not one values key",
                    b.expr
                ));
            }
            "define" | "block" if uses_dot(expr) => {
                return Err(
                    "it is inside a `define`, where `.` is whatever the includer passes".into(),
                );
            }
            _ => {}
        }
    }
    match scope {
        Some(p) if uses_dot(expr) => Ok(rebase(expr, &format!(".Values.{p}"))),
        _ => Ok(expr.to_owned()),
    }
}

fn plain_path(p: &str) -> bool {
    !p.is_empty()
        && !p.ends_with('.')
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// Every term of `expr` that reads `.` (see `uses_dot`) prefixed with `root`: `.replicas`
/// becomes `.Values.redis.replicas`, a lone `.` becomes `.Values.redis`.
fn rebase(expr: &str, root: &str) -> String {
    let b = expr.as_bytes();
    let mut out = String::with_capacity(expr.len() + root.len());
    let mut quote = false;
    let mut copied = 0;
    for (i, &c) in b.iter().enumerate() {
        if c == b'"' && (i == 0 || b[i - 1] != b'\\') {
            quote = !quote;
        }
        let prev = if i == 0 { b' ' } else { b[i - 1] };
        if quote
            || c != b'.'
            || prev.is_ascii_alphanumeric()
            || prev == b'_'
            || prev == b'$'
            || prev == b')'
        {
            continue;
        }
        out.push_str(&expr[copied..i]);
        out.push_str(root);
        // A lone `.` is the scope itself; `.x` continues the path.
        copied = if b
            .get(i + 1)
            .is_some_and(|n| n.is_ascii_alphabetic() || *n == b'_')
        {
            i
        } else {
            i + 1
        };
    }
    out.push_str(&expr[copied..]);
    out
}

/// The one values path `expr` reads (`required "m" .Values.a.b | int` reads `a.b`).
fn values_key(expr: &str) -> Result<String, String> {
    let mut keys: Vec<&str> = Vec::new();
    for (at, m) in expr.match_indices(".Values.") {
        let rest = &expr[at + m.len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        let key = rest[..end].trim_end_matches('.');
        if !key.is_empty() && !keys.contains(&key) {
            keys.push(key);
        }
    }
    match keys.as_slice() {
        [one] => Ok((*one).to_owned()),
        [] => Err(format!("`{expr}` reads no values key")),
        many => Err(format!(
            "`{expr}` reads several values keys ({})",
            many.join(", ")
        )),
    }
}

/// The mapping keys above 0-based `line` of `doc`'s file, innermost first (template-only lines,
/// comments and blank lines skipped): `["redis", "spec"]` for a RedisFailover's count.
pub fn ancestors<'a>(doc: &Doc<'a>, line: usize) -> Vec<&'a str> {
    let mut out = Vec::new();
    let Some(at) = line.checked_sub(doc.first) else {
        return out;
    };
    let indent_of = |l: &str| l.len() - l.trim_start().len();
    let mut limit = doc.lines.get(at).map_or(0, |l| indent_of(l));
    for l in doc.lines[..at].iter().rev() {
        let body = l.trim_start();
        if limit == 0 {
            break;
        }
        if body.is_empty() || body.starts_with('#') || is_action_line(body) {
            continue;
        }
        let ind = indent_of(l);
        if ind < limit {
            if let Some((key, _)) = body.split_once(':') {
                out.push(key.trim());
            }
            limit = ind;
        }
    }
    out
}

/// A line that holds only template actions (`{{- if ... }}`, `{{ include ... | nindent 4 }}`).
fn is_action_line(body: &str) -> bool {
    body.starts_with("{{") && body.trim_end().ends_with("}}")
}

/// The Go-template expression of a YAML scalar that may hold template actions:
/// `{{ .Release.Name }}`, `"{{ include "x" . }}-db"`, `my-db`, `"my-db"`, `3`.
pub fn value_expr(value: &str) -> Expr {
    let value = strip_comment(value).trim();
    if value.is_empty()
        || value.starts_with(['|', '>', '&', '*', '!', '[', '{']) && !value.starts_with("{{")
    {
        return Expr::Unknown(format!("`{value}` is not a plain value"));
    }
    let unquoted = match value.chars().next() {
        Some(q @ ('"' | '\'')) if value.len() >= 2 && value.ends_with(q) => {
            &value[1..value.len() - 1]
        }
        _ => value,
    };
    let mut parts: Vec<(bool, String)> = Vec::new();
    let mut rest = unquoted;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            parts.push((false, rest[..open].to_owned()));
        }
        let Some(close) = rest[open..].find("}}") else {
            return Expr::Unknown(format!("`{value}` has an unclosed action"));
        };
        let inner = rest[open + 2..open + close]
            .trim_start_matches('-')
            .trim_end_matches('-')
            .trim();
        // `template "x" ARG` renders what `include "x" ARG` returns (a template call takes no
        // pipeline after it, so nothing else can follow).
        let included;
        let inner = match inner.strip_prefix("template ") {
            Some(call) if !call.contains('|') => {
                let call = call.trim();
                // After the quoted name: the argument, if any.
                let has_arg = call
                    .get(1..)
                    .and_then(|c| c.find('"'))
                    .is_some_and(|end| !call[end + 2..].trim().is_empty());
                included = if has_arg {
                    format!("include {call}")
                } else {
                    format!("include {call} nil")
                };
                included.as_str()
            }
            _ => inner,
        };
        let word = inner.split_whitespace().next().unwrap_or("");
        let control = [
            "if", "else", "end", "range", "with", "define", "template", "block", "break",
            "continue",
        ];
        if inner.is_empty()
            || inner.starts_with("/*")
            || control.contains(&word)
            || inner.contains(":=")
            || inner.contains(" = ")
        {
            return Expr::Unknown(format!("`{value}` is not a single expression"));
        }
        parts.push((true, inner.to_owned()));
        rest = &rest[open + close + 2..];
    }
    if !rest.is_empty() {
        parts.push((false, rest.to_owned()));
    }
    match parts.as_slice() {
        [] => Expr::Unknown("the value is empty".into()),
        [(true, e)] => Expr::Known(e.clone()),
        [(false, lit)] => Expr::Known(go_string(lit)),
        _ => {
            let mut format = String::new();
            let mut args = Vec::new();
            for (is_expr, text) in &parts {
                if *is_expr {
                    format.push_str("%v");
                    args.push(format!("({text})"));
                } else {
                    format.push_str(&text.replace('%', "%%"));
                }
            }
            Expr::Known(format!("printf {} {}", go_string(&format), args.join(" ")))
        }
    }
}

/// A Go string literal (JSON's escaping is a subset Go accepts).
fn go_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Drops a trailing `# comment` outside quotes and actions.
fn strip_comment(value: &str) -> &str {
    let mut quote = None;
    let mut depth = 0;
    let bytes = value.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match (quote, b) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, b'"' | b'\'') if depth == 0 && (i == 0) => quote = Some(b),
            (None, b'{') if bytes.get(i + 1) == Some(&b'{') => depth += 1,
            (None, b'}') if bytes.get(i + 1) == Some(&b'}') && depth > 0 => depth -= 1,
            (None, b'#') if depth == 0 && i > 0 && bytes[i - 1] == b' ' => return &value[..i],
            _ => {}
        }
    }
    value
}

/// True when `expr` reads the current context `.` (not `$.`): `.Release.Name`, `include "x" .`.
fn uses_dot(expr: &str) -> bool {
    let b = expr.as_bytes();
    let mut quote = false;
    for (i, &c) in b.iter().enumerate() {
        if c == b'"' && (i == 0 || b[i - 1] != b'\\') {
            quote = !quote;
        }
        if quote || c != b'.' {
            continue;
        }
        let prev = if i == 0 { b' ' } else { b[i - 1] };
        if !(prev.is_ascii_alphanumeric() || prev == b'_' || prev == b'$' || prev == b')') {
            return true;
        }
    }
    false
}

/// Replaces each `$var` (not `$` or `$.`) with the expression of its single top-level
/// `{{ $var := ... }}` before `line`; an unassigned or reassigned variable is unknown.
fn inline_variables(file: &str, line: usize, expr: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let name: String = rest[at + 1..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + 1 + name.len()..];
        if name.is_empty() {
            out.push('$');
            continue;
        }
        let mut defs = file.lines().take(line).filter_map(|l| assignment(l, &name));
        let (Some(def), None) = (defs.next(), defs.next()) else {
            return Err(format!(
                "it uses `${name}`, which is not assigned exactly once before it"
            ));
        };
        if let Expr::Known(e) = value_expr(&format!("{{{{ {def} }}}}")) {
            out.push_str(&format!("({e})"));
        } else {
            return Err(format!("`${name}` is not a plain expression"));
        }
    }
    out.push_str(rest);
    if out.contains('$') && out != expr && out.matches('$').count() > expr.matches('$').count() {
        return Err("its variables refer to other variables".into());
    }
    Ok(out)
}

/// The expression of `{{- $name := EXPR }}` or `{{ $name = EXPR }}` on `line`.
fn assignment<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let body = line
        .trim()
        .strip_prefix("{{")?
        .trim_start_matches('-')
        .trim();
    let rest = body.strip_prefix('$')?.strip_prefix(name)?.trim_start();
    let rest = rest.strip_prefix(":=").or_else(|| rest.strip_prefix('='))?;
    let rest = rest.trim().strip_suffix("}}")?.trim_end_matches('-').trim();
    Some(rest)
}

/// A template block (`if`, `with`, `range`, `define`, `block`) open at some line.
#[derive(Debug, Clone, PartialEq)]
struct Block {
    word: String,
    /// The action's argument of the branch the line is in (`""` in a plain `else`).
    expr: String,
    /// The arguments of the earlier branches (`if A` … `else if B` …): all false in this one.
    passed: Vec<String>,
}

/// The template blocks open at 0-based `line`, innermost last.
fn enclosing_blocks(file: &str, line: usize) -> Vec<Block> {
    let mut stack: Vec<Block> = Vec::new();
    for l in file.lines().take(line) {
        let mut rest = l;
        while let Some(open) = rest.find("{{") {
            let after = &rest[open + 2..];
            let close = after.find("}}").unwrap_or(after.len());
            let inner = after[..close].trim_start_matches('-').trim();
            let inner = inner.trim_end_matches('-').trim();
            let word = inner.split_whitespace().next().unwrap_or("");
            match word {
                "if" | "with" | "range" | "define" | "block" => stack.push(Block {
                    word: word.to_owned(),
                    expr: inner[word.len()..].trim().to_owned(),
                    passed: Vec::new(),
                }),
                "else" => {
                    if let Some(top) = stack.last_mut() {
                        let branch = inner["else".len()..].trim();
                        let next = branch
                            .strip_prefix("if ")
                            .or_else(|| branch.strip_prefix("with "))
                            .unwrap_or("")
                            .trim();
                        let done = std::mem::replace(&mut top.expr, next.to_owned());
                        top.passed.push(done);
                    }
                }
                "end" => {
                    stack.pop();
                }
                _ => {}
            }
            rest = &after[close.min(after.len())..];
        }
    }
    stack
}

/// The name of the innermost `define` (or `block`) 0-based `line` is in.
pub fn define_at(file: &str, line: usize) -> Option<String> {
    enclosing_blocks(file, line)
        .into_iter()
        .rev()
        .find(|b| b.word == "define" || b.word == "block")
        .and_then(|b| Some(b.expr.split('"').nth(1)?.to_owned()))
}

/// Why the target's document cannot get a ScaledObject that renders exactly when it does.
#[derive(Debug, Clone, PartialEq)]
pub enum Around {
    /// Inside `range EXPR`: one target per entry.
    Range(String),
    /// A condition chartgen cannot carry to the top level of another template; says why.
    Unknown(String),
}

/// The conditions under which the document holding 0-based `line` renders (its enclosing `if`
/// and `with` branches), as Go-template expressions usable at a template's top level, outermost
/// first. A document inside `define` renders wherever it is included: nothing is known there.
pub fn conditions(file: &str, line: usize) -> Result<Vec<String>, Around> {
    let blocks = enclosing_blocks(file, line);
    if blocks
        .iter()
        .any(|b| b.word == "define" || b.word == "block")
    {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (depth, b) in blocks.iter().enumerate() {
        if b.word == "range" {
            return Err(Around::Range(b.expr.clone()));
        }
        let mut parts: Vec<String> = b
            .passed
            .iter()
            .map(|p| format!("not ({})", value_of(p)))
            .collect();
        if !b.expr.is_empty() {
            parts.push(value_of(&b.expr).to_owned());
        }
        for part in parts {
            let inner_dot = blocks[..depth].iter().any(|o| o.word == "with");
            if uses_dot(&part) && inner_dot {
                return Err(Around::Unknown(format!(
                    "`{part}` reads `.` inside a `with` block, where `.` is not the chart's root; write it with `$.Values`"
                )));
            }
            let part = inline_variables(file, line, &part).map_err(Around::Unknown)?;
            out.push(format!("({part})"));
        }
    }
    Ok(out)
}

/// The value tested by `with $x := EXPR` / `if EXPR`: EXPR.
fn value_of(expr: &str) -> &str {
    match expr.split_once(":=") {
        Some((var, value)) if var.trim().starts_with('$') => value.trim(),
        _ => expr,
    }
}

/// Every `.Values.a.b.c` in `expr` rewritten as a nil-safe chain, so a key absent from
/// values.yaml (or a missing parent) reads as empty instead of failing the render.
pub fn nil_safe(expr: &str) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find(".Values.") {
        let (before, after) = rest.split_at(at);
        let prev = before.chars().last();
        out.push_str(before);
        let path: String = after[".Values.".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
            .collect();
        let path = path.trim_end_matches('.');
        rest = &after[".Values.".len() + path.len()..];
        if prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ')')
            || path.is_empty()
        {
            out.push_str(".Values.");
            out.push_str(path);
            continue;
        }
        let root = if prev == Some('$') {
            out.pop();
            "$"
        } else {
            ""
        };
        out.push_str(&chain(root, path));
    }
    out.push_str(rest);
    out
}

/// `a.b.c` → `(((.Values.a | default dict).b | default dict).c)` (`root` is "" or "$").
pub fn chain(root: &str, path: &str) -> String {
    let segs: Vec<&str> = path.split('.').collect();
    let mut e = format!("{root}.Values.{}", segs[0]);
    for seg in &segs[1..] {
        e = format!("({e} | default dict).{seg}");
    }
    format!("({e})")
}

/// Parenthesised unless it is a single term, so it can be followed by `| quote` or an argument.
pub fn wrap(expr: &str) -> String {
    let e = expr.trim();
    if e.contains(char::is_whitespace) && !(e.starts_with('(') && e.ends_with(')')) {
        format!("({e})")
    } else {
        e.to_owned()
    }
}

/// The value of a top-level `kind:` line, unquoted and without a comment.
pub fn kind_of(line: &str) -> Option<&str> {
    let v = line.strip_prefix("kind:")?;
    Some(
        v.split(" #")
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches(['"', '\'']),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> (Vec<&str>, usize) {
        let lines: Vec<&str> = text.lines().collect();
        let at = lines.iter().position(|l| l.contains("instances:")).unwrap();
        (lines, at)
    }

    fn name_of(text: &str) -> Option<Expr> {
        let (lines, at) = doc(text);
        doc_at(text, &lines, at).metadata("name").map(|(_, e)| e)
    }

    #[test]
    fn names_come_from_the_template_expression() {
        let cases = [
            ("  name: {{ .Release.Name }}", ".Release.Name"),
            (
                "  name: {{ include \"pg.fullname\" . }}",
                "include \"pg.fullname\" .",
            ),
            (
                "  name: {{ printf \"%s-db\" .Release.Name | trunc 63 }}",
                "printf \"%s-db\" .Release.Name | trunc 63",
            ),
            ("  name: \"fixed-db\"  # the one", "\"fixed-db\""),
            ("  name: fixed", "\"fixed\""),
            (
                "  name: {{ template \"pg.fullname\" . }}",
                "include \"pg.fullname\" .",
            ),
            (
                "  name: {{- template \"pg.fullname\" }}-node",
                "printf \"%v-node\" (include \"pg.fullname\" nil)",
            ),
            (
                "  name: {{ .Release.Name }}-db",
                "printf \"%v-db\" (.Release.Name)",
            ),
            (
                "  name: \"{{ $.Release.Name }}-50%\"",
                "printf \"%v-50%%\" ($.Release.Name)",
            ),
        ];
        for (line, want) in cases {
            let text = format!(
                "---\napiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata:\n  labels:\n    name: x\n{line}\nspec:\n  instances: {{{{ .Values.replicas }}}}\n"
            );
            assert_eq!(name_of(&text), Some(Expr::Known(want.into())), "{line}");
        }
    }

    #[test]
    fn variables_are_inlined_and_blocks_make_dot_unknown() {
        let text = "{{- $fullname := include \"pg.fullname\" . }}\nkind: Cluster\nmetadata:\n  name: {{ $fullname }}\n  namespace: {{ .Values.namespaceOverride | default .Release.Namespace }}\nspec:\n  instances: {{ .Values.replicas }}\n";
        assert_eq!(
            name_of(text),
            Some(Expr::Known("(include \"pg.fullname\" .)".into()))
        );
        let (lines, at) = doc(text);
        assert_eq!(
            doc_at(text, &lines, at)
                .metadata("namespace")
                .map(|(_, e)| e),
            Some(Expr::Known(
                ".Values.namespaceOverride | default .Release.Namespace".into()
            ))
        );
        let within = "{{- with .Values.db }}\nkind: Cluster\nmetadata:\n  name: {{ include \"x\" . }}-{{ .name }}\nspec:\n  instances: {{ $.Values.replicas }}\n{{- end }}\n";
        assert_eq!(
            name_of(within),
            Some(Expr::Known(
                "printf \"%v-%v\" (include \"x\" .Values.db) (.Values.db.name)".into()
            ))
        );
        let ranged = within.replace("with", "range");
        assert!(matches!(name_of(&ranged), Some(Expr::Unknown(_))));
        let dollar = "{{- with .Values.db }}\nkind: Cluster\nmetadata:\n  name: {{ $.Release.Name }}\nspec:\n  instances: {{ $.Values.replicas }}\n{{- end }}\n";
        assert_eq!(name_of(dollar), Some(Expr::Known("$.Release.Name".into())));
        let unassigned = "kind: Cluster\nmetadata:\n  name: {{ $name }}\nspec:\n  instances: 1\n";
        assert!(matches!(name_of(unassigned), Some(Expr::Unknown(_))));
        let helper = "kind: Cluster\nmetadata:\n{{- include \"lib.metadata\" . | nindent 2 }}\nspec:\n  instances: 1\n";
        assert_eq!(name_of(helper), None);
    }

    #[test]
    fn quorum_settings_are_found_wherever_the_cluster_sets_them() {
        let text = "kind: Cluster\nmetadata:\n  name: x\nspec:\n  instances: {{ .Values.replicas }}\n  maxSyncReplicas: {{ .Values.legacy.max }}\n  postgresql:\n    parameters:\n      number: 9\n    synchronous:\n      method: any\n      number: {{ .Values.cluster.postgresql.synchronous.number }}\n";
        let (lines, at) = doc(text);
        let q: Vec<Expr> = doc_at(text, &lines, at)
            .quorum()
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        assert_eq!(
            q,
            [
                Expr::Known(".Values.legacy.max".into()),
                Expr::Known(".Values.cluster.postgresql.synchronous.number".into())
            ]
        );
        let whole = "kind: Cluster\nspec:\n  instances: 1\n  postgresql:\n    {{- with .Values.cluster.postgresql.synchronous }}\n    synchronous:\n      {{- toYaml . | nindent 6 }}\n    {{- end }}\n";
        let (lines, at) = doc(whole);
        assert_eq!(
            doc_at(whole, &lines, at).quorum(),
            [(
                5,
                Expr::Known(".Values.cluster.postgresql.synchronous.number".into())
            )]
        );
        let yamlized = "kind: Cluster\nspec:\n  instances: 1\n  postgresql:\n    synchronous:\n      {{- toYaml .Values.sync | nindent 6 }}\n";
        let (lines, at) = doc(yamlized);
        assert!(matches!(
            doc_at(yamlized, &lines, at).quorum().as_slice(),
            [(_, Expr::Unknown(_))]
        ));
    }

    #[test]
    fn conditions_are_the_enclosing_branches_and_range_is_reported() {
        let at = |text: &str| {
            let line = text.lines().position(|l| l.starts_with("kind:")).unwrap();
            conditions(text, line)
        };
        let plain = "{{- if .Values.postgresql.enabled }}\n{{- if and .Values.a (not .Values.b) }}{{ end }}\nkind: Cluster\n{{- end }}\n";
        assert_eq!(at(plain), Ok(vec!["(.Values.postgresql.enabled)".into()]));
        let branches = "{{- if .Values.external }}\nx: 1\n{{- else if .Values.local }}\n{{- with $db := .Values.db }}\nkind: Cluster\n";
        assert_eq!(
            at(branches),
            Ok(vec![
                "(not (.Values.external))".into(),
                "(.Values.local)".into(),
                "(.Values.db)".into()
            ])
        );
        let negated = "{{ if .Values.external -}}\n{{- else -}}\nkind: Cluster\n";
        assert_eq!(at(negated), Ok(vec!["(not (.Values.external))".into()]));
        let ranged = "{{- range $name, $db := .Values.databases }}\n---\nkind: Cluster\n";
        assert_eq!(
            at(ranged),
            Err(Around::Range("$name, $db := .Values.databases".into()))
        );
        let dotted = "{{- with .Values.db }}\n{{- if .enabled }}\nkind: Cluster\n";
        assert!(matches!(at(dotted), Err(Around::Unknown(_))));
        let defined = "{{- define \"x\" }}\n{{- if .enabled }}\nkind: Cluster\n";
        assert_eq!(at(defined), Ok(vec![]));
        assert_eq!(define_at(defined, 2).as_deref(), Some("x"));
        assert_eq!(define_at(plain, 2), None);
    }

    #[test]
    fn count_lines_are_read_through_comments_scopes_and_checks() {
        let values = |text: &str, field: &str| {
            let line = text
                .lines()
                .position(|l| l.trim_start().starts_with(field))
                .unwrap();
            let lines: Vec<&str> = text.lines().collect();
            match count_at(text, &lines, line, field) {
                Some(Count::Values { key, expr, span }) => {
                    let l = text.lines().nth(line).unwrap();
                    assert!(l[span.0..span.1].contains("Values") || l[span.0..].starts_with('.'));
                    Ok((key, expr))
                }
                other => Err(other),
            }
        };
        let ok = |key: &str, expr: &str| Ok((key.to_owned(), expr.to_owned()));
        assert_eq!(
            values(
                "    replicas: {{ .Values.redis.replicas }} # sentinels need an odd count\n",
                "replicas"
            ),
            ok("redis.replicas", ".Values.redis.replicas")
        );
        let with = "spec:\n  {{- with .Values.redis }}\n  redis:\n    {{- with .persistence }}\n    size: 1\n    {{- end }}\n    replicas: {{ .replicas | default 3 }}\n  {{- end }}\n";
        assert_eq!(
            values(with, "replicas"),
            ok("redis.replicas", ".Values.redis.replicas | default 3")
        );
        let nested = "{{- with $.Values.db }}\n{{- with .cluster }}\n  instances: {{ . }}\n";
        assert_eq!(
            values(nested, "instances"),
            ok("db.cluster", ".Values.db.cluster")
        );
        let outer = "{{- with .Values.db }}\n{{- else }}\n  instances: {{ .Values.n }}\n";
        assert_eq!(values(outer, "instances"), ok("n", ".Values.n"));
        let dollar = "{{- range $i, $x := .Values.list }}\n  instances: {{ $.Values.x.y }}\n";
        assert_eq!(values(dollar, "instances"), ok("x.y", "$.Values.x.y"));
        let check = "  instances: {{ if lt (int .Values.n) 3 }}{{ fail \"at least 3\" }}{{ else }}{{ .Values.n }}{{ end }}\n";
        assert_eq!(values(check, "instances"), ok("n", ".Values.n"));
        assert_eq!(
            values(
                "  instances: {{ required \"set n\" .Values.n }}\n",
                "instances"
            ),
            ok("n", "required \"set n\" .Values.n")
        );
        assert!(matches!(
            values("  instances: 2 # two\n", "instances"),
            Err(Some(Count::Literal { value, span: (13, 14) })) if value == "2"
        ));
        for (text, why) in [
            (
                "{{- range .Values.dbs }}\n  instances: {{ .instances }}\n",
                "range",
            ),
            (
                "{{- with .Values.a | default dict }}\n  instances: {{ .n }}\n",
                "with",
            ),
            (
                "  instances: {{ .Values.a }}{{ .Values.b }}\n",
                "more than one",
            ),
            ("  instances: {{ add .Values.a .Values.b }}\n", "several"),
            ("  instances: \"{{ .Values.a }}\"\n", "text"),
        ] {
            match values(text, "instances") {
                Err(Some(Count::Other(reason))) => assert!(reason.contains(why), "{reason}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert_eq!(count_at("", &["  instancesX: 1"], 0, "instances"), None);
    }

    #[test]
    fn value_paths_become_nil_safe_chains() {
        assert_eq!(
            nil_safe(".Values.a.b.c | int"),
            "(((.Values.a | default dict).b | default dict).c) | int"
        );
        assert_eq!(nil_safe("$.Values.x.y"), "(($.Values.x | default dict).y)");
        assert_eq!(nil_safe("int .Values.n"), "int (.Values.n)");
    }
}
