//! A report of GitHub's secret scanning: `[{token, type, url, source}]`, each token
//! answered `true_positive` (a key of this instance that was live when first reported) or
//! `false_positive` (no key: unknown, deleted, disabled or expired before, or a checksum
//! that does not match), and on the first report of a live key the configured action.

use crate::store::{LeakRecord, LeakStore};
use crate::{LeakAction, ScanningService};
use keygate_domain::checksum::{self, Checksum};
use keygate_domain::{ValidationError, hash_secret};
use keygate_rbac::{AuditEvent, KeyChange, MAX_VERIFY_KEY_CHARS, RbacError, Scope};
use serde::{Deserialize, Serialize};

/// The most tokens one report may carry.
pub const MAX_REPORTED_TOKENS: usize = 1_000;
/// The longest `type`, `url` or `source` kept.
const MAX_FIELD_CHARS: usize = 2_048;
/// Who audit events of reports name as their actor.
pub const SCANNING_ACTOR: &str = "github_secret_scanning";

#[derive(Debug, Deserialize)]
struct Reported {
    token: String,
    #[serde(rename = "type")]
    token_type: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    source: String,
}

/// What a report's token was found to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    TruePositive,
    FalsePositive,
}

/// One answer of a report, in GitHub's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub token_raw: String,
    pub token_type: String,
    pub label: Label,
}

/// The report's entries, checked whole before any is acted on (a bad one: 400, nothing done).
fn parse(body: &[u8]) -> Result<Vec<Reported>, RbacError> {
    let reported: Vec<Reported> = serde_json::from_slice(body)
        .map_err(|e| ValidationError::new("body", format!("not a secret scanning report: {e}")))?;
    if reported.len() > MAX_REPORTED_TOKENS {
        let msg = format!("at most {MAX_REPORTED_TOKENS} tokens per report");
        return Err(ValidationError::new("body", msg).into());
    }
    for (i, r) in reported.iter().enumerate() {
        for (name, value) in [("type", &r.token_type), ("url", &r.url), ("source", &r.source)] {
            if value.chars().count() > MAX_FIELD_CHARS || value.contains('\0') {
                let msg = format!("at most {MAX_FIELD_CHARS} characters, no NUL");
                return Err(ValidationError::new(format!("{i}.{name}"), msg).into());
            }
        }
    }
    Ok(reported)
}

impl<S: LeakStore> ScanningService<S> {
    /// `POST /v1/secret-scanning/github`: a report signed by `signature` (base64 DER) under
    /// the published key `identifier`. A report that does not verify is refused
    /// (`Unauthorized`) before its body is read.
    pub fn report(&self, identifier: &str, signature: &str, body: &[u8]) -> Result<Vec<Verdict>, RbacError> {
        let refused = |e: crate::signature::Refused| RbacError::Unauthorized(e.to_string());
        self.keys.keys().map_err(refused)?.verify(identifier, signature, body).map_err(refused)?;
        parse(body)?
            .into_iter()
            .map(|r| {
                let label = self.judge(&r)?;
                Ok(Verdict { token_raw: r.token, token_type: r.token_type, label })
            })
            .collect()
    }

    fn judge(&self, r: &Reported) -> Result<Label, RbacError> {
        let t = r.token.as_str();
        if t.is_empty() || t.len() > MAX_VERIFY_KEY_CHARS || checksum::check(t) == Checksum::Invalid {
            return Ok(Label::FalsePositive);
        }
        let hash = hash_secret(t);
        let now = self.rbac.clock().now_ms() as i64;
        let rbac = &self.rbac;
        let label = rbac.write_through(|changes| {
            rbac.store().leak_transaction(|tx| {
                let Some(found) = tx.key_by_hash(&hash)? else { return Ok(Label::FalsePositive) };
                let ws = found.workspace_id.as_str();
                if !tx.lock_key(ws, &found.id)? {
                    return Ok(Label::FalsePositive);
                }
                let Some(mut key) = tx.get_key(ws, &found.id)? else { return Ok(Label::FalsePositive) };
                if tx.leak_recorded(&key.id)? {
                    return Ok(Label::TruePositive);
                }
                if !key.enabled || key.expires.is_some_and(|e| e <= now) {
                    return Ok(Label::FalsePositive);
                }
                let action = self.action;
                let leak = LeakRecord {
                    workspace_id: ws,
                    key_id: &key.id,
                    url: &r.url,
                    source: &r.source,
                    action: action.as_str(),
                    at: now,
                };
                tx.record_leak(&leak)?;
                if action != LeakAction::Report {
                    key.enabled &= action != LeakAction::Disable;
                    if action == LeakAction::Expire {
                        key.expires = Some(now);
                    }
                    tx.update_key(&key, now)?;
                    changes.touch(Scope::Key(&key.id));
                }
                let detail = serde_json::json!({"url": r.url, "source": r.source, "action": action.as_str()});
                let event = AuditEvent::on_key(ws, SCANNING_ACTOR, "key.leaked", &key.id, now);
                tx.insert_audit_events(&[AuditEvent { detail: Some(detail.to_string()), ..event }])?;
                rbac.key_event(tx, ws, &key.id, KeyChange::Leaked { url: &r.url, source: &r.source }, now)?;
                changes.bump(tx, now)?;
                log::warn!(
                    "secret scanning: key {} of workspace {ws} reported leaked ({}); action: {}",
                    key.id,
                    keygate_domain::redact_url(&r.url),
                    action.as_str()
                );
                Ok(Label::TruePositive)
            })
        })?;
        Ok(label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_checked_whole() {
        assert_eq!(parse(br#"[{"token":"a","type":"t","url":"u","source":"content"}]"#).unwrap().len(), 1);
        assert_eq!(parse(br#"[{"token":"a","type":"t"}]"#).unwrap()[0].url, "");
        for bad in [&b"{}"[..], b"[{\"type\":\"t\"}]", b"[{\"token\":1,\"type\":\"t\"}]", b"not json", b""] {
            assert!(matches!(parse(bad), Err(RbacError::Invalid(_))), "{}", String::from_utf8_lossy(bad));
        }
        let long = format!(r#"[{{"token":"a","type":"t","url":"{}"}}]"#, "u".repeat(MAX_FIELD_CHARS + 1));
        assert!(parse(long.as_bytes()).unwrap_err().to_string().contains("0.url"));
        let many = format!("[{}]", vec![r#"{"token":"a","type":"t"}"#; MAX_REPORTED_TOKENS + 1].join(","));
        assert!(parse(many.as_bytes()).is_err());
    }
}
