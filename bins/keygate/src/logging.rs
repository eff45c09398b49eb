//! Logging: env_logger behind a throttle, so that no remote client can drive the log's
//! volume. Warnings and errors (the levels that requests can trigger: a malformed request
//! logged by actix-http, a 503 when a store is down, a failed refresh) are let through at
//! most [`LINES_PER_WINDOW`] per target per [`WINDOW_MS`]; the next line let through after
//! a quiet spell says how many were suppressed. Info and below pass untouched (startup,
//! shutdown: nothing a client can repeat).

use keygate_http::throttle::{Throttle, suppressed_note};
use log::{Level, Log, Metadata, Record};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// Lines of one target (module) let through per window.
pub const LINES_PER_WINDOW: u64 = 20;
/// The throttle's window.
pub const WINDOW_MS: u64 = 10_000;

/// The process's logger: env_logger with a [`Throttle`] per target for warnings and errors.
#[derive(Debug)]
pub struct ThrottledLogger {
    inner: env_logger::Logger,
    targets: Mutex<HashMap<String, std::sync::Arc<Throttle>>>,
}

impl ThrottledLogger {
    pub fn new(inner: env_logger::Logger) -> Self {
        Self { inner, targets: Mutex::new(HashMap::new()) }
    }

    /// Installs env_logger (configured from `spec`, the `RUST_LOG` setting, else
    /// `default_filter`) behind the throttle as the process's logger, writing `format`
    /// (`text` or `json`, `KEYGATE_LOG_FORMAT`). A `spec` that is not valid is reported on
    /// stderr and replaced by the default (env_logger alone would drop the bad parts and
    /// could end up logging nothing at all, silently).
    pub fn install(default_filter: &str, spec: Option<&str>, format: Option<&str>) {
        let spec = match spec {
            Some(spec) => match check_spec(spec) {
                Ok(()) => spec.to_string(),
                Err(why) => {
                    eprintln!(
                        "keygate: RUST_LOG={spec:?} is not valid ({why}); logging with {default_filter:?} instead"
                    );
                    default_filter.to_string()
                }
            },
            None => default_filter.to_string(),
        };
        let mut builder = env_logger::Builder::new();
        builder.parse_filters(&spec);
        // `format` is `text` or `json` (the flag's parser refuses anything else).
        if format == Some("json") {
            let _ = JSON.set(true);
            builder.format(|buf, record| {
                use std::io::Write;
                writeln!(buf, "{}", json_line(record))
            });
        }
        let inner = builder.build();
        let max = inner.filter();
        if log::set_boxed_logger(Box::new(Self::new(inner))).is_ok() {
            log::set_max_level(max);
        }
    }

    fn throttle(&self, target: &str) -> std::sync::Arc<Throttle> {
        let mut targets = self.targets.lock();
        if let Some(t) = targets.get(target) {
            return t.clone();
        }
        let t = std::sync::Arc::new(Throttle::new(LINES_PER_WINDOW, WINDOW_MS));
        // Targets are module paths (a bounded set); the map cannot grow with input.
        targets.insert(target.to_string(), t.clone());
        t
    }
}

/// Whether the process logs JSON lines (`KEYGATE_LOG_FORMAT=json`), set once by
/// [`ThrottledLogger::install`].
static JSON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// A line for the operator that no log level may hide (the first start's root key): on
/// stderr, as `keygate: <message>`, or as a JSON line in the JSON format.
pub fn notice(message: &str) {
    if JSON.get().copied().unwrap_or(false) {
        let line = serde_json::json!({
            "ts": rfc3339(SystemTime::now()), "level": "NOTICE", "target": "keygate", "message": message,
        });
        eprintln!("{line}");
    } else {
        eprintln!("keygate: {message}");
    }
}

