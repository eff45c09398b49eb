//! `/dashboard/identities`: the workspace's identities, searched by externalId, 50 a page,
//! and created (with optional meta), through the same service as `identities.*`.

use super::forms::{encode, field, token_ok};
use super::session::Signed;
use super::{DashError, call, html, see_other};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use keygate_web::IdentitiesPage;
use serde::Deserialize;

const PAGE: usize = 50;

#[derive(Debug, Deserialize)]
pub(super) struct IdentitiesQuery {
    search: Option<String>,
    after: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct IdentityForm {
    csrf_token: Option<String>,
    #[serde(rename = "externalId")]
    external_id: Option<String>,
    meta: Option<String>,
}

pub(super) async fn list(signed: Signed, q: web::Query<IdentitiesQuery>) -> Result<HttpResponse, DashError> {
    let Signed { session, layout, state } = signed;
    let q = q.into_inner();
    let search = field(q.search);
    let (p, s, after) = (session.principal.clone(), search.clone(), field(q.after));
    let page =
        call(&layout, move || state.rbac.list_identities(&p, s.as_deref(), after.as_deref(), PAGE)).await?;
    let search = search.unwrap_or_default();
    let next = page.next.map(|after| {
        let mut link = format!("{}/identities?after={}", layout.base, encode(&after));
        if !search.is_empty() {
            link.push_str(&format!("&search={}", encode(&search)));
        }
        link
    });
    let identities = page
        .items
        .into_iter()
        .map(|i| {
            let limits: Vec<String> = i
                .ratelimits
                .iter()
                .map(|l| format!("{}: {} per {} ms", l.name, l.limit, l.duration))
                .collect();
            let limits = if limits.is_empty() { "none".to_string() } else { limits.join(", ") };
            (i.identity.id, i.identity.external_id, limits)
        })
        .collect();
    let page = IdentitiesPage { csrf: session.csrf_token.clone(), search, identities, next, layout };
    Ok(html(StatusCode::OK, &page))
}

pub(super) async fn create(signed: Signed, form: web::Form<IdentityForm>) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let external_id = field(form.external_id).unwrap_or_default();
    let meta = field(form.meta);
    // As the API takes it: a JSON object.
    if meta
        .as_deref()
        .is_some_and(|m| !serde_json::from_str::<serde_json::Value>(m).is_ok_and(|v| v.is_object()))
    {
        let message = "Meta: a JSON object, such as {\"plan\": \"pro\"}, or nothing.".into();
        return Err(DashError::Invalid { layout: signed.layout, message });
    }
    let (st, p) = (signed.state.clone(), signed.session.principal.clone());
    call(&signed.layout, move || st.rbac.create_identity(&p, &external_id, meta, &[])).await?;
    Ok(see_other(format!("{}/identities", signed.layout.base)))
}
