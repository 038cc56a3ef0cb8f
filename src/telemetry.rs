//! Structured logging. Request bodies are never logged: the HTTP trace layer records method,
//! matched route, status and latency only (see `http::mod`).

use std::io::IsTerminal;

use tracing_subscriber::{fmt, EnvFilter};

use crate::config::LogFormat;

/// Install the global subscriber. `RUST_LOG` wins over `level`. Safe to call more than once
/// (later calls are ignored), which tests rely on.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // Colours only for a person at a terminal: in a file or a collector's pipe they are bytes
    // to strip on every line.
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
