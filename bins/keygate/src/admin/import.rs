//! `keygate keys import`: keys issued elsewhere brought in from a file of JSON lines, one
//! `keys.migrateKeys` entry per line, 1,000 per call (one transaction each).
//!
//! A line that is not a valid entry stops the import there: the lines before it are
//! imported, the summary says how many, and the error names the line. Re-running the same
//! file after an interruption (a crash, `kill -9`, that error fixed) completes it: the
//! keys already there are counted as failed and nothing doubles.

use super::commands::ImportArgs;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use keygate_http::MigrateKeyEntry;
use keygate_http::Obj;
use keygate_rbac::{MAX_MIGRATED_KEYS, MigratedKey, Migrations, Principal, RbacError, RbacService};
use keygate_store::SqlStore;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read};
use std::time::Instant;

/// A command that stopped part way: its summary of what was done (printed), and why.
#[derive(Debug)]
pub(super) struct Incomplete {
    pub(super) summary: serde_json::Value,
    reason: anyhow::Error,
}

impl std::fmt::Display for Incomplete {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.reason)
    }
}

impl std::error::Error for Incomplete {}

/// The admin CLI's actor in the audit log.
const ACTOR: &str = "admin-cli";

pub fn run(rbac: RbacService<SqlStore>, args: &ImportArgs) -> anyhow::Result<Value> {
    let rbac = rbac
        .with_migrations(Migrations::parse(&args.migrations)?)
        .with_legacy(std::sync::Arc::new(keygate_legacy::Legacy::default()));
    let ws = rbac.api_workspace(&args.api)?;
    let principal = Principal::new(ACTOR.into(), ws.id, ["*".to_string()]);
    let (input, size): (Box<dyn Read>, Option<u64>) = if args.file == "-" {
        (Box::new(std::io::stdin().lock()), None)
    } else {
        let file =
            std::fs::File::open(&args.file).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", args.file))?;
        let size = file.metadata().ok().map(|m| m.len());
        (Box::new(file), size)
    };
    let mut import = Import {
        rbac: &rbac,
        principal: &principal,
        args,
        started: Instant::now(),
        migrated: 0,
        failed: 0,
        progress: progress_bar(size),
    };
    let outcome = import.read(BufReader::with_capacity(1 << 16, input));
    import.progress.finish_and_clear();
    let summary = import.summary();
    match outcome {
        Ok(()) => Ok(summary),
        Err(reason) => Err(Incomplete { summary, reason }.into()),
    }
}

/// A bar on standard error, drawn only when it is a terminal: bytes of the file read, or a
/// count of lines from standard input.
fn progress_bar(size: Option<u64>) -> ProgressBar {
    let target = ProgressDrawTarget::stderr();
    match size {
        Some(bytes) => ProgressBar::with_draw_target(Some(bytes), target).with_style(
            ProgressStyle::with_template("{bar:40} {percent:>3}% {msg} ({elapsed}, {eta} left)")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::with_draw_target(None, target),
    }
}

struct Import<'a> {
    rbac: &'a RbacService<SqlStore>,
    principal: &'a Principal,
    args: &'a ImportArgs,
    started: Instant,
    migrated: u64,
    failed: u64,
    progress: ProgressBar,
}

impl Import<'_> {
    /// Reads the lines, submitting a call each 1,000 entries; stops at the first line that
    /// is not an entry, after submitting those before it.
    fn read(&mut self, input: impl BufRead) -> anyhow::Result<()> {
        let mut batch: Vec<MigratedKey> = Vec::with_capacity(MAX_MIGRATED_KEYS);
        let mut lines: Vec<usize> = Vec::with_capacity(MAX_MIGRATED_KEYS);
        for (i, line) in input.split(b'\n').enumerate() {
            let number = i + 1;
            let line = line.map_err(|e| anyhow::anyhow!("line {number}: cannot read: {e}"))?;
            self.progress.inc(line.len() as u64 + 1);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match parse(&line) {
                Ok(entry) => {
                    batch.push(entry);
                    lines.push(number);
                }
                Err(e) => {
                    self.submit(&mut batch, &mut lines)?;
                    anyhow::bail!("line {number}: {e}");
                }
            }
            if batch.len() == MAX_MIGRATED_KEYS {
                self.submit(&mut batch, &mut lines)?;
            }
        }
        self.submit(&mut batch, &mut lines)
    }

    /// One `keys.migrateKeys` call for `batch` (emptied). When the service refuses one
    /// entry (its error names `keys.<i>`), the entries before it are submitted alone and the
    /// error names that entry's line.
    fn submit(&mut self, batch: &mut Vec<MigratedKey>, lines: &mut Vec<usize>) -> anyhow::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let result = self.call(batch);
        let error = match result {
            Ok(()) => {
                batch.clear();
                lines.clear();
                return Ok(());
            }
            Err(e) => e,
        };
        let at = match &error {
            RbacError::Invalid(v) => entry_index(&v.path),
            _ => None,
        };
        match at {
            Some(i) if i < batch.len() => {
                let line = lines[i];
                if i > 0 {
                    self.call(&batch[..i])
                        .map_err(|e| anyhow::anyhow!("lines {}-{}: {e}", lines[0], lines[i - 1]))?;
                }
                let RbacError::Invalid(v) = &error else { unreachable!("matched above") };
                let field = v.path.split_once('.').and_then(|(_, rest)| rest.split_once('.')).map(|(_, f)| f);
                match field {
                    Some(f) => anyhow::bail!("line {line}: {f}: {}", v.message),
                    None => anyhow::bail!("line {line}: {}", v.message),
                }
            }
            _ => anyhow::bail!("lines {}-{}: {error}", lines[0], lines[lines.len() - 1]),
        }
    }

    fn call(&mut self, entries: &[MigratedKey]) -> Result<(), RbacError> {
        let done = self.rbac.migrate_keys(self.principal, &self.args.migration, &self.args.api, entries)?;
        self.migrated += done.migrated.len() as u64;
        self.failed += done.failed.len() as u64;
        self.progress.set_message(format!("{} keys", self.migrated));
        Ok(())
    }

    fn summary(&self) -> Value {
        let seconds = (self.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
        json!({ "migrated": self.migrated, "failed": self.failed, "seconds": seconds })
    }
}

