//! The session cookie and the signed-in extractor: [`Signed`] is a request whose cookie
//! names a live session (else the request goes to the login page).

use super::answer::{DashError, blocking};
use super::settings::DashboardSettings;
use crate::state::AppState;
use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use keygate_operators::DashboardSession;
use keygate_web::Layout;
use std::future::Future;
use std::pin::Pin;

/// The session cookie's name.
pub(super) const SESSION_COOKIE: &str = "kg_session";

pub(super) use crate::plumbing::cookie;

/// A `Set-Cookie` value: `HttpOnly; SameSite=Strict; Path=<base>`, `Secure` when the
/// request came over HTTPS (as the proxy says) or the settings ask; `max_age` 0 deletes.
pub(super) fn set_cookie(
    req: &HttpRequest,
    settings: &DashboardSettings,
    name: &str,
    value: &str,
    max_age: Option<u64>,
) -> String {
    let mut c = format!("{name}={value}; HttpOnly; SameSite=Strict; Path={}", settings.base);
    if let Some(age) = max_age {
        c.push_str(&format!("; Max-Age={age}"));
    }
    if settings.secure_cookies || req.connection_info().scheme() == "https" {
        c.push_str("; Secure");
    }
    c
}

/// The dashboard's settings, from the server's state.
pub(super) fn settings(state: &AppState) -> DashboardSettings {
    state.dashboard.as_ref().map(|d| d.settings.clone()).unwrap_or_default()
}

/// A signed-in request: its session, and the page frame for it.
#[derive(Debug)]
pub(crate) struct Signed {
    pub session: DashboardSession,
    pub layout: Layout,
    pub state: web::Data<AppState>,
}

impl FromRequest for Signed {
    type Error = DashError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, DashError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let state = req.app_data::<web::Data<AppState>>().cloned();
        let token = cookie(req, SESSION_COOKIE).map(str::to_string);
        Box::pin(async move {
            let state =
                state.ok_or_else(|| DashError::NotFound { base: DashboardSettings::default().base })?;
            let base = settings(&state).base;
            let Some(token) = token else { return Err(DashError::SignIn { base }) };
            let st = state.clone();
            let session = blocking(move || Ok(st.sessions.session(&token)?)).await?;
            let Some(session) = session else { return Err(DashError::SignIn { base }) };
            let layout = Layout {
                base,
                csrf_token: Some(session.csrf_token.clone()),
                workspace: session.principal.workspace_id.clone(),
            };
            Ok(Signed { session, layout, state })
        })
    }
}

impl Signed {
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
        super::answer::call(&self.layout, move || f(&state.runtime, &principal)).await
    }
}
