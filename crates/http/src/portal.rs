//! The customer portal's pages under `/portal/<slug>` (docs/portal.md), for a team's end
//! users: the session's code redeemed on the server into the HttpOnly `portal_session`
//! cookie and taken out of the address, then the user's keys with their charts, rolling a
//! key (a POST with the session's form token; the new key shown once), and a link back to
//! the team's app. Server-rendered from `keygate-web`'s templates, with the dashboard's
//! headers; the CSP admits the portal's logo origin for images only.

use crate::plumbing::{PORTAL_COOKIE, blocking, cookie};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, ContentType};
use actix_web::{HttpRequest, HttpResponse, web};
use keygate_domain::hash_secret;
use keygate_portal::{Portal, PortalContext, PortalScope, TOKEN_TTL_MS, VerificationPoint, validate_url};
use keygate_rbac::{RbacError, VerifyCode, key_summary};
use keygate_web::{
    BarChart, Bucket, PortalFrame, PortalKey, PortalKeyPage, PortalKeysPage, PortalMessagePage, Template,
};
use serde::Deserialize;

/// What every portal answer carries besides its CSP (as the dashboard's).
const HEADERS: [(&str, &str); 4] = [
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "same-origin"),
    ("X-Frame-Options", "DENY"),
    ("Cache-Control", "no-store"),
];
const CSP: &str =
    "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'";
const HOUR: i64 = 3_600_000;

/// Registers the portal's pages, under `/portal`.
pub fn configure(cfg: &mut web::ServiceConfig, middleware: crate::plumbing::RequestId) {
    let mut headers = actix_web::middleware::DefaultHeaders::new().add(("Content-Security-Policy", CSP));
    for h in HEADERS {
        headers = headers.add(h);
    }
    // A form that does not parse is a form without its token: nothing is done.
    let forms = web::FormConfig::default().limit(4 * 1024).error_handler(|e, _| {
        log::debug!("portal: a form did not parse: {e}");
        actix_web::error::InternalError::from_response(e, message(StatusCode::FORBIDDEN, None, FORM_EXPIRED))
            .into()
    });
    cfg.service(
        web::scope("/portal")
            .app_data(forms)
            .wrap(headers)
            .wrap(middleware)
            .route(
                "/assets/app.css",
                web::get().to(|| asset("text/css; charset=utf-8", keygate_web::APP_CSS)),
            )
            .route(
                "/assets/app.js",
                web::get().to(|| asset("text/javascript; charset=utf-8", keygate_web::APP_JS)),
            )
            .route("/assets/favicon.svg", web::get().to(|| asset("image/svg+xml", keygate_web::FAVICON_SVG)))
            .route("/{slug}", web::get().to(show))
            .route("/{slug}/theme.css", web::get().to(theme))
            .route("/{slug}/keys/{key_id}/reroll", web::post().to(reroll))
            .default_service(web::to(|| async { message(StatusCode::NOT_FOUND, None, NO_PORTAL) })),
    );
}

async fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .body(body)
}

type Text = (&'static str, &'static str);
const NO_PORTAL: Text = ("Not found", "There is no portal at this address.");
const EXPIRED: Text = (
    "This link has expired",
    "Links to this page work once and for 15 minutes. Open it again from the app that sent you here.",
);
const ENDED: Text = (
    "Your session has ended",
    "Sessions last a day and end when revoked. Open this page again from the app that sent you here.",
);
const FORM_EXPIRED: Text = (
    "Form expired",
    "This form was sent without its token (or from another page). Nothing was changed: go back, reload and try again.",
);

fn frame(portal: Option<&Portal>, ctx: Option<&PortalContext>) -> PortalFrame {
    match portal {
        Some(p) => PortalFrame {
            slug: p.slug.clone(),
            display_name: p.display_name.clone(),
            logo_url: p.logo_url.clone(),
            themed: p.primary_color.is_some(),
            return_url: ctx.and_then(|c| c.session.return_url.clone()),
        },
        None => PortalFrame {
            slug: String::new(),
            display_name: "keygate".into(),
            logo_url: None,
            themed: false,
            return_url: None,
        },
    }
}

