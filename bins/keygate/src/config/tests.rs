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

#[test]
fn usage_export_tokens_stay_hidden_and_bad_settings_are_named() {
    let cli = Cli::parse_from([
        "keygate",
        "--usage-export-cloudevents-url",
        "https://openmeter.example/api/v1/events",
        "--usage-export-cloudevents-token",
        "OMSECRET_token",
        "--usage-export-stripe-key",
        "sk_live_STRIPESECRET",
        "--usage-export-stripe-event-name",
        "api_credits",
    ]);
    let config = cli.serve.clone().into_config(&cli.database_url);
    let settings = config.usage_export.clone().expect("valid").expect("configured");
    assert_eq!(settings.period_ms, 60_000);
    assert_eq!(
        settings.stripe.as_ref().map(|s| s.url.as_str()),
        Some(keygate_metering::settings::STRIPE_METER_EVENTS_URL)
    );
    for shown in [format!("{cli:?}"), format!("{config:?}"), format!("{settings:?}")] {
        for secret in ["OMSECRET", "STRIPESECRET"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
    let off = Cli::parse_from(["keygate"]).serve.into_config("sqlite://x.db");
    assert!(matches!(off.usage_export, Ok(None)));
    let bad = Cli::parse_from([
        "keygate",
        "--usage-export-cloudevents-url",
        "https://openmeter.example/api/v1/events",
        "--usage-export-period",
        "90",
    ]);
    let e = bad.serve.into_config("sqlite://x.db").usage_export.unwrap_err();
    assert!(e.contains("usage_export_period"), "{e}");
    // A Stripe key without the meter's event name is refused by the parser.
    assert!(Cli::try_parse_args_from(["keygate", "--usage-export-stripe-key", "sk_x"]).is_err());
}

#[test]
fn the_usage_export_reads_from_the_config_file() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("keygate.toml");
    let text = "usage_export_cloudevents_url = \"https://openmeter.example/api/v1/events\"\n\
                usage_export_cloudevents_token = \"FILESECRET_token\"\n\
                usage_export_period = 300\n\
                usage_export_workspace = \"ws_billing\"\n";
    std::fs::write(&path, text).expect("the file written");
    let path = path.to_str().expect("a UTF-8 path").to_string();
    let cli = Cli::try_parse_args_from(["keygate", "--config", &path]).expect("read");
    let config = cli.serve.clone().into_config(&cli.database_url);
    let settings = config.usage_export.clone().expect("valid").expect("configured");
    assert_eq!(settings.period_ms, 300_000);
    assert_eq!(settings.workspace_id.as_deref(), Some("ws_billing"));
    let sink = settings.cloudevents.as_ref().expect("the CloudEvents sink");
    assert_eq!(sink.token.as_ref().map(|t| t.expose()), Some("FILESECRET_token"));
    assert!(!format!("{cli:?}{config:?}{settings:?}").contains("FILESECRET"));
}
