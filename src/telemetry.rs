//! Logs: the filter, and the two line formats `[log] format` chooses.
//!
//! `text` is `tracing-subscriber`'s own human-readable format, coloured
//! only when stdout is a terminal. `json` writes one object per line
//! through the same `fmt` layer, with a fixed set of top-level keys a log
//! shipper can index without configuration:
//!
//! ```json
//! {"ts":"2025-01-01T12:00:00.000000Z","level":"DEBUG","target":"pushgate::transport::websocket","msg":"connection opened","conn_id":7,"user_id":"alice","transport":"ws"}
//! ```
//!
//! `ts` (RFC 3339, UTC), `level`, `target` and `msg` are always present.
//! Then come the fields of every span the event sits in, outermost first,
//! and the event's own fields, all flattened into the object (an event's
//! field wins over a span's of the same name): `conn_id`, `user_id`,
//! `transport`, `reason`, `error`, `peer` and the like. A field named like
//! one of the four fixed keys is written as `field.<name>` so it cannot
//! replace them.
//!
//! `tracing-subscriber`'s stock `Json` format names its keys `timestamp`
//! and `message`, nests span fields under `span`/`spans`, and cannot rename
//! them; [`JsonLines`] is the event formatter for the same layer that
//! writes the keys above, and span fields are recorded with the stock
//! [`JsonFields`].

use std::fmt;
use std::io::IsTerminal;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::config::{LogConfig, LogFormat};

/// Environment variables that replace `[log] level`, first found wins.
pub const FILTER_ENV: [&str; 2] = ["PUSHGATE_LOG", "RUST_LOG"];

/// The keys every JSON line carries, in this order.
const FIXED_KEYS: [&str; 4] = ["ts", "level", "target", "msg"];

/// The filter: `PUSHGATE_LOG`, else `RUST_LOG`, else `[log] level`. An
/// environment value that does not parse is skipped like an unset one.
pub fn filter(config: &LogConfig) -> EnvFilter {
    FILTER_ENV
        .iter()
        .find_map(|var| EnvFilter::try_from_env(var).ok())
        .or_else(|| EnvFilter::try_new(&config.level).ok())
        .unwrap_or_else(|| EnvFilter::new("info"))
}

/// Installs the process-wide subscriber: `config`'s format to stdout,
/// filtered by [`filter`]. `log` records from dependencies are included.
/// Fails if a subscriber is installed already.
pub fn init(config: &LogConfig) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let builder = tracing_subscriber::fmt().with_env_filter(filter(config));
    match config.format {
        LogFormat::Text => builder
            .with_ansi(std::io::stdout().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines)
            .try_init(),
    }
}

/// The `json` event format: one object per line (see the module docs).
/// Span fields must be recorded with [`JsonFields`] (`fmt_fields`), as
/// [`init`] does; spans whose fields are not a JSON object are skipped.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut ts = String::with_capacity(32);
        SystemTime.format_time(&mut Writer::new(&mut ts))?;
        let mut line = Line {
            ts,
            level: event.metadata().level().as_str(),
            target: event.metadata().target().to_owned(),
            msg: String::new(),
            fields: Vec::new(),
        };
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(recorded) = extensions.get::<FormattedFields<N>>() else {
                    continue;
                };
                if let Ok(serde_json::Value::Object(fields)) =
                    serde_json::from_str::<Value>(&recorded.fields)
                {
                    for (name, value) in fields {
                        line.set(name, value);
                    }
                }
            }
        }
        event.record(&mut line);
        let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writer.write_str(&text)?;
        writer.write_char('\n')
    }
}

/// One JSON line being built.
struct Line {
    ts: String,
    level: &'static str,
    target: String,
    msg: String,
    /// Span and event fields in first-seen order; a later value of the
    /// same name replaces the earlier.
    fields: Vec<(String, Value)>,
}

impl Line {
    fn set(&mut self, name: String, value: Value) {
        let name = if FIXED_KEYS.contains(&name.as_str()) {
            format!("field.{name}")
        } else {
            name
        };
        match self.fields.iter_mut().find(|(n, _)| *n == name) {
            Some((_, old)) => *old = value,
            None => self.fields.push((name, value)),
        }
    }

