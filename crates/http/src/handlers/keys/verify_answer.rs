//! The answer of v2's `keys.verifyKey`: [`VerifyAnswer`], its schema and serde form, and
//! [`VerifyAnswer::write_json`], which writes the same bytes directly (a test checks the
//! two agree). serde_json escapes every field's name as it writes it, and field by field
//! the answer took about a tenth of a verification's instructions (callgrind: ~4,900 of
//! 46,000 for a plain key, a further ~1,900 for one auto-applied limit's entry).

use crate::handlers::v2::identities::IdentityObject;
use keygate_rbac::{LimitOutcome, Name, Verification, VerifyCode};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// The outcome of a verification: `valid` and `code`, and the key unless NOT_FOUND.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = VerifyKeyResult)]
pub(crate) struct VerifyAnswer<'a> {
    valid: bool,
    #[schema(schema_with = verify_codes)]
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    key_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, nullable = false)]
    meta: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    expires: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<String>>, nullable = false)]
    permissions: Option<&'a [Name]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<String>>, nullable = false)]
    roles: Option<&'a [Name]>,
    /// The key's credits left after this verification, when it has credits.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    credits: Option<u64>,
    /// Every rate limit that applied, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<LimitResult>>, nullable = false)]
    ratelimits: Option<LimitResults<'a>>,
    /// The identity the key is linked to.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    identity: Option<IdentityObject>,
}

impl<'a> From<&'a Verification> for VerifyAnswer<'a> {
    /// The answer to `v`, borrowing from it (nothing of the key is copied but its
    /// identity).
    fn from(v: &'a Verification) -> Self {
        let (valid, code) = (v.valid(), v.code.as_str());
        match v.key().filter(|_| v.code != VerifyCode::NotFound) {
            // NOT_FOUND says nothing else (API-v2.md §2.3).
            None => Self::bare(valid, code),
            Some(k) => Self {
                valid,
                code,
                meta: k.meta().and_then(|m| serde_json::from_str(m).ok()),
                key_id: Some(k.id()),
                enabled: Some(k.enabled()),
                name: k.name(),
                expires: k.expires(),
                permissions: Some(v.permissions()),
                roles: Some(v.roles()),
                credits: v.credits,
                ratelimits: (!v.ratelimits.is_empty()).then_some(LimitResults(&v.ratelimits)),
                identity: v.identity().cloned().map(IdentityObject::from),
            },
        }
    }
}

