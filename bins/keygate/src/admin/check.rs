//! `keygate keys check FILE...`: checksummed keys checked offline (API-v2.md §24), one per
//! line, for scanners and CI pipelines. Only counts and line numbers are printed: a key's
//! text never is.

use keygate_domain::checksum::{Checksum, check};
use serde_json::json;
use std::io::BufRead;

/// Checks every non-blank line of `files` (`-`: standard input): the counts when all are
/// valid; else an error naming the lines that are not.
pub(super) fn run(files: &[String]) -> anyhow::Result<serde_json::Value> {
    let (mut checked, mut bad) = (0u64, Vec::new());
    for file in files {
        let reader: Box<dyn BufRead> = match file.as_str() {
            "-" => Box::new(std::io::stdin().lock()),
            path => Box::new(std::io::BufReader::new(
                std::fs::File::open(path).map_err(|e| anyhow::anyhow!("{path}: {e}"))?,
            )),
        };
        for (n, line) in reader.lines().enumerate() {
            let line = line.map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
            let token = line.trim();
            if token.is_empty() {
                continue;
            }
            checked += 1;
            match check(token) {
                Checksum::Valid => {}
                Checksum::Invalid => bad.push(format!("{file}:{} (checksum does not match)", n + 1)),
                Checksum::NotOfTheShape => bad.push(format!("{file}:{} (not a checksummed key)", n + 1)),
            }
        }
    }
    if !bad.is_empty() {
        anyhow::bail!("{} of {checked} keys are not valid: {}", bad.len(), bad.join(", "));
    }
    Ok(json!({ "checked": checked, "valid": checked }))
}
