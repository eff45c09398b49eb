//! One connection to either backend: the type the pool hands out and the transactions
//! run on (its own module, so that `pool` and `tx` both depend on it and not on each other).

#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
compile_error!("keygate-store needs a database backend: enable the feature `sqlite` or `postgres`");

/// One connection to either backend (those of the enabled features).
#[derive(diesel::MultiConnection)]
pub enum DbConn {
    #[cfg(feature = "postgres")]
    Pg(diesel::PgConnection),
    #[cfg(feature = "sqlite")]
    Sqlite(diesel::SqliteConnection),
}

impl std::fmt::Debug for DbConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            #[cfg(feature = "postgres")]
            DbConn::Pg(_) => "DbConn::Pg",
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(_) => "DbConn::Sqlite",
        })
    }
}
