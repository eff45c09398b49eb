//! The dashboard (docs/dashboard.md): server-rendered pages under `/dashboard`, from the
//! templates of `keygate-web`, acting through the same services as the API with a login
//! session's root key. One room per concern: [`session`] (the cookie and the signed-in
//! extractor), [`csrf`] (form tokens), [`login`], [`overview`].

mod apis;
mod audit;
mod csrf;
mod forms;
mod identities;
mod keys;
mod login;
mod overview;
mod permissions;
mod ratelimits;
mod session;

use actix_web::dev::ServiceResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, ContentType};
use actix_web::middleware::{DefaultHeaders, ErrorHandlerResponse, ErrorHandlers};
use actix_web::{HttpResponse, ResponseError, web};
use keygate_web::{ErrorPage, Layout, Template};

/// The dashboard's state in the server: its settings, and the login attempts counted per
/// client address.
#[derive(Debug)]
pub struct Dashboard {
    pub settings: DashboardSettings,
    logins: keygate_ratelimit::MemoryStore,
}

impl Dashboard {
    pub fn new(settings: DashboardSettings) -> Self {
        Self { settings, logins: keygate_ratelimit::MemoryStore::new() }
    }
}

/// The dashboard's settings (`KEYGATE_DASHBOARD*`).
#[derive(Debug, Clone)]
pub struct DashboardSettings {
    /// The path browsers see the dashboard at: `/dashboard`, or a proxy's prefix before it
    /// (links, form actions and the cookies' `Path` use it).
    pub base: String,
    /// `Secure` on every cookie, even when the request does not look like HTTPS.
    pub secure_cookies: bool,
}

impl Default for DashboardSettings {
    fn default() -> Self {
        Self { base: "/dashboard".into(), secure_cookies: false }
    }
}

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
pub fn configure(cfg: &mut web::ServiceConfig) {
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

/// A rendered page.
fn html(status: StatusCode, page: &impl Template) -> HttpResponse {
    match page.render() {
        Ok(body) => HttpResponse::build(status).content_type(ContentType::html()).body(body),
        Err(e) => {
            log::error!("dashboard: a page did not render: {e}");
            HttpResponse::InternalServerError().content_type(ContentType::plaintext()).body("error")
        }
    }
}

/// What a dashboard request can fail with, each a readable page (or the way to one).
#[derive(Debug)]
pub(crate) enum DashError {
    /// Not signed in (or the session ended): to the login page.
    SignIn { base: String },
    /// The root key lacks a permission; the message says which.
    Forbidden { layout: Layout, message: String },
    /// A form without its valid token: nothing was done.
    BadToken { layout: Layout },
    /// A form the service refused (the message says why): nothing was done.
    Invalid { layout: Layout, message: String },
    /// No such page or thing (`base`: where the page's link leads).
    NotFound { base: String },
    /// The store failed: nothing was done.
    Unavailable(String),
}

impl std::fmt::Display for DashError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DashError::SignIn { .. } => f.write_str("not signed in"),
            DashError::Forbidden { message, .. } => write!(f, "forbidden: {message}"),
            DashError::BadToken { .. } => f.write_str("a form without its token"),
            DashError::Invalid { message, .. } => write!(f, "invalid: {message}"),
            DashError::NotFound { .. } => f.write_str("not found"),
            DashError::Unavailable(e) => write!(f, "unavailable: {e}"),
        }
    }
}

