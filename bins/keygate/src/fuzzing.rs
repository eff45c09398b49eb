//! Entry points for the fuzz targets (`tests/fuzz`, run with `cargo fuzz`; docs/security.md,
//! "Fuzzing"): each takes any input and must return, never panic. Not an API: the
//! property tests beside each parser run the same inputs' kinds on stable in CI.

pub use keygate_http::fuzzing::request_body;

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
