//! `/dashboard/identities`: the workspace's identities, searched by externalId, 50 a page,
//! and created (with optional meta), through the same service as `identities.*`.

use super::answer::{DashError, call, html, see_other};
use super::forms::{encode, field, token_ok};
use super::session::Signed;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use keygate_domain::{Algorithm, Patch};
use keygate_rbac::NewRateLimit;
use keygate_web::{IdentitiesPage, IdentityPage};
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
    signed.run(move |kg, p| kg.rbac.create_identity(p, &external_id, meta, &[], None)).await?;
    Ok(see_other(format!("{}/identities", signed.layout.base)))
}

/// `GET /dashboard/identities/{id}`.
pub(super) async fn show(signed: Signed, path: web::Path<String>) -> Result<HttpResponse, DashError> {
    let Signed { session, layout, state } = signed;
    let (p, id) = (session.principal.clone(), path.into_inner());
    let view = call(&layout, move || state.rbac.get_identity(&p, &id)).await?;
    let page = IdentityPage {
        csrf: session.csrf_token.clone(),
        id: view.identity.id,
        external_id: view.identity.external_id,
        meta: view.identity.meta.unwrap_or_default(),
        ratelimits: view
            .ratelimits
            .iter()
            .map(|l| {
                let algorithm = match l.algorithm {
                    Algorithm::Fixed => String::new(),
                    other => format!(" {other}"),
                };
                let auto = if l.auto_apply { " auto" } else { "" };
                format!("{} {} {}{auto}{algorithm}", l.name, l.limit, l.duration)
            })
            .collect(),
        layout,
    };
    Ok(html(StatusCode::OK, &page))
}

#[derive(Debug, Deserialize)]
pub(super) struct EditForm {
    csrf_token: Option<String>,
    meta: Option<String>,
    ratelimits: Option<String>,
}

/// One limit per line: `name limit duration [auto] [fixed|sliding|token_bucket]`.
fn limits(signed: &Signed, text: &str) -> Result<Vec<NewRateLimit>, DashError> {
    let bad = |line: &str| DashError::Invalid {
        layout: signed.layout.clone(),
        message: format!(
            "Rate limits: \"{line}\" is not \"name limit window-ms [auto] [fixed|sliding|token_bucket]\"."
        ),
    };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            let (name, limit, duration, rest) = match parts[..] {
                [n, l, d, ref rest @ ..] if rest.len() <= 2 => (n, l, d, rest),
                _ => return Err(bad(line)),
            };
            let (Ok(limit), Ok(duration)) = (limit.parse(), duration.parse()) else { return Err(bad(line)) };
            let (mut auto_apply, mut algorithm) = (false, None);
            for word in rest {
                match (*word, Algorithm::parse(word)) {
                    ("auto", _) if !auto_apply => auto_apply = true,
                    (_, Some(a)) if algorithm.is_none() => algorithm = Some(a),
                    _ => return Err(bad(line)),
                }
            }
            let algorithm = algorithm.unwrap_or_default();
            Ok(NewRateLimit { name: name.to_string(), limit, duration, auto_apply, algorithm })
        })
        .collect()
}

/// `POST /dashboard/identities/{id}`: meta (a JSON object, or none) and the whole set of
/// rate limits replaced, as `identities.updateIdentity` does.
pub(super) async fn update(
    signed: Signed,
    path: web::Path<String>,
    form: web::Form<EditForm>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let meta = match field(form.meta) {
        None => Patch::Clear,
        Some(m) if serde_json::from_str::<serde_json::Value>(&m).is_ok_and(|v| v.is_object()) => {
            Patch::Set(m)
        }
        Some(_) => {
            let message = "Meta: a JSON object, such as {\"plan\": \"pro\"}, or nothing.".into();
            return Err(DashError::Invalid { layout: signed.layout, message });
        }
    };
    let ratelimits = Patch::Set(limits(&signed, form.ratelimits.as_deref().unwrap_or(""))?);
    let id = path.into_inner();
    let back = format!("{}/identities/{id}", signed.layout.base);
    signed
        .run(move |kg, p| kg.rbac.update_identity(p, &id, meta, ratelimits, keygate_domain::Patch::Absent))
        .await?;
    Ok(see_other(back))
}