    fn record(&mut self, field: &Field, value: Value) {
        match field.name() {
            "message" => {
                self.msg = match value {
                    Value::String(text) => text,
                    other => other.to_string(),
                };
            }
            // A `log` record's origin, bridged by `tracing-log`: its
            // target replaces the bridge's own (`log`); the rest is noise.
            "log.target" => {
                if let Value::String(target) = value {
                    self.target = target;
                }
            }
            "log.module_path" | "log.file" | "log.line" => {}
            name => self.set(name.to_owned(), value),
        }
    }
}

impl Visit for Line {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.record(field, Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.record(field, Value::from(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.record(field, Value::from(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record(field, Value::from(format!("{value:?}")));
    }
}

impl Serialize for Line {
    fn serialize<Z: serde::Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        let mut map = serializer.serialize_map(Some(FIXED_KEYS.len() + self.fields.len()))?;
        map.serialize_entry("ts", &self.ts)?;
        map.serialize_entry("level", self.level)?;
        map.serialize_entry("target", &self.target)?;
        map.serialize_entry("msg", &self.msg)?;
        for (name, value) in &self.fields {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;
    use tracing_subscriber::fmt::MakeWriter;

    /// Every byte the subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("buffer").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    /// The JSON lines `emit` writes at TRACE.
    fn lines(emit: impl FnOnce()) -> Vec<serde_json::Map<String, Value>> {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("trace")
            .with_writer(out.clone())
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines)
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        let text = String::from_utf8(out.0.lock().expect("buffer").clone()).expect("UTF-8");
        text.lines()
            .map(|line| match serde_json::from_str(line) {
                Ok(Value::Object(map)) => map,
                other => panic!("not a JSON object: {line} ({other:?})"),
            })
            .collect()
    }

    #[test]
    fn fixed_keys_come_first_and_fields_are_flattened() {
        let lines = lines(|| {
            tracing::debug!(conn_id = 7_u64, user_id = %"alice", transport = "ws", "connection opened");
        });
        assert_eq!(lines.len(), 1);
        let line = &lines[0];
        assert_eq!(line["level"], "DEBUG");
        assert_eq!(line["target"], module_path!());
        assert_eq!(line["msg"], "connection opened");
        assert_eq!(line["conn_id"], 7);
        assert_eq!(line["user_id"], "alice");
        assert_eq!(line["transport"], "ws");
        let ts = line["ts"].as_str().expect("ts is a string");
        assert!(
            ts.len() >= 20 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
            "{ts}"
        );
    }

    #[test]
    fn span_fields_are_flattened_outermost_first_and_events_win() {
        let lines = lines(|| {
            let conn = tracing::info_span!("conn", conn_id = 3_u64, transport = "sse");
            let _conn = conn.enter();
            let close = tracing::info_span!("close", reason = "idle", transport = "poll");
            let _close = close.enter();
            tracing::info!(transport = "ws", "closing");
        });
        let line = &lines[0];
        assert_eq!(line["conn_id"], 3);
        assert_eq!(line["reason"], "idle");
        assert_eq!(line["transport"], "ws", "the event's own field wins");
        assert!(!line.contains_key("span") && !line.contains_key("spans"));
    }

    #[test]
    fn a_field_cannot_replace_a_fixed_key() {
        let lines = lines(|| tracing::warn!(level = "forged", msg = 1, "real"));
        let line = &lines[0];
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["msg"], "real");
        assert_eq!(line["field.level"], "forged");
        assert_eq!(line["field.msg"], 1);
    }

    #[test]
    fn quotes_and_newlines_stay_inside_one_line() {
        let lines = lines(|| tracing::error!(error = "a \"b\"\nc", "x\ny"));
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["msg"], "x\ny");
        assert_eq!(lines[0]["error"], "a \"b\"\nc");
    }

    #[test]
    fn the_environment_replaces_the_configured_level() {
        // Only checks the fallback chain's last steps: the environment of
        // a test process is not ours to set.
        if FILTER_ENV.iter().any(|v| std::env::var_os(v).is_some()) {
            return;
        }
        let config = LogConfig {
            level: "warn".into(),
            ..LogConfig::default()
        };
        assert_eq!(filter(&config).to_string(), "warn");
        let broken = LogConfig {
            level: "[".into(),
            ..LogConfig::default()
        };
        assert_eq!(filter(&broken).to_string(), "info");
    }
}
