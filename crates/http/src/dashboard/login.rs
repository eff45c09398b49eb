//! Login and logout: a root key, given once, becomes a session (its token in an
//! `HttpOnly; SameSite=Strict` cookie); attempts are limited per client address.

use super::answer::{DashError, blocking, html};
use super::csrf::{LOGIN_COOKIE, login_token_ok, matches};
use super::session::{SESSION_COOKIE, Signed, cookie, set_cookie, settings};
use super::settings::DashboardSettings;
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use keygate_domain::{ErrorCode, random_base58_token};
use keygate_ratelimit::{BudgetKey, LimitRequest};
use keygate_web::{ErrorPage, Layout, LoginPage};
use serde::Deserialize;
use std::sync::Arc;

/// Login attempts per client address: this many per minute.
const LOGINS_PER_MINUTE: u64 = 10;

#[derive(Debug, Deserialize)]
pub(super) struct LoginForm {
    root_key: Option<String>,
    csrf_token: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct TokenForm {
    csrf_token: Option<String>,
}

/// The login form, with a fresh login token (its cookie set beside it).
fn login_page(
    req: &HttpRequest,
    settings: &DashboardSettings,
    status: StatusCode,
    error: Option<&str>,
) -> HttpResponse {
    let token = random_base58_token(None, 24);
    let page = LoginPage {
        layout: Layout::signed_out(&settings.base),
        csrf_token: token.clone(),
        error: error.map(str::to_string),
    };
    let mut res = html(status, &page);
    if let Ok(v) = set_cookie(req, settings, LOGIN_COOKIE, &token, None).parse() {
        res.headers_mut().append(header::SET_COOKIE, v);
    }
    res
}

fn see_other(location: String) -> actix_web::HttpResponseBuilder {
    let mut b = HttpResponse::SeeOther();
    b.insert_header((header::LOCATION, location));
    b
}

/// `GET /dashboard/login`: the form (or, signed in already, the overview).
pub(super) async fn form(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, DashError> {
    let settings = settings(&state);
    if let Some(token) = cookie(&req, SESSION_COOKIE).map(str::to_string) {
        let st = state.clone();
        if blocking(move || Ok(st.sessions.session(&token)?)).await?.is_some() {
            return Ok(see_other(settings.base.clone()).finish());
        }
    }
    Ok(login_page(&req, &settings, StatusCode::OK, None))
}

/// `POST /dashboard/login`: `root_key` and the form's `csrf_token`.
pub(super) async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    form: web::Form<LoginForm>,
) -> Result<HttpResponse, DashError> {
    let settings = settings(&state);
    let LoginForm { root_key, csrf_token } = form.into_inner();
    if !login_token_ok(&req, csrf_token.as_deref().unwrap_or("")) {
        return Err(DashError::BadToken { layout: Layout::signed_out(&settings.base) });
    }
    // Attempts per client address (the peer: a forwarded header could name anyone).
    let peer = req.peer_addr().map(|a| a.ip().to_string()).unwrap_or_default();
    if let Some(d) = &state.dashboard {
        let ns = Arc::new("dashboard.login".to_string());
        let key = BudgetKey {
            namespace_id: &ns,
            identifier: &peer,
            duration: 60_000,
            algorithm: Default::default(),
        };
        let ask = LimitRequest { limit: LOGINS_PER_MINUTE, duration: 60_000, cost: 1 };
        if !d.logins.check(key, ask, state.clock.now_ms()).success {
            let page = ErrorPage {
                layout: Layout::signed_out(&settings.base),
                title: "Too many attempts".into(),
                message: "Too many login attempts from this address: wait a minute and try again.".into(),
            };
            let mut res = html(StatusCode::TOO_MANY_REQUESTS, &page);
            res.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("60"));
            return Ok(res);
        }
    }
    let root_key = root_key.unwrap_or_default();
    let st = state.clone();
    let created = web::block(move || st.sessions.create_session(root_key.trim()))
        .await
        .map_err(|e| DashError::Unavailable(e.to_string()))?;
    match created {
        Ok((token, _)) => {
            let mut res = see_other(settings.base.clone()).finish();
            for c in [
                set_cookie(&req, &settings, SESSION_COOKIE, &token, None),
                set_cookie(&req, &settings, LOGIN_COOKIE, "", Some(0)),
            ] {
                if let Ok(v) = c.parse() {
                    res.headers_mut().append(header::SET_COOKIE, v);
                }
            }
            Ok(res)
        }
        Err(e) => match e.code() {
            ErrorCode::Unauthorized | ErrorCode::Forbidden | ErrorCode::BadRequest => {
                let message = match e.code() {
                    ErrorCode::Forbidden => "That root key has expired.",
                    _ => "That root key is not valid.",
                };
                Ok(login_page(&req, &settings, StatusCode::UNAUTHORIZED, Some(message)))
            }
            _ => Err(e.into()),
        },
    }
}

/// `POST /dashboard/logout`: ends the session (with the session's form token).
pub(super) async fn logout(
    req: HttpRequest,
    signed: Signed,
    form: web::Form<TokenForm>,
) -> Result<HttpResponse, DashError> {
    let Signed { session, layout, state } = signed;
    if !matches(form.csrf_token.as_deref().unwrap_or(""), &session.csrf_token) {
        return Err(DashError::BadToken { layout });
    }
    let token = cookie(&req, SESSION_COOKIE).unwrap_or_default().to_string();
    let st = state.clone();
    blocking(move || Ok(st.sessions.end_session(&token)?)).await?;
    let settings = settings(&state);
    let mut res = see_other(format!("{}/login", settings.base)).finish();
    if let Ok(v) = set_cookie(&req, &settings, SESSION_COOKIE, "", Some(0)).parse() {
        res.headers_mut().append(header::SET_COOKIE, v);
    }
    Ok(res)
}