impl ResponseError for DashError {
    fn status_code(&self) -> StatusCode {
        match self {
            DashError::SignIn { .. } => StatusCode::SEE_OTHER,
            DashError::Forbidden { .. } | DashError::BadToken { .. } => StatusCode::FORBIDDEN,
            DashError::Invalid { .. } => StatusCode::BAD_REQUEST,
            DashError::NotFound { .. } => StatusCode::NOT_FOUND,
            DashError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let page = |layout: Layout, title: &str, message: &str| {
            html(self.status_code(), &ErrorPage { layout, title: title.into(), message: message.into() })
        };
        let base = DashboardSettings::default().base;
        match self {
            DashError::SignIn { base } => {
                HttpResponse::SeeOther().insert_header((header::LOCATION, format!("{base}/login"))).finish()
            }
            DashError::Forbidden { layout, message } => page(layout.clone(), "Not allowed", message),
            DashError::Invalid { layout, message } => page(layout.clone(), "Check the form", message),
            DashError::BadToken { layout } => page(
                layout.clone(),
                "Form expired",
                "This form was sent without its token (or from another page). Nothing was changed: go back, reload and try again.",
            ),
            DashError::NotFound { base } => {
                page(Layout::signed_out(base), "Not found", "There is no dashboard page at this address.")
            }
            // Rendered again under the configured base by `configure`'s error handler.
            DashError::Unavailable(_) => unavailable_page(&base),
        }
    }
}

/// The 503 page: the store could not be reached.
fn unavailable_page(base: &str) -> HttpResponse {
    html(
        StatusCode::SERVICE_UNAVAILABLE,
        &ErrorPage {
            layout: Layout::signed_out(base),
            title: "Unavailable".into(),
            message: "The store could not be reached. Nothing was changed; try again shortly.".into(),
        },
    )
}

impl DashError {
    /// A service's refusal as a page: 403 naming the permission, 404, 400 saying what is
    /// wrong with the form; a store failure as 503.
    pub(crate) fn from_service(layout: &Layout, e: keygate_rbac::RbacError) -> Self {
        use keygate_domain::ErrorCode;
        match e.code() {
            ErrorCode::InsufficientPermissions | ErrorCode::Forbidden => {
                DashError::Forbidden { layout: layout.clone(), message: e.to_string() }
            }
            ErrorCode::NotFound => DashError::NotFound { base: layout.base.clone() },
            ErrorCode::BadRequest | ErrorCode::Conflict => {
                DashError::Invalid { layout: layout.clone(), message: e.to_string() }
            }
            _ => DashError::Unavailable(e.to_string()),
        }
    }
}

/// Runs a service call off the async workers; its refusal becomes a page (see
/// [`DashError::from_service`]).
async fn call<T, F>(layout: &Layout, f: F) -> Result<T, DashError>
where
    F: FnOnce() -> Result<T, keygate_rbac::RbacError> + Send + 'static,
    T: Send + 'static,
{
    match web::block(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(DashError::from_service(layout, e)),
        Err(e) => Err(DashError::Unavailable(e.to_string())),
    }
}

impl session::Signed {
    /// Runs a service call as the session's root key, off the async workers (see
    /// [`call`]): the one way an action of a signed-in page calls the services.
    pub(crate) async fn run<T, F>(&self, f: F) -> Result<T, DashError>
    where
        F: FnOnce(&keygate_runtime::Runtime, &keygate_rbac::Principal) -> Result<T, keygate_rbac::RbacError>
            + Send
            + 'static,
        T: Send + 'static,
    {
        let (state, principal) = (self.state.clone(), self.session.principal.clone());
        call(&self.layout, move || f(&state.runtime, &principal)).await
    }
}

/// 303 to `location`.
fn see_other(location: String) -> HttpResponse {
    HttpResponse::SeeOther().insert_header((header::LOCATION, location)).finish()
}

impl From<keygate_rbac::RbacError> for DashError {
    fn from(e: keygate_rbac::RbacError) -> Self {
        DashError::Unavailable(e.to_string())
    }
}

/// Runs blocking work (the services) off the async workers.
async fn blocking<T, F>(f: F) -> Result<T, DashError>
where
    F: FnOnce() -> Result<T, DashError> + Send + 'static,
    T: Send + 'static,
{
    web::block(f).await.map_err(|e| DashError::Unavailable(e.to_string()))?
}
