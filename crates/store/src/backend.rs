use keygate_domain::redact_url;

/// Which database a `DATABASE_URL` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file path.
    Sqlite(String),
    /// A PostgreSQL connection URL, as given.
    Postgres(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error(
        "unsupported DATABASE_URL {0:?}: use postgres://..., postgresql://..., sqlite://PATH or a file path"
    )]
    Unsupported(String),
    #[error("DATABASE_URL is empty")]
    Empty,
    #[error("in-memory SQLite cannot be shared by a connection pool; use a file path")]
    InMemory,
    /// The URL names a backend whose cargo feature this build of `keygate-store` left out.
    #[error(
        "DATABASE_URL names {0}, which this build does not include (keygate-store's cargo feature `{0}`)"
    )]
    NotBuilt(&'static str),
}

impl Backend {
    /// `postgres://`/`postgresql://` -> PostgreSQL; `sqlite://PATH`, `sqlite:PATH` or a plain
    /// path -> SQLite; any other scheme is an error naming the accepted forms.
    pub fn from_url(url: &str) -> Result<Self, BackendError> {
        Self::parse(url)?.built(cfg!(feature = "sqlite"), cfg!(feature = "postgres"))
    }

    /// This backend if its feature is built, else [`BackendError::NotBuilt`].
    fn built(self, sqlite: bool, postgres: bool) -> Result<Self, BackendError> {
        match self {
            Backend::Sqlite(_) if !sqlite => Err(BackendError::NotBuilt("sqlite")),
            Backend::Postgres(_) if !postgres => Err(BackendError::NotBuilt("postgres")),
            built => Ok(built),
        }
    }

    fn parse(url: &str) -> Result<Self, BackendError> {
        let url = url.trim();
        if url.is_empty() {
            return Err(BackendError::Empty);
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Backend::Postgres(url.to_string()));
        }
        let path = if let Some(rest) = url.strip_prefix("sqlite://") {
            rest
        } else if let Some(rest) = url.strip_prefix("sqlite:") {
            rest
        } else if url.contains("://") {
            return Err(BackendError::Unsupported(redact_url(url)));
        } else {
            url
        };
        if path.is_empty() {
            return Err(BackendError::Empty);
        }
        if path == ":memory:" || path.contains("mode=memory") {
            return Err(BackendError::InMemory);
        }
        Ok(Backend::Sqlite(path.to_string()))
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// The location without credentials, for logs.
    pub fn display_location(&self) -> String {
        match self {
            Backend::Sqlite(path) => path.clone(),
            Backend::Postgres(url) => redact_url(url),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_backend_left_out_of_the_build_is_named() {
        let pg = Backend::parse("postgres://h/db").unwrap();
        let lite = Backend::parse("k.db").unwrap();
        assert_eq!(pg.clone().built(true, false), Err(BackendError::NotBuilt("postgres")));
        assert_eq!(lite.clone().built(false, true), Err(BackendError::NotBuilt("sqlite")));
        assert_eq!(pg.clone().built(false, true), Ok(pg));
        assert_eq!(lite.clone().built(true, false), Ok(lite));
        let msg = BackendError::NotBuilt("postgres").to_string();
        assert!(msg.contains("cargo feature `postgres`"), "{msg}");
    }

    use super::*;

    #[test]
    fn url_forms() {
        assert_eq!(Backend::from_url("sqlite://keygate.db"), Ok(Backend::Sqlite("keygate.db".into())));
        assert_eq!(Backend::from_url("sqlite:///var/lib/k.db"), Ok(Backend::Sqlite("/var/lib/k.db".into())));
        assert_eq!(Backend::from_url("./k.db"), Ok(Backend::Sqlite("./k.db".into())));
        assert_eq!(
            Backend::from_url("postgres://u:p@h/db"),
            Ok(Backend::Postgres("postgres://u:p@h/db".into()))
        );
        assert!(matches!(Backend::from_url("postgresql://h/db"), Ok(Backend::Postgres(_))));
        assert!(matches!(Backend::from_url("mysql://h/db"), Err(BackendError::Unsupported(_))));
        assert_eq!(Backend::from_url(""), Err(BackendError::Empty));
        assert_eq!(Backend::from_url("sqlite://:memory:"), Err(BackendError::InMemory));
        let msg = BackendError::Unsupported("mysql://x".into()).to_string();
        assert!(msg.contains("postgres://") && msg.contains("sqlite://"));
    }

    #[test]
    fn display_hides_credentials() {
        let b = Backend::Postgres("postgres://user:secret@db:5432/k".into());
        assert_eq!(b.display_location(), "postgres://***@db:5432/k");
    }
}