/// One log record as a JSON object: `ts` (RFC 3339, UTC), `level`, `target`, `message`,
/// and the record's key-values as fields (the access log's `request_id`, `status`, ...).
pub fn json_line(record: &Record<'_>) -> String {
    struct Fields(serde_json::Map<String, serde_json::Value>);
    impl<'kvs> log::kv::VisitSource<'kvs> for Fields {
        fn visit_pair(
            &mut self,
            key: log::kv::Key<'kvs>,
            value: log::kv::Value<'kvs>,
        ) -> Result<(), log::kv::Error> {
            let v = if let Some(n) = value.to_u64() {
                serde_json::Value::from(n)
            } else if let Some(f) = value.to_f64() {
                serde_json::Value::from(f)
            } else {
                serde_json::Value::from(value.to_string())
            };
            self.0.insert(key.to_string(), v);
            Ok(())
        }
    }
    let mut fields = Fields(serde_json::Map::new());
    fields.0.insert("ts".into(), rfc3339(SystemTime::now()).into());
    fields.0.insert("level".into(), record.level().as_str().into());
    fields.0.insert("target".into(), record.target().into());
    fields.0.insert("message".into(), record.args().to_string().into());
    let _ = record.key_values().visit(&mut fields);
    serde_json::Value::Object(fields.0).to_string()
}

/// `2026-11-24T10:53:19.123Z`.
fn rfc3339(t: SystemTime) -> String {
    match jiff::Timestamp::try_from(t) {
        Ok(ts) => format!("{ts:.3}"),
        Err(_) => "1970-01-01T00:00:00.000Z".to_string(),
    }
}

/// Checks an env_logger filter spec (`directive,directive[/regex]`, each directive `level`,
/// `target` or `target=level`).
pub fn check_spec(spec: &str) -> Result<(), String> {
    let directives = spec.split('/').next().unwrap_or_default();
    let level = |l: &str| {
        l.trim()
            .parse::<log::LevelFilter>()
            .map(drop)
            .map_err(|_| format!("{:?} is not a level: use off, error, warn, info, debug or trace", l.trim()))
    };
    let target = |t: &str| {
        let ok =
            !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '-'));
        if ok { Ok(()) } else { Err(format!("{t:?} is not a module path")) }
    };
    let mut any = false;
    for d in directives.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        any = true;
        match d.split_once('=') {
            Some((t, l)) => {
                target(t.trim())?;
                level(l)?;
            }
            None => {
                if level(d).is_err() {
                    target(d)?;
                }
            }
        }
    }
    if any { Ok(()) } else { Err("it names no level".into()) }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Log for ThrottledLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.inner.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if !self.inner.matches(record) {
            return;
        }
        if record.level() > Level::Warn {
            return self.inner.log(record);
        }
        match self.throttle(record.target()).admit(now_ms()) {
            None => {}
            Some(0) => self.inner.log(record),
            Some(n) => self.inner.log(
                &Record::builder()
                    .args(format_args!("{}{}", record.args(), suppressed_note(n)))
                    .level(record.level())
                    .target(record.target())
                    .module_path(record.module_path())
                    .file(record.file())
                    .line(record.line())
                    .build(),
            ),
        }
    }

    fn flush(&self) {
        self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_carry_the_fields_and_a_utc_time() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + std::time::Duration::from_millis(1_795_305_600_123)),
            "2026-11-22T00:00:00.123Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + std::time::Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
        let kvs: &[(&str, log::kv::Value<'_>)] = &[("request_id", "req_1".into()), ("status", 200u64.into())];
        let line = json_line(
            &Record::builder()
                .args(format_args!("GET /x 200"))
                .level(Level::Info)
                .target("keygate::access")
                .key_values(&kvs)
                .build(),
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            (&v["level"], &v["target"], &v["message"]),
            (&"INFO".into(), &"keygate::access".into(), &"GET /x 200".into())
        );
        assert_eq!((&v["request_id"], &v["status"]), (&"req_1".into(), &200.into()));
    }

    #[test]
    fn log_specs_are_checked() {
        for ok in
            ["info", "info,actix_server=warn", "keygate=debug", "keygate::server", "warn,my-crate=trace/foo"]
        {
            assert_eq!(check_spec(ok), Ok(()), "{ok}");
        }
        for bad in ["keygate=verbose", "blah blah", "", " , ", "info,=x", "keygate=loud"] {
            assert!(check_spec(bad).is_err(), "{bad}");
        }
    }
}
