//! keygate's operators: the people who run the dashboard, and how they sign in. Today an
//! operator signs in with a root key, which opens a [`sessions`] session acting with that
//! key's permissions.
//!
//! Built on `keygate-rbac`: a session's root key is authenticated, and checked still
//! current on every use, by rbac's service; the sessions' rows are rbac's store's.

pub mod sessions;

pub use sessions::{DashboardSession, SESSION_IDLE_MS, Sessions};
