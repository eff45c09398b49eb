//! Integers as JSON Schema means them (API.md and API-v2.md §1): a JSON number with no
//! fractional part is an integer however it is written (`10`, `10.0`, `1e1`); `1.5` and
//! `"10"` are 400 and change nothing. Every integer field of one endpoint per group, v1
//! and v2.
#![allow(clippy::unwrap_used)]

use keygate_tests::{Resp, T0, TestServer};
use serde_json::Value;

/// How an integer `n` may be written: plainly, with `.0`, in exponent form.
fn spellings(n: u64) -> [String; 3] {
    let digits = n.to_string();
    let exp = digits.len() - 1;
    let mantissa =
        format!("{}.{}", &digits[..1], &digits[1..]).trim_end_matches('0').trim_end_matches('.').to_string();
    [digits.clone(), format!("{digits}.0"), format!("{mantissa}e{exp}")]
}

/// POSTs `template` with `value` where its `@` is, and `ID` made `id`.
fn send(s: &TestServer, path: &str, template: &str, id: &str, value: &str) -> Resp {
    s.post_raw(path, Some(&s.root_key), template.replace("ID", id).replace('@', value))
}

/// A fresh call's answer, the parts that depend on the value sent (not ids or times).
fn essence(path: &str, r: &Resp) -> Value {
    let v = if path.starts_with("/v2/") { r.json["data"].clone() } else { r.json.clone() };
    match path {
        "/v1/ratelimits.limit" | "/v2/ratelimit.limit" => {
            serde_json::json!([v["success"], v["limit"], v["remaining"], v["reset"]])
        }
        "/v2/permissions.listPermissions" => serde_json::json!(r.json["data"].as_array().unwrap().len()),
        _ => Value::Null,
    }
}

#[test]
fn integral_numbers_are_integers_and_fractions_or_strings_are_400_on_v1_and_v2() {
    let s = TestServer::start();
    for p in ["p.a", "p.b", "p.c"] {
        s.v2("permissions.createPermission", &serde_json::json!({"name": p, "slug": p})).data();
    }
    let expires = T0 + 3_600_000;
    let fields = [
        (
            "/v1/ratelimits.limit",
            r#"{"namespace":"n1","identifier":"ID","limit":@,"duration":60000}"#,
            10,
            "limit",
        ),
        (
            "/v1/ratelimits.limit",
            r#"{"namespace":"n1","identifier":"ID","limit":10,"duration":@}"#,
            60_000,
            "duration",
        ),
        (
            "/v1/ratelimits.limit",
            r#"{"namespace":"n1","identifier":"ID","limit":10,"duration":60000,"cost":@}"#,
            3,
            "cost",
        ),
        (
            "/v1/ratelimits.setOverride",
            r#"{"namespaceName":"n1","identifier":"ID","limit":@,"duration":60000}"#,
            10,
            "limit",
        ),
        (
            "/v1/ratelimits.setOverride",
            r#"{"namespaceName":"n1","identifier":"ID","limit":10,"duration":@}"#,
            60_000,
            "duration",
        ),
        ("/v1/keys.createKey", r#"{"name":"ID","expires":@}"#, expires, "expires"),
        (
            "/v2/ratelimit.limit",
            r#"{"namespace":"n2","identifier":"ID","limit":@,"duration":60000}"#,
            10,
            "limit",
        ),
        (
            "/v2/ratelimit.limit",
            r#"{"namespace":"n2","identifier":"ID","limit":10,"duration":@}"#,
            60_000,
            "duration",
        ),
        (
            "/v2/ratelimit.limit",
            r#"{"namespace":"n2","identifier":"ID","limit":10,"duration":60000,"cost":@}"#,
            3,
            "cost",
        ),
        (
            "/v2/ratelimit.setOverride",
            r#"{"namespace":"n2","identifier":"ID","limit":@,"duration":60000}"#,
            10,
            "limit",
        ),
        (
            "/v2/ratelimit.setOverride",
            r#"{"namespace":"n2","identifier":"ID","limit":10,"duration":@}"#,
            60_000,
            "duration",
        ),
        ("/v2/ratelimit.listOverrides", r#"{"namespace":"n2","limit":@,"cursor":null,"x":"ID"}"#, 2, "limit"),
        ("/v2/keys.createKey", r#"{"apiId":"api_int","name":"ID","byteLength":@}"#, 24, "byteLength"),
        ("/v2/keys.createKey", r#"{"apiId":"api_int","name":"ID","expires":@}"#, expires, "expires"),
        ("/v2/permissions.listPermissions", r#"{"limit":@,"x":"ID"}"#, 2, "limit"),
    ];
    // Unknown fields (`x`) are ignored; they keep each call's identifier apart.
    for (n, (path, template, value, name)) in fields.into_iter().enumerate() {
        let mut answers = Vec::new();
        for (i, spelled) in spellings(value).iter().enumerate() {
            let r = send(&s, path, template, &format!("f{n}s{i}"), spelled);
            assert_eq!(r.status, 200, "{path} {name}={spelled}: {}", r.text);
            answers.push(essence(path, &r));
        }
        assert!(
            answers.iter().all(|a| a == &answers[0]),
            "{path} {name}: the same answer each way: {answers:?}"
        );

        for bad in ["1.5".to_string(), format!("{value}.5"), format!("\"{value}\"")] {
            let r = send(&s, path, template, &format!("f{n}bad"), &bad);
            if path.starts_with("/v2/") {
                let detail = r.assert_problem(400, "unkey/application/invalid_input");
                let location = r.json["error"]["errors"][0]["location"].as_str().unwrap_or_default();
                assert_eq!(location, format!("body.{name}"), "{path} {name}={bad}: {detail}");
            } else {
                let msg = r.assert_error(400, "BAD_REQUEST");
                assert!(msg.starts_with(&format!("{name}: ")), "{path} {name}={bad}: {msg}");
            }
        }
    }
    // A refused call changed nothing: no key, override or budget carries a `bad` name.
    assert_eq!(s.count("keys", "name LIKE '%bad'"), 0);
    assert_eq!(s.count("ratelimit_overrides", "identifier LIKE '%bad'"), 0);
}

#[test]
fn the_spellings_are_what_they_claim() {
    assert_eq!(spellings(10), ["10", "10.0", "1e1"]);
    assert_eq!(spellings(60_000), ["60000", "60000.0", "6e4"]);
    assert_eq!(spellings(24), ["24", "24.0", "2.4e1"]);
}
