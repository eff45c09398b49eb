//! The dashboard (docs/dashboard.md): server-rendered pages under `/dashboard`, from the
//! templates of `keygate-web`, acting through the same services as the API with a login
//! session's root key. One room per concern: [`session`] (the cookie and the signed-in
//! extractor), [`csrf`] (form tokens), [`login`], [`overview`].

mod answer;
mod apis;
mod audit;
mod csrf;
mod forms;
mod identities;
mod keys;
mod login;
mod overview;
mod permissions;
mod portals;
mod ratelimits;
mod root_keys;
mod session;
pub mod settings;
mod webhooks;

use answer::{DashError, unavailable_page};
pub(crate) use forms::when;
use settings::DashboardSettings;

use actix_web::dev::ServiceResponse;
use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::middleware::{DefaultHeaders, ErrorHandlerResponse, ErrorHandlers};
use actix_web::{HttpResponse, web};
use keygate_web::Layout;

/// What every dashboard answer carries (CSP without inline scripts or styles, no framing,
/// no sniffing, no referrer across origins, never cached).
const SECURITY_HEADERS: [(&str, &str); 5] = [
    (
        "Content-Security-Policy",
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "same-origin"),
    ("X-Frame-Options", "DENY"),
    ("Cache-Control", "no-store"),
];

/// Registers the dashboard's routes, under `/dashboard`.
pub fn configure(cfg: &mut web::ServiceConfig, middleware: crate::plumbing::RequestId) {
    let mut headers = DefaultHeaders::new();
    for h in SECURITY_HEADERS {
        headers = headers.add(h);
    }
    // A form that does not parse (another content type, a field repeated) is refused as a
    // form without its token: nothing is done.
    let forms = web::FormConfig::default().limit(16 * 1024).error_handler(|e, req| {
        log::debug!("dashboard: a form did not parse: {e}");
        let base = match req.app_data::<web::Data<crate::state::AppState>>() {
            Some(state) => session::settings(state).base,
            None => DashboardSettings::default().base,
        };
        DashError::BadToken { layout: Layout::signed_out(&base) }.into()
    });
    // A store failure is rendered where the request is known, so that its page links under
    // KEYGATE_DASHBOARD_BASE (the error itself does not know the request).
    let unavailable = ErrorHandlers::new().handler(StatusCode::SERVICE_UNAVAILABLE, |res| {
        let base = match res.request().app_data::<web::Data<crate::state::AppState>>() {
            Some(state) => session::settings(state).base,
            None => DashboardSettings::default().base,
        };
        let (req, _) = res.into_parts();
        let page = unavailable_page(&base);
        Ok(ErrorHandlerResponse::Response(ServiceResponse::new(req, page).map_into_right_body()))
    });
    cfg.service(
        web::scope("/dashboard")
            .app_data(forms)
            .wrap(unavailable)
            .wrap(headers)
            .wrap(middleware)
            .route("", web::get().to(overview::overview))
            .route("/", web::get().to(overview::overview))
            .route("/login", web::get().to(login::form))
            .route("/login", web::post().to(login::login))
            .route("/logout", web::post().to(login::logout))
            .route("/apis", web::get().to(apis::list))
            .route("/apis", web::post().to(apis::create))
            .route("/apis/{api_id}", web::get().to(apis::show))
            .route("/apis/{api_id}/keys", web::post().to(keys::create))
            .route("/keys/{key_id}", web::get().to(keys::show))
            .route("/keys/{key_id}/enabled", web::post().to(keys::set_enabled))
            .route("/keys/{key_id}/delete", web::post().to(keys::delete))
            .route("/keys/{key_id}/credits", web::post().to(keys::set_credits))
            .route("/keys/{key_id}/access", web::post().to(keys::set_access))
            .route("/keys/{key_id}/reroll", web::post().to(keys::reroll))
            .route("/keys/{key_id}/reveal", web::post().to(keys::reveal))
            .route("/root-keys", web::get().to(root_keys::list))
            .route("/root-keys", web::post().to(root_keys::create))
            .route("/root-keys/{id}/enabled", web::post().to(root_keys::set_enabled))
            .route("/root-keys/{id}/reroll", web::post().to(root_keys::reroll))
            .route("/root-keys/{id}/delete", web::post().to(root_keys::delete))
            .route("/portals", web::get().to(portals::list))
            .route("/portals", web::post().to(portals::create))
            .route("/portals/{id}", web::post().to(portals::update))
            .route("/webhooks", web::get().to(webhooks::list))
            .route("/webhooks", web::post().to(webhooks::create))
            .route("/webhooks/{id}", web::get().to(webhooks::show))
            .route("/webhooks/{id}", web::post().to(webhooks::update))
            .route("/webhooks/{id}/enabled", web::post().to(webhooks::set_enabled))
            .route("/webhooks/{id}/rotate", web::post().to(webhooks::rotate))
            .route("/webhooks/{id}/delete", web::post().to(webhooks::delete))
            .route("/deliveries/{id}", web::get().to(webhooks::delivery))
            .route("/deliveries/{id}/replay", web::post().to(webhooks::replay))
            .route("/audit", web::get().to(audit::list))
            .route("/permissions", web::get().to(permissions::list))
            .route("/permissions", web::post().to(permissions::create))
            .route("/permissions/{id}/delete", web::post().to(permissions::delete))
            .route("/roles", web::get().to(permissions::roles))
            .route("/roles", web::post().to(permissions::create_role))
            .route("/roles/{id}/permissions", web::post().to(permissions::set_role_permissions))
            .route("/roles/{id}/delete", web::post().to(permissions::delete_role))
            .route("/identities", web::get().to(identities::list))
            .route("/identities", web::post().to(identities::create))
            .route("/identities/{id}", web::get().to(identities::show))
            .route("/identities/{id}", web::post().to(identities::update))
            .route("/ratelimits", web::get().to(ratelimits::show))
            .route("/ratelimits", web::post().to(ratelimits::set))
            .route("/ratelimits/delete", web::post().to(ratelimits::delete))
            .route("/ratelimits/algorithm", web::post().to(ratelimits::algorithm))
            .route("/assets/app.css", web::get().to(stylesheet))
            .route("/assets/app.js", web::get().to(script))
            .route("/assets/favicon.svg", web::get().to(favicon))
            .default_service(web::to(not_found)),
    );
}

async fn stylesheet() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .body(keygate_web::APP_CSS)
}

async fn script() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .body(keygate_web::APP_JS)
}

async fn favicon() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("image/svg+xml")
        .insert_header((header::CACHE_CONTROL, "public, max-age=86400"))
        .body(keygate_web::FAVICON_SVG)
}

async fn not_found(req: actix_web::HttpRequest) -> Result<HttpResponse, DashError> {
    let base = req
        .app_data::<web::Data<crate::state::AppState>>()
        .map(|s| session::settings(s).base)
        .unwrap_or_else(|| DashboardSettings::default().base);
    Err(DashError::NotFound { base })
}