impl VerifyAnswer<'_> {
    /// `valid` and `code` alone (NOT_FOUND's answer).
    fn bare(valid: bool, code: &'static str) -> Self {
        Self {
            valid,
            code,
            key_id: None,
            enabled: None,
            name: None,
            meta: None,
            expires: None,
            permissions: None,
            roles: None,
            credits: None,
            ratelimits: None,
            identity: None,
        }
    }

    /// The answer as its serde form writes it (the fields in their order, those that are
    /// `None` left out), written into `out` directly: the field names as they are, the
    /// strings and nested values through serde_json, the numbers through itoa.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let mut digits = itoa::Buffer::new();
        out.extend_from_slice(if self.valid {
            br#"{"valid":true,"code":"#
        } else {
            br#"{"valid":false,"code":"#
        });
        serde_json::to_writer(&mut *out, self.code)?;
        if let Some(id) = self.key_id {
            out.extend_from_slice(br#","keyId":"#);
            serde_json::to_writer(&mut *out, id)?;
        }
        if let Some(enabled) = self.enabled {
            out.extend_from_slice(if enabled { br#","enabled":true"# } else { br#","enabled":false"# });
        }
        if let Some(name) = self.name {
            out.extend_from_slice(br#","name":"#);
            serde_json::to_writer(&mut *out, name)?;
        }
        if let Some(meta) = &self.meta {
            out.extend_from_slice(br#","meta":"#);
            serde_json::to_writer(&mut *out, meta)?;
        }
        if let Some(expires) = self.expires {
            out.extend_from_slice(br#","expires":"#);
            out.extend_from_slice(digits.format(expires).as_bytes());
        }
        if let Some(permissions) = self.permissions {
            out.extend_from_slice(br#","permissions":"#);
            serde_json::to_writer(&mut *out, permissions)?;
        }
        if let Some(roles) = self.roles {
            out.extend_from_slice(br#","roles":"#);
            serde_json::to_writer(&mut *out, roles)?;
        }
        if let Some(credits) = self.credits {
            out.extend_from_slice(br#","credits":"#);
            out.extend_from_slice(digits.format(credits).as_bytes());
        }
        if let Some(LimitResults(outcomes)) = &self.ratelimits {
            out.extend_from_slice(br#","ratelimits":["#);
            for (i, o) in outcomes.iter().enumerate() {
                out.extend_from_slice(if i == 0 { br#"{"id":"# } else { br#",{"id":"# });
                serde_json::to_writer(&mut *out, &*o.id)?;
                out.extend_from_slice(br#","name":"#);
                serde_json::to_writer(&mut *out, &*o.name)?;
                for (field, n) in [
                    (&br#","limit":"#[..], o.limit),
                    (br#","duration":"#, o.duration),
                    (br#","reset":"#, o.reset),
                    (br#","remaining":"#, o.remaining),
                ] {
                    out.extend_from_slice(field);
                    out.extend_from_slice(digits.format(n).as_bytes());
                }
                out.extend_from_slice(if o.exceeded {
                    br#","exceeded":true"#
                } else {
                    br#","exceeded":false"#
                });
                out.extend_from_slice(if o.auto_apply {
                    br#","autoApply":true}"#
                } else {
                    br#","autoApply":false}"#
                });
            }
            out.push(b']');
        }
        if let Some(identity) = &self.identity {
            out.extend_from_slice(br#","identity":"#);
            serde_json::to_writer(&mut *out, identity)?;
        }
        out.push(b'}');
        Ok(())
    }
}

/// How one rate limit fared in a verification.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = VerifyKeyRatelimitData)]
pub(crate) struct LimitResult<'a> {
    id: &'a str,
    name: &'a str,
    limit: u64,
    duration: u64,
    /// Unix ms at which the window ends.
    reset: u64,
    remaining: u64,
    exceeded: bool,
    auto_apply: bool,
}

/// The outcomes of a verification's limits, as [`LimitResult`]s.
#[derive(Debug)]
pub(crate) struct LimitResults<'a>(&'a [LimitOutcome]);

impl Serialize for LimitResults<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(LimitResult::from))
    }
}

impl<'a> From<&'a LimitOutcome> for LimitResult<'a> {
    fn from(o: &'a LimitOutcome) -> Self {
        Self {
            id: &o.id,
            name: &o.name,
            limit: o.limit,
            duration: o.duration,
            reset: o.reset,
            remaining: o.remaining,
            exceeded: o.exceeded,
            auto_apply: o.auto_apply,
        }
    }
}

/// `code` of a verification: one of [`VerifyCode::ALL`](keygate_rbac::VerifyCode::ALL).
pub(crate) fn verify_codes() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(keygate_rbac::VerifyCode::ALL.iter().map(|c| c.as_str())))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn outcome(id: &str, name: &str, n: u64, exceeded: bool, auto_apply: bool) -> LimitOutcome {
        LimitOutcome {
            id: Arc::from(id),
            name: Arc::from(name),
            limit: n,
            duration: n.saturating_mul(7),
            reset: u64::MAX - n,
            remaining: n / 3,
            exceeded,
            auto_apply,
            identity: !auto_apply,
        }
    }

    #[test]
    fn written_directly_as_serde_writes_it() {
        let none: Vec<LimitOutcome> = Vec::new();
        let one = vec![outcome("rl_3ZfVhpSSRW2ctYrnWC3SDbLC", "calls", 1_000_000, false, true)];
        let several = vec![
            outcome("adhoc:a \"quoted\" \\ name", "a \"quoted\" \\ name", 0, true, false),
            outcome("rl_\u{1}\u{1f}\n\t", "ünïcødé ✓ 🚀 \u{7f}", u64::MAX, false, false),
            outcome("", "", 1, true, true),
        ];
        let names = keygate_rbac::Interner::default();
        let (perms, roles) =
            (vec![names.name("documents.read"), names.name("a\"b")], vec![names.name("admin")]);
        let identity = || {
            IdentityObject::from(keygate_rbac::IdentityView {
                identity: keygate_rbac::Identity {
                    id: "id_1".into(),
                    workspace_id: "ws_1".into(),
                    external_id: "acme \"inc\"".into(),
                    meta: Some(r#"{"plan":"pro","seats":3,"nested":{"ok":[true,null,1.5]}}"#.into()),
                    allowed_ips: None,
                    created_at: 1,
                    updated_at: 2,
                },
                ratelimits: vec![keygate_rbac::RateLimitConfig {
                    id: "rl_1".into(),
                    name: "per \"second\"".into(),
                    limit: 10,
                    duration: 1_000,
                    auto_apply: true,
                    algorithm: Default::default(),
                }],
            })
        };
        let full = |ratelimits: &'static [LimitOutcome]| VerifyAnswer {
            valid: true,
            code: VerifyCode::Valid.as_str(),
            key_id: Some("key_3ZfVhpSSRW2ctYrnWC3SDbLC"),
            enabled: Some(true),
            name: Some("the \"prod\" key\n"),
            meta: Some(serde_json::json!({ "user": "ünï", "n": -12, "list": ["x", {}] })),
            expires: Some(-1),
            permissions: Some(&[]),
            roles: Some(&[]),
            credits: Some(u64::MAX),
            ratelimits: Some(LimitResults(ratelimits)),
            identity: Some(identity()),
        };
        let leak = |v: Vec<LimitOutcome>| -> &'static [LimitOutcome] { Vec::leak(v) };
        let mut answers = vec![
            VerifyAnswer::bare(false, VerifyCode::NotFound.as_str()),
            VerifyAnswer::bare(false, VerifyCode::Disabled.as_str()),
            full(leak(none)),
            full(leak(one)),
            full(leak(several)),
            VerifyAnswer {
                enabled: Some(false),
                expires: Some(1_796_007_720_000),
                ..VerifyAnswer::bare(false, "EXPIRED")
            },
            VerifyAnswer {
                credits: Some(0),
                key_id: Some(""),
                ..VerifyAnswer::bare(false, VerifyCode::UsageExceeded.as_str())
            },
        ];
        let with_lists = VerifyAnswer {
            permissions: Some(&perms),
            roles: Some(&roles),
            ..VerifyAnswer::bare(true, VerifyCode::Valid.as_str())
        };
        answers.push(VerifyAnswer { identity: Some(identity()), ..VerifyAnswer::bare(true, "VALID") });
        let check = |a: &VerifyAnswer<'_>| {
            let mut written = Vec::new();
            a.write_json(&mut written).unwrap();
            assert_eq!(String::from_utf8(written).unwrap(), serde_json::to_string(a).unwrap());
        };
        answers.iter().for_each(check);
        check(&with_lists);
    }
}
