//! The RLS configuration's reading and checks.

use super::*;

fn domain(yaml: &str) -> Domain {
    let mut c = RlsConfig::default();
    c.add("test.yaml", yaml).unwrap();
    c.domains.into_values().next().unwrap()
}

/// The rule's numbers and the budget's values for `entries`.
fn matched(d: &Domain, entries: &[(&str, &str)]) -> Option<(Allowance, Option<String>, Vec<String>)> {
    d.rule(entries)
        .map(|m| (m.rule.allowance, m.rule.name.clone(), m.values.iter().map(|v| v.to_string()).collect()))
}

fn per(requests: u64, unit: Unit) -> Allowance {
    Allowance::Per { requests, unit }
}

#[test]
fn nested_descriptors_match_as_deep_as_the_request_has_entries() {
    let d = domain(
        "domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: { unit: day, requests_per_unit: 5 }
  - key: to_number
    rate_limit: { unit: day, requests_per_unit: 100 }
",
    );
    let m = matched(&d, &[("message_type", "marketing"), ("to_number", "2061111111")]).unwrap();
    assert_eq!((m.0, m.2), (per(5, Unit::Day), vec!["marketing".to_string(), "2061111111".into()]));
    assert_eq!(matched(&d, &[("to_number", "2061111111")]).unwrap().0, per(100, Unit::Day));
    // A level with no rate limit, or a request deeper or shallower than the rules: none.
    assert!(matched(&d, &[("message_type", "marketing")]).is_none());
    assert!(matched(&d, &[("message_type", "transactional"), ("to_number", "1")]).is_none());
    assert!(matched(&d, &[("to_number", "1"), ("x", "y")]).is_none());
}

#[test]
fn key_and_value_match_before_key_alone_and_zero_and_unlimited_are_rules() {
    let d = domain(
        "domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 10 }
  - key: remote_address
    value: 50.0.0.5
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: ldap
    rate_limit: { unlimited: true }
",
    );
    assert_eq!(matched(&d, &[("remote_address", "50.0.0.1")]).unwrap().0, per(10, Unit::Second));
    assert_eq!(matched(&d, &[("remote_address", "50.0.0.5")]).unwrap().0, per(0, Unit::Second));
    assert_eq!(matched(&d, &[("ldap", "x")]).unwrap().0, Allowance::Unlimited);
}

