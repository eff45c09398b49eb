//! The admin subcommands' arguments (`keygate <group> <command> ...`), apart from the
//! server's settings in `config`.

use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum AuditCmd {
    /// A workspace's audit events, newest first, one JSON object per line.
    List {
        /// The workspace, by id or name.
        #[arg(long)]
        workspace: String,
        /// Only this event type (`key.create`, `role.attach_permission`, ...).
        #[arg(long)]
        event: Option<String>,
        /// Only events of this actor (a root key id).
        #[arg(long)]
        actor: Option<String>,
        /// Only events about this resource id.
        #[arg(long)]
        resource_id: Option<String>,
        /// From this time (Unix ms, inclusive).
        #[arg(long)]
        since: Option<i64>,
        /// Until this time (Unix ms, exclusive).
        #[arg(long)]
        until: Option<i64>,
        /// At most this many events (all by default).
        #[arg(long)]
        limit: Option<usize>,
    },
}

#[derive(Debug, Subcommand)]
pub enum WorkspacesCmd {
    /// Create a workspace (the only command that creates a missing SQLite database).
    Create {
        /// The workspace's name (unique).
        #[arg(long)]
        name: String,
    },
    /// List the workspaces.
    List,
}

#[derive(Debug, Subcommand)]
pub enum RootKeysCmd {
    /// Create a root key (printed once).
    Create {
        /// The workspace, by id or name.
        #[arg(long)]
        workspace: String,
        /// A permission the root key holds; repeat for several (zero allowed).
        #[arg(long = "permission")]
        permissions: Vec<String>,
    },
    /// List the root keys of a workspace (never their secrets).
    List {
        /// The workspace, by id or name.
        #[arg(long)]
        workspace: String,
    },
    /// Revoke a root key.
    Revoke {
        /// The root key's id (rk_...).
        #[arg(long)]
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCmd {
    /// Create a key (printed once).
    Create {
        /// The workspace, by id or name.
        #[arg(long)]
        workspace: String,
        /// The key's name.
        #[arg(long)]
        name: Option<String>,
    },
    /// List the keys of a workspace (never their secrets).
    List {
        /// The workspace, by id or name.
        #[arg(long)]
        workspace: String,
    },
    /// Delete a key for good, with its links to permissions and roles.
    Delete {
        /// The key's id (key_...).
        #[arg(long)]
        id: String,
    },
    /// Check checksummed keys offline (API-v2.md §24), one per line of each FILE (`-`:
    /// standard input), blank lines aside: exits 0 when every one has a valid checksum,
    /// else 1 naming the lines (never their contents). Needs no database.
    Check {
        /// Files of keys, one per line; `-` for standard input.
        #[arg(required = true)]
        files: Vec<String>,
    },
    /// Import keys issued elsewhere, by their hashes (`keys.migrateKeys`, API-v2.md §15):
    /// a file of JSON lines, one entry each, 1,000 per transaction. Re-running completes an
    /// interrupted import: what is there already is reported as failed, nothing doubles.
    Import(ImportArgs),
}

#[derive(Debug, Subcommand)]
pub enum StoreCmd {
    /// Copy everything keygate stores from one database to another (SQLite to PostgreSQL
    /// and back), from one consistent snapshot of the source, then compare every table's
    /// row count and checksum (docs/operations.md, *Moving to PostgreSQL*).
    Copy {
        /// The source database (`sqlite://...` or `postgres://...`); a server may keep
        /// serving on it.
        #[arg(long)]
        from: String,
        /// The target database: migrated first, and refused when it holds rows.
        #[arg(long)]
        to: String,
        /// Empty a target that holds rows first (its data is lost).
        #[arg(long)]
        replace: bool,
    },
    /// Compare two databases table by table (row counts and checksums): exit 0 when they
    /// hold the same rows.
    Verify {
        /// One database.
        #[arg(long)]
        from: String,
        /// The other.
        #[arg(long)]
        to: String,
    },
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The API the keys go into (it must exist).
    #[arg(long)]
    pub api: String,
    /// How the hashes were computed: `sha256_hex`, `sha256_base64`, or a migration id
    /// `--migrations` maps to one.
    #[arg(long)]
    pub migration: String,
    /// Migration ids and their schemes, `ID=SCHEME` (the server's setting).
    #[arg(long = "migrations", env = "KEYGATE_MIGRATIONS", value_delimiter = ',')]
    pub migrations: Vec<String>,
    /// The JSON-lines file (`-`: standard input).
    pub file: String,
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The backup file (with `--every`: the directory the backups go to).
    #[arg(long)]
    pub to: String,
    /// Take a backup every this long (`30m`, `1h`, `1d`), until stopped.
    #[arg(long, value_parser = duration)]
    pub every: Option<std::time::Duration>,
    /// With `--every`: how many backups to keep (the oldest go).
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..))]
    pub keep: u32,
}

/// `30s`, `15m`, `1h`, `1d`: a positive duration.
fn duration(s: &str) -> Result<std::time::Duration, String> {
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(digits);
    let bad = || format!("{s:?}: a number then s, m, h or d");
    let n: u64 = n.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    match n.checked_mul(secs) {
        Some(0) | None => Err(format!("{s:?}: must be positive")),
        Some(t) => Ok(std::time::Duration::from_secs(t)),
    }
}

#[derive(Debug, Subcommand)]
pub enum EncryptionCmd {
    /// Seal every recoverable key again under the keyring's first key, while the server
    /// serves (resumable: run it again after a stop). Progress on stderr, then a summary.
    Rotate {
        /// The keyring, as the server's (`id:base64,...`, the new key first).
        #[arg(long, env = "KEYGATE_ENCRYPTION_KEYS", hide_env_values = true)]
        encryption_keys: String,
        /// Keys sealed again per transaction.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        batch: u32,
    },
    /// Print a new random keyring entry `<id>:<base64 of 32 bytes>` to put first in
    /// `KEYGATE_ENCRYPTION_KEYS`.
    NewKey {
        /// The new key's id (1 to 64 of A-Z a-z 0-9 _ - .).
        #[arg(long)]
        id: String,
    },
}
