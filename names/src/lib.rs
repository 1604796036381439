//! Kubernetes object names as the API server validates them, and a bounded, escaped echo of
//! untrusted text for error messages.
//!
//! Names arrive from gRPC requests and admission reviews; anything that is not a name the API
//! server would accept is refused before it reaches a query, a URL, a log line or a metric label.
use std::fmt::Write as _;

pub mod redis_failover;

/// Longest DNS-1123 label (namespaces, CNPG Cluster names).
pub const LABEL_MAX: usize = 63;
/// Longest DNS-1123 subdomain (most object names, ScaledObjects and HelmReleases included).
pub const SUBDOMAIN_MAX: usize = 253;
/// How many characters of an untrusted value an error message repeats.
pub const ECHO_MAX: usize = 64;
/// How many values of an untrusted list an error message repeats.
pub const LIST_MAX: usize = 5;

/// What a namespace must look like, for error messages.
pub const NAMESPACE_RULE: &str = "a Kubernetes namespace name: a DNS-1123 label (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)";
/// What an object name must look like, for error messages.
pub const OBJECT_RULE: &str = "a Kubernetes object name: a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)";

/// RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= LABEL_MAX
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(value: &str) -> bool {
    value.len() <= SUBDOMAIN_MAX && value.split('.').all(is_dns_label)
}

/// Appends at most `max` characters of `value` to `out`, every one a terminal or a log reader
/// could act on (controls, the C1 escape introducers, bidirectional and other invisible format
/// characters: what `char::escape_debug` escapes) written as `\u{1b}`; `quoted` escapes quotes
/// and backslashes too, so the text can sit between quotes. Returns whether `value` was cut.
fn escape_into(out: &mut String, value: &str, max: usize, quoted: bool) -> bool {
    let mut chars = value.chars();
    for c in chars.by_ref().take(max) {
        if !quoted && matches!(c, '"' | '\'' | '\\') {
            out.push(c);
        } else {
            out.extend(c.escape_debug());
        }
    }
    chars.next().is_some()
}

/// A quoted, escaped prefix of `value` (at most [`ECHO_MAX`] characters) that also says how
/// long the whole value was when it was cut: safe to put into a message, a log line or a reply.
pub fn echo(value: &str) -> String {
    let mut out = String::from("\"");
    let cut = escape_into(&mut out, value, ECHO_MAX, true);
    out.push('"');
    if cut {
        let _ = write!(out, "… ({} bytes)", value.len());
    }
    out
}

/// `value` as [`echo`] escapes it, unquoted (quotes and backslashes kept as they are), cut after
/// `max` characters with `…`: untrusted text for a table cell or a report field, where nothing
/// it holds may steer the terminal that shows it.
pub fn escape(value: &str, max: usize) -> String {
    let mut out = String::new();
    if escape_into(&mut out, value, max, false) {
        out.push('…');
    }
    out
}

/// The first [`LIST_MAX`] of `values`, each [`echo`]ed, and how many there are when that is
/// not all of them: a list of untrusted names (a file's ScaledObjects) in an error message, its
/// length bounded however long the list.
pub fn echo_list<S: AsRef<str>>(values: &[S]) -> String {
    let shown: Vec<String> = values
        .iter()
        .take(LIST_MAX)
        .map(|v| echo(v.as_ref()))
        .collect();
    let mut out = shown.join(", ");
    if values.len() > LIST_MAX {
        let _ = write!(out, " and {} more", values.len() - LIST_MAX);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        for ok in ["pg", "a", "pg-archive", "0db", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-pg", "pg-", "PG", "p.g", "p_g", "é", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }

    #[test]
    fn dns_subdomains() {
        let long = vec!["a".repeat(63); 4].join(".");
        assert_eq!(long.len(), 255);
        for ok in ["pg", "my.scaled-object", "a.b.c", &long[..253]] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            ".a",
            "a.",
            "a..b",
            "A",
            "a/b",
            "a?watch=true",
            "tenant-x/../../api",
            &long,
        ] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn echo_is_bounded_and_escaped() {
        assert_eq!(echo("pg"), "\"pg\"");
        assert_eq!(echo("a\nb\r\0"), r#""a\nb\r\0""#);
        let huge = "x".repeat(3 << 20);
        let e = echo(&huge);
        assert!(e.len() < 100, "{e}");
        assert!(e.ends_with("… (3145728 bytes)"), "{e}");
    }

    #[test]
    fn escape_is_bounded_and_steers_no_terminal() {
        assert_eq!(escape(r#"pg "a" \ it's"#, 64), r#"pg "a" \ it's"#);
        assert_eq!(
            escape("a\u{1b}]0;x\u{7}\u{9b}2J\u{202e}\r\n", 64),
            r"a\u{1b}]0;x\u{7}\u{9b}2J\u{202e}\r\n"
        );
        assert_eq!(escape("abcdef", 3), "abc…");
        assert_eq!(escape("abc", 3), "abc");
        let e = escape(&"\u{1b}".repeat(1 << 20), 100);
        assert!(
            e.len() <= 100 * 6 + 3 && !e.contains('\u{1b}'),
            "{}",
            e.len()
        );
    }

    #[test]
    fn echo_list_is_bounded() {
        assert_eq!(echo_list(&["a", "b\n"]), r#""a", "b\n""#);
        let many: Vec<String> = (0..40_000).map(|i| format!("{i:0>200}")).collect();
        let e = echo_list(&many);
        assert!(e.len() < 600, "{} bytes", e.len());
        assert!(e.starts_with(&echo(&many[0])), "{e}");
        assert!(e.ends_with(" and 39995 more"), "{e}");
    }
}
