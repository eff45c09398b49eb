//! `keygate backup --to FILE [--every 1h --keep 24]`: online backups of a SQLite database
//! while the server serves (`SqlStore::backup_to`). One backup prints one JSON line; with
//! `--every`, the backups go to a directory as `keygate-<UTC time>.db`, the oldest beyond
//! `--keep` removed, until the process is stopped.

use super::commands::BackupArgs;
use keygate_store::SqlStore;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Runs the backup command: one backup (its summary), or a schedule that ends only with
/// an error.
pub(super) fn run(store: &SqlStore, args: &BackupArgs) -> anyhow::Result<Value> {
    let Some(every) = args.every else { return once(store, Path::new(&args.to)) };
    let dir = PathBuf::from(&args.to);
    std::fs::create_dir_all(&dir)?;
    loop {
        let started = Instant::now();
        let name = format!("keygate-{}.db", jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ"));
        let summary = once(store, &dir.join(name))?;
        println!("{summary}");
        for old in expired(&dir, args.keep as usize)? {
            std::fs::remove_file(&old)?;
        }
        std::thread::sleep(every.saturating_sub(started.elapsed()));
    }
}

fn once(store: &SqlStore, path: &Path) -> anyhow::Result<Value> {
    let started = Instant::now();
    // Credit spends a stopped server answered but had not folded into the rows yet (a
    // running one folds them every 200 ms).
    keygate_usage::replay_credit_journal(store).map_err(anyhow::Error::msg)?;
    let backup = store.backup_to(path)?;
    Ok(json!({
        "backup": backup.path.display().to_string(),
        "bytes": backup.bytes,
        "seconds": started.elapsed().as_secs_f64(),
    }))
}

/// The scheduled backups in `dir` beyond the newest `keep` (their names sort by time).
fn expired(dir: &Path, keep: usize) -> std::io::Result<Vec<PathBuf>> {
    let mut backups: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("keygate-") && n.ends_with(".db"))
        })
        .collect();
    backups.sort();
    let excess = backups.len().saturating_sub(keep);
    backups.truncate(excess);
    Ok(backups)
}
