//! Authentication: the bearer root key, from the cache inline or the store off-thread.

use crate::error::{ApiError, problems};
use crate::state::AppState;
use actix_web::http::header;
use actix_web::{HttpRequest, web};
use keygate_rbac::Principal;
use std::sync::Arc;

/// The bearer token of the `Authorization` header, or 401.
fn bearer(req: &HttpRequest) -> Result<&str, ApiError> {
    let value = req.headers().get(header::AUTHORIZATION).ok_or_else(|| {
        ApiError::unauthorized("the Authorization header is missing; send Authorization: Bearer <root key>")
            .with_problem(problems::AUTH_MISSING)
    })?;
    // Bytes first (every request passes here): the scheme and the spaces are ASCII, and
    // only the token needs to be text, ASCII like every root key.
    let value = value.as_bytes().trim_ascii();
    let (scheme, token) = match value.iter().position(|&b| b == b' ') {
        Some(at) => (&value[..at], value[at + 1..].trim_ascii()),
        None => (value, &[][..]),
    };
    if !scheme.eq_ignore_ascii_case(b"bearer") || token.is_empty() {
        return Err(ApiError::unauthorized("the Authorization header must be Bearer <root key>")
            .with_problem(problems::AUTH_MALFORMED));
    }
    match std::str::from_utf8(token) {
        Ok(token) if token.is_ascii() => Ok(token),
        _ => Err(ApiError::unauthorized("the Authorization header is not valid text")
            .with_problem(problems::AUTH_MALFORMED)),
    }
}

/// Authenticates the root key: from the cache inline (renewing it in the background once
/// it is past half its lifetime), else from the store off-thread, one load per key.
pub async fn authenticate(
    req: &HttpRequest,
    state: &web::Data<AppState>,
) -> Result<Arc<Principal>, ApiError> {
    let principal = authenticate_token(req, state).await?;
    // The access log names who called (only when it is on: this costs an allocation).
    if log::log_enabled!(target: super::request_id::ACCESS_TARGET, log::Level::Info) {
        use actix_web::HttpMessage;
        req.extensions_mut().insert(super::request_id::Caller {
            workspace_id: principal.workspace_id.clone(),
            root_key_id: principal.root_key_id.clone(),
        });
    }
    // The request's trace span (when tracing is on) names the caller's workspace.
    let span = keygate_domain::trace::current_span();
    if !span.is_disabled() {
        span.record("keygate.workspace_id", principal.workspace_id.as_str());
    }
    Ok(principal)
}

async fn authenticate_token(
    req: &HttpRequest,
    state: &web::Data<AppState>,
) -> Result<Arc<Principal>, ApiError> {
    authenticate_secret(bearer(req)?, state).await
}

/// Authenticates a root key given as text (the bearer token, or a gateway's
/// `X-Keygate-Root-Key`): from the cache inline (renewed in the background once past half
/// its lifetime), else from the store off-thread, one load per key.
pub async fn authenticate_secret(
    token: &str,
    state: &web::Data<AppState>,
) -> Result<Arc<Principal>, ApiError> {
    Ok(state.runtime.authenticate(state.get_ref(), token).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::HeaderValue;

    #[test]
    fn bearer_token_is_read_from_the_authorization_header() {
        use actix_web::test::TestRequest;
        let token = |value: &[u8]| {
            let v = HeaderValue::from_bytes(value).expect("a header value");
            let req = TestRequest::default().insert_header((header::AUTHORIZATION, v)).to_http_request();
            bearer(&req).map(str::to_string).map_err(|e| e.to_string())
        };
        for (value, expected) in [
            (&b"Bearer kg_root_abc"[..], "kg_root_abc"),
            (b"bearer kg_root_abc", "kg_root_abc"),
            (b"BEARER  kg_root_abc ", "kg_root_abc"),
            (b" Bearer kg_root_abc", "kg_root_abc"),
        ] {
            assert_eq!(token(value).as_deref(), Ok(expected), "{value:?}");
        }
        for bad in [&b"Bearer"[..], b"Bearer ", b"Bearer\tkg", b"Basic abc", b"Token x", b"Bearerx y", b""] {
            assert!(token(bad).unwrap_err().contains("must be Bearer"), "{bad:?}");
        }
        for not_text in [&b"Bearer kg_\x80\xff"[..], "Bearer kg_é".as_bytes()] {
            assert!(token(not_text).unwrap_err().contains("not valid text"), "{not_text:?}");
        }
        let none = TestRequest::default().to_http_request();
        assert!(bearer(&none).map_err(|e| e.to_string()).unwrap_err().contains("missing"));
    }
}
