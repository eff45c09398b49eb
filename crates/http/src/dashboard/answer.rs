//! How a dashboard page answers: a rendered page, a redirect, a refusal as a readable page
//! ([`DashError`]), and the one way a page calls the services ([`call`]; a signed-in page
//! through [`Signed::run`](super::session::Signed::run)).

use super::settings::DashboardSettings;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, ContentType};
use actix_web::{HttpResponse, ResponseError, web};
use keygate_web::{ErrorPage, Layout, Template};

/// A rendered page.
pub(super) fn html(status: StatusCode, page: &impl Template) -> HttpResponse {
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
pub(super) fn unavailable_page(base: &str) -> HttpResponse {
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
pub(super) async fn call<T, F>(layout: &Layout, f: F) -> Result<T, DashError>
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

/// 303 to `location`.
pub(super) fn see_other(location: String) -> HttpResponse {
    HttpResponse::SeeOther().insert_header((header::LOCATION, location)).finish()
}

impl From<keygate_rbac::RbacError> for DashError {
    fn from(e: keygate_rbac::RbacError) -> Self {
        DashError::Unavailable(e.to_string())
    }
}

/// Runs blocking work (the services) off the async workers.
pub(super) async fn blocking<T, F>(f: F) -> Result<T, DashError>
where
    F: FnOnce() -> Result<T, DashError> + Send + 'static,
    T: Send + 'static,
{
    web::block(f).await.map_err(|e| DashError::Unavailable(e.to_string()))?
}
