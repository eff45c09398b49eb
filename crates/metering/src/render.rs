//! What each sink is sent for a period. Every id is made from what it names (the sink, the
//! identity, the period's start), never drawn at random: a period sent again (a retry, a
//! receiver that answered too late) carries the same ids, and the billing system counts it
//! once (OpenMeter deduplicates CloudEvents by `id` and `source`; Stripe meter events by
//! `identifier`).

use crate::settings::{CloudEventsSink, StripeSink};
use crate::store::IdentityUsage;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The most events one CloudEvents batch carries (a period with more identities is sent
/// in several batches).
pub const MAX_BATCH_EVENTS: usize = 500;

/// The outbox event id of one delivery of the export: `usage_` and 32 hex digits of a hash
/// of its parts (sink, workspace, period start, and which part of the period it is).
pub fn outbox_id(sink: &str, workspace_id: &str, period_start: i64, part: &str) -> String {
    let mut h = Sha256::new();
    for p in [sink, workspace_id, &period_start.to_string(), part] {
        h.update(p.as_bytes());
        h.update([0]);
    }
    let digest = hex::encode(h.finalize());
    format!("usage_{}", &digest[..32])
}

/// RFC 3339, UTC, of unix ms.
pub fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map(|t| t.to_string()).unwrap_or_default()
}

/// One identity's period as a CloudEvent: `subject` its external id, `time` the period's
/// start, `data {credits, verifications}`; `id` the identity and the period's start
/// (unique within the `source`, which names the workspace).
pub fn cloudevent(sink: &CloudEventsSink, u: &IdentityUsage, period_start: i64) -> Value {
    json!({
        "specversion": "1.0",
        "id": format!("{}-{period_start}", u.identity_id),
        "source": format!("{}/{}", sink.source, u.workspace_id),
        "type": sink.event_type,
        "subject": u.external_id,
        "time": rfc3339(period_start),
        "datacontenttype": "application/json",
        "data": { "credits": u.spent_credits, "verifications": u.verifications },
    })
}

/// A batch's body: a JSON array of events.
pub fn cloudevents_batch(events: &[Value]) -> String {
    Value::Array(events.to_vec()).to_string()
}

/// The Stripe customer id an identity's `meta` names in `field` (a non-empty string).
pub fn stripe_customer(meta: Option<&str>, field: &str) -> Option<String> {
    let meta: Value = serde_json::from_str(meta?).ok()?;
    match meta.get(field)? {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// Stripe's `identifier` (its idempotency key for meter events, at most 100 characters).
pub fn stripe_identifier(u: &IdentityUsage, period_start: i64) -> String {
    format!("keygate-{}-{period_start}", u.identity_id)
}

/// A Stripe meter event, form-encoded: `event_name`, `payload[stripe_customer_id]`,
/// `payload[value]` (the credits spent), `identifier`, `timestamp` (the period's start, in
/// seconds).
pub fn stripe_form(sink: &StripeSink, customer: &str, u: &IdentityUsage, period_start: i64) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("event_name", &sink.event_name)
        .append_pair("payload[stripe_customer_id]", customer)
        .append_pair("payload[value]", &u.spent_credits.to_string())
        .append_pair("identifier", &stripe_identifier(u, period_start))
        .append_pair("timestamp", &period_start.div_euclid(1000).to_string())
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use keygate_domain::Secret;

    fn usage() -> IdentityUsage {
        IdentityUsage {
            workspace_id: "ws_1".into(),
            identity_id: "id_abc".into(),
            external_id: "acme & co".into(),
            meta: Some(r#"{"stripeCustomerId":"cus_123","plan":"pro"}"#.into()),
            verifications: 7,
            spent_credits: 42,
        }
    }

    #[test]
    fn a_cloudevent_names_the_identity_and_period() {
        let sink = CloudEventsSink {
            url: "http://x".into(),
            token: None,
            source: "keygate".into(),
            event_type: "keygate.usage".into(),
        };
        let e = cloudevent(&sink, &usage(), 1_765_000_020_000);
        assert_eq!(e["specversion"], "1.0");
        assert_eq!(e["id"], "id_abc-1765000020000");
        assert_eq!(e["source"], "keygate/ws_1");
        assert_eq!(e["subject"], "acme & co");
        assert_eq!(e["time"], "2025-12-06T05:47:00Z");
        assert_eq!(e["data"], json!({"credits": 42, "verifications": 7}));
    }

    #[test]
    fn a_stripe_event_is_form_encoded_with_a_stable_identifier() {
        let sink = StripeSink {
            url: "http://x".into(),
            key: Secret::new("sk"),
            event_name: "api calls".into(),
            customer_field: "stripeCustomerId".into(),
        };
        let u = usage();
        let customer = stripe_customer(u.meta.as_deref(), &sink.customer_field).unwrap();
        let form = stripe_form(&sink, &customer, &u, 1_765_000_020_000);
        assert_eq!(
            form,
            "event_name=api+calls&payload%5Bstripe_customer_id%5D=cus_123&payload%5Bvalue%5D=42\
             &identifier=keygate-id_abc-1765000020000&timestamp=1765000020"
        );
        assert_eq!(stripe_customer(Some(r#"{"stripeCustomerId":5}"#), "stripeCustomerId"), None);
        assert_eq!(stripe_customer(None, "stripeCustomerId"), None);
    }

    #[test]
    fn outbox_ids_are_stable_and_apart() {
        let a = outbox_id("cloudevents", "ws_1", 60_000, "0");
        assert_eq!(a, outbox_id("cloudevents", "ws_1", 60_000, "0"));
        assert_eq!(a.len(), "usage_".len() + 32);
        for other in [
            outbox_id("stripe", "ws_1", 60_000, "0"),
            outbox_id("cloudevents", "ws_2", 60_000, "0"),
            outbox_id("cloudevents", "ws_1", 120_000, "0"),
            outbox_id("cloudevents", "ws_1", 60_000, "1"),
        ] {
            assert_ne!(a, other);
        }
    }
}
