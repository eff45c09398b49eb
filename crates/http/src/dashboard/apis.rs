//! `/dashboard/apis`: the workspace's APIs (and creating one), and an API's keys a page at a
//! time, filtered by identity.

use super::answer::{DashError, call, html, see_other};
use super::forms::token_ok;
use super::session::Signed;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use keygate_web::{ApiPage, ApisPage, KeyRow};
use serde::Deserialize;

/// Keys per page of an API.
const PAGE: usize = 50;

#[derive(Debug, Deserialize)]
pub(super) struct CreateApiForm {
    csrf_token: Option<String>,
    name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct KeysQuery {
    after: Option<String>,
    #[serde(rename = "externalId")]
    external_id: Option<String>,
    /// A key id, or part of a key's name.
    search: Option<String>,
}

/// `GET /dashboard/apis`.
pub(super) async fn list(signed: Signed) -> Result<HttpResponse, DashError> {
    render_list(signed, StatusCode::OK, None).await
}

async fn render_list(
    signed: Signed,
    status: StatusCode,
    error: Option<String>,
) -> Result<HttpResponse, DashError> {
    let Signed { session, layout, state } = signed;
    let p = session.principal.clone();
    let apis = call(&layout, move || state.rbac.list_apis(&p)).await?;
    let page = ApisPage {
        csrf: session.csrf_token.clone(),
        apis: apis.into_iter().map(|a| (a.id, a.name)).collect(),
        error,
        layout,
    };
    Ok(html(status, &page))
}

/// `POST /dashboard/apis`: a new API, then its page.
pub(super) async fn create(
    signed: Signed,
    form: web::Form<CreateApiForm>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let (st, p) = (signed.state.clone(), signed.session.principal.clone());
    let name = form.name.unwrap_or_default();
    let created = web::block(move || st.rbac.create_api(&p, name.trim()))
        .await
        .map_err(|e| DashError::Unavailable(e.to_string()))?;
    match created {
        Ok(api) => Ok(see_other(format!("{}/apis/{}", signed.layout.base, api.id))),
        Err(e) if e.code() == keygate_domain::ErrorCode::BadRequest => {
            render_list(signed, StatusCode::BAD_REQUEST, Some(e.to_string())).await
        }
        Err(e) => Err(DashError::from_service(&signed.layout, e)),
    }
}

/// `GET /dashboard/apis/{api_id}`: the API and a page of its keys.
pub(super) async fn show(
    signed: Signed,
    path: web::Path<String>,
    q: web::Query<KeysQuery>,
) -> Result<HttpResponse, DashError> {
    render_api(signed, path.into_inner(), q.into_inner(), StatusCode::OK, None).await
}

/// The API's page (with a form error, when a key could not be created).
pub(super) async fn render_api(
    signed: Signed,
    api_id: String,
    q: KeysQuery,
    status: StatusCode,
    error: Option<String>,
) -> Result<HttpResponse, DashError> {
    let Signed { session, layout, state } = signed;
    let p = session.principal.clone();
    let external_id = q.external_id.filter(|e| !e.trim().is_empty());
    let search = q.search.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    let (id, filter, after, text) = (api_id.clone(), external_id.clone(), q.after, search.clone());
    let (api, (page, total)) = call(&layout, move || {
        let api = state.rbac.get_api(&p, &id)?;
        let keys = match &text {
            // A search: its matches, on one page.
            Some(text) => {
                let found = state.rbac.search_api_keys(&p, &id, text, PAGE)?;
                let total = state.rbac.list_api_keys(&p, &id, None, None, 0, |_, k| Ok(k))?.1;
                (keygate_rbac::Page { items: found, next: None }, total)
            }
            None => {
                state.rbac.list_api_keys(&p, &id, filter.as_deref(), after.as_deref(), PAGE, |_, k| Ok(k))?
            }
        };
        Ok((api, keys))
    })
    .await?;
    let page = ApiPage {
        csrf: session.csrf_token.clone(),
        api_id: api.id,
        name: api.name,
        total,
        external_id: external_id.unwrap_or_default(),
        search: search.unwrap_or_default(),
        keys: page.items.iter().map(key_row).collect(),
        next: page.next,
        error,
        layout,
    };
    Ok(html(status, &page))
}

/// A key as lists show it.
pub(super) fn key_row(k: &keygate_rbac::Key) -> KeyRow {
    KeyRow {
        id: k.id.clone(),
        name: k.name.clone().unwrap_or_default(),
        start: k.start.clone(),
        enabled: k.enabled,
    }
}
