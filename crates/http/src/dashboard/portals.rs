//! `/dashboard/portals`: the workspace's customer portals (docs/portal.md), created and
//! edited (name, branding, enabled) through the same service as `portal.*`, so with the
//! same rules (a portal the root key may not read is not listed; one per API and slug).

use super::answer::{DashError, html, see_other};
use super::forms::{field, token_ok};
use super::session::Signed;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use keygate_portal::{NewPortal, Portal, PortalChange};
use keygate_web::{PortalRow, PortalsPage};
use serde::Deserialize;

fn row(p: Portal) -> PortalRow {
    PortalRow {
        id: p.id,
        slug: p.slug,
        display_name: p.display_name,
        api_id: p.api_id,
        enabled: p.enabled,
        logo_url: p.logo_url.unwrap_or_default(),
        primary_color: p.primary_color.unwrap_or_default(),
    }
}

/// `GET /dashboard/portals`.
pub(super) async fn list(signed: Signed) -> Result<HttpResponse, DashError> {
    let (portals, apis) = signed
        .run(|kg, p| {
            let apis = kg.rbac.list_apis(p).unwrap_or_default();
            Ok((kg.portal.list_portals(p)?, apis))
        })
        .await?;
    let page = PortalsPage {
        layout: signed.layout.clone(),
        csrf: signed.session.csrf_token.clone(),
        portals: portals.into_iter().map(row).collect(),
        apis: apis.into_iter().map(|a| (a.id, a.name)).collect(),
        error: None,
    };
    Ok(html(StatusCode::OK, &page))
}

#[derive(Debug, Deserialize)]
pub(super) struct CreateForm {
    csrf_token: Option<String>,
    slug: Option<String>,
    display_name: Option<String>,
    api_id: Option<String>,
    logo_url: Option<String>,
    primary_color: Option<String>,
}

/// `POST /dashboard/portals`.
pub(super) async fn create(signed: Signed, form: web::Form<CreateForm>) -> Result<HttpResponse, DashError> {
    let f = form.into_inner();
    token_ok(&signed, f.csrf_token.as_deref())?;
    let new = NewPortal {
        slug: field(f.slug).unwrap_or_default(),
        display_name: field(f.display_name).unwrap_or_default(),
        api_id: field(f.api_id).unwrap_or_default(),
        enabled: Some(true),
        logo_url: field(f.logo_url),
        primary_color: field(f.primary_color),
    };
    signed.run(move |kg, p| kg.portal.create_portal(p, new)).await?;
    Ok(see_other(format!("{}/portals", signed.layout.base)))
}

#[derive(Debug, Deserialize)]
pub(super) struct EditForm {
    csrf_token: Option<String>,
    display_name: Option<String>,
    logo_url: Option<String>,
    primary_color: Option<String>,
    /// A checkbox: `on` when ticked, absent when not.
    enabled: Option<String>,
}

/// `POST /dashboard/portals/{id}`: its name, branding (empty clears) and enabled flag.
pub(super) async fn update(
    signed: Signed,
    id: web::Path<String>,
    form: web::Form<EditForm>,
) -> Result<HttpResponse, DashError> {
    let f = form.into_inner();
    token_ok(&signed, f.csrf_token.as_deref())?;
    let change = PortalChange {
        display_name: Some(field(f.display_name).unwrap_or_default()),
        logo_url: Some(field(f.logo_url)),
        primary_color: Some(field(f.primary_color)),
        enabled: Some(f.enabled.as_deref() == Some("on")),
        ..PortalChange::default()
    };
    let id = id.into_inner();
    signed.run(move |kg, p| kg.portal.update_portal(p, &id, change)).await?;
    Ok(see_other(format!("{}/portals", signed.layout.base)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_portal_row_shows_empty_branding_as_empty_fields() {
        let p = Portal {
            id: "portal_1".into(),
            workspace_id: "ws".into(),
            slug: "acme".into(),
            display_name: "Acme".into(),
            api_id: "api_1".into(),
            enabled: true,
            logo_url: None,
            primary_color: Some("#112233".into()),
            created_at: 0,
            updated_at: None,
        };
        let r = row(p);
        assert_eq!((r.logo_url.as_str(), r.primary_color.as_str()), ("", "#112233"));
    }
}
