//! Entry points for the fuzz targets (`tests/fuzz`, run with `cargo fuzz`; docs/security.md,
//! "Fuzzing"): each takes any input and must return, never panic. Not an API: the
//! property tests beside each parser run the same inputs' kinds on stable in CI.

/// The JSON body reader on the rate-limit bodies (v1 `ratelimits.limit`, v2
/// `ratelimit.limit` and `ratelimit.multiLimit`), each read and checked as its handler does.
pub fn request_body(data: &[u8]) {
    use crate::handlers::{ratelimit as v1, v2::ratelimit as v2};
    if let Ok(body) = crate::http::parse_json::<v1::LimitBody<'_>>(data) {
        let _ = body.validate();
    }
    if let Ok(body) = crate::http::parse_json::<v2::LimitBody<'_>>(data) {
        let _ = body.validate("");
    }
    if let Ok(bodies) = crate::http::parse_json_as::<Vec<v2::LimitBody<'_>>>(data, b'[') {
        for body in bodies {
            let _ = body.validate("");
        }
    }
}

/// One line of a `keygate keys import` file (a `keys.migrateKeys` entry).
pub fn import_line(data: &[u8]) {
    let _ = crate::admin::import::parse(data);
}

/// A config file's text, read as `keygate --config FILE` reads it (from a file of this
/// process's own in the temporary directory).
pub fn config_file(text: &str) {
    let path = std::env::temp_dir().join(format!("keygate-fuzz-config-{}.toml", std::process::id()));
    if std::fs::write(&path, text).is_ok() {
        let _ = crate::config::Cli::try_parse_args_from([
            std::ffi::OsStr::new("keygate"),
            std::ffi::OsStr::new("--config"),
            path.as_os_str(),
        ]);
    }
}