/// A rendered page; the CSP names the logo's origin for images when there is one.
fn page(status: StatusCode, frame: &PortalFrame, body: &impl Template) -> HttpResponse {
    let mut res = HttpResponse::build(status);
    res.content_type(ContentType::html());
    if let Some(origin) = frame.logo_url.as_deref().and_then(|u| validate_url("logoUrl", u, &["https"]).ok())
    {
        res.insert_header(("Content-Security-Policy", format!("{CSP}; img-src 'self' {origin}")));
    }
    match body.render() {
        Ok(html) => res.body(html),
        Err(e) => {
            log::error!("portal: a page did not render: {e}");
            HttpResponse::InternalServerError().content_type(ContentType::plaintext()).body("error")
        }
    }
}

fn message(status: StatusCode, portal: Option<&Portal>, (title, text): Text) -> HttpResponse {
    let frame = frame(portal, None);
    page(
        status,
        &frame,
        &PortalMessagePage { frame: frame.clone(), title: title.into(), message: text.into() },
    )
}

fn unavailable(e: impl std::fmt::Display) -> HttpResponse {
    log::warn!("portal: {e}");
    message(
        StatusCode::SERVICE_UNAVAILABLE,
        None,
        ("Try again shortly", "The service did not answer. Nothing was changed."),
    )
}

/// The portal of a path's slug (404 page when there is none).
async fn portal_of(state: &web::Data<AppState>, slug: &str) -> Result<Portal, HttpResponse> {
    let (state, slug) = (state.clone(), slug.to_string());
    match blocking(state.metrics.queued(), move || {
        state.runtime.portal.portal_by_slug(&slug).map_err(crate::error::ApiError::from)
    })
    .await
    {
        Ok(Some(p)) => Ok(p),
        Ok(None) => Err(message(StatusCode::NOT_FOUND, None, NO_PORTAL)),
        Err(e) => Err(unavailable(e)),
    }
}

/// The session of the request's cookie, when it is one of `portal`'s.
async fn session_of(
    req: &HttpRequest,
    state: &web::Data<AppState>,
    portal: &Portal,
) -> Result<(String, PortalContext), HttpResponse> {
    let ended = || message(StatusCode::UNAUTHORIZED, Some(portal), ENDED);
    let token = cookie(req, PORTAL_COOKIE).ok_or_else(ended)?.to_string();
    let (state, t) = (state.clone(), token.clone());
    match blocking(state.metrics.queued(), move || {
        state.runtime.portal.session(&t).map_err(crate::error::ApiError::from)
    })
    .await
    {
        Ok(Some(ctx)) if ctx.portal.id == portal.id => Ok((token, ctx)),
        Ok(_) => Err(ended()),
        Err(e) => Err(unavailable(e)),
    }
}

/// The session's form token: derived from its access token (which only the cookie holds).
fn form_token(token: &str) -> String {
    hash_secret(&format!("portal-form:{token}"))[..32].to_string()
}

