//! `/dashboard/permissions` and `/dashboard/roles`: the workspace's permissions and roles,
//! created, deleted, and a role's permissions replaced, through the same services as
//! `permissions.*`.

use super::answer::{DashError, call, html, see_other};
use super::forms::{field, names, token_ok};
use super::session::Signed;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use keygate_rbac::{EntityKind, EntityRef, NewEntity};
use keygate_web::{PermissionsPage, RolesPage};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub(super) struct EntityForm {
    csrf_token: Option<String>,
    name: Option<String>,
    description: Option<String>,
    permissions: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct TokenForm {
    csrf_token: Option<String>,
}

pub(super) async fn list(signed: Signed) -> Result<HttpResponse, DashError> {
    let Signed { session, layout, state } = signed;
    let p = session.principal.clone();
    let all = call(&layout, move || state.rbac.list_entities(&p, EntityKind::Permission)).await?;
    let page = PermissionsPage {
        csrf: session.csrf_token.clone(),
        permissions: all.into_iter().map(|e| (e.id, e.name, e.description.unwrap_or_default())).collect(),
        layout,
    };
    Ok(html(StatusCode::OK, &page))
}

pub(super) async fn create(signed: Signed, form: web::Form<EntityForm>) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let new = NewEntity {
        name: field(form.name).unwrap_or_default(),
        name_field: "name",
        description: field(form.description),
        ..NewEntity::default()
    };
    signed.run(move |kg, p| kg.rbac.create_entity(p, EntityKind::Permission, new)).await?;
    Ok(see_other(format!("{}/permissions", signed.layout.base)))
}

pub(super) async fn delete(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<TokenForm>,
) -> Result<HttpResponse, DashError> {
    token_ok(&signed, form.csrf_token.as_deref())?;
    let id = path.into_inner();
    signed.run(move |kg, p| kg.rbac.delete_entity(p, EntityKind::Permission, &id)).await?;
    Ok(see_other(format!("{}/permissions", signed.layout.base)))
}

pub(super) async fn roles(signed: Signed) -> Result<HttpResponse, DashError> {
    let Signed { session, layout, state } = signed;
    let p = session.principal.clone();
    let all = call(&layout, move || state.rbac.list_roles(&p)).await?;
    let page = RolesPage {
        csrf: session.csrf_token.clone(),
        roles: all
            .into_iter()
            .map(|r| (r.role.id, r.role.name, r.permissions.into_iter().map(|e| e.name).collect()))
            .collect(),
        layout,
    };
    Ok(html(StatusCode::OK, &page))
}

pub(super) async fn create_role(
    signed: Signed,
    form: web::Form<EntityForm>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let new = NewEntity {
        name: field(form.name).unwrap_or_default(),
        name_field: "name",
        description: field(form.description),
        permissions: names(form.permissions),
        ..NewEntity::default()
    };
    signed.run(move |kg, p| kg.rbac.create_entity(p, EntityKind::Role, new)).await?;
    Ok(see_other(format!("{}/roles", signed.layout.base)))
}

pub(super) async fn set_role_permissions(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<EntityForm>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let refs: Vec<EntityRef> = names(form.permissions)
        .into_iter()
        .map(|n| EntityRef { create: Some(true), ..EntityRef::by_name(n) })
        .collect();
    let id = path.into_inner();
    signed.run(move |kg, p| kg.rbac.set_role_permissions(p, &id, &refs)).await?;
    Ok(see_other(format!("{}/roles", signed.layout.base)))
}

pub(super) async fn delete_role(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<TokenForm>,
) -> Result<HttpResponse, DashError> {
    token_ok(&signed, form.csrf_token.as_deref())?;
    let id = path.into_inner();
    signed.run(move |kg, p| kg.rbac.delete_entity(p, EntityKind::Role, &id)).await?;
    Ok(see_other(format!("{}/roles", signed.layout.base)))
}
