//! Logging flags and initialisation shared by every subcommand (`#[command(flatten)] LogArgs`,
//! or the component's own group: each reads its own `<COMPONENT>_LOG_*` variables).
//!
//! Log lines carry names and messages that came from clients and backends. JSON lines escape
//! them by construction; plain lines go through [`Escaping`], so a `\n`, `\r` or NUL inside a
//! value can never start a forged line. Plain lines carry no ANSI colours for the same reason
//! (an escape sequence from a client would otherwise reach the terminal).
use std::io::{self, Write};

use anyhow::Context as _;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Declares a `--log-format`/`--log-level` flag group whose environment variables carry a
/// component's own prefix, so one pod's settings never leak into another component's.
macro_rules! log_args {
    ($(#[$doc:meta])* $name:ident, $format_env:literal, $level_env:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, clap::Args)]
        pub struct $name {
            /// Log line format.
            #[arg(long, value_enum, default_value = "plain", env = $format_env)]
            pub log_format: LogFormat,
            /// Log filter: a level (`info`, `debug`, ...) or tracing directives like `scaler=debug,warn`.
            #[arg(long, default_value = "info", env = $level_env)]
            pub log_level: String,
        }

        impl $name {
            /// Installs the global subscriber; logs go to stderr so stdout stays for command output.
            pub fn init(&self) -> anyhow::Result<()> {
                init(self.log_format, &self.log_level)
            }
        }
    };
}

log_args!(
    /// The scaler's subcommands (`serve`, `explain`, `status`, `backtest`): `SCALER_LOG_*`.
    LogArgs, "SCALER_LOG_FORMAT", "SCALER_LOG_LEVEL"
);
log_args!(
    /// `scaler webhook`: `WEBHOOK_LOG_*`.
    WebhookLogArgs, "WEBHOOK_LOG_FORMAT", "WEBHOOK_LOG_LEVEL"
);
log_args!(
    /// `scaler shard-controller`: `SHARD_CONTROLLER_LOG_*`.
    ShardControllerLogArgs, "SHARD_CONTROLLER_LOG_FORMAT", "SHARD_CONTROLLER_LOG_LEVEL"
);
log_args!(
    /// `scaler scale-adapter`: `SCALE_ADAPTER_LOG_*`.
    ScaleAdapterLogArgs, "SCALE_ADAPTER_LOG_FORMAT", "SCALE_ADAPTER_LOG_LEVEL"
);

fn init(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let filter =
        EnvFilter::try_new(level).with_context(|| format!("invalid --log-level {level:?}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false);
    let result = match format {
        LogFormat::Plain => builder.with_writer(|| Escaping(io::stderr())).try_init(),
        LogFormat::Json => builder
            .with_writer(io::stderr)
            .json()
            .flatten_event(true)
            .try_init(),
    };
    result.map_err(|error| anyhow::anyhow!("cannot install the logger: {error}"))
}

/// Writes each formatted event with every control character but its final newline escaped
/// (`\n` → `\\n`, NUL → `\\u{0}`; tabs stay). The formatter hands over one whole event per write.
pub struct Escaping<W>(pub W);

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (body, newline) = match buf.strip_suffix(b"\n") {
            Some(body) => (body, true),
            None => (buf, false),
        };
        if !body.iter().any(|b| b.is_ascii_control() && *b != b'\t') {
            self.0.write_all(buf)?;
            return Ok(buf.len());
        }
        let mut out = Vec::with_capacity(buf.len() + 16);
        for &b in body {
            match b {
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.push(b),
                b if b.is_ascii_control() => {
                    out.extend_from_slice(format!("\\u{{{b:x}}}").as_bytes())
                }
                b => out.push(b),
            }
        }
        if newline {
            out.push(b'\n');
        }
        self.0.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(line: &[u8]) -> String {
        let mut out = Escaping(Vec::new());
        out.write_all(line).unwrap();
        String::from_utf8(out.0).unwrap()
    }

    #[test]
    fn control_characters_cannot_forge_lines() {
        assert_eq!(escaped(b"plain\tline\n"), "plain\tline\n");
        assert_eq!(
            escaped(b"ns=a\nERROR forged\r\0\x1b[31m\n"),
            "ns=a\\nERROR forged\\r\\u{0}\\u{1b}[31m\n"
        );
        assert_eq!(escaped("é\u{7f}".as_bytes()), "é\\u{7f}");
    }
}
