//! `/dashboard/root-keys`: the workspace's root keys, created with a permission picker,
//! disabled or enabled, rerolled (the new secret shown once) and deleted, through the same
//! service as `rootKeys.*` (so the same rules: no escalation, not the key signed in with).

use super::answer::{DashError, call, html, see_other};
use super::forms::{encode, field, names, token_ok, when};
use super::session::Signed;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use keygate_rbac::{NewRootKey, RootKey, RootKeyChange, WORKSPACE_PERMISSIONS};
use keygate_web::{RootKeyCreatedPage, RootKeyRow, RootKeysPage};
use serde::Deserialize;
use std::collections::HashMap;

const PAGE: usize = 50;

#[derive(Debug, Deserialize)]
pub(super) struct ListQuery {
    after: Option<String>,
}

fn row(k: RootKey) -> RootKeyRow {
    RootKeyRow {
        shown: format!("{}…{}", k.prefix, k.end),
        name: k.name.unwrap_or_default(),
        enabled: k.enabled,
        permissions: k.permissions.join(", "),
        created: when(k.created_at),
        last_used: k.last_used_at.map_or_else(|| "never".to_string(), when),
        expires: k.expires_at.map_or_else(|| "never".to_string(), when),
        id: k.id,
    }
}

/// `GET /dashboard/root-keys`.
pub(super) async fn list(signed: Signed, q: web::Query<ListQuery>) -> Result<HttpResponse, DashError> {
    let Signed { session, layout, state } = signed;
    let (p, after) = (session.principal.clone(), field(q.into_inner().after));
    let page = call(&layout, move || state.rbac.root_keys_page(&p, after.as_deref(), PAGE)).await?;
    let next = page.next.map(|after| format!("{}/root-keys?after={}", layout.base, encode(&after)));
    let page = RootKeysPage {
        csrf: session.csrf_token.clone(),
        keys: page.items.into_iter().map(row).collect(),
        next,
        choices: WORKSPACE_PERMISSIONS.to_vec(),
        own_id: session.principal.root_key_id.clone(),
        layout,
    };
    Ok(html(StatusCode::OK, &page))
}

/// `POST /dashboard/root-keys`: the permissions ticked and those written out, then the new
/// secret, shown this once.
pub(super) async fn create(
    signed: Signed,
    form: web::Form<HashMap<String, String>>,
) -> Result<HttpResponse, DashError> {
    let mut form = form.into_inner();
    token_ok(&signed, form.get("csrf_token").map(String::as_str))?;
    let mut permissions: Vec<String> = WORKSPACE_PERMISSIONS
        .iter()
        .filter(|p| form.get(**p).is_some_and(|v| v == "on"))
        .map(|p| p.to_string())
        .collect();
    permissions.extend(names(form.remove("more")));
    let new = NewRootKey { name: field(form.remove("name")), permissions, expires: None };
    let (rk, secret) = signed.run(move |kg, p| kg.rbac.create_root_key_for(p, new)).await?;
    let page = RootKeyCreatedPage {
        layout: signed.layout.clone(),
        key_id: rk.id,
        secret: secret.expose().to_string(),
    };
    Ok(html(StatusCode::OK, &page))
}

#[derive(Debug, Deserialize)]
pub(super) struct EnabledForm {
    csrf_token: Option<String>,
    enabled: Option<String>,
}

/// `POST /dashboard/root-keys/{id}/enabled`.
pub(super) async fn set_enabled(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<EnabledForm>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let change =
        RootKeyChange { enabled: Some(form.enabled.as_deref() == Some("true")), ..Default::default() };
    let id = path.into_inner();
    signed.run(move |kg, p| kg.rbac.update_root_key(p, &id, change)).await?;
    Ok(see_other(format!("{}/root-keys", signed.layout.base)))
}

#[derive(Debug, Deserialize)]
pub(super) struct TokenForm {
    csrf_token: Option<String>,
}

/// `POST /dashboard/root-keys/{id}/reroll`: the old key stops working at once.
pub(super) async fn reroll(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<TokenForm>,
) -> Result<HttpResponse, DashError> {
    token_ok(&signed, form.csrf_token.as_deref())?;
    let id = path.into_inner();
    let (rk, secret) = signed.run(move |kg, p| kg.rbac.reroll_root_key(p, &id, Some(0))).await?;
    let page = RootKeyCreatedPage {
        layout: signed.layout.clone(),
        key_id: rk.id,
        secret: secret.expose().to_string(),
    };
    Ok(html(StatusCode::OK, &page))
}

/// `POST /dashboard/root-keys/{id}/delete`.
pub(super) async fn delete(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<TokenForm>,
) -> Result<HttpResponse, DashError> {
    token_ok(&signed, form.csrf_token.as_deref())?;
    let id = path.into_inner();
    signed.run(move |kg, p| kg.rbac.delete_root_key(p, &id)).await?;
    Ok(see_other(format!("{}/root-keys", signed.layout.base)))
}
