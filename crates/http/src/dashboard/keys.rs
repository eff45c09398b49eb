//! `/dashboard/keys/{key_id}` and the key actions: create (the secret shown once),
//! enable or disable, delete. Each action is a POST with the session's form token, calls
//! the same service as the API (same checks, same audit events, the session's root key as
//! the actor) and then shows where it leads.

use super::answer::{DashError, call, html, see_other};
use super::apis::{KeysQuery, key_row, render_api};
use super::forms::{field, names, token_ok};
use super::overview::{DAY, chart_buckets};
use super::session::Signed;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use keygate_rbac::{Credits, KeyLookup, KeyUpdate, NewKey, RefillInterval};
use keygate_usage::CreditOp;
use keygate_web::{BarChart, KeyCreatedPage, KeyPage, KeyRevealedPage};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub(super) struct CreateKeyForm {
    csrf_token: Option<String>,
    name: Option<String>,
    #[serde(rename = "externalId")]
    external_id: Option<String>,
    credits: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct EnabledForm {
    csrf_token: Option<String>,
    enabled: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct TokenForm {
    csrf_token: Option<String>,
}

/// `POST /dashboard/apis/{api_id}/keys`: a new key of the API; its secret shown once.
pub(super) async fn create(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<CreateKeyForm>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let api_id = path.into_inner();
    let credits = match field(form.credits) {
        None => None,
        Some(c) => match c.parse::<u64>() {
            Ok(remaining) if remaining <= keygate_domain::MAX_SAFE_INTEGER => {
                Some(Credits { remaining, refill: None })
            }
            _ => {
                let q = KeysQuery::default();
                let error = Some(
                    "Credits: a whole number from 0 to 9007199254740991, or empty for unlimited.".into(),
                );
                return render_api(signed, api_id, q, StatusCode::BAD_REQUEST, error).await;
            }
        },
    };
    let new = NewKey {
        api_id: Some(api_id.clone()),
        external_id: field(form.external_id),
        name: field(form.name),
        credits,
        byte_length: Some(16),
        ..NewKey::default()
    };
    let (st, p) = (signed.state.clone(), signed.session.principal.clone());
    let created = web::block(move || st.rbac.create_key_as(&p, new))
        .await
        .map_err(|e| DashError::Unavailable(e.to_string()))?;
    match created {
        Ok((key, secret)) => {
            let page = KeyCreatedPage {
                layout: signed.layout.clone(),
                key_id: key.id,
                api_id,
                secret: secret.expose().to_string(),
            };
            Ok(html(StatusCode::OK, &page))
        }
        Err(e) if e.code() == keygate_domain::ErrorCode::BadRequest => {
            render_api(signed, api_id, KeysQuery::default(), StatusCode::BAD_REQUEST, Some(e.to_string()))
                .await
        }
        Err(e) => Err(DashError::from_service(&signed.layout, e)),
    }
}

/// `GET /dashboard/keys/{key_id}`.
pub(super) async fn show(signed: Signed, path: web::Path<String>) -> Result<HttpResponse, DashError> {
    let Signed { session, layout, state } = signed;
    let (p, id) = (session.principal.clone(), path.into_inner());
    let now = state.clock.now_ms() as i64;
    let first = now - now.rem_euclid(DAY) - 29 * DAY;
    let (summary, direct, usage) = call(&layout, move || {
        let summary = state.rbac.key_summary(&p, KeyLookup::Id(&id))?;
        // Its usage, where the root key may read it.
        let usage = state.analytics.verification_buckets(&p, Some(&id), (first, now), DAY).ok();
        // The key's own permissions (what the form edits), where the root key may read them.
        let direct = match p.holds("api.*.read_key") {
            true => state.rbac.get_key(&p, &id)?.permissions.into_iter().map(|n| n.name).collect(),
            false => summary.permissions.clone(),
        };
        Ok((summary, direct, usage))
    })
    .await?;
    let usage = usage.map(|counted| chart_buckets(&counted, first, 30, DAY));
    let usage_total = usage.as_ref().map_or(0, |(_, totals)| totals.iter().sum());
    let remaining = summary.key.credits.as_ref().map(|c| c.remaining.to_string());
    let page = KeyPage {
        csrf: session.csrf_token.clone(),
        key: key_row(&summary.key),
        api_id: summary.key.api_id.clone(),
        credits: remaining.clone().unwrap_or_else(|| "unlimited".into()),
        credits_value: remaining.unwrap_or_default(),
        identity: summary.identity.as_ref().map_or("none".into(), |i| i.identity.external_id.clone()),
        permissions: summary.permissions,
        direct_permissions: direct,
        roles: summary.roles,
        limits: summary
            .ratelimits
            .iter()
            .map(|l| {
                format!(
                    "{}: {} per {} ms{}{}",
                    l.name,
                    l.limit,
                    l.duration,
                    if l.auto_apply { ", auto" } else { "" },
                    match l.algorithm {
                        keygate_domain::Algorithm::Fixed => String::new(),
                        other => format!(", {other}"),
                    }
                )
            })
            .collect(),
        refill: summary.key.credits.as_ref().and_then(|c| c.refill.as_ref()).map_or(
            String::new(),
            |r| match r.interval {
                RefillInterval::Daily => format!("refilled to {} every day", r.amount),
                RefillInterval::Monthly => {
                    format!("refilled to {} on day {} of each month", r.amount, r.day.unwrap_or(1))
                }
            },
        ),
        usage: usage.map(|(buckets, _)| {
            BarChart::new("day", &buckets)
                .labelled(format!("Verifications of this key per day: {usage_total} in all"))
        }),
        usage_total,
        layout,
    };
    Ok(html(StatusCode::OK, &page))
}

/// `POST /dashboard/keys/{key_id}/enabled`: `enabled=true|false`.
pub(super) async fn set_enabled(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<EnabledForm>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let enabled = match form.enabled.as_deref() {
        Some("true") => true,
        Some("false") => false,
        _ => {
            return Err(DashError::Invalid {
                layout: signed.layout,
                message: "enabled: true or false".into(),
            });
        }
    };
    let id = path.into_inner();
    let (key, update) = (id.clone(), KeyUpdate { enabled: Some(enabled), ..KeyUpdate::default() });
    signed.run(move |kg, p| kg.rbac.update_key(p, &key, update)).await?;
    Ok(see_other(format!("{}/keys/{id}", signed.layout.base)))
}

#[derive(Debug, Deserialize)]
pub(super) struct CreditsForm {
    csrf_token: Option<String>,
    remaining: Option<String>,
}

/// `POST /dashboard/keys/{key_id}/credits`: `remaining` set (empty: unlimited).
pub(super) async fn set_credits(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<CreditsForm>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let value = match field(form.remaining) {
        None => None,
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n <= keygate_domain::MAX_SAFE_INTEGER => Some(n),
            _ => {
                let message =
                    "Credits: a whole number from 0 to 9007199254740991, or empty for unlimited.".into();
                return Err(DashError::Invalid { layout: signed.layout, message });
            }
        },
    };
    let id = path.into_inner();
    let key = id.clone();
    signed.run(move |kg, p| kg.usage.update_credits(p, &key, CreditOp::Set, value)).await?;
    Ok(see_other(format!("{}/keys/{id}", signed.layout.base)))
}

#[derive(Debug, Deserialize)]
pub(super) struct AccessForm {
    csrf_token: Option<String>,
    permissions: Option<String>,
    roles: Option<String>,
}

/// `POST /dashboard/keys/{key_id}/access`: the key's permissions and roles replaced (as
/// `keys.updateKey` with both), missing permissions created.
pub(super) async fn set_access(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<AccessForm>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let update = KeyUpdate {
        permissions: Some(names(form.permissions)),
        roles: Some(names(form.roles)),
        ..KeyUpdate::default()
    };
    let id = path.into_inner();
    let key = id.clone();
    signed.run(move |kg, p| kg.rbac.update_key(p, &key, update)).await?;
    Ok(see_other(format!("{}/keys/{id}", signed.layout.base)))
}

/// `POST /dashboard/keys/{key_id}/reroll`: a new secret, shown once; the old one stops
/// working at once.
pub(super) async fn reroll(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<TokenForm>,
) -> Result<HttpResponse, DashError> {
    token_ok(&signed, form.csrf_token.as_deref())?;
    let id = path.into_inner();
    let (key, secret) = signed.run(move |kg, p| kg.rbac.reroll_key(p, &id, Some(0))).await?;
    let page = KeyCreatedPage {
        layout: signed.layout.clone(),
        api_id: key.api_id.clone().unwrap_or_default(),
        key_id: key.id,
        secret: secret.expose().to_string(),
    };
    Ok(html(StatusCode::OK, &page))
}

/// `POST /dashboard/keys/{key_id}/reveal`: a recoverable key's plaintext, once (needs
/// `decrypt_key`; one `key.decrypt` audit event), or a page saying it is not recoverable.
pub(super) async fn reveal(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<TokenForm>,
) -> Result<HttpResponse, DashError> {
    token_ok(&signed, form.csrf_token.as_deref())?;
    let id = path.into_inner();
    let key_id = id.clone();
    let plaintext = signed
        .run(move |kg, p| {
            let summary = kg.rbac.key_summary(p, KeyLookup::Id(&id))?;
            let key = &summary.key;
            let mut revealed = kg.rbac.reveal_keys(p, &[(key.id.as_str(), key.api_id.as_deref())])?;
            Ok(revealed.remove(&key.id).map(|plaintext| plaintext.to_string()))
        })
        .await?;
    let page = KeyRevealedPage { layout: signed.layout.clone(), key_id, plaintext };
    Ok(html(StatusCode::OK, &page))
}

/// `POST /dashboard/keys/{key_id}/delete`: then back to the key's API.
pub(super) async fn delete(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<TokenForm>,
) -> Result<HttpResponse, DashError> {
    token_ok(&signed, form.csrf_token.as_deref())?;
    let id = path.into_inner();
    let api_id = signed
        .run(move |kg, p| {
            let summary = kg.rbac.key_summary(p, KeyLookup::Id(&id))?;
            kg.rbac.delete_key(p, &id)?;
            Ok(summary.key.api_id)
        })
        .await?;
    let base = &signed.layout.base;
    Ok(see_other(match api_id {
        Some(api) => format!("{base}/apis/{api}"),
        None => format!("{base}/apis"),
    }))
}
