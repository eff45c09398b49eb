//! `keygate store copy` and `keygate store verify`: whole databases copied and compared
//! (keygate-store's `copy` module), with a progress bar on a terminal.

use super::commands::StoreCmd;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use keygate_domain::{redact_in, redact_url};
use keygate_store::copy::{self, Phase, Progress, TableSummary};
use keygate_store::{Backend, PoolSettings, SqlStore};
use serde_json::{Map, Value, json};
use std::time::Instant;

pub fn run(command: StoreCmd) -> anyhow::Result<Value> {
    let (from, to) = match &command {
        StoreCmd::Copy { from, to, .. } | StoreCmd::Verify { from, to } => (from.clone(), to.clone()),
    };
    // Errors name the databases without their passwords.
    let redacted = |e: anyhow::Error| anyhow::anyhow!(redact_in(&redact_in(&format!("{e:#}"), &from), &to));
    execute(command, &from, &to).map_err(redacted)
}

fn execute(command: StoreCmd, from: &str, to: &str) -> anyhow::Result<Value> {
    let started = Instant::now();
    let source = open(from, "source", false)?;
    let bar = Bar::new();
    let out = match command {
        StoreCmd::Copy { replace, .. } => {
            // Credit spends a stopped server answered but had not folded into the rows yet,
            // replayed onto a source at this build's schema (else the copy's message).
            source.schema_is_current().map_err(|e| copy::CopyError::Schema(format!("the source: {e}")))?;
            keygate_usage::replay_credit_journal(&source).map_err(|e| anyhow::anyhow!("the source: {e}"))?;
            let target = open(to, "target", true)?;
            let report = copy::copy(&source, &target, replace, &mut |p| bar.show(p))?;
            bar.done();
            let changed: Vec<Value> = report
                .changed_after_snapshot
                .iter()
                .map(|c| json!({ "table": c.table, "rowsAtSnapshot": c.rows_at_snapshot, "rowsNow": c.rows_now }))
                .collect();
            if !changed.is_empty() {
                let tables: Vec<&str> = report.changed_after_snapshot.iter().map(|c| c.table).collect();
                eprintln!(
                    "keygate: the source was written to after the snapshot (not copied): {}",
                    tables.join(", ")
                );
            }
            json!({
                "from": redact_url(from), "to": redact_url(to), "rows": report.rows,
                "tables": tables(&report.tables), "verified": true,
                "changedAfterSnapshot": changed, "seconds": seconds(started),
            })
        }
        StoreCmd::Verify { .. } => {
            let target = open(to, "target", false)?;
            let same = copy::verify(&source, &target, &mut |p| bar.show(p))?;
            bar.done();
            json!({
                "from": redact_url(from), "to": redact_url(to), "rows": same.iter().map(|t| t.rows).sum::<u64>(),
                "tables": tables(&same), "same": true, "seconds": seconds(started),
            })
        }
    };
    Ok(out)
}

/// A database: the source as it is (at this keygate's schema, checked by the copy), the
/// target migrated (a SQLite target file is created). A SQLite source must exist.
fn open(url: &str, side: &str, migrate: bool) -> anyhow::Result<SqlStore> {
    if !migrate
        && let Ok(Backend::Sqlite(path)) = Backend::from_url(url)
        && !std::path::Path::new(&path).exists()
    {
        anyhow::bail!("the {side}: no database at {path}");
    }
    let settings = PoolSettings { max_size: 2, ..PoolSettings::default() };
    let store = if migrate { SqlStore::open(url, settings) } else { SqlStore::open_as_is(url, settings) };
    store.map_err(|e| anyhow::anyhow!("the {side}: {e}"))
}

fn tables(list: &[TableSummary]) -> Value {
    let map: Map<String, Value> = list
        .iter()
        .map(|t| (t.table.to_string(), json!({ "rows": t.rows, "checksum": t.checksum })))
        .collect();
    Value::Object(map)
}

fn seconds(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0
}

/// One bar on standard error, drawn only on a terminal: rows of the phase under way.
struct Bar(ProgressBar);

impl Bar {
    fn new() -> Self {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()).with_style(
            ProgressStyle::with_template("{msg:<28} {bar:30} {pos}/{len} rows ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Self(bar)
    }

    fn show(&self, p: Progress<'_>) {
        let phase = match p.phase {
            Phase::Copy => "copying",
            Phase::Verify => "verifying the target",
            Phase::Recheck => "reading the source",
        };
        if p.rows_total > 0 {
            self.0.set_length(p.rows_total);
        }
        self.0.set_position(p.rows_done);
        self.0.set_message(format!("{phase}: {}", p.table));
    }

    fn done(&self) {
        self.0.finish_and_clear();
    }
}