/// One line as an entry, checked as `keys.migrateKeys` checks one.
pub(crate) fn parse(line: &[u8]) -> Result<MigratedKey, String> {
    let mut de = serde_json::Deserializer::from_slice(line);
    let Obj(entry): Obj<MigrateKeyEntry> =
        serde_path_to_error::deserialize(&mut de).map_err(|e| match e.path().to_string().as_str() {
            "." => format!("not an entry: {}", e.inner()),
            path => format!("{path}: {}", e.inner()),
        })?;
    de.end().map_err(|e| format!("not an entry: {e}"))?;
    // Paths from "": ".credits.remaining: ...".
    entry.into_migrated("").map_err(|e| e.message.trim_start_matches('.').to_string())
}

/// `keys.<i>...` → `i`.
fn entry_index(path: &str) -> Option<usize> {
    path.strip_prefix("keys.")?.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    //! The import line reader on any input (issue 52's fuzz targets, bounded for CI).
    #![allow(clippy::unwrap_used)]
    use super::parse;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// Pieces of entries, put together in any order: most are near-valid lines.
    fn near_valid() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            "\"hash\"",
            "\"name\"",
            "\"externalId\"",
            "\"meta\"",
            "\"roles\"",
            "\"permissions\"",
            "\"expires\"",
            "\"enabled\"",
            "\"credits\"",
            "\"remaining\"",
            "\"refill\"",
            "\"ratelimits\"",
            "\"limit\"",
            "\"duration\"",
            "\"autoApply\"",
            "null",
            "true",
            "-1",
            "0",
            "1e400",
            "18446744073709551616",
            "4102444800001",
            "\"\"",
            "\"a\"",
            "\"\\u0000\"",
            "\"\\ud800\"",
            "\u{e9}",
            " ",
        ]);
        prop::collection::vec(piece, 0..40).prop_map(|p| p.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_bytes_are_an_entry_or_a_reason_never_a_panic(line in prop::collection::vec(any::<u8>(), 0..300)) {
            if let Err(why) = parse(&line) {
                prop_assert!(!why.is_empty());
            }
        }

        #[test]
        fn near_valid_lines_never_panic(line in near_valid()) {
            let _ = parse(line.as_bytes());
        }

        #[test]
        fn a_valid_line_reads_back_its_fields(
            hash in "[0-9a-f]{64}",
            name in prop::option::of("[A-Za-z0-9 _-]{1,30}"),
            external_id in prop::option::of("[A-Za-z0-9_.-]{1,40}"),
            enabled in any::<Option<bool>>(),
            expires in prop::option::of(0i64..4_102_444_800_000),
            permissions in prop::collection::vec("[a-z][a-z0-9._:-]{0,20}", 0..4),
        ) {
            let mut entry = json!({"hash": hash, "permissions": permissions});
            for (field, value) in [
                ("name", name.clone().map(Value::from)),
                ("externalId", external_id.clone().map(Value::from)),
                ("enabled", enabled.map(Value::from)),
                ("expires", expires.map(Value::from)),
            ] {
                if let Some(value) = value {
                    entry[field] = value;
                }
            }
            let key = parse(entry.to_string().as_bytes()).unwrap();
            prop_assert_eq!(key.hash, hash);
            prop_assert_eq!(key.name, name);
            prop_assert_eq!(key.external_id, external_id);
            prop_assert_eq!(key.enabled, enabled.unwrap_or(true));
            prop_assert_eq!(key.expires, expires);
            prop_assert_eq!(key.permissions, permissions);
        }

        #[test]
        fn a_field_of_the_wrong_kind_is_refused_by_its_name(
            field in prop::sample::select(vec!["name", "externalId", "enabled", "expires", "roles", "credits", "meta"]),
            value in prop::sample::select(vec![json!(12.5), json!([1, 2]), json!({"x": 1}), json!("text"), json!(-3)]),
        ) {
            let mut entry = json!({"hash": "a".repeat(64)});
            entry[field] = value.clone();
            // Some values are of the field's kind (text for a name): those parse.
            if let Err(why) = parse(entry.to_string().as_bytes()) {
                prop_assert!(why.starts_with(field), "{why} (the {field} {value})");
            }
        }
    }
}