/// `GET /portal/<slug>[?code=…]`.
async fn show(req: HttpRequest, slug: web::Path<String>, state: web::Data<AppState>) -> HttpResponse {
    let portal = match portal_of(&state, &slug).await {
        Ok(p) => p,
        Err(res) => return res,
    };
    if let Some(code) = query_code(req.query_string()) {
        return redeem(&req, &state, &portal, code).await;
    }
    let (token, ctx) = match session_of(&req, &state, &portal).await {
        Ok(s) => s,
        Err(res) => return res,
    };
    let st = state.clone();
    let ctx2 = ctx.clone();
    let now = state.clock.now_ms() as i64;
    let end = now - now.rem_euclid(HOUR) + HOUR;
    let load = move || {
        let keys = match ctx2.session.has(PortalScope::KeysRead) {
            true => {
                let mut page = st.runtime.portal.list_keys(&ctx2, None, 100, key_summary)?;
                st.runtime.analytics.fill_last_used(&mut page.items)?;
                page.items
            }
            false => Vec::new(),
        };
        let usage = match ctx2.session.has(PortalScope::AnalyticsRead) {
            // The last 24 hours, the current one included.
            true => Some(st.runtime.portal.verifications(&ctx2, end - 24 * HOUR, end, None)?),
            false => None,
        };
        Ok::<_, RbacError>((keys, usage))
    };
    let loaded = blocking(state.metrics.queued(), move || load().map_err(crate::error::ApiError::from)).await;
    let (keys, usage) = match loaded {
        Ok(x) => x,
        Err(e) => return unavailable(e),
    };
    let chart = |points: &[VerificationPoint], label: String| {
        let buckets: Vec<Bucket> = points
            .iter()
            .map(|p| {
                let valid =
                    p.counts[VerifyCode::ALL.iter().position(|c| *c == VerifyCode::Valid).unwrap_or(0)];
                Bucket {
                    label: crate::dashboard::when(p.time)[11..16].to_string(),
                    valid,
                    other: p.total() - valid,
                    spent: p.spent_credits,
                }
            })
            .collect();
        BarChart::new("hour", &buckets).labelled(label)
    };
    let frame = frame(Some(&portal), Some(&ctx));
    let keys = keys
        .into_iter()
        .map(|s| {
            let k = s.key;
            let series = usage.as_ref().and_then(|u| u.keys.iter().find(|x| x.key_id == k.id));
            let title = k.name.clone().unwrap_or_else(|| format!("Key {}…", k.start));
            PortalKey {
                chart: Some(chart(
                    series.map_or(&[][..], |x| &x.points[..]),
                    format!("Verifications of {title} per hour, last 24 hours"),
                ))
                .filter(|_| usage.is_some()),
                title,
                start: k.start,
                created: crate::dashboard::when(k.created_at),
                last_used: s.last_used.map_or_else(|| "never".to_string(), crate::dashboard::when),
                credits: k.credits.map_or_else(|| "unlimited".to_string(), |c| c.remaining.to_string()),
                expires: k.expires.map_or_else(|| "never".to_string(), crate::dashboard::when),
                enabled: k.enabled,
                id: k.id,
            }
        })
        .collect();
    let body = PortalKeysPage {
        frame: frame.clone(),
        csrf: form_token(&token),
        preview: ctx.session.preview,
        can_read: ctx.session.has(PortalScope::KeysRead),
        can_reroll: ctx.session.has(PortalScope::KeysReroll) && !ctx.session.preview,
        total: usage
            .as_ref()
            .map(|u| chart(&u.total, "All your verifications per hour, last 24 hours".into())),
        keys,
    };
    page(StatusCode::OK, &frame, &body)
}

/// The `code` of a query (`code=` then the characters a code has; anything else is no code
/// this server gave, and reads as an expired link).
fn query_code(query: &str) -> Option<&str> {
    query.split('&').find_map(|pair| pair.strip_prefix("code="))
}

/// Redeems a link's code: the cookie set, and the same page without the code.
async fn redeem(req: &HttpRequest, state: &web::Data<AppState>, portal: &Portal, code: &str) -> HttpResponse {
    let (st, c) = (state.clone(), code.to_string());
    let exchanged = blocking(st.metrics.queued(), move || {
        st.runtime.portal.exchange_code(&c).map_err(crate::error::ApiError::from)
    })
    .await;
    let token = match exchanged {
        Ok((token, ctx)) if ctx.portal.id == portal.id => token,
        Ok(_) => return message(StatusCode::UNAUTHORIZED, Some(portal), EXPIRED),
        Err(e) if e.code == keygate_domain::ErrorCode::Unauthorized => {
            return message(StatusCode::UNAUTHORIZED, Some(portal), EXPIRED);
        }
        Err(e) => return unavailable(e),
    };
    let secure = req.connection_info().scheme() == "https"
        || state.dashboard.as_ref().is_some_and(|d| d.settings.secure_cookies);
    let mut cookie =
        format!("{PORTAL_COOKIE}={token}; HttpOnly; SameSite=Lax; Path=/; Max-Age={}", TOKEN_TTL_MS / 1000);
    if secure {
        cookie.push_str("; Secure");
    }
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, format!("/portal/{}", portal.slug)))
        .insert_header((header::SET_COOKIE, cookie))
        .finish()
}