#[test]
fn wildcards_match_any_run_and_a_shared_one_names_its_budget_by_the_pattern() {
    let d = domain(
        "domain: w
descriptors:
  - key: path
    value: /api/*/action
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: file
    value: files/*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: key1
    value: value*
    value_to_metric: true
    rate_limit: { unit: minute, requests_per_unit: 7 }
",
    );
    assert!(matched(&d, &[("path", "/api/123/action")]).is_some());
    assert!(matched(&d, &[("path", "/api/123/other")]).is_none());
    assert!(matched(&d, &[("path", "/api/action")]).is_none(), "the * sits between two slashes");
    assert_eq!(matched(&d, &[("file", "files/a.pdf")]).unwrap().2, ["files/*"]);
    assert_eq!(matched(&d, &[("key1", "valueXYZ")]).unwrap().2, ["valueXYZ"], "each value its own budget");
    let metric = |e: &[(&str, &str)]| d.rule(e).unwrap().metric;
    assert_eq!(metric(&[("key1", "valueXYZ")]), "key1_valueXYZ", "value_to_metric");
    assert_eq!(metric(&[("path", "/api/1/action")]), "path_/api/*/action", "the pattern");
    assert_eq!(metric(&[("file", "files/a.pdf")]), "file_files/*", "shared: the pattern");
    assert!(glob("a*b*c", "axxbyyc") && glob("*", "") && !glob("a*b", "ab c") && glob("a**", "a"));
}

#[test]
fn replaces_names_and_the_rules_own_settings_are_kept() {
    let d = domain(
        "domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: { name: specific_limit, requests_per_unit: 5, unit: second }
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        shadow_mode: true
        detailed_metric: true
        rate_limit:
          replaces: [{ name: specific_limit }]
          requests_per_unit: 10
          unit: second
",
    );
    let m = d.rule(&[("key_2", "value_2"), ("user", "bkthomps")]).unwrap();
    assert_eq!(m.metric, "key_2_value_2.user_bkthomps");
    assert_eq!(
        (m.rule.replaces.as_slice(), m.rule.shadow, m.rule.detailed_metric),
        (&["specific_limit".to_string()][..], true, true)
    );
    assert_eq!(
        matched(&d, &[("key_1", "value_1"), ("user", "bkthomps")]).unwrap().1.as_deref(),
        Some("specific_limit")
    );
}

#[test]
fn bad_configurations_are_refused_with_the_file_and_line() {
    let refused = |yaml: &str| RlsConfig::default().add("f.yaml", yaml).unwrap_err().to_string();
    let e = refused("domain: d\ndescriptors:\n  - key: a\n    valu: b\n");
    assert!(e.starts_with("f.yaml: ") && e.contains("valu") && e.contains("line 4"), "{e}");
    assert!(refused("domain: d\nrate_limits: []\n").contains("rate_limits"));
    assert!(refused("domain: ''\n").contains("domain"));
    assert!(
        refused(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n"
        )
        .contains("fortnight")
    );
    assert!(
        refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second }\n")
            .contains("requests_per_unit")
    );
    assert!(
        refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unlimited: true, unit: second }\n")
            .contains("unlimited")
    );
    assert!(refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: second, requests_per_unit: 1, replaces: [{name: x}] }\n").contains("\"x\""));
    assert!(refused("domain: d\ndescriptors:\n  - key: a\n  - key: a\n").contains("twice"));
    assert!(refused("domain: d\ndescriptors:\n  - key: a\n    share_threshold: true\n").contains("wildcard"));
    assert!(refused("domain: d\ndescriptors: [").contains("f.yaml"));
    assert!(refused("- 1\n- 2\n").contains("f.yaml"));
    let circle = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { name: x, unit: second, requests_per_unit: 1, replaces: [{name: y}] }\n  - key: b\n    rate_limit: { name: y, unit: second, requests_per_unit: 1, replaces: [{name: x}] }\n";
    assert!(refused(circle).contains("circle"), "{}", refused(circle));
    let own = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { name: x, unit: second, requests_per_unit: 1, replaces: [{name: x}] }\n";
    assert!(refused(own).contains("circle"));
    let mut c = RlsConfig::default();
    c.add("a.yaml", "domain: d\n").unwrap();
    assert!(c.add("b.yaml", "domain: d\n").unwrap_err().to_string().contains("twice"));
}
/// 30 layers of two rules, each replacing both of the next layer's: 2^30 ways down,
/// each name followed once (an unmemoized walk would not finish); a last rule that
/// replaces the first makes a circle, found.
#[test]
fn layers_of_replaces_are_checked_in_linear_time() {
    let layers = 30;
    let file = |circle: bool| {
        let mut text = String::from("domain: d\ndescriptors:\n");
        for l in 0..layers {
            for i in 0..2 {
                let mut next: Vec<String> = if l + 1 < layers {
                    (0..2).map(|j| format!("{{name: r{}_{j}}}", l + 1)).collect()
                } else {
                    vec![]
                };
                if circle && l + 1 == layers && i == 1 {
                    next.push("{name: r0_0}".into());
                }
                text += &format!(
                    "  - key: k{l}_{i}\n    rate_limit: {{ name: r{l}_{i}, unit: second, requests_per_unit: 1, replaces: [{}] }}\n",
                    next.join(", ")
                );
            }
        }
        text
    };
    let mut c = RlsConfig::default();
    c.add("layers.yaml", &file(false)).unwrap();
    let e = RlsConfig::default().add("circle.yaml", &file(true)).unwrap_err().to_string();
    assert!(e.contains("circle"), "{e}");
}
