//! keygate-analytics's integration tests, one test binary: a module per area
//! (`cargo test -p keygate-analytics --test analytics -- <area>::`).

mod analytics_flush;
mod sql;
mod sql_properties;
