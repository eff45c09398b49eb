//! One connection to either backend: the type the pool hands out and the transactions
//! run on (its own module, so that `pool` and `tx` both depend on it and not on each other).

use diesel::{PgConnection, SqliteConnection};

/// One connection to either backend.
#[derive(diesel::MultiConnection)]
pub enum DbConn {
    Pg(PgConnection),
    Sqlite(SqliteConnection),
}

impl std::fmt::Debug for DbConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DbConn::Pg(_) => "DbConn::Pg",
            DbConn::Sqlite(_) => "DbConn::Sqlite",
        })
    }
}