/// A colour as a stylesheet (`#rrggbb`, checked when set).
async fn theme(slug: web::Path<String>, state: web::Data<AppState>) -> HttpResponse {
    let portal = match portal_of(&state, &slug).await {
        Ok(p) => p,
        Err(res) => return res,
    };
    let css = portal.primary_color.map(|c| format!(":root {{ --accent: {c}; }}\n")).unwrap_or_default();
    HttpResponse::Ok().content_type("text/css; charset=utf-8").body(css)
}

#[derive(Debug, Deserialize)]
pub(crate) struct RerollForm {
    csrf_token: Option<String>,
    expiration: Option<String>,
}

/// `POST /portal/<slug>/keys/<keyId>/reroll`: the new key shown once.
async fn reroll(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    form: web::Form<RerollForm>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let (slug, key_id) = path.into_inner();
    let portal = match portal_of(&state, &slug).await {
        Ok(p) => p,
        Err(res) => return res,
    };
    let (token, ctx) = match session_of(&req, &state, &portal).await {
        Ok(s) => s,
        Err(res) => return res,
    };
    let expected = form_token(&token);
    let given = form.csrf_token.as_deref().unwrap_or("");
    let same = given.len() == expected.len()
        && given.bytes().zip(expected.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    if !same {
        return message(StatusCode::FORBIDDEN, Some(&portal), FORM_EXPIRED);
    }
    let Some(expiration) = form
        .expiration
        .as_deref()
        .and_then(|e| ["0", "3600000", "86400000"].contains(&e).then(|| e.parse::<u64>().ok()).flatten())
    else {
        return message(
            StatusCode::BAD_REQUEST,
            Some(&portal),
            ("Check the form", "Choose when the current key stops working."),
        );
    };
    let (st, c, id) = (state.clone(), ctx.clone(), key_id.clone());
    let run = move || {
        let old =
            st.runtime.portal.list_keys(&c, None, 100, |_, k| Ok(k))?.items.into_iter().find(|k| k.id == id);
        let (_, secret) = st.runtime.portal.reroll_key(&c, &id, Some(expiration))?;
        Ok::<_, RbacError>((old, secret))
    };
    let done = blocking(state.metrics.queued(), move || Ok(run()))
        .await
        .unwrap_or_else(|e| Err(RbacError::Storage(keygate_rbac::StorageError::Unavailable(e.to_string()))));
    let frame = frame(Some(&portal), Some(&ctx));
    match done {
        Ok((old, secret)) => {
            let now = state.clock.now_ms() as i64;
            let old_expiry = match expiration {
                0 => "stops working now".to_string(),
                ms => format!("stops working at {} UTC", crate::dashboard::when(now + ms as i64)),
            };
            let body = PortalKeyPage {
                frame: frame.clone(),
                secret: secret.expose().to_string(),
                old_start: old.map(|k| k.start).unwrap_or_default(),
                old_expiry,
            };
            page(StatusCode::OK, &frame, &body)
        }
        Err(e) => {
            let (status, text): (StatusCode, Text) = match e.code() {
                keygate_domain::ErrorCode::NotFound => {
                    (StatusCode::NOT_FOUND, ("Not found", "There is no such key of yours here."))
                }
                keygate_domain::ErrorCode::Forbidden | keygate_domain::ErrorCode::InsufficientPermissions => {
                    (StatusCode::FORBIDDEN, ("Not allowed", "This session cannot roll keys."))
                }
                keygate_domain::ErrorCode::BadRequest => {
                    (StatusCode::BAD_REQUEST, ("Check the form", "That key cannot be rolled."))
                }
                _ => return unavailable(e),
            };
            page(
                status,
                &frame,
                &PortalMessagePage { frame: frame.clone(), title: text.0.into(), message: text.1.into() },
            )
        }
    }
}
