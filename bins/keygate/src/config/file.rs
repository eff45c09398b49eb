//! The config file (`--config keygate.toml`, `KEYGATE_CONFIG`): a TOML table whose keys are
//! the flags' names in snake_case (`listen`, `database_url`, `redis_url`, ...).
//!
//! The file is one more source for the same clap arguments, below the flag and the
//! environment and above the default: each file value whose argument came from neither is
//! handed to clap as if given on the command line, so every value goes through the one
//! parser (and bounds) its flag has, and a setting has one definition, its clap argument.

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};
use std::ffi::OsString;
use std::path::Path;

/// Arguments that are not settings, and so not keys of the file.
const NOT_KEYS: &[&str] = &["config", "help", "version"];

/// The command-line arguments (`--key=value`) that the file at `path` adds to `matches`:
/// every key the file sets whose argument the command line and the environment left at its
/// default. `sub` is the subcommand's name and matches (the server's settings are those of
/// `serve`, or of the top level when no subcommand is given). Errors name the file and the
/// key.
pub(super) fn file_args(
    path: &Path,
    cmd: &Command,
    top: &ArgMatches,
    sub: Option<(&str, &ArgMatches)>,
) -> Result<Vec<OsString>, String> {
    let shown = path.display();
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read the config file {shown}: {e}"))?;
    // The parser's message and position only: its default display quotes the line, which
    // may hold a secret (a database password, the root key).
    let table: toml::Table = toml::from_str(&text).map_err(|e| {
        let at = e.span().map_or(0, |s| s.start).min(text.len());
        let line = text[..at].matches('\n').count() + 1;
        let column = text[..at].rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        format!("config file {shown}: not valid TOML at line {line}, column {column}: {}", e.message().trim())
    })?;
    // The server's arguments live on `serve`; the global ones (database_url, logging) on
    // the top level too.
    let serve = cmd.find_subcommand("serve").ok_or("the serve subcommand")?;
    let mut extra = Vec::new();
    for (key, value) in &table {
        let arg = serve
            .get_arguments()
            .chain(cmd.get_arguments())
            .find(|a| a.get_id() == key.as_str() && !NOT_KEYS.contains(&a.get_id().as_str()))
            .ok_or_else(|| {
                let mut known: Vec<&str> = serve
                    .get_arguments()
                    .map(|a| a.get_id().as_str())
                    .filter(|k| !NOT_KEYS.contains(k))
                    .collect();
                known.sort_unstable();
                known.dedup();
                format!("config file {shown}: unknown key `{key}` (the keys are: {})", known.join(", "))
            })?;
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(format!(
                    "config file {shown}: key `{key}`: expected a string, an integer or a boolean, found {}",
                    other.type_str()
                ));
            }
        };
        let is_flag = matches!(arg.get_action(), ArgAction::SetTrue);
        let long = arg.get_long().unwrap_or(key.as_str());
        let parsed = if is_flag {
            text.parse::<bool>().map(|_| ()).map_err(|_| "expected true or false".to_string())
        } else {
            // The argument's own parser (and bounds), on the value alone.
            let alone = Command::new("config").no_binary_name(true).arg(arg.clone().required(false));
            alone.try_get_matches_from([format!("--{long}={text}")]).map(|_| ()).map_err(|e| {
                let msg = e.to_string();
                let msg = msg.trim_start().strip_prefix("error: ").unwrap_or(&msg);
                msg.lines().next().unwrap_or_default().trim().to_string()
            })
        };
        // A secret's value (the root key) is not echoed.
        let shown_value =
            if arg.is_hide_env_values_set() { "<redacted>".to_string() } else { format!("{text:?}") };
        parsed.map_err(|why| format!("config file {shown}: key `{key}` = {shown_value}: {why}"))?;
        // Where this argument's value is read from: the subcommand's matches for a server
        // setting under `serve`, the top level otherwise. Another subcommand (the admin
        // commands) takes only the global settings.
        let global = arg.is_global_set();
        let matches = match sub {
            None => top,
            Some(("serve", m)) => m,
            Some((_, m)) if global => m,
            Some(_) => continue,
        };
        let given = matches!(
            matches.value_source(key.as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if given {
            continue;
        }
        match (is_flag, text.as_str()) {
            (true, "true") => extra.push(OsString::from(format!("--{long}"))),
            (true, _) => {}
            (false, _) => extra.push(OsString::from(format!("--{long}={text}"))),
        }
    }
    Ok(extra)
}

#[cfg(test)]
mod tests {
    //! The config file reader on any input (issue 52's fuzz targets, bounded for CI): read
    //! or refused with a message naming the file, never a panic; a value goes through its
    //! flag's own bounds.
    #![allow(clippy::unwrap_used)]
    use crate::config::Cli;
    use proptest::prelude::*;

    fn read(text: &str) -> Result<Cli, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keygate.toml");
        std::fs::write(&path, text).unwrap();
        let path = path.to_str().unwrap().to_string();
        Cli::try_parse_args_from(["keygate", "--config", &path]).map_err(|e| e.to_string())
    }

    /// Lines of known keys, values of every kind, and TOML's punctuation.
    fn near_valid() -> impl Strategy<Value = String> {
        let key = prop::sample::select(vec![
            "listen",
            "workers",
            "metrics",
            "metrics_namespaces",
            "db_pool_size",
            "verify_cache",
            "otlp_sample_ratio",
            "root_key",
            "unknown_key",
            "[table]",
            "a.b",
        ]);
        let value = prop::sample::select(vec![
            "1",
            "0",
            "-1",
            "1001",
            "99999999999999999999",
            "true",
            "\"on\"",
            "\"\"",
            "\"\\u00e9\"",
            "[1, 2]",
            "{ a = 1 }",
            "1.5",
            "nan",
            "\"127.0.0.1:0\"",
            "'''x'''",
            "\"\u{e9}\u{1F600}\"",
            "",
        ]);
        let line = (key, prop::sample::select(vec![" = ", "=", " ", " == "]), value)
            .prop_map(|(k, eq, v)| format!("{k}{eq}{v}"));
        prop::collection::vec(line, 0..6).prop_map(|l| l.join("\n"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_text_is_read_or_refused_never_a_panic(text in "(?s)[a-z_ =\"'\\[\\]{}.,0-9\n#\u{e9}\u{1F600}\\\\-]{0,80}") {
            if let Err(why) = read(&text) {
                prop_assert!(why.contains("config file"), "{why}");
            }
        }

        #[test]
        fn near_valid_files_never_panic(text in near_valid()) {
            let _ = read(&text);
        }

        #[test]
        fn a_value_goes_through_its_flag_s_bounds(n in -5i64..2000) {
            let got = read(&format!("metrics_namespaces = {n}"));
            match got {
                Ok(cli) => {
                    prop_assert!((0..=1000).contains(&n), "{n} accepted");
                    prop_assert_eq!(i64::from(cli.serve.metrics_namespaces), n);
                }
                Err(why) => {
                    prop_assert!(!(0..=1000).contains(&n), "{n} refused: {why}");
                    prop_assert!(why.contains("metrics_namespaces"), "{why}");
                }
            }
        }
    }
}
