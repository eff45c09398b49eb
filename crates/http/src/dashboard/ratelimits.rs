//! `/dashboard/ratelimits`: a namespace's overrides (by its name or id), set and deleted
//! through the same service as `ratelimit.*Override`, and its algorithm, changed through
//! the one `ratelimit.updateNamespace` uses.

use super::answer::{DashError, call, html, see_other};
use super::forms::{encode, field, number, token_ok};
use super::session::Signed;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use keygate_domain::{IdPrefix, has_prefix};
use keygate_rbac::NamespaceRef;
use keygate_web::RatelimitsPage;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub(super) struct NamespaceQuery {
    namespace: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct AlgorithmForm {
    csrf_token: Option<String>,
    namespace: Option<String>,
    algorithm: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct OverrideForm {
    csrf_token: Option<String>,
    namespace: Option<String>,
    identifier: Option<String>,
    limit: Option<String>,
    duration: Option<String>,
}

/// A namespace as the form names it: an id when it looks like one, else a name.
fn namespace_ref(ns: &str) -> NamespaceRef {
    match has_prefix(ns, IdPrefix::Namespace) {
        true => NamespaceRef { id: Some(ns.to_string()), name: None },
        false => NamespaceRef { id: None, name: Some(ns.to_string()) },
    }
}

pub(super) async fn show(signed: Signed, q: web::Query<NamespaceQuery>) -> Result<HttpResponse, DashError> {
    let Signed { session, layout, state } = signed;
    let namespace = field(q.into_inner().namespace).unwrap_or_default();
    let (p, ns) = (session.principal.clone(), (!namespace.is_empty()).then(|| namespace_ref(&namespace)));
    let named = namespace.clone();
    let (overrides, algorithm, namespaces) = call(&layout, move || {
        let overrides = match &ns {
            Some(ns) => state.rbac.list_overrides(&p, ns)?,
            None => Vec::new(),
        };
        // The algorithm, when the root key may read the namespace's settings.
        let algorithm = match ns {
            Some(_) => state.namespaces.get(&p, &named).map(|n| n.algorithm).unwrap_or_default(),
            None => String::new(),
        };
        // The list, when the root key may read every namespace's overrides.
        let namespaces = state.namespaces.list_all(&p).unwrap_or_default();
        Ok((overrides, algorithm, namespaces))
    })
    .await?;
    let page = RatelimitsPage {
        csrf: session.csrf_token.clone(),
        namespace,
        overrides: overrides.into_iter().map(|o| (o.identifier, o.limit, o.duration)).collect(),
        algorithm,
        namespaces: namespaces.into_iter().map(|n| (n.name, n.algorithm)).collect(),
        layout,
    };
    Ok(html(StatusCode::OK, &page))
}

fn back(signed: &Signed, namespace: &str) -> HttpResponse {
    see_other(format!("{}/ratelimits?namespace={}", signed.layout.base, encode(namespace)))
}

pub(super) async fn set(signed: Signed, form: web::Form<OverrideForm>) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let namespace = field(form.namespace).unwrap_or_default();
    let identifier = field(form.identifier).unwrap_or_default();
    let max = keygate_domain::MAX_SAFE_INTEGER;
    let limit = number(
        &signed,
        form.limit.as_deref().unwrap_or(""),
        max,
        "Limit: a whole number (0 denies every request).",
    )?;
    let duration = number(
        &signed,
        form.duration.as_deref().unwrap_or(""),
        max,
        "Window: a whole number of ms, at least 1000.",
    )?;
    if duration < 1_000 {
        return Err(DashError::Invalid {
            layout: signed.layout,
            message: "Window: at least 1000 ms.".into(),
        });
    }
    let ns = namespace_ref(&namespace);
    signed.run(move |kg, p| kg.rbac.set_override(p, &ns, &identifier, limit, duration, false)).await?;
    Ok(back(&signed, &namespace))
}

/// Changes the namespace's algorithm (`ratelimit.updateNamespace`'s rules and permission).
pub(super) async fn algorithm(
    signed: Signed,
    form: web::Form<AlgorithmForm>,
) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let namespace = field(form.namespace).unwrap_or_default();
    let algorithm = field(form.algorithm).unwrap_or_default();
    let named = namespace.clone();
    signed.run(move |kg, p| kg.namespaces.update(p, &named, &algorithm)).await?;
    Ok(back(&signed, &namespace))
}

pub(super) async fn delete(signed: Signed, form: web::Form<OverrideForm>) -> Result<HttpResponse, DashError> {
    let form = form.into_inner();
    token_ok(&signed, form.csrf_token.as_deref())?;
    let namespace = field(form.namespace).unwrap_or_default();
    let identifier = field(form.identifier).unwrap_or_default();
    let ns = namespace_ref(&namespace);
    signed.run(move |kg, p| kg.rbac.delete_override(p, &ns, &identifier)).await?;
    Ok(back(&signed, &namespace))
}
