//! The settings' own checks.

use super::*;

#[test]
fn debug_output_shows_no_secret() {
    let cli = Cli::parse_from([
        "keygate",
        "--database-url",
        "postgres://u:DBSECRET@db/k",
        "--redis-url",
        "redis://:RDSECRET@cache:6379",
        "--root-key",
        "ROOTSECRET_0123456789abcdef",
    ]);
    let config = cli.serve.clone().into_config(&cli.database_url);
    for shown in [format!("{cli:?}"), format!("{config:?}")] {
        for secret in ["DBSECRET", "RDSECRET", "ROOTSECRET"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("***@"), "{shown}");
    }
}

#[test]
fn a_dashboard_base_is_a_plain_path() {
    for ok in ["/dashboard", "/admin/keygate", "/a-b_c.d~e"] {
        assert_eq!(dashboard_base(ok).as_deref(), Ok(ok));
    }
    for bad in ["", "/", "dashboard", "/admin/", "/x;Path=/", "/a b", "/a\"b", "/é"] {
        assert!(dashboard_base(bad).is_err(), "{bad:?}");
    }
}
